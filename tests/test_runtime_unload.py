"""Module unloads and reused handles: a handle the driver gives to another kernel never runs the old one's code.

XLA's autotuner loads a module, launches a candidate, unloads it and loads the next: the driver gives
the next module and kernel the old handles. The runtime must forget everything keyed by them (the
shim's probe set, fast-path plans, argument tables, probed code) and probe the new kernel as itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import neutrino.trace as nt
from neutrino import ranges as nr
from neutrino.runtime.core import NOT_HANDLED

from fakedriver import ctx_of
from test_runtime_core import VEC_PTX, events, finish, make_runtime, req
from test_runtime_shim import FAKE, VEC_PTX as VEC_PTX_FILE, _run_under_fake, fakecuda, shim  # noqa: F401


def launched_kernel(drv) -> str:
    """The name of the kernel the fake driver last ran (our probed code's entry)."""
    _, func, _, _, _ = drv.launches[-1]
    return drv.functions[func][1]


def launch(rt, func, index=0):
    r, keep = req(func=func, index=index)
    rc = rt.on_launch(r)
    rt.drain()
    return rc


@pytest.mark.parametrize("how", ["unload", "module_handle_reused", "function_handle_reused"])
def test_reused_function_handle_runs_the_new_kernel(tmp_path, how):
    """k1 probed at handle 0x200; its module goes (unloaded, or its handles silently reused); k2 gets
    0x200: k2's probed code runs, never k1's, and the trace names k2."""
    rt, drv, shim = make_runtime(tmp_path)
    rt.on_module("cuModuleLoadData", 0x100, VEC_PTX.encode())
    assert rt.on_function("module_function", 0x100, "saxpy4", 0x200)
    assert launch(rt, 0x200) == 0 and launched_kernel(drv) == "saxpy4"
    ours = set(drv.modules)
    if how == "unload":
        rt.on_unload("cuModuleUnload", 0x100)
        assert 0x200 in shim.forgotten and 0x200 not in rt.functions and 0x100 not in rt.modules
    module_b = 0x101 if how == "function_handle_reused" else 0x100
    rt.on_module("cuModuleLoadData", module_b, VEC_PTX.encode())
    assert rt.on_function("module_function", module_b, "hscale", 0x200)
    assert 0x200 in shim.forgotten
    assert launch(rt, 0x200, index=0) == 0 and launched_kernel(drv) == "hscale"
    rt.on_module("cuModuleLoadData", 0x102, VEC_PTX.encode())  # a later call: our retired code is unloaded
    assert ours <= set(drv.unloaded) and drv.stale_launches == 0
    finish(rt)
    t = nt.load(rt.trace.path)
    assert [la.kernel for la in t.launches] == ["saxpy4", "hscale"]
    (ev,) = events(rt, "unload")
    assert ev["module"] == "0x100" and ev["kernels"] == ["saxpy4"] and ev["handles"] == 1
    assert ev["call"] == ("cuModuleUnload" if how == "unload" else "handle_reused")
    assert ev["probed_modules"] == 1 and ev["kept"] == 0


def test_reused_handle_of_a_kernel_filtered_out_runs_unprobed(tmp_path):
    rt, drv, shim = make_runtime(tmp_path, kernels="saxpy")
    rt.on_module("cuModuleLoadData", 0x100, VEC_PTX.encode())
    assert rt.on_function("module_function", 0x100, "saxpy4", 0x200)
    assert launch(rt, 0x200) == 0
    rt.on_module("cuModuleLoadData", 0x101, VEC_PTX.encode())
    assert rt.on_function("module_function", 0x101, "hscale", 0x200) is False
    assert 0x200 in shim.forgotten and 0x200 not in rt.functions
    assert launch(rt, 0x200) == NOT_HANDLED and len(drv.launches) == 1  # the shim runs the original


def test_library_unload_forgets_kernel_and_function_handles(tmp_path):
    """A CUkernel handle (launched directly) and its CUfunction: both forgotten with the library; the
    next library's kernel at the same CUkernel handle is probed as itself."""
    rt, drv, shim = make_runtime(tmp_path)
    rt.on_module("cuLibraryLoadData", 0x400, VEC_PTX.encode())
    assert rt.on_function("library_kernel", 0x400, "saxpy4", 0x401)
    assert rt.on_function("kernel_function", 0x401, None, 0x402)
    rt.on_function("library_module", 0x400, None, 0x403)
    for f in (0x401, 0x402):
        assert launch(rt, f) == 0 and launched_kernel(drv) == "saxpy4"
    rt.on_unload("cuModuleUnload", 0x403)  # a cuLibraryGetModule module: the driver refuses it, we keep all
    assert 0x401 in rt.functions and not shim.forgotten
    rt.on_unload("cuLibraryUnload", 0x400)
    assert {0x401, 0x402} <= set(shim.forgotten) and not rt.functions and not rt.modules
    rt.on_module("cuLibraryLoadData", 0x400, VEC_PTX.encode())
    assert rt.on_function("library_kernel", 0x400, "hscale", 0x401)
    assert launch(rt, 0x401) == 0 and launched_kernel(drv) == "hscale"
    finish(rt)
    assert [la.kernel for la in nt.load(rt.trace.path).launches] == ["saxpy4", "saxpy4", "hscale"]
    (ev,) = events(rt, "unload")
    assert ev["call"] == "cuLibraryUnload" and ev["kernels"] == ["saxpy4"] and ev["handles"] == 2


def test_our_module_stays_loaded_while_a_launch_is_pending(tmp_path):
    """Our probed module is unloaded only once the writer has every launch submitted before the
    unload: until then a launch of it may still run."""
    rt, drv, shim = make_runtime(tmp_path)
    rt.on_module("cuModuleLoadData", 0x100, VEC_PTX.encode())
    assert rt.on_function("module_function", 0x100, "saxpy4", 0x200)
    r, keep = req(func=0x200)
    held = __import__("threading").Event()
    write = rt.writer._write
    rt.writer._write = lambda flight: (held.wait(10), write(flight))  # the kernel "runs" until released
    assert rt.on_launch(r) == 0
    rt.on_unload("cuModuleUnload", 0x100)
    rt.on_module("cuModuleLoadData", 0x101, VEC_PTX.encode())
    assert drv.unloaded == []  # the launch is not written yet
    held.set()
    rt.drain()
    rt.on_module("cuModuleLoadData", 0x102, VEC_PTX.encode())
    assert len(drv.unloaded) == 1
    finish(rt)


def test_our_module_stays_loaded_while_a_captured_graph_uses_it(tmp_path):
    from test_runtime_graphs import Program

    program = Program(tmp_path)
    graph, rc = program.capture()
    assert rc == 0
    exe = program.instantiate(graph)
    program.rt.on_unload("cuModuleUnload", 0x100)
    program.rt.drain()
    program.rt.on_module("cuModuleLoadData", 0x101, VEC_PTX.encode())
    assert program.drv.unloaded == []  # the graph's probed node still launches our code
    program.replay(exe, 2)
    assert program.runs["saxpy4"] == 2 and program.drv.stale_launches == 0
    (ev,) = events(program.rt, "unload")
    assert ev["kept"] == 1 and ev["probed_modules"] == 0 and "graph" in ev["reason"]
    finish(program.rt)


def test_linked_cubin_address_reused_by_another_image_is_not_that_link(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    rt.on_link_add(0x77, VEC_PTX)
    rt.on_link_complete(0x77, 0xCAFE, b"\x7fELF the linked cubin")
    rt.on_module("cuModuleLoadData", 0x500, b"\x7fELF the linked cubin", image_addr=0xCAFE)
    assert rt.on_function("module_function", 0x500, "saxpy4", 0x501)
    rt.on_module("cuModuleLoadData", 0x600, b"\x7fELF another cubin", image_addr=0xCAFE)
    assert not rt.on_function("module_function", 0x600, "saxpy4", 0x601)
    finish(rt)
    (ev,) = events(rt, "no_ptx")
    assert ev["module"] == "0x600"


def test_library_kernel_built_in_two_contexts_unloaded_in_each(tmp_path):
    rt, drv, shim = make_runtime(tmp_path)
    drv.devices = [(9, 0), (9, 0)]
    rt.on_module("cuLibraryLoadData", 0x400, VEC_PTX.encode())
    assert rt.on_function("library_kernel", 0x400, "saxpy4", 0x401)
    for device in (0, 1):
        drv.ctx_set_current(ctx_of(device))
        assert launch(rt, 0x401) == 0
    rt.on_unload("cuLibraryUnload", 0x400)
    rt.on_module("cuModuleLoadData", 0x500, VEC_PTX.encode())  # a later call, device 1 current
    assert len(drv.unloaded) == 2 and drv.ctx_get_current() == ctx_of(1)  # the program's context given back
    assert [drv.made_in[m] for m in drv.unloaded] == drv.unloaded_in  # each unloaded in its own context
    (ev,) = events(rt, "unload")
    assert ev["probed_modules"] == 2
    finish(rt)


def test_unload_of_unknown_module_and_without_runtime_is_harmless(tmp_path):
    rt, drv, shim = make_runtime(tmp_path)
    rt.on_unload("cuModuleUnload", 0x999)
    finish(rt)
    assert not events(rt, "unload") and not events(rt, "unload_error")


# ------------------------------------------------------------ the shim and fakecuda, end to end

@pytest.mark.parametrize("mode", ["module", "library", "quiet"])
def test_shim_unload_then_reused_handles(tmp_path, fakecuda, shim, capfd, mode):  # noqa: F811
    """Launches of k1 (probed, the later ones by the C fast path), then k1's module unloaded and k2
    loaded at the same module and function handles: every k2 launch runs k2's probed code."""
    n = 5
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app_unload.py"), str(VEC_PTX_FILE),
                                                   str(n), mode])
    out = capfd.readouterr().out
    assert rc == 0 and "same handles" in out and "app done" in out
    assert log == ["saxpy4 probed=1 grid=4"] * n + ["hscale probed=1 grid=4"] * n
    t = nt.load(tmp_path / "trace")
    assert [la.kernel for la in t.launches] == ["saxpy4"] * n + ["hscale"] * n
    assert [la.event["kernel_launch"] for la in t.launches] == list(range(n)) * 2  # counted per kernel
    fast = [e for e in t.events if e["event"] == "fast_path"]
    assert [e["kernel"] for e in fast] == ["saxpy4", "hscale"] and fast[0]["function"] == fast[1]["function"]
    unloads = [e for e in t.events if e["event"] == "unload"]
    call = {"module": "cuModuleUnload", "library": "cuLibraryUnload", "quiet": "handle_reused"}[mode]
    assert unloads[0]["call"] == call and unloads[0]["kernels"] == ["saxpy4"]
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["launches"] == 2 * n and ex["dropped"] == 0
    # the argument trace: each launch's argument set names its own kernel, with that kernel's sizes,
    # though both kernels were launched with the same handle and the same argument bytes
    argsets, uses = nr.read_launch_args(_run_dir(tmp_path / "trace"))
    assert {argsets[uses[la.index]]["kernel"] for la in t.launches[:n]} == {"saxpy4"}
    assert {argsets[uses[la.index]]["kernel"] for la in t.launches[n:]} == {"hscale"}
    assert [a["size"] for a in argsets[uses[t.launches[-1].index]]["args"]] == [8, 8, 4, 4]


def _run_dir(trace: Path) -> Path:
    """Where the context tables are: the trace directory, or its one run directory."""
    if (trace / "launch_args.jsonl").exists():
        return trace
    (run,) = [p for p in trace.iterdir() if p.is_dir() and (p / "launch_args.jsonl").exists()]
    return run


def test_shim_reused_handle_of_a_kernel_filtered_out(tmp_path, fakecuda, shim, capfd):  # noqa: F811
    n = 3
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app_unload.py"), str(VEC_PTX_FILE),
                                                   str(n), "module"], "--filter", "hscale")
    assert rc == 0 and "same handles" in capfd.readouterr().out
    assert log == ["saxpy4 probed=1 grid=4"] * n + ["hscale probed=0 grid=4"] * n
    assert [la.kernel for la in nt.load(tmp_path / "trace").launches] == ["saxpy4"] * n
