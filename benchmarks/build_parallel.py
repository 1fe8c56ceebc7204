"""Probed code built in parallel, off the launch path (issue 29): a module with many kernels, cold code cache.

    python benchmarks/build_parallel.py [--copies 6] [--rounds 5] [--threads 0,2,4] [-p block_sched]

No GPU: the runtime runs on the fake driver of tests/fakedriver.py, whose JIT is replaced by the
real `ptxas -arch=sm_90` (a subprocess per kernel, as the driver's JIT is a native call outside
the GIL). The module: the corpus's nvcc kernels (tests/data/corpus/nvcc/*.sm90.ptx, 8 entries),
`--copies` times with renamed entries, in one PTX module. The "program" loads it, looks every
kernel up (as cudart does at registration; Inductor loads a graph's kernels together), then
launches each kernel once. Measured, per round and configuration, interleaved (every round runs
each `--threads` value once, in turn, each with a fresh code cache):

  first_launches_s  wall seconds from the module load to the return of the last kernel's first
                    launch (what the program waits for)
  build_wait_s      of which the launches waited for the build threads (phase build_wait)
  background_s      the build threads' summed seconds (lookup + instrument + JIT)

`--threads 0` is the behaviour before: each kernel built on the launching thread at its first launch.
Prints the median over rounds of each, per configuration, with the machine.
"""

from __future__ import annotations

import argparse
import ctypes as C
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fakedriver import FakeDriver, FakeShim  # noqa: E402

from neutrino.runtime.instrument.codecache import CodeCache  # noqa: E402
from neutrino.runtime.core import LaunchRequest, Runtime, SimplePtx  # noqa: E402
from neutrino.runtime.driver import LAUNCH_KERNEL  # noqa: E402
from neutrino.runtime.start.options import RuntimeOptions  # noqa: E402
from neutrino.runtime.instrument.probed import module_globals  # noqa: E402
from neutrino.runtime.start.tracedir import TraceDir  # noqa: E402
from neutrino.toolbox import load_probes  # noqa: E402

NVCC_CORPUS = sorted((ROOT / "tests" / "data" / "corpus" / "nvcc").glob("*.sm90.ptx"))
ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
HEADER = re.compile(r"^\s*(\.version|\.target|\.address_size)\b.*$", re.MULTILINE)


def many_kernel_module(copies: int) -> tuple[str, list[str]]:
    """One PTX module with every corpus nvcc sm_90 entry `copies` times (renamed `<name>_c<i>`)."""
    files = [p.read_text() for p in NVCC_CORPUS if "lineinfo" not in p.name]
    header = "\n".join(m.group(0) for m in HEADER.finditer(files[0]))
    bodies, names = [], []
    for c in range(copies):
        for text in files:
            body = HEADER.sub("", text)
            variables = [name for name, _ in module_globals(text)]  # stencil's __constant__ coeff
            for name in ENTRY.findall(text) + variables:
                body = re.sub(rf"\b{re.escape(name)}\b", f"{name}_c{c}", body)
            names += [f"{name}_c{c}" for name in ENTRY.findall(text)]
            bodies.append(body)
    return header + "\n" + "\n".join(bodies), names


class PtxasDriver(FakeDriver):
    """The fake driver, with the JIT done by the real ptxas (outside the GIL, like the driver's)."""

    def __init__(self, scratch: Path):
        super().__init__()
        self.scratch = scratch

    def link_ptx(self, ptx):
        self.links += 1
        fd, name = tempfile.mkstemp(suffix=".ptx", dir=self.scratch)
        with os.fdopen(fd, "w") as f:
            f.write(ptx)
        out = name + ".cubin"
        r = subprocess.run(["ptxas", "-arch=sm_90", "-o", out, name], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"ptxas: {r.stderr[:500]}")
        data = Path(out).read_bytes()
        os.unlink(name)
        os.unlink(out)
        return data


def one_run(ptx: str, names: list[str], probes, threads: int, scratch: Path) -> dict:
    drv, shim = PtxasDriver(scratch), FakeShim()
    options = RuntimeOptions(probe=str(probes.path), tracedir=str(scratch / "trace"), build_threads=threads)
    trace = TraceDir.create(scratch / f"trace{time.monotonic_ns()}")
    rt = Runtime(drv, shim, options, probes, trace=trace, cache=CodeCache(None),
                 ptx_finder=lambda image, arch, path=None: SimplePtx(image.decode(), "bench"))
    params = (C.c_void_p * 32)(*[C.addressof(C.c_uint64(0)) for _ in range(32)])
    started = time.perf_counter()
    rt.on_module("cuModuleLoadData", 0x100, ptx.encode())
    handles = []
    for i, name in enumerate(names):
        handle = 0x10000 + 0x10 * i
        if rt.on_function("module_function", 0x100, name, handle):
            handles.append(handle)
    for handle in handles:
        r = LaunchRequest(LAUNCH_KERNEL, handle, (4, 1, 1), (128, 1, 1), 0, 0x5, C.addressof(params))
        rt.on_launch(r)
    first = time.perf_counter() - started
    rt.finish(open(os.devnull, "w"))
    phases = rt.phases.totals()
    background = sum(phases.get(n, {}).get("seconds", 0.0)
                     for n in ("background_lookup", "background_instrument", "background_jit"))
    return {"first_launches_s": first, "build_wait_s": phases.get("build_wait", {}).get("seconds", 0.0),
            "background_s": background, "links": drv.links, "kernels": len(handles),
            "no_fallback": not rt.fallbacks and rt.probed_launches == len(handles)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", default="0,2,4", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("-p", "--probe", default="block_sched")
    args = parser.parse_args()
    if shutil.which("ptxas") is None:
        sys.exit("build_parallel: ptxas is not on PATH")
    ptx, names = many_kernel_module(args.copies)
    probes = load_probes(args.probe)
    scratch = Path(tempfile.mkdtemp(prefix="neutrino-build-parallel-"))
    results: dict[int, list[dict]] = {t: [] for t in args.threads}
    try:
        one_run(ptx, names[:1], probes, 0, scratch)  # imports the engine: not any configuration's cost
        for _ in range(args.rounds):
            for threads in args.threads:
                results[threads].append(one_run(ptx, names, probes, threads, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}; module of "
          f"{len(names)} kernels ({len(ptx) // 1024} KiB PTX), probe {args.probe}, median of {args.rounds} rounds")
    print("| build threads | first launches s | of which waited s | build threads' work s | JIT runs | all probed |")
    print("| ---: | ---: | ---: | ---: | ---: | --- |")
    for threads, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in ("first_launches_s", "build_wait_s", "background_s")}
        print(f"| {threads} | {med['first_launches_s']:.2f} | {med['build_wait_s']:.2f} | {med['background_s']:.2f} | "
              f"{rows[0]['links']} | {'yes' if all(r['no_fallback'] for r in rows) else 'no'} |")


if __name__ == "__main__":
    main()
