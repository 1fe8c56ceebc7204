"""`neutrino.annotate("name")`: a named range of the program, as a context manager or a decorator.

    with neutrino.annotate("forward"):
        y = model(x)

    @neutrino.annotate("step")
    def step(batch): ...

Under neutrino the range is recorded by the shim (ranges.bin, source 3, spec/trace-format.md) on
the calling thread, nested with the program's NVTX ranges; it is *not* also sent to NVTX, which
our own injection would record a second time. Outside neutrino it forwards to NVTX when the
program already imported the `nvtx` package or `torch` (so Nsight Systems sees it), and is
otherwise a no-op. Nothing here imports more than `os`, `sys` and `ctypes`: the backend is
chosen at the first use, once per process.
"""

from __future__ import annotations

import functools
import os
import sys
import threading


class _Backend:
    """push(name: bytes, text: str) / pop(): where ranges go in this process."""

    def push(self, name: bytes, text: str) -> None:
        """No-op: no neutrino and no NVTX in this process."""

    def pop(self) -> None:
        """No-op."""


class _ShimBackend(_Backend):
    def __init__(self, lib):
        self.push_fn = lib.neutrino_annotate_push
        self.pop_fn = lib.neutrino_annotate_pop

    def push(self, name: bytes, text: str) -> None:
        self.push_fn(name)

    def pop(self) -> None:
        self.pop_fn()


class _NvtxBackend(_Backend):
    def __init__(self, push_range, pop_range):
        self.push_range, self.pop_range = push_range, pop_range

    def push(self, name: bytes, text: str) -> None:
        self.push_range(text)

    def pop(self) -> None:
        self.pop_range()


def _shim_backend() -> _Backend | None:
    """The shim LD_PRELOAD put in this process, when neutrino runs it."""
    path = os.environ.get("NEUTRINO_SHIM")
    if not path or not os.environ.get("NEUTRINO_OPTIONS") or path not in os.environ.get("LD_PRELOAD", ""):
        return None
    try:
        import ctypes as C

        lib = C.PyDLL(path)  # already loaded: no new copy; PyDLL keeps the GIL (the calls never wait)
        lib.neutrino_annotate_push.argtypes = [C.c_char_p]
        lib.neutrino_annotate_push.restype = C.c_int
        lib.neutrino_annotate_pop.restype = C.c_int
        return _ShimBackend(lib)
    except (OSError, AttributeError):
        return None


def _nvtx_backend() -> _Backend | None:
    """NVTX through a library the program already imported (never imported here: torch is heavy)."""
    nvtx = sys.modules.get("nvtx")
    if nvtx is not None and hasattr(nvtx, "push_range") and hasattr(nvtx, "pop_range"):
        return _NvtxBackend(nvtx.push_range, nvtx.pop_range)
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            from torch.cuda import nvtx as tnvtx

            return _NvtxBackend(tnvtx.range_push, tnvtx.range_pop)
        except Exception:  # noqa: BLE001 - a torch without CUDA: no NVTX
            return None
    return None


class _Chosen:
    """The backend of this process, chosen once (a forked child chooses again)."""

    lock = threading.Lock()
    backend: _Backend | None = None
    pid = 0


def _backend() -> _Backend:
    b = _Chosen.backend
    if b is not None and _Chosen.pid == os.getpid():
        return b
    with _Chosen.lock:
        b = _shim_backend() or _nvtx_backend() or _Backend()
        _Chosen.backend, _Chosen.pid = b, os.getpid()
    return b


def _reset_backend() -> None:
    """Choose again at the next use (tests; a program that imports torch after its first range)."""
    _Chosen.backend = None


class annotate:  # noqa: N801 - used like a function: `with neutrino.annotate("x")`
    """A named range on the calling thread: `with annotate(name):` or `@annotate(name)`."""

    __slots__ = ("name", "_bytes")

    def __init__(self, name: str):
        self.name = str(name)
        self._bytes = self.name.encode("utf-8", "replace")

    def __enter__(self):
        try:
            _backend().push(self._bytes, self.name)
        except Exception:  # noqa: BLE001 - a range is never worth breaking the program
            pass
        return self

    def __exit__(self, *exc):
        try:
            _backend().pop()
        except Exception:  # noqa: BLE001
            pass
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapped
