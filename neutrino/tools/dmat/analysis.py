"""dmat: densified memory access timeline (time x address density picture).

Input: per thread, the clock and address of every global access (a map with
`cap: "count"`). Output: a 2-D histogram `counts[time bin, address bin]`,
drawn as a PNG with time to the right and addresses upwards.

"Densified": the address axis lists only the `granule`-byte lines that were
accessed at least once, in address order, so buffers that lie gigabytes apart
sit next to each other instead of being squeezed into one pixel row each.
`DmatHistogram.regions()` says which address ranges the rows show.

The time field is `%clock64` of the SM that ran the thread (the built-in
tool), or `%globaltimer` nanoseconds (a field named `gtime`/`globaltimer`/
`gstart`, or one the probe loads with `FIELD = nl.time()` / `mov.u64 %FIELD,
%globaltimer`). With `time_base="raw"` (default) the time axis is measured
from the launch's first recorded access: in ns on the GPU's one clock for
%globaltimer (exact across SMs), in cycles of unaligned SM counters for
%clock64 (approximate across SMs, see spec/analysis.md "Clocks");
`time_base="block"` measures each access from its block's first access,
which is exact for both but folds all blocks onto one time origin.
"""

from __future__ import annotations

import json
import os

import attrs
import numpy as np

from neutrino.analysis import _common as C

MAP_NAMES = ("dmat",)
HAS_PLOTS = True
CLOCK_FIELDS = ("clock", "clk", "time", "lclock", "start", "gtime", "globaltimer", "gstart")
# Time fields that hold %globaltimer nanoseconds (one clock for the GPU) by their name.
GLOBAL_TIME_FIELDS = ("gtime", "globaltimer", "gstart")
ADDR_FIELDS = ("addr", "address")


