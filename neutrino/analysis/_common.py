"""Helpers shared by the analyses: field lookup, unit arithmetic, chunked reads.

Analyses only rely on the agreed reader API (`neutrino.trace`): a map has
`.name`, `.level`, `.cap`, `.units`, `.dtype`, `.counts` (uint32, one per unit)
and `.records` (structured, shape `(units, cap)`), both possibly memory-mapped.
Everything here works on plain numpy arrays so that analyses can be tested with
small hand-built fakes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import numpy as np

from neutrino.errors import NeutrinoError

WARP_SIZE = 32

# Valid records read per chunk; bounds the memory of an analysis over a big map.
DEFAULT_CHUNK_RECORDS = 1 << 22


class AnalysisError(NeutrinoError):
    """A trace that an analysis cannot interpret (missing field, bad shape)."""


def find_field(dtype: np.dtype, alternatives: Sequence[str], *, map_name: str = "?",
               required: bool = True) -> str | None:
    """The first of `alternatives` that is a field of `dtype`.

    The built-in tools name their fields as spec/tools.md says (`start`,
    `elapsed`, `cuid`); a user's own probe for the same map may spell them
    otherwise (a compact TOML probe names fields after registers: `lstart`,
    `elapse`, `smid`), so analyses look fields up by a list of accepted names.
    """
    names = dtype.names or ()
    for name in alternatives:
        if name in names:
            return name
    if not required:
        return None
    raise AnalysisError(
        f"map {map_name!r} has no field named {' or '.join(repr(a) for a in alternatives)} "
        f"(its fields: {', '.join(names) or 'none'})")


def threads_per_block(block: Sequence[int]) -> int:
    bx, by, bz = (int(v) for v in block)
    return max(1, bx * by * bz)


def warps_per_block(block: Sequence[int]) -> int:
    return -(-threads_per_block(block) // WARP_SIZE)


def units_per_block(level: str, block: Sequence[int]) -> int:
    """How many units of a map of `level` one block owns (see spec/kernel-json.md)."""
    if level == "thread":
        return threads_per_block(block)
    if level == "warp":
        return warps_per_block(block)
    if level == "block":
        return 1
    raise AnalysisError(f"unknown map level {level!r}")


def unit_to_warp(unit: np.ndarray, level: str, block: Sequence[int]) -> np.ndarray:
    """Global warp index (block_linear * warps_per_block + warp in block) of each unit."""
    unit = np.asarray(unit, dtype=np.int64)
    if level == "warp":
        return unit
    if level == "thread":
        tpb = threads_per_block(block)
        return (unit // tpb) * warps_per_block(block) + (unit % tpb) // WARP_SIZE
    raise AnalysisError(f"a {level}-level map has no per-warp units")


def iter_valid(md, max_records: int = DEFAULT_CHUNK_RECORDS,
               align: int = 1) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield `(records, unit)` chunks of the valid records of map `md`.

    `records` is a 1-D structured array, `unit` the int64 unit of each record.
    A unit holds `min(count, cap)` valid records. Reads at most about
    `max_records` record slots at a time, so memory-mapped maps of several GB
    are never loaded whole. Chunk boundaries fall on multiples of `align`
    units (pass the units per block to never split a block or a warp).
    """
    if hasattr(md, "iter_valid"):  # a map of neutrino.trace: reads large sections in chunks from the file
        yield from md.iter_valid(max_records, align)
        return
    cap = int(md.cap)
    counts_all = md.counts
    units = int(len(counts_all))
    if cap <= 0 or units == 0:
        return
    align = max(1, int(align))
    step = max(1, max_records // cap // align) * align
    slot = np.arange(cap, dtype=np.int64)
    for lo in range(0, units, step):
        hi = min(units, lo + step)
        counts = np.minimum(np.asarray(counts_all[lo:hi], dtype=np.int64), cap)
        if not counts.any():
            continue
        records = np.asarray(md.records[lo:hi])
        mask = slot[None, :] < counts[:, None]
        yield records[mask], np.repeat(np.arange(lo, hi, dtype=np.int64), counts)


def read_valid(md) -> tuple[np.ndarray, np.ndarray]:
    """All valid records of `md` and their units (for small maps)."""
    parts = list(iter_valid(md))
    if not parts:
        return np.zeros(0, dtype=md.dtype), np.zeros(0, dtype=np.int64)
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def record_stats(md) -> tuple[int, int]:
    """(valid records, dropped records) of a map, from its counts alone."""
    if hasattr(md, "record_stats"):  # a map of neutrino.trace: counts read in chunks
        return md.record_stats()
    counts = np.asarray(md.counts, dtype=np.int64)
    cap = int(md.cap)
    valid = int(np.minimum(counts, cap).sum())
    dropped = int(np.maximum(counts - cap, 0).sum())
    return valid, dropped


def field_is_globaltimer(probe_text: str | None, field: str) -> bool:
    """Whether the probe text loads `field` from `%globaltimer` (nanoseconds).

    Recognises `mov.u64 %FIELD, %globaltimer` (hand-written TOML) and the
    DSL's `FIELD = nl.time()`. Register renaming by the DSL compiler may hide
    the link; callers also accept a global-time field name.
    """
    if not probe_text:
        return False
    f = re.escape(field)
    patterns = (rf"mov\.[us]?\w*\s+%{f}\s*,\s*%globaltimer\b",
                rf"\b{f}\s*(?::[^=]*)?=\s*nl\.time\s*\(")
    return any(re.search(p, probe_text) for p in patterns)


def safe_name(text: str, limit: int = 60) -> str:
    """A file-name-safe rendering of a (possibly mangled, long) kernel name."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "kernel"
    return cleaned[:limit]


def fmt_num(value: float | int | None, digits: int = 3) -> str:
    """Compact human formatting for tables: 1234567 -> '1.23M'."""
    if value is None:
        return "-"
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if abs(v) < 10_000:
            return str(v)
        value = float(v)
    v = float(value)
    if v != v:  # NaN
        return "-"
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{v / factor:.{digits}g}{suffix}"
    return f"{v:.{digits}g}"
