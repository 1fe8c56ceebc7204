"""`neutrino diff` on a real GPU: one Triton kernel run with two tile sizes under block_sched, and
several times with the same one (issue 23's acceptance: the diff names the kernel and the direction
of the change; two identical runs: no significant difference).

Processes: BLOCK=1024 four times (A1..A4), BLOCK=64 twice (B1, B2), LAUNCHES launches each after a
short GPU warm-up; diff leaves each shape's first launch out (--warmup 1, its default). Compared:
one run per side (A1 vs B1, A1 vs A2: the default minimum effect of one-run diffs applies) and
several runs per side (A1 A2 --vs B1 B2, A1 A2 --vs A3 A4: the test on run summaries).

Run on the device machine: `python -m pytest tests/gpu/test_gpu_diff.py -q -s`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from gpuutil import WORKLOADS, base_env, gpu

pytestmark = gpu

BLOCK_METRICS = ("launch_span", "block_span")
LAUNCHES = 200
RUNS = {"A1": 1024, "A2": 1024, "A3": 1024, "A4": 1024, "B1": 64, "B2": 64}


def neutrino(*args, env, timeout=600):
    return subprocess.run([sys.executable, "-m", "neutrino", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Traces of the tiled kernel: RUNS (name -> BLOCK), each one process."""
    pytest.importorskip("triton")
    tmp = tmp_path_factory.mktemp("diff")
    env = base_env(tmp)
    env["TRITON_CACHE_DIR"] = str(tmp / "tc")
    out = {}
    for name, block in RUNS.items():
        path = tmp / f"{name}.trace"
        started = time.perf_counter()
        r = neutrino("-p", "block_sched", "-o", path, "--", sys.executable, WORKLOADS / "w_triton_tiles.py", block,
                     LAUNCHES, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        print(f"{name}: BLOCK={block}, {LAUNCHES} launches, {time.perf_counter() - started:.1f} s")
        out[name] = path
    return out, env


def _diff(side_a, side_b, env, *extra) -> tuple[dict, str]:
    """The json document of `diff A... --vs B...` and a text summary of its rows (printed)."""
    r = neutrino("diff", *side_a, "--vs", *side_b, *extra, "--format", "json", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    text = "\n".join([f"diff runs {doc['runs']}: {doc['a']} -> {doc['b']}", *doc["notes"]] + [
        f"{c['rank']} {c['kernel'][:30]} {c['metric']} runs {c['runs_a']}/{c['runs_b']} n {c['n_a']}/{c['n_b']} "
        f"change {c['change']} [{c['ci_low']}, {c['ci_high']}] p {c['p']:.2g} q {c['q']:.2g} {c['reason']}"
        for c in doc["comparisons"]])
    print(text)
    return doc, text


def _tiled(doc: dict) -> list[dict]:
    return [c for c in doc["comparisons"] if "tiled_fma" in c["kernel"]]


def test_diff_names_the_slower_blocks_of_the_small_tile(traces):
    paths, env = traces
    doc, text = _diff([paths["A1"]], [paths["B1"]], env)
    tiled = _tiled(doc)
    assert tiled, f"the kernel was not matched by name and shape:\n{text}"
    assert doc["runs"] == [1, 1] and any("one run" in n for n in doc["notes"]), doc["notes"]
    spans = {c["metric"]: c for c in tiled if c["metric"] in BLOCK_METRICS}
    assert set(spans) == set(BLOCK_METRICS), text
    for metric, c in spans.items():  # BLOCK=64: most threads idle, 16x the tile iterations: longer blocks
        assert c["significant"] and c["change"] > 50 and c["reason"].startswith("slower"), (metric, c)
    # --fail-above gates on it: exit 1 and the regression named on stderr; `diff A B` is the same as A --vs B
    r = neutrino("diff", paths["A1"], paths["B1"], "--fail-above", "10", env=env)
    assert r.returncode == 1 and "tiled_fma" in r.stderr and "block_span" in r.stderr, r.stderr[-2000:]


def test_several_runs_per_side_see_the_slower_blocks(traces):
    """Two runs per side: the test on run summaries has about 2 degrees of freedom, so p < 0.05 is
    asserted and significance (q over every comparison) only reported; a significant row has the
    right direction."""
    paths, env = traces
    doc, text = _diff([paths["A1"], paths["A2"]], [paths["B1"], paths["B2"]], env)
    rows = {c["metric"]: c for c in _tiled(doc)}
    assert doc["runs"] == [2, 2] and "block_span" in rows, text
    c = rows["block_span"]
    assert (c["runs_a"], c["runs_b"], c["test"]) == (2, 2, "runs"), c
    assert c["change"] > 50 and c["ci_low"] > 0 and c["p"] < 0.05, c
    assert all(r["reason"].startswith("slower") for r in rows.values() if r["significant"]
               and r["metric"] in BLOCK_METRICS), text


def test_two_identical_runs_find_nothing(traces):
    """One run per side: only changes above the one-run minimum effect count; what the launches
    alone would call significant (--min-effect 0) is printed for the record."""
    paths, env = traces
    print(neutrino("diff", paths["A1"], paths["A2"], "--min-effect", "0", env=env).stdout)
    doc, text = _diff([paths["A1"]], [paths["A2"]], env)
    tiled = _tiled(doc)
    assert {c["metric"] for c in tiled} >= set(BLOCK_METRICS), text
    assert not [c for c in tiled if c["significant"]], text


def test_identical_runs_several_per_side_find_nothing(traces):
    paths, env = traces
    doc, text = _diff([paths["A1"], paths["A2"]], [paths["A3"], paths["A4"]], env)
    tiled = _tiled(doc)
    assert {c["metric"] for c in tiled} >= set(BLOCK_METRICS) and doc["runs"] == [2, 2], text
    assert {c["test"] for c in tiled} == {"runs"}, text
    assert not [c for c in tiled if c["significant"]], text
