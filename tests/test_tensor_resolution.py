"""The tensor trace's names without walking the garbage collector (neutrino/runtime/context_tables/tensors.py).

A stand-in torch whose modules call global registration hooks the way torch's `nn.Module` does
(`register_parameter`, `register_buffer`, `add_module` / attribute assignment): the resolver
learns the modules from the hooks, builds its name table from them, rebuilds it when storage
moves, and keeps every build within its budget. `AfterImport` runs its action right after a real
package's first import.
"""

from __future__ import annotations

import gc
import sys
import types
import weakref

import pytest

from neutrino.runtime.context_tables import tensors
from neutrino.runtime.context_tables.tensors import (BUDGET_FLOOR_SECONDS, BUDGET_FRACTION, REBUILD_SECONDS, AfterImport, NameTable,
                                      TensorResolver)


class _Tensor:
    is_cuda = True

    def __init__(self, ptr, shape, itemsize=4):
        self._ptr, self.shape, self._itemsize = ptr, tuple(shape), itemsize
        self.dtype, self.device = "torch.float32", types.SimpleNamespace(index=0)

    def data_ptr(self):
        return self._ptr

    def stride(self):
        out, acc = [], 1
        for n in reversed(self.shape):
            out.insert(0, acc)
            acc *= n
        return tuple(out)

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return self._itemsize


_HOOKS: dict[str, list] = {"parameter": [], "buffer": [], "module": []}


class _Module:
    """Registers like nn.Module: each registration calls the global hooks of its kind."""

    def __init__(self, **members):
        self._parameters, self._buffers, self._modules = {}, {}, {}
        for name, value in members.items():
            if isinstance(value, _Module):
                self._register("module", self._modules, name, value)
            else:
                self._register("parameter", self._parameters, name, value)

    def register_buffer(self, name, t):
        self._register("buffer", self._buffers, name, t)

    def _register(self, kind, table, name, value):
        for hook in _HOOKS[kind]:
            out = hook(self, name, value)
            value = value if out is None else out
        table[name] = value

    def children(self):
        return iter(self._modules.values())

    def _named(self, attr, prefix=""):
        yield from ((prefix + n, t) for n, t in getattr(self, attr).items())
        for child_name, child in self._modules.items():
            yield from child._named(attr, f"{prefix}{child_name}.")

    def named_parameters(self, remove_duplicate=True):
        return self._named("_parameters")

    def named_buffers(self, remove_duplicate=True):
        return self._named("_buffers")


def _fake_torch(with_hooks=True):
    registers = {f"register_module_{kind}_registration_hook": (lambda hook, kind=kind: _HOOKS[kind].append(hook))
                 for kind in _HOOKS} if with_hooks else {}
    module_api = types.SimpleNamespace(**registers)
    nn = types.SimpleNamespace(Module=_Module, modules=types.SimpleNamespace(module=module_api))
    return types.SimpleNamespace(Tensor=_Tensor, nn=nn)


@pytest.fixture
def torch(monkeypatch):
    for hooks in _HOOKS.values():
        hooks.clear()
    fake = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    yield fake
    for hooks in _HOOKS.values():
        hooks.clear()


def _no_gc_walk(monkeypatch):
    def refuse(_module_type):
        raise AssertionError("walked the garbage collector's objects")
    monkeypatch.setattr(tensors, "gc_modules", refuse)


def test_modules_built_after_the_hooks_are_named_without_a_gc_walk(torch, monkeypatch):
    builds = []
    resolver = TensorResolver(on_walk=lambda s, m, source: builds.append((m, source)))
    resolver._torch_imported(torch)  # what watch_torch does right after `import torch`
    _no_gc_walk(monkeypatch)
    w1, b1, w2 = _Tensor(0x7F0000000000, (32, 64)), _Tensor(0x7F0000010000, (32,)), _Tensor(0x7F0000020000, (8, 32))
    stats = _Tensor(0x7F0000030000, (32,))
    model = _Module(encoder=_Module(weight=w1, bias=b1), head=_Module(weight=w2))
    model._modules["encoder"].register_buffer("running_mean", stats)
    found = resolver.resolve([w1.data_ptr(), b1.data_ptr() + 8, w2.data_ptr(), stats.data_ptr(), 0x7F0000900000])
    assert found[w1.data_ptr()]["name"] == "encoder.weight" and found[w1.data_ptr()]["shape"] == [32, 64]
    assert found[b1.data_ptr() + 8]["name"] == "encoder.bias" and found[b1.data_ptr() + 8]["offset_bytes"] == 8
    assert found[w2.data_ptr()]["name"] == "head.weight"
    assert found[stats.data_ptr()]["name"] == "encoder.running_mean"
    assert 0x7F0000900000 not in found
    assert builds == [(3, "hooks")]  # the three modules that registered something; the root names them
    resolver.resolve([0x7F0000900000])  # nothing registered since, within REBUILD_SECONDS: no build
    assert len(builds) == 1
    later = _Tensor(0x7F0000040000, (4,))
    extra = _Module(weight=later)  # a registration since the last build: the next miss rebuilds at once
    assert resolver.resolve([later.data_ptr()])[later.data_ptr()]["name"] == "weight"
    assert builds[-1] == (4, "hooks")
    del model, extra


