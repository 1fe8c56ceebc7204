"""Probed code built off the launch path (runtime/instrument/prebuild.py), on the fake driver (no GPU)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from neutrino.engine import instrument, list_entries
from neutrino.errors import InstrumentError
from neutrino.runtime.core import NOT_HANDLED
from neutrino.runtime.instrument.prebuild import entry_only
from neutrino.toolbox import load_probes

from test_runtime_core import CountingEngine, events, finish, load_saxpy, make_runtime, req


class GatedEngine(CountingEngine):
    """The real engine, run only once `gate` is set; records which threads instrumented."""

    def __init__(self, fail=None):
        super().__init__(fail)
        self.gate = threading.Event()
        self.threads: list[str] = []

    def instrument(self, *a, **k):
        self.threads.append(threading.current_thread().name)
        assert self.gate.wait(30), "the test never opened the gate"
        return super().instrument(*a, **k)


def wait_built(rt, timeout=30.0):
    """Until no queued build is running (the test's own polling; the runtime never polls)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = list(rt.kernels.prebuild._jobs.values())
        if all(job.done() for job in jobs):
            return
        time.sleep(0.01)
    raise AssertionError("build did not finish")


def test_lookup_builds_on_a_worker_and_the_launch_only_loads(tmp_path):
    engine = GatedEngine()
    engine.gate.set()
    rt, drv, _ = make_runtime(tmp_path, engine=engine, build_threads=4)
    assert load_saxpy(rt)  # the lookup queues the build
    wait_built(rt)
    assert engine.calls == 1 and engine.threads[0].startswith("neutrino-build")
    assert drv.links == 1  # JIT-compiled on the worker too
    r, keep = req()
    assert rt.on_launch(r) == 0
    assert engine.calls == 1 and drv.links == 1  # nothing built again on the launching thread
    (inst,) = events(rt, "instrument")
    assert inst["cache"] == "miss" and inst["built_in_background"] > 0
    finish(rt)
    phases = {e["phase"] for e in events(rt, "phase")}
    assert {"background_instrument", "background_jit"} <= phases and "instrument" not in phases
    assert "jit" not in phases


def test_wait_mode_waits_for_the_build_and_probes_the_first_launch(tmp_path):
    engine = GatedEngine()
    rt, drv, _ = make_runtime(tmp_path, engine=engine, build_threads=4)
    assert load_saxpy(rt)
    threading.Timer(0.2, engine.gate.set).start()
    r, keep = req()
    assert rt.on_launch(r) == 0  # probed: the launch waited
    assert not events(rt, "fallback")
    finish(rt)
    (wait,) = [e for e in events(rt, "phase") if e["phase"] == "build_wait"]
    assert 0.1 < wait["seconds"] < 30


def test_original_mode_runs_the_original_until_the_code_is_ready(tmp_path):
    engine = GatedEngine()
    rt, drv, _ = make_runtime(tmp_path, engine=engine, build_threads=4, while_building="original")
    assert load_saxpy(rt)
    for i in range(2):
        r, keep = req(index=i)
        assert rt.on_launch(r) == NOT_HANDLED  # the shim runs the original kernel
    (fb,) = events(rt, "fallback")  # said once per kernel
    assert fb["stage"] == "building" and not fb["permanent"] and "original" in fb["reason"]
    engine.gate.set()
    wait_built(rt)
    r, keep = req(index=2)
    assert rt.on_launch(r) == 0  # probed once ready
    out = finish(rt)
    assert rt.fallbacks[("saxpy4", "building")] == 2
    assert "1 probed launch" in out and engine.calls == 1


def test_a_bounded_wait_runs_the_original_and_tries_again(tmp_path):
    engine = GatedEngine()
    rt, drv, _ = make_runtime(tmp_path, engine=engine, build_threads=4)
    rt.kernels.prebuild.wait_seconds = 0.05
    assert load_saxpy(rt)
    r, keep = req()
    assert rt.on_launch(r) == NOT_HANDLED
    (fb,) = events(rt, "fallback")
    assert fb["stage"] == "building" and "0 s of waiting" in fb["reason"]
    engine.gate.set()
    r, keep = req(index=1)
    assert rt.on_launch(r) == 0
    finish(rt)
    assert engine.calls == 1


def test_a_failed_build_is_the_same_permanent_fallback(tmp_path):
    engine = GatedEngine(fail=InstrumentError("boom"))
    engine.gate.set()
    rt, drv, shim = make_runtime(tmp_path, engine=engine, build_threads=4)
    assert load_saxpy(rt)
    for i in range(2):
        r, keep = req(index=i)
        assert rt.on_launch(r) == NOT_HANDLED
    (fb,) = events(rt, "fallback")
    assert fb["stage"] == "instrument" and fb["permanent"] and "boom" in fb["reason"]
    assert 0x200 in shim.removed
    finish(rt)


def test_no_threads_builds_at_the_first_launch(tmp_path):
    engine = GatedEngine()
    engine.gate.set()
    rt, drv, _ = make_runtime(tmp_path, engine=engine, build_threads=0)
    assert rt.kernels.prebuild is None
    assert load_saxpy(rt)
    assert engine.calls == 0
    r, keep = req()
    assert rt.on_launch(r) == 0
    assert engine.threads == [threading.current_thread().name]
    finish(rt)


def test_an_unloaded_kernels_build_is_dropped(tmp_path):
    engine = GatedEngine()
    rt, drv, _ = make_runtime(tmp_path, engine=engine, build_threads=1)
    assert load_saxpy(rt)
    rt.on_unload("cuModuleUnload", 0x100)
    assert not rt.kernels.prebuild._jobs
    engine.gate.set()
    finish(rt)
    assert not events(rt, "instrument")


# ---------------------------------------------------------------- one entry's text

CORPUS = Path(__file__).parent / "data" / "corpus"


def _many_kernel_module(copies: int) -> tuple[str, list[str]]:
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    from build_parallel import many_kernel_module

    return many_kernel_module(copies)


def _modules_with_entries():
    for path in sorted(CORPUS.glob("*/*.ptx")):
        text = path.read_text()
        yield path.name, text, list_entries(text)
    text, names = _many_kernel_module(2)
    yield "many", text, names


def _no_blank_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.strip())


