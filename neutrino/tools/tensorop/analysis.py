"""tensorop: tensor-core instructions (`mma`, `wgmma`) executed per thread.

Input, either form of the tool: the `sum` map `tensorop` (`count`, the
per-thread executions summed; `warp_count`, lane 0's executions summed, i.e.
the warp instructions; `active_warps`), or one `count:u64` per thread (the
`tensorop_thread` tool). Every thread of a warp executes a warp-wide `mma`, so
the per-thread counts of one warp are normally equal; the number of
warp-level instructions issued is the sum over warps of the largest count
among the warp's threads (lane 0's count, for these `.aligned` instructions).
"""

from __future__ import annotations

import attrs
import numpy as np

from neutrino.analysis import _common as C

MAP_NAMES = ("tensorop", "tensorop_thread")
HAS_PLOTS = False
COUNT_FIELDS = ("count", "cnt", "tensorop", "mma")


@attrs.frozen
class TensorStats:
    thread_instructions: int  # sum of per-thread counts
    warp_instructions: int  # sum over warps of the max count of its threads
    threads: int | None  # None: summed on the device, not counted
    active_threads: int | None
    active_warps: int | None

    def __add__(self, o: "TensorStats") -> "TensorStats":
        return TensorStats(*(_add(a, b) for a, b in zip(attrs.astuple(self), attrs.astuple(o))))

    @classmethod
    def of_totals(cls, totals: dict[str, int], count_field: str = "count") -> "TensorStats":
        """A sum map's counters (spec/tools.md, tensorop); `count_field`: the per-thread counter's name."""
        return cls(thread_instructions=totals[count_field], warp_instructions=totals["warp_count"], threads=None,
                   active_threads=None, active_warps=totals.get("active_warps"))


def _add(a: int | None, b: int | None) -> int | None:
    """None (not measured) is neutral, so launches of both forms add up."""
    if a is None:
        return b
    return a if b is None else a + b


def tensor_stats(count: np.ndarray, warp: np.ndarray) -> TensorStats:
    """Statistics of per-thread counts and the global warp of each thread (pure)."""
    count = np.asarray(count, dtype=np.uint64)
    warp = np.asarray(warp, dtype=np.int64)
    if len(count) == 0:
        return TensorStats(0, 0, 0, 0, 0)
    _, inverse = np.unique(warp, return_inverse=True)
    per_warp = np.zeros(inverse.max() + 1, dtype=np.uint64)
    np.maximum.at(per_warp, inverse, count)
    return TensorStats(thread_instructions=int(count.sum(dtype=np.uint64)),
                       warp_instructions=int(per_warp.sum(dtype=np.uint64)), threads=len(count),
                       active_threads=int(np.count_nonzero(count)),
                       active_warps=int(np.count_nonzero(per_warp)))


@attrs.frozen
class LaunchResult:
    index: int
    kernel: str
    duration_ns: float | None
    stats: TensorStats


def analyze_launch(launch, md, probe_text: str | None = None) -> LaunchResult:
    if getattr(md, "type", "array") == "sum":
        C.find_field(md.dtype, ("warp_count",), map_name=md.name)
        count = C.find_field(md.dtype, COUNT_FIELDS, map_name=md.name)
        return LaunchResult(index=int(launch.index), kernel=launch.kernel, duration_ns=launch.duration_ns,
                            stats=TensorStats.of_totals(md.totals(), count))
    field = C.find_field(md.dtype, COUNT_FIELDS, map_name=md.name)
    stats = TensorStats(0, 0, 0, 0, 0)
    # Chunks of whole blocks, so that no warp is split between two chunks.
    for records, unit in C.iter_valid(md, align=C.units_per_block(md.level, launch.block)):
        stats = stats + tensor_stats(records[field], C.unit_to_warp(unit, md.level, launch.block))
    return LaunchResult(index=int(launch.index), kernel=launch.kernel,
                        duration_ns=launch.duration_ns, stats=stats)


def kernel_numbers(results: list[LaunchResult]) -> dict[str, float | int | None]:
    """The report row's quantities as numbers, for `report --format csv|json`."""
    total = TensorStats(0, 0, 0, 0, 0)
    for r in results:
        total = total + r.stats
    timed = [r for r in results if r.duration_ns]
    rate = (sum(r.stats.warp_instructions for r in timed) / sum(r.duration_ns for r in timed) * 1e3
            if timed else None)
    return {"mma_threads": total.thread_instructions, "mma_warps": total.warp_instructions,
            "active_warps": total.active_warps, "warp_mma_per_us": rate}


def kernel_summary(results: list[LaunchResult]) -> dict[str, str]:
    """The report row: kernel_numbers, for reading."""
    n = kernel_numbers(results)
    return {
        "mma (threads)": C.fmt_num(n["mma_threads"]),
        "mma (warps)": C.fmt_num(n["mma_warps"]),
        "active warps": C.fmt_num(n["active_warps"]),
        "warp mma/us": C.fmt_num(n["warp_mma_per_us"]),
    }

