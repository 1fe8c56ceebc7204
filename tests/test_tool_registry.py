"""A tool is one folder, found through the registry (neutrino.toolbox, spec/tools.md "A tool's folder").

The test adds a tool from a temporary directory (NEUTRINO_TOOL_PATH), with no edit anywhere else,
and runs it through `list`, `instrument`, a run on the fake driver and `report`; the report binds
the tool's map to the tool's own analysis by the tool's name recorded in the run, never by the
map's fields (its field is named `bytes`, as gmem_bytes' is).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from neutrino import toolbox
from tests.test_first_hour import FAKE, VEC_PTX, fakecuda, neutrino  # noqa: F401 - fakecuda is a fixture

PROBE = '''# loadbytes: bytes read by global loads, per launch (a test's tool).
[loadbytes]
position = "ld.global"
datamodel = "sum"
before = "SAVE.u64 {BYTES};"
'''

ANALYSIS = '''"""The analysis of loadbytes: the launch's one counter, summed over a kernel's launches."""
MAP_NAMES = ("loadbytes",)
HAS_PLOTS = False


def analyze_launch(launch, md, probe_text=None):
    return int(md.totals()["bytes"])


def kernel_numbers(results):
    return {"load_bytes": sum(results), "launches_read": len(results)}


def kernel_summary(results):
    return {"load bytes": str(sum(results)), "launches read": str(len(results))}


def figures(result):
    return []
'''


@pytest.fixture()
def tool_dir(tmp_path, monkeypatch):
    folder = tmp_path / "tools" / "loadbytes"
    folder.mkdir(parents=True)
    (folder / "probe.toml").write_text(PROBE)
    (folder / "analysis.py").write_text(ANALYSIS)
    monkeypatch.setenv(toolbox.TOOL_PATH_ENV, str(tmp_path / "tools"))
    return tmp_path / "tools"


def test_a_folder_on_the_tool_path_is_a_tool(tool_dir):
    tool = toolbox.get("loadbytes")
    assert tool is not None and not tool.builtin and tool.probe == tool_dir / "loadbytes" / "probe.toml"
    assert tool.summary() == "bytes read by global loads, per launch (a test's tool)."
    probes = toolbox.load_probes("loadbytes")
    assert probes.tool == "loadbytes" and list(probes.maps) == ["loadbytes"]
    assert toolbox.load_probes(str(tool_dir / "loadbytes" / "probe.toml")).tool == "loadbytes"
    assert toolbox.analysis(tool).MAP_NAMES == ("loadbytes",)
    assert "gmem_bytes" in toolbox.tool_names()  # the built-ins stay, first


def test_a_built_in_name_is_not_taken_by_a_folder_on_the_path(tool_dir):
    (tool_dir / "dmat").mkdir()
    (tool_dir / "dmat" / "probe.toml").write_text(PROBE.replace("[loadbytes]", "[dmat]"))
    assert toolbox.get("dmat").builtin


def test_a_bad_tool_manifest_is_one_line(tool_dir):
    (tool_dir / "loadbytes" / "tool.toml").write_text('analysis = "no such-tool"\n')
    with pytest.raises(toolbox.ToolError, match=r"tool\.toml: analysis must name a tool"):
        toolbox.registry()


def test_list_instrument_run_and_report_a_tool_from_its_folder(tool_dir, tmp_path, fakecuda):  # noqa: F811
    env = {toolbox.TOOL_PATH_ENV: str(tool_dir)}
    listed = neutrino("list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "loadbytes          bytes read by global loads, per launch (a test's tool)." in listed.stdout

    out = tmp_path / "probed.ptx"
    instrumented = neutrino("instrument", str(VEC_PTX), "-p", "loadbytes", "-o", str(out), env=env)
    assert instrumented.returncode == 0, instrumented.stderr
    assert "%nt_buf_loadbytes" in out.read_text() or "loadbytes" in out.read_text()

    run_env = {**env, "LD_LIBRARY_PATH": str(fakecuda), "FAKECUDA_BUFPARAM": "4",
               "NEUTRINO_CACHE_DIR": str(tmp_path / "cache")}
    run = neutrino("-p", "loadbytes", "-o", str(tmp_path / "trace"), "--", sys.executable, str(FAKE / "app.py"),
                   str(VEC_PTX), "saxpy4", "2", cwd=tmp_path, env=run_env, timeout=300)
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in (tmp_path / "trace" / "event.log").read_text().splitlines()]
    [start] = [e for e in events if e["event"] == "start"]
    assert start["tool"] == "loadbytes" and start["tool_maps"] == ["loadbytes"]

    report = neutrino("report", str(tmp_path / "trace"), env=env)
    assert report.returncode == 0, report.stderr
    assert "[loadbytes]" in report.stdout and "launches read" in report.stdout, report.stdout
    assert "[gmem_bytes]" not in report.stdout and "GB/s" not in report.stdout
    numbers = neutrino("report", str(tmp_path / "trace"), "--format", "json", env=env)
    rows = json.loads(numbers.stdout)
    rows = rows if isinstance(rows, list) else rows.get("kernels", rows)
    assert any(row.get("loadbytes.launches_read") == 2 for row in rows), numbers.stdout

    # The same probe as a user's own file (not a registered tool): the generic table, not the tool's analysis.
    own = tmp_path / "own.toml"
    own.write_text(PROBE.replace("[loadbytes]", "[traffic]"))
    run = neutrino("-p", str(own), "-o", str(tmp_path / "own"), "--", sys.executable, str(FAKE / "app.py"),
                   str(VEC_PTX), "saxpy4", "1", cwd=tmp_path, env=run_env, timeout=300)
    assert run.returncode == 0, run.stderr
    report = neutrino("report", str(tmp_path / "own"), env=env)
    assert "[map traffic (sum; the probe's own map: no built-in analysis)]" in report.stdout, report.stdout
