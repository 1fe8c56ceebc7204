"""Launches that run the original kernel, and what they count.

One job, at the end of a launch's way (runtime/core.py, `Runtime.on_launch`) when the probed
kernel did not run: a fallback (a failure of ours: one `fallback` event, and a permanent one
stops probing the kernel), a drop (the budgets had no room: one `dropped` event at the first
drop per kernel and reason), or `--memusage` (LaunchWay.MEMUSAGE: what the launch's maps would
take). The exit report (results/report.py) reads the counts through the runtime.
"""

from __future__ import annotations

import threading
from collections import Counter


class UnprobedLaunches:
    """The counts of launches run unprobed: fallbacks per (kernel, stage), drops per (kernel,
    reason), and per kernel what --memusage recorded."""

    def __init__(self, trace, registry, shim):
        self.trace, self.registry = trace, registry
        self.shim = shim  # .probe_remove(handle): the shim stops handing the kernel's launches to us
        self._lock = threading.Lock()
        self.fallbacks: Counter = Counter()
        self.drops: Counter = Counter()  # (kernel, reason) -> launches run unprobed for lack of budget
        self.memusage: dict[str, dict] = {}

    def fallback(self, rec, req, stage: str, reason: str, permanent: bool = False, quiet: bool = False) -> None:
        """A failure of ours before the probed kernel ran: the original runs. `permanent`: the
        kernel is not probed again; `quiet`: the same failure as an earlier launch's, already logged."""
        with self._lock:
            self.fallbacks[(rec.name, stage)] += 1
        if not quiet:
            self.trace.event("fallback", kernel=rec.name, stage=stage, reason=reason, kernel_launch=req.index,
                             permanent=permanent)
        if permanent:
            rec.failed = reason
            for h in self.registry.handles_of(rec):
                self.shim.probe_remove(h)

    def drop(self, rec, req, reason: str, detail: str) -> None:
        """A launch the budgets have no room for: it runs unprobed, and is counted
        (one `dropped` event at the first drop per kernel and reason; totals at exit)."""
        with self._lock:
            self.drops[(rec.name, reason)] += 1
            first = self.drops[(rec.name, reason)] == 1
        if first:
            self.trace.event("dropped", kernel=rec.name, reason=reason, detail=detail, kernel_launch=req.index,
                             first=True)

    def record_memusage(self, pk, req, shape) -> None:
        """LaunchWay.MEMUSAGE (--memusage): what the maps of a launch of this `shape` would take
        (count-sized maps: unknown before counting, None)."""
        maps = {lay.map["name"]: (lay.size if lay.map["cap"] != "count" else None) for lay in shape.layouts}
        total = sum(v for v in maps.values() if v)
        self.trace.event("memusage", kernel=pk.name, grid=list(req.grid), block=list(req.block), bytes=total, maps=maps)
        with self._lock:
            cur = self.memusage.setdefault(pk.name, {"launches": 0, "max_bytes": 0, "total_bytes": 0,
                                                      "count_sized": any(v is None for v in maps.values())})
            cur["launches"] += 1
            cur["max_bytes"] = max(cur["max_bytes"], total)
            cur["total_bytes"] += total
