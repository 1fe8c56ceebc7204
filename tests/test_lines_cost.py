"""benchmarks/lines_cost.py's pure parts on hand-built inputs with known answers (the GPU part runs on the
device: docs/lines.md)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from neutrino.tools.lines import analysis as la
from tests.helpers import HAVE_PTXAS

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("lines_cost", ROOT / "benchmarks" / "lines_cost.py")
lc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lc)

NCU_PAGE = '''"Kernel Name","expensive_line"
"/tmp/w/expensive_line.cu"
"#","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed"
"1","extern ""C"" __global__ void","0","0","0"
"3","int i = ...","12","3","2,048"
"7","acc = sinf(acc)","1,500","200","98,304"
"5","float acc = x[i];","40","4","1,024"
"6","for (...)","300","20","12,288"
"/usr/include/math.h"
"#","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed"
"7","inline float f()","9","9","9"
'''


def test_ncu_source_page_is_read_per_file():
    blocks = lc.parse_ncu_source(NCU_PAGE)
    assert [f for f, _ in blocks] == ["/tmp/w/expensive_line.cu", "/usr/include/math.h"]
    own = lc.own_file_lines(blocks, "expensive_line.cu")
    assert own == {1: (0.0, 0.0), 3: (12.0, 2048.0), 7: (1500.0, 98304.0), 5: (40.0, 1024.0), 6: (300.0, 12288.0)}
    assert lc.own_file_lines(blocks, "other.cu") is None
    assert lc.parse_ncu_source("no table here\n") == []


def test_ncu_2025_cuda_view_without_metrics_gives_nothing():
    # what ncu 2025.3.1 printed for `--page source --csv --print-source cuda` on the H200 (docs/lines.md)
    page = '"File Name","/tmp/w/expensive_line.cu"\n"Line No","Source"\n"1",""\n"7","acc = sinf(acc);"\n'
    assert lc.parse_ncu_source(page) == []
    with_metrics = page.replace('"Line No","Source"', '"Line No","Source","Warp Stall Sampling (All Samples)",'
                                '"Instructions Executed"').replace('"7","acc = sinf(acc);"', '"7","acc = sinf(acc);","90","4,096"')
    assert lc.parse_ncu_source(with_metrics) == [("/tmp/w/expensive_line.cu", {7: (90.0, 4096.0)})]


def test_spearman_against_ncu_on_known_ranks():
    ncu = {3: (12.0, 2048.0), 5: (40.0, 1024.0), 6: (300.0, 12288.0), 7: (1500.0, 98304.0)}
    same_order = {3: 20.0, 5: 10.0, 6: 120.0, 7: 960.0}
    time_rho, instr_rho = lc.compare_with_ncu(same_order, {3: 1.0, 5: 2.0, 6: 3.0, 7: 4.0}, ncu)
    assert instr_rho == pytest.approx(1.0) and time_rho == pytest.approx(1.0)
    reversed_ticks = {3: 4.0, 5: 3.0, 6: 2.0, 7: 1.0}
    assert lc.compare_with_ncu(same_order, reversed_ticks, ncu)[0] == pytest.approx(-1.0)
    assert lc.spearman([1, 1, 1], [1, 2, 3]) is None  # constant: undefined, not 0


def test_our_lines_fold_inlined_code_into_its_call_site():
    info = lambda label, file, line, site: la.LineInfo(label, file, line, "f" if site else None, site, 1, 1)  # noqa: E731
    table = la.LineTable((info("k.cu:7", "k.cu", 7, None), info("math.h:9", "math.h", 9, "k.cu:7"),
                          info("k.cu:6", "k.cu", 6, None), info("other.h:2", "other.h", 2, None)), (), ())
    instr, ticks = lc.our_lines(table, [10, 5, 3, 100], [0, 1, 2, 4, 8], "k.cu")
    assert instr == {7: 15.0, 6: 3.0} and ticks == {7: 3.0, 6: 4.0}


def test_slowdown_and_parameter_values():
    times = {"plain": [10.0, 12.0, 11.0], "lines": [30.0, 33.0, 36.0], "lines_light": []}
    assert lc.median_ratio(times, "lines") == pytest.approx(3.0)
    assert lc.median_ratio(times, "lines_light") is None
    values = lc.param_values(["u64", "u32", "s32", "u64"], [0x7F0000001000, 2**32 + 5, -3])
    assert [type(v) for v in values] == [np.uint64, np.uint32, np.int32, np.uint64]
    assert [int(v) for v in values] == [0x7F0000001000, 5, -3, 0]  # Triton's trailing scratch pointer: 0
    with pytest.raises(ValueError, match="parameter 0: type .pred"):
        lc.param_values(["pred"], [1])


def test_counters_result_reads_both_maps():
    table = la.LineTable(tuple(la.LineInfo(f"f:{i}", "f", i, None, None, 1, 1) for i in range(2)), (((0, 2),), ((1, 3),)), ())
    blocks = np.zeros(256, np.uint64)
    blocks[1], blocks[2], blocks[-1] = 10, 4, 1
    assert la.counters_result("lines_blocks", blocks, table) == {"instructions": (20, 12), "overflow": 1,
                                                                "block_threads": (10, 4)}
    samples = np.zeros(512, np.uint64)
    samples[1 + 4 * 2 + 3] = 2  # line 1: two samples of 4+ ticks
    assert la.counters_result("lines_time", samples, table) == {"ticks": (0, 0, 8), "clamped": 2,
                                                                "clamped_by_key": (0, 0, 2), "overflow": 0}
    assert la.counters_result("lines_total", np.array([40, 3], np.uint64), table) == {"total_ticks": 40, "excess": 3}
    with pytest.raises(ValueError, match="not a map of the lines tools"):
        la.counters_result("other", blocks, table)


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
def test_dry_run_builds_and_assembles_every_variant(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lines_cost.py"), "--dry-run", "--modes", "loop",
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    row = __import__("json").loads((tmp_path / "lines_cost.json").read_text())["rows"][0]
    assert row["kernel"] == "loop:loopk" and row["lines"] == 4
    # lines: staged, one row of 256 + 512 buckets and 2 sums (8 B each); lines_light: 32 global rows of 256;
    # lines unstaged: its hists' 32 rows each, its sum's 128 rows of 128 B (maps.stripes)
    assert row["map_bytes_lines"] == 6272 and row["map_bytes_lines_light"] == 32 * 2048
    assert row["map_bytes_lines_light@staged"] == 2048
    assert row["map_bytes_lines@global"] == 32 * (2048 + 4096) + 128 * 128


def test_spearman_matches_scipy_with_ties():
    from scipy.stats import spearmanr

    rng = np.random.RandomState(3)
    a, b = rng.randint(0, 5, 40), rng.randint(0, 5, 40)
    assert lc.spearman(a, b) == pytest.approx(spearmanr(a, b).statistic)


def test_ncu_per_pc_values_are_summed_per_source_line():
    places = {0x10: ("k.cu", 7), 0x20: ("k.cu", 7), 0x30: ("k.cu", 9), 0x40: None, 0x50: ("other.h", 3), 0x60: ("k.cu", 0)}
    blocks = lc.by_source_line([0x10, 0x20, 0x30, 0x40, 0x50, 0x60], [4, 6, 1, 99, 2, 5], [3, 1, 0, 7, 1, 1], places.get)
    assert dict(blocks) == {"k.cu": {7: (4.0, 10.0), 9: (0.0, 1.0)}, "other.h": {3: (1.0, 2.0)}}
    assert lc.own_file_lines(blocks, "k.cu") == {7: (4.0, 10.0), 9: (0.0, 1.0)}


def test_block_ticks_are_shared_among_lines_by_sass_weight():
    # block 0: lines 0 (2 PTX) and 1 (1 PTX); block 1: line 2 (4 PTX). SASS per line: 1, 3, 8 → sigma 0.5, 3, 2
    table = la.LineTable(tuple(la.LineInfo(f"f:{i}", "f", i, None, None, n, 1) for i, n in enumerate((2, 1, 4))),
                         (((0, 2), (1, 1)), ((2, 4),)), ())
    # entry 5 ticks; block 0: 40 ticks, weights 2 x 0.5 = 1 and 1 x 3 = 3 → 10 and 30; block 1: 16 → line 2
    assert list(la.block_ticks_to_lines([5, 40, 16], table, (1, 3, 8))) == [5, 10, 30, 16]
    # without SASS: PTX weights 2 : 1
    assert list(la.block_ticks_to_lines([0, 30, 0], table)) == [0, 20, 10, 0]
    # a block whose lines have no SASS at all: PTX weights
    assert list(la.block_ticks_to_lines([0, 30, 0], table, (0, 0, 8))) == [0, 20, 10, 0]


def test_ncu_pcs_with_samples_and_no_instruction_count_are_kept():
    """The BRA after the last EXIT (warps waiting for their stores to drain) has warp samples and no
    instructions-executed instance: its samples belong to its line as in ncu's own source page."""
    pcs, instructions, samples = lc.per_pc({0x10: 5.0, 0x20: 2.0}, {0x20: 7.0, 0x30: 119.0})
    assert pcs == [0x10, 0x20, 0x30] and instructions == [5.0, 2.0, 0.0] and samples == [0.0, 7.0, 119.0]
    places = {0x10: ("k.cu", 9), 0x20: ("k.cu", 10), 0x30: ("k.cu", 10)}
    assert dict(lc.by_source_line(pcs, instructions, samples, places.get)) == {"k.cu": {9: (0.0, 5.0), 10: (126.0, 2.0)}}


