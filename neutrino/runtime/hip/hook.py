"""The HIP hook's Python side: probed launches of HIP module kernels, written as a trace.

shim/hip.c reports module loads and function lookups here and hands over the
launches of functions we asked for. A launch is probed synchronously, one
stage after the other, each in its own function:

    build      the module's code object (bundle entry for the device) → assembly
               (codeobj.disassemble) → engine.instrument → code object, loaded with
               the real hipModuleLoadData; once per function
    buffers    one device buffer per map, sized by neutrino.trace.map_buffer_bytes
               (wave64 units), zero-filled
    launch     the probed copy with the map pointers appended to the kernel's
               arguments (kernelParams, or the `extra` argument buffer)
    collect    synchronize, copy back, write result/<n>.bin and a `launch` event:
               the same trace format and reader as CUDA runs

Any failure of ours makes the shim run the original launch instead, with one
`fallback` line in the event log; the program's results never change. This
path is untested on AMD hardware (tests drive it with a fake HIP runtime);
`--launches`, budgets and the asynchronous writer of the CUDA runtime are not
wired here yet.
"""

from __future__ import annotations

import ctypes as C
import os
import struct
from pathlib import Path

import attrs

from neutrino import maps as tracefmt
from neutrino.engine import instrument
from neutrino.errors import NeutrinoError
from neutrino.isa.gcn import metadata, parse_module
from neutrino.isa.gcn.target import GCN
from neutrino.isa.rdna.target import RDNA
from neutrino.probe_model import ProbeFile
from neutrino.runtime.start.build import ShimBuildError, compiler
from neutrino.runtime.instrument.codecache import default_cache_dir
from neutrino.runtime.hip import codeobj
from neutrino.runtime.start.tracedir import TraceDir

HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3
HIP_MEMCPY_DEVICE_TO_HOST = 2
NOT_HANDLED = -1  # the shim then runs the original launch

LOAD_CB = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_char_p)
GETFN_CB = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_char_p)
LAUNCH_CB = C.CFUNCTYPE(C.c_int, C.c_void_p, *([C.c_uint] * 7), C.c_void_p, C.POINTER(C.c_void_p), C.POINTER(C.c_void_p))
SEEN_CB = C.CFUNCTYPE(None, C.c_void_p, C.c_uint, C.c_uint)


class HipError(NeutrinoError):
    """A HIP call of ours failed, or a kernel cannot be probed; the launch falls back."""


# ---------------------------------------------------------------- the shim and the real runtime


def shim_source() -> Path:
    here = Path(__file__).resolve().parent
    for folder in (here.parents[2] / "shim", here):
        if (folder / "hip.c").is_file():
            return folder / "hip.c"
    raise ShimBuildError("shim/hip.c not found")


def build_hip_shim(cache_dir: Path | None = None) -> Path:
    """libneutrino_hip.so, compiled once per source (the CUDA shim is a separate library)."""
    import hashlib
    import subprocess

    src = shim_source()
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    out = (cache_dir or default_cache_dir()) / f"hip-shim-{digest}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = [*compiler(), "-O2", "-fPIC", "-shared", "-Wall", "-o", str(tmp), str(src), "-ldl", "-lpthread"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise ShimBuildError(f"building the HIP shim failed ({' '.join(cmd)}):\n{res.stderr.strip()}")
    os.replace(tmp, out)
    return out


class RealHip:
    """The real HIP functions we call, reached through the shim (so our own calls are not hooked)."""

    def __init__(self, shim: C.CDLL):
        real = shim.neutrino_hip_real
        real.restype, real.argtypes = C.c_void_p, [C.c_char_p]

        def fn(name: str, *argtypes):
            address = real(name.encode())
            if not address:
                raise HipError(f"the HIP runtime has no {name}")
            return C.CFUNCTYPE(C.c_int, *argtypes)(address)

        self.module_load_data = fn("hipModuleLoadData", C.POINTER(C.c_void_p), C.c_void_p)
        self.module_get_function = fn("hipModuleGetFunction", C.POINTER(C.c_void_p), C.c_void_p, C.c_char_p)
        self.module_launch = fn("hipModuleLaunchKernel", C.c_void_p, *([C.c_uint] * 7), C.c_void_p,
                                C.POINTER(C.c_void_p), C.POINTER(C.c_void_p))
        self.malloc = fn("hipMalloc", C.POINTER(C.c_void_p), C.c_size_t)
        self.free = fn("hipFree", C.c_void_p)
        self.memset = fn("hipMemset", C.c_void_p, C.c_int, C.c_size_t)
        self.memcpy = fn("hipMemcpy", C.c_void_p, C.c_void_p, C.c_size_t, C.c_int)
        self.stream_synchronize = fn("hipStreamSynchronize", C.c_void_p)

    @staticmethod
    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise HipError(f"{what} failed: hipError {rc}")


