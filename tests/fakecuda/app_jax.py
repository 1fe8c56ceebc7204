"""A JAX-like program on the fake driver: `import jax` (tests/fakejax), one compile that launches
the kernel COMPILE times (autotuning candidates), then RUN launches of the program's own.
usage: app_jax.py PTXFILE KERNEL COMPILE RUN"""
import ctypes as C
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fakejax"))


def main(ptx_path, kernel, compile_launches, run_launches):
    import jax  # noqa: F401 - the import neutrino watches for
    from jax._src import compiler

    cu = C.CDLL("libcuda.so.1")
    mod, fn = C.c_void_p(), C.c_void_p()
    ptx = open(ptx_path, "rb").read() + b"\0"
    assert cu.cuModuleLoadData(C.byref(mod), C.c_char_p(ptx)) == 0
    assert cu.cuModuleGetFunction(C.byref(fn), mod, kernel.encode()) == 0
    vals = [C.c_uint64(i) for i in range(4)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    cu.cuLaunchKernel.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3

    def launches(n, grid):
        for _ in range(n):
            assert cu.cuLaunchKernel(fn, grid, 1, 1, 64, 1, 1, 0, None, params, None) == 0

    compiler.compile_or_get_cached(lambda n: launches(n, 2), compile_launches)  # grid 2: a candidate's launch
    launches(run_launches, 4)
    print("app done")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
