"""Aggregation maps (sum, hist): probe files, DSL, lowering, verifier, result files, analyses.

The lowering tests are FileCheck goldens on a small kernel with a divergent
exit; ptxas (when present) assembles every lowering, for sm_80 and sm_90 on
the corpus and for sm_75 (the shuffle path). What the GPU computes with them is
checked in tests/gpu/test_gpu_aggregation.py.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import neutrino.language as nl
import neutrino.maps as maps_module
import neutrino.trace as nt
from neutrino.analysis import gmem_bytes as gmem_analysis
from neutrino.analysis import report
from neutrino.analysis import tensorop as tensorop_analysis
from neutrino.engine import instrument
from neutrino.errors import InstrumentError, ProbeError
from neutrino.isa.ptx import ir, parse_module
from neutrino.language import DslError
from neutrino.passes.lower_save import sm_version
from neutrino.passes.verify import check_engine_atomics
from neutrino.probefile import parse_probes

from helpers import CORPUS, HAVE_PTXAS, filecheck, ptxas

KERNEL = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(
	.param .u64 k_p0
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_p0];
	cvta.to.global.u64 %rd2, %rd1;
	mov.u32 %r1, %tid.x;
	setp.lt.u32 %p1, %r1, 16;
	@%p1 ld.global.v2.u32 {%r2, %r3}, [%rd2+8];
	add.u32 %r4, %r2, %r3;
	@!%p1 st.global.u32 [%rd2], %r4;
	@%p1 ret;
	ret;
}
"""

SUM_PROBE = '''
[map.traffic]
type = "sum"
fields = ["bytes:u64", "accesses:u64"]

[probe.count]
position = "ld.global:st.global"
before = """.reg .b64 %total; .reg .b64 %n; .reg .b64 %b;
cvt.u64.u32 %b, BYTES; add.u64 %total, %total, %b; add.u64 %n, %n, 1;"""

[probe.done]
position = "kernel"
after = """SAVE [ traffic ] {%total, %n};"""
'''

HIST_PROBE = '''
[map.sizes]
type = "hist"
buckets = "log2"

[map.lin]
type = "hist"
buckets = "linear:4:64:8"

[map.odd]
type = "hist"
buckets = "linear:0:100:10"

[probe.size]
position = "ld.global:st.global"
before = """SAVE [ sizes ] {ADDR}; SAVE [ lin ] {ADDR}; SAVE [ odd ] {ADDR};"""
'''


def lowered(probe_text: str, kernel: str = KERNEL):
    return instrument(kernel, parse_probes(probe_text, "p.toml"), source="k.ptx")


def with_target(ptx: str, target: str) -> str:
    module = parse_module(ptx)
    return ptx.replace(f".target {module.target}", f".target {target}", 1)


# ---------------------------------------------------------------- probe files


def test_explicit_sum_and_hist_maps():
    pf = parse_probes(SUM_PROBE + HIST_PROBE.replace("[probe.size]", "[probe.size2]"), "p.toml")
    traffic = pf.maps["traffic"]
    assert (traffic.type, traffic.level, traffic.cap, traffic.record_bytes) == ("sum", "thread", 1, 16)
    assert [(f.name, f.type, f.offset) for f in traffic.fields] == [("bytes", "u64", 0), ("accesses", "u64", 8)]
    sizes, lin = pf.maps["sizes"], pf.maps["lin"]
    assert (sizes.type, str(sizes.buckets), sizes.record_bytes) == ("hist", "log2", 65 * 8)
    assert (str(lin.buckets), lin.buckets.count, lin.record_bytes) == ("linear:4:64:8", 10, 80)
    info = lin.to_json()
    assert info["type"] == "hist" and info["buckets"] == "linear:4:64:8" and info["bucket_count"] == 10
    assert traffic.to_json()["type"] == "sum" and "buckets" not in traffic.to_json()


def test_compact_sum_and_hist_datamodels():
    pf = parse_probes('''
[traffic]
position = "ld.global"
datamodel = "sum"
before = """SAVE.u64 {BYTES, 1};"""

[sizes]
position = "ld.global"
level = "warp"
datamodel = "hist:linear:0:32:4"
before = """SAVE.u64 {BYTES};"""
''', "c.toml")
    traffic, sizes = pf.maps["traffic"], pf.maps["sizes"]
    assert traffic.type == "sum" and [f.name for f in traffic.fields] == ["bytes", "f"]
    assert (sizes.type, sizes.level, sizes.buckets.count) == ("hist", "warp", 10)


