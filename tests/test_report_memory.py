"""`neutrino report` memory does not grow with the trace: a launch it does not plot keeps a few
hundred bytes (block_sched on 132 SMs kept 26 KB per launch before: 2 GB for a 2 GB job), and a job's
report keeps no rank's pictures once they are drawn."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import tracemalloc
from pathlib import Path

import numpy as np

from neutrino.analysis import ranks
from neutrino.analysis import report as R
from neutrino.analysis import retain
from neutrino.analysis import synthetic as S
from neutrino.tools.block_sched import analysis as block_sched

GRID, BLOCK, SMS = (264, 1, 1), (64, 1, 1), 132


def block_run(path: Path, launches: int, *, rank: int | None = None, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    b = S.RunBuilder(path, rank=rank)
    b.add_kernel("k", [S.BLOCK_SCHED])
    for _ in range(launches):
        warps = S.lognormal_warps(rng, GRID, BLOCK, sms=SMS)
        b.launch("k", GRID, BLOCK, [S.block_sched_section(GRID, BLOCK, *warps)], duration_ns=1e5)
    return b.close()


def kept_bytes(run: Path) -> tuple[int, R.Report]:
    """Bytes the report of `run` holds (the trace and its launches dropped before measuring: what a
    launch caches of its own is the trace reader's)."""
    gc.collect()  # garbage of earlier tests is not freed inside the measurement
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        trace, launches = R.load_trace(str(run))
        report = R.analyze(trace, launches, keep_full=0)
        del trace, launches
        gc.collect()  # what the report holds, not garbage waiting for the collector
        return tracemalloc.get_traced_memory()[0] - before, report
    finally:
        tracemalloc.stop()


def test_block_sched_launch_kept_in_under_1_kb(tmp_path):
    kept_bytes(block_run(tmp_path / "warm", 2))  # first-use caches (imports, attrs, numpy) outside the difference
    (small, _), (large, report) = kept_bytes(block_run(tmp_path / "a", 4)), kept_bytes(block_run(tmp_path / "b", 36))
    per_launch = (large - small) / 32
    assert per_launch < 1024, f"{per_launch:.0f} bytes kept per block_sched launch on {SMS} SMs"
    (kept,) = report.kernels.values()
    numbers = block_sched.kernel_numbers(kept.results["block_sched"])
    assert numbers["sms"] == SMS and numbers["blocks"] == 36 * 264


def test_summaries_only_is_idempotent_and_keeps_the_sm_count(tmp_path):
    trace, launches = R.load_trace(str(block_run(tmp_path / "r", 2)))
    report = R.analyze(trace, launches)
    full = block_sched.kernel_numbers(report.kernels["k"].results["block_sched"])
    retain.summaries_only(report)
    retain.summaries_only(report)
    results = report.kernels["k"].results["block_sched"]
    assert len(results[0].timeline) == 0 and len(results[0].stats.sms) == SMS
    assert json.dumps(block_sched.kernel_numbers(results), default=str) == json.dumps(full, default=str)


def test_a_job_report_holds_no_results_of_ranks_already_reported(tmp_path, monkeypatch):
    job = tmp_path / "job" / "20261127-000000_1"
    for rank in range(3):
        block_run(job / f"rank{rank}", 3, rank=rank, seed=rank)
    held = []
    original = ranks.combined_table

    def spy(reports, kind="rank"):
        held.extend((rep.kernels["k"].launches, len(rep.kernels["k"].results)) for _, rep in reports)
        return original(reports, kind)

    monkeypatch.setattr(ranks, "combined_table", spy)
    with contextlib.redirect_stdout(io.StringIO()):
        assert ranks.main(str(job), str(tmp_path / "pictures"), plots_per_kernel=0) == 0
    assert held == [(3, 0)] * 3  # each rank's launches counted, none of its results held
    assert len(list((tmp_path / "pictures").rglob("*.png"))) >= 9


def test_a_job_report_reads_the_same_rows_and_stragglers(tmp_path):
    """csv and json rows and the cross-rank section of a job (read one rank at a time) against each
    rank's own report: rank 2's kernel is 1.5 times slower, the straggler."""
    from neutrino.analysis import synthetic as S

    job = tmp_path / "job" / "20261127-000000_2"
    for rank in range(3):
        S.kernel_runs(job / f"rank{rank}", seed=rank, kernels=2, launches=12, rank=rank,
                      shift={"k1": 1.5} if rank == 2 else None)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ranks.main(str(job), output_format="json") == 0
    doc = json.loads(out.getvalue())
    assert [(row["rank"], row["kernel"]) for row in doc["kernels"]] == [(r, k) for r in range(3) for k in ("k0", "k1")]
    for rank in range(3):
        trace, launches = R.load_trace(str(job / f"rank{rank}"))
        alone = R.kernel_rows(R.analyze(trace, launches, keep_full=0))
        assert [{**row, "rank": rank} for row in alone] == [r for r in doc["kernels"] if r["rank"] == rank]
    stragglers = doc["cross_rank"]["stragglers"]
    assert [(s["kernel"], s["rank"]) for s in stragglers] == [("k1", 2)]
