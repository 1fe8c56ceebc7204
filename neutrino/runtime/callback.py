"""Analysis callbacks: a Python file's function run on every result file."""

from __future__ import annotations

import importlib.util
import os

from neutrino.errors import NeutrinoError

DEFAULT_FUNCTION = "analyze"


class CallbackError(NeutrinoError):
    """A --callback / analyze_hook that cannot be loaded."""


def split_spec(spec: str) -> tuple[str, str]:
    """`file.py` or `file.py:function`."""
    path, sep, func = spec.rpartition(":")
    if sep and path and path.endswith(".py"):
        return path, func
    return spec, DEFAULT_FUNCTION


def load_callback(spec: str, base: str | None = None):
    """The function to call as FUNC(result_path: str, launch: dict)."""
    path, func = split_spec(spec)
    if base and not os.path.isabs(path):
        path = os.path.join(base, path)
    if not os.path.isfile(path):
        raise CallbackError(f"callback file {path} does not exist")
    mod_spec = importlib.util.spec_from_file_location(f"neutrino_callback_{abs(hash(path))}", path)
    mod = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001
        raise CallbackError(f"callback file {path} failed to load: {type(e).__name__}: {e}") from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise CallbackError(f"callback file {path} has no function {func}(result_path, launch)")
    return fn
