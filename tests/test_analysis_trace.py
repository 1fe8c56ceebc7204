"""report and export end to end on trace directories written with neutrino.trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

import neutrino.trace as nt
from neutrino.analysis import perfetto, report

# Layouts of spec/tools.md (DSL tools) and of the hand-written TOML block_sched.
BLOCK_SCHED = [("start", "u64", 0), ("elapsed", "u32", 8), ("cuid", "u32", 12)]
BLOCK_SCHED_TOML = [("lstart", "u64", 0), ("elapse", "u32", 8), ("smid", "u32", 12)]
GMEM_BYTES = [("bytes", "u64", 0)]
DMAT = [("clock", "u64", 0), ("addr", "u64", 8)]


def section(name, level, fields, record_bytes, per_unit, cap=None, counts=None):
    """A MapSection whose unit u holds the records per_unit[u] (tuples in field order)."""
    units = len(per_unit)
    cap = cap or max(1, max(len(r) for r in per_unit))
    dt = nt.record_dtype([nt.Field(*f) for f in fields], record_bytes)
    recs = np.zeros((units, cap), dt)
    for u, rs in enumerate(per_unit):
        for k, r in enumerate(rs[:cap]):
            recs[u, k] = r
    counts = np.asarray(counts if counts is not None else [len(r) for r in per_unit], "<u4")
    buf = np.zeros(nt.buffer_bytes(units, cap, record_bytes), np.uint8)
    buf[: 4 * units] = counts.view(np.uint8)
    buf[nt.align(4 * units, 16):] = np.frombuffer(recs.tobytes(), np.uint8)
    return nt.MapSection(name, level, record_bytes, cap, units, fields, buf)


def write_trace(root, launches, probe_text=""):
    """A run directory (spec/trace-format.md) with one result file per launch.

    `launches`: dicts with kernel, grid, block, duration_ns, sections.
    """
    run = root / "20260101-000000_1"
    (run / "result").mkdir(parents=True)
    (run / "probe.toml").write_text(probe_text)
    lines = [{"event": "start", "time": 0, "pid": 1}]
    for i, launch in enumerate(launches):
        rel = f"result/{i}.bin"
        nt.write_result(run / rel, grid=launch["grid"], block=launch["block"], shared_bytes=0,
                        maps=launch["sections"])
        lines.append({"event": "launch", "time": 1, "index": i, "kernel": launch["kernel"],
                      "grid": list(launch["grid"]), "block": list(launch["block"]), "shared_bytes": 0,
                      "result": rel, "frame": "app.py:3 (main)", "duration_ns": launch.get("duration_ns")})
    lines.append({"event": "exit", "time": 2, "launches": len(launches)})
    (run / "event.log").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return run


# Known schedule, block (64,1,1) = 2 warps: SM0 runs blocks 0, 2, 3 (100 cycles, 10 apart),
# SM1 runs block 1 with a clock 4000 cycles ahead.
WARPS = [(1000, 100, 0), (1005, 90, 0), (5000, 100, 1), (5000, 100, 1),
         (1110, 100, 0), (1110, 100, 0), (1220, 100, 0), (1230, 90, 0)]


@pytest.fixture
def vadd_trace(tmp_path):
    n = 256  # threads of vadd; each moves 12 bytes (two 4-byte loads, one store)
    launches = [
        {"kernel": "vadd", "grid": (4, 1, 1), "block": (64, 1, 1), "duration_ns": 160.0,
         "sections": [section("block_sched", "warp", BLOCK_SCHED, 16, [[w] for w in WARPS]),
                      section("gmem_bytes", "thread", GMEM_BYTES, 8, [[(12,)]] * n)]},
        {"kernel": "vadd", "grid": (4, 1, 1), "block": (64, 1, 1), "duration_ns": 240.0,
         "sections": [section("block_sched", "warp", BLOCK_SCHED, 16, [[w] for w in WARPS]),
                      section("gmem_bytes", "thread", GMEM_BYTES, 8, [[(12,)]] * n)]},
        {"kernel": "copy", "grid": (2, 1, 1), "block": (32, 1, 1), "duration_ns": None,
         # thread t reads a[t] at clock 10*t then writes b[t] at 10*t + 5; thread 0 drops 1 record
         "sections": [section("dmat", "thread", DMAT, 16,
                              [[(10 * t, 0x1000 + 4 * t), (10 * t + 5, 0x7F000000 + 4 * t)] for t in range(64)],
                              counts=[3] + [2] * 63)]},
    ]
    return write_trace(tmp_path / "trace", launches)


def test_report_end_to_end(vadd_trace, capsys):
    assert report.main(str(vadd_trace.parent)) == 0  # the parent holding one run works too
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0].endswith(": 3 probed launches, 2 probed kernels")
    vadd = next(line for line in lines if line.startswith("vadd "))
    assert vadd.split()[:2] == ["vadd", "2"] and "block_sched, gmem_bytes" in vadd
    copy = next(line for line in lines if line.startswith("copy "))
    assert copy.split()[-3:] == ["128", "1", "-"]  # records, dropped, no duration
    gm = lines[lines.index("[gmem_bytes]") + 3].split()
    assert gm[:2] == ["vadd", "6144"]  # 2 launches x 256 threads x 12 bytes
    assert gm[-1] == "15.4"  # 6144 bytes / 400 ns
    bs_header = lines[lines.index("[block_sched]") + 1]
    bs = dict(zip([h.strip() for h in bs_header.split("  ") if h.strip()],
                  [c.strip() for c in lines[lines.index("[block_sched]") + 3].split("  ") if c.strip()]))
    assert bs["busy max/mean"] == "1.5" and bs["blocks/SM cv"] == "0.5" and bs["tail"] == "68.8%"
    assert bs["idle gaps"] == "4 (max 10 cycles)" and bs["blocks"] == "8" and bs["refill mean"] == "10 cycles"
    files = sorted(p.name for p in (vadd_trace / "report").iterdir())
    assert files == ["0000_vadd_block_sched.png", "0001_vadd_block_sched.png",
                     "0002_copy_dmat.json", "0002_copy_dmat.png"]
    meta = json.loads((vadd_trace / "report" / "0002_copy_dmat.json").read_text())
    assert meta["accesses"] == 128 and [g["addr_lo"] for g in meta["regions"]] == ["0x1000", "0x7f000000"]
    assert (vadd_trace / "report" / "0002_copy_dmat.png").read_bytes().startswith(b"\x89PNG")


def test_report_plots_per_kernel_limit(vadd_trace, tmp_path, capsys):
    assert report.main(str(vadd_trace), str(tmp_path / "p"), plots_per_kernel=1) == 0
    assert "(1 more launches not plotted" in capsys.readouterr().out
    assert not (tmp_path / "p" / "0001_vadd_block_sched.png").exists()
    assert (tmp_path / "p" / "0000_vadd_block_sched.png").exists()


def test_report_dmat_picture_two_diagonals(vadd_trace, tmp_path):
    from neutrino.analysis import dmat, report as report_mod

    out_dir = tmp_path / "plots"
    assert report.main(str(vadd_trace), str(out_dir), tool_options={"dmat": {"granule": 4}}) == 0
    meta = json.loads((out_dir / "0002_copy_dmat.json").read_text())
    nt_, na = meta["time_bins"], meta["addr_bins"]
    assert (nt_, na) == (128, 128)  # times 0..635 step by 5 (the tick): 128 whole-tick bins; 128 lines of 4 bytes
    assert (meta["tick"], meta["bin_width"]) == (5, 5)
    trace, launches = report_mod.load_trace(str(vadd_trace))
    rep = report_mod.analyze(trace, launches, tool_options={"dmat": {"granule": 4}})
    (r,) = rep.kernels["copy"].results["dmat"]
    shown = dmat.figure(r).axes[0].get_images()[0]
    coloured = np.ma.filled(shown.get_array(), 0) > 0  # [address bin, time bin], low address first
    # reads of a (bins 0-63) and writes of b (bins 64-127) both advance with time: two diagonals
    for row in range(128):
        t = 10 * (row % 64) + (5 if row >= 64 else 0)
        assert coloured[row].sum() == 1 and coloured[row, t // 5]


def test_report_bad_directories(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert report.main(str(tmp_path / "empty")) == 1
    err = capsys.readouterr().err
    assert "not a trace directory" in err and "Traceback" not in err
    assert report.main(str(tmp_path / "missing")) == 1
    assert "no such trace directory" in capsys.readouterr().err


def test_report_corrupt_result_file_is_a_warning(vadd_trace, capsys):
    (vadd_trace / "result" / "1.bin").write_bytes(b"garbage!" * 16)
    assert report.main(str(vadd_trace)) == 0
    out, err = capsys.readouterr()
    assert "warning: launch 1 (vadd)" in err and "bad magic" in err
    assert "Traceback" not in err


def test_report_toml_block_sched_field_names(tmp_path, capsys):
    sec = section("block_sched", "warp", BLOCK_SCHED_TOML, 16, [[w] for w in WARPS])
    run = write_trace(tmp_path, [{"kernel": "k", "grid": (4, 1, 1), "block": (64, 1, 1), "sections": [sec]}],
                      probe_text="[block_sched]\nbefore = 'mov.u64 %lstart, %clock64;'\n")
    assert report.main(str(run), plots=False) == 0
    assert "68.8%" in capsys.readouterr().out


def test_export_end_to_end(vadd_trace, tmp_path):
    out = tmp_path / "trace.json"
    perfetto.export(str(vadd_trace), str(out))
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    for e in events:
        assert {"ph", "pid", "name"} <= e.keys()
        if e["ph"] == "X":
            assert isinstance(e["ts"], float) and e["ts"] >= 0 and e["dur"] >= 0
            assert isinstance(e["tid"], int)
    blocks = [e for e in events if e.get("cat") == "block"]
    launches = [e for e in events if e.get("cat") == "launch"]
    assert len(blocks) == 8 and {e["pid"] for e in blocks} == {1, 2}
    assert len(launches) == 2  # copy has neither block_sched nor a duration
    # launch 0: 320 cycles span in 160 ns -> 2 GHz: block 2 starts 110 cycles = 0.055 us in
    b2 = next(e for e in blocks if e["pid"] == 1 and e["name"] == "block 2")
    assert b2["ts"] == pytest.approx(0.055) and b2["dur"] == pytest.approx(0.05)
    # launch 1 (3 GHz-ish fit) starts after launch 0 and the gap
    first_b = min(e["ts"] for e in blocks if e["pid"] == 2)
    assert first_b == pytest.approx((160.0 + perfetto.LAUNCH_GAP_NS) / 1e3)
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"launch 0: vadd", "launch 1: vadd", "launch 2: copy"}


def test_export_with_warps(vadd_trace, tmp_path):
    out = tmp_path / "w.json"
    perfetto.export(str(vadd_trace), str(out), warps=True, clock_ghz=1.0)
    events = json.loads(out.read_text())["traceEvents"]
    warps = [e for e in events if e.get("cat") == "warp"]
    assert len(warps) == 16
    w1 = next(e for e in warps if e["pid"] == 1 and e["name"] == "warp 1")  # start 1005, 90 cycles
    assert w1["ts"] == pytest.approx(0.005) and w1["dur"] == pytest.approx(0.09)


def test_export_bad_directory_raises_neutrino_error(tmp_path):
    from neutrino.errors import NeutrinoError

    with pytest.raises(NeutrinoError, match="no such trace directory"):
        perfetto.export(str(tmp_path / "nope"), str(tmp_path / "o.json"))
