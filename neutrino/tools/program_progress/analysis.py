"""program_progress: how far warps get over time.

Input: per thread, samples taken at branches: the SM clock and either a
progress counter (`branch`: branches executed so far, monotone) or a site id
(`pc`/`site`), in a map with `cap: "count"` (spec/tools.md). The threads of a
warp that execute a branch together read the same clock, so records are first
reduced to warp samples: distinct `(warp, clock, value)`.

A warp's progress curve is its progress against the time since its own first
sample (a warp never leaves its SM, so this needs no cross-SM clock
alignment). Progress is the counter's value when the map has one, else the
number of samples passed. The picture stacks all curves as a density:
x = time since the warp's first sample, y = progress.
"""

from __future__ import annotations

import attrs
import numpy as np

from neutrino.analysis import _common as C

MAP_NAMES = ("program_progress",)
HAS_PLOTS = True
CLOCK_FIELDS = ("clock", "clk", "time")
COUNTER_FIELDS = ("branch", "branches", "progress")  # monotone progress counters
PC_FIELDS = ("pc", "site")  # site ids: progress = samples passed


def warp_samples(clock, value, warp) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (warp, clock, value) samples sorted by warp, clock, value (pure)."""
    warp = np.asarray(warp, dtype=np.int64)
    clock = np.asarray(clock).astype(np.int64)
    value = np.asarray(value).astype(np.int64)
    order = np.lexsort((value, clock, warp))  # faster than np.unique on a structured array
    warp, clock, value = warp[order], clock[order], value[order]
    keep = np.r_[True, (warp[1:] != warp[:-1]) | (clock[1:] != clock[:-1]) | (value[1:] != value[:-1])]
    return warp[keep], clock[keep], value[keep]


def progress_points(warp: np.ndarray, clock: np.ndarray,
                    counter: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Points of every warp's progress curve, from samples sorted by (warp, clock).

    x = clock - the warp's first clock; y = `counter` when given (a monotone
    progress counter), else the samples the warp has passed (1, 2, ...).
    """
    if len(warp) == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    first = np.flatnonzero(np.r_[True, warp[1:] != warp[:-1]])
    lengths = np.diff(np.r_[first, len(warp)])
    starts = np.repeat(first, lengths)
    y = np.asarray(counter, dtype=np.int64) if counter is not None else np.arange(len(warp)) - starts + 1
    return clock - clock[starts], y


@attrs.frozen(eq=False)
class WarpProgress:
    warp: np.ndarray  # global warp index
    samples: np.ndarray  # samples per warp
    span: np.ndarray  # last - first sample clock, per warp
    progress: np.ndarray  # the last progress reached: counter's maximum, or samples
    values: np.ndarray  # distinct counter values / site ids per warp

    @classmethod
    def of(cls, warp: np.ndarray, clock: np.ndarray, value: np.ndarray,
           counter: bool = False) -> "WarpProgress":
        """From samples sorted by (warp, clock), as `warp_samples` returns them."""
        if len(warp) == 0:
            z = np.zeros(0, dtype=np.int64)
            return cls(z, z, z, z, z)
        first = np.flatnonzero(np.r_[True, warp[1:] != warp[:-1]])
        lengths = np.diff(np.r_[first, len(warp)])
        last = first + lengths - 1
        o = np.lexsort((value, warp))
        w, v = warp[o], value[o]
        new_pair = np.r_[True, (w[1:] != w[:-1]) | (v[1:] != v[:-1])]
        distinct = np.add.reduceat(new_pair.astype(np.int64), np.flatnonzero(np.r_[True, w[1:] != w[:-1]]))
        progress = np.maximum.reduceat(value, first) if counter else lengths
        return cls(warp=warp[first], samples=lengths, span=clock[last] - clock[first],
                   progress=progress, values=distinct)

    @classmethod
    def concat(cls, parts: list["WarpProgress"]) -> "WarpProgress":
        if not parts:
            return cls.of(*(np.zeros(0, dtype=np.int64),) * 3)
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("warp", "samples", "span", "progress", "values")))

    def __len__(self) -> int:
        return len(self.warp)

    @property
    def straggler_ratio(self) -> float:
        """Longest warp span / median warp span (1.0 = all warps equally long)."""
        if len(self) == 0:
            return float("nan")
        median = float(np.median(self.span))
        return float(self.span.max()) / median if median > 0 else float("nan")


@attrs.frozen(eq=False)
class LaunchResult:
    index: int
    kernel: str
    warps: WarpProgress
    counter: str | None  # the progress counter field, or None (progress = samples)
    picture: np.ndarray  # [time bin, progress bin] density of all curves