def test_torch_imported_first_walks_the_garbage_collector_once(monkeypatch):
    for hooks in _HOOKS.values():
        hooks.clear()
    early = _Tensor(0x7F0000000000, (4,))
    model = _Module(weight=early)  # built before any hook exists
    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    builds = []
    resolver = TensorResolver(on_walk=lambda s, m, source: builds.append(source))
    resolver.watch_torch()  # torch is there already: nothing to watch
    assert resolver._watcher is None
    assert resolver.resolve([early.data_ptr()])[early.data_ptr()]["name"] == "weight"
    assert builds == ["gc"] and _HOOKS["parameter"]  # the walk installed the hooks first
    assert resolver._walk_seconds == 0  # the seeding walk happens once: outside the budget
    _no_gc_walk(monkeypatch)
    late = _Tensor(0x7F0000100000, (4,))
    model2 = _Module(weight=late)
    assert resolver.resolve([late.data_ptr()])[late.data_ptr()]["name"] == "weight"
    assert builds == ["gc", "hooks"]
    del model, model2
    for hooks in _HOOKS.values():
        hooks.clear()


def test_moved_storage_is_renamed_once_due_and_never_misnamed(torch):
    now = [100.0]
    resolver = TensorResolver(clock=lambda: now[0])
    resolver._torch_imported(torch)
    w = _Tensor(0x7F0000000000, (4,))
    model = _Module(weight=w)
    assert resolver.resolve([w.data_ptr()])[w.data_ptr()]["name"] == "weight"
    w._ptr = 0x7F0000500000  # `.cuda()`, `param.data = ...`: same Parameter, new storage, no registration
    now[0] += 0.5
    assert 0x7F0000500000 not in resolver.resolve([0x7F0000500000])  # not due yet: no rebuild
    now[0] += REBUILD_SECONDS
    assert resolver.resolve([0x7F0000500000])[0x7F0000500000]["name"] == "weight"
    w._ptr = 0x7F0000600000
    reuse = _Tensor(0x7F0000500000, (4,))  # the allocator hands the old address to another tensor
    named = (resolver.resolve([reuse.data_ptr()]).get(reuse.data_ptr()) or {}).get("name")
    assert named != "weight"  # never named after the tensor that left (from 3.13: after its variable)
    assert resolver._table.stale is False  # the stale entry made the miss rebuild at once
    assert resolver.resolve([0x7F0000600000])[0x7F0000600000]["name"] == "weight"
    del model


def test_registry_and_table_never_keep_modules_or_tensors_alive(torch):
    resolver = TensorResolver()
    resolver._torch_imported(torch)
    w = _Tensor(0x7F0000000000, (4,))
    model = _Module(weight=w)
    assert resolver.resolve([w.data_ptr()])
    gone_model, gone_weight = weakref.ref(model), weakref.ref(w)
    del model, w
    gc.collect()
    assert gone_model() is None and gone_weight() is None and resolver.registry.modules() == []


def test_builds_stay_within_their_budget_of_wall_time(monkeypatch):
    """Without hooks every build walks the garbage collector: a miss at every resolution, 30 ms a
    walk, over 1000 s of a program's time: walks at most every REBUILD_SECONDS, and in all no
    more than BUDGET_FLOOR_SECONDS + BUDGET_FRACTION of the wall time (plus the walk that crossed it)."""
    for hooks in _HOOKS.values():
        hooks.clear()
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(with_hooks=False))
    now = [0.0]
    walk_cost = 0.03

    def costly_walk(_module_type):
        now[0] += walk_cost
        return []
    monkeypatch.setattr(tensors, "gc_modules", costly_walk)
    walks = []
    resolver = TensorResolver(on_walk=lambda s, m, source: walks.append((now[0], s)), clock=lambda: now[0])
    while now[0] < 1000.0:
        resolver.resolve([0x7F0000000000])
        now[0] += 0.25
    spent = sum(s for _, s in walks)
    assert abs(spent - walk_cost * len(walks)) < 1e-6
    assert spent <= BUDGET_FLOOR_SECONDS + BUDGET_FRACTION * now[0] + walk_cost
    assert spent >= BUDGET_FRACTION * now[0] - 2 * walk_cost  # the budget is used, not starved
    starts = [t - s for t, s in walks]
    assert all(b - a >= REBUILD_SECONDS - 1e-9 for a, b in zip(starts, starts[1:]))


