"""The built-in dmat tool records %globaltimer: its report and picture are in ns; traces written
before (a `clock` field of %clock64 cycles) still read, on a cycle axis (spec/tools.md, dmat)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tomlkit

import neutrino.language as nl
from neutrino import trace as nt
from neutrino.analysis import report as R
from neutrino.analysis import synthetic as S

TOOL = Path(__file__).resolve().parent.parent / "neutrino" / "tools" / "dmat" / "probe.py"
GRID, BLOCK = (4, 1, 1), (32, 1, 1)


def builtin_map() -> dict:
    """The dmat map the built-in tool declares, as the trace's kernel.json lists it."""
    text = nl.compile_file(TOOL)
    declared = tomlkit.parse(text).unwrap()["map"]["dmat"]
    fields, offset = [], 0
    for spec in declared["fields"]:
        name, kind = spec.split(":")
        fields.append({"name": name, "type": kind, "offset": offset})
        offset += 8
    return {"name": "dmat", "level": declared["level"], "type": "array", "record_bytes": offset, "cap": 3,
            "fields": fields}, text


def dmat_run(tmp_path: Path, info: dict, probe_text: str | None, tool: str) -> Path:
    """One launch: thread t of block b accesses at 1000 + 300 b + 7 k (k = 0, 1, 2), address
    0x10000 + 4 t + 0x1000 b: first time 1000, last 1000 + 900 + 14, span 915."""
    threads = int(np.prod(GRID)) * int(np.prod(BLOCK))
    time_field = info["fields"][0]["name"]
    dtype = nt.record_dtype(nt._fields(info["fields"]), info["record_bytes"])
    recs = np.zeros((threads, 3), dtype)
    block = np.arange(threads) // BLOCK[0]
    recs[time_field] = 1000 + 300 * block[:, None] + 7 * np.arange(3)[None, :]
    recs["addr"] = (0x10000 + 4 * (np.arange(threads) % BLOCK[0]) + 0x1000 * block)[:, None]
    b = S.RunBuilder(tmp_path / tool)
    b.events[0]["tool"] = tool
    b.add_kernel("k", [info])
    b.launch("k", GRID, BLOCK, [S.array_section(info, threads, 3, np.full(threads, 3, np.uint32), recs)])
    run = b.close()
    if probe_text is not None:
        (run / "probe.toml").write_text(probe_text)
    return run


def report_of(run: Path, capsys) -> tuple[dict, dict]:
    """(the kernel's dmat numbers from --format json, the picture's description)."""
    assert R.main(str(run), output_format="json") == 0
    row = json.loads(capsys.readouterr().out)["kernels"][0]
    assert R.main(str(run), str(run / "pictures")) == 0
    capsys.readouterr()
    (described,) = (run / "pictures").glob("*_dmat.json")
    assert (run / "pictures" / described.name.replace(".json", ".png")).stat().st_size > 0
    return row, json.loads(described.read_text())


def test_builtin_dmat_records_globaltimer():
    info, text = builtin_map()
    assert [f["name"] for f in info["fields"]] == ["gtime", "addr"]
    assert "%globaltimer" in text and "%clock64" not in text


def test_builtin_dmat_report_and_picture_are_in_ns(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    info, text = builtin_map()
    row, described = report_of(dmat_run(tmp_path, info, text, "dmat"), capsys)
    assert row["dmat.span_ns"] == 915 and row["dmat.clock_span"] is None
    assert row["dmat.accesses"] == 4 * 32 * 3
    assert described["time_unit"] == "ns" and described["t0"] == 1000 and described["t_span"] == 915
    assert described["x"] == "time since the launch's first access (ns, %globaltimer), left to right"


def test_old_dmat_traces_read_on_a_cycle_axis(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    info, _ = builtin_map()
    old = {**info, "fields": [{**info["fields"][0], "name": "clock"}, info["fields"][1]]}
    old_text = "[map.dmat]\nfields = [\"clock:u64\", \"addr:u64\"]\n# mov.u64 %_d0, %clock64;\n"
    row, described = report_of(dmat_run(tmp_path, old, old_text, "dmat"), capsys)
    assert row["dmat.clock_span"] == 915 and row["dmat.span_ns"] is None
    assert described["time_unit"] == "cycles" and described["t_span"] == 915
    assert "%clock64" in described["x"]


def test_time_bins_are_whole_timer_ticks():
    """%globaltimer steps by 32 ns (an H200, 2026-11-26): 1,000 ticks in at most 512 bins are 500 bins
    of 2 ticks (64 ns), each holding the same accesses; bins of t_span / 512 = 62.4 ns would hold
    one tick or two, in stripes. A single time off the step makes the tick 1 again."""
    from neutrino.tools.dmat import analysis as dmat

    times = 5_000_000 + 32 * np.repeat(np.arange(1000), 3)
    addrs = np.full(len(times), 0x1000, np.uint64)
    h = dmat.dmat_histogram(times, addrs)
    assert (h.tick, h.bin_width, h.counts.shape[0], h.t_span, h.time_extent) == (32, 64, 500, 31_969, 32_000)
    assert h.counts.sum(axis=1).tolist() == [6] * 500
    assert h.time_edges[1] - h.time_edges[0] == 64
    odd = dmat.dmat_histogram(np.r_[times, times[-1] + 5], np.r_[addrs, addrs[:1]])
    assert odd.tick == 1 and odd.bin_width == -(-31_974 // 512) and odd.counts.sum() == 3001
    # a tick found on the first chunk and broken by a later one: the gcd over both
    builder = dmat.DmatBuilder()
    for chunk in (times[:1500], np.r_[times[1500:], times[-1] + 16]):
        builder.scan(chunk, np.full(len(chunk), 0x1000, np.uint64))
    assert builder.result().tick == 16
