"""The launcher's cold `check` (issue 29): compiling and verifying a probe on a probe-cache miss, in a
fresh interpreter, as `neutrino -p TOOL` does once per cache directory.

    PYTHONPATH=$PWD python benchmarks/startup_check.py [--repeat 9] [--tool block_sched] [--tree DIR ...]

Each run: a new interpreter, an empty NEUTRINO_CACHE_DIR, `probeload.check(TOOL)` timed from before its
import to its return (the modules it loads included), and the number of modules it loaded. With several
--tree (checkouts: e.g. main and a branch) the runs are interleaved, tree after tree, so the machine's
load falls on each alike. Prints per tree the median and the fastest run (wall seconds; and the process's CPU seconds, which a
machine shared with other work disturbs less) and the modules.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
started, cpu = time.perf_counter(), time.process_time()
before = set(sys.modules)
from neutrino.runtime.instrument import probeload
path, state = probeload.check(sys.argv[1])
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "cpu": time.process_time() - cpu, "state": state, "modules": len(set(sys.modules) - before)}))
"""


def one_run(tree: str, tool: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="neutrino-check-") as cache:
        # the tree first (its neutrino), then the caller's path (where the dependencies may be: /tmp/site)
        path = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path, NEUTRINO_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", CHILD, tool], env=env, capture_output=True, text=True,
                             check=True, cwd=tree)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--tool", default="block_sched")
    parser.add_argument("--tree", action="append", help="a checkout's root (default: this one)")
    args = parser.parse_args()
    trees = [os.path.abspath(t) for t in (args.tree or [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))])]
    for tree in trees:
        one_run(tree, args.tool)  # byte code compiled, files in the page cache
    runs: dict[str, list[dict]] = {tree: [] for tree in trees}
    for _ in range(args.repeat):
        for tree in trees:
            runs[tree].append(one_run(tree, args.tool))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; cold check of {args.tool}, {args.repeat} runs each")
    for tree, got in runs.items():
        seconds, cpu = [r["seconds"] for r in got], [r["cpu"] for r in got]
        states = sorted({r["state"] for r in got})
        print(f"{tree}: wall median {statistics.median(seconds):.3f} s, fastest {min(seconds):.3f} s; "
              f"CPU median {statistics.median(cpu):.3f} s, least {min(cpu):.3f} s; "
              f"modules loaded {got[0]['modules']}, cache {'/'.join(states)}")


if __name__ == "__main__":
    main()
