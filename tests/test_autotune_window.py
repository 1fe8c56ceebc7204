"""Triton's and TorchInductor's autotuners time their candidates unprobed (issue 22).

An autotuner launches every candidate config and keeps the fastest; probed, a candidate runs slower
and another can win, and a winner with another reduction order changes the program's results.
The runtime wraps their benchmarking functions (runtime/autotune.py) in the suspend window XLA's
compiles use (runtime/autotune_window.py): inside it the shim runs probed kernels' launches
unprobed and counts them.

Unit tests load the stand-in modules (tests/faketriton, tests/faketorch: the real layouts' names)
without registering them, with a recording shim; the end-to-end tests run tests/fakecuda/app_autotune.py
on the fake driver under the real shim.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

import neutrino.trace as nt
from neutrino.runtime import autotune
from neutrino.runtime.autotune_window import SuspendWindow

from test_runtime_shim import FAKE, VEC_PTX, _run_under_fake, fakecuda, shim  # noqa: F401 - fixtures
from test_xla_compile_window import FakeShim

TESTS = Path(__file__).parent
FAKE_FILES = {"triton.runtime.autotuner": TESTS / "faketriton" / "triton" / "runtime" / "autotuner.py",
              "torch._inductor.runtime.triton_heuristics":
                  TESTS / "faketorch" / "torch" / "_inductor" / "runtime" / "triton_heuristics.py",
              "torch._inductor.select_algorithm": TESTS / "faketorch" / "torch" / "_inductor" / "select_algorithm.py",
              "torch._inductor.autotune_process": TESTS / "faketorch" / "torch" / "_inductor" / "autotune_process.py"}


def load(name: str) -> types.ModuleType:
    """A stand-in module, executed afresh and not put in sys.modules."""
    spec = importlib.util.spec_from_file_location(name, FAKE_FILES[name])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hooked(hook: autotune.Hook, module_name: str):
    shim, events = FakeShim(), []
    window = SuspendWindow(shim.suspend, shim.suspended, lambda kind, **fields: events.append((kind, fields)))
    module = load(module_name)
    wrapped = autotune.install(hook, window, {module_name: module})
    return module, shim, events, wrapped


class Kernel:
    """@triton.jit's `run`, recording whether each launch would be probed."""

    def __init__(self, shim, fail_on=None):
        self.shim, self.fail_on, self.probed = shim, fail_on, []
        self.__name__ = "matmul_kernel"

    def run(self, *args, candidate, **meta):
        if meta.get("BLOCK_K") == self.fail_on:
            raise RuntimeError("out of shared memory")
        self.probed.append(self.shim.launch())


def test_triton_benchmarks_run_unprobed_and_each_tuning_writes_one_event():
    module, shim, events, wrapped = hooked(autotune.TRITON, "triton.runtime.autotuner")
    assert wrapped == ["triton.runtime.autotuner.Autotuner.run", "triton.runtime.autotuner.Autotuner._bench"]
    kernel = Kernel(shim)
    tuner = module.Autotuner(kernel, [module.Config({"BLOCK_K": 32}, 2.0), module.Config({"BLOCK_K": 64}, 1.0)], ["n"])
    tuner.run(n=128)
    tuner.run(n=128)  # cached: no tuning, no event
    assert kernel.probed == [False] * 4 + [True, True]  # 2 configs x 2 timed launches, then the program's
    assert shim.open_windows == 0 and shim.calls == [True, False, True, False]
    (kind, fields), = events
    assert kind == "autotune" and fields["function"] == "triton.runtime.autotuner.Autotuner.run"
    assert (fields["kernel"], fields["configs"], fields["windows"], fields["launches"]) == ("matmul_kernel", 2, 2, 4)
    assert fields["chosen"] == "BLOCK_K: 64"
    assert [t["config"] for t in fields["timed"]] == ["BLOCK_K: 32", "BLOCK_K: 64"]
    assert fields["seconds"] >= 0


def test_a_config_that_raises_closes_the_window_and_the_error_is_the_programs():
    module, shim, events, _ = hooked(autotune.TRITON, "triton.runtime.autotuner")
    kernel = Kernel(shim, fail_on=64)
    tuner = module.Autotuner(kernel, [module.Config({"BLOCK_K": 32}, 2.0), module.Config({"BLOCK_K": 64}, 1.0)], ["n"])
    with pytest.raises(RuntimeError, match="out of shared memory"):
        tuner.run(n=1)
    assert shim.open_windows == 0 and shim.launch() is True
    (kind, fields), = events
    assert kind == "autotune" and fields["windows"] == 2 and fields["launches"] == 2


