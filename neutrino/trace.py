"""Trace directories: the result-file format and a numpy-only reader.

Normative description: ``spec/trace-format.md``. In short, a run leaves::

    <tracedir>/<start-time>_<pid>/
        event.log            one JSON object per line
        probe.toml           the probe file used
        kernel/<k>_<hash>/   original.ptx, probed.ptx, kernel.json
        result/<k>_<hash>.ntr  per kernel: one frame per probed launch, appended
        result/index.bin     one record per probed launch (native writer)

``load(path)`` opens such a directory lazily: result files are memory-mapped
when a launch's maps are first asked for. A map is an `array` (records per
unit), a `sum` (`MapData.totals()`) or a `hist` (`MapData.histogram()`);
``map_buffer_bytes`` is the one rule that sizes any map's device buffer.
"""

from __future__ import annotations

import errno
import json
import math
import mmap
import os
import re
import stat
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import attrs
import numpy as np

from neutrino.errors import NeutrinoError

MAGIC = b"NTRESULT"
VERSION = 1
SECTION_ALIGN = 64

LEVELS = ("thread", "warp", "block")
MAP_TYPES = ("array", "sum", "hist")  # the code in a map header's `type` word is the index
FIELD_TYPES = {"u32": 4, "u64": 8}
_TYPE_BY_WIDTH = {4: "u32", 8: "u64"}

FILE_HEADER = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("n_maps", "<u4"),
        ("grid", "<u4", (3,)),
        ("block", "<u4", (3,)),
        ("shared_bytes", "<u4"),
        ("reserved", "<u4"),
    ]
)
MAP_HEADER = np.dtype(
    [
        ("name", "S64"),
        ("level", "<u4"),  # index into LEVELS
        ("record_bytes", "<u4"),
        ("cap", "<u4"),  # records per unit actually allocated
        ("cap_is_count", "<u4"),  # 1 when the probe said cap = "count"
        ("units", "<u8"),
        ("n_fields", "<u4"),
        ("type", "<u4"),  # index into MAP_TYPES; was `reserved` (0) in older files, which are all arrays
        ("offset", "<u8"),  # absolute byte offset of the section
        ("size", "<u8"),  # bytes of the section
    ]
)
FIELD_DESC = np.dtype([("name", "S32"), ("width", "<u4"), ("offset", "<u4")])

# result/index.bin: a 16-byte header, then one record per probed launch (written by shim/writer.c).
INDEX_MAGIC = b"NTINDEX1"
INDEX_VERSION = 1
INDEX_RECORD = np.dtype(
    [
        ("seq", "<u8"),  # launch index + 1
        ("kernel_launch", "<u8"),
        ("stream", "<u8"),
        ("offset", "<u8"),  # the launch's frame in its kernel's result file
        ("frame_size", "<u8"),
        ("grid", "<u4", (3,)),
        ("block", "<u4", (3,)),
        ("shared_bytes", "<u4"),
        ("kernel_id", "<u4"),  # k of kernel/<k>_<hash>, result/<k>_<hash>.ntr
        ("frame_id", "<u4"),  # id of a `frame` event (0: none)
        ("status", "<u4"),  # 0 written; 1 failed on the launch path; 2 copy back failed; 3 file write failed
        ("duration_ns", "<f8"),  # < 0: unknown
        ("graph", "<u8"),  # graph id << 32 | node id of a CUDA graph replay; 0 otherwise (`reserved`, 0, before)
    ]
)
INDEX_HEADER_TAIL = np.array([INDEX_VERSION, INDEX_RECORD.itemsize], "<u4").tobytes()


class TraceError(NeutrinoError):
    """A trace directory or result file that cannot be read."""