@pytest.mark.parametrize("text,expected", [
    ('[map.s]\ntype = "sum"\ncap = 2\nfields = ["a:u64"]\n', "c.toml:3:1: error: [map s] unknown key 'cap' for a sum map"),
    ('[map.s]\ntype = "sum"\nfields = ["a:u32"]\n', "c.toml:3:12: error: [map s] field 'a' of a sum map must be u64"),
    ('[map.s]\ntype = "count"\nfields = ["a:u64"]\n', "c.toml:2:1: error: [map s] type must be one of array, sum, hist, not 'count'"),
    ('[map.h]\ntype = "hist"\n', "c.toml:1:1: error: [map h] a hist map needs buckets"),
    ('[map.h]\ntype = "hist"\nbuckets = "linear:9:3:1"\n', "c.toml:3:1: error: [map h] buckets 'linear:9:3:1': need 0 <= MIN < MAX"),
    ('[map.h]\ntype = "hist"\nbuckets = "log10"\n', "c.toml:3:1: error: [map h] malformed buckets 'log10'"),
    ('[map.h]\ntype = "hist"\nbuckets = "log2"\nfields = ["a:u64"]\n', "c.toml:4:1: error: [map h] unknown key 'fields' for a hist map"),
])
def test_aggregate_map_errors(text, expected):
    text += '[probe.p]\nposition = "kernel"\nbefore = "mov.u32 %smid, 0;"\n'
    with pytest.raises(ProbeError) as e:
        parse_probes(text, "c.toml")
    assert expected in str(e.value)


def test_compact_hist_takes_one_u64_value():
    with pytest.raises(ProbeError) as e:
        parse_probes('[h]\nposition = "ld.global"\ndatamodel = "hist:log2"\nbefore = "SAVE.u32 {BYTES, BYTES};"\n', "h.toml")
    text = str(e.value)
    assert "h.toml:4:11: error: [probe h] a hist datamodel takes SAVE.u64" in text
    assert "h.toml:1:1: error: [probe h] a hist datamodel records one value per SAVE, not 2" in text


def test_snippet_atomics_are_refused_located():
    """Only the engine writes atomics, into map counters; a probe's own atom/red is refused."""
    text = '''[p]
position = "ld.global"
before = """.reg .b64 %a;
red.global.add.u64 [%a], 1;
atom.global.add.u32 %r, [%a], 1;"""
'''
    with pytest.raises(ProbeError) as e:
        parse_probes(text, "a.toml")
    msg = str(e.value)
    assert "a.toml:4:1: error: [probe p] red reads and writes memory: probe code may neither read nor write memory; its results leave only through SAVE" in msg
    assert "a.toml:5:1: error: [probe p] atom reads and writes memory: probe code may neither read nor write memory; its results leave only through SAVE" in msg


# ---------------------------------------------------------------- lowering (FileCheck)


def test_sum_lowering_sm80_reduces_with_redux_then_one_atomic_per_warp():
    result = lowered(SUM_PROBE)
    filecheck(result.ptx, """
CHECK: .param .u64 k__nt_buf_traffic
CHECK: ld.param.u64 %nt_buf_traffic, [k__nt_buf_traffic];
CHECK-NEXT: cvt.u32.u64 %nt_gate_tag, %nt_buf_traffic;
CHECK-NEXT: and.b32 %nt_gate_tag, %nt_gate_tag, 1;
CHECK-NEXT: setp.ne.u32 %nt_gated, %nt_gate_tag, 0;
CHECK-NEXT: and.b64 %nt_buf_traffic, %nt_buf_traffic, -2;
CHECK-NEXT: cvta.to.global.u64 %nt_buf_traffic, %nt_buf_traffic;
CHECK-NEXT: mov.u32 %nt_gate, 0;
CHECK-NEXT: @%nt_gated ld.global.u32 %nt_gate, [%nt_buf_traffic+-8];
CHECK-NEXT: setp.eq.u32 %nt_on, %nt_gate, 0;
CHECK-NEXT: mov.u32 %nt_stripe, %smid;
CHECK-NEXT: and.b32 %nt_stripe, %nt_stripe, 127;
CHECK-NEXT: mul.wide.u32 %nt_w64, %nt_stripe, 128;
CHECK-NEXT: add.u64 %nt_buf_traffic, %nt_buf_traffic, %nt_w64;
CHECK: @!%p1 st.global.u32 [%rd2], %r4;
CHECK: activemask.b32 %nt_agg_mask;
CHECK-NEXT: mov.u32 %nt_agg_lt, %lanemask_lt;
CHECK-NEXT: and.b32 %nt_agg_lt, %nt_agg_lt, %nt_agg_mask;
CHECK-NEXT: setp.eq.u32 %nt_agg_lead, %nt_agg_lt, 0;
CHECK-NEXT: selp.b64 %nt_f0_traffic, %nt_f0_traffic, 0, %p1;
CHECK-NEXT: mov.b64 {%nt_agg_lo, %nt_agg_hi}, %nt_f0_traffic;
CHECK-NEXT: and.b32 %nt_agg_a, %nt_agg_lo, 65535;
CHECK-NEXT: shr.u32 %nt_agg_b, %nt_agg_lo, 16;
CHECK-NEXT: redux.sync.add.u32 %nt_agg_a, %nt_agg_a, %nt_agg_mask;
CHECK-NEXT: redux.sync.add.u32 %nt_agg_b, %nt_agg_b, %nt_agg_mask;
CHECK-NEXT: redux.sync.add.u32 %nt_agg_hi, %nt_agg_hi, %nt_agg_mask;
CHECK: shl.b64 %nt_agg_part, %nt_agg_part, 32;
CHECK-NEXT: add.u64 %nt_agg_total, %nt_agg_total, %nt_agg_part;
CHECK-NEXT: setp.ne.and.u64 %nt_agg_go, %nt_agg_total, 0, %nt_on;
CHECK-NEXT: and.pred %nt_agg_go, %nt_agg_go, %nt_agg_lead;
CHECK-NEXT: @%nt_agg_go red.global.add.u64 [%nt_buf_traffic], %nt_agg_total;
CHECK: @%nt_agg_go red.global.add.u64 [%nt_buf_traffic+8], %nt_agg_total;
CHECK-NEXT: @%p1 ret;
CHECK: activemask.b32 %nt_agg_mask;
CHECK-NOT: selp
CHECK: @%nt_agg_go red.global.add.u64 [%nt_buf_traffic+8], %nt_agg_total;
CHECK-NEXT: ret;
""")
    assert "cur_traffic" not in result.ptx and "%tid.y" not in result.ptx  # no cursor, no unit index
    (info,) = result.kernels.values()
    assert info["maps"][0]["type"] == "sum" and info["count_kernel"] is None
    if HAVE_PTXAS:
        ptxas(result.ptx)
        ptxas(result.ptx, "sm_90")


