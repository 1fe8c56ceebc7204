"""Draining results to the trace: one writer thread, off the launch path.

One job: take `InFlight` launches in submission order, wait (in this thread)
for their copy-back, append each launch's maps as one frame to its kernel's
result file, log the `launch` event, and give the slots back to the pool.
The launch path only puts an item on an unbounded queue; its length is
bounded by the buffer pool's budget, since every queued launch holds slots.
"""

from __future__ import annotations

import queue
import threading
import time

from neutrino import trace as tracefmt


class ResultWriter:
    def __init__(self, drv, trace, pool, enqueuer, on_written=None):
        self.drv, self.trace, self.pool, self.enqueuer = drv, trace, pool, enqueuer
        self.on_written = on_written  # (launch event) -> None, e.g. benchmark bookkeeping
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self.written = 0
        self.write_errors = 0
        self._headers: dict = {}

    def submit(self, flight) -> None:
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="neutrino-writer", daemon=True)
                self._thread.start()
        self._queue.put(flight)

    def _loop(self) -> None:
        ctx = None
        while True:
            flight = self._queue.get()
            if flight is None:
                return
            try:
                if flight.ctx != ctx:
                    self.drv.ctx_set_current(flight.ctx)
                    ctx = flight.ctx
                self._write(flight)
            except Exception as e:  # noqa: BLE001 - a lost result is logged, never fatal
                self.write_errors += 1
                reason = str(e) if flight.error is not None else f"{type(e).__name__}: {e}"
                self.trace.event("result_error", kernel=flight.kernel, kernel_launch=flight.req.index, reason=reason)
            finally:
                self._done(flight)

    def _done(self, flight) -> None:
        self.pool.release(flight.slots)
        self.enqueuer.recycle(flight.ctx, flight.events)
        with self._lock:
            self._pending -= 1
            if not self._pending:
                self._idle.notify_all()

    def _write(self, flight) -> None:
        if flight.error is not None:
            self.drv.stream_synchronize(flight.stream)  # the kernel may still be writing our slots
            raise RuntimeError(flight.error)
        ev = flight.events
        self.drv.event_synchronize(ev["done"])
        duration = self.drv.event_elapsed_ms(ev["start"], ev["end"]) * 1e6
        req = flight.req
        header, offsets = self._header(flight)
        datas = [slot.host_view[: lay.size] for lay, slot in zip(flight.layouts, flight.slots)]
        index, rel, offset = self.trace.append_result(flight.kernel_dir, header, offsets, datas)
        event = dict(index=index, kernel=flight.kernel, grid=list(req.grid), block=list(req.block),
                     shared_bytes=req.shared_bytes, stream=hex(req.stream), result=rel, result_offset=offset,
                     frame=flight.frame, duration_ns=duration, kernel_launch=req.index,
                     dropped={lay.map["name"]: _records_dropped(lay, data)
                              for lay, data in zip(flight.layouts, datas)})
        if flight.bench is not None:
            base, probed = flight.bench
            event["baseline_ns"] = _median(base)
            event["bench_baseline_ns"], event["bench_probed_ns"] = base, probed
        self.trace.event("launch", **event)
        self.written += 1
        if self.on_written is not None:
            self.on_written(event)

    def _header(self, flight) -> tuple[bytes, list[int]]:
        """The frame header of this launch shape, encoded once."""
        req = flight.req
        key = (flight.kernel_dir, req.grid, req.block, req.shared_bytes, tuple(lay.cap for lay in flight.layouts))
        got = self._headers.get(key)
        if got is None:
            if len(self._headers) > 4096:
                self._headers.clear()
            sections = [
                tracefmt.MapSection(lay.map["name"], lay.map["level"], lay.map["record_bytes"], lay.cap, lay.units,
                                    lay.map["fields"], bytes(lay.size), cap_is_count=lay.map["cap"] == "count")
                for lay in flight.layouts
            ]
            got = self._headers[key] = tracefmt.encode_header(grid=req.grid, block=req.block,
                                                              shared_bytes=req.shared_bytes, maps=sections)
        return got

    def wait_idle(self, timeout: float) -> bool:
        """Wait until everything submitted so far is written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0 or not self._idle.wait(left):
                    return not self._pending
        return True

    def stop(self, timeout: float) -> bool:
        ok = self.wait_idle(timeout)
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)
        return ok


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def _records_dropped(lay, data) -> int:
    """Records a map's units could not store (count beyond cap): the map's own lost counter."""
    if not lay.units or lay.map.get("type", "array") != "array":
        return 0
    counts = tracefmt.np.frombuffer(data, "<u4", count=lay.units)
    if int(counts.max()) <= lay.cap:
        return 0
    return int(tracefmt.np.clip(counts.astype("i8") - lay.cap, 0, None).sum())
