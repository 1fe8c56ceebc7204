"""`neutrino export TRACE|JOB --parquet DIR`: the trace as a Parquet dataset (pyarrow).

Normative layout: spec/trace-format.md, "Parquet dataset". One directory per table,
partitioned Hive-style: `launches/rank=R/`, `events/rank=R/`, `timeline/rank=R/`,
`ranges/rank=R/`, `launch_args/rank=R/`, and one table per map,
`map_<name>/rank=R/kernel_key=K/part-N.parquet`. The partition columns live in the
directory names only. `_neutrino_schema.json` names the schema version, the tables, the
sources and their signature (the sizes and times of the files read), so that a cached
export is reused while the trace is unchanged.

Streaming: launches are read kernel by kernel (`launch_stream`), each frame is read, turned
into Arrow record batches and dropped; a table's batches are written as a row group once
they hold ROW_GROUP_ROWS rows. Memory is bounded by one row group per open table, whatever
the size of the trace.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np

from neutrino import trace as nt
from neutrino.analysis import context_tables, launch_stream
from neutrino.analysis import _common as C
from neutrino.errors import NeutrinoError

SCHEMA_VERSION = 1
SCHEMA_FILE = "_neutrino_schema.json"
ROW_GROUP_ROWS = 1 << 20
WRITE_BATCH_ROWS = 1 << 16  # rows the Parquet writer encodes at a time (its default, 1024, costs a call per 1024 rows)
CHUNK_RECORDS = 1 << 21  # record slots of one map read at a time (a section may be GBs, memory-mapped)
COMPRESSION = "lz4"  # LZ4_RAW: read by DuckDB, Spark >= 3.4 and pyarrow; cheaper than snappy at about its ratio
# Map tables: only `kernel` is dictionary-encoded (the record fields are mostly distinct values:
# trying a dictionary first costs more than it saves; `launch` and `kernel_launch` are runs of one
# value that LZ4 shrinks for less than a dictionary costs); the unit column rises by steps: delta-encoded.
MAP_DICTIONARY = ["kernel"]
MAP_ENCODING = {"unit": "DELTA_BINARY_PACKED"}
# No min/max statistics for `kernel` in map tables: a partition holds one kernel, and the statistics
# of a dictionary column cost a hash of every row's index.
MAP_NO_STATISTICS = ("kernel",)
SOURCE_FILES = ("event.log", "probe.toml", "timeline.bin", "timeline_names.txt", "timeline_graphs.tsv", "ranges.bin",
                "ranges_names.txt", "launch_args.jsonl")


class ExportError(NeutrinoError):
    """A dataset that cannot be written (a destination in the way, a disk error)."""


def _pa():
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401 - the submodule the writers use
    except ImportError:
        raise ExportError("the Parquet export needs pyarrow: pip install pyarrow") from None
    return pyarrow


class TableWriter:
    """One partition of one table: Parquet part files of row groups of ROW_GROUP_ROWS rows.

    Batches of one schema go to one part file; a batch of another schema (a map whose fields
    differ between two kernels of the same partition) starts the next part file.
    """

    def __init__(self, directory: Path, table: str):
        self.directory, self.table = directory, table
        self.batches: list = []
        self.rows = self.buffered = 0
        self.writer = None
        self.schema = None
        self.parts = 0

    def add(self, batch) -> None:
        if self.schema is not None and not batch.schema.equals(self.schema):
            self.close()
        self.schema = batch.schema
        self.batches.append(batch)
        self.buffered += batch.num_rows
        self.rows += batch.num_rows
        if self.buffered >= ROW_GROUP_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.batches:
            return
        pa = _pa()
        writer = self._open(self.schema)
        table = pa.Table.from_batches(self.batches).replace_schema_metadata(writer.schema.metadata)
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.batches, self.buffered = [], 0

    def _open(self, schema):
        """The part file being written (opened on first use with `schema`)."""
        if self.writer is not None:
            return self.writer
        pa = _pa()
        self.directory.mkdir(parents=True, exist_ok=True)
        schema = schema.with_metadata({"neutrino_schema_version": str(SCHEMA_VERSION), "neutrino_table": self.table})
        options = {}
        if self.table.startswith("map_"):
            names = set(schema.names)
            options = {"use_dictionary": [c for c in MAP_DICTIONARY if c in names],
                       "column_encoding": {c: e for c, e in MAP_ENCODING.items() if c in names},
                       "write_batch_size": WRITE_BATCH_ROWS,
                       "write_statistics": [c for c in schema.names if c not in MAP_NO_STATISTICS]}
        # A kernel name met again later (instrumented in two modules, or in the event log and the
        # index) reopens its partition: the next free part number, never an overwrite.
        while (self.directory / f"part-{self.parts}.parquet").exists():
            self.parts += 1
        self.writer = pa.parquet.ParquetWriter(self.directory / f"part-{self.parts}.parquet", schema,
                                               compression=COMPRESSION, **options)
        self.parts += 1
        return self.writer

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()
        self.writer = None


class ArrayMapWriter(TableWriter):
    """One partition of an array map's table, written from numpy columns.

    The launches' pieces (`add_piece`) are gathered into row groups of ROW_GROUP_ROWS rows
    (the last of a part file shorter), written as one table whose per-launch columns are built
    once per row group (_head_columns: `kernel` one dictionary for the row group, which Parquet's
    writer takes as it is, where a dictionary per launch makes it decode and hash every row again).
    The record columns are never null and written as `required` (no definition levels to encode).
    """

    def __init__(self, directory: Path, table: str):
        super().__init__(directory, table)
        self.pieces: list[tuple[dict, int, dict[str, np.ndarray]]] = []  # (head, rows, columns)
        self.layout: tuple | None = None  # (name, dtype) of the columns of the pending pieces

    def add_piece(self, head: dict, rows: int, columns: dict[str, np.ndarray]) -> None:
        layout = tuple((name, values.dtype.str) for name, values in columns.items())
        if self.layout is not None and layout != self.layout:
            self.close()  # fields that differ between two kernels of the partition: the next part file
        self.layout = layout
        self.pieces.append((head, rows, columns))
        self.buffered += rows
        self.rows += rows
        while self.buffered >= ROW_GROUP_ROWS:
            self._write_group(ROW_GROUP_ROWS)

    def flush(self) -> None:
        if self.buffered:
            self._write_group(self.buffered)

    def _take(self, rows: int) -> list[tuple[dict, int, dict[str, np.ndarray]]]:
        """The first `rows` rows of the pending pieces (a piece cut in two when it straddles)."""
        out = []
        while rows:
            head, n, columns = self.pieces.pop(0)
            if n > rows:
                self.pieces.insert(0, (head, n - rows, {k: v[rows:] for k, v in columns.items()}))
                head, n, columns = head, rows, {k: v[:rows] for k, v in columns.items()}
            out.append((head, n, columns))
            rows -= n
        return out

    def _write_group(self, rows: int) -> None:
        pa = _pa()
        pieces = self._take(rows)
        self.buffered -= rows
        sizes = [n for _, n, _ in pieces]
        arrays = _head_columns(pa, [head for head, _, _ in pieces], sizes)
        for name, _ in self.layout:
            arrays[name] = pa.chunked_array([pa.array(columns[name]) for _, _, columns in pieces])
        schema = pa.schema([pa.field(name, array.type, nullable=name in ("launch", "kernel_launch"))
                            for name, array in arrays.items()])
        writer = self._open(schema)
        table = pa.Table.from_arrays(list(arrays.values()), schema=writer.schema)
        writer.write_table(table, row_group_size=rows)


@attrs.define
class ExportSummary:
    out: Path
    tables: dict[str, int] = attrs.Factory(dict)  # table -> rows
    map_bytes: int = 0  # bytes of map sections read
    launches: int = 0
    seconds: float = 0.0
    problems: list[str] = attrs.Factory(list)  # what could not be read, named


def _exact_sum(values: np.ndarray) -> int:
    """The sum of u32/u64 values as a Python int, exact (u64: the high and low 32-bit halves summed
    apart, read through a view: no temporary; a chunk holds fewer than 2^32 values)."""
    if values.dtype.itemsize <= 4:
        return int(values.sum(dtype=np.uint64))
    halves = np.ascontiguousarray(values).view("<u4").reshape(-1, 2)  # little-endian: [low, high]
    return (int(halves[:, 1].sum(dtype=np.uint64)) << 32) + int(halves[:, 0].sum(dtype=np.uint64))


def _add_stats(stats: dict, fields: dict[str, np.ndarray]) -> None:
    """Fold one chunk into the launch's per-field [records, sum, min, max]."""
    for name, values in fields.items():
        entry = stats.setdefault(name, [0, 0, None, None])
        entry[0] += len(values)
        entry[1] += _exact_sum(values)
        low, high = int(values.min()), int(values.max())
        entry[2] = low if entry[2] is None else min(entry[2], low)
        entry[3] = high if entry[3] is None else max(entry[3], high)


