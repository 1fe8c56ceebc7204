"""Which modules and kernels exist: the program's loads and lookups, as the shim reports them.

One job: remember, per driver handle, the module's PTX and the kernel a
function handle stands for, and say which handles should be probed. Nothing
here touches the GPU or builds code.
"""

from __future__ import annotations

import threading
from pathlib import Path

import attrs

# Collective-communication kernels (NCCL: `ncclDevKernel_AllReduce_Sum_f32_RING_LL`, older
# `ncclKernel_...`) run untouched unless -k names them: they spin on peers' progress, and a
# probed copy (more registers, buffers, a slower path) must never change or stall a collective.
COLLECTIVE_PREFIXES = ("ncclDevKernel", "ncclKernel")


def is_collective(name: str) -> bool:
    return name.startswith(COLLECTIVE_PREFIXES)


@attrs.frozen
class SimplePtx:
    """PTX found without an image (cuLinkAddData): the text and where it came from."""

    text: str
    source: str
    arch: str | None = None


@attrs.define(eq=False)
class ModuleRec:
    handle: int
    kind: str
    ptx: object | None  # PtxImage (.text, .arch, .source) or None
    path: str | None = None


@attrs.define(eq=False)
class FuncRec:
    name: str
    module: ModuleRec
    failed: str | None = None  # permanent failure: never probed again


class Registry:
    """Modules by handle, probed functions by handle. Thread-safe."""

    def __init__(self, find_ptx, arch, wants, compiled=None, named=lambda name: False):
        self._find_ptx = find_ptx  # (image, arch, path=) -> PtxImage | None
        self._arch = arch  # () -> (major, minor) or None, asked only when an image needs it
        self._wants = wants  # kernel name -> bool (the -k / --filter options)
        self._named = named  # kernel name -> bool: -k names it explicitly
        self.collectives: set[str] = set()  # collective kernels seen and left untouched
        self._lock = threading.Lock()
        self.modules: dict[int, ModuleRec] = {}
        self.functions: dict[int, FuncRec] = {}
        self._by_name: dict[tuple[int, str], FuncRec] = {}
        self._linked: dict[int, str] = {}  # cubin address from cuLinkComplete -> PTX text
        self._link_ptx: dict[int, list[str]] = {}  # link state -> PTX added so far
        self.compiled = compiled  # compilers.CompiledIndex: cubin content -> PTX compiled in-process

    # -- modules
    def add_module(self, kind: str, handle: int, image: bytes | None, path: str | None,
                   image_addr: int) -> tuple[ModuleRec, str, str | None]:
        """Record a loaded module; returns it, why it has no PTX (when it has none), and, for a cubin
        compiled in this process, why that compilation left no usable PTX (several link inputs)."""
        compiled_reason = None
        try:
            ptx, compiled_reason = self._module_ptx(image, path, image_addr)
        except Exception as e:  # noqa: BLE001 - never break the program's load
            ptx, reason = None, f"PTX extraction failed: {e}"
        else:
            reason = "no PTX in the image (SASS only)"
        rec = ModuleRec(handle, kind, ptx, path)
        with self._lock:
            self.modules[handle] = rec
        return rec, reason, compiled_reason

    def _module_ptx(self, image, path, image_addr):
        """(the module's PTX or None, why a cubin compiled in this process has none or None): the
        compiled index is asked once per load (it hashes the whole image)."""
        linked = self._linked.get(image_addr) if image_addr else None
        if linked is not None:
            return SimplePtx(linked, "cuLinkAddData"), None
        if image is None and path:
            image = Path(path).read_bytes()
        if image is None:
            return None, None
        entry = self.compiled.lookup(image) if self.compiled is not None else None
        if entry is not None and entry.ptx is not None:  # a cubin the program compiled itself (XLA: nvJitLink)
            return SimplePtx(entry.ptx, entry.compiler), None
        return self._find_ptx(image, self._arch(), path=path), entry.reason if entry is not None else None

    def link_add(self, state: int, ptx_text: str) -> None:
        with self._lock:
            self._link_ptx.setdefault(state, []).append(ptx_text)

    def link_complete(self, state: int, cubin_addr: int, cubin: bytes | None = None) -> None:
        with self._lock:
            parts = self._link_ptx.pop(state, None)
            if parts and len(parts) == 1 and cubin_addr:
                self._linked[cubin_addr] = parts[0]
        if parts and cubin and self.compiled is not None:  # XLA's driver fallback copies the cubin first
            self.compiled.record(cubin, "cuLinkAddData", parts)

    # -- functions
    def add_function(self, kind: str, owner: int, name: str | None, out: int) -> bool:
        """A handle was looked up. Returns True when launches of `out` should come to us."""
        with self._lock:
            if kind == "library_module":  # cuLibraryGetModule: the module shares the library's PTX
                lib = self.modules.get(owner)
                if lib is not None:
                    self.modules[out] = lib
                return False
            if kind == "kernel_function":  # cuKernelGetFunction: same kernel as its CUkernel
                rec = self.functions.get(owner)
            else:
                if name is not None and is_collective(name) and not self._named(name):
                    self.collectives.add(name)  # with or without PTX in its module
                    return False
                mod = self.modules.get(owner)
                if mod is None or mod.ptx is None or name is None:
                    return False
                rec = self._by_name.get((id(mod), name))
                if rec is None:
                    rec = self._by_name[(id(mod), name)] = FuncRec(name, mod)
            if rec is None or rec.failed or not self._wants(rec.name):
                return False
            self.functions[out] = rec
            return True

    def kernels_seen(self) -> set[str]:
        """Names of the kernels the program looked up in modules with PTX (probed or not): the exit summary."""
        with self._lock:
            return {name for _, name in self._by_name}

    def handles_of(self, rec: FuncRec) -> list[int]:
        with self._lock:
            return [h for h, r in self.functions.items() if r is rec]
