"""Issue 29's acceptance, the add-up, on the CPU: the `--timings` phases of a profiled run (plus its share of the
teardown) against its measured wall time over an unprofiled run of the same program, on paired differences
(benchmarks/startup.py, `paired_rows`). The fake driver (tests/fakecuda, its libcupti, fake ptxas) and the
ctypes program benchmarks/startup_tiny.py; four interleaved rounds of plain, nothing probed and warm.

The shared 2-core CPU machine moves single runs by tens of milliseconds, and under load our threads (the
timeline's, the tables' flusher) take cores from the program: measured 0.94-1.03 idle, 0.86-0.93 at a load
average of 4. So the band here is 20%, wider than the acceptance's 10% (which the GPU runs check:
docs/startup.md); it still fails when the start-up and exit groups go uncounted (the second test, on the
same runs: 0.3-0.7)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neutrino.runtime.start.phases import EXIT_PHASES, START_PHASES

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
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(FAKE / "fakecuda.c")],
                   check=True)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", f"-I{ROOT / 'shim'}", "-Wl,-soname,libcupti.so.13", "-o",
                    str(d / "libcupti.so.13"), str(FAKE / "fakecupti.c"), "-lpthread"], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(d), NEUTRINO_CUPTI=str(d / "libcupti.so.13"),
               NEUTRINO_PTXAS=str(FAKE / "fake_ptxas.py"), PYTHONPATH=str(ROOT))
    env.pop("FAKECUDA_BUFPARAM", None)
    env.pop("NEUTRINO_CACHE_DIR", None)  # startup.py gives every configuration its own cache
    out = d / "runs.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "startup.py"), "--program", "tiny", "--steps", "20",
                        "--rows", "plain,nomatch,warm", "--repeat", "4", "--tools", "block_sched", "--budget", "240",
                        "--json", str(out)], env=env, capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert all(row["rc"] == 0 for row in rows), [row.get("stderr_tail") for row in rows if row["rc"]]
    return rows


def test_the_phases_add_up_to_the_paired_differences(runs):
    estimates = startup.paired_rows(runs)
    for label in (NOTHING, WARM):
        whole, less_pre_cuda = estimates[label]
        assert whole["pairs"] == 4 and less_pre_cuda["pairs"] == 4, estimates[label]
        assert whole["diff"] > 0.05, whole  # a profiled run costs something to account for
        for e in (whole, less_pre_cuda):
            assert 0.8 <= e["ratio"] <= 1.2, (label, e)


def test_the_add_up_fails_when_a_phase_goes_uncounted(runs):
    """The same runs, the start-up and exit groups left out of the accounted seconds: the ratio falls out
    of the band, so the check above can tell missing phases."""
    estimates = startup.paired_rows(runs)
    short = startup.paired_rows(runs, leave_out=START_PHASES + EXIT_PHASES)
    for label in (NOTHING, WARM):
        missing = estimates[label][0]["accounted"] - short[label][0]["accounted"]
        assert missing > 0.05, (label, missing)
        assert short[label][0]["ratio"] < 0.75, (label, short[label][0])


def test_the_pre_cuda_step_is_left_in_when_the_runtime_started_inside_it():
    """pre_cuda_seconds: a run whose runtime started before the program's `imported` mark has our work in that
    step: the step is not taken off (None), so the second estimate never hides our seconds."""
    row = {"program": {"marks": {"started": 10.0, "imported": 10.5}}, "runtime_at": 10.6}
    assert startup.pre_cuda_seconds(row) == pytest.approx(0.5)
    assert startup.pre_cuda_seconds({**row, "runtime_at": 10.2}) is None
    assert startup.pre_cuda_seconds({"program": {"marks": {"started": 1.0}}}) is None
    assert startup.pre_cuda_seconds({"program": None}) is None


def _row(run: str, wall: float, teardown: float, imported: float, added: float | None = None, **extra) -> dict:
    row = {"run": run, "wall": wall, "rc": 0, "teardown": teardown,
           "program": {"marks": {"started": 100.0, "imported": 100.0 + imported}}, **extra}
    if added is not None:
        row["added"] = added
    return row


def test_paired_rows_on_runs_of_known_cost():
    """paired_rows against differences worked by hand: each profiled run pairs with the nearest plain run
    (the earlier on a tie); accounted = added + (its teardown - its plain run's teardown); the second estimate
    takes each run's pre-CUDA step (`imported` - `started`) off both walls."""
    warm = "-p t, code cache warm"
    rows = [_row("plain", 10.0, 1.0, 2.0),
            _row(warm, 10.9, 1.1, 2.3, added=0.5),  # pairs with plain 0: diff 0.9, accounted 0.6, less 0.6
            _row("plain", 11.0, 1.2, 3.0),
            _row(warm, 11.5, 1.2, 2.5, added=0.4),  # plain 2 (distance 1 both sides: the earlier): 0.5, 0.4, 1.0
            _row("plain", 9.0, 0.8, 1.0),
            _row(warm, 9.6, 0.8, 1.2, added=0.55)]  # plain 4: 0.6, 0.55, 0.4
    whole, less = startup.paired_rows(rows)[warm]
    assert whole["pairs"] == less["pairs"] == 3
    assert whole["diff"] == pytest.approx(0.6) and whole["accounted"] == pytest.approx(0.55)  # medians
    assert whole["ratio"] == pytest.approx(0.55 / 0.6) and whole["verdict"] == "adds up"
    assert less["diff"] == pytest.approx(0.6) and less["accounted"] == pytest.approx(0.55)
    assert (whole["low"], whole["high"]) == (pytest.approx(0.55), pytest.approx(0.75))  # inclusive quartiles
    # a phase left out comes off that run's accounted seconds
    rows[1]["phases"] = {"imports": 0.3}
    assert startup.paired_rows(rows, leave_out=("imports",))[warm][0]["accounted"] == pytest.approx(0.4)
    # without the step's marks the second estimate has no pairs
    for row in rows:
        row["program"] = None
    assert startup.paired_rows(rows)[warm][1] == {"pairs": 0}


def test_lanes_pair_each_run_with_its_rounds_plain_run():
    """--lanes: a round's runs are made at the same time, so a profiled run's plain run is its own round's, even
    where another round's plain run sits nearer in the list; without rounds, the nearest in run order."""
    rows = [{"run": "plain", "rc": 0, "round": 0, "wall": 10.0}, {"run": "x", "rc": 0, "round": 0, "wall": 11.0},
            {"run": "x", "rc": 0, "round": 1, "wall": 12.0}, {"run": "plain", "rc": 0, "round": 1, "wall": 9.0}]
    assert startup.nearest_plain(rows, 1) is rows[0] and startup.nearest_plain(rows, 2) is rows[3]
    flat = [{k: v for k, v in r.items() if k != "round"} for r in rows]
    assert startup.nearest_plain(flat, 2) is flat[3] and startup.nearest_plain(flat, 1) is flat[0]
    runs = startup.row_plan(["plain", "nomatch", "warm"], "block_sched", 3)
    fills, rounds = startup.in_rounds(runs, ["plain", "nomatch", "warm"], 3)
    assert [f[0] for f in fills] == [startup.FILL.format(tool="block_sched")]
    assert [[r[0] for r in group] for group in rounds] == [[runs[1][0], runs[2][0], runs[3][0]]] * 3
    assert len(startup.lane_setups({}, 4)) == 4 and all(e["CUDA_VISIBLE_DEVICES"] == str(i) for i, (e, _) in
                                                        enumerate(startup.lane_setups({}, 4)))


def test_fixed_effects_recover_known_effects():
    """Walls made of known parts (configuration + round + GPU, rotated as --lanes places them, plus a small
    alternating error): the fit gives each configuration's part back and the error's size as the residual sd."""
    effect = {"plain": 0.0, "a": 0.25, "b": 1.5}
    rounds, lanes = [0.0, 2.0, -1.0, 0.5, 3.0, -0.5], [0.0, 0.7, -0.3]
    rows = []
    for k, offset in enumerate(rounds):
        for i, name in enumerate(effect):
            lane = (i + k) % len(lanes)
            rows.append({"run": name, "rc": 0, "round": k, "lane": lane, "added": effect[name],
                         "wall": 20.0 + effect[name] + offset + lanes[lane]})
    text = startup.fixed_effects_table(rows)
    got = {line.split(" | ")[0].lstrip("| "): float(line.split(" | ")[1]) for line in text.splitlines()
           if line.startswith(("| a ", "| b "))}
    assert got == {"a": 0.25, "b": 1.5}
    assert "residual sd 0.000 s" in text
    assert startup.fixed_effects_table([{k: v for k, v in r.items() if k != "round"} for r in rows]) == ""
