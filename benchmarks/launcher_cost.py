"""What a profiled run that probes nothing adds, on the CPU machine (issue 29): the launcher and the
runtime's start, with the fake driver (tests/fakecuda) and without CUDA at all.

    python benchmarks/launcher_cost.py [-n 9] [--ref OTHER_CHECKOUT] [--tool block_sched]

Runs, interleaved, N rounds of:

  plain-nocuda     python -c pass
  nocuda           neutrino -p TOOL -k nomatchxyz -- python -c pass        (no process loads CUDA)
  plain-fake       python tests/fakecuda/app.py vec.sm90.ptx saxpy4 3      (the fake driver)
  fake             neutrino -p TOOL -k nomatchxyz -- (the same program)    (its one kernel not probed)

and prints per row the median wall seconds and the median CPU seconds (user + system of the process
and its children: os.wait4's rusage), the difference of each profiled row from its plain row, and
the medians of the `--timings` groups (launcher, start, modules, exit: spec/runtime.md).
CPU seconds move less than wall seconds on a loaded machine. The code cache is warm (one run
first, not counted) and each checkout's byte code compiled first. `--ref DIR`: the profiled rows
also run from another checkout (PYTHONPATH=DIR), in the same rounds: before/after on the same
machine under the same load.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
FAKE = HERE / "tests" / "fakecuda"
VEC_PTX = HERE / "tests" / "data" / "corpus" / "nvcc" / "vec.sm90.ptx"
GROUP = re.compile(r"(launcher|start|modules|exit) ([\d.]+) s")


def timed(argv: list[str], env: dict, cwd: Path) -> tuple[float, float, dict[str, float]]:
    """(wall seconds, CPU seconds of the process and its descendants, the --timings groups) of one run.
    `cwd`: the checkout (`python -m neutrino` imports the package from the current directory first)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit status {proc.returncode}\n{err}")
    groups = {name: float(value) for name, value in GROUP.findall(err.split("; program ")[0])}
    return wall, usage.ru_utime + usage.ru_stime, groups


def build_fake_driver(work: Path) -> Path:
    lib = work / "libcuda.so.1"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(FAKE / "fakecuda.c")], check=True)
    return work


def rows(tool: str, trace: Path, checkouts: dict[str, Path]) -> dict[str, tuple[list[str], str]]:
    """label: (argv, checkout label or "" for a plain run)."""
    py = sys.executable
    app = [py, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "3"]
    out = {"plain-nocuda": ([py, "-c", "pass"], ""), "plain-fake": (app, "")}
    for name in checkouts:
        profile = [py, "-m", "neutrino", "-p", tool, "-k", "nomatchxyz", "-q", "--timings", "--tracedir", str(trace),
                   "--"]
        out[f"nocuda{name}"] = (profile + [py, "-c", "pass"], name)
        out[f"fake{name}"] = (profile + app, name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=9)
    parser.add_argument("--tool", default="block_sched")
    parser.add_argument("--ref", type=Path, help="another checkout, run in the same rounds (before/after)")
    args = parser.parse_args()
    checkouts = {"": HERE}
    if args.ref:
        checkouts = {" (this)": HERE, " (ref)": args.ref.resolve()}
    for path in checkouts.values():  # byte code first: under PYTHONDONTWRITEBYTECODE an edited module compiles per run
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(path / "neutrino")], check=True,
                       stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="launcher-cost-") as scratch:
        work = Path(scratch)
        driver = build_fake_driver(work)
        base = dict(os.environ, LD_LIBRARY_PATH=str(driver), FAKECUDA_BUFPARAM="4",
                    FAKECUDA_LOG=str(work / "fake.log"), NEUTRINO_CACHE_DIR=str(work / "cache"))
        base.pop("NEUTRINO_OPTIONS", None)
        envs = {name: dict(base, PYTHONPATH=str(path)) for name, path in checkouts.items()}
        envs[""] = envs.get("", base)
        table = rows(args.tool, work / "trace", checkouts)
        cwds = {name: checkouts.get(name, HERE) for name in envs}
        for argv, name in table.values():  # warm: the code cache, the shim, the page cache
            timed(argv, envs[name], cwds[name])
        results: dict[str, list[tuple[float, float, dict]]] = {label: [] for label in table}
        for _ in range(args.n):
            for label, (argv, name) in table.items():
                results[label].append(timed(argv, envs[name], cwds[name]))
                shutil.rmtree(work / "trace", ignore_errors=True)
    print(f"{platform.node()}: Python {platform.python_version()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}, {args.n} interleaved rounds, tool {args.tool}, medians")
    median = {label: (statistics.median(w for w, _, _ in r), statistics.median(c for _, c, _ in r))
              for label, r in results.items()}
    print(f"{'row':20s} {'wall s':>8s} {'cpu s':>8s} {'+wall s':>8s} {'+cpu s':>8s}  --timings groups (medians, s)")
    for label, (wall, cpu) in median.items():
        plain = median["plain-nocuda" if label.startswith("nocuda") else "plain-fake"]
        extra = "" if label.startswith("plain") else f" {wall - plain[0]:8.3f} {cpu - plain[1]:8.3f}"
        names = sorted({n for _, _, g in results[label] for n in g}, key=["launcher", "start", "modules", "exit"].index)
        groups = ", ".join(f"{n} {statistics.median(g.get(n, 0.0) for _, _, g in results[label]):.3f}" for n in names)
        print(f"{label:20s} {wall:8.3f} {cpu:8.3f}{extra}  {groups}")


if __name__ == "__main__":
    main()
