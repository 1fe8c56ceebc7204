"""Pooling map buffers per context, within a budget.

One job: hand a launch the buffers its maps need, within a budget, without a
driver allocation in the steady state. A `Slot` is one map buffer: device
memory of a power-of-two size class (and, for the Python writer, pinned host
memory of the same size to copy into). Slots go back to the pool when the
writer has drained them, and are reused by the next launch of that size. The pool never holds more than `budget` bytes of device
memory (and as much pinned host memory); when a launch's buffers do not fit,
`acquire` raises PoolFull (the launch runs unprobed and is counted as dropped);
`acquire_reclaiming` first has the writer give finished slots back and tries
again (with --when-full=wait, until the writer has given enough back or a
deadline passes).

Like the BPF ring buffer: a producer that finds no room does not block the
traced code; the loss is counted.
"""

from __future__ import annotations

import threading
import time

import attrs

from neutrino.runtime.driver import DriverError

MIN_CLASS = 4096


def size_class(size: int) -> int:
    return max(MIN_CLASS, 1 << (max(size, 1) - 1).bit_length())


@attrs.define(eq=False)
class Slot:
    ctx: int
    size: int  # the size class: bytes of device (and, with host staging, of pinned host) memory
    device: int
    host_addr: int = 0
    host_view: memoryview | None = None
    fresh: bool = True  # never used by a launch: zero all of it first


class PoolFull(Exception):
    """The launch's buffers do not fit in the budget now."""

    def __init__(self, reason: str, never: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.never = never  # the launch can never fit: waiting is pointless


class BufferPool:
    def __init__(self, drv, budget: int, *, host: bool = True):
        """`host`: each slot also gets pinned host memory (the Python writer copies into it);
        the native writer copies back itself and needs none."""
        self.drv = drv
        self.host = host
        self.budget = budget
        self._free: dict[tuple[int, int], list[Slot]] = {}
        self._lock = threading.Lock()
        self.held = 0  # bytes of device memory allocated (in use or free)
        self.in_use = 0
        self.peak = 0
        self.allocations = 0

    def acquire(self, ctx: int, classes) -> list[Slot]:
        """Slots of the given size classes (`size_class`) for one launch's maps, in order.
        Raises PoolFull (never waits) or DriverError."""
        if len(classes) == 1:  # the common case: one map, a slot of its class is free
            with self._lock:
                lst = self._free.get((ctx, classes[0]))
                if lst:
                    slot = lst.pop()
                    self.in_use += slot.size
                    if self.in_use > self.peak:
                        self.peak = self.in_use
                    return [slot]
        need = sum(classes)
        if need > self.budget:
            raise PoolFull(f"the launch needs {need} bytes of buffers, more than the budget of {self.budget}", never=True)
        with self._lock:
            missing = self._missing(ctx, classes)
            if self.held + missing > self.budget and not self._evict(self.held + missing - self.budget):
                raise PoolFull(f"buffer budget of {self.budget} bytes in use by launches not yet drained")
            slots = [self._take(ctx, c) for c in classes]
            self.in_use += need
            self.peak = max(self.peak, self.in_use)
            return slots

    def acquire_reclaiming(self, ctx: int, classes, writer, wait_seconds: float = 0.0) -> list[Slot]:
        """`acquire`; when the pool is full, the writer gives back what it finished (`reclaim`) and
        the pool tries once more, or until `wait_seconds` have passed (--when-full=wait), waiting on
        the writer meanwhile. Raises PoolFull when the slots never came."""
        deadline = None
        while True:
            try:
                return self.acquire(ctx, classes)
            except PoolFull as e:
                if deadline is None:  # the first refusal: once more after reclaiming, or until the deadline
                    writer.reclaim()
                    deadline = time.monotonic() + wait_seconds if wait_seconds and not e.never else 0.0
                elif time.monotonic() >= deadline:
                    raise
                else:
                    writer.wait_idle(0.01)

    def _missing(self, ctx: int, classes: list[int]) -> int:
        """Bytes that must be newly allocated for these classes."""
        avail: dict[int, int] = {}
        missing = 0
        for c in classes:
            have = len(self._free.get((ctx, c), ()))
            used = avail.get(c, 0)
            if used < have:
                avail[c] = used + 1
            else:
                missing += c
        return missing

    def _evict(self, nbytes: int) -> bool:
        """Free idle slots (largest classes first) until `nbytes` are released; False if impossible."""
        idle = sum(s.size for lst in self._free.values() for s in lst)
        if idle < nbytes:
            return False
        for key in sorted(self._free, key=lambda k: -k[1]):
            lst = self._free[key]
            while lst and nbytes > 0:
                s = lst.pop()
                nbytes -= s.size
                self._release_memory(s)
        return True

    def _take(self, ctx: int, c: int) -> Slot:
        lst = self._free.get((ctx, c))
        if lst:
            return lst.pop()
        device = self.drv.mem_alloc_sync(c)
        host_addr, view = 0, None
        if self.host:
            try:
                host_addr, view = self.drv.host_alloc(c)
            except DriverError:
                self.drv.mem_free_sync(device)
                raise
        self.held += c
        self.allocations += 1
        return Slot(ctx, c, device, host_addr, view)

    def release(self, slots: list[Slot]) -> None:
        with self._lock:
            for s in slots:
                self._free.setdefault((s.ctx, s.size), []).append(s)
                self.in_use -= s.size

    def _release_memory(self, s: Slot) -> None:
        self.held -= s.size
        try:
            self.drv.mem_free_sync(s.device)
            if s.host_addr:
                self.drv.host_free(s.host_addr)
        except DriverError:
            pass

    def close(self) -> None:
        """Free every idle slot (at exit; slots still in flight are left to the process's end)."""
        with self._lock:
            for lst in self._free.values():
                for s in lst:
                    self._release_memory(s)
            self._free.clear()


class ByteBudget:
    """A running total against a limit (the trace-size budget): reserve before, never exceed."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def reserve(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def give_back(self, n: int) -> None:
        with self._lock:
            self.used -= n
