"""Issue 29's acceptance, the add-up, on the CPU: the `--timings` phases of a profiled run (plus its share of the
teardown) against its measured wall time over an unprofiled run of the same program, on paired differences
(benchmarks/startup.py, `paired_rows`). The fake driver (tests/fakecuda, its libcupti, fake ptxas) and the
ctypes program benchmarks/startup_tiny.py; three interleaved rounds of plain, nothing probed and warm.

The shared CPU machine moves single runs by tens of milliseconds, so the band here is wider than the
acceptance's 10% (which the GPU runs check: docs/startup.md); it still fails when a phase of the size of the
start-up group goes uncounted (the second half of the test, on the same runs)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neutrino.runtime.start.phases import START_PHASES

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fakecuda"
spec = importlib.util.spec_from_file_location("startup_bench", ROOT / "benchmarks" / "startup.py")
startup = importlib.util.module_from_spec(spec)
spec.loader.exec_module(startup)

NOTHING = "-p block_sched -k nomatchxyz (nothing probed), warm"
WARM = "-p block_sched, code cache warm"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("addup")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(FAKE / "fakecuda.c")], check=True)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", f"-I{ROOT / 'shim'}", "-Wl,-soname,libcupti.so.13", "-o",
                    str(d / "libcupti.so.13"), str(FAKE / "fakecupti.c"), "-lpthread"], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(d), NEUTRINO_CUPTI=str(d / "libcupti.so.13"),
               NEUTRINO_PTXAS=str(FAKE / "fake_ptxas.py"), PYTHONPATH=str(ROOT))
    env.pop("FAKECUDA_BUFPARAM", None)
    env.pop("NEUTRINO_CACHE_DIR", None)  # startup.py gives every configuration its own cache
    out = d / "runs.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "startup.py"), "--program", "tiny", "--steps", "20",
                        "--rows", "plain,nomatch,warm", "--repeat", "3", "--tools", "block_sched", "--budget", "240",
                        "--json", str(out)], env=env, capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert all(row["rc"] == 0 for row in rows), [row.get("stderr_tail") for row in rows if row["rc"]]
    return rows


def test_the_phases_add_up_to_the_paired_differences(runs):
    estimates = startup.paired_rows(runs)
    for label in (NOTHING, WARM):
        whole, less_pre_cuda = estimates[label]
        assert whole["pairs"] == 3 and less_pre_cuda["pairs"] == 3, estimates[label]
        assert whole["diff"] > 0.05, whole  # a profiled run costs something to account for
        for e in (whole, less_pre_cuda):
            assert 0.85 <= e["ratio"] <= 1.15, (label, e)


def test_the_add_up_fails_when_a_phase_goes_uncounted(runs):
    """The same runs, the start-up group (wire, imports, tool, runtime) left out of the accounted seconds:
    the ratio falls out of the band, so the check above can tell a missing phase."""
    estimates = startup.paired_rows(runs)
    short = startup.paired_rows(runs, leave_out=START_PHASES)
    for label in (NOTHING, WARM):
        missing = estimates[label][0]["accounted"] - short[label][0]["accounted"]
        assert missing > 0.05, (label, missing)
        assert short[label][0]["ratio"] < 0.85, (label, short[label][0])


def test_the_pre_cuda_step_is_left_in_when_the_runtime_started_inside_it():
    """pre_cuda_seconds: a run whose runtime started before the program's `imported` mark has our work in that
    step: the step is not taken off (None), so the second estimate never hides our seconds."""
    row = {"program": {"marks": {"started": 10.0, "imported": 10.5}}, "runtime_at": 10.6}
    assert startup.pre_cuda_seconds(row) == pytest.approx(0.5)
    assert startup.pre_cuda_seconds({**row, "runtime_at": 10.2}) is None
    assert startup.pre_cuda_seconds({"program": {"marks": {"started": 1.0}}}) is None
    assert startup.pre_cuda_seconds({"program": None}) is None
