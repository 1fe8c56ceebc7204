"""A light CUDA program for benchmarks/startup.py --program light: CuPy loads a PTX module (the
corpus's vec kernels, JIT-compiled by the driver) and launches saxpy4 LAUNCHES times.

usage: startup_light.py [LAUNCHES]   (default 20)

About a second of process time instead of the torch.compile program's twenty: enough runs fit in
a device call to put medians on the fixed costs (launcher, start-up, exit). Prints one JSON line
with a checksum of the result (the profiled runs must print the same) and the wall clock of each
step (`marks`: benchmarks/startup.py puts each step's time beside the plain runs').

STARTUP_LIGHT_DUMP=SECONDS:FILE (a diagnostic, issue 29): every SECONDS from the module's load to the
end of the launches (the first probed launch, arange's, included), every thread's Python stack goes
to FILE (faulthandler's watchdog thread writes it without the GIL, so a
launch stuck waiting for the GIL shows which thread holds it). STARTUP_LIGHT_IMPORTS=PREFIX:FILE writes the
whole stack of the first import of a module whose name starts with PREFIX, from the module's load on.
"""
import json
import os
import sys
import time
from pathlib import Path

MARKS = {"started": time.time()}  # wall clocks of the program's steps: startup.py compares them with plain's

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

MARKS["imported"] = time.time()

PTX = Path(__file__).resolve().parent.parent / "tests" / "gpu" / "workloads" / "vec.sm90.ptx"
N4 = 1 << 16


def _dump_stacks():
    spec = os.environ.get("STARTUP_LIGHT_DUMP")
    if not spec:
        return None
    seconds, path = spec.split(":", 1)
    import faulthandler

    out = open(path, "w")
    faulthandler.dump_traceback_later(float(seconds), repeat=True, file=out)
    return out


class _ImportWitness:
    """STARTUP_LIGHT_IMPORTS=PREFIX[,PREFIX...]:FILE: the whole stack of the first import of a module named
    PREFIX... for each prefix (faulthandler's dumps stop at 100 frames, before the code that asked for it)."""

    def __init__(self, prefixes: list[str], path: str):
        self.left, self.path = list(prefixes), path

    def find_spec(self, name, path=None, target=None):
        hit = next((p for p in self.left if name.startswith(p)), None)
        if hit is not None:
            import traceback

            self.left.remove(hit)
            with open(self.path, "a") as out:
                out.write(f"import of {name}, {time.time():.6f}\n")
                out.write("".join(line for line in traceback.format_stack() if "<frozen importlib" not in line))
        return None


def _witness_imports() -> None:
    spec = os.environ.get("STARTUP_LIGHT_IMPORTS")
    if spec:
        prefixes, path = spec.split(":", 1)
        sys.meta_path.insert(0, _ImportWitness(prefixes.split(","), path))


def _stop_dump(out) -> None:
    import faulthandler

    faulthandler.cancel_dump_traceback_later()
    out.close()


def main(launches: int) -> None:
    saxpy4 = cp.RawModule(path=str(PTX)).get_function("saxpy4")
    MARKS["module"] = time.time()  # the first CUDA call: cuInit, the context, our runtime's start
    dump = _dump_stacks()  # the first probed launch is arange's
    _witness_imports()
    x = cp.arange(4 * N4, dtype=cp.float32)
    MARKS["arange"] = time.time()
    x /= 4 * N4
    MARKS["divide"] = time.time()
    y = cp.ones(4 * N4, dtype=cp.float32)
    MARKS["ones"] = time.time()
    for _ in range(launches):
        saxpy4((N4 // 256,), (256,), (x, y, np.float32(0.5), np.int64(N4)))
    cp.cuda.runtime.deviceSynchronize()
    MARKS["launched"] = time.time()
    if dump is not None:
        _stop_dump(dump)
    loss = round(float(y.sum()), 3)
    MARKS["summed"] = time.time()
    print(json.dumps({"loss": loss, "launches": launches, "marks": MARKS}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
