"""The exit cost of block_sched's analyze hook (issue 29's `exit_hooks` phase), on the CPU.

    python benchmarks/startup_exit_hook.py [--kernels 15] [--launches 28] [--blocks 500] [--repeat 3]

Writes a synthetic run directory shaped like the torch.compile program's (benchmarks/startup_program.py
on an H200: 15 probed kernels, 425 probed launches, 13.7 MB of results, ~2,000 warps a launch): an
event log of `launch` events and one result file per launch holding a block_sched map (per-warp
start, elapsed, SM; blocks of 4 warps dealt to 132 SMs in waves). Then, in a fresh interpreter that
has imported what a profiled process has by its exit (numpy, attrs), it times what
`Runtime.finish` runs as `exit_hooks`: `run_over_trace` with block_sched's hook, its `finish()`
included. Prints the median seconds over --repeat interpreters, the launches analysed, and the
exit line's first kernels. `--hook FILE` (repeatable) times other hook files, interleaved: e.g.
`git show 012e69f:neutrino/tools/block_sched/exit_hook.py > /tmp/old_hook.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

WARPS_PER_BLOCK = 4  # blocks of 128 threads
SMS = 132
ANALYSED = re.compile(r": (\d+) launch\(es\)(?: \((\d+) analysed)?")
TIMED = r"""
import sys, time
import attrs, numpy  # a profiled process has them by its exit
from pathlib import Path
from neutrino.runtime.results.callback import load_callback, run_over_trace
import neutrino.tools.block_sched.exit_hook as module
hook = sys.argv[2] if len(sys.argv) > 2 else module.__file__

class Trace:
    def __init__(self, path): self.path = Path(path)
    def event(self, name, **fields): print("event", name, fields, file=sys.stderr)

started = time.perf_counter()
run_over_trace(Trace(sys.argv[1]), load_callback(hook), 600.0, sys.stdout)
print("SECONDS", time.perf_counter() - started)
"""


def block_sched_frame(rng: np.random.Generator, blocks: int):
    """One launch's block_sched section: blocks dealt to the SMs in waves of 2 per SM, warps of a
    block starting within a few hundred cycles of each other."""
    from neutrino.trace import MapSection, buffer_bytes

    units = blocks * WARPS_PER_BLOCK
    block = np.arange(units) // WARPS_PER_BLOCK
    wave, sm = block // (2 * SMS), block % SMS
    start = 1_000 + wave * 20_000 + rng.integers(0, 3_000, units)
    buf = np.zeros(buffer_bytes(units, 1, 16), np.uint8)
    buf[: 4 * units].view(np.uint32)[:] = 1
    rec = buf[-16 * units:].view(np.dtype([("start", "<u8"), ("elapsed", "<u4"), ("cuid", "<u4")]))
    rec["start"], rec["elapsed"], rec["cuid"] = start, 15_000 + rng.integers(0, 4_000, units), sm
    fields = [("start", "u64", 0), ("elapsed", "u32", 8), ("cuid", "u32", 12)]
    return MapSection("block_sched", "warp", 16, 1, units, fields, buf.tobytes())


def synthetic_run(run: Path, kernels: int, launches: int, blocks: int) -> int:
    """The run directory; returns its result bytes."""
    from neutrino.trace_writer import write_result

    rng = np.random.default_rng(29)
    (run / "result").mkdir(parents=True)
    total, index = 0, 0
    with open(run / "event.log", "w") as log:
        log.write(json.dumps({"event": "start", "time": 0.0}) + "\n")
        for launch in range(launches):
            for k in range(kernels):
                name = f"triton_poi_fused_{k}"
                path = run / "result" / f"{index}.ntr"
                section = block_sched_frame(rng, blocks + 20 * k)
                write_result(path, grid=(blocks + 20 * k, 1, 1), block=(32 * WARPS_PER_BLOCK, 1, 1),
                             shared_bytes=0, maps=[section])
                total += path.stat().st_size
                log.write(json.dumps({"event": "launch", "index": index, "kernel": name, "kernel_launch": launch,
                                      "result": f"result/{index}.ntr", "result_offset": 0}) + "\n")
                index += 1
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=15)
    parser.add_argument("--launches", type=int, default=28, help="launches per kernel")
    parser.add_argument("--blocks", type=int, default=300, help="blocks of the first kernel's launches")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hook", action="append", default=[], metavar="FILE",
                        help="time this hook file instead (e.g. an earlier exit_hook.py from git show); repeatable: "
                             "the hooks run interleaved, one median each")
    args = parser.parse_args()
    hooks = args.hook or [None]
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / "run"
        size = synthetic_run(run, args.kernels, args.launches, args.blocks)
        seconds: dict[str, list[float]] = {str(h): [] for h in hooks}
        out = {}
        for _ in range(args.repeat):
            for hook in hooks:
                r = subprocess.run([sys.executable, "-c", TIMED, str(run), *([hook] if hook else [])],
                                   capture_output=True, text=True, env=dict(os.environ))
                if r.returncode:
                    sys.exit(f"startup_exit_hook: the timed interpreter failed:\n{r.stderr}")
                out[str(hook)] = r.stdout
                seconds[str(hook)].append(float(r.stdout.rsplit("SECONDS", 1)[1]))
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.kernels} kernels x {args.launches} "
              f"launches, {size / 1e6:.1f} MB of results")
        for hook in hooks:
            lines = [ln for ln in out[str(hook)].splitlines() if ln.startswith("neutrino:")]
            analysed = sum(int(m.group(2) or m.group(1)) for m in map(ANALYSED.search, lines) if m)
            times = seconds[str(hook)]
            print(f"{hook or 'exit_hook.py'}: exit_hooks median {statistics.median(times):.3f} s over {args.repeat} "
                  f"interpreters ({', '.join(f'{t:.3f}' for t in times)}); {analysed} launch(es) analysed")
            print("\n".join(lines[:2]))


if __name__ == "__main__":
    main()
