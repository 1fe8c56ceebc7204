"""Does `neutrino report JOB` name the rank that arrives late at a collective, and the step? (issue 26)

Driver (default): runs a 2-rank job `--runs` times (default 10) under
`neutrino -p block_sched -- torchrun --nproc_per_node=2 delayed_rank.py worker …` and reads each
job's report: the delay is found when the step table names rank 1 at the delayed step and no
other step has a late rank. Prints one line per run and the tally. Each run leaves, under `--work`,
`report<N>.txt` (the report) and `events<N>.jsonl` (its ranks' event.log events that tell Neutrino's
own work: instrument, phase, module, ...; each with its `rank`); with `$OUT` set, a compact
`$OUT/delayed_rank/run<N>.txt` (the run's line, the late-arrival section, each rank's step ranges and
own-work events in ms from the first step) comes back with the device run for diagnosis:

    python benchmarks/delayed_rank.py [--runs 10] [--steps 10] [--delay-step 3] [--delay-ms 5] [--work DIR]

Worker (started by torchrun): one warm-up step and a barrier, then `--steps` steps, each inside
`neutrino.annotate(f"step {i}")`: a matmul (cuBLAS), a Triton kernel of its own (probed by
block_sched), an all-reduce (NCCL) and a synchronize (so each step range holds its GPU work). Rank 1 runs `torch.cuda._sleep` for
`--delay-ms` ms (calibrated with CUDA events) just before its all-reduce of step `--delay-step`.
Needs 2 GPUs (NCCL: one rank per GPU) and the CUPTI timeline (timeline.bin) in the trace.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neutrino.errors import NeutrinoError  # noqa: E402
from neutrino.trace import find_rank_dirs  # noqa: E402


def spin_cycles_per_ms() -> float:
    """GPU clock cycles that torch.cuda._sleep spins per millisecond, measured with CUDA events."""
    import torch

    torch.cuda._sleep(1_000_000)  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    return 20_000_000 / start.elapsed_time(end)


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    import neutrino

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    scale = _triton_scale()
    x = torch.randn(2048, 2048, device="cuda")
    grad = torch.randn(1 << 22, device="cuda")
    spin = int(args.delay_ms * spin_cycles_per_ms())

    def step_work(delay: bool):
        nonlocal grad
        y = x @ x
        grad = scale(grad, 0.5) + y.view(-1)[: grad.numel()] * 1e-6
        if delay:
            torch.cuda._sleep(spin)
        dist.all_reduce(grad)
        torch.cuda.synchronize()

    step_work(False)  # warm-up outside the steps: cuBLAS handles, Triton compile, probe instrumentation
    dist.barrier()
    torch.cuda.synchronize()
    for step in range(args.steps):
        with neutrino.annotate(f"step {step}"):
            step_work(rank == 1 and step == args.delay_step)
    dist.destroy_process_group()
    print(f"rank {rank} done: {args.steps} steps, spin {spin} cycles ({args.delay_ms} ms) at step {args.delay_step}")


def _triton_scale():
    """x * factor by a Triton kernel of the program's own (block_sched probes it)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _scale(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)

    def scale(x, factor):
        out = torch.empty_like(x)
        _scale[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), factor, BLOCK=1024)
        return out

    return scale


