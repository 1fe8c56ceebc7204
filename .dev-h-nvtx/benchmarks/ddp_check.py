"""Checks of the DDP acceptance run (benchmarks/ddp_acceptance.sh). usage: ddp_check.py OUT CONFIG...

OUT/<config>/losses.rank<R>.json are the ranks' losses (benchmarks/ddp_step.py), OUT/plain
the unprobed run's; OUT/trace_<config>/ the probed runs' trace directories. Checks, for
every probed CONFIG:

* losses and final parameters bitwise identical to the plain run's, rank by rank;
* one job directory holding one run directory per rank (rank0, rank1, ...), each with a
  `start` event that names its rank and a `context` event naming its GPU;
* every probed launch written (index records with status 0; as many as the exit event
  counts); for block_sched, every launch's map complete: exactly one record per warp;
* the job report (`neutrino report JOB`, without plots) and `neutrino export JOB --perfetto` succeed; the JSON parses
  and has one process per rank.

Prints one line per check and `ACCEPTANCE PASSED` or `ACCEPTANCE FAILED`; exit status 0 or 1.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import neutrino.trace as nt
from neutrino.analysis import ranks as job_analysis

FAILURES: list[str] = []


def check(ok: bool, what: str) -> bool:
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        FAILURES.append(what)
    return ok


def losses(run: Path) -> dict[int, dict]:
    runs = (json.loads(p.read_text()) for p in sorted(run.glob("losses.rank*.json")))
    return {d["rank"]: d for d in runs}


def check_losses(out: Path, config: str) -> int:
    plain, probed = losses(out / "plain"), losses(out / config)
    check(bool(plain) and sorted(plain) == sorted(probed), f"{config}: a losses file per rank ({sorted(probed)})")
    for rank in sorted(plain):
        got = probed.get(rank, {})
        same = got.get("losses") == plain[rank]["losses"] and got.get("params") == plain[rank]["params"]
        check(same, f"{config}: rank {rank} losses and parameters bitwise identical to plain "
                    f"({plain[rank]['backend']}, {len(plain[rank]['losses'])} steps)")
    return len(plain)


def index_statuses(run: Path) -> np.ndarray:
    path = run / "result" / "index.bin"
    if not path.exists():
        return np.zeros(0, dtype=np.uint32)
    raw = path.read_bytes()
    n = max(len(raw) - 16, 0) // nt.INDEX_RECORD.itemsize
    return np.frombuffer(raw, nt.INDEX_RECORD, count=n, offset=16)["status"]


def check_rank(config: str, rank: int, run: Path) -> None:
    t = nt.load(run)
    start = next((e for e in t.events if e["event"] == "start"), {})
    check(start.get("rank") == rank, f"{config}: {run.name}: start event says rank {start.get('rank')}, "
                                     f"world {start.get('world_size')}, env defaults {start.get('env_defaults')}")
    devices = sorted({(e.get("device"), e.get("arch"), e.get("pci_bus_id")) for e in t.events if e["event"] == "context"})
    check(bool(devices), f"{config}: rank {rank}: context event(s) {devices}")
    statuses = index_statuses(run)
    (exit_ev,) = [e for e in t.events if e["event"] == "exit"] or [{}]
    check(len(t.launches) > 0 and int((statuses != 0).sum()) == 0 and exit_ev.get("launches") == len(t.launches),
          f"{config}: rank {rank}: {len(t.launches)} probed launches written "
          f"(exit event: {exit_ev.get('launches')}; failed records: {int((statuses != 0).sum())}; "
          f"fallbacks: {exit_ev.get('fallbacks')}; dropped: {exit_ev.get('dropped')}; "
          f"NCCL kernels untouched: {exit_ev.get('collectives')})")
    if config != "block_sched":
        return
    incomplete = []
    for la in t.launches:
        md = la.maps["block_sched"]
        warps = int(np.prod(la.grid)) * -(-int(np.prod(la.block)) // 32)
        if md.units != warps or not bool((np.asarray(md.counts) == 1).all()):
            incomplete.append(f"launch {la.index} {la.kernel[:40]}: units {md.units}/{warps}, "
                              f"counts {np.unique(np.asarray(md.counts)).tolist()[:4]}")
    check(not incomplete, f"block_sched: rank {rank}: one record per warp in every launch "
                          f"({len(t.launches) - len(incomplete)}/{len(t.launches)})" +
          ("".join(f"\n       {s}" for s in incomplete[:5])))


def check_job(out: Path, config: str, world: int) -> None:
    tracedir = out / f"trace_{config}"
    jobs = [p for p in sorted(tracedir.iterdir()) if nt.find_rank_dirs(p)] if tracedir.is_dir() else []
    others = [p.name for p in sorted(tracedir.iterdir()) if p not in jobs] if tracedir.is_dir() else []
    if not check(len(jobs) == 1, f"{config}: one job directory in {tracedir} ({[p.name for p in jobs]}; others: {others})"):
        return
    job = jobs[0]
    ranks = nt.find_rank_dirs(job)
    check([(r, p.name) for r, p in ranks] == [(r, f"rank{r}") for r in range(world)],
          f"{config}: one trace per rank: {[p.name for _, p in ranks]}")
    for rank, run in ranks:
        check_rank(config, rank, run)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):  # `neutrino report JOB` without its plots (minutes of PNGs)
        rc = job_analysis.report_main(str(job), plots=False)
    (out / f"report_{config}.txt").write_text(text.getvalue())
    check(rc == 0 and "== all ranks" in text.getvalue(), f"{config}: neutrino report over the job (rc {rc}; "
                                                         f"{out / f'report_{config}.txt'})")
    print("\n".join("       " + line for line in text.getvalue().split("== all ranks", 1)[-1].splitlines()[:14]))
    cli = [sys.executable, "-m", "neutrino.cli"]
    perfetto = out / f"{config}.perfetto.json"
    exp = subprocess.run(cli + ["export", str(job), "--perfetto", str(perfetto)], capture_output=True, text=True,
                         timeout=300)
    try:
        doc = json.loads(perfetto.read_text())
        procs = sorted(e["pid"] for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name")
        slices = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X")
    except (OSError, ValueError, KeyError) as e:
        procs, slices, doc = [], 0, {"otherData": {"error": str(e)}}
    check(exp.returncode == 0 and procs == list(range(1, world + 1)),
          f"{config}: combined Perfetto export parses: {len(procs)} processes (one per rank), {slices} slices, "
          f"time base {doc['otherData'].get('time')}; {exp.stderr.strip()[-200:]}")


def main() -> int:
    out, configs = Path(sys.argv[1]), sys.argv[2:]
    for config in configs:
        world = check_losses(out, config)
        check_job(out, config, world)
    print("ACCEPTANCE PASSED" if not FAILURES else f"ACCEPTANCE FAILED ({len(FAILURES)} check(s))")
    return 0 if not FAILURES else 1


if __name__ == "__main__":
    sys.exit(main())
