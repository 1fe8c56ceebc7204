"""Per-block staging of aggregation maps in shared memory (neutrino/passes/shared_agg.py, issue 27).

What the CPU can check: the staged code's shape (shared array, entry barrier, 32-bit shared adds
with carry, exit protocol under the exit's own guard, one copy-out per counter), the fall-backs to
global adds into one row, the sizes of the maps, the probe-file key, and that ptxas assembles it.
That the counts stay exact is checked on the GPU (tests/gpu/test_gpu_lines.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from neutrino.engine import instrument
from neutrino.errors import NeutrinoError
from neutrino.maps import STRIPES, map_buffer_bytes
from neutrino.passes import shared_agg
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probes
from tests.helpers import HAVE_PTXAS, ptxas

DATA = Path(__file__).resolve().parent / "data" / "lines"
LOOP = (DATA / "loop.ptx").read_text()
STAGED_HIST = """
[map.seen]
type = "hist"
buckets = "linear:0:8:1"
stage = "block"

[probe.count]
position = "kernel"
before = "SAVE [ seen ] {3};"
"""


def staged_light():
    """lines_light with its map staged per block (the tool itself adds into global rows: docs/lines.md)."""
    import attrs

    probes = load_probes("lines_light")
    probes.maps = {name: attrs.evolve(spec, stage="block") for name, spec in probes.maps.items()}
    return probes


def probed(ptx: str, probes) -> tuple[str, dict]:
    result = instrument(ptx, probes, source="t.ptx")
    if HAVE_PTXAS:
        ptxas(result.ptx, "sm_90")  # ptxas 13 assembles no target below sm_75
    return result.ptx, result.kernels


def test_lines_light_adds_into_shared_memory_and_copies_out_at_exit():
    ptx, kernels = probed(LOOP, staged_light())
    # 256 buckets + the exit counter, rounded up to whole KB (dynamic shared memory keeps its alignment)
    assert re.search(r"\.shared \.align 8 \.b64 %nt_stg_counters\[384\];", ptx)
    entry_barrier = ptx.index("bar.sync \t0;")
    assert ptx.index("ld.param.u64 \t%nt_buf_lines_blocks") < ptx.index("mov.u64 \t%nt_stg_base, %nt_stg_counters") < entry_barrier
    assert entry_barrier < ptx.index("add.s32 \t%r3")  # the kernel's own code starts after the zeroed array
    # per block outside the loop, at its bucket (BLOCK + 1: the bucket is folded, passes/save_constants.py)
    assert [ptx.count(f"@%nt_stg_staged red.shared.add.u32 \t[%nt_hoff_lines_blocks+{8 * b}], %nt_stg_lo;") for b in (1, 2, 3)] == [1, 0, 1]
    # the loop's block is counted in a register (passes/register_counters.py), flushed at the exit as an
    # exact u64 add into its staged counter: the low word, then the carry into the high one
    assert "@%nt_agg_go atom.shared.add.u32 \t%nt_stg_old, [%nt_buf_lines_blocks+16], %nt_stg_lo;" in ptx
    assert "@%nt_stg_high red.shared.add.u32 \t[%nt_buf_lines_blocks+20], %nt_stg_hi;" in ptx
    globals_ = [line for line in ptx.splitlines() if "red.global" in line or "atom.global" in line]
    # past THREAD_STAGED_LIMIT a thread adds to its global row directly (2 sites); the copy-out at the exit
    assert globals_ == [f"\t@%nt_stg_direct red.global.add.u64 \t[%nt_stg_gptr+{8 * b}], %nt_hist_amount;" for b in (1, 3)] + \
        ["\t@%nt_stg_go red.global.add.u64 \t[%nt_stg_gptr], %nt_stg_v;"]
    assert "setp.lt.u32 \t%nt_stg_staged, %nt_stg_after, 4194304;" in ptx
    assert "@%nt_stg_staged mov.u32 \t%nt_stg_mine, %nt_stg_after;" in ptx  # only what it staged counts
    exit_code = ptx[ptx.index("activemask.b32 \t%nt_stg_active"):ptx.index("\tret;")]
    assert "bar.sync" not in exit_code and "membar.cta" in exit_code and "bar.warp.sync" in exit_code
    assert kernels["loopk"]["maps"][0]["stage"] == "block" and kernels["loopk"]["maps"][0]["rows"] == 1
    assert "%smid" not in ptx and "mov.b64 \t%nt_gbuf_lines_blocks, %nt_buf_lines_blocks;" in ptx


def test_staged_map_is_one_row_and_others_keep_their_stripes():
    info = load_probes("lines").maps
    staged = [m.to_json() for m in info.values()]
    assert [map_buffer_bytes(m, (8, 1, 1), (128, 1, 1)) for m in staged] == [(1, 2048), (1, 4096), (1, 128)]
    plain = dict(staged[0])
    del plain["stage"], plain["rows"]
    assert map_buffer_bytes(plain, (8, 1, 1), (128, 1, 1)) == (STRIPES, STRIPES * 2048)


def test_u64_add_is_two_u32_adds_with_carry():
    ptx, _ = probed(LOOP, load_probes("lines"))
    # lines_total's u64 sums: the low word's add returns the old value, the carry goes into the high word
    block = ptx[ptx.index("atom.shared.add.u32 \t%nt_stg_old, [%nt_buf_lines_total+8]"):]
    block = block[:block.index("red.shared.add.u32")]
    assert "setp.lt.u32 \t%nt_stg_carry, %nt_stg_new, %nt_stg_old;" in block
    assert "@%nt_stg_carry add.u32 \t%nt_stg_hi, %nt_stg_hi, 1;" in block
    assert "[%nt_buf_lines_total+12], %nt_stg_hi" in ptx


def test_guarded_exit_counts_only_the_leaving_lanes():
    guarded = LOOP.replace("\tst.global.u32 \t[%rd1], %r3;\n\tret;",
                           "\tsetp.eq.s32 \t%p2, %r3, 0;\n\t@%p2 ret;\n\tst.global.u32 \t[%rd1], %r3;\n\tret;")
    ptx, _ = probed(guarded, staged_light())
    assert "vote.sync.ballot.b32 \t%nt_stg_leaving, %p2, %nt_stg_active;" in ptx
    assert "@!%p2 bra \t%nt_L_stg_kept_0;" in ptx
    assert ptx.count("bfind.u32") == 2  # both exits run the protocol


@pytest.mark.parametrize("change, reason", [
    (lambda p: p.replace(".target sm_80", ".target sm_60"), "target"),
    (lambda p: p.replace("{\n\t.reg .pred", "{\n\t.shared .align 4 .b8 big[48000];\n\t.reg .pred"), "static shared"),
    (lambda p: p.replace(".visible .entry", ".func quit()\n{\n\texit;\n}\n.visible .entry"), "exit"),
])
def test_kernels_that_cannot_stage_add_globally_into_row_zero(change, reason):
    ptx, _ = probed(change(LOOP), staged_light())
    assert "stg_" not in ptx and "atom.shared" not in ptx
    assert "%smid" not in ptx  # the map's one row: no stripe
    assert [ptx.count(f"red.global.add.u64 \t[%nt_hoff_lines_blocks+{8 * b}]") for b in (1, 3)] == [1] * 2
    # the loop's block: its add at the block, or (register counters, not with a .func that exits) its flush at the exit
    flushed = "red.global.add.u64 \t[%nt_buf_lines_blocks+16]" in ptx
    assert ptx.count("red.global.add.u64 \t[%nt_hoff_lines_blocks+16]") == (0 if flushed else 1)
    assert flushed == (reason != "exit")


def test_static_shared_sizes():
    assert shared_agg.static_shared_bytes(".shared .align 4 .b8 s[4096];") == 4096
    assert shared_agg.static_shared_bytes(".shared .align 16 .v4 .f32 t[8][2];") == 256
    assert shared_agg.static_shared_bytes(".extern .shared .align 16 .b8 dyn[];") == 0
    assert shared_agg.static_shared_bytes(".global .align 4 .b8 g[64];") == 0


def test_other_maps_and_array_maps_are_left_alone():
    unstaged = STAGED_HIST.replace('stage = "block"\n', "")
    ptx, _ = probed(LOOP, parse_probes(unstaged, "p.toml"))
    assert "stg_" not in ptx and "atom.shared" not in ptx and "red.global.add.u64" in ptx
    assert "and.b32 \t%nt_stripe, %nt_stripe, 31;" in ptx  # unstaged maps keep their 32 rows
    ptx, kernels = probed(LOOP, parse_probes(STAGED_HIST, "p.toml"))
    assert "stg_counters[128]" in ptx  # 10 buckets + the exit counter, in one KB
    assert kernels["loopk"]["maps"][0]["rows"] == 1


def test_stage_key_is_checked():
    with pytest.raises(NeutrinoError, match="stage must be"):
        parse_probes(STAGED_HIST.replace('stage = "block"', 'stage = "warp"'), "p.toml")
    with pytest.raises(NeutrinoError, match="unknown key 'stage'"):
        parse_probes('[map.a]\nlevel = "warp"\nfields = ["x:u32"]\nstage = "block"\n'
                     '[probe.p]\nposition = "kernel"\nlevel = "warp"\nbefore = "SAVE [ a ] {1};"\n', "p.toml")


def test_dsl_stage_reaches_the_map(tmp_path):
    src = tmp_path / "p.py"
    src.write_text('from neutrino import Map, probe\nimport neutrino.language as nl\n\n'
                   '@Map(type="sum", stage="block")\nclass hits:\n    n: nl.u64\n\n'
                   '@probe(pos="kernel", before=True)\ndef once():\n    hits.add(1)\n')
    assert load_probes(str(src)).maps["hits"].stage == "block"
    src.write_text(src.read_text().replace('stage="block"', 'stage="grid"'))
    with pytest.raises(NeutrinoError, match="stage="):
        load_probes(str(src))
