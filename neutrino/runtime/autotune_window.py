"""A window in which probed kernels run unprobed: what frameworks.CompileWindow (XLA compiling) and
autotune.py (Triton's and TorchInductor's autotuners) wrap around a framework's benchmarking.

An autotuner times candidate kernels and keeps the fastest. Probed, a candidate runs slower and
another can win; a winner that reduces in another order (split-K, another BLOCK_K) changes the
program's results in the last bits (issue 22). The candidates' launches are not the program's
computation: inside a window the shim runs the original kernel and counts the launch
(shim/preload.c, neutrino_suspend_probing).

Stdlib only: loaded at interpreter start (frameworks.py imports it).
"""

from __future__ import annotations

import functools
import threading
import time

WRAPPED = "__neutrino_compile_window__"  # set on every function we wrapped: install twice, wrap once


class SuspendWindow:
    """Opens the shim's window around wrapped functions and writes one event per window.

    `suspend(open: bool)` opens or closes the shim's window (a count: windows on several threads
    overlap); `suspended()` is the shim's count of launches left unprobed so far; `event(kind,
    **fields)` writes to the event log. On each thread only the outermost wrapped call opens a
    window (a compile function calling another, an autotuner's tuning calling its benchmark).

    A *tally* (wrap(..., tally=True)) opens no window: windows opened inside it add up into one
    event at its end (one per tuning, where the tuning also launches the chosen kernel, which
    must be probed: Triton's Autotuner.run). A tally that saw no window writes nothing."""

    def __init__(self, suspend, suspended, event=None):
        self.suspend = suspend
        self.suspended = suspended
        self.event = event
        self._thread = threading.local()  # .depth: windows open on this thread; .tallies: a stack

    def wrap(self, function, kind: str, name: str, before=None, after=None, tally: bool = False):
        """`function` wrapped. `before(args, kwargs)` and `after(args, kwargs, result)` give the
        event's further fields (a dict; their errors are ignored); `result` is None when it raised."""
        run = self._tallied if tally else self._windowed

        @functools.wraps(function)
        def wrapped(*args, **kwargs):
            return run(function, args, kwargs, kind, name, before, after)

        setattr(wrapped, WRAPPED, True)
        return wrapped

    # ------------------------------------------------------------ the two kinds of wrapper

    def _windowed(self, function, args, kwargs, kind, name, before, after):
        thread = self._thread
        if getattr(thread, "depth", 0):
            return function(*args, **kwargs)
        fields = _fields(before, args, kwargs)
        opened = self._open()
        result = None
        try:
            result = function(*args, **kwargs)
            return result
        finally:
            measured = self._close(opened)
            if measured is not None:
                fields.update(measured)
                fields.update(_fields(after, args, kwargs, result))
                self._report(kind, name, fields)

    def _tallied(self, function, args, kwargs, kind, name, before, after):
        thread = self._thread
        if getattr(thread, "depth", 0):  # inside another window: nothing of it is probed anyway
            return function(*args, **kwargs)
        tallies = thread.__dict__.setdefault("tallies", [])
        tally = {"windows": 0, "launches": 0, "seconds": 0.0, "inner": []}
        tallies.append(tally)
        result = None
        try:
            result = function(*args, **kwargs)
            return result
        finally:
            tallies.pop()
            if tally["windows"]:
                fields = _fields(before, args, kwargs)
                fields.update(windows=tally["windows"], launches=tally["launches"],
                              seconds=round(tally["seconds"], 6), timed=tally["inner"])
                fields.update(_fields(after, args, kwargs, result))
                self._write(kind, name, fields)

    # ------------------------------------------------------------ the shim and the event log

    def _open(self):
        """(start time, launches left unprobed so far), or None when the shim could not be told."""
        self._thread.depth = 1
        try:
            before = self.suspended()
            self.suspend(True)
            return time.perf_counter(), before
        except Exception:  # noqa: BLE001 - never fail the program's compile or tuning
            return None

    def _close(self, opened) -> dict | None:
        """The window's launches left unprobed and seconds; None when it was never opened."""
        self._thread.depth = 0
        if opened is None:
            return None
        try:
            self.suspend(False)
            started, before = opened
            return {"launches": int(self.suspended() - before), "seconds": round(time.perf_counter() - started, 6)}
        except Exception:  # noqa: BLE001
            return None

    def _report(self, kind: str, name: str, fields: dict) -> None:
        """Into the innermost tally open on this thread, else straight to the event log."""
        tallies = getattr(self._thread, "tallies", None)
        if not tallies:
            self._write(kind, name, fields)
            return
        tally = tallies[-1]
        tally["windows"] += 1
        tally["launches"] += fields.pop("launches")
        tally["seconds"] += fields.pop("seconds")
        if fields:
            tally["inner"].append(fields)

    def _write(self, kind: str, name: str, fields: dict) -> None:
        if self.event is None:
            return
        try:
            self.event(kind, function=name, **fields)
        except Exception:  # noqa: BLE001 - the event log never fails the program
            pass


def _fields(describe, *args) -> dict:
    if describe is None:
        return {}
    try:
        return dict(describe(*args) or {})
    except Exception:  # noqa: BLE001 - a framework's object without the attribute we read
        return {}
