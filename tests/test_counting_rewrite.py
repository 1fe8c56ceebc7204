"""The counting variant's rewrite of writes to program memory, over every atom/red form of the PTX ISA.

The forms are the ISA's own tables (PTX ISA 8.7, "atom" and "red"): scalar
operations with their types, the `.noftz` half-precision adds, and the vector
forms of `sm_90` (`.v2/.v4` of `.f32`, `.v2/.v4/.v8` of `.f16/.bf16`,
`.v2/.v4` of `.f16x2/.bf16x2`), with and without memory ordering, scope, cache
hint and state space. Each atomic must become loads ptxas accepts, into the
same destination registers from the same bytes; each reduction must go.
"""

from __future__ import annotations

import pytest

from neutrino.isa.ptx import ir, parse_module, print_module
from neutrino.passes.lower_save import atomic_as_load, drop_global_writes

from helpers import HAVE_PTXAS, ptxas

SCALAR_TYPES = {
    "and": ("b32", "b64"),
    "or": ("b32", "b64"),
    "xor": ("b32", "b64"),
    "cas": ("b16", "b32", "b64", "b128"),
    "exch": ("b32", "b64", "b128"),
    "add": ("u32", "s32", "u64", "f32", "f64"),
    "inc": ("u32",),
    "dec": ("u32",),
    "min": ("u32", "s32", "u64", "s64"),
    "max": ("u32", "s32", "u64", "s64"),
}
HALF_ADD_TYPES = ("f16", "f16x2", "bf16", "bf16x2")  # add.noftz only
VECTOR_FORMS = (
    [("add", "", v, "f32") for v in ("v2", "v4")]
    + [(op, ".noftz", v, t) for op in ("add", "min", "max") for v in ("v2", "v4", "v8") for t in ("f16", "bf16")]
    + [(op, ".noftz", v, t) for op in ("add", "min", "max") for v in ("v2", "v4") for t in ("f16x2", "bf16x2")]
)
# (qualifiers before the operation, state space) variants every scalar form is written in;
# `red` orders only as .relaxed or .release.
SCALAR_VARIANTS = (("", ".global"), (".relaxed.gpu", ".global"), (".acq_rel.sys", ""))
RED_ORDER = {".acq_rel.sys": ".release.sys"}
REG_OF_WIDTH = {2: "%h", 4: "%r", 8: "%rd", 16: "%q"}


def _value(width: int, index: int) -> str:
    return f"{REG_OF_WIDTH[width]}{index}"


def _vector(width: int, count: int, first: int) -> str:
    return "{" + ", ".join(_value(width, first + i) for i in range(count)) + "}"


def forms() -> list[tuple[str, str]]:
    """(atom instruction, red instruction or '') for every type/shape combination."""
    out = []
    for op, types in SCALAR_TYPES.items():
        for t in types:
            w = ir.TYPE_BYTES[t]
            for qualifiers, space in SCALAR_VARIANTS:
                srcs = f"{_value(w, 2)}, {_value(w, 3)}" if op == "cas" else _value(w, 2)
                atom = f"atom{qualifiers}{space}.{op}.{t} {_value(w, 1)}, [%rd1], {srcs};"
                red = "" if op in ("cas", "exch") else f"red{RED_ORDER.get(qualifiers, qualifiers)}{space}.{op}.{t} [%rd1], {_value(w, 2)};"
                out.append((atom, red))
    for t in HALF_ADD_TYPES:
        w = ir.TYPE_BYTES[t]
        for qualifiers, space in SCALAR_VARIANTS:
            out.append((f"atom{qualifiers}{space}.add.noftz.{t} {_value(w, 1)}, [%rd1], {_value(w, 2)};",
                        f"red{RED_ORDER.get(qualifiers, qualifiers)}{space}.add.noftz.{t} [%rd1], {_value(w, 2)};"))
    for op, noftz, v, t in VECTOR_FORMS:
        w, n = ir.TYPE_BYTES[t], int(v[1:])
        out.append((f"atom.global.{op}{noftz}.{v}.{t} {_vector(w, n, 1)}, [%rd1+16], {_vector(w, n, 9)};",
                    f"red.global.{op}{noftz}.{v}.{t} [%rd1+16], {_vector(w, n, 9)};"))
    # What compilers also write: the vector shape before the type and the operation (Triton), cache hints.
    out.append(("atom.global.v2.f32.add {%r1, %r2}, [%rd1], {%r3, %r4};", "red.global.v2.f32.add [%rd1], {%r3, %r4};"))
    out.append(("atom.global.add.L2::cache_hint.u32 %r1, [%rd1], %r2, %rd5;", "red.global.add.L2::cache_hint.u32 [%rd1], %r2, %rd5;"))
    out.append(("atom.global.add.noftz.bf16x2 %r1, [%rd1], %r2;", ""))
    out.append(("atom.global.exch.b32 _, [%rd1], %r2;", ""))
    return out


FORMS = forms()


def kernel(lines: list[str]) -> str:
    body = "\n\t".join(lines)
    return f""".version 8.7
.target sm_90
.address_size 64
.visible .entry k(.param .u64 p)
{{
	.reg .b16 %h<20>;
	.reg .b32 %r<20>;
	.reg .b64 %rd<20>;
	.reg .b128 %q<4>;
	ld.param.u64 %rd1, [p];
	{body}
	ret;
}}
"""


def test_the_table_is_the_isa():
    """Every combination is legal PTX: ptxas assembles the unrewritten kernel."""
    if not HAVE_PTXAS:
        pytest.skip("ptxas not on PATH")
    ptxas(kernel([line for pair in FORMS for line in pair if line]))