def test_sum_lowering_before_sm80_uses_a_shuffle_butterfly_or_one_atomic_per_lane():
    result = lowered(SUM_PROBE, with_target(KERNEL, "sm_75"))
    assert "redux" not in result.ptx
    assert result.ptx.count("shfl.sync.bfly.b32") == 2 * 2 * 5 * 2  # halves x fields x rounds x exits
    filecheck(result.ptx, """
CHECK: activemask.b32 %nt_agg_mask;
CHECK: setp.eq.u32 %nt_agg_full, %nt_agg_mask, 4294967295;
CHECK: shfl.sync.bfly.b32 %nt_agg_lo, %nt_agg_lo, 16, 31, %nt_agg_mask;
CHECK: shfl.sync.bfly.b32 %nt_agg_hi, %nt_agg_hi, 1, 31, %nt_agg_mask;
CHECK: and.pred %nt_agg_first, %nt_agg_full, %nt_agg_lead;
CHECK-NEXT: setp.ne.and.u64 %nt_agg_go, %nt_agg_total, 0, %nt_on;
CHECK-NEXT: and.pred %nt_agg_go, %nt_agg_go, %nt_agg_first;
CHECK-NEXT: @%nt_agg_go red.global.add.u64 [%nt_buf_traffic], %nt_agg_total;
CHECK-NEXT: setp.ne.and.u64 %nt_agg_go, %nt_f0_traffic, 0, %nt_on;
CHECK-NEXT: not.pred %nt_agg_off, %nt_agg_full;
CHECK-NEXT: and.pred %nt_agg_go, %nt_agg_go, %nt_agg_off;
CHECK-NEXT: @%nt_agg_go red.global.add.u64 [%nt_buf_traffic], %nt_f0_traffic;
""")
    if HAVE_PTXAS:
        ptxas(result.ptx, "sm_75")


def test_warp_level_sum_is_a_plain_atomic_of_the_leader():
    probe = '''[map.w]
type = "sum"
level = "warp"
fields = ["n:u64"]
[probe.p]
position = "kernel"
level = "warp"
after = "SAVE [ w ] {1};"
'''
    result = lowered(probe)
    assert "activemask" not in result.ptx and "redux" not in result.ptx
    filecheck(result.ptx, """
CHECK: and.pred %nt_exec, %nt_exec, %nt_lead_warp;
CHECK: mov.b64 %nt_f0_w, 1;
CHECK-NEXT: setp.ne.and.u64 %nt_agg_go, %nt_f0_w, 0, %nt_on;
CHECK-NEXT: and.pred %nt_agg_go, %nt_agg_go, %nt_exec;
CHECK-NEXT: @%nt_agg_go red.global.add.u64 [%nt_buf_w], %nt_f0_w;
CHECK-NEXT: @%p1 ret;
CHECK: and.pred %nt_agg_go, %nt_agg_go, %nt_lead_warp;
CHECK-NEXT: @%nt_agg_go red.global.add.u64 [%nt_buf_w], %nt_f0_w;
CHECK-NEXT: ret;
""")