def test_name_table_finds_the_span_holding_a_pointer_among_overlapping_ones():
    big = _Tensor(0x1000000, (1024,))  # [0x1000000, 0x1001000): a flat parameter
    views = [_Tensor(0x1000000 + 256 * i, (16,)) for i in range(16)]  # views into it, 64 bytes each
    after = _Tensor(0x1002000, (4,))
    entries = [(t.data_ptr(), t.data_ptr() + t.numel() * 4, name, weakref.ref(t))
               for name, t in [("flat", big), ("after", after), *((f"v{i}", v) for i, v in enumerate(views))]]
    table = NameTable(entries)
    assert table.exact(0x1000000)[0] in ("flat", "v0")
    assert table.inside(0x1000000 + 256 * 3 + 8)[0] == "v3"  # the nearest start holding it
    assert table.inside(0x1000000 + 256 * 3 + 100)[0] == "flat"  # past v3's 64 bytes: only the flat one holds it
    assert table.inside(0x1001000) is None and table.inside(0x1002000 + 15)[0] == "after"
    assert table.inside(0x0FFFFFF) is None and not table.stale


def test_after_import_runs_its_action_once_the_package_ran(tmp_path, monkeypatch):
    pkg = tmp_path / "neutrino_fake_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("READY = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hook = AfterImport({"neutrino_fake_pkg": lambda module: seen.append(module.READY)})
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    import neutrino_fake_pkg  # noqa: F401

    assert seen == [True] and hook not in sys.meta_path
    assert "exec_module" not in vars(sys.modules["neutrino_fake_pkg"].__spec__.loader)  # the loader as it was
    monkeypatch.delitem(sys.modules, "neutrino_fake_pkg")


def test_after_import_action_that_raises_never_breaks_the_import(tmp_path, monkeypatch):
    (tmp_path / "neutrino_fake_mod.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def broken(_module):
        raise RuntimeError("ours")
    monkeypatch.setattr(sys, "meta_path", [AfterImport({"neutrino_fake_mod": broken}), *sys.meta_path])
    import neutrino_fake_mod

    assert neutrino_fake_mod.VALUE == 7
    monkeypatch.delitem(sys.modules, "neutrino_fake_mod")


def test_watch_torch_hooks_registration_when_torch_is_imported(tmp_path, monkeypatch):
    """The runtime's path: watch_torch before the program imports torch (a stand-in package on disk)."""
    for hooks in _HOOKS.values():
        hooks.clear()
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    fake_dir = tmp_path / "torch"
    fake_dir.mkdir()
    (fake_dir / "__init__.py").write_text("import test_tensor_resolution as t\n"
                                          "globals().update(vars(t._fake_torch()))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    resolver = TensorResolver()
    resolver.watch_torch()
    import torch  # noqa: F401 - the stand-in

    assert resolver.registry.hooked and resolver._complete and len(_HOOKS["module"]) == 1
    monkeypatch.delitem(sys.modules, "torch")
    for hooks in _HOOKS.values():
        hooks.clear()


def test_after_import_of_a_missing_package_skips_no_finder(monkeypatch):
    """Answering None it stays in sys.meta_path (the import system is walking that list)."""
    seen = []

    class Witness:
        def find_spec(self, fullname, path=None, target=None):
            if fullname == "neutrino_no_such_pkg":
                seen.append(fullname)
            return None

    hook = AfterImport({"neutrino_no_such_pkg": lambda module: None})
    monkeypatch.setattr(sys, "meta_path", [hook, Witness(), *sys.meta_path])
    with pytest.raises(ImportError):
        import neutrino_no_such_pkg  # noqa: F401
    assert hook in sys.meta_path and hook.done
    assert len(seen) == 2  # once through our own look-up, once in the import system's walk: not skipped
