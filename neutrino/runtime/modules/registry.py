"""Which modules and kernels exist: the program's loads and lookups, as the shim reports them.

One job: remember, per driver handle, the module's PTX and the kernel a
function handle stands for, and say which handles should be probed. Nothing
here touches the GPU or builds code.

Handles are addresses the driver reuses: once a module is unloaded, the next
load may get its module handle and the next lookups its function handles, for
other kernels (XLA's autotuner loads, runs and unloads one candidate after
another). So a module is forgotten when it is unloaded, when a new module gets
its handle, and when one of its function handles is returned for another
kernel: the caller (core.py) then drops everything keyed by those handles.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import attrs

from neutrino.runtime.modules.name_filter import SKIPPED_REASON, may_hold_selected

# Collective-communication kernels (NCCL: `ncclDevKernel_AllReduce_Sum_f32_RING_LL`, older
# `ncclKernel_...`) run untouched unless -k names them: they spin on peers' progress, and a
# probed copy (more registers, buffers, a slower path) must never change or stall a collective.
COLLECTIVE_PREFIXES = ("ncclDevKernel", "ncclKernel")


def is_collective(name: str) -> bool:
    return name.startswith(COLLECTIVE_PREFIXES)


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


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
    aliases: set = attrs.Factory(set)  # module handles of cuLibraryGetModule that stand for this library
    kernels: dict = attrs.Factory(dict)  # kernel name -> FuncRec, the kernels looked up in it
    examined: bool = True  # False: no kernel name in it can match -k, its PTX was not looked for


@attrs.define(eq=False)
class FuncRec:
    name: str
    module: ModuleRec
    failed: str | None = None  # permanent failure: never probed again
    handles: set = attrs.Factory(set)  # function and kernel handles mapped to it (Registry.functions)


@attrs.frozen
class Forgotten:
    """A module the program unloaded (or whose handles the driver gave to others): its kernels and
    the function/kernel handles that were mapped to them, which launches no longer reach."""

    module: ModuleRec
    kernels: tuple[FuncRec, ...]
    handles: tuple[tuple[int, FuncRec], ...]

    @property
    def probed(self) -> list[str]:
        """Names of its kernels that had probed handles."""
        return sorted({rec.name for _, rec in self.handles})


class _NotExamined(Exception):
    """A module none of whose kernels -k can select (name_filter.py): its PTX is not looked for."""


class Registry:
    """Modules by handle, probed functions by handle. Thread-safe."""

    def __init__(self, find_ptx, arch, wants, compiled=None, named=lambda name: False, selected_literals=()):
        self._find_ptx = find_ptx  # (image, arch, path=) -> PtxImage | None
        # the bytes a -k pattern needs in a kernel's name: a module whose image holds none of them is not
        # examined (name_filter.py); empty without -k
        self._literals = tuple(selected_literals)
        self._arch = arch  # () -> (major, minor) or None, asked only when an image needs it
        self._wants = wants  # kernel name -> bool (the -k / --filter options)
        self._named = named  # kernel name -> bool: -k names it explicitly
        self.collectives: set[str] = set()  # collective kernels seen and left untouched
        self._lock = threading.Lock()
        self.modules: dict[int, ModuleRec] = {}
        self.functions: dict[int, FuncRec] = {}
        self._seen: set[str] = set()  # names of kernels looked up in modules with PTX (the exit summary)
        self._linked: dict[int, tuple[str, bytes | None]] = {}  # cubin address from cuLinkComplete -> (PTX
        # text, digest of the cubin when known: the address is reused once the link state is destroyed)
        self._link_ptx: dict[int, list[str]] = {}  # link state -> PTX added so far
        self.compiled = compiled  # compilers.CompiledIndex: cubin content -> PTX compiled in-process

    @property
    def selected_literals(self) -> tuple[bytes, ...]:
        """The bytes a -k pattern needs in a kernel's name; () without -k (name_filter.py)."""
        return self._literals

    # -- modules
    def add_module(self, kind: str, handle: int, image: bytes | None, path: str | None,
                   image_addr: int, examined: bool = True) -> tuple[ModuleRec, str, str | None, Forgotten | None]:
        """Record a loaded module; returns it, why it has no PTX (when it has none), for a cubin
        compiled in this process why that compilation left no usable PTX (several link inputs), and
        the module that had this handle before (its unload was not seen), now forgotten. `examined`
        False: the caller found from the image's headers that -k can select none of its kernels
        (name_filter.fatbin_may_hold_selected; `image` is then None, not copied)."""
        compiled_reason = None
        try:
            if not examined and not (image_addr and image_addr in self._linked):
                raise _NotExamined
            ptx, compiled_reason = self._module_ptx(image, path, image_addr)
        except _NotExamined:
            ptx, reason = None, SKIPPED_REASON
        except Exception as e:  # noqa: BLE001 - never break the program's load
            ptx, reason = None, f"PTX extraction failed: {e}"
        else:
            reason = "no PTX in the image (SASS only)"
        rec = ModuleRec(handle, kind, ptx, path, examined=reason != SKIPPED_REASON)
        rec.aliases.add(handle)
        with self._lock:
            old = self.modules.get(handle)
            forgotten = self._forget_module(old) if old is not None else None
            self.modules[handle] = rec
        return rec, reason, compiled_reason, forgotten

    def _module_ptx(self, image, path, image_addr):
        """(the module's PTX or None, why a cubin compiled in this process has none or None): the
        compiled index is asked once per load (it hashes the whole image)."""
        linked = self._linked.get(image_addr) if image_addr else None
        if linked is not None:
            text, digest = linked
            if digest is None or (image is not None and _digest(image) == digest):
                return SimplePtx(text, "cuLinkAddData"), None
            with self._lock:  # the address held that link's cubin once: this image is another
                self._linked.pop(image_addr, None)
        if image is None and path:
            image = Path(path).read_bytes()
        if image is None:
            return None, None
        if not may_hold_selected(image, self._literals):
            raise _NotExamined
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
                self._linked[cubin_addr] = (parts[0], _digest(cubin) if cubin else None)
        if parts and cubin and self.compiled is not None:  # XLA's driver fallback copies the cubin first
            self.compiled.record(cubin, "cuLinkAddData", parts)

    # -- functions
    def add_function(self, kind: str, owner: int, name: str | None, out: int) -> tuple[bool, Forgotten | None]:
        """A handle was looked up. Returns whether launches of `out` should come to us, and the module
        forgotten because `out` (or, for cuLibraryGetModule, the module handle) was its until now:
        the driver reuses a handle only after its module is gone, so a lookup is authoritative."""
        with self._lock:
            if kind == "library_module":  # cuLibraryGetModule: the module shares the library's PTX
                lib = self.modules.get(owner)
                old = self.modules.get(out)
                forgotten = self._forget_module(old) if old is not None and old is not lib else None
                if lib is not None:
                    self.modules[out] = lib
                    lib.aliases.add(out)
                return False, forgotten
            rec = self._kernel_of(kind, owner, name)
            old = self.functions.get(out)
            forgotten = None
            if old is not None and old is not rec:
                forgotten = self._forget_handle(out, old, rec)
            if rec is None or rec.failed or not self._wants(rec.name):
                return False, forgotten
            self.functions[out] = rec
            rec.handles.add(out)
            return True, forgotten

    def _kernel_of(self, kind: str, owner: int, name: str | None) -> FuncRec | None:
        """The kernel record a lookup names (made at its first lookup), or None (no PTX, a collective).
        Called with the lock held."""
        if kind == "kernel_function":  # cuKernelGetFunction: same kernel as its CUkernel
            return self.functions.get(owner)
        if name is not None and is_collective(name) and not self._named(name):
            self.collectives.add(name)  # with or without PTX in its module
            return None
        mod = self.modules.get(owner)
        if mod is None or mod.ptx is None or name is None:
            return None
        rec = mod.kernels.get(name)
        if rec is None:
            rec = mod.kernels[name] = FuncRec(name, mod)
            self._seen.add(name)
        return rec

    def _forget_handle(self, handle: int, old: FuncRec, new: FuncRec | None) -> Forgotten:
        """`handle` now stands for another kernel: its old module is gone (unless the new kernel is
        in the same module, when only this mapping goes). Called with the lock held."""
        if new is not None and new.module is old.module:
            del self.functions[handle]
            old.handles.discard(handle)
            return Forgotten(old.module, (), ((handle, old),))
        return self._forget_module(old.module)

    def unload_module(self, handle: int) -> Forgotten | None:
        """cuModuleUnload / cuLibraryUnload of `handle`: forget the module, its kernels and their
        handles. None when the handle is not a module we know, or is a cuLibraryGetModule alias
        (which the driver refuses to unload)."""
        with self._lock:
            mod = self.modules.get(handle)
            if mod is None or mod.handle != handle:
                return None
            return self._forget_module(mod)

    def _forget_module(self, mod: ModuleRec) -> Forgotten:
        """Drop a module, its aliases, its kernels and every handle mapped to them: linear in what
        it had. Called with the lock held."""
        for h in mod.aliases:
            if self.modules.get(h) is mod:
                del self.modules[h]
        mod.aliases.clear()
        dropped = []
        for rec in mod.kernels.values():
            for h in rec.handles:
                if self.functions.get(h) is rec:
                    del self.functions[h]
                    dropped.append((h, rec))
            rec.handles.clear()
        kernels = tuple(mod.kernels.values())
        mod.kernels.clear()
        return Forgotten(mod, kernels, tuple(dropped))

    def kernels_seen(self) -> set[str]:
        """Names of the kernels the program looked up in modules with PTX (probed or not): the exit summary."""
        with self._lock:
            return set(self._seen)

    def handles_of(self, rec: FuncRec) -> list[int]:
        with self._lock:
            return sorted(rec.handles)
