"""The smallest real CUDA program for benchmarks/startup.py --program tiny: the driver through ctypes
(as Triton and PyTorch reach it: dlopen + dlsym), no framework. It loads the corpus vec PTX module,
launches saxpy4 LAUNCHES times on the primary context and prints one JSON line with a checksum.

usage: startup_tiny.py [LAUNCHES]   (default 20)

Its own work is little more than cuInit and the context (~0.2-0.3 s): what a profiled run adds
stands out of the program's own variation more than under CuPy (startup_light.py, whose imports
alone are ~0.6 s), so fewer rounds resolve the acceptance's 10% (docs/startup.md).
"""
import time

MARKS = {"started": time.time()}  # wall clocks of the program's steps (benchmarks/startup.py's steps table)

import ctypes as C  # noqa: E402
import json  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

PTX = Path(__file__).resolve().parent.parent / "tests" / "gpu" / "workloads" / "vec.sm90.ptx"
N4 = 1 << 16


def check(rc: int, what: str) -> None:
    if rc != 0:
        sys.exit(f"startup_tiny: {what} failed: CUresult {rc}")


def main(launches: int) -> None:
    cu = C.CDLL("libcuda.so.1")
    MARKS["imported"] = time.time()  # before any CUDA call: startup.py takes this step off the paired differences
    check(cu.cuInit(0), "cuInit")
    dev, ctx, mod, fn = C.c_int(), C.c_void_p(), C.c_void_p(), C.c_void_p()
    if hasattr(cu, "cuDeviceGet") and hasattr(cu, "cuDevicePrimaryCtxRetain"):  # (tests/fakecuda: a current context,
        # no cuDeviceGet)
        check(cu.cuDeviceGet(C.byref(dev), 0), "cuDeviceGet")
        check(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    check(cu.cuModuleLoadData(C.byref(mod), C.c_char_p(PTX.read_bytes() + b"\0")), "cuModuleLoadData")
    check(cu.cuModuleGetFunction(C.byref(fn), mod, b"saxpy4"), "cuModuleGetFunction")
    MARKS["module"] = time.time()
    n = 4 * N4
    x, y = C.c_uint64(), C.c_uint64()
    cu.cuMemAlloc_v2.argtypes = [C.POINTER(C.c_uint64), C.c_size_t]
    cu.cuMemcpyHtoDAsync_v2.argtypes = [C.c_uint64, C.c_void_p, C.c_size_t, C.c_void_p]
    cu.cuMemcpyDtoHAsync_v2.argtypes = [C.c_void_p, C.c_uint64, C.c_size_t, C.c_void_p]
    hosts = []
    for buf, value in ((x, lambda i: i / n), (y, lambda i: 1.0)):
        check(cu.cuMemAlloc_v2(C.byref(buf), 4 * n), "cuMemAlloc")
        hosts.append((C.c_float * n)(*[value(i) for i in range(n)]))
        check(cu.cuMemcpyHtoDAsync_v2(buf.value, hosts[-1], 4 * n, None), "cuMemcpyHtoD")
    a, count = C.c_float(0.5), C.c_int64(N4)
    args = [x, y, a, count]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in args])
    cu.cuLaunchKernel.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3
    for _ in range(launches):
        check(cu.cuLaunchKernel(fn, N4 // 256, 1, 1, 256, 1, 1, 0, None, params, None), "cuLaunchKernel")
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    out = (C.c_float * n)()
    check(cu.cuMemcpyDtoHAsync_v2(out, y.value, 4 * n, None), "cuMemcpyDtoH")
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    MARKS["launched"] = time.time()
    total = sum(struct.unpack(f"{n}f", bytes(out)))
    MARKS["summed"] = time.time()
    print(json.dumps({"loss": round(total, 3), "launches": launches, "marks": MARKS}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