def test_a_triton_without_the_benchmark_function_is_probed_as_before_and_says_so_once(monkeypatch):
    monkeypatch.setenv("FAKETRITON_LAYOUT", "none")
    module, shim, events, wrapped = hooked(autotune.TRITON, "triton.runtime.autotuner")
    assert wrapped == ["triton.runtime.autotuner.Autotuner.run"]  # a tally alone opens no window
    kernel = Kernel(shim)
    module.Autotuner(kernel, [module.Config({"BLOCK_K": 32}, 2.0), module.Config({"BLOCK_K": 64}, 1.0)], ["n"]).run(n=1)
    assert kernel.probed == [True] * 5
    (kind, fields), = events
    assert kind == "autotune_hook" and fields["found"] is False and fields["framework"] == "triton"
    assert "triton.runtime.autotuner.Autotuner._bench" in fields["tried"]


def test_inductor_tunes_unprobed_once_per_kernel_and_nested_benchmarks_open_one_window():
    module, shim, events, wrapped = hooked(autotune.INDUCTOR, "torch._inductor.runtime.triton_heuristics")
    assert "torch._inductor.runtime.triton_heuristics.CachingAutotuner.autotune_to_one_config" in wrapped
    probed = []
    tuner = module.CachingAutotuner([module.Launcher(lambda c: probed.append(shim.launch()), "XBLOCK: 64", 2.0),
                                     module.Launcher(lambda c: probed.append(shim.launch()), "XBLOCK: 128", 1.0)],
                                    "triton_poi_fused_add_0")
    tuner.run()
    tuner.run()
    assert probed == [False, False, True, True] and shim.calls == [True, False]
    (kind, fields), = events
    assert fields["function"].endswith("CachingAutotuner.autotune_to_one_config")
    assert (fields["kernel"], fields["configs"], fields["launches"], fields["chosen"]) == \
        ("triton_poi_fused_add_0", 2, 2, "XBLOCK: 128")


def test_select_algorithm_benchmarks_unprobed_and_its_classmethods_stay_classmethods():
    module, shim, events, wrapped = hooked(autotune.INDUCTOR_SELECT, "torch._inductor.select_algorithm")
    assert len(wrapped) == 2
    assert isinstance(vars(module.AlgorithmSelectorCache)["benchmark_choices"], classmethod)
    probed = []
    choices = [module.Choice("extern_mm", lambda c: probed.append(shim.launch()), 2.0),
               module.Choice("triton_mm_1", lambda c: probed.append(shim.launch()), 1.0)]
    timings = module.AlgorithmSelectorCache.benchmark_in_current_process(choices)
    assert timings == {choices[0]: 2.0, choices[1]: 1.0} and probed == [False, False]
    module.AlgorithmSelectorCache.benchmark_choices(choices[:1])  # called on its own: a window of its own
    assert [(f["function"].rsplit(".", 1)[1], f["configs"], f["launches"], f["chosen"]) for _, f in events] == [
        ("benchmark_in_current_process", 2, 2, "triton_mm_1"), ("benchmark_choices", 1, 1, "extern_mm")]


def test_a_tuning_process_benchmarks_each_request_unprobed_through_the_base_class():
    module, shim, events, wrapped = hooked(autotune.INDUCTOR_SUBPROCESS, "torch._inductor.autotune_process")
    probed = []
    request = module.TritonGPUBenchmarkRequest("triton_tem_fused_mm_0", lambda c: probed.append(shim.launch()))
    assert request.benchmark() == 1.0 and probed == [False]
    (kind, fields), = events
    assert (kind, fields["kernel"], fields["launches"]) == ("autotune", "triton_tem_fused_mm_0", 1)


@pytest.mark.parametrize("hook", autotune.HOOKS, ids=lambda hook: hook.framework)
def test_every_benchmark_function_of_every_hook_runs_in_a_window(hook):
    """Modules made from the hook's own names: each function it wraps for a window leaves the
    launches inside it unprobed, whatever the framework's layout of classes."""
    shim, events = FakeShim(), []
    window = SuspendWindow(shim.suspend, shim.suspended, lambda kind, **fields: events.append((kind, fields)))
    modules = {}
    for target in hook.targets:
        module = modules.setdefault(target.module, types.ModuleType(target.module))
        owner = vars(module).setdefault(target.owner, type(target.owner, (), {}))
        setattr(owner, target.attribute, lambda self, *args, **kwargs: shim.launch())
    assert len(autotune.install(hook, window, modules)) == len(hook.targets)
    for target in hook.targets:
        instance = getattr(modules[target.module], target.owner)()
        assert getattr(instance, target.attribute)() is target.tally  # a tally opens no window
    assert shim.open_windows == 0
    assert [kind for kind, _ in events] == ["autotune"] * sum(not t.tally for t in hook.targets)


