"""`neutrino.annotate("name")`: a named range of the program, as a context manager or a decorator.

    with neutrino.annotate("forward"):
        y = model(x)

    @neutrino.annotate("step")
    def step(batch): ...

Under neutrino the range is recorded by the shim (ranges.bin, source 3, spec/trace-format.md) on
the calling thread, nested with the program's NVTX ranges; it is *not* also sent to NVTX, which
our own injection would record a second time. Outside neutrino it forwards to NVTX when the
program already imported the `nvtx` package or `torch` (so Nsight Systems sees it), and is
otherwise a no-op. It imports only the standard library (ctypes at the first
range); the backend is chosen at the first range, once per process.
"""

from __future__ import annotations

import functools
import os
import sys
import threading


class _Backend:
    """push(annotation) / pop(): where ranges go in this process. This one: nowhere."""

    def push(self, a: "annotate") -> None:
        """No-op: no neutrino and no NVTX in this process."""

    def pop(self) -> None:
        """No-op."""


class _ShimBackend(_Backend):
    def __init__(self, lib):
        self.push_fn = lib.neutrino_annotate_push  # no argtypes: bytes pass as char * without a conversion step
        self.pop = lib.neutrino_annotate_pop

    def push(self, a: "annotate") -> None:
        self.push_fn(a._bytes)


class _NvtxBackend(_Backend):
    def __init__(self, push_range, pop_range):
        self.push_range, self.pop = push_range, pop_range

    def push(self, a: "annotate") -> None:
        self.push_range(a.name)


def _shim_backend() -> _Backend | None:
    """The shim LD_PRELOAD put in this process, when neutrino runs it."""
    path = os.environ.get("NEUTRINO_SHIM")
    if not path or not os.environ.get("NEUTRINO_OPTIONS") or path not in os.environ.get("LD_PRELOAD", ""):
        return None
    try:
        import ctypes as C

        lib = C.PyDLL(path)  # already loaded: no new copy; PyDLL keeps the GIL (the calls never wait)
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
    """The backend of this process, chosen at the first range (a forked child chooses again)."""

    lock = threading.Lock()
    backend: _Backend | None = None


def _choose() -> _Backend:
    with _Chosen.lock:
        if _Chosen.backend is None:
            _Chosen.backend = _shim_backend() or _nvtx_backend() or _Backend()
        return _Chosen.backend


def _reset_backend() -> None:
    """Choose again at the next use (a forked child; tests)."""
    _Chosen.backend = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_backend)


class annotate:  # noqa: N801 - used like a function: `with neutrino.annotate("x")`
    """A named range on the calling thread: `with annotate(name):` or `@annotate(name)`."""

    __slots__ = ("name", "_bytes")

    def __init__(self, name: str):
        self.name = str(name)
        self._bytes = self.name.encode("utf-8", "replace")

    def __enter__(self):
        try:
            (_Chosen.backend or _choose()).push(self)
        except Exception:  # noqa: BLE001 - a range is never worth breaking the program
            pass
        return self

    def __exit__(self, *exc):
        try:
            (_Chosen.backend or _choose()).pop()
        except Exception:  # noqa: BLE001
            pass
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapped
