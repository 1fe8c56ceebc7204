"""LaunchWay.PROBE: one probed launch, from its buffers to its results handed on.

One job, after the runtime (runtime/core.py) decided that a launch is probed now and found its
probed code and its shape. The launch flows one way, each step handing its value to the next:

    caps of count-sized maps (a counting launch) → the launch's trace bytes and map buffers,
    within the budgets → enqueue (enqueue.py) → results to the writer, a plan for the C path,
    the launch's arguments (context_tables/tables.py)

Nothing here calls back into the runtime. A launch the budgets have no room for raises
`Dropped`: it runs unprobed and the runtime counts it. Any other failure before the probed
kernel ran raises (the runtime falls back to the original); after it ran, nothing raises.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from neutrino import maps as tracefmt
from neutrino.runtime.driver import DriverError
from neutrino.runtime.instrument.probed import Fallback
from neutrino.runtime.launch_path.pool import PoolFull, size_class

if TYPE_CHECKING:
    from neutrino.runtime.context_tables.tables import ContextTables
    from neutrino.runtime.launch_path.fastpath import FastPath

WAIT_WHEN_FULL = 60.0  # seconds --when-full=wait waits for buffers before dropping the launch


def _step(clock: dict | None, name: str) -> None:
    """The seconds since the previous step of a first launch's clock (launch_probed)."""
    if clock is not None:
        now = time.perf_counter()
        clock["steps"][name] = now - clock["at"]
        clock["at"] = now