def test_hist_lowering_log2_and_linear_buckets():
    result = lowered(HIST_PROBE)
    filecheck(result.ptx, """
CHECK: clz.b64 %nt_hist_bucket, %nt_f0_sizes;
CHECK-NEXT: sub.u32 %nt_hist_bucket, 64, %nt_hist_bucket;
CHECK-NEXT: mul.wide.u32 %nt_hoff_sizes, %nt_hist_bucket, 8;
CHECK-NEXT: add.u64 %nt_hoff_sizes, %nt_hoff_sizes, %nt_buf_sizes;
CHECK-NEXT: activemask.b32 %nt_agg_mask;
CHECK-NEXT: mov.b32 %nt_hist_key, %nt_hist_bucket;
CHECK-NEXT: @!%p1 mov.b32 %nt_hist_key, 4294967295;
CHECK-NEXT: match.any.sync.b32 %nt_hist_peers, %nt_hist_key, %nt_agg_mask;
CHECK-NEXT: mov.u32 %nt_agg_lt, %lanemask_lt;
CHECK-NEXT: and.b32 %nt_agg_lt, %nt_agg_lt, %nt_hist_peers;
CHECK-NEXT: setp.eq.and.u32 %nt_hist_first, %nt_agg_lt, 0, %nt_on;
CHECK-NEXT: popc.b32 %nt_hist_n, %nt_hist_peers;
CHECK-NEXT: cvt.u64.u32 %nt_hist_amount, %nt_hist_n;
CHECK-NEXT: setp.ne.u32 %nt_hist_counted, %nt_hist_key, 4294967295;
CHECK-NEXT: and.pred %nt_hist_first, %nt_hist_first, %nt_hist_counted;
CHECK-NEXT: @%nt_hist_first red.global.add.u64 [%nt_hoff_sizes], %nt_hist_amount;
CHECK: setp.lt.u64 %nt_hist_under, %nt_f0_lin, 4;
CHECK-NEXT: sub.u64 %nt_hist_scaled, %nt_f0_lin, 4;
CHECK-NEXT: setp.ge.u64 %nt_hist_over, %nt_f0_lin, 64;
CHECK-NEXT: shr.u64 %nt_hist_scaled, %nt_hist_scaled, 3;
CHECK-NEXT: cvt.u32.u64 %nt_hist_bucket, %nt_hist_scaled;
CHECK-NEXT: add.u32 %nt_hist_bucket, %nt_hist_bucket, 1;
CHECK-NEXT: @%nt_hist_under mov.u32 %nt_hist_bucket, 0;
CHECK-NEXT: @%nt_hist_over mov.u32 %nt_hist_bucket, 9;
CHECK: mov.b64 %nt_hist_scaled, %nt_f0_odd;
CHECK-NEXT: setp.ge.u64 %nt_hist_over, %nt_f0_odd, 100;
CHECK-NEXT: div.u64 %nt_hist_scaled, %nt_hist_scaled, 10;
CHECK: @%nt_hist_over mov.u32 %nt_hist_bucket, 11;
CHECK: @%nt_hist_first red.global.add.u64 [%nt_hoff_odd], %nt_hist_amount;
CHECK-NEXT: @%p1 ld.global.v2.u32
CHECK: @%p1 mov.b32 %nt_hist_key, 4294967295;
CHECK: @%nt_hist_first red.global.add.u64 [%nt_hoff_odd], %nt_hist_amount;
CHECK-NEXT: @!%p1 st.global.u32
""")
    maps = {m["name"]: m for m in next(iter(result.kernels.values()))["maps"]}
    assert maps["sizes"]["bucket_count"] == 65 and maps["odd"]["bucket_count"] == 12
    if HAVE_PTXAS:
        ptxas(result.ptx)


def test_hist_before_sm70_and_at_warp_level_adds_one_per_sample():
    old = lowered(HIST_PROBE, with_target(KERNEL, "sm_60"))
    warp = lowered(HIST_PROBE.replace("[probe.size]", '[probe.size]\nlevel = "warp"').replace(
        'buckets = "log2"', 'buckets = "log2"\nlevel = "warp"').replace(
        'buckets = "linear:4:64:8"', 'buckets = "linear:4:64:8"\nlevel = "warp"').replace(
        'buckets = "linear:0:100:10"', 'buckets = "linear:0:100:10"\nlevel = "warp"'))
    for result in (old, warp):
        assert "match.any" not in result.ptx
        assert result.ptx.count("mov.u64 \t%nt_hist_amount, 1;") == 6  # 3 maps x 2 sites
    filecheck(old.ptx, """
CHECK: and.pred %nt_hist_go, %p1, %nt_on;
CHECK-NEXT: mov.u64 %nt_hist_amount, 1;
CHECK-NEXT: @%nt_hist_go red.global.add.u64 [%nt_hoff_sizes], %nt_hist_amount;
""")
    filecheck(warp.ptx, """
CHECK: and.pred %nt_hist_go, %nt_exec, %nt_on;
CHECK-NEXT: mov.u64 %nt_hist_amount, 1;
CHECK-NEXT: @%nt_hist_go red.global.add.u64 [%nt_hoff_sizes], %nt_hist_amount;
""")
    if HAVE_PTXAS:  # (ptxas 13 knows no target below sm_75, so the sm_60 text is not assembled)
        ptxas(warp.ptx)


def test_counting_variant_leaves_aggregates_out():
    probe = SUM_PROBE + '''
[map.addrs]
level = "thread"
cap = "count"
fields = ["addr:u64"]
[probe.where]
position = "ld.global"
before = "SAVE [ addrs ] {ADDR};"
'''
    result = lowered(probe)
    module = parse_module(result.ptx)
    counting = "\n".join(map(str, ir.instructions(module.function("k__nt_count").body)))
    real = "\n".join(map(str, ir.instructions(module.function("k").body)))
    assert "red.global" not in counting and "activemask" not in counting
    assert real.count("red.global.add.u64") == 4
    if HAVE_PTXAS:
        ptxas(result.ptx)


