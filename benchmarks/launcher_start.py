"""What the launcher's own start is made of (issue 29, `launcher_start` of --timings).

    python benchmarks/launcher_start.py [-n 7]

`launcher_start` is the launcher process's age when `run_main` begins (/proc/self/stat): the
interpreter's start, `site` (site-packages and their .pth files) and our imports. Prints the median
wall time of N runs of each of:

  python -S -c pass          the interpreter without site
  python -I -c pass          isolated: site without the user site-packages and PYTHON* variables
  python -c pass             the interpreter as the program's own start pays it
  python -c 'import launcher'    plus the launcher's imports (neutrino.runtime.start.launcher)
  python -m neutrino.cli-like    the age at run_main's entry, as `launcher_start` reports it

then the slowest imports of `site` and of the launcher (python -X importtime, cumulative
microseconds) and the .pth files site runs. A profiled program's interpreter pays the same
start (plain runs too): only the launcher's own is added.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import site
import statistics
import subprocess
import sys
import time

AGE_AT_RUN_MAIN = ("from neutrino.runtime.start.phases import process_age; import neutrino.cli; "
                   "from neutrino.runtime.start.launcher import run_main; print(process_age())")


def median_wall(argv: list[str], n: int) -> float:
    walls = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - started)
    return statistics.median(walls)


def slowest_imports(code: str, top: int, flags: tuple[str, ...] = ()) -> list[str]:
    r = subprocess.run([sys.executable, *flags, "-X", "importtime", "-c", code], capture_output=True, text=True)
    rows = []
    for line in r.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    return [f"{us / 1000:8.1f} ms  {name}" for us, name in sorted(rows, reverse=True)[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=7)
    args = parser.parse_args()
    py = sys.executable
    print(f"{platform.node()}: Python {platform.python_version()}, {os.cpu_count()} CPUs, median of {args.n}")
    for label, argv in (("python -S -c pass", [py, "-S", "-c", "pass"]),
                        ("python -I -c pass", [py, "-I", "-c", "pass"]),
                        ("python -c pass", [py, "-c", "pass"]),
                        ("python -c 'import neutrino.runtime.start.launcher'", [py, "-c", "import neutrino.runtime.start.launcher"]),
                        ("python -m neutrino --help", [py, "-m", "neutrino", "--help"])):
        print(f"{label:50s} {median_wall(argv, args.n) * 1e3:8.1f} ms")
    ages = []
    for _ in range(args.n):
        out = subprocess.run([py, "-c", AGE_AT_RUN_MAIN], capture_output=True, text=True).stdout.strip()
        ages.append(float(out) if out and out != "None" else float("nan"))
    print(f"{'age at run_main (launcher_start)':50s} {statistics.median(ages) * 1e3:8.1f} ms (10 ms ticks)")
    print("\nslowest imports of site (python -X importtime -c pass, cumulative):")
    print("\n".join(slowest_imports("pass", 10)))
    print("\nslowest imports of the launcher (cumulative):")
    print("\n".join(slowest_imports("import neutrino.cli; import neutrino.runtime.start.launcher", 15)))
    dirs = site.getsitepackages() + [site.getusersitepackages()]
    pth = sorted(p for d in dirs for p in glob.glob(os.path.join(d, "*.pth")))
    print(f"\n.pth files ({len(pth)}):")
    for p in pth:
        with open(p, encoding="utf-8", errors="replace") as f:
            imports = sum(1 for line in f if line.startswith(("import ", "import\t")))
        print(f"  {p}  ({imports} import lines)")
    print(f"sys.path entries: {len(sys.path)}; PYTHONPATH={os.environ.get('PYTHONPATH', '')}")


if __name__ == "__main__":
    main()
