"""Compiles a corpus PTX with a real libnvJitLink (no GPU needed) under the shim, with the
compiler tap registered as the runtime does, and checks what the index learned.
usage: real_nvjitlink.py SHIM LIBNVJITLINK PTXFILE ARCH"""
import ctypes as C
import sys

from neutrino.runtime.modules import compilers, ptx_source
from neutrino.runtime import hooks
from neutrino.runtime.modules.compilers import CompiledIndex


def main(shim_path, lib, ptx_path, arch):
    shim = hooks.Shim(shim_path)
    index = CompiledIndex()
    assert shim.register_compiler(compilers.make_compiler_callback(index, hooks.read_image))
    jl = C.CDLL(lib)  # ctypes finds every function with dlsym: the shim's route
    h = C.c_void_p()
    assert jl.nvJitLinkCreate(C.byref(h), 1, (C.c_char_p * 1)(f"-arch={arch}".encode())) == 0
    ptx = open(ptx_path, "rb").read()
    assert jl.nvJitLinkAddData(h, 2, C.c_char_p(ptx), C.c_size_t(len(ptx)), b"k.ptx") == 0
    assert jl.nvJitLinkComplete(h) == 0
    size = C.c_size_t()
    assert jl.nvJitLinkGetLinkedCubinSize(h, C.byref(size)) == 0
    buf = C.create_string_buffer(size.value + 256)
    C.memset(buf, 0xAB, len(buf))  # bytes after the cubin must not count
    assert jl.nvJitLinkGetLinkedCubin(h, buf) == 0
    assert jl.nvJitLinkDestroy(C.byref(h)) == 0
    cubin = buf.raw[: size.value]
    assert ptx_source.extract_ptx(cubin, None) is None, "the cubin itself has no PTX"
    hit = index.lookup(cubin)
    assert hit is not None and hit.ptx == ptx.decode() and hit.compiler == "nvJitLink", index.links_seen
    print(f"tapped: {size.value}-byte cubin -> {len(ptx)}-byte PTX")


if __name__ == "__main__":
    main(*sys.argv[1:])
