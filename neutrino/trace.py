"""Trace directories: a numpy-only reader of result files and of runs.

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
The layout is neutrino.maps' (``map_buffer_bytes`` is the one rule that sizes
any map's device buffer); writing is neutrino.trace_writer's, finding run
directories neutrino.rundirs'. Their names are also importable from here, as
callers written before the split import them.
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
from typing import Iterator

import attrs
import numpy as np

from neutrino.maps import (  # noqa: F401 - the layout's names, re-exported for callers of neutrino.trace
    FIELD_DESC, FIELD_TYPES, FILE_HEADER, INDEX_HEADER_TAIL, INDEX_MAGIC, INDEX_RECORD, INDEX_VERSION, LEVELS, MAGIC,
    MAP_HEADER, MAP_TYPES, ROW_ALIGN, SECTION_ALIGN, STRIPES, VERSION, _TYPE_BY_WIDTH, Buckets, Field, MapSection,
    TraceError, _fields, align, buffer_bytes, fold_rows, map_buffer_bytes, record_dtype, section_bytes, stripe_row_bytes,
    units_for, RING_BUDGET_SHARE, RING_HEADER, RING_RECORDS_PER_UNIT, RING_SECTION, ring_bytes, ring_records_offset,
    ring_slot_limit, ring_slots, learned_slots_per_unit, RING_LEARN_LAUNCHES)
from neutrino.rundirs import _entries, find_job_dir, find_process_dirs, find_rank_dirs, find_run_dir  # noqa: F401
from neutrino.trace_writer import (  # noqa: F401 - re-exported for callers of neutrino.trace (tests)
    FrameLayout, append_encoded, append_frame, encode_header, frame_layout, write_result)

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
    lost: int = 0  # a ring's reservations past its last slot (records never written): part of `dropped`

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
        valid, dropped = 0, int(self.lost)
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
                m = _read_map(fh, path, size, offset, launch=(head["grid"], head["block"]))
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


def _read_map(fh, path: Path, file_size: int, base: int = 0, launch=None) -> MapData:
    """One map header and its section; `launch`: the frame's (grid, block), which a ring's units must match."""
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
    ring = kind == "array" and int(mh["cap_is_count"]) == RING_SECTION
    if size != section_bytes(kind, units, cap, rb, ring) or offset + size > file_size:
        raise TraceError(f"{where}: section size/offset do not match its layout (truncated file?) "
                         f"(map header at offset {at})")
    if ring:
        if launch is not None and units != units_for(LEVELS[level_i], *launch):
            raise TraceError(f"{where}: a ring of {units} units in a launch of {units_for(LEVELS[level_i], *launch)}: "
                             f"corrupt file (map header at offset {at})")
        return _ring_map(fh, path, name, mh, fields, offset, at)
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


def _ring_map(fh, path: Path, name: str, mh, fields: list[Field], offset: int, at: int) -> MapData:
    """A count-sized map's ring, read as the per-unit layout every reader knows: unit u's records in
    the order the unit reserved them (a stable sort of the slots by their unit tag), `cap` = the most
    any unit has, `counts` = each unit's records; the reservations past the ring's end are `lost`."""
    units, slots, rb = int(mh["units"]), int(mh["cap"]), int(mh["record_bytes"])
    where = f"{path}: map {name}"
    if units > 1 << 32:  # a unit tag is a u32
        raise TraceError(f"{where}: a ring of {units} units (at most 2^32): corrupt file (map header at offset {at})")
    head = int(_map_array(fh, path, np.dtype("<u8"), offset, (1,))[0])
    written = min(head, slots)
    tags = np.asarray(_map_array(fh, path, np.dtype("<u4"), offset + RING_HEADER, (slots,))[:written])
    if written and int(tags.max()) >= units:
        raise TraceError(f"{where}: a ring slot names unit {int(tags.max())} of {units}: corrupt file "
                         f"(map header at offset {at})")
    dtype = record_dtype(fields, rb)
    ring = np.asarray(_map_array(fh, path, dtype, offset + ring_records_offset(slots), (slots,))[:written])
    counts = np.zeros(units, np.uint32)
    if written:
        seen = np.bincount(tags)
        counts[: len(seen)] = seen
    cap = int(counts.max()) if written else 0
    order = np.argsort(tags, kind="stable")  # a unit's slots in the order it reserved them
    starts = np.cumsum(counts, dtype=np.int64) - counts
    column = np.arange(written, dtype=np.int64) - np.repeat(starts, counts)
    records = np.zeros((units, cap), dtype)
    records[tags[order].astype(np.int64), column] = ring[order]
    return MapData(name, LEVELS[int(mh["level"])], cap, rb, units, tuple(fields), True, counts, records,
                   lost=head - written)


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
    # where duration_ns comes from: "events" (the runtime's CUDA events around the launch), "timeline" (the
    # timeline's record of this probed launch: CUPTI's end - start), None (unknown)
    duration_from: str | None = None

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


def load(path, *, timeline_durations: bool = True) -> Trace:
    """Open a trace directory (or a parent holding exactly one run). What could not be read
    is skipped and described in `Trace.problems`; a directory that is no trace at all, or
    whose event log cannot be read, is a TraceError. `timeline_durations`: launch durations from
    the timeline's records (durations_from_timeline; False leaves the events' alone, for the
    runtime's own reads at exit, which need no durations)."""
    run = find_run_dir(path)
    problems: list[str] = []
    events = read_events(run / "event.log", problems)
    probe_text = read_probe_text(run / "probe.toml", problems)
    launches = _launches(run, events, problems)
    if timeline_durations:
        durations_from_timeline(run, launches, problems)
    return Trace(run, probe_text, events, launches, problems)