def test_time_variants_are_built_and_the_tools_before_too(tmp_path):
    """--block-time builds lines_blocktime and both time tools as they were before the probe time was left out."""
    case = lc.Case("loop", "loopk", (Path(lc.WORKLOADS) / ".." / ".." / "data" / "lines" / "loop.ptx").resolve().read_text(),
                   (4,), (128,), [0, 37])
    variants = lc.build_variants(case, unstaged_too=False, block_time=True)
    assert {"lines@blocktime", "lines@before", "lines@blocktime_before"} <= set(variants)
    new, before = variants["lines"][0], variants["lines@before"][0]
    assert new.count("%clock64") > before.count("%clock64")  # two reads per region start, one before
    names = [f["name"] for m in variants["lines"][1]["maps"] if m["name"] == "lines_total" for f in m["fields"]]
    assert names == ["ticks", "excess", "probe"]
    row: dict = {}
    ticks = lc.line_time({"ticks": (1, 2, 3), "clamped_by_key": (0, 0, 1), "excess": 4, "total_ticks": 20,
                          "probe_ticks": 10}, row, "lines")
    assert list(ticks) == [1, 2, 7] and row == {"lines_total_ticks_exact": True, "lines_probe_share": 0.5}


FAKE_NCU_REPORT = '''
"""A stand-in for Nsight Compute's ncu_report module: one range, two launches of one kernel, three PCs."""
INSTR = {0x10: 4.0, 0x20: 8.0}          # inst_executed per PC (the BRA at 0x30 never issues)
SAMPLES = {0x10: 1.0, 0x20: 2.0, 0x30: 5.0}
LINES = {0x10: ("k.cu", 3), 0x20: ("k.cu", 4), 0x30: ("k.cu", 4)}


class _Ids:
    def __init__(self, pcs):
        self.pcs = pcs

    def as_uint64(self, i):
        return self.pcs[i]


class _Metric:
    def __init__(self, values):
        self.pcs, self.values = list(values), list(values.values())

    def num_instances(self):
        return len(self.pcs)

    def has_correlation_ids(self):
        return True

    def correlation_ids(self):
        return _Ids(self.pcs)

    def as_double(self, i):
        return self.values[i]


class _Info:
    def __init__(self, place):
        self.place = place

    def file_name(self):
        return self.place[0]

    def line(self):
        return self.place[1]


class _Action:
    def metric_names(self):
        return ["inst_executed", "smsp__pcsamp_sample_count", "gpu__time_duration"]

    def metric_by_name(self, name):
        return {"inst_executed": _Metric(INSTR), "smsp__pcsamp_sample_count": _Metric(SAMPLES)}.get(name)

    def source_info(self, pc):
        return _Info(LINES[pc]) if pc in LINES else None


class _Range:
    def num_actions(self):
        return 2

    def action_by_idx(self, i):
        return _Action()


class _Report:
    def range_by_idx(self, i):
        return _Range()


def load_report(path):
    return _Report()
'''


def test_ncu_report_lines_sums_launches_and_keeps_pcs_that_only_have_samples(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    ncu = tmp_path / "bin" / "ncu"
    ncu.write_text("")
    (tmp_path / "extras" / "python").mkdir(parents=True)
    (tmp_path / "extras" / "python" / "ncu_report.py").write_text(FAKE_NCU_REPORT)
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    blocks, metrics = lc.ncu_report_lines(tmp_path / "r.ncu-rep", str(ncu), tmp_path, "cuda")
    # two launches summed; line 4 gets the BRA's samples although it never issued
    assert blocks == [("k.cu", {3: (2.0, 8.0), 4: (14.0, 16.0)})]
    assert metrics == "inst_executed / smsp__pcsamp_sample_count, 2 launches"
    assert (tmp_path / "ncu_cuda_metrics.txt").read_text().split() == ["inst_executed", "2",
                                                                       "smsp__pcsamp_sample_count", "3"]
