"""How much of a start-up phase's import time went to modules outside the neutrino package.

The `wire` and `imports` phases (phases.py) import our modules, and with them modules of the
standard library and third parties (numpy, attrs, hashlib, ctypes) that the process had not loaded
yet. A program that imports those itself later (torch and CuPy import numpy, hashlib, ctypes) then
finds them loaded and pays nothing: the phase counted work the program would have done anyway.
`SharedImportClock` times, while a phase runs, each outermost import of such a module (its
submodules and what it imports in turn included) so that the phase event can say how much of it
that was (spec/runtime.md, "Start-up and exit phases": `shared_seconds`, `shared`).

Standard library only: loaded at interpreter start.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

PACKAGE = "neutrino"
MAX_NAMED = 20  # top-level names listed in the event; the seconds count them all


class SharedImportClock:
    """A meta-path finder, first on `sys.meta_path` only inside `timing()`: for a module outside
    PACKAGE that is not loaded yet, it asks the other finders for the spec and times the loader's
    create_module + exec_module. The spec's loader is the original again once the module ran."""

    def __init__(self):
        self.seconds = 0.0
        self.names: list[str] = []  # top-level packages, in the order first loaded
        self._depth = 0  # >0 inside a timed import: nested ones are part of it
        self._thread = None  # the phase's thread: another thread's imports are the program's
        self._active = False  # inside timing(): a loader called after it is not timed

    @contextmanager
    def timing(self):
        self._thread = threading.get_ident()
        self._active = True
        sys.meta_path.insert(0, self)
        try:
            yield self
        finally:
            self._active = False
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass

    def find_spec(self, name, path=None, target=None):
        if self._depth or name.partition(".")[0] == PACKAGE or threading.get_ident() != self._thread:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:  # a legacy finder (find_module, Python < 3.12) the machinery asks in its turn: untimed
                return None
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _TimedLoader(spec.loader, self, name)
                return spec
        return None

    @contextmanager
    def _timed(self, name: str):
        """One loader call of module `name` (an outermost import), timed while the phase runs on its thread."""
        if not self._active or threading.get_ident() != self._thread:
            yield
            return
        self._depth += 1
        started = time.perf_counter()
        try:
            yield
        finally:
            self._depth -= 1
            self.seconds += time.perf_counter() - started
            top = name.partition(".")[0]
            if top not in self.names:
                self.names.append(top)

    def note(self) -> dict:
        """The fields the phase event gets (none when nothing outside PACKAGE was loaded)."""
        if not self.names:
            return {}
        return {"shared_seconds": round(self.seconds, 6), "shared": self.names[:MAX_NAMED]}


class _TimedLoader:
    """The original loader, its create_module and exec_module timed; any other attribute is the original's.

    Each call is timed on its own (the clock's depth held only while it runs): a loader whose
    exec_module comes later or never (importlib.util.LazyLoader runs it at the module's first
    attribute access) must not leave the clock thinking every later import is nested in it. A call
    made after the phase, or on another thread, is passed through untimed."""

    def __init__(self, loader, clock: SharedImportClock, name: str):
        self._loader, self._clock, self._name = loader, clock, name

    def __getattr__(self, attr):
        return getattr(self._loader, attr)

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        with self._clock._timed(self._name):
            return create(spec) if create is not None else None

    def exec_module(self, module):
        try:
            with self._clock._timed(self._name):
                self._loader.exec_module(module)
        finally:  # the module keeps the original loader (__loader__, __spec__.loader)
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self._loader
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._loader