def progress_picture(points, max_x: int, max_y: int, x_bins: int = 512, y_bins: int = 256) -> np.ndarray:
    """Density of curve points `(x, y)` (an iterable of array pairs) over
    `[0, max_x] x [0, max_y]`: array `[x bin, y bin]` (pure)."""
    nx = max(1, min(x_bins, max_x + 1))
    ny = max(1, min(y_bins, max_y + 1))
    counts = np.zeros(nx * ny, dtype=np.int64)
    for x, y in points:
        xb = np.minimum((x.astype(np.float64) * (nx / (max_x + 1))).astype(np.int64), nx - 1)
        yb = np.clip((y.astype(np.float64) * (ny / (max_y + 1))).astype(np.int64), 0, ny - 1)
        counts += np.bincount(xb * ny + yb, minlength=nx * ny)
    return counts.reshape(nx, ny)


def analyze_launch(launch, md, probe_text: str | None = None) -> LaunchResult:
    clock_f = C.find_field(md.dtype, CLOCK_FIELDS, map_name=md.name)
    counter_f = C.find_field(md.dtype, COUNTER_FIELDS, map_name=md.name, required=False)
    value_f = counter_f or C.find_field(md.dtype, COUNTER_FIELDS + PC_FIELDS, map_name=md.name)
    align = C.units_per_block(md.level, launch.block)  # never split a warp between chunks

    def chunks():
        for records, unit in C.iter_valid(md, align=align):
            yield warp_samples(records[clock_f], records[value_f], C.unit_to_warp(unit, md.level, launch.block))

    counter = counter_f is not None
    warps = WarpProgress.concat([WarpProgress.of(*s, counter=counter) for s in chunks()])
    if len(warps) == 0:
        return LaunchResult(int(launch.index), launch.kernel, warps, counter_f, np.zeros((0, 0), dtype=np.int64))
    max_x, max_y = int(warps.span.max()), int(warps.progress.max())
    points = (progress_points(w, c, v if counter else None) for w, c, v in chunks())
    picture = progress_picture(points, max_x, max_y)
    return LaunchResult(int(launch.index), launch.kernel, warps, counter_f, picture)


def kernel_numbers(results: list[LaunchResult]) -> dict[str, float | int | None]:
    """The report row's quantities as numbers, for `report --format csv|json`."""
    warps = WarpProgress.concat([r.warps for r in results])
    if len(warps) == 0:
        return {"warps": 0}
    return {"warps": len(warps), "samples": int(warps.samples.sum()),
            "samples_per_warp_min": int(warps.samples.min()), "samples_per_warp_max": int(warps.samples.max()),
            "progress_min": int(warps.progress.min()), "progress_max": int(warps.progress.max()),
            "median_span": float(np.median(warps.span)), "max_span": int(warps.span.max()),
            "straggler": warps.straggler_ratio}


def kernel_summary(results: list[LaunchResult]) -> dict[str, str]:
    """The report row: kernel_numbers, for reading."""
    n = kernel_numbers(results)
    if not n["warps"]:
        return {"warps": "0"}
    return {
        "warps": C.fmt_num(n["warps"]),
        "samples": C.fmt_num(n["samples"]),
        "samples/warp": f"{C.fmt_num(n['samples_per_warp_min'])}..{C.fmt_num(n['samples_per_warp_max'])}",
        "progress": f"{C.fmt_num(n['progress_min'])}..{C.fmt_num(n['progress_max'])}",
        "median span (cycles)": C.fmt_num(n["median_span"]),
        "max span (cycles)": C.fmt_num(n["max_span"]),
        "straggler": C.fmt_num(n["straggler"]),
    }


def figure(r: LaunchResult):
    """Density of all warps' progress curves: x = cycles since the warp's first sample, y = progress."""
    from neutrino.analysis.plot import NoPlot, density_figure

    if r.picture.size == 0 or not r.picture.any():
        raise NoPlot("no warp sample recorded")
    return density_figure(r.picture, clabel="warp samples per cell (log scale)",
                          title=f"warp progress: launch {r.index} {r.kernel[:60]}",
                          xlabel="cycles since the warp's first sample (its SM's clock)",
                          ylabel=(f"progress ({r.counter}: branches executed)" if r.counter in ("branch", "branches")
                                  else f"progress ({r.counter})" if r.counter else "samples passed"),
                          extent=(0, int(r.warps.span.max()) + 1, 0, int(r.warps.progress.max()) + 1))


def figures(r: LaunchResult) -> list[tuple[str, object]]:
    return [("program_progress", figure(r))]