def late_steps(report_text: str) -> dict[str, str]:
    """step -> late rank (`-` for none), from the step table of `neutrino report JOB`."""
    if "[late arrivals at collectives]" not in report_text:
        return {}
    section = report_text.split("[late arrivals at collectives]", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\s*(step \d+)\s+(\d+)\s+(rank \d+|-)\s+([\d.]+)", line)
        if m:
            rows[m.group(1)] = (m.group(3), float(m.group(4)))
    return rows


def job_command(args, tracedir: Path) -> list[str]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    return ([sys.executable, "-m", "neutrino", "-p", "block_sched", "--tracedir", str(tracedir), "--"] + torchrun
            + [str(Path(__file__).resolve()), "worker", "--steps", str(args.steps), "--delay-step",
               str(args.delay_step), "--delay-ms", str(args.delay_ms)])


def one_run(args, run: int, env: dict) -> tuple[bool, str]:
    """Run the job once, report it; (delay found, a line about it)."""
    tracedir = Path(args.work) / f"run{run}"
    shutil.rmtree(tracedir, ignore_errors=True)  # one job per trace directory: the report reads that one
    t0 = time.time()
    job = subprocess.run(job_command(args, tracedir), env=env, capture_output=True, text=True, timeout=600)
    if job.returncode != 0:
        return False, f"run {run}: job failed (rc {job.returncode}): {job.stderr[-1500:]}"
    jobs = [d for d in tracedir.iterdir() if find_rank_dirs(d)]
    if len(jobs) != 1:
        return False, f"run {run}: expected one job directory under {tracedir}, found {[d.name for d in jobs]}"
    rep = subprocess.run([sys.executable, "-m", "neutrino", "report", str(jobs[0])], env=env, capture_output=True,
                         text=True, timeout=600)
    Path(args.work, f"report{run}.txt").write_text(rep.stdout + rep.stderr)
    events = diagnostic_events(jobs[0])
    Path(args.work, f"events{run}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    steps = late_steps(rep.stdout)
    want = f"step {args.delay_step}"
    late = steps.get(want, ("?", 0.0))
    false = {s: r for s, (r, _) in steps.items() if s != want and r != "-"}
    found = late[0] == "rank 1"
    hosts = host_launch_leads(jobs[0])
    for s, r in false.items():  # the program's own lateness: that rank's host launched the collective late
        false[s] = f"{r} (its host launched the all-reduce {hosts.get(s, float('nan')):.0f} us after the other's)"
    summary = next((line for line in rep.stdout.splitlines() if "arrives late at" in line), "(no late rank)")
    line = (f"run {run}: {'found' if found else 'MISSED'}{' +others' if false else ''}: {want} late rank {late[0]} by {late[1]:.1f} us; "
            f"other steps late: {false or 'none'}; {summary.strip()}; {len(steps)} steps; {time.time() - t0:.0f} s")
    if os.environ.get("OUT"):
        out = Path(os.environ["OUT"], "delayed_rank")
        out.mkdir(parents=True, exist_ok=True)
        (out / f"run{run}.txt").write_text(run_digest(line, rep.stdout, jobs[0], events))
    return (found, bool(false)), line


def host_launch_leads(job: Path) -> dict[str, float]:
    """step -> how much later (us) the last rank's host called its all-reduce launch than the other
    rank's (timeline.bin host_ns, one host's clock): the program's own lateness, independent of the
    GPU start times the report compares."""
    from neutrino.ranges import timeline_ranges
    from neutrino.timeline import read_timeline

    calls: dict[str, list[int]] = {}
    for _, run_dir in find_rank_dirs(job):
        timeline = read_timeline(run_dir)
        for record, enclosing in zip(timeline, timeline_ranges(run_dir)):
            steps = [name for name in enclosing if name.startswith("step ")]
            if steps and "nccl" in str(record["name"]).lower() and int(record["host_ns"]) > 0:
                calls.setdefault(steps[-1], []).append(int(record["host_ns"]))
    return {step: (max(t) - min(t)) / 1e3 for step, t in calls.items() if len(t) == 2}


# event.log events that tell Neutrino's own host work and the trace's set-up (not per-launch events)
DIAGNOSTIC_EVENTS = ("start", "instrument", "phase", "module", "no_ptx", "fallback", "dropped", "timeline",
                     "timeline_counts", "timeline_host_gap", "context_tables", "launch_args", "tensor_walk", "exit")


def diagnostic_events(job: Path) -> list[dict]:
    """The DIAGNOSTIC_EVENTS of every rank's event.log, each with its `rank` (unreadable lines skipped)."""
    out = []
    for rank, run_dir in find_rank_dirs(job):
        for text in (run_dir / "event.log").read_text(errors="replace").splitlines():
            try:
                event = json.loads(text)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") in DIAGNOSTIC_EVENTS:
                out.append({"rank": rank, **event})
    return out


def run_digest(line: str, report_text: str, job: Path, events: list[dict]) -> str:
    """The run's line, the report's late-arrival section, and per rank its step ranges and its own-work
    events (instrument, module, no_ptx, tensor_walk) as [start, end] ms from the earliest step start
    (host clock, Unix epoch), and its phase totals."""
    from neutrino.analysis import context

    section = report_text.split("[late arrivals at collectives]", 1)
    out = [line, "", "[late arrivals at collectives]" + section[1].split("\n\n", 1)[0] if len(section) > 1
           else "(no late-arrival section)", ""]
    spans = {}
    for rank, run_dir in find_rank_dirs(job):
        try:
            ranges = context.read_ranges(run_dir)
        except (OSError, ValueError, NeutrinoError) as e:  # a diagnostic: say why, keep the rest
            out.append(f"rank {rank}: ranges.bin not read: {e}")
            continue
        if ranges is not None:
            spans[rank] = [(str(r["name"]), int(r["start_ns"]), int(r["end_ns"])) for r in ranges
                           if str(r["name"]).startswith("step")]
    t0 = min((s for rows in spans.values() for _, s, _ in rows), default=0)
    for rank, rows in sorted(spans.items()):
        out.append(f"rank {rank} steps (ms): " + ", ".join(f"{n} [{(s - t0) / 1e6:.2f}, {(e - t0) / 1e6:.2f}]"
                                                          for n, s, e in rows))
    for e in events:
        if e["event"] in ("instrument", "module", "no_ptx", "tensor_walk") and t0 and e.get("seconds"):
            end = float(e["time"]) * 1e9 - t0
            what = {"instrument": f"{str(e.get('kernel', '?'))[:50]} cache {e.get('cache')}",
                    "tensor_walk": f"{e.get('modules')} modules"}.get(e["event"], str(e.get("module")))
            out.append(f"rank {e['rank']} {e['event']} {what}: "
                       f"[{(end - float(e['seconds']) * 1e9) / 1e6:.2f}, {end / 1e6:.2f}] ms")
        elif e["event"] == "phase":
            out.append(f"rank {e['rank']} phase {e.get('phase')}: {e.get('seconds')} s ({e.get('count')} runs)")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="driver", choices=("driver", "worker"))
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--delay-step", type=int, default=3)
    p.add_argument("--delay-ms", type=float, default=5.0)
    p.add_argument("--work", default="/tmp/delayed_rank")
    args = p.parse_args(argv)
    if args.mode == "worker":
        worker(args)
        return 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (the device tool's KINDS.md)
    env.setdefault("TRITON_CACHE_DIR", str(Path(args.work) / "triton"))
    env.setdefault("NEUTRINO_CACHE_DIR", str(Path(args.work) / "ncache"))
    Path(args.work).mkdir(parents=True, exist_ok=True)
    found = others = 0
    for run in range(args.runs):
        (ok, other), line = one_run(args, run, env)
        found += ok
        others += ok and other
        print(line, flush=True)
    print(f"delayed rank 1 named at step {args.delay_step} in {found}/{args.runs} runs; "
          f"{others} of them also name another step (see each run's line for its host launch lead)")
    return 0 if found == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
