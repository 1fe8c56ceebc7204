"""Draining results to the trace, off the launch path.

One job: take `InFlight` launches in submission order, wait for their
copy-back, append each launch's maps as one frame to its kernel's result
file, record the launch, and give the slots back to the pool. The launch path
only queues an item; the queue's length is bounded by the buffer pool's
budget, since every queued launch holds slots.

Two implementations with one interface (submit, reclaim, wait_idle, stop):

* `NativeWriter` (in a profiled process): shim/writer.c's thread does the
  waiting and writing without the interpreter and records each launch in
  result/index.bin; finished launches' slots are reclaimed on the launch path
  by reading one counter. A Python writer thread would take the GIL from the
  launching thread at every hand-over.
* `ResultWriter` (the fake driver of the tests, which has no C side): a Python
  thread that logs a `launch` event per launch.
"""

from __future__ import annotations

import collections
import ctypes as C
import queue
import threading
import time

from neutrino import maps as tracefmt


class ResultWriter:
    def __init__(self, drv, trace, pool, enqueuer):
        self.drv, self.trace, self.pool, self.enqueuer = drv, trace, pool, enqueuer
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self.written = 0
        self.write_errors = 0
        self._headers: dict = {}
        self._submitted = 0
        self._finished = 0  # launches done with, written or not: in submission order (one thread)

    def reclaim(self) -> None:
        """Nothing to do: this writer gives slots back itself."""

    def mark(self) -> int:
        """A mark for every launch submitted so far (see `passed`)."""
        with self._lock:
            return self._submitted

    def passed(self, mark: int) -> bool:
        """Whether every launch submitted before `mark` was made has finished on the GPU and been
        handled: none of them can still be running the code it launched."""
        with self._lock:
            return self._finished >= mark

    def submit(self, flight) -> None:
        with self._lock:
            self._submitted += 1
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
            self._finished += 1
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
        header, offsets = _cached_header(self._headers, flight)
        datas = [slot.host_view[: lay.size] for lay, slot in zip(flight.layouts, flight.slots)]
        index, rel, offset = self.trace.append_result(flight.kernel_dir, header, offsets, datas)
        event = dict(index=index, kernel=flight.kernel, grid=list(req.grid), block=list(req.block),
                     shared_bytes=req.shared_bytes, stream=hex(req.stream), result=rel, result_offset=offset,
                     frame=flight.frame, duration_ns=duration, kernel_launch=req.index,
                     dropped={lay.map["name"]: _records_dropped(lay, data)
                              for lay, data in zip(flight.layouts, datas)})
        self.trace.event("launch", **event)
        self.written += 1

    def wait_idle(self, timeout: float) -> bool:
        """Wait until everything submitted so far is written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0 or not self._idle.wait(left):
                    return not self._pending
        return True

    def forget_contexts(self) -> None:
        """Nothing is kept per context here (the Python writer copies on the launch's stream)."""

    def stop(self, timeout: float) -> bool:
        ok = self.wait_idle(timeout)
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)
        return ok


def _records_dropped(lay, data) -> int:
    """Records a map's units could not store (count beyond cap): the map's own lost counter; for a
    count-sized map's ring, the reservations past its last slot (its head beyond `cap`)."""
    if tracefmt.is_ring(lay.map):
        return max(tracefmt.ring_head(data) - lay.cap, 0)
    if not lay.units or lay.map.get("type", "array") != "array":
        return 0
    import numpy as np  # loaded once something is probed (neutrino/maps.py)

    counts = np.frombuffer(data, "<u4", count=lay.units)
    if int(counts.max()) <= lay.cap:
        return 0
    return int(np.clip(counts.astype("i8") - lay.cap, 0, None).sum())


MAX_MAPS = 16  # NT_MAX_MAPS of shim/writer.c