def test_engine_atomics_only_into_aggregation_counters():
    from neutrino.passes import default_pipeline
    from neutrino.passes.manager import Context

    probes = parse_probes(SUM_PROBE, "p.toml")
    module = parse_module(KERNEL)
    ctx = Context(probes)
    default_pipeline().run(module, ctx)
    state = ctx.kernels["k"]
    check_engine_atomics("k", state, probes)  # what lowering emits passes
    reds = [i for i in ir.instructions(state.function.body) if i.opcode.base == "red"]
    assert len(reds) == 4
    reds[0].operands = (ir.Address(ir.Register("%rd2")),) + reds[0].operands[1:]
    with pytest.raises(InstrumentError, match=r"k: red.global.add.u64 from save-lowering writes \[%rd2\]"):
        check_engine_atomics("k", state, probes)


def test_sm_version():
    assert [sm_version(t) for t in ("sm_90a", "sm_80", "sm_75", None, "compute_90")] == [90, 80, 75, 0, 0]


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize("path", [p for p in CORPUS if ".sm80." in p.name], ids=lambda p: p.name)
def test_ptxas_accepts_aggregation_for_sm80_sm90_and_sm75(path):
    """Every lowering (sum at thread and warp level, guarded; log2 and linear hist) assembles.

    sm_80 corpus kernels are assembled for sm_80 and sm_90, and, retargeted
    to sm_75, with the shuffle path (the sm_90 files run through
    test_instrument_corpus with the test probes under tests/data/probes).
    """
    text = path.read_text()
    probes = parse_probes(SUM_PROBE + HIST_PROBE, "p.toml")
    result = instrument(text, probes, source=str(path))
    assert "redux.sync" in result.ptx
    ptxas(result.ptx, "sm_80")
    ptxas(result.ptx, "sm_90")
    old = instrument(with_target(text, "sm_75"), probes, source=str(path))
    assert "shfl.sync.bfly" in old.ptx and "redux" not in old.ptx
    ptxas(old.ptx, "sm_75")


# ---------------------------------------------------------------- DSL

DSL_SOURCE = '''
from neutrino import Map, probe
import neutrino.language as nl

@Map(type="sum")
class traffic:
    bytes: nl.u64
    big: nl.u64

@Map(type="hist", buckets="log2")
class sizes:
    """sizes of the accesses"""

@Map(type="hist", level="warp", buckets="linear:0:64:8")
class wsizes:
    pass

total: nl.u64 = 0

@probe(pos="ld.global:st.global", level="thread", before=True)
def count():
    total += nl.bytes
    sizes.record(nl.bytes)
    if nl.bytes > 8:
        traffic.add(big=1)

@probe(pos="ld.global", level="warp")
def wcount():
    wsizes.record(nl.bytes)

@probe(pos="kernel", level="thread", after=True)
def done():
    traffic.save(total, 0)
'''


def test_dsl_aggregate_maps_compile_to_the_toml_form():
    text = nl.compile_source(DSL_SOURCE, "agg.py")
    pf = parse_probes(text, "agg.toml")
    assert pf.maps["traffic"].type == "sum" and [f.name for f in pf.maps["traffic"].fields] == ["bytes", "big"]
    assert (pf.maps["sizes"].type, str(pf.maps["sizes"].buckets)) == ("hist", "log2")
    assert (pf.maps["wsizes"].level, str(pf.maps["wsizes"].buckets)) == ("warp", "linear:0:64:8")
    assert 'type = "sum"' in text and 'buckets = "log2"' in text and "cap" not in text
    # add(big=1): the other counters get 0, under the condition's guard
    assert "SAVE [ traffic ] {%_d" in text and text.count("SAVE [ traffic ]") == 2
    probe_count = text[text.index("[probe.count]"):text.index("[probe.wcount]")]
    assert "@%_p0 mov.u64" in probe_count and "@%_p0 SAVE [ traffic ]" in probe_count
    assert pf.probes[[p.name for p in pf.probes].index("wcount")].after is not None  # record() implies after
    result = instrument(KERNEL, pf, source="k.ptx")
    if HAVE_PTXAS:
        ptxas(result.ptx)