def _array_columns(md, stats: dict | None = None) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """The valid records of an array map of one launch, in pieces of at most CHUNK_RECORDS record
    slots: (rows, {unit, record, fields…} as numpy columns); `stats` (when given) gathers each
    field's records, sum, min and max over the launch."""
    cap, units = int(md.cap), int(md.units)
    if cap <= 0 or units == 0:
        return
    step = max(1, CHUNK_RECORDS // cap)
    names = md.records.dtype.names or ()
    for lo in range(0, units, step):
        hi = min(units, lo + step)
        counts = np.minimum(np.asarray(md.counts[lo:hi]), cap)
        flat = np.asarray(md.records[lo:hi]).reshape(-1)  # one contiguous block of (hi - lo) * cap slots
        if (counts == cap).all():
            fields = {name: np.ascontiguousarray(flat[name]) for name in names}
            unit = np.repeat(np.arange(lo, hi, dtype=np.int64), cap)
            record = np.tile(np.arange(cap, dtype=np.int32), hi - lo)
        else:
            slots = np.flatnonzero(np.arange(cap, dtype=np.int64)[None, :] < counts[:, None])  # ascending
            fields = {name: flat[name].take(slots) for name in names}
            unit, record = _unit_and_slot(slots, cap)
            unit += lo
        if not len(unit):
            continue
        if stats is not None:
            _add_stats(stats, fields)
        yield len(unit), {"unit": unit, "record": record, **fields}


def _unit_and_slot(slots: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """(unit, record slot) of flat record positions: a shift and a mask when cap is a power of two
    (an integer division costs several times more)."""
    if cap & (cap - 1) == 0:
        return slots >> (cap.bit_length() - 1), (slots & (cap - 1)).astype(np.int32)
    unit, record = np.divmod(slots, cap)
    return unit, record.astype(np.int32)


def _head_columns(pa, heads: list[dict], sizes: list[int]) -> dict:
    """The per-launch columns of a map table's rows: `heads[i]` repeated `sizes[i]` times. `kernel` is
    a dictionary array (its Parquet dictionary indices written as they are); `launch` and
    `kernel_launch` plain int64 (the Parquet writer cannot take an integer dictionary as it is: it
    would decode and hash every row; LZ4 shrinks their runs of one value to almost nothing)."""
    kernels = [h["kernel"] for h in heads]
    distinct = list(dict.fromkeys(kernels))
    codes = _runs([distinct.index(k) for k in kernels], sizes, np.int32)
    out = {"kernel": pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(distinct, pa.string()))}
    for name in ("launch", "kernel_launch"):
        values = [h[name] for h in heads]
        column = _runs([0 if v is None else v for v in values], sizes, np.int64)
        if None in values:
            out[name] = pa.array(column, mask=~_runs([v is not None for v in values], sizes, bool))
        else:
            out[name] = pa.array(column)
    return out


def _runs(values: list, sizes: list[int], dtype) -> np.ndarray:
    """`values[i]` repeated `sizes[i]` times (a slice filled per value: np.repeat copies element by element)."""
    out = np.empty(sum(sizes), dtype)
    start = 0
    for value, size in zip(values, sizes):
        out[start:start + size] = value
        start += size
    return out


def _sum_batch(pa, md, head: dict):
    row = np.asarray(md.records)[0, 0]
    columns = {**_head_columns(pa, [head], [1]),
               **{f.name: pa.array([int(row[f.name])], pa.uint64()) for f in md.fields}}
    return pa.RecordBatch.from_pydict(columns)


def _hist_batch(pa, md, head: dict):
    hist = md.histogram()
    low, high = hist.buckets.bounds()
    keep = np.flatnonzero(hist.counts)
    n = len(keep)
    top = 1 << 64
    columns = {**_head_columns(pa, [head], [n]), "bucket": pa.array(keep.astype(np.int32)),
               "low": pa.array([int(low[i]) for i in keep], pa.uint64()),
               "high": pa.array([None if int(high[i]) >= top else int(high[i]) for i in keep], pa.uint64()),
               "count": pa.array(hist.counts[keep].astype(np.uint64))}
    return pa.RecordBatch.from_pydict(columns)


def map_batches(pa, md, head: dict) -> list:
    """The rows of one sum or hist map of one launch (spec/trace-format.md, "Parquet dataset");
    array maps: _array_columns."""
    return [_sum_batch(pa, md, head) if md.type == "sum" else _hist_batch(pa, md, head)]


LAUNCH_COLUMNS = (
    ("launch", "int64"), ("kernel", "string"), ("kernel_key", "string"), ("kernel_launch", "int64"),
    ("pid", "int64"), ("grid_x", "int64"), ("grid_y", "int64"), ("grid_z", "int64"), ("block_x", "int64"),
    ("block_y", "int64"), ("block_z", "int64"), ("shared_bytes", "int64"), ("stream", "string"),
    ("duration_ns", "float64"), ("duration_from", "string"), ("graph", "int64"), ("graph_node", "int64"),
    ("replay", "int64"), ("frame", "string"), ("dropped", "int64"), ("maps", "int64"), ("result", "string"), ("result_offset", "int64"),
)


def _arrow_type(pa, kind: str):
    return pa.decimal128(38, 0) if kind == "decimal" else getattr(pa, kind)()


FIELD_STATS_COLUMNS = (
    ("launch", "int64"), ("kernel", "string"), ("kernel_key", "string"), ("kernel_launch", "int64"),
    ("map", "string"), ("field", "string"), ("records", "int64"), ("sum", "decimal"), ("min", "uint64"),
    ("max", "uint64"),
)


class RowBuffer:
    """Rows of a small-row table (launches, events, …) gathered as Python values, written in batches."""

    def __init__(self, writer: TableWriter, columns: tuple, batch_rows: int = 1 << 16):
        self.writer, self.columns, self.batch_rows = writer, columns, batch_rows
        self.values: dict[str, list] = {name: [] for name, _ in columns}

    def add(self, row: dict) -> None:
        for name, _ in self.columns:
            self.values[name].append(row.get(name))
        if len(self.values[self.columns[0][0]]) >= self.batch_rows:
            self.flush()

    def flush(self) -> None:
        pa = _pa()
        if not self.values[self.columns[0][0]]:
            return
        arrays = [pa.array(self.values[name], _arrow_type(pa, kind)) for name, kind in self.columns]
        self.writer.add(pa.RecordBatch.from_arrays(arrays, names=[name for name, _ in self.columns]))
        self.values = {name: [] for name, _ in self.columns}

    def close(self) -> None:
        self.flush()
        self.writer.close()


def _opt_int(value):
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and abs(value) < 2 ** 63 else None


def launch_row(ev: dict, pid, dropped: int, maps: int) -> dict:
    grid, block = launch_stream.dims(ev.get("grid")), launch_stream.dims(ev.get("block"))
    duration = ev.get("duration_ns")
    kernel = str(ev.get("kernel", ""))
    return {"launch": _opt_int(ev.get("index")), "kernel": kernel, "kernel_key": launch_stream.kernel_key(kernel),
            "kernel_launch": _opt_int(ev.get("kernel_launch")), "pid": _opt_int(pid),
            "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2],
            "block_x": block[0], "block_y": block[1], "block_z": block[2],
            "shared_bytes": _opt_int(ev.get("shared_bytes")), "stream": None if ev.get("stream") is None
            else str(ev.get("stream")), "duration_ns": float(duration) if isinstance(duration, (int, float))
            and not isinstance(duration, bool) else None, "duration_from": ev.get("duration_from"),
            "graph": _opt_int(ev.get("graph")),
            "graph_node": _opt_int(ev.get("graph_node")), "replay": _opt_int(ev.get("replay")),
            "frame": ev.get("frame") if isinstance(ev.get("frame"), str) else None, "dropped": dropped,
            "maps": maps, "result": str(ev.get("result")), "result_offset": _opt_int(ev.get("result_offset", 0) or 0)}


class DatasetWriter:
    """Writes the tables of one dataset directory; `summary` counts what was written."""

    def __init__(self, out: Path):
        self.out = out
        self.summary = ExportSummary(out)
        self.map_names: dict[str, str] = {}  # table directory -> map name
        self.map_types: dict[str, str] = {}
        self.problems: list[str] = []
        self.stat_rows: RowBuffer | None = None  # field_stats rows of the run being written

    def table_dir(self, table: str, rank: int, key: str | None = None) -> Path:
        path = self.out / table / f"rank={rank}"
        return path / f"kernel_key={key}" if key is not None else path

    def count(self, table: str, rows: int) -> None:
        if rows:
            self.summary.tables[table] = self.summary.tables.get(table, 0) + rows

    def export_run(self, rank: int, run: Path) -> None:
        events = nt.read_events(run / "event.log")
        start = next((e for e in events if e.get("event") == "start"), {})
        self._events(rank, run)
        self._launches(rank, run, events, start.get("pid"))
        write_context(self, rank, run)

    def _events(self, rank: int, run: Path) -> None:
        columns = (("line", "int64"), ("event", "string"), ("time", "float64"), ("pid", "int64"), ("json", "string"))
        writer = TableWriter(self.table_dir("events", rank), "events")
        rows = RowBuffer(writer, columns)
        with open(run / "event.log", encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                try:
                    value = json.loads(line)
                except (json.JSONDecodeError, RecursionError):
                    continue  # a line cut short by a crash (the trace reader skips it too)
                if not isinstance(value, dict) or not isinstance(value.get("event"), str):
                    continue
                when = value.get("time")
                rows.add({"line": number, "event": value["event"], "pid": _opt_int(value.get("pid")),
                          "time": float(when) if isinstance(when, (int, float)) and not isinstance(when, bool)
                          else None, "json": line.rstrip("\n")})
        rows.close()
        self.count("events", writer.rows)

    def _launches(self, rank: int, run: Path, events: list[dict], pid) -> None:
        pa = _pa()
        launches = TableWriter(self.table_dir("launches", rank), "launches")
        rows = RowBuffer(launches, LAUNCH_COLUMNS)
        stats_table = TableWriter(self.table_dir("field_stats", rank), "field_stats")
        self.stat_rows = RowBuffer(stats_table, FIELD_STATS_COLUMNS)
        current, writers = None, {}
        gpu_ns = nt.timeline_gpu_ns(run, self.problems)  # each launch's time from its timeline record where it has one
        for ev in launch_stream.launches_by_kernel(run, events):
            kernel = str(ev.get("kernel", ""))
            if kernel != current:
                self._close(writers)
                current, writers = kernel, {}
            try:
                frame = launch_stream.read_frame(run, ev)
            except (nt.TraceError, OSError, ValueError) as e:
                self.problems.append(f"rank {rank}: launch {ev.get('index')} of {kernel}: {e}")
                continue
            head = {"kernel": kernel, "launch": _opt_int(ev.get("index")), "kernel_launch": _opt_int(ev.get("kernel_launch"))}
            dropped = 0
            for md in frame.maps.values():
                dropped += md.dropped
                self._map(pa, writers, rank, md, head)
            duration, source = nt.launch_duration(ev, gpu_ns)
            ev = dict(ev, duration_ns=duration, duration_from=source)
            rows.add(launch_row(ev, pid, dropped, len(frame.maps)))
            self.summary.launches += 1
        self._close(writers)
        rows.close()
        self.stat_rows.close()
        self.count("launches", launches.rows)
        self.count("field_stats", stats_table.rows)

    def _map(self, pa, writers: dict, rank: int, md, head: dict) -> None:
        table = "map_" + C.safe_name(md.name, 60)
        if self.map_names.setdefault(table, md.name) != md.name:
            table = "map_" + launch_stream.kernel_key(md.name)  # two map names that sanitise alike
            self.map_names.setdefault(table, md.name)
        self.map_types[table] = md.type
        self.summary.map_bytes += _section_bytes(md)
        kind = ArrayMapWriter if md.type == "array" else TableWriter
        writer = writers.get((table, kind))
        if writer is None:
            directory = self.table_dir(table, rank, launch_stream.kernel_key(head["kernel"]))
            writer = writers[(table, kind)] = kind(directory, table)
        if md.type != "array":
            for batch in map_batches(pa, md, head):
                writer.add(batch)
            return
        stats: dict = {}
        for rows, columns in _array_columns(md, stats):
            writer.add_piece(head, rows, columns)
        key = launch_stream.kernel_key(head["kernel"])
        for field, (records, total, low, high) in stats.items():
            self.stat_rows.add({**head, "kernel_key": key, "map": md.name, "field": field, "records": records,
                                "sum": total, "min": low, "max": high})

    def _close(self, writers: dict) -> None:
        for (table, _), writer in writers.items():
            writer.close()
            self.count(table, writer.rows)


def _section_bytes(md) -> int:
    """Bytes of a map's section as read (counts and records; a sum/hist map's folded row)."""
    return int(np.asarray(md.counts).nbytes) + int(md.records.size) * int(md.records.dtype.itemsize)


def _struct_batches(pa, recs: np.ndarray, extra: dict[str, np.ndarray]) -> list:
    """Record batches of a structured array (u32[3] fields become NAME_x/_y/_z columns; `reserved*`
    fields are left out; `extra` string columns replace fields of those names), in chunks."""
    out = []
    for lo in range(0, len(recs), ROW_GROUP_ROWS):
        part = recs[lo:lo + ROW_GROUP_ROWS]
        columns = {}
        for name in part.dtype.names:
            if name.startswith("reserved") or name in extra:
                continue
            values = np.asarray(part[name])
            if values.ndim == 2:
                for i, axis in enumerate("xyz"[: values.shape[1]]):
                    columns[f"{name}_{axis}"] = pa.array(np.ascontiguousarray(values[:, i]))
            elif values.dtype.kind in "iuf":
                columns[name] = pa.array(np.ascontiguousarray(values))
        for name, values in extra.items():
            columns[name] = pa.array(list(values[lo:lo + ROW_GROUP_ROWS]), pa.string())
        out.append(pa.RecordBatch.from_pydict(columns))
    return out


def _context_timeline(dw: "DatasetWriter", pa, rank: int, run: Path) -> None:
    found = context_tables.read_timeline(run)
    if found is not None:
        recs, names = found
        origins = _origins(recs, names)
        write_batches(dw, "timeline", rank, _struct_batches(pa, recs, {"name": names, "origin": origins}))


def _context_graph_replays(dw: "DatasetWriter", pa, rank: int, run: Path) -> None:
    counts = context_tables.read_graph_replays(run)
    if counts is not None:
        write_batches(dw, "graph_replays", rank, _struct_batches(pa, counts, {}))


def _origins(recs: np.ndarray, names: np.ndarray) -> np.ndarray:
    """neutrino.timeline.origin of each kernel (classified once per distinct name); `copy`/`memset` otherwise."""
    from neutrino.timeline import KERNEL, MEMCPY, origin

    distinct, inverse = np.unique(np.asarray(names, dtype=str), return_inverse=True)
    out = np.array([origin(n) for n in distinct] + ["copy", "memset"], dtype=object)[inverse.reshape(-1)]
    kinds = recs["kind"]
    out[kinds == MEMCPY] = "copy"
    out[(kinds != KERNEL) & (kinds != MEMCPY)] = "memset"
    return out


def _context_ranges(dw: "DatasetWriter", pa, rank: int, run: Path) -> None:
    found = context_tables.read_ranges(run)
    if found is not None:
        recs, names, domains = found
        write_batches(dw, "ranges", rank, _struct_batches(pa, recs, {"name": names, "domain": domains}))


LAUNCH_ARG_COLUMNS = (
    ("launch", "int64"), ("argset", "int64"), ("kernel", "string"), ("arg", "int64"), ("size", "int64"),
    ("value", "int64"), ("hex", "string"), ("tensor_name", "string"), ("tensor_dtype", "string"),
    ("tensor_shape", "string"), ("tensor_strides", "string"), ("tensor_offset_bytes", "int64"),
    ("tensor_device", "int64"),
)


def _context_launch_args(dw: "DatasetWriter", pa, rank: int, run: Path) -> None:
    found = context_tables.read_launch_args(run)
    if found is None:
        return
    argsets, uses = found
    writer = TableWriter(dw.table_dir("launch_args", rank), "launch_args")
    rows = RowBuffer(writer, LAUNCH_ARG_COLUMNS)
    for launch, argset_id in sorted(uses.items()):
        argset = argsets.get(argset_id, {})
        for arg in argset.get("args") or ():
            if not isinstance(arg, dict):
                continue
            tensor = arg.get("tensor") if isinstance(arg.get("tensor"), dict) else {}
            rows.add({"launch": launch, "argset": argset_id, "kernel": str(argset.get("kernel", "")),
                      "arg": _opt_int(arg.get("index")), "size": _opt_int(arg.get("size")),
                      "value": _opt_int(arg.get("value")), "hex": arg.get("hex"),
                      "tensor_name": tensor.get("name"), "tensor_dtype": tensor.get("dtype"),
                      "tensor_shape": json.dumps(tensor["shape"]) if "shape" in tensor else None,
                      "tensor_strides": json.dumps(tensor["strides"]) if "strides" in tensor else None,
                      "tensor_offset_bytes": _opt_int(tensor.get("offset_bytes")),
                      "tensor_device": _opt_int(tensor.get("device"))})
    rows.close()
    dw.count("launch_args", writer.rows)


def write_batches(dw: "DatasetWriter", table: str, rank: int, batches: list) -> None:
    writer = TableWriter(dw.table_dir(table, rank), table)
    for batch in batches:
        writer.add(batch)
    writer.close()
    dw.count(table, writer.rows)


def write_context(dw: "DatasetWriter", rank: int, run: Path) -> None:
    pa = _pa()
    for part in (_context_timeline, _context_graph_replays, _context_ranges, _context_launch_args):
        try:
            part(dw, pa, rank, run)
        except (nt.TraceError, OSError, ValueError, KeyError) as e:
            dw.problems.append(f"rank {rank}: {run}: {e}")




# --------------------------------------------------------------------- the dataset


def source_signature(runs: list[tuple[int, Path]]) -> str:
    """What a cached export was made from: each run's files with their size and modification time."""
    import hashlib

    h = hashlib.sha256(str(SCHEMA_VERSION).encode())
    for rank, run in runs:
        h.update(f"{rank}\0{Path(run).resolve()}\0".encode())
        paths = [Path(run) / name for name in SOURCE_FILES]
        result = Path(run) / "result"
        if result.is_dir():
            paths += sorted(result.iterdir())
        for p in paths:
            try:
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def is_dataset(path) -> bool:
    return (Path(path) / SCHEMA_FILE).is_file()


def read_schema(path) -> dict:
    try:
        value = json.loads((Path(path) / SCHEMA_FILE).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ExportError(f"{Path(path) / SCHEMA_FILE}: cannot read the dataset description: {e}") from None
    if not isinstance(value, dict) or value.get("neutrino_schema_version") != SCHEMA_VERSION:
        raise ExportError(f"{path}: a Parquet dataset of schema version {value.get('neutrino_schema_version')!r}; "
                          f"this neutrino reads version {SCHEMA_VERSION} (export the trace again)")
    return value


def _schema_document(writer: DatasetWriter, runs, signature: str) -> dict:
    tables = {}
    for table, rows in sorted(writer.summary.tables.items()):
        entry = {"rows": rows, "partitioning": ["rank", "kernel_key"] if table.startswith("map_") else ["rank"]}
        if table in writer.map_names:
            entry.update(map=writer.map_names[table], map_type=writer.map_types.get(table))
        tables[table] = entry
    from neutrino import __version__

    return {"neutrino_schema_version": SCHEMA_VERSION, "written_by": f"neutrino {__version__}",
            "sources": [{"rank": rank, "run": str(Path(run).resolve())} for rank, run in runs],
            "source_signature": signature, "tables": tables, "problems": writer.problems[:100]}


def _export_members(partial: Path, runs: list[tuple[int, Path]]) -> DatasetWriter:
    """Write the tables of some runs into the dataset directory `partial` (one process's share)."""
    writer = DatasetWriter(Path(partial))
    for rank, run in runs:
        writer.export_run(rank, Path(run))
    writer.out = None  # what the parent merges: the counts, map names and problems
    return writer


def _merge(into: DatasetWriter, part: DatasetWriter) -> None:
    for table, rows in part.summary.tables.items():
        into.count(table, rows)
    into.map_names.update(part.map_names)
    into.map_types.update(part.map_types)
    into.problems += part.problems
    into.summary.launches += part.summary.launches
    into.summary.map_bytes += part.summary.map_bytes


def _write_runs(writer: DatasetWriter, runs: list[tuple[int, Path]], workers: int) -> None:
    """Every run's tables; ranks are independent partitions, so several processes may share them
    (forked: Arrow's thread pool and allocator survive a fork; a spawned process would re-run the
    caller's main script). A pool that breaks is not trusted: the runs are written again here."""
    import multiprocessing

    if workers <= 1 or len(runs) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        _merge(writer, _export_members(writer.out, runs))
        return
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    shares = [runs[i::workers] for i in range(workers)]
    parts = []
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(_export_members, [writer.out] * workers, shares))
    except BrokenProcessPool:
        for child in list(writer.out.iterdir()):
            shutil.rmtree(child)
        parts = [_export_members(writer.out, runs)]
    for part in parts:
        _merge(writer, part)


def default_workers(runs: int) -> int:
    """Processes for an export: one per CPU, at most one per run (NEUTRINO_EXPORT_WORKERS overrides)."""
    wanted = os.environ.get("NEUTRINO_EXPORT_WORKERS", "")
    count = int(wanted) if wanted.isdigit() and int(wanted) > 0 else (os.cpu_count() or 1)
    return max(1, min(count, runs))


def export(trace_path, out_dir, *, workers: int | None = None) -> ExportSummary:
    """Write the dataset of a trace or job to `out_dir` (replacing a dataset already there); the runs
    of a job are shared among `workers` processes (default_workers)."""
    _pa()
    runs = launch_stream.members(trace_path)
    out = Path(out_dir)
    if out.exists() and not is_dataset(out) and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"--parquet {out}: exists and is not a Neutrino Parquet dataset: not overwriting it")
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    started = time.perf_counter()
    signature = source_signature(runs)
    writer = DatasetWriter(partial)
    try:
        partial.mkdir(parents=True)
        _write_runs(writer, runs, default_workers(len(runs)) if workers is None else workers)
        (partial / SCHEMA_FILE).write_text(json.dumps(_schema_document(writer, runs, signature), indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(partial, out)
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise ExportError(f"--parquet {out}: cannot write: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    writer.summary.out = out
    writer.summary.seconds = time.perf_counter() - started
    writer.summary.problems = writer.problems
    return writer.summary
