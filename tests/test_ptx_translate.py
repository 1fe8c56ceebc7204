"""The neutral operations as PTX (isa/ptx/translate.py): an array map's record, written once in the neutral steps
(passes/neutral_ops.py `NeutralSteps` with PTX's hooks, passes/lower_save.py `ptx_steps`), as the instructions the
PTX SAVE lowering wrote before it shared them; ptxas is the oracle for the instrumented kernels."""

from __future__ import annotations

import pytest

from neutrino.engine import instrument
from neutrino.isa.ptx import ir
from neutrino.isa.ptx.translate import PtxTranslation
from neutrino.passes.lower_save import field_values, ptx_steps
from neutrino.passes.neutral_ops import Op, Pred, Val
from neutrino.passes.save_core import lower_exit_counts
from neutrino.passes.state import KernelState
from neutrino.probefile import parse_probes
from tests.helpers import CORPUS, HAVE_PTXAS, ptxas

PROBES = """
[map.trace]
level = "thread"
fields = ["a:u32", "b:u32", "c:u64"]
cap = 8

[probe.rec]
position = "ld.global"
level = "thread"
after = \"\"\"
.reg .pred %p;
setp.ne.u64 %p, ADDR, 0;
@!%p SAVE [ trace ] {BYTES, BYTES, ADDR};
\"\"\"
"""


def text(code: list) -> list[str]:
    return [f"{'@' + ('!' if i.guard.negated else '') + i.guard.register.name + ' ' if i.guard else ''}"
            f"{i.opcode.text} {', '.join(map(str, i.operands))}" for i in code]


def state(counting: bool = False) -> KernelState:
    return KernelState(ir.Function("k", ""), prefix="%nt_", counting=counting)


def test_record_as_ptx():
    """Below cap and gate on, where the (negated) guard holds: two u32 fields in one vector store, the u64 alone;
    the cursor counts every attempt of the guarded lanes, stored or not."""
    spec = parse_probes(PROBES, "p.toml").maps["trace"]
    guard = ir.Guard(ir.Register("%g"), negated=True)
    code = PtxTranslation(s := state(), "t").translate(ptx_steps(False).lower_fields(spec, field_values(spec), guard))
    assert text(code) == [
        "setp.lt.and.u32 %nt_ok_trace, %nt_cur_trace, 8, %nt_on",
        "not.pred %nt_nok_trace, %g",
        "and.pred %nt_ok_trace, %nt_ok_trace, %nt_nok_trace",
        "mul.wide.u32 %nt_off_trace, %nt_cur_trace, 16",
        "add.u64 %nt_ptr_trace, %nt_rec_trace, %nt_off_trace",
        "@%nt_ok_trace st.global.v2.b32 [%nt_ptr_trace], {%nt_f0_trace, %nt_f1_trace}",
        "@%nt_ok_trace st.global.b64 [%nt_ptr_trace+8], %nt_f2_trace",
        "@!%g add.u32 %nt_cur_trace, %nt_cur_trace, 1",
    ]
    assert s.temps["%nt_ok_trace"] == "pred" and s.temps["%nt_off_trace"] == "b64" and s.temps["%nt_cur_trace"] == "b32"


def test_counting_variant_only_counts():
    spec = parse_probes(PROBES, "p.toml").maps["trace"]
    code = PtxTranslation(state(True), "t").translate(ptx_steps(True).lower_fields(spec, field_values(spec), None))
    assert text(code) == ["add.u32 %nt_cur_trace, %nt_cur_trace, 1"]


def test_nested_lanes_and_their_end():
    """An inner `lanes` ANDs the outer predicate into its own; after `end` the outer one is in force again."""
    p, q, v = Pred("p"), Pred("q"), Val("v")
    code = PtxTranslation(state(), "t").translate([Op("lanes", p), Op("cmp", q, "eq", v, 0), Op("lanes", q),
                                                   Op("count", v), Op("end"), Op("count", v), Op("end"), Op("count", v)])
    assert text(code) == ["setp.eq.u32 %nt_q, %nt_v, 0", "and.pred %nt_q, %nt_q, %nt_p", "@%nt_q add.u32 %nt_v, %nt_v, 1",
                          "@%nt_p add.u32 %nt_v, %nt_v, 1", "add.u32 %nt_v, %nt_v, 1"]


