"""`neutrino export --merge-into KINETO.json`: our tracks added to a synthetic torch.profiler trace."""

from __future__ import annotations

import json

import pytest

from neutrino import cli
from neutrino.analysis import kineto
from tests.context_tables import GEMM
from tests.test_export_perfetto import vadd_run

BASE = 1_700_000_000_000_000_000  # Unix ns


def kineto_trace(path, *, base=BASE, offset_ns=0, with_base=True):
    """A torch>=2.4 trace: ts in us relative to baseTimeNanoseconds; Kineto's own GPU kernels on pid 0.
    Our synthetic timeline has gemm at [1000, 3000] ns and vadd at 10_000 / 20_000: ours + BASE."""
    def ts(ns):
        return (ns + BASE + offset_ns - (base if with_base else 0)) / 1e3

    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242, "ts": ts(500), "dur": 3.0},
              {"ph": "X", "cat": "kernel", "name": GEMM, "pid": 0, "tid": 7, "ts": ts(1000), "dur": 2.0},
              {"ph": "X", "cat": "kernel", "name": "vadd", "pid": 0, "tid": 7, "ts": ts(10_000), "dur": 0.16},
              {"ph": "X", "cat": "kernel", "name": "vadd", "pid": 0, "tid": 7, "ts": ts(20_000), "dur": 0.24}]
    doc = {"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms", "traceEvents": events}
    if with_base:
        doc["baseTimeNanoseconds"] = base
    path.write_text(json.dumps(doc))
    return path


def shift_run(run, by):
    """Our context tables moved by `by` ns (to put them on the Unix clock of the Kineto trace)."""
    import numpy as np

    from neutrino.analysis import context

    from neutrino.timeline import record_dtype

    for name in ("timeline.bin", "ranges.bin"):
        data = bytearray((run / name).read_bytes())
        size = int.from_bytes(data[12:16], "little")
        dtype = record_dtype(size) if name == "timeline.bin" else context.RANGES_DTYPE
        recs = np.frombuffer(data, dtype=dtype, offset=16).copy()
        recs["start_ns"] += np.uint64(by)
        recs["end_ns"] += np.uint64(by)
        if "host_ns" in recs.dtype.names:
            recs["host_ns"][recs["host_ns"] > 0] += np.uint64(by)
        (run / name).write_bytes(bytes(data[:16]) + recs.tobytes())


@pytest.mark.parametrize("with_base", [True, False])
def test_merge_places_our_blocks_on_kinetos_clock(tmp_path, with_base):
    run = vadd_run(tmp_path)
    shift_run(run, BASE)
    k = kineto_trace(tmp_path / "k.json", base=BASE - 5_000_000, with_base=with_base)
    line = kineto.merge_into(str(run), str(k))
    out = json.loads((tmp_path / "k.neutrino.json").read_text())
    assert out["schemaVersion"] == 1 and out.get("baseTimeNanoseconds") == (BASE - 5_000_000 if with_base else None)
    theirs = [e for e in out["traceEvents"] if not str(e.get("cat", "")).startswith("neutrino")
              and e["ph"] == "X"]
    assert len(theirs) == 4  # Kineto's events unchanged
    ours = [e for e in out["traceEvents"] if str(e.get("cat", "")).startswith("neutrino")]
    kernel_0 = next(e for e in theirs if e["name"] == "vadd")
    blocks = [e for e in ours if e["cat"] == "neutrino block" and e["args"]["launch"] == 0]
    assert len(blocks) == 4
    for b in blocks:  # inside Kineto's own slice of that kernel
        assert kernel_0["ts"] - 1e-6 <= b["ts"] and b["ts"] + b["dur"] <= kernel_0["ts"] + kernel_0["dur"] + 1e-6
    ranges = [e for e in ours if e["cat"] == "neutrino range"]
    assert {e["name"] for e in ranges} == {"step", "forward", "async"}
    assert "clocks checked on 3 matched kernel(s)" in line and "shifted" not in line
    procs = [e for e in out["traceEvents"] if e.get("name") == "process_name"]
    assert procs[0]["pid"] == 4243 and procs[0]["args"]["name"].startswith("neutrino: run 0")
    assert not [e for e in ours if e["name"] == GEMM]  # Kineto has the unprobed kernels already


def test_merge_shifts_to_kinetos_kernels_when_clocks_differ(tmp_path):
    run = vadd_run(tmp_path)  # our timeline left near 0: another clock than Kineto's
    k = kineto_trace(tmp_path / "k.json", offset_ns=0)
    out_path = tmp_path / "merged.json"
    assert cli.main(["export", str(run), "--merge-into", str(k), "-o", str(out_path)]) == 0
    out = json.loads(out_path.read_text())
    kernel_1 = [e for e in out["traceEvents"] if e["name"] == "vadd" and e.get("cat") == "kernel"][1]
    ours = [e for e in out["traceEvents"] if e.get("cat") == "neutrino block" and e["args"]["launch"] == 1]
    assert ours and all(kernel_1["ts"] - 1e-6 <= b["ts"] <= kernel_1["ts"] + kernel_1["dur"] for b in ours)


def test_merge_into_a_file_that_is_not_a_kineto_trace(tmp_path, capsys):
    run = vadd_run(tmp_path)
    (tmp_path / "x.json").write_text("[1, 2]")
    assert cli.main(["export", str(run), "--merge-into", str(tmp_path / "x.json")]) != 0
    assert "not a torch.profiler (Kineto) JSON trace" in capsys.readouterr().err


def test_absolute_ts_beside_a_base_is_recognised(tmp_path):
    """torch 2.11 wrote absolute `ts` (Unix us) and a `baseTimeNanoseconds` too: adding the base would put
    Kineto's kernels decades away from ours, so it is left out; no shift, blocks inside Kineto's slice."""
    run = vadd_run(tmp_path)
    shift_run(run, BASE)
    k = kineto_trace(tmp_path / "k.json", with_base=False)
    doc = json.loads(k.read_text())
    doc["baseTimeNanoseconds"] = BASE - 7_000_000
    k.write_text(json.dumps(doc))
    line = kineto.merge_into(str(run), str(k))
    assert "clocks checked on 3 matched kernel(s)" in line and "shifted" not in line, line
    out = json.loads((tmp_path / "k.neutrino.json").read_text())
    kernel_0 = next(e for e in out["traceEvents"] if e.get("cat") == "kernel" and e["name"] == "vadd")
    blocks = [e for e in out["traceEvents"] if e.get("cat") == "neutrino block" and e["args"]["launch"] == 0]
    assert blocks and all(kernel_0["ts"] - 1e-6 <= b["ts"] <= kernel_0["ts"] + kernel_0["dur"] for b in blocks)


def test_kineto_window_with_fewer_launches_is_matched_by_its_best_alignment():
    """Ours has a warm-up launch before the program's profile (5 vs Kineto's 4): pairing from the first
    would mismatch every pair; the alignment whose differences agree is found, on another clock too."""
    ours = [100, 1_000_000, 1_500_000, 1_700_000, 1_700_400]
    theirs = [t + 7_000 for t in ours[1:]]
    assert kineto.matched_differences(ours, theirs) == [7_000.0] * 4
    assert kineto.matched_differences(theirs, ours) == [-7_000.0] * 4
    assert kineto.matched_differences(ours, []) == []