def test_entry_only_instruments_exactly_like_the_whole_module():
    probes = load_probes("block_sched")
    cut = 0
    for label, text, names in _modules_with_entries():
        for name in names:
            alone = entry_only(text, name)
            assert alone.count("\n") == text.count("\n"), label  # line numbers kept
            cut += alone != text
            whole, part = instrument(text, probes, kernel=name), instrument(alone, probes, kernel=name)
            assert part.kernels == whole.kernels, (label, name)  # skipped sites' lines included
            assert _no_blank_lines(part.ptx) == _no_blank_lines(whole.ptx), (label, name)
    assert cut >= 16 + 6  # the many-kernel module's entries, and the corpus's modules of two


def test_entry_only_keeps_the_text_where_cutting_is_not_safe():
    vec = (CORPUS / "nvcc" / "vec.sm90.ptx").read_text()
    assert ".entry hscale" not in entry_only(vec, "saxpy4") and ".entry saxpy4" in entry_only(vec, "saxpy4")
    assert entry_only(vec, "nosuchkernel") == vec
    assert entry_only(vec + "\n.section .debug_info { }\n", "saxpy4").endswith("{ }\n")  # kept whole
    address_taken = vec.replace("ret;", "mov.u64 %rd1, hscale;\nret;", 1)
    assert entry_only(address_taken, "saxpy4") == address_taken
    unclosed = vec[: vec.rindex("}")]
    assert entry_only(unclosed, "saxpy4") == unclosed


def test_options_reach_the_profiled_process():
    from neutrino.runtime.start.launcher import parse_args
    from neutrino.runtime.start.options import RuntimeOptions

    ns, _ = parse_args(["-p", "block_sched", "--build-threads", "2", "--while-building", "original", "--", "prog"])
    assert (ns.build_threads, ns.while_building) == (2, "original")
    opts = RuntimeOptions(probe="p", build_threads=2, while_building="original")
    assert RuntimeOptions.from_json(opts.to_json()) == opts
    assert RuntimeOptions.from_json('{"probe": "p"}').build_threads == 0  # an older log's options: off
    ns, _ = parse_args(["-p", "block_sched", "--", "prog"])
    assert (ns.build_threads, ns.while_building) == (0, "wait")  # off unless asked for


def test_a_forked_child_gets_its_own_build_threads(tmp_path):
    engine = GatedEngine()
    engine.gate.set()
    rt, drv, _ = make_runtime(tmp_path, engine=engine, build_threads=4)
    assert load_saxpy(rt)
    wait_built(rt)
    prebuild = rt.kernels.prebuild
    prebuild._pool_pid = -1  # as a forked child sees the parent's pool
    rec = rt.registry.functions[0x200]
    rt.kernels._built.clear()
    assert prebuild.schedule(rec, drv.ctx_get_current())  # a new pool, not the parent's dead threads
    wait_built(rt)
    r, keep = req()
    assert rt.on_launch(r) == 0
    finish(rt)


def test_a_failure_to_queue_is_logged_and_the_launch_builds(tmp_path):
    engine = GatedEngine()
    engine.gate.set()
    rt, drv, _ = make_runtime(tmp_path, engine=engine, build_threads=4)

    def broken(rec, ctx):
        raise RuntimeError("no threads")

    rt.kernels.prepare = broken
    assert load_saxpy(rt)  # the lookup itself is unaffected
    r, keep = req()
    assert rt.on_launch(r) == 0
    assert engine.threads == [threading.current_thread().name]  # built at the first launch
    (ev,) = events(rt, "prebuild")
    assert ev["kernel"] == "saxpy4" and "no threads" in ev["reason"]
    finish(rt)


def test_a_launch_whose_build_is_still_queued_builds_it_itself(tmp_path):
    """One build thread busy with another kernel's build: the launch of a kernel whose job has not
    started takes the job back and builds on its own thread (cache_lookup, instrument: on the
    launch path, no build_wait), instead of waiting behind the queue."""
    engine = GatedEngine()
    rt, drv, _ = make_runtime(tmp_path, engine=engine, build_threads=1)
    prebuild = rt.kernels.prebuild
    assert load_saxpy(rt)  # saxpy4's build runs on the one worker, held at the gate
    (running_rec,) = [rec for (_, rec) in prebuild._jobs]
    other = type(running_rec)(running_rec.name, running_rec.module)  # another kernel record of the module
    ctx = next(iter(prebuild._jobs))[0]
    assert prebuild.schedule(other, ctx)  # queued behind it
    threading.Timer(5.0, engine.gate.set).start()  # the test never hangs if the take waited
    started = time.perf_counter()
    engine.threads.clear()
    assert prebuild.take(other, ctx) is None  # not started: handed back to the caller
    assert time.perf_counter() - started < 1.0
    assert (ctx, other) not in prebuild._jobs
    engine.gate.set()
    wait_built(rt)
    finish(rt)
