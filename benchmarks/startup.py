"""Start-up cost of neutrino: the command line, and the runtime's start inside every profiled process.

    python benchmarks/startup.py [-n 15] [--repo PATH]

Measures, each as the median of N runs (wall time, this machine):

* `neutrino --help` and `neutrino --version`;
* a profiled process that loads no CUDA module (`python -c pass` with the
  environment `neutrino -p block_sched --` gives its program: LD_PRELOAD shim,
  sitecustomize, options) against the same process unprofiled: what every
  process of a profiled program pays at start;
* the runtime's start alone (`sitecustomize`'s cumulative time under
  `python -X importtime`), and whether it imported numpy or attrs.

`--repo` measures another checkout (e.g. the main branch, for a before/after).
No GPU is needed: the runtime's start does not touch CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

PROFILED_ENV = """
import json, sys
sys.path.insert(0, {repo!r})
from neutrino.runtime.build import build_shim
from neutrino.runtime.launcher import child_env
from neutrino.runtime.options import RuntimeOptions
print(json.dumps(child_env(RuntimeOptions(probe={probe!r}, tracedir={trace!r}), build_shim())))
"""


# What the runtime loads when the program loads its first CUDA module: the runtime's
# modules, the probe (compiled and verified), numpy. Timed in one fresh process.
FIRST_MODULE = """
import time
wall, cpu = time.perf_counter(), time.process_time()
from neutrino.runtime import core, drain, tracedir
from neutrino.toolbox import load_probes
load_probes({probe!r})
import numpy
print((time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3)
"""


def median_times(command: list[str], env: dict, n: int) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system) of the child, in seconds.

    CPU time is what to compare on a shared machine: it does not grow when other
    processes take the cores."""
    walls, cpus = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def start_import_ms(env: dict) -> float:
    """Cumulative import time of sitecustomize (which starts the runtime), in ms."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], env=env, capture_output=True,
                         text=True, check=True).stderr
    lines = [line for line in err.splitlines() if line.count("|") == 2 and line.split("|")[2].strip() == "sitecustomize"]
    return int(lines[-1].split("|")[1]) / 1000 if lines else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=15)
    parser.add_argument("--repo", default=str(HERE), help="the checkout to measure (default: this one)")
    parser.add_argument("-p", "--probe", default="block_sched", help="the probe, as -p takes it (default block_sched)")
    args = parser.parse_args()
    repo = str(Path(args.repo).resolve())
    plain = dict(os.environ, PYTHONPATH=repo)
    plain.pop("NEUTRINO_OPTIONS", None)
    code = PROFILED_ENV.format(repo=repo, probe=args.probe, trace=str(Path("/tmp") / f"neutrino-startup-{os.getpid()}"))
    profiled = json.loads(subprocess.run([sys.executable, "-c", code], env=plain, capture_output=True, text=True,
                                         check=True).stdout)
    cli = [sys.executable, "-m", "neutrino.cli"]
    rows = [
        ("neutrino --help", median_times(cli + ["--help"], plain, args.n)),
        ("neutrino --version", median_times(cli + ["--version"], plain, args.n)),
        ("python -c pass (unprofiled)", median_times([sys.executable, "-c", "pass"], plain, args.n)),
        ("python -c pass (profiled, no CUDA module)", median_times([sys.executable, "-c", "pass"], profiled, args.n)),
    ]
    starts = sorted(start_import_ms(profiled) for _ in range(max(3, args.n // 3)))
    build = subprocess.run([sys.executable, "-c", FIRST_MODULE.format(probe=args.probe)], env=plain,
                           capture_output=True, text=True, check=True).stdout.split()
    loaded = subprocess.run([sys.executable, "-c", "import sys; print(sorted({'numpy', 'attrs'} & set(sys.modules)))"],
                            env=profiled, capture_output=True, text=True, check=True).stdout.strip()
    print(f"checkout {repo}, Python {sys.version.split()[0]}, median of {args.n}")
    print(f"{'':45s} {'wall':>8s}    {'cpu':>8s}")
    for name, (wall, cpu) in rows:
        print(f"{name:45s} {wall * 1e3:8.1f} ms {cpu * 1e3:8.1f} ms")
    print(f"{'added per profiled process':45s} {(rows[3][1][0] - rows[2][1][0]) * 1e3:8.1f} ms "
          f"{(rows[3][1][1] - rows[2][1][1]) * 1e3:8.1f} ms")
    print(f"{'runtime start (sitecustomize, -X importtime)':45s} {statistics.median(starts):8.1f} ms")
    print(f"{'runtime built at the first CUDA module (in-process)':45s} {float(build[0]):8.1f} ms {float(build[1]):8.1f} ms")
    print(f"modules loaded at start: {loaded}")


if __name__ == "__main__":
    main()
