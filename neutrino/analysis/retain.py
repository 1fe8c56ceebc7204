"""What `neutrino report` keeps of a launch it does not plot: its kernel row's numbers, not its arrays.

`report.analyze` keeps the whole result of the first launches of each kernel and
tool (the ones `write_plots` draws) and, for every later launch,
`summary_only(tool, result)`: the same kind of result without the arrays that only
pictures use (dmat's time x address bins and accessed lines, block_sched's per-block
and per-warp timeline and per-SM gaps, program_progress's picture). A tool's
`kernel_numbers` gives the same numbers from either (tests/test_trace_corruption.py
checks it on every tool that has a summary here), so the report's memory grows by
a few hundred bytes per launch instead of by each launch's arrays (a megabyte per
dmat launch before: issue 30 §6; 26 KB per block_sched launch on 132 SMs before
SmCount: issue 23).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import attrs
import numpy as np

_NO_INTS = np.zeros(0, dtype=np.int64)


@attrs.frozen
class DmatNumbers:
    """What a kernel's dmat row reads of a launch's DmatHistogram, without its bins or lines:
    `accesses`, `t_span`, `len(lines)` (a range of that length) and `len(regions())`."""

    accesses: int
    t0: int
    t_span: int
    granule: int
    densified: bool
    lines: range
    region_count: int

    def regions(self) -> list[dict]:
        return [{}] * self.region_count


def _dmat(result):
    h = result.hist
    numbers = DmatNumbers(h.accesses, int(h.t0), int(h.t_span), h.granule, h.densified, range(len(h.lines)),
                          len(h.regions()))
    return attrs.evolve(result, hist=numbers)


class SmCount(Sequence):
    """What a kernel's block_sched row reads of a launch's per-SM statistics: how many SMs ran
    blocks (`len`). Its items are one SMStats with only the count of SMs meaningful (no gaps):
    a launch kept this way costs a few dozen bytes instead of one SMStats per SM (26 KB per
    launch on 132 SMs, what made `report` grow with the trace)."""

    __slots__ = ("count", "_item")

    def __init__(self, count: int, item):
        self.count, self._item = count, item

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._item] * len(range(*i.indices(self.count)))
        if not -self.count <= i < self.count:
            raise IndexError(i)
        return self._item


@functools.cache
def _empty_timeline(time_unit: str, synchronized: bool):
    """One empty block_sched timeline per clock kind, shared by every summary (a memo of constants:
    about 400 bytes per launch otherwise)."""
    from neutrino.analysis import block_sched

    return block_sched._empty_timeline(time_unit, synchronized)


def _block_sched(result):
    tl, stats = result.timeline, result.stats
    sms = SmCount(len(stats.sms), attrs.evolve(stats.sms[0], gaps=_NO_INTS)) if len(stats.sms) else ()
    return attrs.evolve(result, timeline=_empty_timeline(tl.time_unit, tl.synchronized),
                        stats=attrs.evolve(stats, sms=sms))


def _program_progress(result):
    return attrs.evolve(result, picture=np.zeros((0, 0), dtype=np.int64))


SUMMARIES = {"dmat": _dmat, "block_sched": _block_sched, "program_progress": _program_progress}


def summaries_only(report) -> None:
    """Every result `report` keeps reduced to summary_only: its rows' numbers without its pictures
    (for a caller that keeps a report after drawing it; a job's report drops a reported rank's
    results altogether: ranks.report_main)."""
    for entry in report.kernels.values():
        for name, results in entry.results.items():
            results[:] = [summary_only(name, r) for r in results]


def summary_only(tool_name: str, result):
    """`result` of tool `tool_name` with only what its kernel row needs (itself for a tool whose
    results are small already)."""
    summary = SUMMARIES.get(tool_name)
    return result if summary is None else summary(result)
