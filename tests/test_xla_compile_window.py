"""Launches XLA makes while compiling (autotuning candidates) run unprobed (issue 22).

XLA's autotuner times candidate kernels and keeps the fastest; probed, a candidate runs slower
and another can win, so a JAX program's results changed in the last bits under neutrino. The
runtime wraps JAX's compile functions (frameworks.CompileWindow): inside, the shim runs probed
kernels' launches unprobed (shim/preload.c, neutrino_suspend_probing) and counts them.

Unit tests use a recording stand-in for the shim; the end-to-end tests run a JAX-like program
(tests/fakecuda/app_jax.py, with the package layout of tests/fakejax) on the fake driver under
the real shim.
"""

from __future__ import annotations

import sys
import threading
import types

import pytest

import neutrino.trace as nt
from neutrino.runtime import frameworks

from test_runtime_shim import FAKE, VEC_PTX, _run_under_fake, fakecuda, shim  # noqa: F401 - fixtures

FAKEJAX = FAKE.parent / "fakejax"


class FakeShim:
    """The shim's window count and its count of launches left unprobed, as the C side keeps them."""

    def __init__(self):
        self.open_windows = 0
        self.launches = 0
        self.calls = []

    def suspend(self, open_window: bool) -> None:
        self.open_windows += 1 if open_window else -1
        self.calls.append(open_window)

    def suspended(self) -> int:
        return self.launches

    def launch(self) -> bool:
        """A probed kernel's launch: True when it would be probed."""
        if self.open_windows:
            self.launches += 1
            return False
        return True


def compiler_module(**functions) -> types.ModuleType:
    module = types.ModuleType("jax._src.compiler")
    module.__dict__.update(functions)
    return module


def window_and_events(shim: FakeShim):
    events = []
    window = frameworks.CompileWindow(shim.suspend, shim.suspended)
    return window, events, lambda name, **fields: events.append((name, fields))


def test_launches_inside_a_compile_run_unprobed_and_are_counted():
    shim = FakeShim()
    probed = []

    def backend_compile_and_load(candidates):
        probed.extend(shim.launch() for _ in range(candidates))
        return "executable"

    module = compiler_module(backend_compile_and_load=backend_compile_and_load)
    window, events, event = window_and_events(shim)
    assert window.install(event, {"jax._src.compiler": module}) == ["jax._src.compiler.backend_compile_and_load"]
    assert module.backend_compile_and_load(3) == "executable"
    assert probed == [False] * 3 and shim.open_windows == 0
    assert shim.launch() is True  # the program's own launch after the compile: probed
    (name, fields), = events
    assert name == "xla_compile" and fields["launches"] == 3 and fields["seconds"] >= 0
    assert fields["function"] == "jax._src.compiler.backend_compile_and_load"


def test_nested_compile_functions_open_one_window_and_log_one_event():
    shim = FakeShim()
    module = compiler_module()

    def backend_compile(n):
        return [shim.launch() for _ in range(n)]

    def backend_compile_and_load(n):
        return module.backend_compile(n) + [shim.launch()]

    module.backend_compile, module.backend_compile_and_load = backend_compile, backend_compile_and_load
    window, events, event = window_and_events(shim)
    assert len(window.install(event, {"jax._src.compiler": module})) == 2
    assert module.backend_compile_and_load(2) == [False] * 3
    assert shim.calls == [True, False]
    assert [(n, f["launches"]) for n, f in events] == [("xla_compile", 3)]


def test_window_closes_when_the_compile_raises_and_the_error_is_the_programs():
    shim = FakeShim()

    def backend_compile_and_load():
        raise ValueError("XLA says no")

    module = compiler_module(backend_compile_and_load=backend_compile_and_load)
    window, events, event = window_and_events(shim)
    window.install(event, {"jax._src.compiler": module})
    with pytest.raises(ValueError, match="XLA says no"):
        module.backend_compile_and_load()
    assert shim.open_windows == 0 and events[0][1]["launches"] == 0
    assert shim.launch() is True


def test_a_broken_shim_never_fails_the_compile():
    def broken(*_):
        raise OSError("no shim")

    module = compiler_module(backend_compile_and_load=lambda: "executable")
    window = frameworks.CompileWindow(broken, broken)
    window.install(None, {"jax._src.compiler": module})
    assert module.backend_compile_and_load() == "executable"


