"""The launch path under pressure, with the fake driver: budgets, drops, callbacks, threads."""

from __future__ import annotations

import threading
import time

import pytest

import neutrino.trace as nt
from neutrino.runtime.core import NOT_HANDLED

from test_runtime_core import events, finish, load_saxpy, make_runtime, req

class GatedDriver:
    """Wraps a FakeDriver so the writer's wait on a launch's copy blocks until `gate` is set."""

    def __init__(self, drv):
        self._drv = drv
        self.gate = threading.Event()

    def __getattr__(self, name):
        return getattr(self._drv, name)

    def event_synchronize(self, ev):
        assert self.gate.wait(30)


def gated_runtime(tmp_path, **opts):
    rt, drv, shim = make_runtime(tmp_path, **opts)
    gated = GatedDriver(drv)
    for obj in (rt, rt.kernels, rt.pool, rt.enqueuer, rt.writer):
        obj.drv = gated
    return rt, drv, gated


def probed_launches(drv):
    return [f for _, f, *_ in drv.launches if f != 0x200]


def test_buffer_budget_full_drops_and_counts(tmp_path):
    rt, drv, gated = gated_runtime(tmp_path, buffer_budget=4096)  # room for one launch's buffers
    load_saxpy(rt)
    results = []
    for i in range(4):
        r, keep = req(index=i)
        results.append(rt.on_launch(r))
    assert results == [0, NOT_HANDLED, NOT_HANDLED, NOT_HANDLED]  # the shim runs those unprobed
    assert len(probed_launches(drv)) == 1  # the dropped launches never reached the driver from us
    gated.gate.set()
    rt.drain()
    r, keep = req(index=4)
    assert rt.on_launch(r) == 0  # buffers came back: probing resumes
    out = finish(rt)
    assert rt.drops[("saxpy4", "buffer-budget")] == 3
    (ev,) = events(rt, "dropped")  # one event at the first drop, totals at exit
    assert ev["reason"] == "buffer-budget" and ev["kernel_launch"] == 1
    (ex,) = events(rt, "exit")
    assert ex["dropped"] == 3 and ex["launches"] == 2
    assert "3 launch(es) ran unprobed because a budget was full" in out
    assert [la.event["kernel_launch"] for la in nt.load(rt.trace.path).launches] == [0, 4]
    assert not events(rt, "fallback")


def test_when_full_wait_blocks_instead_of_dropping(tmp_path):
    rt, drv, gated = gated_runtime(tmp_path, buffer_budget=4096, when_full="wait")
    load_saxpy(rt)
    r, keep = req(index=0)
    assert rt.on_launch(r) == 0
    done = []
    r1, keep1 = req(index=1)
    t = threading.Thread(target=lambda: done.append(rt.on_launch(r1)))
    t.start()
    time.sleep(0.3)
    assert not done  # waiting for the writer to give buffers back
    gated.gate.set()
    t.join(10)
    assert done == [0]
    finish(rt)
    assert not rt.drops and len(nt.load(rt.trace.path).launches) == 2


def test_trace_budget_drops_after_budget(tmp_path):

    probe_rt, _, _ = make_runtime(tmp_path / "probe")
    load_saxpy(probe_rt)
    r, keep = req()
    pk = probe_rt.kernels.get(probe_rt.functions[0x200], 0xC0, 0x200)
    frame = pk.shape(r.grid, r.block).frame_bytes
    finish(probe_rt)

    rt, drv, _ = make_runtime(tmp_path / "run", trace_budget=2 * frame)
    load_saxpy(rt)
    got = []
    for i in range(5):
        r, keep = req(index=i)
        got.append(rt.on_launch(r))
        rt.drain()
    finish(rt)
    assert got == [0, 0, NOT_HANDLED, NOT_HANDLED, NOT_HANDLED]
    assert rt.drops[("saxpy4", "trace-budget")] == 3
    assert rt.trace.result_bytes == 2 * frame  # the estimate is exactly what was written
    assert len(nt.load(rt.trace.path).launches) == 2


def test_slow_or_failing_callback_never_delays_a_launch(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    calls = []

    def cb(path, event):
        calls.append(event["kernel_launch"])
        time.sleep(0.2)
        if len(calls) == 2:
            raise ValueError("analysis bug")

    rt.set_callback(cb)
    load_saxpy(rt)
    worst = 0.0
    for i in range(5):
        r, keep = req(index=i)
        t0 = time.perf_counter()
        assert rt.on_launch(r) == 0
        worst = max(worst, time.perf_counter() - t0)
    rt.drain()
    assert calls == []  # nothing ran on the launch path or in the writer
    assert worst < 0.2
    finish(rt)
    assert calls == [0, 1, 2, 3, 4]  # after the program, over every launch
    (err,) = events(rt, "callback_error")
    assert "analysis bug" in err["reason"]


def test_callback_time_limit_counts_what_it_skipped(tmp_path):
    rt, drv, _ = make_runtime(tmp_path, callback_seconds=0.3)
    rt.set_callback(lambda path, event: time.sleep(0.2))
    load_saxpy(rt)
    for i in range(6):
        r, keep = req(index=i)
        rt.on_launch(r)
    out = finish(rt)
    (ev,) = events(rt, "callback_skipped")
    assert 1 <= ev["launches"] <= 5 and "not analysed" in out


@pytest.mark.parametrize("budget", [1 << 30, 3 * 4096])
def test_many_threads_lose_nothing_uncounted(tmp_path, budget):
    rt, drv, _ = make_runtime(tmp_path, buffer_budget=budget)
    load_saxpy(rt)
    n_threads, per = 8, 25
    outcomes = []
    lock = threading.Lock()

    def work(t):
        for i in range(per):
            r, keep = req(index=t * per + i, grid=(1 + (i % 3), 1, 1))
            rc = rt.on_launch(r)
            with lock:
                outcomes.append(rc)

    ths = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    finish(rt)
    probed = outcomes.count(0)
    dropped = outcomes.count(NOT_HANDLED)
    assert probed + dropped == n_threads * per
    assert sum(rt.drops.values()) == dropped  # every drop counted
    assert not events(rt, "fallback") and not events(rt, "result_error")
    launches = nt.load(rt.trace.path).launches
    assert len(launches) == probed == rt.probed_launches
    assert sorted(la.index for la in launches) == list(range(probed))
    for la in launches:
        assert len(la.maps["block_sched"].valid()) == 2 * la.grid[0]  # every record of every launch
    assert len({la.event["kernel_launch"] for la in launches}) == probed  # no launch written twice
