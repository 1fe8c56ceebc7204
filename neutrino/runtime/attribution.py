"""Which line of the user's Python code led to a launch."""

from __future__ import annotations

import os
import sys
import threading

# Frames from these packages (and generated Inductor code) are library internals, not "the user's line".
_SKIP_PACKAGES = ("torch", "triton", "neutrino", "cupy", "cupyx", "numba", "jax", "functools", "contextlib", "threading",
                  "concurrent")
_SKIP_PARTS = ("torchinductor_", "/triton/", "<frozen ", "<string>")


def _package_dirs() -> tuple[str, ...]:
    dirs = []
    for name in _SKIP_PACKAGES:
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None) if mod else None
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
    """
    try:
        f = start if start is not None else sys._getframe(1)
    except ValueError:
        return None
    dirs = _package_dirs() + _cache_dirs()
    found = _walk(f, dirs, limit)
    if found is not None or start is not None:
        return found
    main = threading.main_thread()
    if threading.current_thread() is main:
        return None
    frame = sys._current_frames().get(main.ident)
    return _walk(frame, dirs, limit) if frame is not None else None


def _walk(f, dirs, limit):
    for _ in range(limit):
        if f is None:
            return None
        code = f.f_code
        if not is_library_file(code.co_filename, dirs):
            return f"{code.co_filename}:{f.f_lineno} ({code.co_name})"
        f = f.f_back
    return None
