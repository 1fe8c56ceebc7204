"""Analysis at scale: a synthetic 64-rank job of N GB of map records, exported to Parquet,
queried with DuckDB, reported and diffed, with the time and peak memory of each step.

    python benchmarks/analysis_scale.py                 # 0.5 GB (a quick look)
    python benchmarks/analysis_scale.py --gb 3 --keep   # keep the job and dataset in --dir
    python benchmarks/analysis_scale.py --gb 50         # the target of issue 23

The job (`<dir>/job/20261126-000000_1/rank<R>/`) is written with the trace writer
(neutrino.analysis.synthetic): per rank, two kernels; `attn` has a thread-level `dmat`-like
array map (clock, addr; cap 2, most threads filling one or two records) and a block_sched map,
`gemm` a block_sched map and the gmem_bytes and tensorop sum maps. Map data is random (the
worst case for compression). Each step runs as its own process so that its peak RSS
(getrusage of the child) is its own:

  export   neutrino export JOB --parquet DIR       MB/s = map-record bytes read / wall time
  query    a per-kernel, per-rank aggregate of the largest map table (DuckDB, 2 threads here)
  report   neutrino report JOB --format csv        (peak RSS)
  diff     neutrino diff JOB JOB                   (peak RSS)

Prints a Markdown table (docs/analysis-scale.md holds the one measured on the CI-sized box).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from neutrino import trace as nt  # noqa: E402
from neutrino.analysis import synthetic as S  # noqa: E402

RANKS = 64
MEM = {"name": "mem", "level": "thread", "type": "array", "record_bytes": 16, "cap": 2,
       "fields": [{"name": "clock", "type": "u64", "offset": 0}, {"name": "addr", "type": "u64", "offset": 8}]}
ATTN_GRID, GEMM_GRID, BLOCK = (264, 1, 1), (132, 1, 1), (256, 1, 1)


def _templates(rng: np.random.Generator) -> dict[str, list[nt.MapSection]]:
    """One frame's maps per kernel (written again for each launch of a rank: generating GBs of random
    data would time the generator, not the export)."""
    threads = int(np.prod(ATTN_GRID)) * int(np.prod(BLOCK))
    dtype = nt.record_dtype(nt._fields(MEM["fields"]), 16)
    recs = np.zeros((threads, 2), dtype)
    recs["clock"] = rng.integers(0, 2 ** 40, (threads, 2), dtype=np.uint64)
    recs["addr"] = rng.integers(0, 2 ** 48, (threads, 2), dtype=np.uint64)
    counts = rng.integers(1, 4, threads).astype(np.uint32)  # 1, 2 or 3 tried: some dropped
    attn = [S.block_sched_section(ATTN_GRID, BLOCK, *S.lognormal_warps(rng, ATTN_GRID, BLOCK, sms=132)),
            S.array_section(MEM, threads, 2, counts, recs)]
    gemm = [S.block_sched_section(GEMM_GRID, BLOCK, *S.lognormal_warps(rng, GEMM_GRID, BLOCK, sms=132)),
            S.counters_section(S.GMEM_BYTES, [1 << 30, 33792]), S.counters_section(S.TENSOROP, [4096, 128, 32])]
    return {"attn": attn, "gemm": gemm}


def generate(job: Path, gb: float, seed: int = 0) -> int:
    """Write the job; returns the bytes of map sections written."""
    rng = np.random.default_rng(seed)
    per_rank = gb * 1e9 / RANKS
    total = 0
    for rank in range(RANKS):
        maps = _templates(rng)
        frame = sum(m.size for m in maps["attn"]) + sum(m.size for m in maps["gemm"])
        b = S.RunBuilder(job / f"rank{rank}", rank=rank, pid=1000 + rank)
        b.add_kernel("attn", [S.BLOCK_SCHED, MEM])
        b.add_kernel("gemm", [S.BLOCK_SCHED, S.GMEM_BYTES, S.TENSOROP])
        for _ in range(max(1, round(per_rank / frame))):
            b.launch("attn", ATTN_GRID, BLOCK, maps["attn"], duration_ns=float(rng.lognormal(np.log(2e5), 0.02)))
            b.launch("gemm", GEMM_GRID, BLOCK, maps["gemm"], duration_ns=float(rng.lognormal(np.log(1e5), 0.02)))
        b.close()
        total += b.map_bytes
    return total


def _child(code: str) -> tuple[float, float, str, float]:
    """(seconds, peak RSS in MB, stdout, CPU seconds) of a Python child process running `code` (its own
    rusage, with its waited-for workers: wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=err,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode()
    if proc.returncode != 0:  # a step that fails is no measurement (diff exits 0 without --fail-above)
        raise SystemExit(f"step failed ({proc.returncode}):\n{errors[-3000:]}")
    return seconds, usage.ru_maxrss / 1024, text, usage.ru_utime + usage.ru_stime  # ru_maxrss: KiB on Linux


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=0.5, help="GB of map records in the job (default 0.5)")
    ap.add_argument("--dir", default="/tmp/neutrino-analysis-scale", help="where to write the job and the dataset")
    ap.add_argument("--keep", action="store_true", help="keep the job and dataset (default: deleted at the end)")
    ap.add_argument("--workers", type=int, default=1,
                    help="export processes (default 1: its peak RSS is then the whole export's)")
    ap.add_argument("--skip", action="append", default=[], choices=("export", "report", "diff"),
                    help="leave a step out (export: the queries too)")
    args = ap.parse_args(argv)
    work = Path(args.dir)
    shutil.rmtree(work, ignore_errors=True)
    job, ds = work / "job" / "20261126-000000_1", work / "dataset"
    try:
        started = time.perf_counter()
        map_bytes = generate(job, args.gb)
        print(f"generated {map_bytes / 1e9:.2f} GB of map records, {RANKS} ranks, in "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
        rows = _measure(job, ds, map_bytes, args.skip, args.workers)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nmachine: {platform.node()}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
          f"load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| step | what | time (s) | throughput | peak RSS (MB) |\n| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


def _measure(job: Path, ds: Path, map_bytes: int, skip: list[str], workers: int) -> list[list[str]]:
    rows = [] if "export" in skip else _measure_dataset(job, ds, map_bytes, workers)
    for step in ("report", "diff"):
        if step in skip:
            continue
        argv = ["report", str(job), "--format", "csv"] if step == "report" else ["diff", str(job), str(job)]
        seconds, rss, text, cpu = _child(f"import sys; from neutrino.cli import main; sys.exit(main({argv!r}))")
        print(f"{step}: {len(text.splitlines())} lines; {_gist(step, text)}", file=sys.stderr)
        rows.append([step, f"neutrino {' '.join(argv[:1])} on the job", f"{seconds:.1f} ({cpu:.1f} CPU)",
                     f"{map_bytes / 1e6 / seconds:.0f} MB/s", f"{rss:.0f}"])
    return rows


def _measure_dataset(job: Path, ds: Path, map_bytes: int, workers: int) -> list[list[str]]:
    """The export and the two queries over its dataset."""
    rows = []
    seconds, rss, _, cpu = _child(f"from neutrino.analysis.columnar import export; "
                                  f"export({str(job)!r}, {str(ds)!r}, workers={workers})")
    rows.append(["export", f"{map_bytes / 1e9:.2f} GB of map records -> Parquet ({_du(ds) / 1e9:.2f} GB), "
                 f"{workers} process(es)",
                 f"{seconds:.1f} ({cpu:.1f} CPU)", f"{map_bytes / 1e6 / seconds:.0f} MB/s "
                 f"({map_bytes / 1e6 / cpu:.0f} MB/s per CPU second)", f"{rss:.0f}"])
    queries = (
        ("query", "per-kernel, per-rank count/sum/avg of map_mem (a scan of every record)",
         "SELECT rank, kernel, count(*) AS n, sum(clock) AS s, avg(addr) AS mean FROM map_mem "
         "GROUP BY rank, kernel ORDER BY rank, kernel"),
        ("query (field_stats)", "the same numbers from the per-launch field_stats table",
         "SELECT rank, kernel, sum(records) FILTER (field = 'clock') AS n, sum(sum) FILTER (field = 'clock') AS s, "
         "sum(sum) FILTER (field = 'addr') / sum(records) FILTER (field = 'addr') AS mean FROM field_stats "
         "WHERE map = 'mem' GROUP BY rank, kernel ORDER BY rank, kernel"),
    )
    answers = []
    for step, what, sql in queries:
        code = ("import hashlib, time; from pathlib import Path; from neutrino.analysis import query\n"
                f"t = time.perf_counter(); cols, out = query.run_sql(Path({str(ds)!r}), {sql!r})\n"
                "print(time.perf_counter() - t, len(out), "
                "hashlib.sha256(repr([(r[0], r[1], int(r[2]), int(r[3])) for r in out]).encode()).hexdigest())")
        seconds, rss, out, cpu = _child(code)
        inner, groups, answer = out.split()
        answers.append(answer)
        rows.append([step, f"{what} ({groups} groups)", f"{float(inner):.2f}",
                     f"{map_bytes / 1e6 / float(inner):.0f} MB/s of map records", f"{rss:.0f}"])
    if len(set(answers)) != 1:
        raise SystemExit("the two queries disagree")
    return rows


def _gist(step: str, text: str) -> str:
    """What the step printed, in one line: diff's summary line, report's row count."""
    if step == "diff":
        return next((line for line in text.splitlines() if line.startswith("diff ")), "(no summary line)")
    return f"{max(0, len(text.splitlines()) - 1)} kernel rows"


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


if __name__ == "__main__":
    sys.exit(main())
