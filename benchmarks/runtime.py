"""Runtime benchmarks (run on the GPU machine): prints a Markdown report.

    python benchmarks/runtime.py [--out REPORT.md] [--quick]

1. added host time per unprobed launch (empty kernel, cudart): plain, under the
   shim with the kernel not probed (filtered out), and with the kernel probed
   but the launch outside --launches (the hash-set lookup path); plus the
   shim's lookup alone, timed in C;
2. first-launch instrumentation latency per kernel, cold and from the disk cache;
3. --benchmark slowdown (probed vs pruned kernel, L2 flushed) of block_sched and
   gmem_bytes on the corpus kernels (nvcc programs and Triton);
4. end-to-end wall time of a torch.compile training loop with and without block_sched.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "tests" / "gpu" / "workloads"
sys.path.insert(0, str(REPO))

import neutrino.trace as nt  # noqa: E402


def env_for(tmp: Path, cache: str = "ncache") -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["NEUTRINO_CACHE_DIR"] = str(tmp / cache)
    return env


def run(cmd, env, timeout=900) -> tuple[str, float]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout + r.stderr, dt


def neutrino(probe, tracedir, *extra):
    return [sys.executable, "-m", "neutrino.runtime.start.launcher", "-p", probe, "--tracedir", str(tracedir), *extra, "--"]


def newest_run(tracedir: Path) -> nt.Trace:
    runs = [p for p in Path(tracedir).iterdir() if (p / "event.log").exists()]
    return max((nt.load(p) for p in runs), key=lambda t: (len(t.launches), len(t.events)))


def nvcc(src: Path, out: Path, *flags) -> Path:
    subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=compute_90", *flags, "-o", str(out), str(src)],
                   check=True, cwd=src.parent)
    return out


# ------------------------------------------------------------------ 1
def unprobed_launch(tmp: Path, quick: bool) -> list[str]:
    exe = nvcc(REPO / "benchmarks" / "bench_launch.cu", tmp / "bench_launch")
    n = "20000" if quick else "100000"
    env = env_for(tmp)
    cases = [
        ("plain (no Neutrino)", [str(exe), n]),
        ("under Neutrino, kernel filtered out (-k nomatch)", neutrino("block_sched", tmp / "tl1", "-k", "nomatch") + [str(exe), n]),
        ("under Neutrino, kernel probed, launch not selected (--launches 0:1)",
         neutrino("block_sched", tmp / "tl2", "--launches", "0:1") + [str(exe), n]),
    ]
    rows = ["| case | ns per launch (median of 7) | added |", "| --- | ---: | ---: |"]
    base = None
    for name, cmd in cases:
        out, _ = run(cmd, env)
        ns = float(re.search(r"ns_per_launch ([\d.]+)", out).group(1))
        base = ns if base is None else base
        rows.append(f"| {name} | {ns:.0f} | {ns - base:+.0f} ns |")
    rows.append(f"| shim lookup alone (hash set + launch filter, in C) | {lookup_ns():.1f} | |")
    return rows


def lookup_ns() -> float:
    from neutrino.runtime.start.build import build_shim

    lib = ctypes.CDLL(str(build_shim()))
    lib.neutrino_probe_add.argtypes = [ctypes.c_void_p]
    lib.neutrino_bench_lookup.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    lib.neutrino_bench_lookup.restype = ctypes.c_uint64
    lib.neutrino_probe_add(0x1000)
    n = 10_000_000
    t0 = time.perf_counter()
    lib.neutrino_bench_lookup(0x1000, n)
    return (time.perf_counter() - t0) / n * 1e9


# ------------------------------------------------------------------ 2
def instrumentation_latency(tmp: Path, corpus_exe: Path) -> list[str]:
    env = env_for(tmp, "lat_cache")
    rows = ["| workload | kernel | cold (s) | disk cache (s) |", "| --- | --- | ---: | ---: |"]
    workloads = [("nvcc corpus", [str(corpus_exe), str(tmp / "o.bin")]),
                 ("triton", [sys.executable, str(WORKLOADS / "w_triton.py"), str(tmp / "o.npz")])]
    for name, cmd in workloads:
        times = {}
        for phase in ("cold", "disk"):
            td = tmp / f"lat_{name.split()[0]}_{phase}"
            run(neutrino("block_sched", td) + cmd, env)
            for e in newest_run(td).events:
                if e.get("event") == "instrument":
                    times.setdefault(e["kernel"], {})[phase] = (e["seconds"], e["cache"])
        for k, v in sorted(times.items()):
            cold = v.get("cold", (float("nan"), "?"))
            disk = v.get("disk", (float("nan"), "?"))
            rows.append(f"| {name} | {k[:40]} | {cold[0]:.3f} ({cold[1]}) | {disk[0]:.4f} ({disk[1]}) |")
    return rows


# ------------------------------------------------------------------ 3
def slowdowns(tmp: Path, corpus_exe: Path, repeat: int) -> list[str]:
    """Each kernel launched `repeat` times; the first launch of each (cold module) is left out."""
    env = env_for(tmp)
    rows = ["| workload | probe | kernel | baseline us | probed us | slowdown |", "| --- | --- | --- | ---: | ---: | ---: |"]
    workloads = [("nvcc corpus", [str(corpus_exe), str(tmp / "o.bin"), str(repeat)]),
                 ("triton", [sys.executable, str(WORKLOADS / "w_triton.py"), str(tmp / "o.npz"), str(repeat)])]
    for name, cmd in workloads:
        for probe in ("block_sched", "gmem_bytes"):
            td = tmp / f"bench_{name.split()[0]}_{probe}"
            run(neutrino(probe, td, "--benchmark") + cmd, env)
            per = {}
            for ev in newest_run(td).events:  # one `benchmark` event per launch: interleaved repetitions
                if ev.get("event") == "benchmark" and ev.get("kernel_launch", 0) > 0:
                    pair = per.setdefault(ev["kernel"], ([], []))
                    pair[0].extend(ev["baseline_ns"])
                    pair[1].extend(ev["probed_ns"])
            for k, (base, probed) in sorted(per.items()):
                b = statistics.median(base) / 1e3
                p = statistics.median(probed) / 1e3
                rows.append(f"| {name} | {probe} | {k[:40]} | {b:.1f} | {p:.1f} | {p / b:.2f}x ({len(probed)} runs) |")
    return rows


# ------------------------------------------------------------------ 4
def end_to_end(tmp: Path, steps: int) -> list[str]:
    env = env_for(tmp)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "e2e_inductor")
    cmd = [sys.executable, str(WORKLOADS / "w_inductor.py"), str(tmp / "e2e.npz"), str(steps)]
    run(cmd, env)  # warm Inductor's cache: both timed runs load compiled kernels
    run(neutrino("block_sched", tmp / "e2e_warm") + cmd, env)  # warm Neutrino's code cache
    _, plain = run(cmd, env)
    _, probed = run(neutrino("block_sched", tmp / "e2e") + cmd, env)
    launches = len(newest_run(tmp / "e2e").launches)
    return ["| run | wall s |", "| --- | ---: |", f"| torch.compile block, {steps} fwd+bwd steps, plain | {plain:.2f} |",
            f"| same under neutrino -p block_sched ({launches} probed launches) | {probed:.2f} |",
            f"| ratio | {probed / plain:.2f}x |"]


def device_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="1234")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="neutrino-bench-"))
    corpus_exe = nvcc(WORKLOADS / "corpus_main.cu", tmp / "corpus_main", "-cudart", "static")
    parts = [f"# Neutrino runtime benchmarks\n\n{time.strftime('%Y-%m-%d')}, {device_name()}\n"]
    sections = [("1", "Added host time per launch", lambda: unprobed_launch(tmp, args.quick)),
                ("2", "First-launch instrumentation latency (instrument + JIT + load)", lambda: instrumentation_latency(tmp, corpus_exe)),
                ("3", "--benchmark slowdown (median per kernel, L2 flushed)", lambda: slowdowns(tmp, corpus_exe, 5 if args.quick else 20)),
                ("4", "End-to-end torch.compile training loop", lambda: end_to_end(tmp, 10 if args.quick else 30))]
    for key, title, fn in sections:
        if key not in args.only:
            continue
        try:
            rows = fn()
        except Exception as e:  # noqa: BLE001 - report what ran
            rows = [f"failed: {type(e).__name__}: {str(e)[:2000]}"]
        parts.append(f"## {title}\n\n" + "\n".join(rows) + "\n")
        print(parts[-1], flush=True)
    text = "\n".join(parts)
    if args.out:
        Path(args.out).write_text(text)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
