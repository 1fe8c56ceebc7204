"""The neutral operations (passes/neutral_ops.py) and their GCN/RDNA translation (isa/gcn/translate.py), checked with
LLVM 19's assembler: register files, VOP3 operand limits, waits for scalar loads, exec narrowing, templates."""

from __future__ import annotations

import pytest

from neutrino.isa.gcn import ir
from neutrino.isa.gcn.dialect import GFX9
from neutrino.isa.gcn.printer import print_statement
from neutrino.isa.gcn.registers import GcnKernelState, Registers
from neutrino.isa.gcn.translate import INLINE, _Writer, GcnTranslation
from neutrino.isa.rdna.dialect import GFX11
from neutrino.llvm_mc import assemble, find_llvm_mc
from neutrino.passes.neutral_ops import ACTIVE, OPERATIONS, NeutralSteps, Op, Pred, Val, geometry

needs_mc = pytest.mark.skipif(find_llvm_mc() is None, reason="llvm-mc-19 not installed (apt-get install llvm-19)")
DIALECTS = pytest.mark.parametrize("dialect, gfx", [(GFX9, "gfx90a"), (GFX11, "gfx1100")], ids=["gcn", "rdna"])


def state(dialect=GFX9, first_sgpr=20, first_vgpr=8) -> GcnKernelState:
    return GcnKernelState(None, descriptor=None, label=None, dialect=dialect,
                          registers=Registers("k", first_sgpr, first_vgpr, dialect.sgpr_limit))


U, U2, L, L2 = Val("u"), Val("u2", 2), Val("l", lane=True), Val("l2", 2, lane=True)
SGPR_PAIR, VGPR = ir.RegRange("s", 4, 2, True), ir.RegRange("v", 1)
#: every operation in its one-per-wave and per-lane forms, with SGPRs, literals and the kernel's registers as sources
PROGRAM = [
    Op("param", U2, "m"), Op("mov", U, 7), Op("mov", L, U), Op("mov", U, L), Op("mov", L2, SGPR_PAIR),
    Op("add", U, U, 1000), Op("add", L, U, 1000), Op("add", U2, U2, U), Op("add", L2, SGPR_PAIR, VGPR), Op("add", L2, L2, -16),
    Op("mul", U, U, 0x960), Op("mul", L, L, 0x960), Op("mul", U2, U, 0x960), Op("mul", L2, L, U),
    Op("shl", U, U, 2), Op("shr", L, L, 6), Op("and", U, U, 0xFFFF), Op("and", L, L, 0x3FF),
    Op("bfe", U, U, 10, 10), Op("bfe", L, VGPR, 20, 10),
    Op("cmp", Pred("p"), "lt", U, 100), Op("cmp", Pred("q"), "eq", L, 0), Op("pand", Pred("p"), Pred("p"), Pred("q")),
    Op("first", Pred("f"), ACTIVE), Op("lanes", Pred("f")), Op("lanes", Pred("p")), Op("count", U), Op("count", L),
    Op("store", L2, 8, L), Op("store", U2, 0, U), Op("atomic_add", U2, 16, L2), Op("end"), Op("end"),
    # what the DSL's backends add (language/backend_gcn.py): 64-bit lanes, subtraction, bitwise, selects, lane-mask logic
    Op("sub", U, U, 3), Op("sub", L, L, 1000), Op("sub", U2, U2, U), Op("sub", L2, L2, 0x12345),
    Op("mul", L2, L2, L2), Op("mul", L2, L2, 3), Op("shl", L2, L2, 3), Op("shr", L2, L, L), Op("shl", U2, U2, 1),
    Op("or", U, U, 5), Op("xor", L2, L2, 0xFFFF), Op("not", L2, L2), Op("not", U, U), Op("and", L2, L2, L),
    Op("select", L2, Pred("p"), L2, 7), Op("cmp", Pred("q"), "ge", L2, 0x1000), Op("cmp", Pred("q"), "ne", L, L2),
    Op("cmp", Pred("q"), "lt", U2, U),
    Op("por", Pred("p"), Pred("p"), Pred("q")), Op("pandn", Pred("p"), ACTIVE, Pred("q")),
]


def test_every_operation_is_translated():
    assert sorted(n[3:] for n in vars(_Writer) if n.startswith("op_")) == sorted(OPERATIONS)
    assert {op.name for op in PROGRAM} == set(OPERATIONS)


@needs_mc
@DIALECTS
def test_every_operation_assembles(dialect, gfx):
    code = GcnTranslation(state(dialect), "test", {"m": 0x20}).translate(PROGRAM)
    ok, err = assemble("\n".join(print_statement(i) for i in code) + "\n", gfx)
    assert ok, err


def scalars(insn: ir.Instruction) -> int:
    """SGPRs and literals a VALU instruction reads (its first operands are what it writes)."""
    carries = ("v_add_co", "v_addc", "v_add_co_ci", "v_sub_co", "v_subb", "v_sub_co_ci")  # a lane mask written second
    sources = insn.operands[2:] if insn.mnemonic.startswith(carries) else insn.operands[1:]
    return sum(1 for o in sources if (type(o) is ir.RegRange and o.file == "s") or
               (type(o) is ir.Imm and o.value not in INLINE))


