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