@pytest.mark.parametrize("body,expected", [
    ('@Map(type="sum")\nclass m:\n    a: nl.u32\n', "field 'a' of sum map 'm' must be nl.u64"),
    ('@Map(type="sum", cap=2)\nclass m:\n    a: nl.u64\n', "cap= does not apply to a sum map"),
    ('@Map(type="hist")\nclass m:\n    pass\n', "a hist map needs buckets="),
    ('@Map(type="hist", buckets="lin")\nclass m:\n    pass\n', "malformed buckets 'lin'"),
    ('@Map(type="hist", buckets="log2")\nclass m:\n    a: nl.u64\n', "hist map 'm' has no fields"),
    ('@Map(type="tree")\nclass m:\n    a: nl.u64\n', "bad map type 'tree'"),
    ('@Map(type="array", buckets="log2")\nclass m:\n    a: nl.u64\n', 'buckets= is for type="hist" maps'),
    ('@Map(type="sum")\nclass m:\n    a: nl.u64\n@probe(pos="kernel")\ndef p():\n    m.record(1)\n', "sum map 'm' has no record()"),
    ('@Map(type="hist", buckets="log2")\nclass m:\n    pass\n@probe(pos="kernel")\ndef p():\n    m.add(1)\n', "hist map 'm' has no add()"),
    ('@Map()\nclass m:\n    a: nl.u64\n@probe(pos="kernel")\ndef p():\n    m.add(1)\n', "array map 'm' has no add()"),
    ('@Map(type="sum")\nclass m:\n    a: nl.u64\n@probe(pos="kernel")\ndef p():\n    m.add(b=1)\n', "map 'm' has no field 'b'"),
    ('@Map(type="sum")\nclass m:\n    a: nl.u64\n    b: nl.u64\n@probe(pos="kernel")\ndef p():\n    m.add(1)\n', "add of map 'm' needs 2 values"),
])
def test_dsl_aggregate_map_errors(body, expected):
    source = "from neutrino import Map, probe\nimport neutrino.language as nl\n" + body
    with pytest.raises(DslError) as e:
        nl.compile_source(source, "t.py")
    assert expected in str(e.value)
    assert str(e.value).startswith("t.py:")


# ---------------------------------------------------------------- buckets and result files


def test_buckets_index_agrees_with_bounds():
    rng = random.Random(7)
    values = [0, 1, 2, 3, 4, 7, 8, 63, 64, 99, 100, 101, (1 << 63), (1 << 64) - 1] + [rng.getrandbits(rng.randint(1, 64)) for _ in range(300)]
    for spec in ("log2", "linear:4:64:8", "linear:0:100:10", "linear:10:11:1", "linear:5:20000:7"):
        b = nt.Buckets.parse(spec)
        low, high = b.bounds()
        assert len(low) == len(high) == b.count
        for v in values:
            i = b.index(v)
            assert 0 <= i < b.count and low[i] <= v < high[i], (spec, v, i)
    log2 = nt.Buckets.parse("log2")
    assert [log2.index(v) for v in (0, 1, 2, 3, 4, (1 << 64) - 1)] == [0, 1, 2, 2, 3, 64]
    assert all(log2.index(v) == 64 - (64 - v.bit_length()) for v in values)  # the lowering: 64 - clz.b64


def test_map_buffer_bytes_sizes_aggregates_independently_of_the_grid():
    sum_info = {"name": "s", "type": "sum", "level": "thread", "record_bytes": 24, "cap": 1, "fields": []}
    hist_info = {"name": "h", "type": "hist", "level": "thread", "record_bytes": 65 * 8, "cap": 1, "fields": [],
                 "buckets": "log2"}
    array_info = {"name": "a", "level": "warp", "record_bytes": 16, "cap": 2, "fields": []}
    for grid, block in (((1, 1, 1), (32, 1, 1)), ((1024, 64, 1), (1024, 1, 1))):
        assert nt.map_buffer_bytes(sum_info, grid, block, 1) == (nt.STRIPES, nt.STRIPES * 128)  # rows 128-byte aligned
        assert nt.map_buffer_bytes(hist_info, grid, block) == (nt.STRIPES, nt.STRIPES * 640)
        units = nt.units_for("warp", grid, block)
        assert nt.map_buffer_bytes(array_info, grid, block) == (units, nt.buffer_bytes(units, 2, 16))
    assert nt.map_buffer_bytes({**array_info, "cap": "count"}, (2, 1, 1), (64, 1, 1), 5) == (4, nt.buffer_bytes(4, 5, 16))