def timeline_gpu_ns(run: Path, problems: list[str] | None = None) -> dict[int, int]:
    """Probed launch index -> the GPU time (ns) of the timeline's record of it (neutrino.timeline.probed_gpu_ns).
    Empty with no timeline; a timeline that cannot be read is described in `problems`."""
    if not (run / "timeline.bin").is_file():
        return {}
    from neutrino.timeline import probed_gpu_ns

    try:
        return probed_gpu_ns(run)
    except (OSError, TraceError) as e:
        if problems is not None:
            problems.append(f"{e}; launch durations are not taken from the timeline")
        return {}


def launch_duration(ev: dict, gpu_ns: dict[int, int]) -> tuple[float | None, str | None]:
    """A launch event's (duration_ns, where it comes from): its timeline record's GPU time where the timeline
    has one (`timeline_gpu_ns`; not for graph replays, whose node records are sampled), else the runtime's
    events' time (`duration_ns` of the event), else (None, None)."""
    index = ev.get("index")
    if not ev.get("graph") and isinstance(index, int) and index in gpu_ns:
        return float(gpu_ns[index]), "timeline"
    duration = ev.get("duration_ns")
    if isinstance(duration, (int, float)) and not isinstance(duration, bool) and duration >= 0:
        return float(duration), "events"
    return None, None


def durations_from_timeline(run: Path, launches: list[Launch], problems: list[str] | None = None) -> int:
    """Each launch's duration from its timeline record where the timeline has one (launch_duration): the
    kernel's own GPU time, the same kind of time for every launch (events add the launch's own latency, and
    by default only a kernel's first launches are timed by events). How many launches took it."""
    gpu_ns = timeline_gpu_ns(run, problems) if any(la.graph is None for la in launches) else {}
    filled = 0
    for la in launches:
        if la.graph is None and la.index in gpu_ns:
            la.duration_ns, la.duration_from = float(gpu_ns[la.index]), "timeline"
            filled += 1
    return filled


def load_job(path) -> list[tuple[int, Trace]]:
    """(rank, trace) of every rank of a job directory, ordered by rank; for an `-o` trace of several
    processes (find_process_dirs), (i, trace) of each process in order of start."""
    ranks = find_rank_dirs(path) or list(enumerate(find_process_dirs(path)))
    if not ranks:
        raise TraceError(f"{path}: not a job directory (no rank<R>/ run directory in it)")
    return [(rank, load(run)) for rank, run in ranks]


def read_index(run: Path, events: list[dict], problems: list[str] | None = None) -> list[dict]:
    """`launch` events rebuilt from result/index.bin (runs written by the native writer), in file order."""
    kernels, frames = index_names(events)
    records, usable = index_records(run, kernels, problems)
    return [index_launch(records[i], kernels, frames) for i in usable]


INDEX_CHUNK = 1 << 16  # index records scanned at a time


def index_records(run: Path, kernels, problems: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The one reader of result/index.bin: (its records, memory-mapped; the positions, in file order, of
    those that are launches: status 0 and a kernel id in `kernels`). Records are scanned in chunks, holes
    of a sparse file skipped; a record whose seq is 0 (zeros: a hole, a block never written) is no launch
    and is counted in `problems`; a record cut short by a crash is ignored. TraceError for a file that is
    not an index (naming it)."""
    path = Path(run) / "result" / "index.bin"
    none = (np.zeros(0, INDEX_RECORD), np.zeros(0, np.int64))
    if not path.exists():
        return none
    try:
        with open_regular(path, "the launch index") as fh:
            count = _index_header(fh, path)
            if count == 0:
                return none
            records = np.memmap(path, INDEX_RECORD, mode="r", offset=16, shape=(count,))
            known = np.fromiter((int(k) for k in kernels), np.int64)
            usable, zeros = [], 0
            for lo in range(0, count, INDEX_CHUNK):
                hi = min(count, lo + INDEX_CHUNK)
                if _hole(fh.fileno(), 16 + lo * INDEX_RECORD.itemsize, (hi - lo) * INDEX_RECORD.itemsize):
                    continue  # zeros: no launch recorded there
                chunk = records[lo:hi]
                seq = np.asarray(chunk["seq"])
                zeros += int(np.count_nonzero(seq == 0))
                keep = (seq != 0) & (np.asarray(chunk["status"]) == 0) & np.isin(chunk["kernel_id"], known)
                usable.append(np.flatnonzero(keep) + lo)
    except OSError as e:
        raise TraceError(f"{path}: cannot read the launch index: {e.strerror or e}") from None
    if zeros and problems is not None:
        problems.append(f"{path}: {zeros} record(s) of zeros (seq 0) skipped")
    return records, (np.concatenate(usable) if usable else none[1])


def _index_header(fh, path: Path) -> int:
    """Check the index header; the number of whole records that follow it."""
    head = fh.read(16)
    if len(head) < 16 or head[:8] != INDEX_MAGIC:
        raise TraceError(f"{path}: not a Neutrino launch index (bad magic)")
    version, rec_size = np.frombuffer(head[8:16], "<u4")
    if int(version) != INDEX_VERSION or int(rec_size) != INDEX_RECORD.itemsize:
        raise TraceError(f"{path}: index version {int(version)} with {int(rec_size)}-byte records; "
                         f"this reader knows version {INDEX_VERSION}")
    return (os.fstat(fh.fileno()).st_size - 16) // INDEX_RECORD.itemsize


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


def index_launch(r, kernels: dict, frames: dict) -> dict:
    """The launch event of one index record (kernel id -> (name, result file) and frame names: index_names)."""
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
        duration_from=None if duration is None else "events",
    )