def test_vop3_reads_one_sgpr_and_no_literal_on_gfx9():
    code = GcnTranslation(state(), "test", {"m": 0x20}).translate(PROGRAM)
    vop3 = [i for i in code if i.mnemonic.startswith("v_") and not i.mnemonic.startswith(("v_mov_b32", "v_readfirstlane"))]
    assert vop3 and all(scalars(i) <= 1 for i in vop3), [print_statement(i) for i in vop3 if scalars(i) > 1]
    literals = [i for i in vop3 if any(type(o) is ir.Imm and o.value not in INLINE for o in i.operands)]
    assert literals == []


def lines(code) -> list[str]:
    return [print_statement(i).strip() for i in code]


def test_register_files_waits_and_sign_extension():
    code = lines(GcnTranslation(state(), "test", {"m": 0x20}).translate(
        [Op("param", U2, "m"), Op("mov", L, 5), Op("add", L2, L2, -16), Op("add", U, U2.word(0), 1)]))
    assert code == [
        "s_load_dwordx2 s[20:21], s[22:23], 32",  # a parameter: from the kernarg pointer (role `kernarg`), one-per-wave
        "v_mov_b32_e32 v8, 5",  # a per-lane value in a VGPR; not waited for: the loaded value is not read yet
        "v_add_co_u32_e64 v10, s[24:25], v10, -16",  # a 64-bit add: a carry chain, the high word adds the sign
        "v_addc_co_u32_e64 v11, s[26:27], v11, -1, s[24:25]",
        "s_waitcnt lgkmcnt(0)", "s_add_u32 s28, s20, 1"]
    unused = GcnTranslation(state(), "test", {"m": 0x20})
    unused.translate([Op("param", U2, "m")])
    assert unused.pending  # buffer addressing waits at the end of entry code


def test_narrowing_restores_exec_per_depth():
    code = lines(GcnTranslation(state(GFX11), "test").translate(
        [Op("lanes", Pred("a")), Op("lanes", Pred("b")), Op("end"), Op("end")]))
    saved0, saved1 = code[0].split()[1].rstrip(","), code[1].split()[1].rstrip(",")
    assert code[0].startswith("s_and_saveexec_b32") and code[2:] == [f"s_mov_b32 exec_lo, {saved1}", f"s_mov_b32 exec_lo, {saved0}"]


def test_one_template_per_shape_own_registers_per_kernel():
    ops = NeutralSteps(64).unit_slot(type("M", (), {"name": "m", "level": "warp", "cap": 4, "record_bytes": 8})(),
                                     (Val("unit_warp"), Val("units_warp")))
    a, b = state(first_sgpr=10), state(first_sgpr=40)
    first, second = GcnTranslation(a, "t").translate(ops), GcnTranslation(b, "t").translate(ops)
    assert [i.mnemonic for i in first] == [i.mnemonic for i in second]
    assert lines(first) != lines(second)
    assert list(a.registers.taken) == list(b.registers.taken)  # the same roles, taken in the same order
    assert a.registers.taken["cursor_m"].first - 10 == b.registers.taken["cursor_m"].first - 40


def test_a_64_bit_compare_keeps_both_operands():
    """Each operand a 64-bit compare moves into a VGPR pair of ours gets its own (an SGPR pair and a 32-bit VGPR here)."""
    code = lines(GcnTranslation(state(), "test").translate([Op("cmp", Pred("p"), "lt", U2, L)]))
    first, second = code[-1].split(", ")[1:]
    assert code[-1].startswith("v_cmp_lt_u64_e64") and first != second
    assert sum(line.startswith("v_mov_b32") for line in code) == 4


def test_geometry_is_the_ptx_formula():
    """The block index is (ctaid.z * nctaid.y + ctaid.y) * nctaid.x + ctaid.x, evaluated on the operations."""
    special = {name: Val(name) for name in ("ctaid.x", "ctaid.y", "ctaid.z", "nctaid.x", "nctaid.y", "nctaid.z",
                                            "tid.x", "tid.y", "tid.z", "ntid.x", "ntid.y", "ntid.z")}
    values = {"ctaid.x": 3, "ctaid.y": 2, "ctaid.z": 1, "nctaid.x": 5, "nctaid.y": 4, "nctaid.z": 2,
              "tid.x": 7, "tid.y": 1, "tid.z": 0, "ntid.x": 32, "ntid.y": 2, "ntid.z": 1}
    env = {Val(k): v for k, v in values.items()}
    apply = {"mul": lambda a, b: a * b, "add": lambda a, b: a + b, "shr": lambda a, b: a >> b}
    for op in geometry(special, 64):
        env[op.dst] = apply[op.name](env.get(op.a, op.a), env.get(op.b, op.b))
    assert env[Val("wg")] == (1 * 4 + 2) * 5 + 3 and env[Val("blocks")] == 40 and env[Val("tpw")] == 64
    assert env[Val("flat_tid", lane=True)] == (0 * 2 + 1) * 32 + 7 and env[Val("waves_per_wg")] == 1