def align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def units_for(level: str, grid: Sequence[int], block: Sequence[int], lanes: int = 32) -> int:
    """Number of units of a map of `level` for one launch (spec/kernel-json.md); `lanes`: 64 for AMD's wave64."""
    blocks = int(grid[0]) * int(grid[1]) * int(grid[2])
    threads = int(block[0]) * int(block[1]) * int(block[2])
    if level == "thread":
        return blocks * threads
    if level == "warp":
        return blocks * ((threads + lanes - 1) // lanes)
    if level == "block":
        return blocks
    raise ValueError(f"unknown map level {level!r}")


def buffer_bytes(units: int, cap: int, record_bytes: int) -> int:
    """Size of one `array` map buffer: counts (16-aligned) then records."""
    return align(4 * units, 16) + units * cap * record_bytes


# A sum/hist map's buffer holds STRIPES rows of counters; a warp adds to row
# (%smid % STRIPES), so that the atomics of a launch spread over many addresses
# (and L2 slices) instead of queueing on one. Rows start ROW_ALIGN apart. The
# buffer is written to the result file as it is (units = rows there); readers
# add the rows up. Old files keep their own row count, so STRIPES may change.
STRIPES = 32
ROW_ALIGN = 128


def stripe_row_bytes(record_bytes: int) -> int:
    """Distance between two rows of counters in a sum/hist map's device buffer."""
    return align(record_bytes, ROW_ALIGN)


def map_buffer_bytes(map_info: dict, grid: Sequence[int], block: Sequence[int], cap: int | None = None) -> tuple[int, int]:
    """(units, bytes) of the device buffer of one map for one launch: THE sizing rule.

    `map_info` is the map's entry in kernel.json (spec/kernel-json.md); `cap`
    is the records per unit for an `array` map (for `cap = "count"` the
    counted cap; None: the declared one, 1 when it is "count"). A `sum` or
    `hist` map is STRIPES rows of u64 counters per launch, whatever the grid:
    `units` is the number of rows.
    """
    kind = map_info.get("type", "array")
    if kind != "array":
        return STRIPES, STRIPES * stripe_row_bytes(int(map_info["record_bytes"]))
    if cap is None:
        cap = map_info["cap"] if isinstance(map_info["cap"], int) else 1
    units = units_for(map_info["level"], grid, block, int(map_info.get("lanes", 32)))
    return units, buffer_bytes(units, cap, int(map_info["record_bytes"]))


def section_bytes(kind: str, units: int, cap: int, record_bytes: int) -> int:
    """Bytes of a map's section in a result file (= its device buffer); `units` = rows for sum/hist."""
    return buffer_bytes(units, cap, record_bytes) if kind == "array" else units * stripe_row_bytes(record_bytes)


@attrs.frozen
class Buckets:
    """The buckets of a `hist` map: `log2`, or `linear:MIN:MAX:STEP` (unsigned values).

    log2 (bpftrace's `hist()`): bucket 0 holds the value 0, bucket k >= 1 the
    values [2^(k-1), 2^k); 65 buckets cover u64. linear (bpftrace's `lhist()`):
    bucket 0 holds values < MIN, bucket 1 + (v - MIN) // STEP values in
    [MIN, MAX), the last bucket values >= MAX.
    """

    kind: str  # log2 / linear
    min: int = 0
    max: int = 0
    step: int = 1

    LOG2_COUNT = 65

    @classmethod
    def parse(cls, text: str) -> "Buckets":
        """The bucket spec of `text`; ValueError with a reason when malformed."""
        text = str(text).strip()
        if text == "log2":
            return cls("log2")
        m = re.fullmatch(r"linear:([0-9]+):([0-9]+):([0-9]+)", text)  # ASCII digits: \d takes any script's
        if not m:
            raise ValueError(f"malformed buckets {text!r}: write \"log2\" or \"linear:MIN:MAX:STEP\"")
        lo, hi, step = (int(g) for g in m.groups())
        if step <= 0 or lo >= hi or hi >= 1 << 64:
            raise ValueError(f"buckets {text!r}: need 0 <= MIN < MAX < 2^64 and STEP > 0")
        spec = cls("linear", lo, hi, step)
        if spec.count > 4096:
            raise ValueError(f"buckets {text!r} make {spec.count} buckets; at most 4096")
        return spec

    def __str__(self) -> str:
        return "log2" if self.kind == "log2" else f"linear:{self.min}:{self.max}:{self.step}"

    def header_names(self) -> tuple[str, ...]:
        """How a result file's field table spells the spec: `log2`, or `linear`, `min=N`, `max=N`, `step=N`."""
        return ("log2",) if self.kind == "log2" else ("linear", f"min={self.min}", f"max={self.max}", f"step={self.step}")

    @classmethod
    def from_header_names(cls, names: Sequence[str]) -> "Buckets":
        if list(names[:1]) == ["linear"] and len(names) == 4:
            return cls.parse("linear:" + ":".join(n.split("=", 1)[-1] for n in names[1:]))
        return cls.parse(":".join(names))

    @property
    def linear_count(self) -> int:
        return -(-(self.max - self.min) // self.step)

    @property
    def count(self) -> int:
        return self.LOG2_COUNT if self.kind == "log2" else self.linear_count + 2

    def index(self, value: int) -> int:
        """The bucket of one value (the rule the lowered code implements)."""
        if self.kind == "log2":
            return int(value).bit_length()
        if value < self.min:
            return 0
        if value >= self.max:
            return self.count - 1
        return 1 + (value - self.min) // self.step

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of every bucket: bucket i holds low[i] <= v < high[i] (high of the last is 2^64)."""
        top = 1 << 64
        if self.kind == "log2":
            low = [0] + [1 << (k - 1) for k in range(1, 65)]
            high = [1] + [1 << k for k in range(1, 65)]
        else:
            edges = [min(self.min + k * self.step, self.max) for k in range(self.linear_count + 1)]
            low, high = [0] + edges, [self.min] + edges[1:] + [top]
        return np.array(low, dtype=object), np.array(high, dtype=object)


@attrs.frozen
class Field:
    name: str
    type: str = attrs.field(validator=attrs.validators.in_(FIELD_TYPES))
    offset: int = attrs.field(validator=attrs.validators.ge(0))

    @property
    def width(self) -> int:
        return FIELD_TYPES[self.type]


def _fields(value: Iterable) -> tuple[Field, ...]:
    out = []
    for f in value:
        if isinstance(f, Field):
            out.append(f)
        elif isinstance(f, dict):
            out.append(Field(f["name"], f["type"], int(f["offset"])))
        else:
            out.append(Field(*f))
    return tuple(out)


@attrs.frozen
class MapSection:
    """One map of one launch, as written: its layout and its raw buffer.

    `data` is the device buffer copied back (any object supporting the
    buffer protocol), exactly `section_bytes(type, units, cap, record_bytes)`
    long. For a `hist` map `buckets` is its bucket spec; its fields are not
    written (the counters are the buckets).
    """

    name: str
    level: str = attrs.field(validator=attrs.validators.in_(LEVELS))
    record_bytes: int
    cap: int
    units: int
    fields: tuple[Field, ...] = attrs.field(converter=_fields)
    data: object = attrs.field(repr=False)
    cap_is_count: bool = False
    type: str = attrs.field(default="array", validator=attrs.validators.in_(MAP_TYPES))
    buckets: str | None = None

    @classmethod
    def of(cls, map_info: dict, units: int, cap: int, data) -> "MapSection":
        """The section of a map described by its kernel.json entry, `units` and `cap` as
        `map_buffer_bytes` gave them; `data` is the device buffer, written as it is."""
        return cls(map_info["name"], map_info["level"], map_info["record_bytes"], cap, units, map_info["fields"], data,
                   cap_is_count=map_info["cap"] == "count", type=map_info.get("type", "array"),
                   buckets=map_info.get("buckets"))

    @property
    def size(self) -> int:
        return section_bytes(self.type, self.units, self.cap, self.record_bytes)

    @property
    def dropped(self) -> int:
        """Records tried beyond the cap (always 0 for sum and hist maps: they cannot overflow)."""
        if self.type != "array" or not self.units:
            return 0
        counts = np.frombuffer(self.data, "<u4", count=self.units).astype("i8")
        return int(np.clip(counts - self.cap, 0, None).sum())

    def header_fields(self) -> tuple[Field, ...]:
        """The field table of the map header; a hist map's spells its bucket spec (Buckets.header_names)."""
        if self.type == "hist":
            return tuple(Field(name, "u64", 0) for name in Buckets.parse(self.buckets or "").header_names())
        return self.fields


def fold_rows(rows: np.ndarray, record_bytes: int) -> np.ndarray:
    """The counters of a sum/hist map: its rows (u64, `rows x stripe_row_bytes/8`) added up modulo 2^64."""
    return rows[:, : record_bytes // 8].sum(axis=0, dtype=np.uint64)


def record_dtype(fields: Sequence[Field], record_bytes: int) -> np.dtype:
    return np.dtype(
        {
            "names": [f.name for f in fields],
            "formats": ["<u4" if f.type == "u32" else "<u8" for f in fields],
            "offsets": [f.offset for f in fields],
            "itemsize": record_bytes,
        }
    )


# --------------------------------------------------------------------- writing


@attrs.frozen
class FrameLayout:
    """Where everything of a result frame lies, from the maps' layouts alone (no data)."""

    map_headers: tuple[int, ...]  # offset of each map header in the frame
    offsets: tuple[int, ...]  # offset of each section
    size: int  # the frame's bytes, padded to SECTION_ALIGN


def frame_layout(maps: Sequence[MapSection]) -> FrameLayout:
    """THE layout rule of a frame: file header, map headers with their field tables,
    then each section at the next multiple of SECTION_ALIGN."""
    headers, pos = [], FILE_HEADER.itemsize
    for m in maps:
        headers.append(pos)
        pos += MAP_HEADER.itemsize + len(m.header_fields()) * FIELD_DESC.itemsize
    offsets, pos = [], align(pos, SECTION_ALIGN)
    for m in maps:
        offsets.append(pos)
        pos = align(pos + m.size, SECTION_ALIGN)
    return FrameLayout(tuple(headers), tuple(offsets), pos)


def encode_header(*, grid, block, shared_bytes: int, maps: Sequence[MapSection]) -> tuple[bytes, list[int]]:
    """The header bytes of a result file and the absolute offset of each section."""
    head = np.zeros((), FILE_HEADER)
    head["magic"] = MAGIC
    head["version"] = VERSION
    head["n_maps"] = len(maps)
    head["grid"] = tuple(grid)
    head["block"] = tuple(block)
    head["shared_bytes"] = shared_bytes
    descs: list[bytes] = []
    layout = frame_layout(maps)
    for m, pos in zip(maps, layout.offsets):
        _check_section(m)
        mh = np.zeros((), MAP_HEADER)
        mh["name"] = m.name.encode()
        mh["level"] = LEVELS.index(m.level)
        mh["record_bytes"] = m.record_bytes
        mh["cap"] = m.cap
        mh["cap_is_count"] = int(m.cap_is_count)
        mh["units"] = m.units
        fields = m.header_fields()
        mh["n_fields"] = len(fields)
        mh["type"] = MAP_TYPES.index(m.type)
        mh["offset"] = pos
        mh["size"] = m.size
        fd = np.zeros(len(fields), FIELD_DESC)
        for i, f in enumerate(fields):
            fd[i] = (f.name.encode(), f.width, f.offset)
        descs.append(mh.tobytes() + fd.tobytes())
    return head.tobytes() + b"".join(descs), list(layout.offsets)


def _check_section(m: MapSection) -> None:
    if len(m.name.encode()) > 63:
        raise TraceError(f"map name too long for a result file: {m.name!r}")
    for f in m.header_fields():
        if len(f.name.encode()) > 31:
            raise TraceError(f"field name too long for a result file: {f.name!r}")
        if f.offset + f.width > m.record_bytes:
            raise TraceError(f"field {f.name} of map {m.name} lies outside its {m.record_bytes}-byte record")
    got = memoryview(m.data).nbytes
    if got != m.size:
        raise TraceError(f"map {m.name}: buffer has {got} bytes, layout needs {m.size}")


def append_frame(fh, *, grid, block, shared_bytes: int, maps: Sequence[MapSection]) -> tuple[int, int]:
    """Append one result frame (the layout of a result file) to an open binary file at a
    multiple of SECTION_ALIGN; returns (offset, size). Offsets inside the frame are
    relative to its start, so a reader maps the frame with `read_result(path, offset)`."""
    header, offsets = encode_header(grid=grid, block=block, shared_bytes=shared_bytes, maps=maps)
    return append_encoded(fh, header, offsets, [m.data for m in maps])


def append_encoded(fh, header: bytes, offsets: Sequence[int], datas: Sequence) -> tuple[int, int]:
    """`append_frame` with the header already encoded (the writer caches it per launch shape)."""
    start = fh.seek(0, os.SEEK_END)
    pad = align(start, SECTION_ALIGN) - start
    if pad:
        fh.write(b"\0" * pad)
        start += pad
    fh.write(header)
    pos = len(header)
    for off, data in zip(offsets, datas):
        if off > pos:
            fh.write(b"\0" * (off - pos))
        view = memoryview(data).cast("B")
        fh.write(view)
        pos = off + view.nbytes
    end = align(pos, SECTION_ALIGN)
    if end > pos:
        fh.write(b"\0" * (end - pos))
    return start, end


def write_result(path, *, grid, block, shared_bytes: int, maps: Sequence[MapSection]) -> Path:
    """Write one result file atomically (temporary file, then rename)."""
    path = Path(path)
    header, offsets = encode_header(grid=grid, block=block, shared_bytes=shared_bytes, maps=maps)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(header)
        for m, off in zip(maps, offsets):
            fh.write(b"\0" * (off - fh.tell()))
            fh.write(memoryview(m.data).cast("B"))
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------- reading


@attrs.frozen
class Histogram:
    """The buckets of one `hist` map of one launch."""

    buckets: Buckets
    counts: np.ndarray  # uint64, one per bucket

    @property
    def total(self) -> int:
        """Samples recorded (the sum of the buckets)."""
        return int(self.counts.sum(dtype=np.uint64))

    def rows(self, nonzero: bool = True) -> list[tuple[int, int, int]]:
        """(low, high, count) per bucket, values low <= v < high; empty buckets left out unless asked."""
        low, high = self.buckets.bounds()
        return [(int(lo), int(hi), int(c)) for lo, hi, c in zip(low, high, self.counts) if c or not nonzero]

    def __str__(self) -> str:
        rows = self.rows()
        peak = max((c for _, _, c in rows), default=1)
        return "\n".join(f"[{lo}, {hi}) {c:>12} |{'@' * max(1, 40 * c // peak) if c else ''}" for lo, hi, c in rows)


@attrs.define(eq=False)
class MapData:
    """One map of one launch, read back. `counts` and `records` are memory-mapped when large.

    An `array` map has `counts` (one per unit) and `records` `(units, cap)`.
    A `sum` map reads as one unit holding one record, the launch's totals (its
    rows added up; `totals()`); a `hist` map as one record with the field
    `buckets`, an array of the bucket counters (`histogram()`).

    `iter_valid`, `valid`, `dropped` and `record_stats` read a large section in
    chunks from its file (`read_rows`), never whole: their memory is bounded by
    a chunk plus what they return, whatever size the header declares.
    """

    name: str
    level: str
    cap: int
    record_bytes: int
    units: int
    fields: tuple[Field, ...]
    cap_is_count: bool
    counts: np.ndarray
    records: np.ndarray
    type: str = "array"
    buckets: Buckets | None = None

    @property
    def dtype(self) -> np.dtype:
        return self.records.dtype

    @property
    def unit_column(self) -> str:
        """The name of the unit column `valid()` adds: `unit`, or, when the map has a field of
        that name, `unit` with as many leading underscores as make it new (`_unit`, `__unit`, …)."""
        names = set(self.records.dtype.names or ())
        column = "unit"
        while column in names:
            column = "_" + column
        return column

    @property
    def dropped(self) -> int:
        return self.record_stats()[1]

    def record_stats(self) -> tuple[int, int]:
        """(valid records, dropped records), from the counts alone, read in chunks."""
        if self.type != "array":
            return len(self.counts), 0
        valid = dropped = 0
        for lo in range(0, len(self.counts), COUNT_CHUNK):
            counts = read_rows(self.counts, lo, min(len(self.counts), lo + COUNT_CHUNK))
            if not counts.any():
                continue
            counts = counts.astype(np.int64)
            valid += int(np.minimum(counts, self.cap).sum())
            dropped += int(np.clip(counts - self.cap, 0, None).sum())
        return valid, dropped

    def totals(self) -> dict[str, int]:
        """A sum map's counters: field name → total over the launch."""
        if self.type != "sum":
            raise TraceError(f"map {self.name} is a {self.type} map; totals() is for sum maps")
        row = np.asarray(self.records)[0, 0]
        return {f.name: int(row[f.name]) for f in self.fields}

    def histogram(self) -> Histogram:
        if self.type != "hist" or self.buckets is None:
            raise TraceError(f"map {self.name} is a {self.type} map; histogram() is for hist maps")
        return Histogram(self.buckets, np.array(np.asarray(self.records)[0, 0]["buckets"], dtype=np.uint64))

    def iter_valid(self, max_records: int = 1 << 22, align: int = 1) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """`(records, unit)` chunks of the valid records: a unit holds `min(count, cap)` of them.

        `records` is 1-D structured, `unit` the int64 unit of each record. A chunk covers
        about `max_records` record slots (and at most CHUNK_BYTES of them), and starts at
        a multiple of `align` units (pass the units of a block never to split a block).
        """
        cap, units = int(self.cap), int(len(self.counts))
        if cap <= 0 or units == 0:
            return
        align = max(1, int(align))
        slots = max(1, min(int(max_records), CHUNK_BYTES // max(1, self.records.dtype.itemsize)))
        step = max(1, slots // cap // align) * align
        whole = step * cap <= 2 * slots  # a chunk's slots are few enough to read them all
        slot = np.arange(cap, dtype=np.int64) if whole else None
        for lo in range(0, units, step):
            hi = min(units, lo + step)
            counts = read_rows(self.counts, lo, hi)
            if not counts.any():
                continue
            counts = np.minimum(counts.astype(np.int64), cap)
            unit = np.repeat(np.arange(lo, hi, dtype=np.int64), counts)
            if slot is not None:  # read the chunk's slots, keep the valid ones
                yield read_rows(self.records, lo, hi)[slot[None, :] < counts[:, None]], unit
                continue
            # A cap larger than a chunk: read only the valid records of each unit.
            parts = [read_slots(self.records, lo + int(i), int(counts[i])) for i in np.flatnonzero(counts)]
            yield np.concatenate(parts), unit

    def valid(self) -> np.ndarray:
        """The records actually written, one row each, with the extra column `unit_column`
        (`unit`, unless the map has a field of that name)."""
        names = self.records.dtype.names or ()
        column = self.unit_column
        out_dtype = np.dtype([(name, self.records.dtype.fields[name][0]) for name in names] + [(column, "<u8")])
        parts = list(self.iter_valid())
        out = np.empty(sum(len(u) for _, u in parts), out_dtype)
        at = 0
        for records, unit in parts:
            for name in names:
                out[name][at:at + len(unit)] = records[name]
            out[column][at:at + len(unit)] = unit
            at += len(unit)
        return out


COUNT_CHUNK = 1 << 22  # counts read per step when scanning a map's counts
CHUNK_BYTES = 64 << 20  # record bytes read per step by MapData.iter_valid


def read_rows(array: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows `lo:hi` of a map's `counts`, `records` or sum/hist rows, as an array in memory.

    A memory-mapped array is read from its file rather than through the mapping:
    pages touched through a mapping stay resident while it lives, so a scan of a
    multi-GB section (a sparse file declaring 2^27 units) would end up holding all
    of it."""
    if not _mapped(array):
        return np.asarray(array[lo:hi])
    if lo >= hi:
        return np.asarray(array[0:0])
    row = math.prod(array.shape[1:])
    return _read_file(array, lo * row, (hi - lo) * row).reshape((hi - lo,) + array.shape[1:])


def read_slots(records: np.ndarray, unit: int, count: int) -> np.ndarray:
    """The first `count` records of `unit` of a `(units, cap)` records array, 1-D."""
    if not _mapped(records):
        return np.asarray(records[unit, :count])
    return _read_file(records, unit * records.shape[1], count)


def _mapped(array: np.ndarray) -> bool:
    """Whether `array` is a memory map of a file made by np.memmap itself (not a view of one,
    whose `offset` would not be its own)."""
    return isinstance(array, np.memmap) and bool(array.filename) and isinstance(array.base, mmap.mmap)


def _read_file(array: np.memmap, first: int, count: int) -> np.ndarray:
    """`count` elements of a memory-mapped array from element `first` on, read from the file.
    A range that is a hole of a sparse file is zeros without a read (SEEK_DATA): time goes
    with the bytes the file holds, not with the sizes its headers declare."""
    path = Path(array.filename)
    offset = int(array.offset) + first * array.dtype.itemsize
    nbytes = count * array.dtype.itemsize
    try:
        with open(path, "rb") as fh:
            if _hole(fh.fileno(), offset, nbytes):
                return np.zeros(count, array.dtype)
            fh.seek(offset)
            out = np.frombuffer(fh.read(nbytes), array.dtype)
    except OSError as e:
        raise TraceError(f"{path}: cannot read at offset {offset}: {e.strerror or e}") from None
    if len(out) != count:
        raise TraceError(f"{path}: cut short at offset {offset} (the file changed while it was read?)")
    return out


def _hole(fd: int, offset: int, nbytes: int) -> bool:
    """Whether bytes [offset, offset + nbytes) of a file are a hole (read as zeros)."""
    return _next_data(fd, offset) >= offset + nbytes


def _next_data(fd: int, offset: int) -> int:
    """Where the next bytes a file holds start at or after `offset` (SEEK_DATA): the file's
    size when only a hole follows; `offset` itself when the system cannot tell."""
    position = os.lseek(fd, 0, os.SEEK_CUR)  # restored: a buffered reader of `fd` relies on it
    try:
        return os.lseek(fd, offset, os.SEEK_DATA)
    except OSError as e:
        return max(offset, os.fstat(fd).st_size) if e.errno == errno.ENXIO else offset
    except AttributeError:  # no SEEK_DATA on this system
        return offset
    finally:
        os.lseek(fd, position, os.SEEK_SET)


@attrs.define(eq=False)
class ResultFile:
    path: Path
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    maps: dict[str, MapData]


def open_regular(path: Path, what: str):
    """`path` opened for reading in binary, if it is a regular file: a FIFO or a device named
    by a corrupt trace would block the reader or never end. TraceError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except OSError as e:
        raise TraceError(f"{path}: cannot read {what}: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TraceError(f"{path}: {what} is not a regular file")
    return os.fdopen(fd, "rb")


def read_result(path, offset: int = 0) -> ResultFile:
    """Parse a result file, or the frame at `offset` of a per-kernel result file;
    large sections are memory-mapped, not read. TraceError (naming the file and the
    offset) for anything that does not hold together."""
    path = Path(path)
    try:
        with open_regular(path, "a result file") as fh:
            size = os.fstat(fh.fileno()).st_size
            if not isinstance(offset, int) or offset < 0 or offset % SECTION_ALIGN or offset >= max(size, 1):
                raise TraceError(f"{path}: no result frame at offset {offset}")
            fh.seek(offset)
            raw = fh.read(FILE_HEADER.itemsize)
            head = _frombuffer(raw, FILE_HEADER, path, f"file header at offset {offset}")
            if bytes(head["magic"]) != MAGIC:
                raise TraceError(f"{path}: not a Neutrino result file (bad magic at offset {offset})")
            if int(head["version"]) != VERSION:
                raise TraceError(f"{path}: result format version {int(head['version'])}, this reader knows {VERSION}")
            n_maps = int(head["n_maps"])
            if n_maps * MAP_HEADER.itemsize > size - offset - FILE_HEADER.itemsize:
                raise TraceError(f"{path}: the frame at offset {offset} claims {n_maps} maps; "
                                 f"the file cannot hold their headers (truncated or corrupt)")
            maps = {}
            for _ in range(n_maps):
                m = _read_map(fh, path, size, offset)
                if m.name in maps:
                    raise TraceError(f"{path}: frame at offset {offset}: map {m.name} appears twice")
                maps[m.name] = m
    except OSError as e:
        raise TraceError(f"{path}: cannot read result file: {e.strerror or e}") from None
    return ResultFile(
        path=path,
        grid=tuple(int(v) for v in head["grid"]),
        block=tuple(int(v) for v in head["block"]),
        shared_bytes=int(head["shared_bytes"]),
        maps=maps,
    )


MAX_FIELDS = 4096
MAX_RECORD_BYTES = 1 << 16  # array records are at most 256 bytes, sum/hist rows 8 x 4096 (spec/probe-toml.md)


def _text(raw: bytes, path: Path, what: str, at: int) -> str:
    """A NUL-padded UTF-8 name of a result file (its header at offset `at`)."""
    name = raw.rstrip(b"\0")
    if b"\0" in name:
        raise TraceError(f"{path}: {what} holds a NUL byte (header at offset {at}): corrupt file")
    try:
        return name.decode()
    except UnicodeDecodeError:
        raise TraceError(f"{path}: {what} is not UTF-8 (header at offset {at}): corrupt file") from None


def _frombuffer(raw: bytes, dtype: np.dtype, path: Path, what: str, count: int = 1):
    if len(raw) != dtype.itemsize * count:
        raise TraceError(f"{path}: truncated {what}")
    arr = np.frombuffer(raw, dtype, count=count)
    return arr[0] if count == 1 else arr


def _read_map(fh, path: Path, file_size: int, base: int = 0) -> MapData:
    at = fh.tell()
    mh = _frombuffer(fh.read(MAP_HEADER.itemsize), MAP_HEADER, path, f"map header at offset {at}")
    nf = int(mh["n_fields"])
    if nf > MAX_FIELDS:  # a corrupt count must not become a huge read
        raise TraceError(f"{path}: map header at offset {at} claims {nf} fields (at most {MAX_FIELDS}): corrupt file")
    table = fh.read(FIELD_DESC.itemsize * nf)
    fds = _frombuffer(table, FIELD_DESC, path, f"field table at offset {at}", nf) if nf else []
    if nf == 1:
        fds = [fds]
    name = _text(bytes(mh["name"]), path, "map name", at)
    where = f"{path}: map {name}"
    level_i, type_i = int(mh["level"]), int(mh["type"])
    if level_i >= len(LEVELS):
        raise TraceError(f"{where}: unknown level {level_i} (map header at offset {at})")
    if type_i >= len(MAP_TYPES):
        raise TraceError(f"{where}: unknown map type {type_i} (a newer writer?) (map header at offset {at})")
    kind = MAP_TYPES[type_i]
    fields = _read_fields(fds, path, name, at)
    units, cap, rb = int(mh["units"]), int(mh["cap"]), int(mh["record_bytes"])
    if rb > MAX_RECORD_BYTES or (kind != "array" and (rb == 0 or rb % 8)):
        rule = "a multiple of 8, " if kind != "array" else ""
        raise TraceError(f"{where}: records of {rb} bytes (a {kind} map's are {rule}at most {MAX_RECORD_BYTES}): "
                         f"corrupt file (map header at offset {at})")
    for f in fields:  # a hist map's fields name its buckets (checked below); the others lie in a record
        if kind != "hist" and f.offset + f.width > rb:
            raise TraceError(f"{where}: field {f.name} lies outside its {rb}-byte record (map header at offset {at})")
    offset, size = base + int(mh["offset"]), int(mh["size"])
    if size != section_bytes(kind, units, cap, rb) or offset + size > file_size:
        raise TraceError(f"{where}: section size/offset do not match its layout (truncated file?) "
                         f"(map header at offset {at})")
    if kind == "array":
        return _array_map(fh, path, name, mh, fields, offset)
    return _counter_map(fh, path, name, mh, fields, offset, at)


def _read_fields(fds, path: Path, name: str, at: int) -> list[Field]:
    where = f"{path}: map {name}"
    fields, seen = [], set()
    for fd in fds:
        width = int(fd["width"])
        if width not in _TYPE_BY_WIDTH:
            raise TraceError(f"{where}: field width {width} is not 4 or 8 (map header at offset {at})")
        field = Field(_text(bytes(fd["name"]), path, f"field name of map {name}", at), _TYPE_BY_WIDTH[width],
                      int(fd["offset"]))
        if not field.name:
            raise TraceError(f"{where}: field {len(fields)} has no name: corrupt file (map header at offset {at})")
        if field.name in seen:
            raise TraceError(f"{where}: field {field.name} appears twice (map header at offset {at})")
        seen.add(field.name)
        fields.append(field)
    return fields


def _array_map(fh, path: Path, name: str, mh, fields: list[Field], offset: int) -> MapData:
    units, cap, rb = int(mh["units"]), int(mh["cap"]), int(mh["record_bytes"])
    dtype = record_dtype(fields, rb)
    counts = _map_array(fh, path, np.dtype("<u4"), offset, (units,))
    records = _map_array(fh, path, dtype, offset + align(4 * units, 16), (units, cap))
    return MapData(name, LEVELS[int(mh["level"])], cap, rb, units, tuple(fields), bool(mh["cap_is_count"]), counts,
                   records)


def _counter_map(fh, path: Path, name: str, mh, fields: list[Field], offset: int, at: int) -> MapData:
    """A sum or hist map: its rows added up, shown as one unit with one record (whatever cap the header claims)."""
    kind, units, rb = MAP_TYPES[int(mh["type"])], int(mh["units"]), int(mh["record_bytes"])
    where, buckets = f"{path}: map {name}", None
    if kind == "hist":
        try:
            buckets = Buckets.from_header_names([f.name for f in fields])
        except ValueError as e:
            raise TraceError(f"{where}: {e} (map header at offset {at})") from None
        if buckets.count * 8 != rb:
            raise TraceError(f"{where}: {rb} bytes for {buckets.count} buckets (map header at offset {at})")
        fields, dtype = [], np.dtype([("buckets", "<u8", (buckets.count,))])
    else:
        dtype = record_dtype(fields, rb)
    rows = _map_array(fh, path, np.dtype("<u8"), offset, (units, stripe_row_bytes(rb) // 8))
    total = np.zeros(rb // 8, np.uint64)
    step = max(1, COUNT_CHUNK // max(1, rows.shape[1]))
    for lo in range(0, units, step):
        total += fold_rows(read_rows(rows, lo, min(units, lo + step)), rb)
    records = np.frombuffer(total.tobytes(), dtype).reshape(1, 1)
    return MapData(name, LEVELS[int(mh["level"])], 1, rb, 1, tuple(fields), bool(mh["cap_is_count"]),
                   np.ones(1, np.uint32), records, kind, buckets)


SMALL_SECTION = 1 << 20  # sections up to this size are read; larger ones memory-mapped


def _map_array(fh, path: Path, dtype: np.dtype, offset: int, shape: tuple) -> np.ndarray:
    """A section's array: read when small (a memmap costs about a millisecond to set up,
    which thousands of small launches feel), else memory-mapped."""
    count = math.prod(shape)
    if count == 0 or dtype.itemsize == 0:
        return np.zeros(shape, dtype)
    nbytes = count * dtype.itemsize
    if nbytes > SMALL_SECTION:
        try:
            return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
        except (OSError, ValueError, OverflowError) as e:  # no address space left for it, a file that shrank
            raise TraceError(f"{path}: cannot map {nbytes} bytes at offset {offset}: {e}") from None
    here = fh.tell()  # the caller reads the map headers sequentially
    fh.seek(offset)
    raw = fh.read(nbytes)
    fh.seek(here)
    if len(raw) != nbytes:
        raise TraceError(f"{path}: truncated section at offset {offset}")
    return np.frombuffer(raw, dtype, count=count).reshape(shape)


# --------------------------------------------------------------------- trace dir


@attrs.define(eq=False)
class Launch:
    """One probed launch: its event-log metadata and (lazily) its maps."""

    index: int
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    duration_ns: float | None
    frame: str | None
    result_path: Path
    event: dict
    result_offset: int = 0  # the launch's frame in a per-kernel result file (0 for one file per launch)
    _result: ResultFile | None = None

    @property
    def graph(self) -> tuple[int, int] | None:
        """(graph id, node id) of a CUDA graph replay (its `graph_node` event), None for a stream launch."""
        g, n = self.event.get("graph"), self.event.get("graph_node")
        return (int(g), int(n)) if isinstance(g, int) and isinstance(n, int) else None

    @property
    def maps(self) -> dict[str, MapData]:
        """The launch's maps, read when first asked for and kept until `release()`."""
        if self._result is None:
            self._result = read_result(self.result_path, self.result_offset)
        return self._result.maps

    def release(self) -> None:
        """Forget the maps read (they are read again when asked for): a reader going through
        thousands of launches keeps one launch's sections at a time."""
        self._result = None


@attrs.define(eq=False)
class Trace:
    path: Path
    probe_text: str
    events: list[dict]
    launches: list[Launch]
    problems: list[str] = attrs.Factory(list)  # what could not be read, named (corrupt lines, skipped launches)

    def __repr__(self) -> str:
        """One line: where, how much, which probe; never the probe text or the events themselves."""
        kernels = len({launch.kernel for launch in self.launches})
        start = next((ev for ev in self.events if ev.get("event") == "start" and ev.get("probe")), {})
        probe = start.get("tool") or (Path(start["probe"]).name if start else None)  # the tool's name, else the file's
        probe_part = f", probe {probe}" if probe else ""
        problems = f", {len(self.problems)} problem(s)" if self.problems else ""
        return (f"<Trace {self.path}: {len(self.launches)} launch(es) of {kernels} kernel(s){probe_part}, "
                f"{len(self.events)} event(s){problems}>")

    def kernel_info(self, kernel: str) -> dict | None:
        """The kernel.json entry of `kernel` (the first instrumented one of that name); None when
        no kernel.json names it. TraceError (the file, the offset) for a kernel.json that is not one."""
        for ev in self.events:
            if ev.get("event") == "instrument" and ev.get("kernel") == kernel and isinstance(ev.get("kernel_dir"), str):
                try:
                    p = self.path / _inside_run(ev["kernel_dir"]) / "kernel.json"
                    if not p.exists():
                        continue
                except (OSError, ValueError):  # a kernel_dir holding a NUL, or too long to be a path
                    continue
                kernels = read_kernel_json(p).get("kernels")
                if not isinstance(kernels, dict):
                    raise TraceError(f"{p}: no \"kernels\" object: not a Neutrino kernel.json")
                return kernels.get(kernel)
        return None


MAX_KERNEL_JSON_BYTES = 64 << 20  # one kernel's maps and sites: kilobytes
MAX_PROBE_BYTES = 4 << 20  # a probe file is at most 1 MiB of text (spec/probe-toml.md)


def read_kernel_json(path: Path) -> dict:
    """A kernel/<k>_<hash>/kernel.json (spec/kernel-json.md) as a dict; TraceError with the file and the
    byte offset for one that cannot be read, is not UTF-8 or not a JSON object."""
    try:
        with open_regular(path, "kernel.json") as fh:
            raw = fh.read(MAX_KERNEL_JSON_BYTES + 1)
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_KERNEL_JSON_BYTES:
        raise TraceError(f"{path}: more than {MAX_KERNEL_JSON_BYTES} bytes: not a kernel.json of ours")
    try:
        value = json.loads(raw.decode())
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: byte offset {e.start}: not UTF-8: corrupt kernel.json") from None
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}:{e.lineno}:{e.colno}: byte offset {e.pos}: corrupt kernel.json: {e.msg}") from None
    except (ValueError, RecursionError) as e:
        raise TraceError(f"{path}: corrupt kernel.json: {str(e)[:200]}") from None
    if not isinstance(value, dict):
        raise TraceError(f"{path}: not a JSON object: corrupt kernel.json")
    return value


def find_run_dir(path) -> Path:
    """`path` itself if it is a run directory, else its only run subdirectory."""
    path = Path(path)
    if not path.is_dir():
        raise TraceError(f"{path}: no such trace directory")
    if (path / "event.log").exists():
        return path
    runs = sorted(p for p in _entries(path) if (p / "event.log").exists())
    if len(runs) == 1:
        return runs[0]
    ranks = find_rank_dirs(path)
    if ranks and len(ranks) == len(runs):
        raise TraceError(f"{path}: a job of {len(ranks)} rank(s) ({', '.join(p.name for _, p in ranks[:8])}): "
                         "name one of them, or read them all with neutrino.trace.load_job")
    if not runs:
        raise TraceError(f"{path}: not a trace directory (no event.log here or in a subdirectory)")
    if len(find_process_dirs(path)) == len(runs):
        raise TraceError(f"{path}: the trace of {len(runs)} processes of one program: name one of them, "
                         "or read them all with neutrino.trace.load_job")
    names = ", ".join(p.name for p in runs[-5:])
    raise TraceError(f"{path}: holds {len(runs)} runs ({names}); name one of them")


def _entries(path: Path) -> list[Path]:
    """The entries of a directory; TraceError (not OSError) when it cannot be listed."""
    try:
        return list(path.iterdir())
    except OSError as e:
        raise TraceError(f"{path}: cannot list the directory: {e.strerror or e}") from None


_RANK_DIR = re.compile(r"rank(\d+)(?:\.(\d+))?")


def find_rank_dirs(path) -> list[tuple[int, Path]]:
    """(rank, run directory) of each rank of a job directory (`<tracedir>/<job>/rank<R>[.<pid>]`,
    spec/trace-format.md), ordered by rank; [] when `path` is not a job directory."""
    path = Path(path)
    if not path.is_dir() or (path / "event.log").exists():
        return []
    found = []
    for sub in _entries(path):
        m = _RANK_DIR.fullmatch(sub.name)
        if m and (sub / "event.log").exists():
            found.append((int(m.group(1)), int(m.group(2) or -1), sub))
    return [(rank, sub) for rank, _, sub in sorted(found)]


_PROCESS_DIR = re.compile(r"(\d{8}-\d{6})_(\d+)")


def find_process_dirs(path) -> list[Path]:
    """The run directories of an `-o DIR` trace (spec/trace-format.md): DIR itself when its first
    process wrote it, then `DIR/<time>_<pid>` of every other process of the program, in order of
    start. DIR is one when it holds an event.log or the `.owner` of `-o`; otherwise [] (a plain
    trace directory holds separate runs, not one program's processes)."""
    path = Path(path)
    if not path.is_dir() or not ((path / "event.log").exists() or (path / ".owner").exists()):
        return []
    others = []
    for sub in _entries(path):
        m = _PROCESS_DIR.fullmatch(sub.name)
        if m and (sub / "event.log").exists():
            others.append((m.group(1), int(m.group(2)), sub))
    return [path] * (path / "event.log").exists() + [sub for *_, sub in sorted(others)]


def read_events(path: Path, problems: list[str] | None = None) -> list[dict]:
    """The JSON objects of an event log. A line that is not one is skipped: a last line
    cut short by a crash silently, others counted in `problems` (with the byte offset of
    the first). A log with lines but no event at all is not an event log and is refused;
    so is one that cannot be read (a directory where the file should be)."""
    events = []
    lines = skipped = 0
    first_bad = None
    try:
        with open_regular(path, "the event log") as fh:
            for at, line, complete in _log_lines(fh):
                if line is not None and not line.strip():
                    continue
                lines += 1
                value = _event_of(line.strip()) if line is not None else None
                if value is not None:
                    events.append(value)
                elif complete:  # a last line without its newline is a crash's, not corruption
                    skipped += 1
                    first_bad = at if first_bad is None else first_bad
    except OSError as e:
        raise TraceError(f"{path}: cannot read the event log: {e.strerror or e}") from None
    if lines and not events:
        raise TraceError(f"{path}: no event in {lines} line(s): not a Neutrino event log (binary or corrupt)")
    if skipped and problems is not None:
        problems.append(f"{path}: {skipped} line(s) that are not JSON events skipped (the first at byte offset "
                        f"{first_bad})")
    return events


MAX_EVENT_LINE = 16 << 20  # longer lines are no event of ours (a run of NULs left by a full disk)
_BLOCK = 1 << 20


def _log_lines(fh) -> Iterator[tuple[int, bytes | None, bool]]:
    """(offset, line, ends with a newline) of each line of an event log; a line longer than
    MAX_EVENT_LINE is None, and is never held whole (nor is a hole of a sparse file read)."""
    at, pending, too_long = 0, [], False
    pending_bytes = 0
    while True:
        here = fh.tell()
        data = _next_data(fh.fileno(), here)
        if data > here:  # a hole: zeros, part of one long line of NULs
            fh.seek(data)
            pending, pending_bytes, too_long = [], 0, True
            continue
        block = fh.read(_BLOCK)
        if not block:
            break
        start = 0
        while (end := block.find(b"\n", start)) >= 0:
            if not too_long:
                pending.append(block[start:end + 1])
            line = None if too_long or pending_bytes + end + 1 - start > MAX_EVENT_LINE else b"".join(pending)
            yield at, line, True
            at = here + end + 1
            pending, pending_bytes, too_long, start = [], 0, False, end + 1
        if not too_long:
            pending.append(block[start:])
            pending_bytes += len(block) - start
            if pending_bytes > MAX_EVENT_LINE:
                pending, pending_bytes, too_long = [], 0, True
    if pending_bytes or too_long:
        yield at, None if too_long else b"".join(pending), False


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _event_of(line: bytes) -> dict | None:
    """The event of one line of an event log, None when it is not one. Bytes that are not UTF-8
    and escaped lone surrogates (which no output stream can print) become U+FFFD."""
    try:
        value = json.loads(line.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):  # ValueError: JSONDecodeError, or an integer of > 4300 digits
        return None
    if not isinstance(value, dict) or not isinstance(value.get("event"), str):
        return None
    return _printable(value) if _SURROGATE_ESCAPE.search(line) else value


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _printable(value):
    """`value` with lone surrogates in its strings replaced (they cannot be encoded as UTF-8)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_printable(v) for v in value]
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    return value


def read_probe_text(path: Path, problems: list[str] | None = None) -> str:
    """The probe.toml of a run ("" when there is none). One that is not UTF-8 is read with the
    bad bytes replaced, and one that cannot be read is taken as empty; both are noted in `problems`."""
    try:
        if not path.exists():
            return ""
        with open_regular(path, "the probe") as fh:
            raw = fh.read(MAX_PROBE_BYTES + 1)
        if len(raw) > MAX_PROBE_BYTES:
            raise TraceError(f"{path}: more than {MAX_PROBE_BYTES} bytes: not a probe (at most 1 MiB of text)")
    except (OSError, TraceError) as e:
        if problems is not None:
            problems.append(f"{e if isinstance(e, TraceError) else f'{path}: {e.strerror or e}'}; "
                            "the trace is read without its probe")
        return ""
    try:
        return raw.decode()
    except UnicodeDecodeError as e:
        if problems is not None:
            problems.append(f"{path}: byte offset {e.start}: not UTF-8; bytes that are not were replaced")
        return raw.decode("utf-8", errors="replace")


def load(path) -> Trace:
    """Open a trace directory (or a parent holding exactly one run). What could not be read
    is skipped and described in `Trace.problems`; a directory that is no trace at all, or
    whose event log cannot be read, is a TraceError."""
    run = find_run_dir(path)
    problems: list[str] = []
    events = read_events(run / "event.log", problems)
    probe_text = read_probe_text(run / "probe.toml", problems)
    return Trace(run, probe_text, events, _launches(run, events, problems), problems)


def find_job_dir(path) -> Path | None:
    """`path` if it is a job directory, or its only job subdirectory when it holds no run of its
    own (a trace directory after one `neutrino ... -- torchrun ...`); else None."""
    path = Path(path)
    if find_rank_dirs(path):
        return path
    if not path.is_dir() or (path / "event.log").exists():
        return None
    subs = [p for p in _entries(path) if p.is_dir()]
    if any((p / "event.log").exists() for p in subs):
        return None
    jobs = [p for p in subs if find_rank_dirs(p)]
    return jobs[0] if len(jobs) == 1 else None


def load_job(path) -> list[tuple[int, Trace]]:
    """(rank, trace) of every rank of a job directory, ordered by rank; for an `-o` trace of several
    processes (find_process_dirs), (i, trace) of each process in order of start."""
    ranks = find_rank_dirs(path) or list(enumerate(find_process_dirs(path)))
    if not ranks:
        raise TraceError(f"{path}: not a job directory (no rank<R>/ run directory in it)")
    return [(rank, load(run)) for rank, run in ranks]


def read_index(run: Path, events: list[dict], problems: list[str] | None = None) -> list[dict]:
    """`launch` events rebuilt from result/index.bin (runs written by the native writer). Records are
    read in chunks, holes of a sparse file skipped; a record whose seq is 0 (zeros: a hole, a block
    never written) is no launch and is counted in `problems`."""
    path = run / "result" / "index.bin"
    try:
        if not path.exists():
            return []
        with open_regular(path, "the launch index") as fh:
            kernels, frames = index_names(events)
            out, zeros = [], 0
            for recs in _index_chunks(fh, path):
                zeros += int(np.count_nonzero(recs["seq"] == 0))
                keep = (recs["seq"] != 0) & (recs["status"] == 0) & np.isin(recs["kernel_id"], list(kernels))
                out += [_index_launch(r, kernels, frames) for r in recs[keep]]
    except OSError as e:
        raise TraceError(f"{path}: cannot read the launch index: {e.strerror or e}") from None
    if zeros and problems is not None:
        problems.append(f"{path}: {zeros} record(s) of zeros (seq 0) skipped")
    return out


INDEX_CHUNK = 1 << 16  # index records read at a time


def _index_chunks(fh, path: Path) -> Iterator[np.ndarray]:
    head = fh.read(16)
    if len(head) < 16 or head[:8] != INDEX_MAGIC:
        raise TraceError(f"{path}: not a Neutrino launch index (bad magic)")
    version, rec_size = np.frombuffer(head[8:16], "<u4")
    if int(version) != INDEX_VERSION or int(rec_size) != INDEX_RECORD.itemsize:
        raise TraceError(f"{path}: index version {int(version)} with {int(rec_size)}-byte records; "
                         f"this reader knows version {INDEX_VERSION}")
    chunk = INDEX_CHUNK * INDEX_RECORD.itemsize
    while True:
        here = fh.tell()
        if _hole(fh.fileno(), here, chunk) and here < os.fstat(fh.fileno()).st_size:
            fh.seek(here + chunk)  # zeros: no launch recorded there
            continue
        raw = fh.read(chunk)
        if len(raw) < INDEX_RECORD.itemsize:  # a record cut short by a crash is ignored
            return
        yield np.frombuffer(raw, INDEX_RECORD, count=len(raw) // INDEX_RECORD.itemsize)


def index_names(events: list[dict]) -> tuple[dict[int, tuple[str, str]], dict[int, str]]:
    """kernel id -> (kernel name, result file), frame id -> frame, from the event log."""
    kernels: dict[int, tuple[str, str]] = {}
    frames: dict[int, str] = {}
    for ev in events:
        if ev.get("event") == "instrument" and isinstance(ev.get("kernel_dir"), str):
            name = ev["kernel_dir"].rsplit("/", 1)[-1]
            k = name.split("_", 1)[0]
            if k.isdigit() and int(k) < 1 << 32:
                kernels[int(k)] = (str(ev.get("kernel", "")), f"result/{name}.ntr")
        elif ev.get("event") == "frame" and isinstance(ev.get("id"), int):
            frames[ev["id"]] = ev.get("frame")
    return kernels, frames


def _index_launch(r, kernels: dict, frames: dict) -> dict:
    kernel, rel = kernels[int(r["kernel_id"])]
    duration = float(r["duration_ns"])
    graph = int(r["graph"])
    return {
        "event": "launch", "index": int(r["seq"]) - 1, "kernel": kernel, "grid": [int(v) for v in r["grid"]],
        "block": [int(v) for v in r["block"]], "shared_bytes": int(r["shared_bytes"]),
        "stream": hex(int(r["stream"])), "result": rel, "result_offset": int(r["offset"]),
        "frame": frames.get(int(r["frame_id"])), "duration_ns": duration if duration >= 0 else None,
        "kernel_launch": int(r["kernel_launch"]),
        **({"graph": graph >> 32, "graph_node": graph & 0xFFFFFFFF, "replay": int(r["kernel_launch"])}
           if graph else {}),
    }


def launch_events(run: Path, events: list[dict], problems: list[str] | None = None) -> list[dict]:
    """Every probed launch of a run: `launch` events of the event log, then those of the index."""
    return [e for e in events if e.get("event") == "launch"] + read_index(run, events, problems)


def _launches(run: Path, events: list[dict], problems: list[str] | None = None) -> list[Launch]:
    """The launches of a run. A launch event that cannot be used (values of the wrong kind or
    out of range, a result file missing, an index seen before) is skipped and described in
    `problems`: the first MAX_NOTED one by one, the others counted (a corrupt event.log never
    raises a bare ValueError, nor floods the report)."""
    out, seen, skipped = [], set(), []
    for ev in launch_events(run, events, problems):
        if not isinstance(ev.get("result"), str):
            continue
        try:
            p = run / _inside_run(ev["result"])
            if not p.is_file():  # raises for a name too long or holding a NUL
                missing = "no result file" if not p.exists() else "not a regular file:"
                raise FileNotFoundError(f"{missing} {ev['result'][:200]}")
            launch = _launch_of(ev, p)
            if launch.index in seen:
                raise ValueError("an index seen before (a repeated event line)")
        except (TypeError, ValueError, KeyError, OverflowError, OSError) as e:
            reason = f"no {e}" if isinstance(e, KeyError) else str(e)[:200]
            skipped.append(f"launch event {repr(ev.get('index'))[:40]} skipped: {reason}")
            continue
        seen.add(launch.index)
        out.append(launch)
    if problems is not None and skipped:
        log = run / "event.log"
        problems += [f"{log}: {line}" for line in skipped[:MAX_NOTED]]
        if len(skipped) > MAX_NOTED:
            problems.append(f"{log}: {len(skipped) - MAX_NOTED} more launch event(s) skipped")
    out.sort(key=lambda launch: launch.index)
    return out


def _inside_run(relative: str) -> str:
    """A path named by an event, relative to the run directory; ValueError for one that leads out of it."""
    if relative.startswith(("/", "\\")) or ".." in relative.replace("\\", "/").split("/"):
        raise ValueError(f"path {relative[:200]!r} leads out of the run directory")
    return relative


MAX_NOTED = 20  # skipped launches described one by one in Trace.problems; the others are counted


def _dims(value, limit: int = 1 << 32) -> tuple[int, int, int]:
    dims = tuple(int(v) for v in value)
    if len(dims) != 3:
        raise ValueError(f"{value!r} is not three dimensions")
    if not all(0 <= d < limit for d in dims):
        raise ValueError(f"dimensions {list(dims)!r} out of range (0 to 2^32 - 1)")
    return dims


def _launch_of(ev: dict, path: Path) -> Launch:
    duration = ev.get("duration_ns")
    if duration is not None:
        duration = float(duration)
        if not math.isfinite(duration):
            raise ValueError(f"duration_ns {duration} is not a finite number")
        duration = duration if duration >= 0 else None  # < 0: unknown, as in result/index.bin
    frame = ev.get("frame")
    index, shared_bytes = int(ev["index"]), int(ev.get("shared_bytes", 0))
    offset = int(ev.get("result_offset", 0) or 0)
    if not 0 <= index < 1 << 63 or not 0 <= offset < 1 << 63 or not 0 <= shared_bytes < 1 << 32:
        raise ValueError(f"index {index}, result_offset {offset} or shared_bytes {shared_bytes} out of range")
    block = _dims(ev.get("block", (0, 0, 0)))
    if math.prod(block) > 1 << 31:
        raise ValueError(f"a block of {math.prod(block)} threads")
    return Launch(
        index=index,
        kernel=str(ev.get("kernel", "")),
        grid=_dims(ev.get("grid", (0, 0, 0))),
        block=block,
        shared_bytes=shared_bytes,
        duration_ns=duration,
        frame=frame if isinstance(frame, str) else None,
        result_path=path,
        event=ev,
        result_offset=offset,
    )
