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

    @contextmanager
    def timing(self):
        self._thread = threading.get_ident()
        sys.meta_path.insert(0, self)
        try:
            yield self
        finally:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass

    def find_spec(self, name, path=None, target=None):
        if self._depth or name.partition(".")[0] == PACKAGE or threading.get_ident() != self._thread:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _TimedLoader(spec.loader, self, name)
                return spec
        return None

    def note(self) -> dict:
        """The fields the phase event gets (none when nothing outside PACKAGE was loaded)."""
        if not self.names:
            return {}
        return {"shared_seconds": round(self.seconds, 6), "shared": self.names[:MAX_NAMED]}


class _TimedLoader:
    """The original loader, its create_module..exec_module timed; any other attribute is the original's."""

    def __init__(self, loader, clock: SharedImportClock, name: str):
        self._loader, self._clock, self._name = loader, clock, name
        self._started = None

    def __getattr__(self, attr):
        return getattr(self._loader, attr)

    def create_module(self, spec):
        self._clock._depth += 1
        self._started = time.perf_counter()
        try:
            create = getattr(self._loader, "create_module", None)
            return create(spec) if create is not None else None
        except BaseException:
            self._done()
            raise

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:  # the module keeps the original loader (__loader__, __spec__.loader)
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self._loader
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._loader
            self._done()

    def _done(self) -> None:
        if self._started is None:
            return
        self._clock._depth -= 1
        self._clock.seconds += time.perf_counter() - self._started
        self._started = None
        top = self._name.partition(".")[0]
        if top not in self._clock.names:
            self._clock.names.append(top)
