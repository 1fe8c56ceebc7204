"""Cost of the CUPTI timeline (issue 22 target: <= 1.03x per step): per-step wall time of an eager
loop and of a torch.compile MLP training step, run plain, probed with -p block_sched --no-timeline,
and probed with the timeline (the default). Runs are interleaved ROUNDS times; the table gives the
median step time over all steps of all rounds and the ratios.

usage: python benchmarks/timeline_cost.py [--steps N] [--rounds R]   (needs a GPU and torch)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "timeline_workload.py"
CONFIGS = {"plain": None, "probed, no timeline": ["--no-timeline"], "probed + timeline": []}
# --levels: the timeline with only some of what it enables (NEUTRINO_TIMELINE_LEVEL, shim/cupti.c)
LEVELS = {"kernels only": "none", "without ext": "copies,api"}


def run(config: list[str] | None, mode: str, steps: int, env: dict, tracedir: str, level: str | None = None) -> list[float]:
    cmd = [sys.executable, str(WORKLOAD), mode, str(steps)]
    if level is not None:
        env = dict(env, NEUTRINO_TIMELINE_LEVEL=level)
    if config is not None:
        cmd = [sys.executable, "-m", "neutrino", "-p", "block_sched", "-q", "--tracedir", tracedir, *config, "--", *cmd]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)["step_ms"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--levels", default="", help="modes also measured at each timeline level (e.g. eager)")
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="timeline_cost_")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{scratch}/inductor", TRITON_CACHE_DIR=f"{scratch}/triton",
               PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    print(f"{'workload':10s} {'config':28s} {'median ms':>10s} {'vs plain':>9s} {'vs no-timeline':>15s}")
    for mode in args.modes.split(","):
        run(None, mode, 5, env, scratch)  # compile caches warm before anything is timed
        configs = {name: (config, None) for name, config in CONFIGS.items()}
        if mode in args.levels.split(","):
            configs.update({f"timeline {name}": ([], level) for name, level in LEVELS.items()})
        samples: dict[str, list[float]] = {name: [] for name in configs}
        for _ in range(args.rounds):
            for name, (config, level) in configs.items():
                samples[name] += run(config, mode, args.steps, env, f"{scratch}/trace", level)
        med = {name: statistics.median(v) for name, v in samples.items()}
        for name in configs:
            base = med["probed, no timeline"]
            vs_nt = f"{med[name] / base:14.3f}x" if "timeline" in name and name != "probed, no timeline" else f"{'':15s}"
            print(f"{mode:10s} {name:28s} {med[name]:10.3f} {med[name] / med['plain']:8.3f}x {vs_nt}")


if __name__ == "__main__":
    main()