def test_installing_twice_wraps_once():
    module, shim, events, _ = hooked(autotune.INDUCTOR, "torch._inductor.runtime.triton_heuristics")
    first = vars(module.CachingAutotuner)["autotune_to_one_config"]
    window = SuspendWindow(shim.suspend, shim.suspended)
    autotune.install(autotune.INDUCTOR, window, {"torch._inductor.runtime.triton_heuristics": module})
    assert vars(module.CachingAutotuner)["autotune_to_one_config"] is first


def test_a_broken_shim_never_fails_the_tuning():
    def broken(*_):
        raise OSError("no shim")

    module = load("torch._inductor.select_algorithm")
    autotune.install(autotune.INDUCTOR_SELECT, SuspendWindow(broken, broken),
                     {"torch._inductor.select_algorithm": module})
    choice = module.Choice("extern_mm", lambda c: None, 3.0)
    assert module.AlgorithmSelectorCache.benchmark_in_current_process([choice]) == {choice: 3.0}


def test_hooks_go_in_on_first_import_and_the_watch_steps_aside(tmp_path, monkeypatch):
    package = tmp_path / "pkg_autotune_watch"
    package.mkdir()
    (package / "__init__.py").write_text("class Tuner:\n    def bench(self):\n        return 'timed'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    hook = autotune.Hook("pkg", "pkg_autotune_watch", (autotune.Target("pkg_autotune_watch", "Tuner", "bench"),))
    shim, events = FakeShim(), []
    window = SuspendWindow(shim.suspend, shim.suspended)
    watch = autotune.watch_for_autotuners(window, lambda kind, **f: events.append((kind, f)), hooks=(hook,))
    try:
        assert watch in sys.meta_path and watch.find_spec("json") is None
        import pkg_autotune_watch

        assert watch not in sys.meta_path
        assert pkg_autotune_watch.Tuner().bench() == "timed" and shim.calls == [True, False]
        assert [(k, f["function"]) for k, f in events] == [("autotune", "pkg_autotune_watch.Tuner.bench")]
    finally:
        sys.modules.pop("pkg_autotune_watch", None)
        if watch in sys.meta_path:
            sys.meta_path.remove(watch)


# ---------------------------------------------------------------- end to end: real shim, fake driver


def run_app(tmp_path, fakecuda, monkeypatch, layout: str):  # noqa: F811
    monkeypatch.setenv("FAKETRITON_LAYOUT", layout)
    return _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app_autotune.py"), str(VEC_PTX), "saxpy4"])


CANDIDATE, PROGRAM = "saxpy4 probed=0 grid=2", "saxpy4 probed=1 grid=4"


def test_candidates_run_the_original_kernel_and_the_winners_launches_are_probed(tmp_path, fakecuda, shim,  # noqa: F811
                                                                                 monkeypatch):
    rc, log = run_app(tmp_path, fakecuda, monkeypatch, "new")
    assert rc == 0
    triton = [CANDIDATE] * 4 + [PROGRAM] * 2 + [CANDIDATE] * 4 + [PROGRAM]
    assert log == triton + [CANDIDATE] * 2 + [PROGRAM] + [CANDIDATE] * 2
    t = nt.load(tmp_path / "trace")
    assert [la.event["kernel_launch"] for la in t.launches] == [0, 1, 2, 3]  # --launches counts the program's
    tunings = [e for e in t.events if e["event"] == "autotune"]
    assert [(e["function"].rsplit(".", 2)[-2], e["kernel"], e["launches"], e["chosen"]) for e in tunings] == [
        ("Autotuner", "matmul_kernel", 4, "BLOCK_K: 64"), ("Autotuner", "matmul_kernel", 4, "BLOCK_K: 64"),
        ("CachingAutotuner", "triton_poi_fused_add_0", 2, "XBLOCK: 128"),
        ("AlgorithmSelectorCache", "select_algorithm", 2, "triton_mm_1")]
    assert not [e for e in t.events if e["event"] == "autotune_hook"]


def test_an_unknown_triton_is_probed_as_before_and_says_so(tmp_path, fakecuda, shim, monkeypatch):  # noqa: F811
    rc, log = run_app(tmp_path, fakecuda, monkeypatch, "none")
    assert rc == 0 and log[:6] == [PROGRAM.replace("grid=4", "grid=2")] * 4 + [PROGRAM] * 2  # all probed
    t = nt.load(tmp_path / "trace")
    hooks = [e for e in t.events if e["event"] == "autotune_hook"]
    assert [(e["framework"], e["found"]) for e in hooks] == [("triton", False)]
    assert [e["kernel"] for e in t.events if e["event"] == "autotune"] == ["triton_poi_fused_add_0", "select_algorithm"]
