"""Enqueueing a probed launch: zero the buffers, launch, queue the copy back. Nothing waits.

One job, on the program's launch path: with the slots the pool handed out,
issue (all asynchronous, on the program's stream unless said otherwise)

    memset(counts) per map → [globals in] → event start → probed kernel → event end
    → [globals out]; then on our copy stream, after `end`: D2H copy per map → event done

and return an `InFlight` for the writer. The copy runs on a stream of ours that
waits for `end`, so the program's next kernels do not queue behind it. The
only synchronising work is the counting kernel of `cap = "count"` maps (its
counts size the real launch) and `--benchmark`'s repetitions.
"""

from __future__ import annotations

import ctypes as C
import threading

import attrs

from neutrino import maps as tracefmt
from neutrino.runtime.driver import DEV_ATTR_L2_SIZE, DriverError
from neutrino.runtime.launch_path.pool import Slot
from neutrino.runtime.instrument.probed import Fallback, MapLayout, ProbedKernel, copy_globals_in, copy_globals_out

BENCH_REPEATS = 5  # timed pairs of (baseline, probed) per benchmarked launch, after one warm pair


@attrs.define(eq=False)
class InFlight:
    """A probed launch whose results are on their way to pinned memory."""

    kernel: str
    kernel_dir: str
    req: object
    layouts: tuple[MapLayout, ...]
    slots: list[Slot]
    events: dict
    frame: str | None
    ctx: int
    frame_bytes: int
    stream: int
    bench: tuple[list[float], list[float]] | None = None  # (baseline ns, probed ns) per repetition
    error: str | None = None  # set when the copy back could not be enqueued: no result
    keep: object = None  # what the writer must keep alive until the launch is written