class Dropped(Exception):
    """A launch the budgets have no room for: it runs unprobed and is counted, like the BPF ring
    buffer's failed reserve (not a failure: no fallback event)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class ProbedLaunches:
    """The probed launches of the Python path, and what they count (probed launches, --benchmark
    timings); the runtime's registry says whether a launch's handle is still the kernel's."""

    def __init__(self, trace, opt, registry, pool, writer, enqueuer, trace_budget, attribution, *,
                 fast=None, context=None):
        self.trace, self.opt, self.registry = trace, opt, registry
        self.pool, self.writer, self.enqueuer = pool, writer, enqueuer
        self.trace_budget = trace_budget
        self.attribution = attribution
        self.fast: FastPath | None = fast  # the shim's C path (None without the native writer)
        self.context: ContextTables | None = context  # ranges and argument tables (None without the native writer)
        self.timeline = None  # context_tables/cupti.py: marks probed launches (set when CUPTI runs)
        self._wait_seconds = WAIT_WHEN_FULL if opt.when_full == "wait" else 0.0  # for buffers, when the pool is full
        self._lock = threading.Lock()
        self.launches = 0
        self.bench: dict[str, list[tuple[list[float], list[float]]]] = {}
        self._first_timed = False  # the process's first probed launch is timed step by step (`first_launch`)

    def launch_probed(self, rec, pk, req, ctx: int, shape) -> int:
        """Buffers, enqueue; then the results are handed on (never a fallback after the probed kernel
        has run: the original would run twice). Returns 0: the launch is ours."""
        if req.extra and not req.params:
            raise Fallback("params", "kernel arguments passed through 'extra' are not supported", permanent=True)
        stream = req.our_stream
        clock = self._first_clock()
        shape, slots = self._reserve(pk, req, shape, stream, ctx)
        _step(clock, "reserve")
        frame = self.attribution.frame()
        _step(clock, "frame")
        token = self.timeline.begin() if self.timeline is not None else 0  # marks the launch probed (cupti.c)
        try:
            flight = self.enqueuer.launch(pk, req, shape.layouts, slots, stream=stream, ctx=ctx, frame=frame,
                                          frame_bytes=shape.frame_bytes, benchmark=self.opt.benchmark)
        except BaseException as e:
            if token:  # the probed kernel never ran: what runs in its place is not flagged probed
                self.timeline.cancel(token)
            self.pool.release(slots)
            self.trace_budget.give_back(shape.frame_bytes)
            if isinstance(e, Fallback) and e.stage == "launch":
                pk.attrs_checked = False  # the program may have changed the original's attributes since
            raise
        finally:
            if token:
                self.timeline.end(token)
        _step(clock, "enqueue")
        # The probed kernel has run: from here on only its records can be lost, nothing raises.
        with self._lock:
            self.launches += 1
            if flight.bench is not None:
                self.bench.setdefault(pk.name, []).append(flight.bench)
        if pk.sizing_rings and flight.error is None:  # a first launch sizes its kernel's next rings
            try:  # its heads, read back once it is done (one synchronisation; later launches have none)
                pk.learn_rings(self.enqueuer.ring_heads(shape.layouts, slots, stream), shape.layouts)
            except Exception as e:  # noqa: BLE001 - the launch happened: its next rings keep the first size
                pk.ring_learning = tracefmt.RING_LEARN_LAUNCHES
                self.trace.event("ring_sizing", kernel=pk.name, reason=f"{type(e).__name__}: {e}")
            else:
                if pk.ring_learned:
                    self.trace.event("ring_sizing", kernel=pk.name, slots_per_unit=pk.ring_learned)
        _step(clock, "ring_sizing")
        if flight.bench is not None:
            self.trace.event("benchmark", kernel=pk.name, kernel_launch=req.index, baseline_ns=flight.bench[0],
                             probed_ns=flight.bench[1])
        try:  # results to the writer, a plan for the C path
            seq = self.writer.submit(flight)
            if (self.fast is not None and not self.opt.benchmark and flight.error is None and not pk.sizing_rings
                    and self.registry.functions.get(req.func) is rec):  # not forgotten meanwhile
                max_shared = self.fast.plan_later_launches(req, ctx, pk, shape, flight, self.writer)
                if max_shared is not None:
                    self.trace.event("fast_path", kernel=pk.name, function=hex(req.func), max_shared=max_shared)
        except Exception as e:  # noqa: BLE001 - the result is lost; the launch happened
            self.trace.event("result_error", kernel=rec.name, kernel_launch=req.index, reason=f"writer: {e}")
            return 0
        _step(clock, "submit")
        if self.context is not None and seq:  # the launch's arguments
            try:
                self.context.record_launch(rec, req, ctx, seq - 1)
            except Exception as e:  # noqa: BLE001 - the argument trace never touches the launch
                self.trace.event("launch_args", kernel=rec.name, reason=f"{type(e).__name__}: {e}")
        if clock is not None:
            _step(clock, "arguments")
            self.trace.event("first_launch", kernel=pk.name, steps={k: round(v, 6) for k, v in clock["steps"].items()})
        return 0

    def _first_clock(self) -> dict | None:
        """The step clock of the process's first probed launch (None for every other one): the first
        launch pays once-per-process costs (issue 29: ~0.3 s on the GPU, docs/startup.md) that its
        `first_launch` event splits by step."""
        if self._first_timed:
            return None
        with self._lock:
            if self._first_timed:
                return None
            self._first_timed = True
        return {"at": time.perf_counter(), "steps": {}}

    def _reserve(self, pk, req, shape, stream: int, ctx: int):
        """(the launch's shape, its map buffers), with its trace bytes held: count-sized maps are
        sized by counting first (`_caps`). `Dropped` when a budget has no room for them."""
        if pk.needs_counting:  # code built before the device ring: count first
            caps = self._caps(pk, req, shape, stream, ctx)
            shape = pk.shape(req.grid, req.block, caps)
        self.writer.reclaim()
        if not self.trace_budget.reserve(shape.frame_bytes):
            raise Dropped("trace-budget", f"the trace budget of {self.trace_budget.limit} bytes is spent")
        try:
            return shape, self.pool.acquire_reclaiming(ctx, shape.classes, self.writer, self._wait_seconds)
        except PoolFull as e:
            self.trace_budget.give_back(shape.frame_bytes)
            raise Dropped("buffer-budget", e.reason) from None
        except DriverError as e:
            self.trace_budget.give_back(shape.frame_bytes)
            raise Fallback("alloc", f"{sum(lay.size for lay in shape.layouts)} bytes of map buffers: {e}") from None
        except BaseException:
            self.trace_budget.give_back(shape.frame_bytes)
            raise

    def _caps(self, pk, req, shape, stream: int, ctx: int) -> dict[str, int]:
        """The caps of the count-sized maps: counted at this kernel's first launch with this grid and
        block, then reused for --recount-every launches of them before counting again. A reused
        launch has no counting launch and no synchronisation; where it needs more records than the
        cap, the kernel drops the rest and its counts section says how many (the map's `dropped`).
        `shape`: the launch's shape before counting (count-sized maps of one record per unit)."""
        key = (tuple(req.grid), tuple(req.block))
        seen = pk.counted.get(key)
        if seen is None or seen[1] >= self.opt.recount_every:  # count now, with the counting kernel
            classes = [size_class(tracefmt.align(4 * lay.units, 16)) for lay in shape.layouts]
            try:
                slots = self.pool.acquire_reclaiming(ctx, classes, self.writer, self._wait_seconds)
            except PoolFull as e:
                raise Fallback("count", f"no buffers for the counting kernel: {e.reason}") from None
            try:
                seen = (self.enqueuer.count(pk, req, shape.layouts, slots, stream, ctx), 0)
            finally:
                self.pool.release(slots)
        pk.counted[key] = (seen[0], seen[1] + 1)
        return seen[0]