class NtJob(C.Structure):
    """`nt_job` of shim/writer.c."""

    _fields_ = [
        ("seq", C.c_uint64), ("ctx", C.c_void_p), ("ev_start", C.c_void_p), ("ev_end", C.c_void_p),
        ("stream", C.c_void_p), ("fd", C.c_int32), ("status", C.c_uint32),
        ("kernel_id", C.c_uint32), ("frame_id", C.c_uint32), ("grid", C.c_uint32 * 3), ("block", C.c_uint32 * 3),
        ("shared_bytes", C.c_uint32), ("n_maps", C.c_uint32), ("kernel_launch", C.c_uint64),
        ("header", C.c_char_p), ("header_len", C.c_uint64), ("frame_size", C.c_uint64),
        ("offsets", C.c_uint64 * MAX_MAPS), ("device", C.c_uint64 * MAX_MAPS), ("sizes", C.c_uint64 * MAX_MAPS),
        ("zero_bytes", C.c_uint64 * MAX_MAPS), ("ring", C.c_void_p), ("ring_end", C.c_uint64),
        ("region", C.c_uint64), ("region_bytes", C.c_uint64), ("fast", C.c_uint32), ("owns_header", C.c_uint32),
        ("untimed", C.c_uint32),
        ("host_frame", C.c_uint32), ("graph", C.c_uint64),  # graph replays (graphs.py)
        ("copy_header", C.c_uint32),
    ]