def read_image(address: int) -> bytes:
    """The code object or offload bundle a program handed hipModuleLoadData (its size is in its headers)."""
    head = C.string_at(address, 64)
    if head[:4] == codeobj.ELF_MAGIC:
        return C.string_at(address, codeobj.elf_size(head))
    if not head.startswith(codeobj.BUNDLE_MAGIC):
        raise HipError("hipModuleLoadData image is neither an ELF code object nor a clang offload bundle")
    count, = struct.unpack_from("<Q", head, len(codeobj.BUNDLE_MAGIC))
    pos = end = len(codeobj.BUNDLE_MAGIC) + 8
    for _ in range(count):
        offset, size, triple_len = struct.unpack("<QQQ", C.string_at(address + pos, 24))
        pos += 24 + triple_len
        end = max(end, offset + size, pos)
    return C.string_at(address, end)


# ---------------------------------------------------------------- probed kernels


@attrs.define(eq=False)
class ProbedFunction:
    name: str
    function: int  # handle of the probed copy
    info: dict  # its kernel description (spec/kernel-json.md, GCN flavour)
    explicit_args: int  # kernelParams entries the original takes


def explicit_argument_count(asm: str, kernel: str) -> int:
    meta = parse_module(asm).metadata()
    return sum(1 for a in metadata.arguments(meta, kernel) if not a.get("value_kind", "").startswith("hidden_"))


