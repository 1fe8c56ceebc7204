"""Running our code when the program first imports a package: the one kind of sys.meta_path entry.

JAX's flags (frameworks.py), the autotuners' suspend hooks (autotune.py) and module registration
for tensor names (context_tables/tensors.py) each need to act when the program imports a package,
without importing it themselves. The normal finders find and load the package; we only wrap their
loader's exec_module for that one import. Loaded at interpreter start: nothing heavy here.

The import system walks sys.meta_path while we answer: we leave it only when we answer with a spec
(the walk stops there); answering None, we stay in it, so that no finder is skipped.
"""

from __future__ import annotations

import sys
import time
from typing import Callable


class AfterImport:
    """A sys.meta_path entry that runs, for each watched top-level name, `before[name]()` when the
    program first imports it and `after[name](module)` once the module's code has run; it steps
    aside once every name was seen. An action that raises is ignored: the program's import never
    fails through us."""

    def __init__(self, after: dict[str, Callable], before: dict[str, Callable] | None = None):
        self.after = dict(after)
        self.before = dict(before or {})
        self.phases = None  # a PhaseClock (start/phases.py): our actions' seconds are its `import_hooks` phase

    def _timed(self, action, *args):
        started = time.perf_counter()
        try:
            return action(*args)
        finally:
            if self.phases is not None:
                try:
                    self.phases.add("import_hooks", time.perf_counter() - started)
                except Exception:  # noqa: BLE001 - a clock never breaks the program's import
                    pass

    @property
    def done(self) -> bool:
        return not self.after and not self.before

    def find_spec(self, name, path=None, target=None):
        if name not in self.after and name not in self.before:  # other imports: two dict look-ups
            return None
        before, after = self.before.pop(name, None), self.after.pop(name, None)  # once: our look-up comes back here
        if before is not None:
            try:
                self._timed(before)
            except Exception:  # noqa: BLE001 - never break the program's import
                pass
        if after is None:
            return None  # the normal finders import it
        try:
            spec = self._timed(spec_running_after, name, lambda module: self._timed(after, module))
        except Exception:  # noqa: BLE001 - the normal finders import it, without `after`
            return None
        if spec is not None and self.done:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
        return spec


def spec_running_after(name: str, after):
    """The spec the other finders give `name`, its loader made to call `after(module)` once the module
    has executed (the loader itself is kept: packages read their resources through it). None: not
    found, or a loader we cannot wrap."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    loader = getattr(spec, "loader", None)
    if loader is None or not hasattr(loader, "exec_module"):
        return None
    execute = loader.exec_module

    def exec_then_after(module):
        vars(loader).pop("exec_module", None)  # back to the class's method: a reload runs no `after`
        execute(module)
        try:
            after(module)
        except Exception:  # noqa: BLE001 - our hook never breaks the program's import
            pass

    try:
        loader.exec_module = exec_then_after
    except (AttributeError, TypeError):  # a loader that takes no attributes: no action
        return None
    return spec
