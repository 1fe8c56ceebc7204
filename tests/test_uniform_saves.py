"""SAVEs of values known at instrumentation time (neutrino/passes/save_constants.py): the hist bucket is
folded and the lanes that save are counted without grouping them by value (no `match.any.sync`);
a thread-level sum of constants adds (lanes) x constant (spec/probe-toml.md, "Aggregation maps").

Checked on the text (the bucket offsets against the line map and Buckets.index, the gate, the
staging rewrite) and with ptxas; the counts on a GPU: tests/gpu/test_gpu_lines.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from neutrino.engine import instrument
from neutrino.isa.ptx import parse_module
from neutrino.isa.ptx.lines import build_line_map
from neutrino.maps import Buckets
from neutrino.passes import lower_save, save_constants
from neutrino.passes.save_constants import constant_bucket
from neutrino.probefile import MapSpec, parse_probes
from neutrino.toolbox import load_probes

from helpers import HAVE_PTXAS, ptxas
from test_aggregation import KERNEL, with_target
from test_probe_gate import gated_writes

LOOP = Path(__file__).parent / "data" / "lines" / "loop.ptx"
NESTED = LOOP.with_name("nested.ptx")  # nested loops, a guarded exit: register counters (tests/test_register_counters.py)
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "ptx"
if not CORPUS.exists():
    CORPUS = Path("/work/shared/corpus/ptx")
WITH_LOC = sorted(p for p in CORPUS.glob("*/*.ptx") if ".loc" in p.read_text())
SPECS = ["log2", "linear:0:254:1", "linear:4:64:8", "linear:0:100:10", "linear:5:1000:7", "linear:7:20:64",
         f"linear:{2**40}:{2**40 + 4000}:1", f"linear:3:{2**64 - 1}:{2**53}"]
TOP = 2**64 - 1

# A thread-level hist and sum of constants, guarded by the instruction's predicate (`@%p1 ld`, `@!%p1 st`)
# and not, and a warp-level hist of one: BYTES is 8 at the ld.v2.u32 and 4 at the st.u32.
CONSTANT_PROBES = '''
[map.sizes]
type = "hist"
buckets = "linear:4:64:8"

[map.wsizes]
type = "hist"
level = "warp"
buckets = "log2"

[map.count]
type = "sum"
fields = ["n:u64", "bytes:u64", "zero:u64", "big:u64"]

[probe.size]
position = "ld.global:st.global"
before = """.reg .b64 %one; mov.u64 %one, 1;
SAVE [ sizes ] {BYTES}; SAVE [ count ] {%one, BYTES, 0, 0x100000000};"""

[probe.wsize]
position = "ld.global:st.global"
level = "warp"
before = """SAVE [ wsizes ] {BYTES};"""

[probe.unguarded]
position = "kernel"
before = """.reg .b64 %k; cvt.u64.u32 %k, 70;
SAVE [ sizes ] {%k};"""
'''


# ---------------------------------------------------------------- the folded bucket


def boundary_values(buckets: Buckets) -> list[int]:
    """Values under, at the edges of, inside and over the range (and u64's ends)."""
    if buckets.kind == "log2":
        return [0, 1, 2, 3, TOP, 2**63, 2**63 - 1] + [2**k + d for k in range(64) for d in (-1, 0, 1) if 0 <= 2**k + d <= TOP]
    lo, hi, step = buckets.min, buckets.max, buckets.step
    edges = [lo - 1, lo, lo + 1, lo + step - 1, lo + step, hi - 1, hi, hi + 1, (lo + hi) // 2, 0, 1, TOP, TOP - 1]
    edges += [lo + k * step + d for k in range(0, min(buckets.linear_count, 50)) for d in (-1, 0, 1)]
    return sorted({v for v in edges if 0 <= v <= TOP})


@pytest.mark.parametrize("spec", SPECS)
def test_folded_bucket_is_buckets_index_under_inside_and_over(spec):
    buckets = Buckets.parse(spec)
    values = boundary_values(buckets)
    if buckets.kind == "linear":  # every region is exercised
        regions = {0 if v < buckets.min else 2 if v >= buckets.max else 1 for v in values}
        assert regions == ({1, 2} if buckets.min == 0 else {0, 1, 2})
    for value in values:
        assert constant_bucket(buckets, value) == buckets.index(value), (spec, value)


@given(st.sampled_from(SPECS), st.integers(min_value=0, max_value=TOP))
def test_folded_bucket_is_buckets_index_anywhere(spec, value):
    buckets = Buckets.parse(spec)
    assert constant_bucket(buckets, value) == buckets.index(value)


# ---------------------------------------------------------------- the lines tools


def site_offsets(ptx: str, map_name: str) -> list[int]:
    """The byte offsets of a hist map's adds into its counters, in text order: one per site.

    Staged (shared_agg.py): the `red.shared.add.u32 [%nt_hoff_MAP+OFF]` of each site; otherwise
    the `red.global.add.u64 [%nt_hoff_MAP+OFF]`."""
    adds = re.findall(rf"red\.(?:shared\.add\.u32|global\.add\.u64)\s+\[%nt_hoff_{map_name}(?:\+(\d+))?\]", ptx)
    return [int(off or 0) for off in adds]


def block_count_offsets(ptx: str, map_name: str = "lines_blocks") -> list[int]:
    """The byte offsets the count_block sites add to, sorted, entry after entry (one per site).

    A folded site adds at `[%nt_hoff_MAP+OFF]` (site_offsets). Sites counted in registers
    (passes/register_counters.py) share a counter per class of equal counts: the class's first
    site is `add.u32 %nt_rcK, %nt_rcK, 1`, the others leave no code, and the entry's exits flush
    `%nt_rcK` (from sm_80 `and.b32 %nt_agg_a, %nt_rcK` or, at a guarded exit, `selp.b32 %nt_rc_leaving`
    of it; before, `cvt.u64.u32 %nt_rc_value, %nt_rcK`; then adds into `[%nt_buf_MAP+OFF]`) into
    each site's bucket: every exit must flush every counter into the same buckets, once each
    (twice before sm_80: the full-warp add and the lane-by-lane one)."""
    site = re.compile(rf"red\.(?:shared\.add\.u32|global\.add\.u64)\s+\[%nt_hoff_{map_name}(?:\+(\d+))?\]"
                      rf"|add\.u32 \t(%nt_rc\d+), \2, 1;"
                      rf"|(?:cvt\.u64\.u32 \t%nt_rc_value, |and\.b32 \t%nt_agg_a, |selp\.b32 \t%nt_rc_leaving, (?:0, )?)(%nt_rc\d+)\b"
                      rf"|(?:atom\.shared\.add\.u32 \t%nt_stg_old, |red\.global\.add\.u64 \t)\[%nt_buf_{map_name}(?:\+(\d+))?\]")
    out: list[int] = []
    for entry in re.split(r"\.entry ", ptx)[1:]:
        folded: list[int] = []
        counters: list[str] = []
        flushed: dict[str, list[int]] = {}
        flushing = None
        for m in site.finditer(entry):
            if m.group(2):
                counters.append(m.group(2))
            elif m.group(3):
                flushing = m.group(3)
            elif f"%nt_buf_{map_name}" in m.group(0):
                flushed.setdefault(flushing, []).append(int(m.group(4) or 0))
            else:
                folded.append(int(m.group(1) or 0))
        exits = len(re.findall(r"(?m)^\s*(?:@!?%\w+\s+)?(?:ret|exit)\s*;", entry))
        assert None not in flushed and sorted(counters) == sorted(flushed), "each counter: one site, flushed at the exits"
        for counter, offsets in flushed.items():
            once = sorted(set(offsets))
            assert len(offsets) in (exits * len(once), 2 * exits * len(once)), (counter, offsets, exits)
            assert all(offsets.count(o) == offsets.count(once[0]) for o in once), (counter, offsets)
            folded += once
        out += sorted(folded)
    return out


def misplaced_block_counts(ptx: str, source: str) -> list[tuple[int, int, int]]:
    """(block, offset, expected offset) of every count_block site whose add is not at its block's bucket.

    Independent of the lowering: the sites come in block order (one per basic block of the
    line map), and block k's counter is bucket Buckets.index(k) of lines_blocks."""
    module = parse_module(source)
    buckets = load_probes("lines_light").maps["lines_blocks"].buckets
    expected = [8 * buckets.index(k) for f in module.entries() for k in range(len(build_line_map(module, f).blocks))]
    got = block_count_offsets(ptx)
    assert len(got) == len(expected), "one add per basic block"
    return [(k, g, e) for k, (g, e) in enumerate(zip(got, expected)) if g != e]


@pytest.mark.parametrize("path", [LOOP, NESTED] + WITH_LOC, ids=lambda p: p.name)
def test_lines_light_adds_each_block_at_its_bucket_without_match(path):
    text = path.read_text()
    result = instrument(text, load_probes("lines_light"), source=str(path))
    assert misplaced_block_counts(result.ptx, text) == []
    assert "match.any" not in result.ptx and "hist_bucket" not in result.ptx
    assert gated_writes(result.ptx) == []
    # lines_light's map is not staged (global rows): no shared staging code
    assert "%nt_stg_" not in result.ptx and "red.shared" not in result.ptx


def test_a_wrong_bucket_constant_is_caught(monkeypatch):
    """Mutation: a lowering that folds the bucket one too far is reported by the check above."""
    text = LOOP.read_text()
    lower_save._lowered_group.cache_clear()  # templates are cached by shape: build them with the mutant
    try:
        with monkeypatch.context() as patch:
            wrong = lambda buckets, value: buckets.index(value) + 1  # noqa: E731
            patch.setattr(lower_save, "constant_bucket", wrong)
            patch.setattr(save_constants, "constant_bucket", wrong)  # the register counters' buckets
            mutated = instrument(text, load_probes("lines_light"), source=str(LOOP)).ptx
    finally:
        lower_save._lowered_group.cache_clear()
    assert misplaced_block_counts(mutated, text) == [(0, 16, 8), (1, 24, 16), (2, 32, 24)]
    correct = instrument(text, load_probes("lines_light"), source=str(LOOP)).ptx
    assert misplaced_block_counts(correct, text) == []


def test_lines_keeps_the_grouping_only_for_its_time_samples():
    """lines: lines_time's values differ per lane (match.any stays); lines_blocks' do not."""
    text = LOOP.read_text()
    result = instrument(text, load_probes("lines"), source=str(LOOP))
    assert misplaced_block_counts(result.ptx, text) == []
    matched = result.kernels["loopk"]["matched"]
    assert result.ptx.count("match.any.sync") == matched["close_region"] + result.ptx.count("\tret;")  # + end_ticks at the exit
    assert gated_writes(result.ptx) == []


TARGETS = ["sm_52", "sm_61", "sm_70", "sm_75", "sm_80", "sm_90"]


@pytest.mark.skipif(not HAVE_PTXAS or not WITH_LOC, reason="needs ptxas and the corpus")
@pytest.mark.parametrize("tool", ["lines_light", "lines"])
@pytest.mark.parametrize("target", TARGETS)
def test_lines_tools_assemble_for_every_target(tool, target):
    """Each target's lowering (no warp operations below sm_30 is not reachable from these; per-lane below
    sm_70 for lines_time, no staging below sm_70, shfl sums before sm_80) on every corpus kernel with .loc,
    assembled for the kernel's own target (ptxas 13 knows none below sm_75; the inserted code is the same)."""
    probes = load_probes(tool)
    for path in WITH_LOC:
        text = path.read_text()
        own = parse_module(text).target
        result = instrument(text.replace(f".target {own}", f".target {target}", 1), probes, source=str(path))
        assert misplaced_block_counts(result.ptx, text) == []
        assert gated_writes(result.ptx) == []
        ptxas(re.sub(r"^\.target \S+", f".target {own}", result.ptx, count=1, flags=re.M), own)


# ---------------------------------------------------------------- constants in general


@pytest.mark.parametrize("target", ["sm_52", "sm_75", "sm_80", "sm_90"])
def test_constant_hist_and_sum_count_the_saving_lanes(target):
    ptx = instrument(with_target(KERNEL, target), parse_probes(CONSTANT_PROBES, "p.toml"), source="k.ptx").ptx
    assert "match.any" not in ptx and "redux" not in ptx and "shfl" not in ptx and "hist_bucket" not in ptx
    sizes = Buckets.parse("linear:4:64:8")
    # the kernel entry (70), the ld (8 bytes), the st (4 bytes): each at its bucket
    assert site_offsets(ptx, "sizes") == [8 * sizes.index(70), 8 * sizes.index(8), 8 * sizes.index(4)] == [72, 8, 8]
    # guarded sites: the ballot of the instruction's predicate, in the lanes present
    assert "vote.sync.ballot.b32 \t%nt_agg_mask, %p1, %nt_agg_mask;" in ptx
    assert "vote.sync.ballot.b32 \t%nt_agg_mask, !%p1, %nt_agg_mask;" in ptx
    # sum: n += lanes, bytes += lanes x BYTES, nothing for the 0 field, a 64-bit constant multiplies
    adds = re.findall(r"@%nt_agg_first red\.global\.add\.u64 \t\[%nt_buf_count(?:\+(\d+))?\], (%\w+);", ptx)
    assert [(int(o or 0), r) for o, r in adds] == [(0, "%nt_agg_count"), (8, "%nt_agg_total"), (24, "%nt_agg_total")] * 2
    assert "mul.lo.u64 \t%nt_agg_total, %nt_agg_count, 8;" in ptx and "mul.lo.u64 \t%nt_agg_total, %nt_agg_count, 4;" in ptx
    assert "mul.lo.u64 \t%nt_agg_total, %nt_agg_count, 0x100000000;" in ptx
    # the warp-level hist: its leader adds 1 at the folded bucket (log2 of 8 and 4)
    assert site_offsets(ptx, "wsizes") == [8 * 4, 8 * 3]
    assert "@%nt_hist_go red.global.add.u64 \t[%nt_hoff_wsizes+32], %nt_hist_amount;" in ptx
    assert gated_writes(ptx) == []
    if HAVE_PTXAS:
        ptxas(ptx if target >= "sm_75" else with_target(ptx, "sm_75"), max(target, "sm_75"))


def test_staged_constant_sum_and_hist_are_rewritten_into_shared_memory():
    probes = parse_probes(CONSTANT_PROBES.replace('type = "sum"', 'type = "sum"\nstage = "block"').replace(
        'buckets = "linear:4:64:8"', 'buckets = "linear:4:64:8"\nstage = "block"'), "p.toml")
    ptx = instrument(KERNEL, probes, source="k.ptx").ptx
    assert site_offsets(ptx, "sizes") == [72, 8, 8] and "red.shared.add.u32 \t[%nt_hoff_sizes+72]" in ptx
    assert not re.search(r"red\.global\.add\.u64\s+\[%nt_(hoff_sizes|buf_count)", ptx)  # all staged
    assert ptx.count("@%nt_agg_first atom.shared.add.u32") == 6  # 3 non-zero sum fields x 2 sites, low words
    assert gated_writes(ptx) == []
    if HAVE_PTXAS:
        ptxas(ptx)


@pytest.mark.parametrize("snippet", [
    "setp.eq.u32 %q, BYTES, 8; mov.u64 %v, 3; @%q mov.u64 %v, 5;",  # a redefinition under another guard
    "setp.eq.u32 %q, BYTES, 8; @%q mov.u64 %v, 3;",  # set under another guard than the SAVE's
    "mov.u64 %v, 3; add.u64 %v, %v, 1;",  # computed
    "mov.u64 %v, %clock64;",  # run-time
    "mov.u64 %v, 3; setp.eq.u32 %q, BYTES, 8; selp.b64 %v, 1, 2, %q;",  # overwritten by a selection
])
def test_values_not_known_keep_the_grouping(snippet):
    probe = f'''
[map.h]
type = "hist"
buckets = "log2"
[probe.p]
position = "ld.global"
before = """.reg .b64 %v; .reg .pred %q; {snippet} SAVE [ h ] {{%v}};"""
'''
    ptx = instrument(KERNEL, parse_probes(probe, "p.toml"), source="k.ptx").ptx
    assert "match.any.sync" in ptx and "clz.b64" in ptx


def test_a_value_set_by_another_site_is_not_taken_as_known():
    """A register the kernel-entry probe sets is not a constant at an instruction site's SAVE."""
    probe = '''
[map.h]
type = "hist"
buckets = "log2"
[probe.set]
position = "kernel"
before = """.reg .b64 %v; mov.u64 %v, 3;"""
[probe.p]
position = "ld.global"
before = """.reg .b64 %v; SAVE [ h ] {%v};"""
'''
    ptx = instrument(KERNEL, parse_probes(probe, "p.toml"), source="k.ptx").ptx
    assert "match.any.sync" in ptx


# ---------------------------------------------------------------- the lowered code, run on one warp


def lowered_save(spec, value, guard, sm: int) -> list:
    """The code SAVE lowering writes for one `SAVE [spec] {value}` (value: an int, or the register %v)."""
    from neutrino.isa.ptx import ir
    from neutrino.passes.state import KernelState

    state = KernelState(ir.Function("k", ""), prefix="%nt_", temps={"%v": "b64"})
    lowerer = lower_save._Lowerer(state, None, sm)
    operand = ir.Register("%v") if value is None else ir.Immediate(str(value))
    items = (operand,) * len(spec.fields)
    save = ir.Instruction(ir.opcode("SAVE"), (ir.Address(ir.Symbol(spec.name)), ir.Vector(items)), guard, 0, "probe p#0")
    return lowerer.build_group("p", None, {spec.name: spec}, [save])[0]


def run_warp(code, active: list[int], registers: dict[str, list[int]]) -> dict[int, int]:
    """Runs straight-line lowered code on the `active` lanes of one warp; returns {byte offset: amount added}.

    The subset of PTX the hist/sum lowerings use, one lane at a time per instruction (the warp
    operations read every active lane); map buffers start at 0."""
    from neutrino.isa.ptx import ir

    lanes = {lane: {name: values[lane] for name, values in registers.items()} for lane in active}
    for regs in lanes.values():
        regs.setdefault("%nt_on", 1)
    added: dict[int, int] = {}

    def value(operand, lane):
        if isinstance(operand, ir.Immediate):
            return operand.value & (2**64 - 1)
        if isinstance(operand, ir.Negated):
            return 1 - value(operand.operand, lane)
        if isinstance(operand, ir.SpecialRegister):
            assert operand.name == "%lanemask_lt"
            return (1 << lane) - 1
        if isinstance(operand, ir.Vector):  # {lo, hi} read as a u64
            return value(operand.items[0], lane) | value(operand.items[1], lane) << 32
        return lanes[lane].get(operand.name, 0)  # map buffers (buf_MAP) are at 0

    for insn in code:
        op, ops = insn.opcode.text, insn.operands
        doing = [lane for lane in active if insn.guard is None or value(insn.guard.register, lane) != insn.guard.negated]
        bits = result_bits(op)
        results = {}
        for lane in doing:
            src = [value(o, lane) for o in ops[1:]]
            base = op.split(".")[0]
            if op == "mov.b64" and isinstance(ops[0], ir.Vector):  # {lo, hi} = a u64
                results[lane] = {ops[0].items[0].name: src[0] & 0xFFFFFFFF, ops[0].items[1].name: src[0] >> 32}
                continue
            if op.startswith("redux.sync.add"):
                r = sum(value(ops[1], k) for k in doing if src[1] >> k & 1)
            elif op.startswith("shfl.sync.bfly"):  # a lane not present reads as 0 (the code must not use it)
                other = lane ^ src[1]
                r = value(ops[1], other) if other in doing and src[3] >> other & 1 else 0
            elif op == "activemask.b32":
                r = sum(1 << k for k in doing)
            elif op.startswith("vote.sync.ballot"):
                r = sum(1 << k for k in doing if value(ops[1], k)) & src[1]
            elif op.startswith("match.any.sync"):
                r = sum(1 << k for k in doing if value(ops[1], k) == src[0] and src[1] >> k & 1)
            elif op == "red.global.add.u64":
                address = ops[0]
                offset = value(address.base, lane) + (address.offset_value if address.offset is not None else 0)
                added[offset] = (added.get(offset, 0) + value(ops[1], lane)) % 2**64
                continue
            elif base == "setp":
                compare = {"eq": int.__eq__, "ne": int.__ne__, "lt": int.__lt__, "ge": int.__ge__}[op.split(".")[1]]
                r = int(compare(src[0], src[1])) & (src[2] if ".and." in op else 1)
            elif base == "selp":
                r = src[0] if src[2] else src[1]
            else:
                r = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "and": lambda a, b: a & b,
                     "xor": lambda a, b: a ^ b, "shr": lambda a, b: a >> b, "div": lambda a, b: a // b,
                     "mul": lambda a, b: a * b, "shl": lambda a, b: a << b, "popc": lambda a: bin(a).count("1"), "not": lambda a: 1 - a,
                     "clz": lambda a: 64 - a.bit_length(), "mov": lambda a: a, "cvt": lambda a: a}[base](*src)
            r &= 2**bits - 1
            results[lane] = {ops[0].name: r}
        for lane, r in results.items():
            lanes[lane].update(r)
    return added


def result_bits(opcode: str) -> int:
    """Bits of an instruction's result (1 for predicates)."""
    parts = opcode.split(".")
    if parts[0] in ("popc", "clz", "activemask", "vote", "match"):
        return 32
    if "pred" in parts or parts[0] == "setp":
        return 1
    if "wide" in parts:
        return 64
    types = [p for p in parts if re.fullmatch(r"[bsu](8|16|32|64)", p)]
    return int(types[0][1:]) if types else 64


SIMULATED = [("log2", 0), ("log2", 37), ("linear:4:64:8", 3), ("linear:4:64:8", 8), ("linear:4:64:8", 64),
             ("linear:0:254:1", 253), ("linear:0:254:1", 254), ("linear:0:100:10", TOP)]


@pytest.mark.parametrize("spec_text, constant", SIMULATED)
@pytest.mark.parametrize("sm", [52, 80])
def test_folded_hist_counts_what_the_grouping_counts(spec_text, constant, sm):
    """On random warps (lanes present, guard true or false), the folded code adds at the value's bucket
    exactly the saving lanes, as the general code (match.any from sm_70, per lane before) does."""
    import random

    from neutrino.isa.ptx import ir

    spec = MapSpec.aggregate("h", "thread", "hist", [], Buckets.parse(spec_text))
    rng = random.Random(f"{spec_text}{constant}{sm}")
    for guard in (None, ir.Guard(ir.Register("%g")), ir.Guard(ir.Register("%g"), True)):
        folded, general = lowered_save(spec, constant, guard, sm), lowered_save(spec, None, guard, sm)
        assert not any("match" in i.opcode.text for i in folded)
        for _ in range(20):
            active = sorted(rng.sample(range(32), rng.randint(1, 32)))
            flags = [rng.randint(0, 1) for _ in range(32)]
            saving = [k for k in active if guard is None or flags[k] != guard.negated]
            registers = {"%g": flags, "%v": [constant] * 32}
            want = {8 * spec.buckets.index(constant): len(saving)} if saving else {}
            assert {o: n for o, n in run_warp(folded, active, registers).items() if n} == want
            assert {o: n for o, n in run_warp(general, active, registers).items() if n} == want
            assert run_warp(folded, active, dict(registers, **{"%nt_on": [0] * 32})) == {}  # the gate


@pytest.mark.parametrize("constant", [0, 1, 7, 2**32, TOP])
def test_folded_sum_adds_lanes_times_the_value(constant):
    import random

    from neutrino.isa.ptx import ir

    spec = MapSpec.aggregate("s", "thread", "sum", ["a", "b"])
    rng = random.Random(constant)
    for guard in (None, ir.Guard(ir.Register("%g")), ir.Guard(ir.Register("%g"), True)):
        code = lowered_save(spec, constant, guard, 80)
        for _ in range(20):
            active = sorted(rng.sample(range(32), rng.randint(1, 32)))
            flags = [rng.randint(0, 1) for _ in range(32)]
            saving = [k for k in active if guard is None or flags[k] != guard.negated]
            total = len(saving) * constant % 2**64
            want = {0: total, 8: total} if total else {}
            assert {o: n for o, n in run_warp(code, active, {"%g": flags}).items() if n} == want