@attrs.define(eq=False)
class HipHook:
    """Callbacks for shim/hip.c; one per process."""

    probes: ProbeFile
    trace: TraceDir
    target: str | None = None  # the device's gfx name, to pick a bundle entry; None: the bundle's only one
    kernels: frozenset[str] | None = None  # probe only these (None: all)
    modules: dict[int, bytes] = attrs.Factory(dict)
    functions: dict[int, tuple[int, str]] = attrs.Factory(dict)
    probed: dict[int, ProbedFunction] = attrs.Factory(dict)
    refused: dict[int, str] = attrs.Factory(dict)
    api: RealHip | None = None
    _callbacks: tuple = ()

    def install(self, shim: C.CDLL) -> None:
        try:  # the program would load it anyway; loading it first lets us reach the real functions now
            C.CDLL(os.environ.get("NEUTRINO_HIP_LIBRARY", "libamdhip64.so"), mode=C.RTLD_GLOBAL)
        except OSError as e:
            raise HipError(f"cannot load the HIP runtime: {e}") from None
        self.api = RealHip(shim)
        self._callbacks = (LOAD_CB(self._on_load), GETFN_CB(self._on_get_function), LAUNCH_CB(self._on_launch),
                           SEEN_CB(self._on_runtime_launch))
        shim.neutrino_hip_register(*self._callbacks)
        self.trace.write_probe(self.probes.text)

    # -- callbacks: never raise into C
    def _on_load(self, module, image, path) -> int:
        try:
            self.modules[module] = read_image(image) if image else Path(path.decode()).read_bytes()
        except Exception as e:  # noqa: BLE001 - a module we cannot read is simply not probed
            self.trace.event("hip_module_skipped", reason=str(e))
        return 0

    def _on_get_function(self, function, module, name) -> int:
        kernel = name.decode()
        self.functions[function] = (module, kernel)
        wanted = self.kernels is None or kernel in self.kernels
        return 1 if wanted and module in self.modules else 0

    def _on_runtime_launch(self, host_function, gx, bx) -> None:
        self.trace.event("hip_runtime_launch", function=hex(host_function or 0), reason="hipLaunchKernel kernels are not probed yet")

    def _on_launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        kernel = self.functions.get(function, (0, "?"))[1]
        if function in self.refused:
            return NOT_HANDLED
        try:
            return self.launch(function, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra)
        except Exception as e:  # noqa: BLE001 - fall back to the original launch, say why once
            self.refused[function] = str(e)
            self.trace.event("fallback", kernel=kernel, stage="hip", reason=f"{type(e).__name__}: {e}")
            return NOT_HANDLED

    # -- stages
    def build(self, function: int) -> ProbedFunction:
        module, kernel = self.functions[function]
        elf = codeobj.code_object_for(self.modules[module], self.target)
        target = codeobj.elf_target(elf)
        asm = codeobj.disassemble(elf)
        result = instrument(asm, self.probes, kernel=kernel, source=f"<code object {kernel}>", isa=isa_for(target))
        info = result.kernels[kernel]
        image = codeobj.assemble(result.ptx, target)
        handle, fn = C.c_void_p(), C.c_void_p()
        keep = C.create_string_buffer(image, len(image))
        self.api.check(self.api.module_load_data(C.byref(handle), keep), "hipModuleLoadData (probed)")
        self.api.check(self.api.module_get_function(C.byref(fn), handle, kernel.encode()), "hipModuleGetFunction (probed)")
        kernel_dir = self.trace.write_kernel(kernel, asm, result.ptx, info)
        self.trace.event("instrument", kernel=kernel, kernel_dir=kernel_dir, target=target, sites=info["sites"])
        return ProbedFunction(kernel, fn.value, info, explicit_argument_count(asm, kernel))

    def launch(self, function, grid, block, shared, stream, params, extra) -> int:
        pf = self.probed.get(function)
        if pf is None:
            pf = self.probed[function] = self.build(function)
        buffers = self.allocate(pf, grid, block)
        try:
            keep, new_params, new_extra = self.arguments(pf, buffers, params, extra)
            rc = self.api.module_launch(pf.function, *grid, *block, shared, stream, new_params, new_extra)
            self.api.check(rc, "hipModuleLaunchKernel (probed)")
            self.api.check(self.api.stream_synchronize(stream), "hipStreamSynchronize")
            self.collect(pf, grid, block, shared, buffers)
        finally:
            for _, _, _, address in buffers:
                self.api.free(address)
        return 0

    def allocate(self, pf: ProbedFunction, grid, block) -> list[tuple[dict, int, int, int]]:
        """(map, units, bytes, device address) per map of the kernel, zero-filled."""
        out = []
        try:
            for m in pf.info["maps"]:
                units, size = tracefmt.map_buffer_bytes(m, grid, block)
                address = C.c_void_p()
                self.api.check(self.api.malloc(C.byref(address), size), f"hipMalloc({size})")
                out.append((m, units, size, address.value))
                self.api.check(self.api.memset(address.value, 0, size), "hipMemset")
        except Exception:
            for _, _, _, address in out:
                self.api.free(address)
            raise
        return out

    def arguments(self, pf: ProbedFunction, buffers, params, extra):
        """The kernel's own arguments with one pointer per map appended (kernelParams or the `extra` buffer)."""
        pointers = [C.c_uint64(address) for *_, address in buffers]
        if params:
            array = (C.c_void_p * (pf.explicit_args + len(pointers)))()
            for i in range(pf.explicit_args):
                array[i] = params[i]
            for i, p in enumerate(pointers):
                array[pf.explicit_args + i] = C.addressof(p)
            return (array, pointers), C.cast(array, C.POINTER(C.c_void_p)), None
        if not extra:
            raise HipError("launch without kernelParams or extra")
        words, i = {}, 0
        while extra[i] not in (None, HIP_LAUNCH_PARAM_END):
            words[extra[i]] = extra[i + 1]
            i += 2
        size = C.c_size_t.from_address(words[HIP_LAUNCH_PARAM_BUFFER_SIZE]).value
        data = bytearray(C.string_at(words[HIP_LAUNCH_PARAM_BUFFER_POINTER], size))
        for param, pointer in zip(pf.info["params"], pointers):
            end = param["offset"] + 8
            data.extend(bytes(max(0, end - len(data))))
            data[param["offset"]:end] = struct.pack("<Q", pointer.value)
        blob = C.create_string_buffer(bytes(data), len(data))
        new_size = C.c_size_t(len(data))
        array = (C.c_void_p * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, C.addressof(blob), HIP_LAUNCH_PARAM_BUFFER_SIZE,
                                 C.addressof(new_size), HIP_LAUNCH_PARAM_END)
        return (array, blob, new_size), None, C.cast(array, C.POINTER(C.c_void_p))

    def collect(self, pf: ProbedFunction, grid, block, shared, buffers) -> None:
        sections = []
        for m, units, size, address in buffers:
            host = (C.c_char * size)()
            self.api.check(self.api.memcpy(host, address, size, HIP_MEMCPY_DEVICE_TO_HOST), "hipMemcpy (results)")
            cap = m["cap"] if isinstance(m["cap"], int) else 1
            sections.append(tracefmt.MapSection.of(m, units, cap, bytes(host)))
        index = self.trace.new_launch_index()
        rel = self.trace.write_result(index, grid=grid, block=block, shared_bytes=shared, maps=sections)
        self.trace.event("launch", index=index, kernel=pf.name, grid=list(grid), block=list(block), shared_bytes=shared,
                         result=rel)


