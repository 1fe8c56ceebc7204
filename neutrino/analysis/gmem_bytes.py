"""gmem_bytes: bytes moved by global loads, stores and async copies.

Input: one record per thread with the bytes that thread moved (`bytes:u64`).
Output: the launch total (sum over threads), how the bytes spread over
threads, and the effective bandwidth `bytes / duration` when the runtime
measured the launch's duration.
"""

from __future__ import annotations

import attrs
import numpy as np

from neutrino.analysis import _common as C

MAP_NAMES = ("gmem_bytes",)
HAS_PLOTS = False
BYTES_FIELDS = ("bytes", "nbytes", "gmem_bytes", "size")


def matches(md) -> bool:
    names = md.dtype.names or ()
    return md.name in MAP_NAMES or (len(names) == 1 and names[0] in BYTES_FIELDS)


@attrs.frozen
class ByteStats:
    total: int  # bytes summed over all records
    records: int  # threads (records) counted
    active: int  # records with a non-zero byte count
    max_per_record: int

    @classmethod
    def of(cls, values: np.ndarray) -> "ByteStats":
        """Statistics of an array of per-thread byte counts (pure)."""
        values = np.asarray(values, dtype=np.uint64)
        if len(values) == 0:
            return cls(0, 0, 0, 0)
        return cls(total=int(values.sum(dtype=np.uint64)), records=len(values),
                   active=int(np.count_nonzero(values)), max_per_record=int(values.max()))

    def __add__(self, other: "ByteStats") -> "ByteStats":
        return ByteStats(self.total + other.total, self.records + other.records,
                         self.active + other.active, max(self.max_per_record, other.max_per_record))


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


def kernel_summary(results: list[LaunchResult]) -> dict[str, str]:
    total, bw = kernel_total(results)
    n = len(results)
    return {
        "bytes": str(total),  # exact: checked against what the kernel must move
        "bytes/launch": C.fmt_num(total / n if n else None),
        "active threads": C.fmt_num(sum(r.stats.active for r in results)),
        "max/thread": C.fmt_num(max((r.stats.max_per_record for r in results), default=0)),
        "GB/s": C.fmt_num(bw),
    }


def write_plots(results: list[LaunchResult], out_dir: str) -> list[str]:
    return []
