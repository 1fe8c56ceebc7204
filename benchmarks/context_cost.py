"""Host cost of the context tables' hot paths, without a GPU (spec/runtime.md, "Ranges and tensor trace").

    python benchmarks/context_cost.py [N]

Builds the shim and a small C harness that loads it like NVTX does (tests/fakenvtx), then times,
per call (ns, best of 5 rounds of N calls each, on one thread):
  args_record_known   neutrino_args_record of a launch whose 5-parameter set is already known
                      (hash, compare, one use line appended): what a probed launch adds
  nvtx_push_pop       nvtxRangePushA + nvtxRangePop through the injection (one name looked up,
                      one ranges.bin record appended)
and, from Python, annotate_enter_exit: `with neutrino.annotate("x"): pass` under the shim.
The tables are written to a temporary directory by the shim's writer thread meanwhile.
"""

from __future__ import annotations

import ctypes as C
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HARNESS = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static uint64_t now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
int main(int argc, char **argv) {
    void *shim = dlopen(argv[1], RTLD_NOW), *nvtx = dlopen(argv[2], RTLD_NOW);
    long n = atol(argv[4]);
    int (*open_dir)(const char *) = dlsym(shim, "neutrino_context_open");
    void (*close_dir)(void) = dlsym(shim, "neutrino_context_close");
    void (*enable)(int, void *) = dlsym(shim, "neutrino_args_enable");
    int (*plan)(void *, void *, uint32_t, const uint16_t *, const char *) = dlsym(shim, "neutrino_args_plan");
    int64_t (*record)(void *, void *, void **, uint64_t) = dlsym(shim, "neutrino_args_record");
    int (*push)(const char *) = dlsym(nvtx, "fake_nvtx_push");
    int (*pop)(void) = dlsym(nvtx, "fake_nvtx_pop");
    open_dir(argv[3]);
    enable(1, NULL);
    uint16_t sizes[5] = {8, 8, 4, 8, 8};
    uint64_t a = 0x7f0000000000, b = 0x7f0000100000, z = 0; uint32_t m = 4096;
    void *params[5] = {&a, &b, &m, &z, &z};
    plan((void *)0x1234, (void *)0x5678, 5, sizes, "\"k\"");
    record((void *)0x1234, (void *)0x5678, params, 0);
    double best_rec = 1e30, best_nvtx = 1e30;
    for (int round = 0; round < 5; round++) {
        uint64_t t0 = now();
        for (long i = 0; i < n; i++) record((void *)0x1234, (void *)0x5678, params, (uint64_t)i);
        uint64_t t1 = now();
        for (long i = 0; i < n; i++) { push("step"); pop(); }
        uint64_t t2 = now();
        if ((double)(t1 - t0) / n < best_rec) best_rec = (double)(t1 - t0) / n;
        if ((double)(t2 - t1) / n < best_nvtx) best_nvtx = (double)(t2 - t1) / n;
    }
    close_dir();
    printf("args_record_known %.1f\nnvtx_push_pop %.1f\n", best_rec, best_nvtx);
    return 0;
}
"""

ANNOTATE = """
import ctypes as C, sys, time
import neutrino
shim = C.CDLL(sys.argv[1]); shim.neutrino_context_open(sys.argv[2].encode())
n, best = int(sys.argv[3]), 1e30
for _ in range(5):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with neutrino.annotate("x"):
            pass
    best = min(best, (time.perf_counter_ns() - t0) / n)
shim.neutrino_context_close()
print(f"annotate_enter_exit {best:.1f}")
"""


def main(n: int = 200_000) -> None:
    from neutrino.runtime.start import build

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shim = build.build_shim(tmp / "cache")
        nvtx = tmp / "libfakenvtx.so"
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(nvtx), str(REPO / "tests/fakenvtx/fakenvtx.c"), "-ldl"],
                       check=True)
        (tmp / "h.c").write_text(HARNESS)
        subprocess.run(["cc", "-O2", "-o", str(tmp / "h"), str(tmp / "h.c"), "-ldl"], check=True)
        (tmp / "run").mkdir()
        env = dict(os.environ, NVTX_INJECTION64_PATH=str(shim))
        out = subprocess.run([str(tmp / "h"), str(shim), str(nvtx), str(tmp / "run"), str(n)], env=env,
                             capture_output=True, text=True, check=True).stdout
        (tmp / "a.py").write_text(ANNOTATE)
        env.update(LD_PRELOAD=str(shim), NEUTRINO_SHIM=str(shim), NEUTRINO_OPTIONS="{}", PYTHONPATH=str(REPO))
        out += subprocess.run([sys.executable, str(tmp / "a.py"), str(shim), str(tmp / "run"), str(n)], env=env,
                              capture_output=True, text=True, check=True).stdout
        print(f"# context tables, host ns per call (best of 5 x {n}); {time.strftime('%Y-%m-%d')}, {os.uname().nodename}")
        print(out.strip())


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