def isa_for(target: str | None):
    """The ISA of a device's code: RDNA for gfx11 (wave32; probes loaded for it, --arch gfx11xx), else CDNA's GCN."""
    return RDNA if (target or "").startswith("gfx11") else GCN


def start(probes: ProbeFile, tracedir: str | os.PathLike, *, target: str | None = None,
          kernels: frozenset[str] | None = None) -> HipHook:
    """Hook HIP in this process: the shim must be LD_PRELOADed already (it is found by its exported symbol)."""
    shim = C.CDLL(None)
    if not hasattr(shim, "neutrino_hip_register"):
        raise HipError("the HIP shim is not loaded: run the program with LD_PRELOAD=" + str(build_hip_shim()))
    hook = HipHook(probes, TraceDir.create(tracedir), target or os.environ.get("NEUTRINO_HIP_ARCH"), kernels)
    hook.install(shim)
    return hook


def main(argv: list[str] | None = None) -> int:
    """`python -m neutrino.runtime.hip.hook -p PROBE [-t DIR] [-k KERNEL] -- script.py ARGS`: a Python HIP program, probed.

    Re-executes itself with the HIP shim preloaded when it is not, then runs the script in this process.
    """
    import argparse
    import runpy
    import sys

    from neutrino.toolbox import load_probes

    parser = argparse.ArgumentParser(prog="python -m neutrino.runtime.hip.hook")
    parser.add_argument("-p", "--probe", required=True)
    parser.add_argument("-t", "--tracedir", default="trace")
    parser.add_argument("-k", "--kernel", action="append")
    parser.add_argument("--arch", help="the device's gfx name (picks the offload-bundle entry)")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if not hasattr(C.CDLL(None), "neutrino_hip_register"):
        env = dict(os.environ, LD_PRELOAD=":".join(filter(None, [str(build_hip_shim()), os.environ.get("LD_PRELOAD")])))
        os.execve(sys.executable, [sys.executable, "-m", "neutrino.runtime.hip.hook", *(argv or sys.argv[1:])], env)
    try:
        probes = load_probes(args.probe, isa=isa_for(args.arch or os.environ.get("NEUTRINO_HIP_ARCH")).name)
    except NeutrinoError as e:
        print(f"neutrino: {e}", file=sys.stderr)
        return 2
    hook = start(probes, args.tracedir, target=args.arch, kernels=frozenset(args.kernel) if args.kernel else None)
    sys.argv = [args.script, *args.args]
    try:
        runpy.run_path(args.script, run_name="__main__")
    finally:
        hook.trace.close()  # the hook (and its callbacks) lives until here
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
