"""PTX compiled inside the process: which cubin came from which PTX.

XLA (JAX) compiles its PTX with libnvJitLink and loads the SASS-only result
with cuModuleLoadData; XLA's driver fallback does the same with the driver's
linker (cuLinkAddData/cuLinkComplete) and copies the cubin before loading it.
The shim taps both (shim/compilers.c, shim/preload.c) and reports each link's
inputs and its output here. We keep cubin content (sha256) -> the PTX it came
from; when the program loads those bytes, the registry asks `lookup` and the
module has PTX after all. Nothing on the compiler's side changes.

A link with exactly one PTX input and nothing else is usable: the cubin is
that PTX, compiled. Anything else (several PTX inputs, cubins or LTO-IR in
the link) is remembered only as the reason the module has no usable PTX.
Memory is bounded: the oldest entries go first once `max_bytes` of PTX are held
(autotuning compiles many candidates that are never loaded again).
"""

from __future__ import annotations

import ctypes as C
import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path

import attrs

from neutrino.runtime.ptxas_wrapper import ENV_INDEX

NVJITLINK_INPUT_PTX = 2
NVJITLINK_INPUT_NAMES = {1: "cubin", 2: "PTX", 3: "LTO-IR", 4: "fatbin", 5: "object", 6: "library", 7: "index"}
CU_JIT_INPUT_PTX = 1
DEFAULT_MAX_BYTES = 256 << 20

# kinds reported by shim/compilers.c
TAP_INPUT_DATA, TAP_INPUT_FILE, TAP_OUTPUT_CUBIN, TAP_DESTROY = range(4)
CB_COMPILED = C.CFUNCTYPE(None, C.c_int, C.c_void_p, C.c_int, C.c_void_p, C.c_size_t)


@attrs.define
class _Link:
    """The inputs of one link (nvJitLink handle or driver link state) so far."""

    ptx: list[str] = attrs.Factory(list)
    others: list[str] = attrs.Factory(list)  # names of the other inputs' types


@attrs.frozen
class Compiled:
    """What one cubin was compiled from: PTX text, or why there is none."""

    ptx: str | None
    compiler: str
    reason: str | None = None


def cubin_key(image: bytes) -> str:
    return hashlib.sha256(image).hexdigest()


class CompiledIndex:
    """cubin content -> the PTX it was compiled from, fed by the compiler taps. Thread-safe."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._links: dict[tuple[str, int], _Link] = {}
        self._by_cubin: OrderedDict[str, Compiled] = OrderedDict()
        self._held = 0
        self.links_seen: dict[str, int] = {}  # compiler -> outputs reported (for the exit summary)

    # -- what the taps report
    def add_input(self, compiler: str, handle: int, ptx: str | None, other: str | None = None) -> None:
        with self._lock:
            link = self._links.setdefault((compiler, handle), _Link())
            if ptx is not None:
                link.ptx.append(ptx)
            else:
                link.others.append(other or "unknown")

    def add_output(self, compiler: str, handle: int, cubin: bytes) -> None:
        """The link of `handle` produced `cubin` (the handle may produce it again: inputs are kept)."""
        with self._lock:
            link = self._links.get((compiler, handle), _Link())
            self.links_seen[compiler] = self.links_seen.get(compiler, 0) + 1
            self._remember(cubin_key(cubin), _compiled_from(link, compiler))

    def record(self, cubin: bytes, compiler: str, ptx: list[str], others: list[str] = ()) -> None:
        """A link whose inputs were seen elsewhere (the driver's linker: registry.py) produced `cubin`."""
        with self._lock:
            self.links_seen[compiler] = self.links_seen.get(compiler, 0) + 1
            self._remember(cubin_key(cubin), _compiled_from(_Link(list(ptx), list(others)), compiler))

    def forget(self, compiler: str, handle: int) -> None:
        with self._lock:
            self._links.pop((compiler, handle), None)

    # -- what module loads ask
    def lookup(self, image: bytes) -> Compiled | None:
        filed = os.environ.get(ENV_INDEX)  # PTX the ptxas wrapper filed by cubin hash (ptxas_wrapper.py)
        if not self._by_cubin and not filed:
            return None
        key = cubin_key(image)
        with self._lock:
            found = self._by_cubin.get(key)
        if found is None and filed:
            found = _filed_by_ptxas(Path(filed), key)
        return found

    def _remember(self, key: str, entry: Compiled) -> None:
        old = self._by_cubin.pop(key, None)
        if old is not None:
            self._held -= len(old.ptx or "")
        self._by_cubin[key] = entry
        self._held += len(entry.ptx or "")
        while self._held > self.max_bytes and len(self._by_cubin) > 1:
            _, gone = self._by_cubin.popitem(last=False)
            self._held -= len(gone.ptx or "")


def _filed_by_ptxas(index_dir: Path, key: str) -> Compiled | None:
    """The PTX a ptxas subprocess compiled into the cubin with this hash (XLA's route), or None."""
    try:
        raw = (index_dir / f"{key}.ptx").read_bytes()
    except OSError:
        return None
    return Compiled(_ptx_text(raw), "ptxas")


def _compiled_from(link: _Link, compiler: str) -> Compiled:
    if len(link.ptx) == 1 and not link.others:
        return Compiled(link.ptx[0], compiler)
    if not link.ptx:
        return Compiled(None, compiler, f"{compiler} linked no PTX ({', '.join(link.others) or 'no inputs seen'})")
    parts = [f"{len(link.ptx)} PTX"] + link.others
    return Compiled(None, compiler, f"{compiler} linked several inputs ({', '.join(parts)}) into this cubin; "
                                    "only a cubin made from one PTX can be probed")


def make_compiler_callback(index: CompiledIndex, read_image):
    """The ctypes callback for shim/compilers.c (nvJitLink). `read_image(addr) -> (bytes, addr)`
    reads a cubin from the caller's buffer, sized by its ELF headers. Never raises into C."""

    def compiled_cb(kind, handle, type_, data, size):
        try:
            h = handle or 0
            if kind == TAP_INPUT_DATA:
                text = _ptx_text(C.string_at(data, size)) if type_ == NVJITLINK_INPUT_PTX and data else None
                index.add_input("nvJitLink", h, text, NVJITLINK_INPUT_NAMES.get(type_, f"type {type_}"))
            elif kind == TAP_INPUT_FILE:
                text = None
                if type_ == NVJITLINK_INPUT_PTX and data:
                    with open(C.string_at(data).decode(errors="replace"), "rb") as f:
                        text = _ptx_text(f.read())
                index.add_input("nvJitLink", h, text, NVJITLINK_INPUT_NAMES.get(type_, f"type {type_}"))
            elif kind == TAP_OUTPUT_CUBIN and data:
                index.add_output("nvJitLink", h, read_image(data)[0])
            elif kind == TAP_DESTROY:
                index.forget("nvJitLink", h)
        except Exception:  # noqa: BLE001 - the program's compilation must never notice us
            pass

    return CB_COMPILED(compiled_cb)


def _ptx_text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")
