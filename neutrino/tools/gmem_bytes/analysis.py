"""gmem_bytes: bytes moved by global loads, stores and async copies.

Input, either form of the tool: the `sum` map `gmem_bytes` (the launch's
`bytes`, and `active_threads` when present), or one record per thread with
the bytes that thread moved (`bytes:u64`, the `gmem_bytes_thread` tool).
Output: the launch total, the threads that moved anything, the most one
thread moved (per-thread form only), and the effective bandwidth
`bytes / duration` when the runtime measured the launch's duration.
"""

from __future__ import annotations

import attrs
import numpy as np

from neutrino.analysis import _common as C

MAP_NAMES = ("gmem_bytes", "gmem_bytes_thread")
HAS_PLOTS = False
BYTES_FIELDS = ("bytes", "nbytes", "gmem_bytes", "size", "gmem_total")
ACTIVE_FIELDS = ("active_threads", "active")


@attrs.frozen
class ByteStats:
    total: int  # bytes summed over all records
    records: int | None  # threads (records) counted; None when summed on the device
    active: int | None  # records with a non-zero byte count; None when not counted
    max_per_record: int | None  # None when summed on the device

    @classmethod
    def of(cls, values: np.ndarray) -> "ByteStats":
        """Statistics of an array of per-thread byte counts (pure)."""
        values = np.asarray(values, dtype=np.uint64)
        if len(values) == 0:
            return cls(0, 0, 0, 0)
        return cls(total=int(values.sum(dtype=np.uint64)), records=len(values),
                   active=int(np.count_nonzero(values)), max_per_record=int(values.max()))

    @classmethod
    def of_totals(cls, totals: dict[str, int], field: str, active_field: str | None) -> "ByteStats":
        """Statistics of a sum map's counters: the total, and the active threads when counted."""
        return cls(total=totals[field], records=None, active=totals[active_field] if active_field else None,
                   max_per_record=None)

    def __add__(self, other: "ByteStats") -> "ByteStats":
        return ByteStats(self.total + other.total, _add(self.records, other.records), _add(self.active, other.active),
                         _combine(max, self.max_per_record, other.max_per_record))


def _add(a: int | None, b: int | None) -> int | None:
    return _combine(lambda x, y: x + y, a, b)


def _combine(fn, a, b):
    """fn(a, b), where None (not measured) is the neutral element: launches of both forms mix."""
    if a is None:
        return b
    return a if b is None else fn(a, b)


def bandwidth_gbs(total_bytes: int, duration_ns: float | None) -> float | None:
    """Effective bandwidth in GB/s (10^9 bytes per second) = bytes per nanosecond."""
    if not duration_ns or duration_ns <= 0:
        return None
    return total_bytes / duration_ns


@attrs.frozen
class LaunchResult:
    index: int
    kernel: str
    duration_ns: float | None
    stats: ByteStats

    @property
    def bandwidth_gbs(self) -> float | None:
        return bandwidth_gbs(self.stats.total, self.duration_ns)


def analyze_launch(launch, md, probe_text: str | None = None) -> LaunchResult:
    field = C.find_field(md.dtype, BYTES_FIELDS, map_name=md.name)
    if getattr(md, "type", "array") == "sum":
        active = C.find_field(md.dtype, ACTIVE_FIELDS, map_name=md.name, required=False)
        stats = ByteStats.of_totals(md.totals(), field, active)
        return LaunchResult(index=int(launch.index), kernel=launch.kernel, duration_ns=launch.duration_ns, stats=stats)
    stats = ByteStats(0, 0, 0, 0)
    for records, _unit in C.iter_valid(md):
        stats = stats + ByteStats.of(records[field])
    return LaunchResult(index=int(launch.index), kernel=launch.kernel,
                        duration_ns=launch.duration_ns, stats=stats)


def kernel_total(results: list[LaunchResult]) -> tuple[int, float | None]:
    """(total bytes, effective GB/s over the launches whose duration is known)."""
    total = sum(r.stats.total for r in results)
    timed = [r for r in results if r.duration_ns]
    bw = bandwidth_gbs(sum(r.stats.total for r in timed), sum(r.duration_ns for r in timed)) if timed else None
    return total, bw


def kernel_numbers(results: list[LaunchResult]) -> dict[str, float | int | None]:
    """The report row's quantities as numbers, for `report --format csv|json`."""
    total, bw = kernel_total(results)
    n = len(results)
    return {"bytes": total, "bytes_per_launch": total / n if n else None,
            "active_threads": _sum_known(r.stats.active for r in results),
            "max_per_thread": _max_known(r.stats.max_per_record for r in results), "gb_per_s": bw}


def kernel_summary(results: list[LaunchResult]) -> dict[str, str]:
    """The report row: kernel_numbers, for reading."""
    n = kernel_numbers(results)
    return {
        "bytes": str(n["bytes"]),  # exact: checked against what the kernel must move
        "bytes/launch": C.fmt_num(n["bytes_per_launch"]),
        "active threads": C.fmt_num(n["active_threads"]),
        "max/thread": C.fmt_num(n["max_per_thread"]),
        "GB/s": C.fmt_num(n["gb_per_s"]),
    }


def _sum_known(values) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _max_known(values) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None