def test_an_operation_not_spelled_is_refused():
    with pytest.raises(NotImplementedError, match="first"):
        PtxTranslation(state(), "t").translate([Op("first", Pred("p"), "active")])


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
def test_records_assemble():
    path = next(p for p in CORPUS if "ld.global" in p.read_text())
    result = instrument(path.read_text(), parse_probes(PROBES, "p.toml"), source=path.name)
    assert "st.global.v2.b32" in result.ptx
    ptxas(result.ptx)


@pytest.mark.parametrize("level, expected", [
    ("warp", ["not.pred %nt_exit_warp, %g", "and.pred %nt_exit_warp, %nt_exit_warp, %nt_lead_warp",
              "and.pred %nt_count_go, %nt_exit_warp, %nt_on", "@%nt_count_go st.global.u32 [%nt_cnt_trace], %nt_cur_trace"]),
    ("thread", ["not.pred %nt_count_go, %g", "and.pred %nt_count_go, %nt_count_go, %nt_on",
                "@%nt_count_go st.global.u32 [%nt_cnt_trace], %nt_cur_trace"]),
])
def test_exit_count_under_a_negated_exit_guard(level, expected):
    """`@!%g ret`: the unit's leader among the lanes that leave there, gate on, stores the unit's cursor."""
    spec = parse_probes(PROBES.replace('level = "thread"', f'level = "{level}"'), "p.toml").maps["trace"]
    s = state()
    leaders = {"warp": Pred("lead_warp")}.get  # the lowering's hook: computed at entry
    ops = lower_exit_counts(ptx_steps(False, leaders), [spec], ir.Guard(ir.Register("%g"), negated=True))
    assert text(PtxTranslation(s, "t").translate(ops)) == expected


def test_mixed_stores_one_vector_store():
    """With the engine's `mixed_stores` option, the record's u32, u32 and u64 (16 bytes from a 16-aligned offset)
    are one st.global.v4.b32: the u64 split into its low then high word, as memory holds it; the rest unchanged."""
    spec = parse_probes(PROBES, "p.toml").maps["trace"]
    code = PtxTranslation(state(), "t").translate(ptx_steps(False, mixed=True).lower_fields(spec, field_values(spec), None))
    assert text(code)[-3:] == [
        "mov.b64 {%nt_f2_trace_w0, %nt_f2_trace_w1}, %nt_f2_trace",
        "@%nt_ok_trace st.global.v4.b32 [%nt_ptr_trace], {%nt_f0_trace, %nt_f1_trace, %nt_f2_trace_w0, %nt_f2_trace_w1}",
        "add.u32 %nt_cur_trace, %nt_cur_trace, 1",
    ]
    plain = PtxTranslation(state(), "t").translate(ptx_steps(False).lower_fields(spec, field_values(spec), None))
    assert sum(i.opcode.text.startswith("st.global") for i in plain) == 2  # the default: two stores, as before


@pytest.mark.parametrize("fields, size, chunks", [
    (["a:u64", "b:u32", "c:u32"], 16, [[0, 1, 2]]),  # block_sched's record
    (["a:u32", "b:u64", "c:u32"], 16, [[0, 1, 2]]),  # a u64 at offset 4: its two words, 4-aligned, in the vector
    (["a:u64", "b:u32", "c:u32", "d:u64"], 24, [[0], [1, 2], [3]]),  # 24-byte records: only 8-aligned
    (["a:u32", "b:u32", "c:u32", "d:u32"], 16, [[0, 1, 2, 3]]),  # one type: the vector store it had
    (["a:u64", "b:u64", "c:u32", "d:u32", "e:u64"], 32, [[0, 1], [2, 3, 4]]),
])
def test_mixed_chunks_only_fill_aligned_16_bytes(fields, size, chunks):
    from neutrino.passes.lower_save import store_chunks  # noqa: PLC0415
    from neutrino.probe_model import Field, MapSpec  # noqa: PLC0415

    offsets, at = [], 0
    for f in fields:
        offsets.append(at)
        at += 8 if f.endswith("u64") else 4
    spec = MapSpec("m", "warp", 1, [Field(f[0], f[2:], o) for f, o in zip(fields, offsets)], size)
    assert store_chunks(spec, mixed=True) == chunks


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
def test_mixed_stores_assemble_for_block_sched():
    from neutrino.toolbox import load_probe_argument  # noqa: PLC0415

    probes = load_probe_argument("block_sched", None)
    for path in CORPUS:
        result = instrument(path.read_text(), probes, source=path.name, mixed_stores=True)
        assert "st.global.v4.b32 \t[%nt_ptr_block_sched], {%nt_f0_block_sched_w0, %nt_f0_block_sched_w1," in result.ptx
        ptxas(result.ptx)
