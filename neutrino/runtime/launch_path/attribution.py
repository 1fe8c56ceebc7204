"""Which line of the user's Python code led to a launch."""

from __future__ import annotations

import os
import sys
import threading

# Frames from these packages (and generated Inductor code) are library internals, not "the user's line".
_SKIP_PACKAGES = ("torch", "triton", "neutrino", "cupy", "cupyx", "numba", "jax", "functools", "contextlib", "threading",
                  "concurrent")
_SKIP_PARTS = ("torchinductor_", "/triton/", "<frozen ", "<string>")


def _module_file(mod) -> str | None:
    """A module's `__file__`, read from its namespace without touching the module itself: a module
    that imports lazily (importlib's LazyLoader; CuPy puts `cupyx` in sys.modules so) would run its
    whole import at an attribute access (0.43 s for cupyx, scipy included, in a program that never
    used it: issue 29's first-launch seconds)."""
    try:
        namespace = object.__getattribute__(mod, "__dict__")
    except (AttributeError, TypeError):
        return None
    f = namespace.get("__file__")
    if f is None:
        spec = namespace.get("__spec__")
        f = getattr(spec, "origin", None) if getattr(spec, "has_location", False) else None
    return f if isinstance(f, str) else None


def _package_dirs() -> tuple[str, ...]:
    dirs = []
    for name in _SKIP_PACKAGES:
        mod = sys.modules.get(name)
        f = _module_file(mod) if mod is not None else None
        if f:
            d = os.path.dirname(f)
            # single-file stdlib modules (functools.py) are matched by file, packages by directory
            dirs.append(f if not f.endswith("__init__.py") else d + os.sep)
    return tuple(dirs)


def _cache_dirs() -> tuple[str, ...]:
    """Generated code (Inductor's output modules) lives in these caches."""
    out = []
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        v = os.environ.get(var)
        if v:
            out.append(os.path.abspath(v) + os.sep)
    return tuple(out)


def is_library_file(filename: str, dirs: tuple[str, ...]) -> bool:
    if any(p in filename for p in _SKIP_PARTS):
        return True
    return filename.startswith(dirs)


def user_frame(start=None, limit: int = 200) -> str | None:
    """`file:line (function)` of the innermost frame outside the library packages, or None.

    A launch from a thread with no user frame (PyTorch's autograd threads run the
    backward) is attributed to where the main thread is waiting, e.g. `loss.backward()`.
    One-shot; the launch path keeps an `Attributor`, which remembers its verdicts.
    """
    return Attributor().frame(start, limit)  # from here, our own frame is a library frame: skipped


def _walk(f, dirs, limit, known=None):
    for _ in range(limit):
        if f is None:
            return None
        code = f.f_code
        library = known.get(code) if known is not None else None
        if library is None:
            library = is_library_file(code.co_filename, dirs)
            if known is not None:
                known[code] = library
        if not library:
            return f"{code.co_filename}:{f.f_lineno} ({code.co_name})"
        f = f.f_back
    return None


class Attributor:
    """`user_frame` for the launch path: the verdict per code object and the package
    directories are remembered, so a launch pays a few dict lookups per frame.
    The directories are looked up again when the set of loaded modules grows."""

    def __init__(self):
        self._known: dict = {}
        self._dirs: tuple[str, ...] = ()
        self._modules_seen = -1

    def _current_dirs(self) -> tuple[str, ...]:
        n = len(sys.modules)
        if n != self._modules_seen:
            dirs = _package_dirs() + _cache_dirs()
            if dirs != self._dirs:
                self._known = {}
                self._dirs = dirs
            self._modules_seen = n
        return self._dirs

    def frame(self, start=None, limit: int = 200) -> str | None:
        """`user_frame` of the caller (or of frame `start`, without the main-thread fallback)."""
        if start is None:
            try:
                f = sys._getframe(1)
            except ValueError:
                return None
        else:
            f = start
        dirs = self._current_dirs()
        found = _walk(f, dirs, limit, self._known)
        if found is not None or start is not None or threading.current_thread() is threading.main_thread():
            return found
        main = sys._current_frames().get(threading.main_thread().ident)
        return _walk(main, dirs, limit, self._known) if main is not None else None