@attrs.frozen(eq=False)
class DmatHistogram:
    counts: np.ndarray  # int64 [time_bins, addr_bins]
    t0: int  # first time covered
    t_span: int  # time covered: [t0, t0 + t_span)
    granule: int  # bytes per address line
    densified: bool
    lines: np.ndarray  # densified: the sorted distinct line numbers (addr // granule)
    addr_lo: int  # not densified: first address covered
    addr_span: int  # not densified: addresses covered: [addr_lo, addr_lo + addr_span)
    tick: int = 1  # the time field's step: gcd of the differences of its values (%globaltimer: 32 ns on an H200)
    bin_width: int = 0  # time per time bin: a whole number of ticks (0: t_span / time bins, before ticks)

    @property
    def accesses(self) -> int:
        return int(self.counts.sum())

    @property
    def time_edges(self) -> np.ndarray:
        width = self.bin_width or self.t_span / max(1, self.counts.shape[0])
        return self.t0 + np.arange(self.counts.shape[0] + 1) * width

    @property
    def time_extent(self) -> int:
        """Time the bins cover from t0 (>= t_span: the last bin is whole)."""
        return self.bin_width * self.counts.shape[0] if self.bin_width else self.t_span

    def regions(self) -> list[dict]:
        """Contiguous accessed address ranges and the address bins that show them."""
        if not self.densified:
            if self.addr_span == 0:
                return []
            return [{"addr_lo": self.addr_lo, "addr_hi": self.addr_lo + self.addr_span,
                     "bin_lo": 0, "bin_hi": self.counts.shape[1]}]
        n, bins = len(self.lines), self.counts.shape[1]
        if n == 0:
            return []
        breaks = np.flatnonzero(np.diff(self.lines) > 1) + 1
        starts = np.r_[0, breaks]
        stops = np.r_[breaks, n]
        return [{"addr_lo": int(self.lines[a]) * self.granule,
                 "addr_hi": (int(self.lines[b - 1]) + 1) * self.granule,
                 "bin_lo": a * bins // n, "bin_hi": -(-b * bins // n)}
                for a, b in zip(starts.tolist(), stops.tolist())]


class DmatBuilder:
    """Two-pass histogram over chunks: `scan` every chunk, then `add` every chunk.

    The scan pass finds the time range and the accessed lines; the add pass
    bins. Chunking keeps memory bounded on multi-GB traces.
    """

    def __init__(self, *, time_bins: int = 512, addr_bins: int = 256, granule: int = 128,
                 densify: bool = True):
        if time_bins < 1 or addr_bins < 1 or granule < 1:
            raise ValueError("time_bins, addr_bins and granule must be positive")
        self.time_bins, self.addr_bins, self.granule, self.densify = time_bins, addr_bins, granule, densify
        self._tmin = self._amin = None
        self._tmax = self._amax = None
        self._ref, self._tick = None, 0  # a time seen, and the gcd of every time's difference to it
        self._lines = np.zeros(0, dtype=np.uint64)
        self._counts = None

    def scan(self, clock: np.ndarray, addr: np.ndarray) -> None:
        clock = np.asarray(clock, dtype=np.int64)
        addr = np.asarray(addr, dtype=np.uint64)
        if len(clock) == 0:
            return
        lo, hi = int(clock.min()), int(clock.max())
        self._scan_tick(clock)
        self._tmin = lo if self._tmin is None else min(self._tmin, lo)
        self._tmax = hi if self._tmax is None else max(self._tmax, hi)
        alo, ahi = int(addr.min()), int(addr.max())
        self._amin = alo if self._amin is None else min(self._amin, alo)
        self._amax = ahi if self._amax is None else max(self._amax, ahi)
        if self.densify:
            self._lines = _sorted_unique(np.concatenate([self._lines, addr // np.uint64(self.granule)]))

    def _scan_tick(self, clock: np.ndarray) -> None:
        """Fold a chunk into the tick: a remainder test against the tick so far (cheap), the gcd
        only over a chunk that breaks it. A timer that counts in steps (%globaltimer: 32 ns) then
        gets bins of whole steps: a bin of 1.4 steps would hold one or two of them, in stripes."""
        if self._ref is None:
            self._ref = int(clock[0])
        if self._tick == 1:
            return
        diff = clock - self._ref
        if self._tick and not (diff % self._tick).any():
            return
        self._tick = int(np.gcd.reduce(np.abs(diff), initial=self._tick))

    def _ticks_per_bin(self) -> int:
        tick = max(1, self._tick)
        ticks = (self._tmax - self._tmin) // tick + 1
        return -(-ticks // self.time_bins)

    def _shape(self) -> tuple[int, int]:
        if self._tmin is None:
            return 0, 0
        ticks = (self._tmax - self._tmin) // max(1, self._tick) + 1
        nt = -(-ticks // self._ticks_per_bin())
        if self.densify:
            na = min(self.addr_bins, len(self._lines))
        else:
            na = min(self.addr_bins, -(-(self._amax - self._amin + 1) // self.granule))
        return nt, na

    def add(self, clock: np.ndarray, addr: np.ndarray) -> None:
        nt, na = self._shape()
        if self._counts is None:
            self._counts = np.zeros(nt * na, dtype=np.int64)
        if len(clock) == 0:
            return
        t = np.asarray(clock, dtype=np.int64) - self._tmin
        tb = np.minimum(t // (max(1, self._tick) * self._ticks_per_bin()), nt - 1)
        addr = np.asarray(addr, dtype=np.uint64)
        if self.densify:
            # line of dense index d goes to bin d * na // n; bin b starts at dense index
            # ceil(b * n / na). Searching the na bin starts (small, cached) instead of all
            # the lines keeps this fast on millions of distinct lines.
            n = len(self._lines)
            first_line = self._lines[-(-np.arange(na, dtype=np.int64) * n // na)]
            ab = np.searchsorted(first_line, addr // np.uint64(self.granule), side="right").astype(np.int64) - 1
        else:
            a_span = self._amax - self._amin + 1
            rel = (addr - np.uint64(self._amin)).astype(np.float64)
            ab = np.minimum((rel * (na / a_span)).astype(np.int64), na - 1)
        self._counts += np.bincount(tb * na + ab, minlength=nt * na)

    def result(self) -> DmatHistogram:
        nt, na = self._shape()
        counts = (np.zeros(nt * na, dtype=np.int64) if self._counts is None else self._counts).reshape(nt, na)
        empty = self._tmin is None
        return DmatHistogram(
            counts=counts, t0=0 if empty else self._tmin,
            t_span=0 if empty else self._tmax - self._tmin + 1, granule=self.granule,
            densified=self.densify, lines=self._lines,
            addr_lo=0 if empty else self._amin, addr_span=0 if empty else self._amax - self._amin + 1,
            tick=max(1, self._tick), bin_width=0 if empty else max(1, self._tick) * self._ticks_per_bin())


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique by sorting (numpy's hash-based unique is slow on many distinct values)."""
    s = np.sort(values)
    return s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s


def dmat_histogram(clock, addr, *, time_bins: int = 512, addr_bins: int = 256, granule: int = 128,
                   densify: bool = True) -> DmatHistogram:
    """Histogram of accesses over (time bins x address bins); pure.

    Time bins split `[min clock, max clock]` into bins of a whole number of the
    time field's ticks (the gcd of its differences), at most `time_bins` of them;
    address bins split the accessed lines (densified) or the
    address range evenly. `counts[i, j]` = accesses in time bin i, address bin j.
    """
    builder = DmatBuilder(time_bins=time_bins, addr_bins=addr_bins, granule=granule, densify=densify)
    builder.scan(clock, addr)
    builder.add(clock, addr)
    return builder.result()


@attrs.frozen(eq=False)
class LaunchResult:
    index: int
    kernel: str
    time_base: str
    hist: DmatHistogram  # t0 and t_span in time_unit
    time_unit: str = "cycles"  # "ns" when the time field is %globaltimer

    @property
    def synchronized(self) -> bool:
        """Whether times of different SMs are on one clock (%globaltimer)."""
        return self.time_unit == "ns"


def _relative_to_block(clock: np.ndarray, block: np.ndarray, block_min: np.ndarray) -> np.ndarray:
    return clock.astype(np.int64) - block_min[block]


def analyze_launch(launch, md, probe_text: str | None = None, *, time_base: str = "raw",
                   time_bins: int = 512, addr_bins: int = 256, granule: int = 128,
                   densify: bool = True) -> LaunchResult:
    if time_base not in ("raw", "block"):
        raise C.AnalysisError(f"dmat: unknown time base {time_base!r} (raw or block)")
    clock_f = C.find_field(md.dtype, CLOCK_FIELDS, map_name=md.name)
    addr_f = C.find_field(md.dtype, ADDR_FIELDS, map_name=md.name)
    time_unit = "ns" if clock_f in GLOBAL_TIME_FIELDS or C.field_is_globaltimer(probe_text, clock_f) else "cycles"
    upb = C.units_per_block(md.level, launch.block)

    block_min = None
    if time_base == "block":
        n_blocks = -(-len(md.counts) // upb)
        block_min = np.full(n_blocks, np.iinfo(np.int64).max, dtype=np.int64)
        for records, unit in C.iter_valid(md):
            np.minimum.at(block_min, unit // upb, records[clock_f].astype(np.int64))

    def chunks():
        for records, unit in C.iter_valid(md):
            clock = records[clock_f].astype(np.int64)
            if block_min is not None:
                clock = _relative_to_block(clock, unit // upb, block_min)
            yield clock, records[addr_f]

    builder = DmatBuilder(time_bins=time_bins, addr_bins=addr_bins, granule=granule, densify=densify)
    for clock, addr in chunks():
        builder.scan(clock, addr)
    for clock, addr in chunks():
        builder.add(clock, addr)
    return LaunchResult(index=int(launch.index), kernel=launch.kernel, time_base=time_base,
                        hist=builder.result(), time_unit=time_unit)


def kernel_numbers(results: list[LaunchResult]) -> dict[str, int | None]:
    """The report row's quantities as numbers, for `report --format csv|json` (a span is None when
    no launch recorded that clock)."""
    cycles = [r.hist.t_span for r in results if not r.synchronized]
    ns = [r.hist.t_span for r in results if r.synchronized]
    return {"accesses": sum(r.hist.accesses for r in results),
            "lines": max((len(r.hist.lines) for r in results), default=0),
            "regions": max((len(r.hist.regions()) for r in results), default=0),
            "clock_span": max(cycles) if cycles else None, "span_ns": max(ns) if ns else None}


def kernel_summary(results: list[LaunchResult]) -> dict[str, str]:
    """The report row: kernel_numbers, for reading."""
    n = kernel_numbers(results)
    return {"accesses": C.fmt_num(n["accesses"]), "lines": C.fmt_num(n["lines"]),
            "regions": C.fmt_num(n["regions"]), "clock span": C.fmt_num(n["clock_span"]),
            "span (ns)": C.fmt_num(n["span_ns"])}


def time_label(r: LaunchResult) -> str:
    """The time axis: its origin, its unit and its clock."""
    if r.synchronized:
        origin = "each block's first access" if r.time_base == "block" else "the launch's first access"
        return f"time since {origin} (ns, %globaltimer)"
    if r.time_base == "block":
        return "clock cycles since the first access of each block (%clock64)"
    return "clock cycles since the first access (%clock64 of each SM, not aligned across SMs)"


def describe(r: LaunchResult) -> dict:
    """What the picture shows, written next to it as JSON."""
    h = r.hist
    return {
        "kernel": r.kernel, "launch": r.index, "time_base": r.time_base, "time_unit": r.time_unit,
        "x": f"{time_label(r)}, left to right", "y": "address, bottom to top",
        "time_bins": int(h.counts.shape[0]), "addr_bins": int(h.counts.shape[1]),
        "t0": int(h.t0), "t_span": int(h.t_span), "tick": int(h.tick), "bin_width": int(h.bin_width),
        "granule": h.granule, "densified": h.densified,
        "accesses": h.accesses, "lines": int(len(h.lines)),
        "regions": [{**g, "addr_lo": hex(g["addr_lo"]), "addr_hi": hex(g["addr_hi"])} for g in h.regions()],
    }


def figure(r: LaunchResult):
    """The histogram: time to the right (from the origin time_label names, in the result's unit), address
    upwards, one tick and a grey line per address region, colour = accesses per cell on a log scale
    (white = none)."""
    from neutrino.analysis.plot import NoPlot, density_figure

    h = r.hist
    if h.accesses == 0:
        raise NoPlot("no access recorded")
    regions = h.regions()
    return density_figure(
        h.counts, title=f"DMAT: launch {r.index} {r.kernel[:60]}", xlabel=time_label(r),
        clabel="accesses per cell (log scale)",
        ylabel=f"address ({h.granule}-byte lines{', accessed lines only' if h.densified else ''})",
        extent=(0, h.time_extent, 0, h.counts.shape[1]),
        hlines=[g["bin_lo"] for g in regions[1:]][:64],
        yticks=[(g["bin_lo"], hex(g["addr_lo"])) for g in regions][:32])


def figures(r: LaunchResult) -> list[tuple[str, object]]:
    return [("dmat", figure(r))]


def write_description(r: LaunchResult, out_dir: str) -> str:
    """The JSON beside the picture: axes, bins, regions (describe)."""
    path = os.path.join(out_dir, f"{r.index:04d}_{C.safe_name(r.kernel)}_dmat.json")
    with open(path, "w") as f:
        json.dump(describe(r), f, indent=1)
    return path
