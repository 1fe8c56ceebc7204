"""SharedImportClock (neutrino/runtime/start/shared_imports.py) against loaders that do not run a module at once."""
import importlib
import importlib.util
import sys
import time

from neutrino.runtime.start.shared_imports import SharedImportClock


def test_a_lazy_import_does_not_stop_the_clock(tmp_path, monkeypatch):
    """importlib.util.LazyLoader creates the module in the phase and runs it at its first attribute access
    (after the phase here). The lazy module's creation is its own timed call: the import after it in the
    phase is still timed (before: the clock stayed inside the lazy import and counted nothing more), the
    module's later run is not counted in a phase that is over, and the module ends with its own loader."""
    (tmp_path / "lazy29r.py").write_text("import time\ntime.sleep(0.3)\nVALUE = 29\n")
    (tmp_path / "after29r.py").write_text("import time\ntime.sleep(0.2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    clock = SharedImportClock()
    started = time.perf_counter()
    try:
        with clock.timing():
            spec = importlib.util.find_spec("lazy29r")
            lazy = importlib.util.LazyLoader(spec.loader)
            spec.loader = lazy
            module = importlib.util.module_from_spec(spec)
            sys.modules["lazy29r"] = module
            lazy.exec_module(module)
            import after29r  # noqa: F401
        phase = time.perf_counter() - started
        assert clock.names == ["lazy29r", "after29r"] and 0.2 <= clock.seconds <= phase < 0.2 + 0.25
        note = clock.note()
        assert module.VALUE == 29  # runs the lazy module now, after the phase
        assert clock.note() == note and clock._depth == 0
        assert type(module.__loader__).__name__ == "SourceFileLoader"
        assert module.__spec__.loader is module.__loader__
    finally:
        for name in ("lazy29r", "after29r"):
            sys.modules.pop(name, None)


def test_a_spec_found_in_the_phase_and_loaded_after_it_is_not_counted(tmp_path, monkeypatch):
    """A spec asked for in the phase (importlib.util.find_spec: its loader wrapped) but loaded after it: the
    load is not the phase's, nothing is added, and the module keeps the original loader."""
    (tmp_path / "late29r.py").write_text("import time\ntime.sleep(0.1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    clock = SharedImportClock()
    try:
        with clock.timing():
            spec = importlib.util.find_spec("late29r")
        module = importlib.util.module_from_spec(spec)
        sys.modules["late29r"] = module
        spec.loader.exec_module(module)
        assert clock.note() == {} and clock.seconds == 0.0 and clock._depth == 0
        assert type(module.__loader__).__name__ == "SourceFileLoader" and module.__spec__.loader is module.__loader__
    finally:
        sys.modules.pop("late29r", None)


def test_a_legacy_finder_before_the_path_keeps_its_turn(tmp_path, monkeypatch):
    """A finder with find_module only (Python 3.11 still asks it, after the finders before it) placed before the
    path finder: the module it provides is the one imported in the phase too (before: the clock skipped it and
    returned the path finder's spec, changing what the program's import loaded). Not timed: a legacy loader."""
    import types
    import warnings

    if sys.version_info >= (3, 12):
        import pytest

        pytest.skip("find_module is no longer asked")
    (tmp_path / "legacy29r.py").write_text("WHO = 'path'\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class LegacyFinder:
        def find_module(self, name, path=None):
            return self if name == "legacy29r" else None

        def load_module(self, name):
            module = types.ModuleType(name)
            module.WHO = "legacy"
            sys.modules[name] = module
            return module

    legacy = LegacyFinder()
    monkeypatch.setattr(sys, "meta_path", [legacy, *sys.meta_path])
    clock = SharedImportClock()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ImportWarning)
            with clock.timing():
                module = importlib.import_module("legacy29r")
        assert module.WHO == "legacy" and clock.note() == {}
    finally:
        sys.modules.pop("legacy29r", None)