def test_installing_twice_wraps_once():
    shim = FakeShim()
    module = compiler_module(backend_compile=lambda: shim.launch())
    window, events, event = window_and_events(shim)
    window.install(event, {"jax._src.compiler": module})
    first = module.backend_compile
    window.install(event, {"jax._src.compiler": module})
    assert module.backend_compile is first and module.backend_compile() is False
    assert shim.calls == [True, False]


def test_an_older_layout_is_found_by_its_fallback_name():
    shim = FakeShim()
    dispatch = types.ModuleType("jax._src.dispatch")
    dispatch.backend_compile = lambda: shim.launch()
    window, events, event = window_and_events(shim)
    assert window.install(event, {"jax._src.dispatch": dispatch}) == ["jax._src.dispatch.backend_compile"]
    assert dispatch.backend_compile() is False


def test_no_compile_function_found_is_said_once():
    shim = FakeShim()
    window, events, event = window_and_events(shim)
    assert window.install(event, {"jax._src.compiler": compiler_module(something_else=len)}) == []
    (name, fields), = events
    assert name == "xla_compile_hook" and fields["found"] is False
    assert "jax._src.compiler.backend_compile_and_load" in fields["tried"]


def test_compiles_on_two_threads_overlap_and_the_window_stays_open_until_both_end():
    shim = FakeShim()
    lock = threading.Lock()
    inside, release = threading.Barrier(2), threading.Event()
    seen = []

    def backend_compile_and_load():
        inside.wait(timeout=10)
        release.wait(timeout=10)
        with lock:
            seen.append(shim.open_windows)

    module = compiler_module(backend_compile_and_load=backend_compile_and_load)
    window, events, event = window_and_events(shim)
    window.install(event, {"jax._src.compiler": module})
    threads = [threading.Thread(target=module.backend_compile_and_load) for _ in range(2)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(timeout=10)
    assert sorted(seen)[-1] >= 1 and shim.open_windows == 0 and len(events) == 2


def test_after_hook_runs_once_the_package_has_executed(tmp_path, monkeypatch):
    package = tmp_path / "pkg_after_probe"
    package.mkdir()
    (package / "__init__.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    spec = frameworks.spec_running_after("pkg_after_probe", lambda module: seen.append(module.LOADED))
    assert spec is not None and seen == []
    import importlib.util

    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert seen == [True]
    assert "exec_module" not in vars(spec.loader)  # the loader is itself again
    assert frameworks.spec_running_after("no_such_package_xyz", print) is None


# ---------------------------------------------------------------- end to end: real shim, fake driver


def run_app(tmp_path, fakecuda, monkeypatch, layout: str, compile_launches: int, run_launches: int):  # noqa: F811
    monkeypatch.setenv("FAKEJAX_LAYOUT", layout)
    return _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app_jax.py"), str(VEC_PTX), "saxpy4",
                                                str(compile_launches), str(run_launches)])


def test_autotuning_launches_run_the_original_kernel_and_the_programs_are_probed(tmp_path, fakecuda, shim,  # noqa: F811
                                                                                    monkeypatch):
    rc, log = run_app(tmp_path, fakecuda, monkeypatch, "new", 3, 2)
    assert rc == 0
    assert log == ["saxpy4 probed=0 grid=2"] * 3 + ["saxpy4 probed=1 grid=4"] * 2
    t = nt.load(tmp_path / "trace")
    assert [la.event["kernel_launch"] for la in t.launches] == [0, 1]  # --launches counts the program's launches
    compiles = [e for e in t.events if e["event"] == "xla_compile"]
    assert [(e["function"], e["launches"]) for e in compiles] == [("jax._src.compiler.backend_compile_and_load", 3)]


def test_a_jax_without_the_compile_functions_is_probed_as_before_and_says_so(tmp_path, fakecuda, shim,  # noqa: F811
                                                                             monkeypatch):
    rc, log = run_app(tmp_path, fakecuda, monkeypatch, "none", 2, 1)
    assert rc == 0 and log == ["saxpy4 probed=1 grid=2"] * 2 + ["saxpy4 probed=1 grid=4"]
    t = nt.load(tmp_path / "trace")
    hooks = [e for e in t.events if e["event"] == "xla_compile_hook"]
    assert len(hooks) == 1 and hooks[0]["found"] is False