def counters_buffer(info: dict, values) -> bytes:
    """A sum/hist map's device buffer (map_buffer_bytes) whose rows add up to `values`, spread over rows 0 and 3."""
    units, size = nt.map_buffer_bytes(info, (1, 1, 1), (1, 1, 1))
    rows = np.zeros((units, size // units // 8), np.uint64)
    values = np.asarray(values, np.uint64)
    rows[3, : len(values)] = values // np.uint64(3)
    rows[0, : len(values)] = values - rows[3, : len(values)]
    rows[units - 1, len(values):] = 999  # padding: not a counter
    return rows.tobytes()


def test_striped_rows_add_up_to_the_counters(tmp_path):
    info = {"name": "s", "type": "sum", "level": "thread", "record_bytes": 16, "cap": 1,
            "fields": [{"name": "a", "type": "u64", "offset": 0}, {"name": "b", "type": "u64", "offset": 8}]}
    units, size = nt.map_buffer_bytes(info, (1, 1, 1), (1, 1, 1))
    rows = np.zeros((units, 16), np.uint64)  # 128-byte rows: 2 counters and padding
    rows[0, :2] = [(1 << 64) - 1, 3]
    rows[5, :2] = [2, 4]
    rows[units - 1, :3] = [10, 20, 999]
    section = nt.MapSection.of(info, units, 1, rows.tobytes())
    assert rows.nbytes == size == section.size  # the section is the device buffer, as it is
    path = nt.write_result(tmp_path / "0.bin", grid=(1, 1, 1), block=(1, 1, 1), shared_bytes=0, maps=[section])
    m = nt.read_result(path).maps["s"]
    assert m.totals() == {"a": 11, "b": 27} and m.units == 1  # wraps modulo 2^64; padding ignored
    with pytest.raises(nt.TraceError, match="buffer has 24 bytes, layout needs"):
        nt.write_result(tmp_path / "1.bin", grid=(1, 1, 1), block=(1, 1, 1), shared_bytes=0,
                        maps=[nt.MapSection.of(info, units, 1, bytes(24))])


def _sections():
    sum_info = {"name": "traffic", "type": "sum", "level": "thread", "record_bytes": 16, "cap": 1,
                "fields": [{"name": "bytes", "type": "u64", "offset": 0}, {"name": "big", "type": "u64", "offset": 8}]}
    lin = nt.Buckets.parse("linear:1000000000000:1000000065536:4096")  # a spec longer than a field name
    hist_info = {"name": "lin", "type": "hist", "level": "warp", "record_bytes": 8 * lin.count, "cap": 1,
                 "fields": [{"name": "value", "type": "u64", "offset": 0}], "buckets": str(lin)}
    counts = np.arange(lin.count, dtype=np.uint64) * 3
    return [nt.MapSection.of(sum_info, nt.STRIPES, 1, counters_buffer(sum_info, [(1 << 64) - 5, 7])),
            nt.MapSection.of(hist_info, nt.STRIPES, 1, counters_buffer(hist_info, counts))], lin, counts


def test_result_file_roundtrip_of_sum_and_hist(tmp_path):
    sections, lin, counts = _sections()
    path = nt.write_result(tmp_path / "0.bin", grid=(9, 1, 1), block=(128, 1, 1), shared_bytes=0, maps=sections)
    assert path.stat().st_size < 16384  # rows of counters, not per-thread records
    r = nt.read_result(path)
    s, h = r.maps["traffic"], r.maps["lin"]
    assert s.type == "sum" and s.totals() == {"bytes": (1 << 64) - 5, "big": 7} and s.dropped == 0
    v = s.valid()
    assert len(v) == 1 and int(v["bytes"][0]) == (1 << 64) - 5 and int(v["unit"][0]) == 0
    hist = h.histogram()
    assert h.type == "hist" and hist.buckets == lin and list(hist.counts) == list(counts)
    assert hist.total == int(counts.sum())
    rows = hist.rows()
    assert rows[0] == (1000000000000, 1000000004096, 3) and rows[-1] == (1000000065536, 1 << 64, int(counts[-1]))
    assert "@" in str(hist)
    with pytest.raises(nt.TraceError, match="totals\\(\\) is for sum maps"):
        h.totals()
    with pytest.raises(nt.TraceError, match="histogram\\(\\) is for hist maps"):
        s.histogram()


def test_map_type_lives_in_the_old_reserved_word(tmp_path):
    """Old files (reserved = 0) read as arrays; an unknown type code is refused."""
    sections, _, _ = _sections()
    fields = [nt.Field("v", "u64", 0)]
    array = nt.MapSection("a", "thread", 8, 1, 2, fields, np.zeros(nt.buffer_bytes(2, 1, 8), np.uint8))
    path = nt.write_result(tmp_path / "0.bin", grid=(1, 1, 1), block=(2, 1, 1), shared_bytes=0, maps=[array] + sections)
    raw = bytearray(path.read_bytes())
    first_map = nt.FILE_HEADER.itemsize
    type_offset = first_map + 92  # spec/trace-format.md: map header word 92, `reserved` before
    assert raw[type_offset:type_offset + 4] == b"\0\0\0\0"  # array = 0, as old writers left it
    second_map = first_map + nt.MAP_HEADER.itemsize + nt.FIELD_DESC.itemsize
    assert raw[second_map + 92:second_map + 96] == (1).to_bytes(4, "little")
    assert nt.read_result(path).maps["a"].type == "array"
    raw[second_map + 92] = 7
    bad = tmp_path / "1.bin"
    bad.write_bytes(bytes(raw))
    with pytest.raises(nt.TraceError, match="unknown map type 7"):
        nt.read_result(bad)


# ---------------------------------------------------------------- analyses


def _launch_with(tmp_path, sections, kernel="vadd"):
    run = tmp_path / "20260101-000000_1"
    (run / "result").mkdir(parents=True)
    nt.write_result(run / "result/0.bin", grid=(4, 1, 1), block=(64, 1, 1), shared_bytes=0, maps=sections)
    events = [{"event": "start", "time": 0}, {"event": "launch", "time": 1, "index": 0, "kernel": kernel,
              "grid": [4, 1, 1], "block": [64, 1, 1], "result": "result/0.bin", "duration_ns": 100.0}]
    (run / "event.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def test_gmem_bytes_and_tensorop_analyses_read_sum_maps(tmp_path, capsys):
    gm = {"name": "gmem_bytes", "type": "sum", "level": "thread", "record_bytes": 16, "cap": 1,
          "fields": [{"name": "bytes", "type": "u64", "offset": 0}, {"name": "active_threads", "type": "u64", "offset": 8}]}
    tc = {"name": "tensorop", "type": "sum", "level": "thread", "record_bytes": 24, "cap": 1,
          "fields": [{"name": n, "type": "u64", "offset": 8 * i} for i, n in enumerate(("count", "warp_count", "active_warps"))]}
    run = _launch_with(tmp_path, [nt.MapSection.of(gm, nt.STRIPES, 1, counters_buffer(gm, [3072, 256])),
                                  nt.MapSection.of(tc, nt.STRIPES, 1, counters_buffer(tc, [640, 20, 4]))])
    (launch,) = nt.load(run).launches
    g = gmem_analysis.analyze_launch(launch, launch.maps["gmem_bytes"])
    assert (g.stats.total, g.stats.active, g.stats.records, g.stats.max_per_record) == (3072, 256, None, None)
    assert g.bandwidth_gbs == pytest.approx(30.72)
    t = tensorop_analysis.analyze_launch(launch, launch.maps["tensorop"])
    assert (t.stats.thread_instructions, t.stats.warp_instructions, t.stats.active_warps) == (640, 20, 4)
    summary = gmem_analysis.kernel_summary([g, g])
    assert summary["bytes"] == "6144" and summary["active threads"] == "512" and summary["max/thread"] == "-"
    assert report.main(str(run)) == 0
    out = capsys.readouterr().out
    gm_line = out.splitlines()[out.splitlines().index("[gmem_bytes]") + 3].split()
    assert gm_line[:2] == ["vadd", "3072"]


def test_gmem_bytes_results_of_both_forms_add_up():
    per_thread = gmem_analysis.ByteStats.of(np.array([0, 12, 12, 30], np.uint64))
    summed = gmem_analysis.ByteStats.of_totals({"bytes": 100, "active_threads": 5}, "bytes", "active_threads")
    both = per_thread + summed
    assert (both.total, both.records, both.active, both.max_per_record) == (154, 4, 8, 30)


# ---------------------------------------------------------------- the runtime (fake driver)


def test_runtime_sizes_a_sum_map_by_launch_and_writes_its_counters(tmp_path):
    """The existing runtime asks trace.map_buffer_bytes: 16 bytes whatever the grid, read back as totals."""
    import ctypes as C

    from fakedriver import param_u64
    from test_runtime_core import finish, load_saxpy, make_runtime, req

    rt, drv, _ = make_runtime(tmp_path, probe=SUM_PROBE)
    sizes = []

    def kernel(drv_, req_, params, name):
        buf = param_u64(params, 4)
        sizes.append(len(drv_.mem[buf]))
        rows = (C.c_uint64 * (16 * nt.STRIPES)).from_address(buf)
        assert not any(rows)  # zeroed before the launch
        threads = req_.grid[0] * req_.block[0]
        rows[0], rows[1] = 40 * threads, threads  # rows of two SMs (128 bytes = 16 u64 apart)
        rows[16 * 7], rows[16 * 7 + 1] = 8 * threads, 2 * threads

    drv.kernel_impl["saxpy4"] = kernel
    assert load_saxpy(rt)
    keep = []
    for grid in ((4, 1, 1), (4096, 1, 1)):
        r, params = req(grid=grid, block=(256, 1, 1))
        keep.append(params)
        assert rt.on_launch(r) == 0
    finish(rt)
    assert sizes[0] == sizes[1] >= nt.STRIPES * 128  # the same buffer for 4 and 4096 blocks (a pool may round up)
    launches = nt.load(rt.trace.path).launches
    assert [la.maps["traffic"].totals() for la in launches] == [
        {"bytes": 48 * 1024, "accesses": 3 * 1024}, {"bytes": 48 * 4096 * 256, "accesses": 3 * 4096 * 256}]
    assert all(la.maps["traffic"].dropped == 0 for la in launches)


def test_sum_maps_get_128_rows_and_hist_maps_32_each_row_indexed_by_the_sm():
    """kernel.json's `rows` is what the code indexes (%smid masked by rows - 1), and the launch's buffer follows it."""
    for probe_text, kind, rows in ((SUM_PROBE, "sum", maps_module.SUM_STRIPES), (HIST_PROBE, "hist", maps_module.STRIPES)):
        result = lowered(probe_text)
        (info,) = result.kernels.values()
        entry = next(m for m in info["maps"] if m["type"] == kind)
        assert entry["rows"] == rows == maps_module.stripes(kind)
        assert f"and.b32 \t%nt_stripe, %nt_stripe, {rows - 1};" in result.ptx
        assert nt.map_buffer_bytes(entry, (8, 1, 1), (128, 1, 1)) == (rows, rows * nt.stripe_row_bytes(entry["record_bytes"]))
    # an entry without `rows` (a trace or code cache written before rows were recorded) was sized with STRIPES
    assert nt.map_buffer_bytes({"type": "sum", "record_bytes": 16}, (8, 1, 1), (128, 1, 1))[0] == nt.STRIPES
