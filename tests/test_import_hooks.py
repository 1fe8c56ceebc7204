"""The runtime's one kind of sys.meta_path entry (runtime/modules/import_hooks.py): JAX's flags before
`import jax`, the autotuners' hooks and torch's module registration after their packages ran.

Real imports of stand-in packages written to a temporary directory."""

import sys

from neutrino.runtime.modules.import_hooks import AfterImport


def _package(tmp_path, name: str, body: str) -> None:
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text(body)


def test_before_runs_ahead_of_the_package_and_after_once_it_ran(tmp_path, monkeypatch):
    import os

    _package(tmp_path, "neutrino_hook_pkg_a", "import os\nSEEN_FLAG = os.environ.get('NEUTRINO_HOOK_FLAG')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("NEUTRINO_HOOK_FLAG", raising=False)
    order = []

    def before():
        order.append("before")
        os.environ["NEUTRINO_HOOK_FLAG"] = "set"  # what the package reads as it runs (XLA_FLAGS for jax)

    hook = AfterImport({"neutrino_hook_pkg_a": lambda module: order.append(("after", module.SEEN_FLAG))},
                       before={"neutrino_hook_pkg_a": before})
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    import neutrino_hook_pkg_a  # noqa: F401

    assert order == ["before", ("after", "set")]
    assert hook.done and hook not in sys.meta_path
    monkeypatch.delitem(sys.modules, "neutrino_hook_pkg_a")
    monkeypatch.delenv("NEUTRINO_HOOK_FLAG")


def test_several_names_step_aside_only_when_all_were_seen(tmp_path, monkeypatch):
    _package(tmp_path, "neutrino_hook_pkg_b", "X = 1\n")
    _package(tmp_path, "neutrino_hook_pkg_c", "X = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hook = AfterImport({name: lambda m: seen.append(m.X) for name in ("neutrino_hook_pkg_b", "neutrino_hook_pkg_c")})
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    assert hook.find_spec("json") is None  # another import: not ours
    import neutrino_hook_pkg_b  # noqa: F401

    assert seen == [1] and hook in sys.meta_path and not hook.done
    import neutrino_hook_pkg_c  # noqa: F401

    assert seen == [1, 2] and hook not in sys.meta_path
    for name in ("neutrino_hook_pkg_b", "neutrino_hook_pkg_c"):
        monkeypatch.delitem(sys.modules, name)


def test_before_alone_lets_the_normal_finders_import_and_stays_inert(tmp_path, monkeypatch):
    _package(tmp_path, "neutrino_hook_pkg_d", "X = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("ours")  # never breaks the program's import

    hook = AfterImport({}, before={"neutrino_hook_pkg_d": broken})
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    import neutrino_hook_pkg_d

    assert neutrino_hook_pkg_d.X == 3 and calls == [1] and hook.done
    monkeypatch.delitem(sys.modules, "neutrino_hook_pkg_d")
    import neutrino_hook_pkg_d  # noqa: F401,F811 - a second import runs nothing of ours

    assert calls == [1]
    monkeypatch.delitem(sys.modules, "neutrino_hook_pkg_d")


def test_our_actions_in_the_programs_imports_are_the_import_hooks_phase(tmp_path, monkeypatch):
    """With a PhaseClock, `before` and `after` (and finding the spec they wrap) are timed as `import_hooks`
    (spec/runtime.md, "Start-up and exit phases"); the package's own code is not."""
    import time

    from neutrino.runtime.start.phases import PhaseClock

    _package(tmp_path, "neutrino_hook_pkg_t", "import time\ntime.sleep(0.2)\n")  # the program's own import: not ours
    monkeypatch.syspath_prepend(str(tmp_path))
    hook = AfterImport({"neutrino_hook_pkg_t": lambda module: time.sleep(0.05)},
                       before={"neutrino_hook_pkg_t": lambda: time.sleep(0.03)})
    hook.phases = PhaseClock()
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    import neutrino_hook_pkg_t  # noqa: F401

    timed = hook.phases.totals()["import_hooks"]
    assert 0.08 <= timed["seconds"] < 0.2 and timed["count"] == 3  # before, the spec found, after
    monkeypatch.delitem(sys.modules, "neutrino_hook_pkg_t")
