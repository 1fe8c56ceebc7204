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
import shutil
import threading
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

from neutrino.runtime.modules.subprocess_compilers import ENV_INDEX

NVJITLINK_INPUT_PTX = 2
NVJITLINK_INPUT_NAMES = {1: "cubin", 2: "PTX", 3: "LTO-IR", 4: "fatbin", 5: "object", 6: "library", 7: "index"}
CU_JIT_INPUT_PTX = 1
DEFAULT_MAX_BYTES = 256 << 20

# kinds reported by shim/compilers.c
TAP_INPUT_DATA, TAP_INPUT_FILE, TAP_OUTPUT_CUBIN, TAP_DESTROY = range(4)
CB_COMPILED = C.CFUNCTYPE(None, C.c_int, C.c_void_p, C.c_int, C.c_void_p, C.c_size_t)


# Plain classes, not attrs: this module loads at interpreter start in every profiled process
# (bootstrap.py), and attrs would cost each of them its import (spec/runtime.md, "Start-up").
class _Link:
    """The inputs of one link (nvJitLink handle or driver link state) so far."""

    __slots__ = ("ptx", "others")

    def __init__(self, ptx: list[str] | None = None, others: list[str] | None = None):
        self.ptx = [] if ptx is None else ptx
        self.others = [] if others is None else others  # names of the other inputs' types


class Compiled(NamedTuple):
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
        self.wrapper_dir: Path | None = None  # the ptxas/nvlink wrappers' index this process made (removed at exit)

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
        filed = os.environ.get(ENV_INDEX)  # what the ptxas/nvlink wrappers filed by cubin hash (subprocess_compilers.py)
        if not self._by_cubin and not filed:
            return None
        key = cubin_key(image)
        with self._lock:
            found = self._by_cubin.get(key)
        if found is None and filed:
            found = _filed_by_ptxas(Path(filed), key)
        return found

    def sees_xla_compiles(self) -> bool:
        """Whether in-process compilations reach us: the subprocess wrappers are in place, or nvJitLink links came."""
        return bool(os.environ.get(ENV_INDEX)) or bool(self.links_seen)

    # -- exit
    def close(self, event=None) -> None:
        """Note what the subprocess wrappers compiled (one `subprocess_compilers` event), then remove
        their index when this process made it. Idempotent; never raises."""
        index, self.wrapper_dir = self.wrapper_dir, None
        if index is None:
            return
        try:
            counts = wrapper_call_counts(index / "calls.log")
            if event is not None and counts:
                event("subprocess_compilers", **counts)
        except Exception:  # noqa: BLE001 - a summary, never a failure of the program
            pass
        shutil.rmtree(index, ignore_errors=True)

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
    """What a ptxas or nvlink subprocess made the cubin with this hash from (XLA's route): its PTX,
    or why it has none; None when no wrapper wrote it."""
    try:
        return Compiled(_ptx_text((index_dir / f"{key}.ptx").read_bytes()), "ptxas")
    except OSError:
        pass
    try:
        return Compiled(None, "nvlink", (index_dir / f"{key}.why").read_text(errors="replace").strip())
    except OSError:
        return None


def unseen_xla_compile_reason() -> str:
    """Why an XLA cubin that no tap saw compiled has no PTX."""
    if os.environ.get(ENV_INDEX):
        return ("neither nvJitLink nor the ptxas/nvlink wrappers saw this cubin made: it came from JAX's persistent "
                "compilation cache, or XLA ran a compiler that is not the one first on PATH")
    return ("no nvJitLink link was seen in this process and the ptxas wrapper is not in place (no ptxas on PATH or "
            "in /usr/local/cuda/bin)")


def wrapper_call_counts(calls_log: Path) -> dict:
    """From the wrappers' calls.log: calls per tool, failed calls, and nvlink calls by input count."""
    from neutrino.runtime.modules.subprocess_compilers import read_call, split_link_arguments

    calls: dict[str, int] = {}
    failed = 0
    link_inputs: dict[str, int] = {}
    try:
        lines = calls_log.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        call = read_call(line)
        if call is None:
            continue
        tool, rc, argv = call
        calls[tool] = calls.get(tool, 0) + 1
        failed += rc != 0
        if tool == "nvlink":
            n = str(len(split_link_arguments(argv)[0]))
            link_inputs[n] = link_inputs.get(n, 0) + 1
    return {"calls": calls, "failed": failed, "nvlink_inputs": link_inputs} if calls else {}


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
