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