class Enqueuer:
    def __init__(self, drv, copy_back: bool = True):
        """`copy_back`: copy results into the slots' pinned memory here (for the Python writer);
        without it the native writer copies back and zeroes the buffers itself."""
        self.drv = drv
        self.copy_back = copy_back
        self._lock = threading.Lock()
        self._events: dict[tuple[int, bool], list[int]] = {}
        self._copy_streams: dict[int, int] = {}
        self._flush: dict[int, tuple[int, int]] = {}  # ctx -> (ptr, size) of the L2 flush buffer
        self._counts_host: tuple[int, memoryview] | None = None  # pinned memory the counting kernel's counts come back to

    def forget_contexts(self) -> None:
        """Contexts are going away, and their events and streams with them."""
        with self._lock:
            self._events.clear()
            self._copy_streams.clear()
            self._flush.clear()

    # -- resources kept for the process's life
    def event(self, ctx: int, timing: bool = True) -> int:
        with self._lock:
            lst = self._events.get((ctx, timing))
            if lst:
                return lst.pop()
        return self.drv.event_create(timing)

    def events_for_launch(self, ctx: int) -> dict:
        """The start and end (timing) events of a launch, from the free list when it has them."""
        with self._lock:
            lst = self._events.get((ctx, True))
            if lst and len(lst) >= 2:
                return {"start": lst.pop(), "end": lst.pop()}
        return {"start": self.event(ctx), "end": self.event(ctx)}

    def recycle(self, ctx: int, events: dict) -> None:
        with self._lock:
            for name, ev in events.items():
                self._events.setdefault((ctx, name != "done"), []).append(ev)

    def copy_stream(self, ctx: int) -> int | None:
        """Our copy stream in this context; None (copy on the program's stream) if it cannot be made."""
        if ctx not in self._copy_streams:
            with self._lock:
                if ctx not in self._copy_streams:
                    try:
                        self._copy_streams[ctx] = self.drv.stream_create_nonblocking()
                    except DriverError:
                        self._copy_streams[ctx] = None
        return self._copy_streams[ctx]

    # -- the launch
    def params(self, pk: ProbedKernel, req, layouts: tuple[MapLayout, ...], slots: list[Slot]):
        """The original parameter pointers followed by ours; the array keeps its values alive."""
        n = pk.n_params
        if n and not req.params:
            raise Fallback("params", "kernel arguments passed through 'extra' are not supported", permanent=True)
        array_type, plan = pk.param_plan()
        arr = array_type()
        if n:  # a ctypes slice copy, not C.memmove: a foreign call would give up the GIL (see driver.py)
            arr[:n] = pk.original_params_type.from_address(req.params)
        values = []
        for i, (which, is_buffer) in enumerate(plan):
            v = C.c_uint64(slots[which].device) if is_buffer else C.c_uint32(layouts[which].cap)
            values.append(v)
            arr[n + i] = C.addressof(v)
        arr._keep = values  # noqa: SLF001 - lifetime of the argument values
        return arr

    def zero(self, layouts, slots, stream: int) -> None:
        """Zero what the launch needs zeroed. With the native writer, a slot comes back zeroed
        from its previous launch: only a new one needs it."""
        for lay, slot in zip(layouts, slots):
            if self.copy_back:
                self.drv.zero_async(slot.device, lay.zero_bytes, stream)
            elif slot.fresh:
                self.drv.zero_async(slot.device, slot.size, stream)

    def launch(self, pk: ProbedKernel, req, layouts, slots, *, stream: int, ctx: int, frame, frame_bytes: int,
               benchmark: bool = False) -> InFlight:
        """Enqueue the probed launch. A Fallback raised here means the probed kernel did not run."""
        params = self.params(pk, req, layouts, slots)
        bench = None
        if benchmark and pk.baseline:
            bench = self._benchmark(pk, req, layouts, slots, params, stream, ctx)
        events = self.events_for_launch(ctx)
        try:
            self.zero(layouts, slots, stream)
            copy_globals_in(self.drv, pk.globals, stream)
            self.drv.event_record(events["start"], stream)
            rc = self.drv.launch(req.kind, pk.func, req, C.addressof(params))
            if rc != 0:
                raise Fallback("launch", f"probed launch failed: {self.drv.error_name(rc)}")
        except BaseException:
            self.recycle(ctx, events)
            raise
        # From here on the probed kernel has run: never raise (the caller would run it again).
        for slot in slots:
            slot.fresh = False
        flight = InFlight(pk.name, pk.kernel_dir, req, layouts, slots, events, frame, ctx, frame_bytes, stream, bench)
        try:
            copy_globals_out(self.drv, pk.globals, stream)
            self.drv.event_record(events["end"], stream)
            if self.copy_back:
                self._copy_back(flight, stream)
        except Exception as e:  # noqa: BLE001 - the result is lost, the program's launch is not
            flight.error = f"copy-back: {type(e).__name__}: {e}"
        return flight

    def _copy_back(self, flight: InFlight, stream: int) -> None:
        copy = self.copy_stream(flight.ctx)
        if copy is None:
            copy = stream
        else:
            self.drv.stream_wait_event(copy, flight.events["end"])
        for lay, slot in zip(flight.layouts, flight.slots):
            self.drv.memcpy_dtoh_async(slot.host_addr, slot.device, lay.size, copy)
        flight.events["done"] = self.event(flight.ctx, timing=False)
        self.drv.event_record(flight.events["done"], copy)

    # -- counting kernel (cap = "count")
    def count(self, pk: ProbedKernel, req, layouts, slots, stream: int, ctx: int) -> dict[str, int]:
        """Run the counting variant into the given slots and return the largest count per count-sized map.
        Synchronises the stream: the real launch cannot be sized before the counts are known."""
        for lay, slot in zip(layouts, slots):
            self.drv.zero_async(slot.device, 4 * lay.units, stream)
        counting = [attrs.evolve(lay, cap=0) for lay in layouts]
        params = self.params(pk, req, tuple(counting), slots)
        copy_globals_in(self.drv, pk.globals, stream)
        rc = self.drv.launch(req.kind, pk.count_func, req, C.addressof(params))
        if rc != 0:
            raise Fallback("count", f"counting kernel launch failed: {self.drv.error_name(rc)}")
        counted = [(lay, slot) for lay, slot in zip(layouts, slots) if lay.map["cap"] == "count"]
        addr, view = self._counts_staging(sum(4 * lay.units for lay, _ in counted))
        at = 0
        for lay, slot in counted:
            self.drv.memcpy_dtoh_async(addr + at, slot.device, 4 * lay.units, stream)
            at += 4 * lay.units
        self.drv.stream_synchronize(stream)
        caps, at = {}, 0
        for lay, _ in counted:
            counts = view[at: at + 4 * lay.units].cast("I")
            caps[lay.map["name"]] = max(max(counts) if lay.units else 1, 1)
            at += 4 * lay.units
        return caps

    def ring_heads(self, layouts, slots, stream: int) -> dict[str, int]:
        """The heads of a launch's rings (records each tried to reserve), once its stream is done:
        a kernel's first launch sizes its next ones with them (launches.py, `launch_probed`). Synchronises."""
        rings = [(lay, slot) for lay, slot in zip(layouts, slots) if tracefmt.is_ring(lay.map)]
        addr, view = self._counts_staging(8 * len(rings))
        for i, (_, slot) in enumerate(rings):
            self.drv.memcpy_dtoh_async(addr + 8 * i, slot.device, 8, stream)
        self.drv.stream_synchronize(stream)
        heads = view[: 8 * len(rings)].cast("Q")
        return {lay.map["name"]: int(heads[i]) for i, (lay, _) in enumerate(rings)}

    def _counts_staging(self, size: int) -> tuple[int, memoryview]:
        """Pinned memory for the counting kernel's counts (pool slots may have none), grown by doubling.
        Used under the synchronisation of `count`, by one launch at a time (the caller holds no lock:
        the counting path is rare; concurrent counting launches each allocate their own)."""
        got = self._counts_host
        if got is None or len(got[1]) < size:
            want = max(4096, 1 << (max(size, 1) - 1).bit_length())
            got = self.drv.host_alloc(want)
            self._counts_host = got
        return got[0], memoryview(got[1])

    # -- --benchmark
    def _flush_l2(self, ctx: int, stream: int) -> None:
        got = self._flush.get(ctx)
        if got is None:
            size = max(2 * self.drv.device_attr(DEV_ATTR_L2_SIZE), 1 << 20)
            got = self._flush[ctx] = (self.drv.mem_alloc_sync(size), size)
        self.drv.memset_async(got[0], got[1], stream)

    def _benchmark(self, pk, req, layouts, slots, params, stream: int, ctx: int) -> tuple[list[float], list[float]]:
        """Warm both kernels, then time (baseline, probed) pairs interleaved, L2 flushed before each run.

        Re-runs the kernel 2 * (1 + BENCH_REPEATS) times: documented for --benchmark."""
        a, b = self.event(ctx), self.event(ctx)
        base, probed = [], []
        try:
            for rep in range(1 + BENCH_REPEATS):
                for which in ("baseline", "probed"):
                    self._flush_l2(ctx, stream)
                    if which == "baseline":
                        copy_globals_in(self.drv, pk.baseline_globals, stream)
                        func, args = pk.baseline, req.params
                    else:
                        for lay, slot in zip(layouts, slots):
                            self.drv.zero_async(slot.device, lay.zero_bytes, stream)
                        copy_globals_in(self.drv, pk.globals, stream)
                        func, args = pk.func, C.addressof(params)
                    self.drv.event_record(a, stream)
                    rc = self.drv.launch(req.kind, func, req, args)
                    self.drv.event_record(b, stream)
                    if rc != 0:
                        raise Fallback("benchmark", f"{which} launch failed: {self.drv.error_name(rc)}")
                    self.drv.event_synchronize(b)
                    if rep:
                        (base if which == "baseline" else probed).append(self.drv.event_elapsed_ms(a, b) * 1e6)
            self._flush_l2(ctx, stream)
        finally:
            self.recycle(ctx, {"start": a, "end": b})
        return base, probed
