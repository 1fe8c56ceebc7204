"""Compiles PTX with (fake) libnvJitLink and loads the cubin, like XLA does. usage: app_nvjitlink.py PTXFILE... KERNEL LAUNCHES

Several PTX files go into one link (which cannot be probed)."""
import ctypes as C
import sys


def compile_ptx(paths):
    jl = C.CDLL("libnvJitLink.so.13")
    h = C.c_void_p()
    assert jl.nvJitLinkCreate(C.byref(h), 0, None) == 0
    for path in paths:
        ptx = open(path, "rb").read()
        assert jl.nvJitLinkAddData(h, 2, C.c_char_p(ptx), C.c_size_t(len(ptx)), b"kernel.ptx") == 0
    assert jl.nvJitLinkComplete(h) == 0
    size = C.c_size_t()
    assert jl.nvJitLinkGetLinkedCubinSize(h, C.byref(size)) == 0
    cubin = C.create_string_buffer(size.value)
    assert jl.nvJitLinkGetLinkedCubin(h, cubin) == 0
    assert jl.nvJitLinkDestroy(C.byref(h)) == 0
    return bytes(cubin.raw)  # a copy, as XLA keeps it in a vector of its own


def main(paths, kernel, n):
    image = C.create_string_buffer(compile_ptx(paths))
    cu = C.CDLL("libcuda.so.1")
    mod, fn = C.c_void_p(), C.c_void_p()
    assert cu.cuModuleLoadData(C.byref(mod), image) == 0
    assert cu.cuModuleGetFunction(C.byref(fn), mod, kernel.encode()) == 0
    vals = [C.c_uint64(i) for i in range(4)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    cu.cuLaunchKernel.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3
    for _ in range(n):
        assert cu.cuLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, None, params, None) == 0


if __name__ == "__main__":
    main(sys.argv[1:-2], sys.argv[-2], int(sys.argv[-1]))
    print("app done")