class NativeWriter:
    """shim/writer.c's thread writes; Python submits jobs and reclaims finished launches' slots."""

    def __init__(self, shim_path: str, trace, pool, enqueuer):
        self.trace, self.pool, self.enqueuer = trace, pool, enqueuer
        held = C.PyDLL(shim_path)  # these calls only take a mutex: they keep the GIL
        self._submit = held.neutrino_writer_submit
        self._submit.argtypes = [C.POINTER(NtJob)]
        self._submit.restype = C.c_uint64
        released = C.CDLL(shim_path)  # these wait or join: they release the GIL
        self._start = released.neutrino_writer_start
        self._start.argtypes = [C.c_int]
        self._wait = released.neutrino_writer_wait
        self._wait.argtypes = [C.c_uint64, C.c_int64]
        self._stop = released.neutrino_writer_stop
        self._forget_contexts = released.neutrino_writer_forget_contexts
        self._next_seq = held.neutrino_writer_next_seq
        self._next_seq.restype = C.c_uint64
        self._completed = C.c_uint64.in_dll(held, "neutrino_writer_completed")
        self._errors = C.c_uint64.in_dll(held, "neutrino_writer_errors")
        self._bytes = C.c_uint64.in_dll(held, "neutrino_writer_bytes")
        self._lock = threading.Lock()
        self._inflight: collections.deque = collections.deque()
        self._seq = 0
        self._started = False
        self._kernel_ids: dict[str, tuple[int, int]] = {}  # kernel dir -> (id, fd)
        self._frame_ids: dict[str, int] = {}
        self._headers: dict = {}

    @property
    def written(self) -> int:
        return self._completed.value

    def finish_queued(self, timeout_ms: int) -> bool:
        """Wait (the GIL released) until every job queued so far is written: its copies and zeroing on the
        writer's stream done. Before the program opens a capture (issue 24: stream work of ours landing inside
        a capture slows every later graph replay of the process). False if `timeout_ms` passed first."""
        if not self._started:
            return True
        last = self._next_seq() - 1
        return last == 0 or bool(self._wait(last, timeout_ms))

    @property
    def write_errors(self) -> int:
        return self._errors.value

    @property
    def result_bytes(self) -> int:
        return self._bytes.value

    def _ensure_started(self) -> None:
        if not self._started:
            if self._start(self.trace.index_fd()) != 0:
                raise RuntimeError("the native result writer did not start")
            self._started = True

    def _kernel(self, kernel_dir: str) -> tuple[int, int]:
        got = self._kernel_ids.get(kernel_dir)
        if got is None:
            fd, _ = self.trace.result_fd(kernel_dir)
            k = int(kernel_dir.rsplit("/", 1)[-1].split("_", 1)[0])
            got = self._kernel_ids[kernel_dir] = (k, fd)
        return got

    def _frame_id(self, frame: str | None) -> int:
        if frame is None:
            return 0
        fid = self._frame_ids.get(frame)
        if fid is None:
            fid = self._frame_ids[frame] = len(self._frame_ids) + 1
            self.trace.event("frame", id=fid, frame=frame)
        return fid

    def submit(self, flight) -> int:
        """Queue the launch for the C writer; its sequence number (launch index + 1)."""
        req = flight.req
        with self._lock:
            self._ensure_started()
            kernel_id, fd = self._kernel(flight.kernel_dir)
            header, offsets = _cached_header(self._headers, flight)
            job = NtJob(ctx=flight.ctx, ev_start=flight.events["start"], ev_end=flight.events["end"],
                        stream=flight.stream, fd=fd,
                        status=1 if flight.error is not None else 0, kernel_id=kernel_id,
                        frame_id=self._frame_id(flight.frame), shared_bytes=req.shared_bytes,
                        n_maps=len(flight.slots), kernel_launch=req.index, header=header, header_len=len(header),
                        frame_size=flight.frame_bytes)
            job.grid[:] = req.grid
            job.block[:] = req.block
            for i, (lay, slot) in enumerate(zip(flight.layouts, flight.slots)):
                job.offsets[i], job.device[i], job.sizes[i] = offsets[i], slot.device, lay.size
                job.zero_bytes[i] = lay.zero_bytes
            flight.keep = header  # the C side reads it until the job is written
            seq = self._submit(C.byref(job))
            if not seq:
                raise RuntimeError("the native result writer refused the job")
            self._seq = max(self._seq, seq)
            self._inflight.append((seq, flight))
        if flight.error is not None:
            self.trace.event("result_error", kernel=flight.kernel, kernel_launch=req.index, reason=flight.error)
        return seq

    def kernel_file(self, kernel_dir: str) -> tuple[int, int]:
        """(kernel id, result file descriptor) of a kernel: the graph rings' frames go there too
        (a kernel first launched inside a capture has had no job yet: the writer starts here)."""
        with self._lock:
            self._ensure_started()
            return self._kernel(kernel_dir)

    def frame_id(self, frame: str | None) -> int:
        with self._lock:
            return self._frame_id(frame)

    def plan_inputs(self, flight) -> tuple[int, int, bytes]:
        """(kernel id, result file descriptor, frame header) of a launch, for a fast-path plan."""
        with self._lock:
            kernel_id, fd = self._kernel(flight.kernel_dir)
            header, _ = _cached_header(self._headers, flight)
        return kernel_id, fd, header

    def reclaim(self) -> None:
        """Give finished launches' slots and events back (a counter read; called on the launch path)."""
        done = self._completed.value
        inflight = self._inflight
        if not inflight or inflight[0][0] > done:
            return
        with self._lock:
            while inflight and inflight[0][0] <= done:
                _, flight = inflight.popleft()
                self.pool.release(flight.slots)
                self.enqueuer.recycle(flight.ctx, flight.events)

    def mark(self) -> int:
        """A mark for every job submitted so far, by Python or by the C launch path (see `passed`)."""
        return self._next_seq() - 1

    def passed(self, mark: int) -> bool:
        """Whether every job submitted before `mark` was made is written (its end event had passed:
        its kernel has finished). Never waits."""
        return not self._started or self._completed.value >= mark

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every job submitted so far (by Python or by the C launch path) is written."""
        seq = self._next_seq() - 1
        ok = not self._started or bool(self._wait(seq, int(timeout * 1000)))
        self.reclaim()
        return ok

    def forget_contexts(self) -> None:
        """After a drain, before a context goes away: the C writer drops its per-context streams and
        pooled events (a later context may reuse the handle)."""
        self._forget_contexts()

    def stop(self, timeout: float) -> bool:
        ok = self.wait_idle(timeout)
        if self._started:
            self._stop()
        return ok


def _cached_header(cache: dict, flight) -> tuple[bytes, list[int]]:
    """The frame header of this launch shape, encoded once."""
    req = flight.req
    key = (flight.kernel_dir, req.grid, req.block, req.shared_bytes, tuple(lay.cap for lay in flight.layouts))
    got = cache.get(key)
    if got is None:
        if len(cache) > 4096:
            cache.clear()
        from neutrino import trace_writer  # numpy: loaded once something is probed (neutrino/maps.py)

        sections = [tracefmt.MapSection.of(lay.map, lay.units, lay.cap, bytes(lay.size)) for lay in flight.layouts]
        got = cache[key] = trace_writer.encode_header(grid=req.grid, block=req.block, shared_bytes=req.shared_bytes,
                                                  maps=sections)
    return got
