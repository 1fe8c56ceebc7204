"""Loads, launches and unloads two kernels in turn, as XLA's autotuner does, on the fake driver (fakecuda.c),
which gives the second module and kernel the first ones' handles.

usage: app_unload.py PTXFILE LAUNCHES MODE, MODE one of
  module   cuModuleLoadData / cuModuleGetFunction / cuModuleUnload
  library  cuLibraryLoadData / cuLibraryGetKernel, the CUkernel handle launched / cuLibraryUnload
  quiet    as module, unloaded by a call no profiler sees (fakecuda_unload_quietly)
Prints "same handles" when the driver reused both handles."""
import ctypes as C
import sys


def main(ptx_path, n, mode):
    cu = C.CDLL("libcuda.so.1")
    cu.cuLaunchKernel.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3
    cu.cuModuleGetFunction.argtypes = [C.c_void_p, C.c_void_p, C.c_char_p]
    cu.cuLibraryGetKernel.argtypes = [C.c_void_p, C.c_void_p, C.c_char_p]
    for name in ("cuModuleUnload", "cuLibraryUnload", "fakecuda_unload_quietly"):
        getattr(cu, name).argtypes = [C.c_void_p]
    ptx = open(ptx_path, "rb").read() + b"\0"
    vals = [C.c_uint64(i) for i in range(4)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    handles = []
    for kernel in ("saxpy4", "hscale"):
        mod, fn = C.c_void_p(), C.c_void_p()
        if mode == "library":
            assert cu.cuLibraryLoadData(C.byref(mod), C.c_char_p(ptx), None, None, 0, None, None, 0) == 0
            assert cu.cuLibraryGetKernel(C.byref(fn), mod, kernel.encode()) == 0
        else:
            assert cu.cuModuleLoadData(C.byref(mod), C.c_char_p(ptx)) == 0
            assert cu.cuModuleGetFunction(C.byref(fn), mod, kernel.encode()) == 0
        handles.append((mod.value, fn.value))
        for _ in range(n):
            assert cu.cuLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, None, params, None) == 0
        unload = {"module": cu.cuModuleUnload, "library": cu.cuLibraryUnload, "quiet": cu.fakecuda_unload_quietly}
        assert unload[mode](mod) == 0
    print("same handles" if handles[0] == handles[1] else f"handles differ: {handles}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
    print("app done")