@pytest.mark.parametrize("atom, red", FORMS, ids=[a.split(" ")[0] + ("_sink" if " _," in a else "") for a, _ in FORMS])
def test_atomic_becomes_loads_of_the_same_bytes(atom, red):
    (insn,) = parse_module(kernel([atom])).function("k").body[-2:-1]
    loads = atomic_as_load(insn)
    if isinstance(insn.operands[0], ir.Sink):
        assert loads == []
        return
    dst = insn.operands[0]
    wanted = list(dst.items) if isinstance(dst, ir.Vector) else [dst]
    got, offset = [], insn.operands[1].offset_value
    element = ir.TYPE_BYTES[insn.opcode.types[-1]]
    for load in loads:
        assert load.opcode.base == "ld" and len(load.operands) == 2, load
        assert load.opcode.space == insn.opcode.space
        assert load.guard == insn.guard
        value, address = load.operands
        items = list(value.items) if isinstance(value, ir.Vector) else [value]
        assert load.opcode.vector == len(items)
        assert ir.TYPE_BYTES[load.opcode.types[-1]] == element  # same bytes per element
        assert address.base == insn.operands[1].base and address.offset_value == offset
        offset += len(items) * element
        got += items
    assert got == wanted  # the same registers, in order


def test_rewritten_kernel_assembles_and_keeps_no_write():
    module = parse_module(kernel([line for pair in FORMS for line in pair if line]))
    function = module.function("k")
    drop_global_writes(function)
    text = print_module(module)
    opcodes = [i.opcode.base for i in ir.instructions(function.body)]
    assert "atom" not in opcodes and "red" not in opcodes
    assert opcodes.count("ld") == 1 + sum(2 if ".v8." in a else 1 for a, _ in FORMS if " _," not in a)
    if HAVE_PTXAS:
        ptxas(text)


def test_shared_atomics_are_kept():
    lines = ["atom.shared.add.u32 %r1, [%r2], 1;", "red.shared.add.u32 [%r2], 1;", "atom.shared::cluster.cas.b32 %r1, [%r2], 1, 2;"]
    module = parse_module(kernel(lines))
    function = module.function("k")
    drop_global_writes(function)
    assert [str(i.opcode) for i in ir.instructions(function.body)][1:4] == ["atom.shared.add.u32", "red.shared.add.u32", "atom.shared::cluster.cas.b32"]


def test_mbarrier_with_a_generic_address_is_kept():
    """An mbarrier object lives in shared memory, whatever the address form: its arrivals must stay."""
    lines = ["mbarrier.init.b64 [%rd2], 1;", "mbarrier.arrive.b64 %rd3, [%rd2];", "st.global.u32 [%rd1], %r1;"]
    module = parse_module(kernel(lines))
    function = module.function("k")
    drop_global_writes(function)
    assert [i.opcode.base for i in ir.instructions(function.body)] == ["ld", "mbarrier", "mbarrier", "ret"]


def test_generic_writes_into_shared_or_local_memory_are_kept():
    """Generic addresses made by cvta.shared/cvta.local (and offsets from them) are the launch's own memory:
    a cuda::barrier's arrival and a -G build's stack frame stay; a pointer that may be anything goes."""
    lines = [
        ".shared .align 8 .b8 bar[8];",
        ".local .align 8 .b8 frame[16];",
        "mov.u64 %rd2, bar;",
        "cvta.shared.u64 %rd3, %rd2;",
        "add.s64 %rd4, %rd3, 4;",
        "atom.add.acquire.cta.u32 %r1, [%rd4], 1;",  # kept: a shared word
        "mov.u64 %rd5, frame;",
        "cvta.local.u64 %rd6, %rd5;",
        "st.u32 [%rd6+8], %r1;",  # kept: the stack frame
        "mov.u64 %rd7, %rd3;",
        "@%p1 mov.u64 %rd7, %rd1;",  # sometimes the kernel's pointer: may be global
        "st.u32 [%rd7], %r1;",
        "st.u32 [%rd1], %r1;",  # the program's pointer
    ]
    module = parse_module(kernel(["\t.reg .pred %p<2>;"] + lines).replace("\t.reg .b16", ".reg .b16", 1))
    function = module.function("k")
    drop_global_writes(function)
    kept = [f"{i.opcode} {', '.join(map(str, i.operands))}" for i in ir.instructions(function.body) if i.opcode.base in ("atom", "st", "ld")]
    assert kept == ["ld.param.u64 %rd1, [p]", "atom.add.acquire.cta.u32 %r1, [%rd4], 1", "st.u32 [%rd6+8], %r1"]
    if HAVE_PTXAS:
        ptxas(print_module(module))


def test_multicast_and_tensor_map_writes_are_dropped():
    """multimem.st/red write every GPU's copy of multicast memory, tensormap.replace/cp_fenceproxy a tensor
    map in global memory: the semantics table calls them writes, so the counting variant drops them."""
    lines = [
        "multimem.st.relaxed.sys.global.f32 [%rd1], %f1;",
        "multimem.red.relaxed.sys.global.add.f32 [%rd1], %f1;",
        "multimem.ld_reduce.relaxed.sys.global.add.f32 %f2, [%rd1];",
        "tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2;",
        "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [%r1], 128;",
    ]
    module = parse_module(kernel(["\t.reg .f32 %f<4>;"] + lines).replace(".target sm_90", ".target sm_90a"))
    function = module.function("k")
    drop_global_writes(function)
    assert [str(i.opcode) for i in ir.instructions(function.body)] == [
        "ld.param.u64", "multimem.ld_reduce.relaxed.sys.global.add.f32", "ret"]
    if HAVE_PTXAS:
        ptxas(print_module(module))
