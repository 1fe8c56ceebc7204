"""Corrupted trace directories: valid seeds, corruptions, and a runner of every reader entry point.

Used by tests/test_trace_corruption.py. The seeds are written with the writers of
`neutrino.trace` (the layouts of both writers: one result file per launch with `launch`
events, and per-kernel result files with result/index.bin), one per tool family:
block_sched (an array map), gmem_bytes and tensorop (sum maps), a hist map, dmat
(clock/address records, many launches), and a job directory of ranks. A corruption
is a function `(run root, rng) -> description` that damages a copy the way traces
are damaged in the wild: cut short, bytes flipped, event lines shuffled or
repeated, a directory where a file should be, huge ids and sizes, sparse files
declaring huge sections, NUL bytes in names, bytes that are not UTF-8.

`python tests/tracefuzz.py OUT.json DIR...` runs every reader entry point on each
trace directory DIR (the Python API and the `report`/`export` commands, in this
process) and writes what happened: per entry point its status (`ok`, `refused`:
a TraceError or a non-zero exit with our message, `traceback`, `hang`), its
seconds, and the process's peak resident memory after it. The test runs it in a
subprocess and reads the subprocess's own resource usage (os.wait4).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import resource
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import neutrino.trace as nt  # noqa: E402

ENTRY_SECONDS = 20.0  # no entry point may take longer, whatever the corruption


# ---------------------------------------------------------------- sections


def array_section(name: str, level: str, fields, record_bytes: int, cap: int, grid, block, rng,
                  fill: float = 1.0) -> nt.MapSection:
    """An array map of one launch: counts up to cap + 1 (some drops), random records."""
    units = nt.units_for(level, grid, block)
    buf = np.zeros(nt.buffer_bytes(units, cap, record_bytes), np.uint8)
    counts = rng.integers(0, cap + 2, units) * (rng.random(units) < fill)
    buf[: 4 * units].view("<u4")[:] = counts
    body = buf[nt.align(4 * units, 16):]
    body[:] = rng.integers(0, 256, body.size, dtype=np.uint8)
    return nt.MapSection(name, level, record_bytes, cap, units, fields, buf.tobytes())


def sum_section(name: str, fields: list[str], rng) -> nt.MapSection:
    record_bytes = 8 * len(fields)
    size = nt.section_bytes("sum", nt.STRIPES, 1, record_bytes)
    data = rng.integers(0, 1000, size // 8).astype("<u8").tobytes()
    return nt.MapSection(name, "thread", record_bytes, 1, nt.STRIPES,
                         [(f, "u64", 8 * i) for i, f in enumerate(fields)], data, type="sum")


def hist_section(name: str, spec: str, rng) -> nt.MapSection:
    buckets = nt.Buckets.parse(spec)
    record_bytes = 8 * buckets.count
    size = nt.section_bytes("hist", nt.STRIPES, 1, record_bytes)
    data = rng.integers(0, 50, size // 8).astype("<u8").tobytes()
    return nt.MapSection(name, "thread", record_bytes, 1, nt.STRIPES, [("value", "u64", 0)], data,
                         type="hist", buckets=spec)


def block_sched_section(grid, block, rng) -> nt.MapSection:
    """block_sched as the built-in tool writes it: one record per warp, start/elapsed/cuid."""
    units = nt.units_for("warp", grid, block)
    rec = np.zeros(units, np.dtype([("start", "<u8"), ("elapsed", "<u4"), ("cuid", "<u4")]))
    rec["start"] = 1000 + rng.integers(0, 5000, units)
    rec["elapsed"] = rng.integers(100, 3000, units)
    rec["cuid"] = rng.integers(0, 4, units)
    buf = np.zeros(nt.buffer_bytes(units, 1, 16), np.uint8)
    buf[: 4 * units].view("<u4")[:] = 1
    buf[nt.align(4 * units, 16):] = np.frombuffer(rec.tobytes(), np.uint8)
    return nt.MapSection("block_sched", "warp", 16, 1, units,
                         [("start", "u64", 0), ("elapsed", "u32", 8), ("cuid", "u32", 12)], buf.tobytes())


def dmat_section(grid, block, rng, cap: int = 4) -> nt.MapSection:
    units = nt.units_for("thread", grid, block)
    rec = np.zeros((units, cap), np.dtype([("clock", "<u8"), ("addr", "<u8")]))
    rec["clock"] = 10_000 + rng.integers(0, 100_000, (units, cap))
    rec["addr"] = 0x7F0000000000 + 128 * rng.integers(0, 4096, (units, cap))
    buf = np.zeros(nt.buffer_bytes(units, cap, 16), np.uint8)
    buf[: 4 * units].view("<u4")[:] = rng.integers(0, cap + 1, units)
    buf[nt.align(4 * units, 16):] = np.frombuffer(rec.tobytes(), np.uint8)
    return nt.MapSection("dmat", "thread", 16, cap, units, [("clock", "u64", 0), ("addr", "u64", 8)], buf.tobytes(),
                         cap_is_count=True)


def progress_section(grid, block, rng, cap: int = 4) -> nt.MapSection:
    """program_progress: per thread, the clock and the branches executed at each sample."""
    units = nt.units_for("thread", grid, block)
    rec = np.zeros((units, cap), np.dtype([("clock", "<u8"), ("branch", "<u8")]))
    rec["clock"] = 1000 + np.cumsum(rng.integers(1, 500, (units, cap)), axis=1) + (np.arange(units) // 32)[:, None]
    rec["branch"] = np.arange(cap)[None, :] + rng.integers(0, 3, (units, 1))
    buf = np.zeros(nt.buffer_bytes(units, cap, 16), np.uint8)
    buf[: 4 * units].view("<u4")[:] = rng.integers(1, cap + 1, units)
    buf[nt.align(4 * units, 16):] = np.frombuffer(rec.tobytes(), np.uint8)
    return nt.MapSection("program_progress", "thread", 16, cap, units, [("clock", "u64", 0), ("branch", "u64", 8)],
                         buf.tobytes(), cap_is_count=True)


# ---------------------------------------------------------------- seeds


def _kernel_json(run: Path, k: int, kernel: str, sections) -> str:
    rel = f"kernel/{k}_{abs(hash(kernel)) % 10**10:010d}"
    (run / rel).mkdir(parents=True, exist_ok=True)
    maps = [{"name": s.name, "level": s.level, "record_bytes": s.record_bytes,
             "cap": "count" if s.cap_is_count else s.cap, "type": s.type, "fields": [{"name": f.name, "type": f.type, "offset": f.offset} for f in s.fields]}
            for s in sections]
    info = {"version": 1, "kernels": {kernel: {"name": kernel, "maps": maps}}}
    (run / rel / "kernel.json").write_text(json.dumps(info))
    (run / rel / "original.ptx").write_text(".version 8.0\n.target sm_90\n")
    return rel


def _start(pid: int, **extra) -> dict:
    return {"event": "start", "time": 1.0, "pid": pid, "argv": ["app"], "version": "test", **extra}


def write_event_run(run: Path, launches: list[tuple[str, tuple, tuple, list]], *, start: dict | None = None,
                    probe: str = "[block_sched]\nposition = \"kernel\"\n") -> Path:
    """A run of the Python writer: one result file per launch, `launch` events.
    `launches`: (kernel, grid, block, sections) each."""
    (run / "result").mkdir(parents=True, exist_ok=True)
    (run / "probe.toml").write_text(probe)
    events = [start if start is not None else _start(1)]
    kernel_dirs: dict[str, str] = {}
    for index, (kernel, grid, block, sections) in enumerate(launches):
        if kernel not in kernel_dirs:
            kernel_dirs[kernel] = _kernel_json(run, len(kernel_dirs), kernel, sections)
            events.append({"event": "instrument", "time": 1.5, "kernel": kernel, "kernel_dir": kernel_dirs[kernel],
                           "cache": "miss", "sites": 1})
        rel = f"result/{index}.bin"
        nt.write_result(run / rel, grid=grid, block=block, shared_bytes=0, maps=sections)
        events.append({"event": "launch", "time": 2.0, "index": index, "kernel": kernel, "grid": list(grid),
                       "block": list(block), "shared_bytes": 0, "stream": "0x0", "result": rel, "result_offset": 0,
                       "frame": "app.py:7 (main)", "duration_ns": 1000.0 + 10 * index, "kernel_launch": index})
    events.append({"event": "exit", "time": 3.0, "launches": len(launches)})
    (run / "event.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def write_index_run(run: Path, launches: list[tuple[str, tuple, tuple, list]], *, start: dict | None = None) -> Path:
    """A run of the native writer: per-kernel result files and result/index.bin."""
    (run / "result").mkdir(parents=True, exist_ok=True)
    (run / "probe.toml").write_text("[gmem_bytes]\nposition = \"kernel\"\n")
    events = [start if start is not None else _start(2)]
    kernel_dirs: dict[str, str] = {}
    records = np.zeros(len(launches), nt.INDEX_RECORD)
    files: dict[str, object] = {}
    try:
        for index, (kernel, grid, block, sections) in enumerate(launches):
            if kernel not in kernel_dirs:
                kernel_dirs[kernel] = _kernel_json(run, len(kernel_dirs), kernel, sections)
                events.append({"event": "instrument", "time": 1.5, "kernel": kernel, "kernel_dir": kernel_dirs[kernel],
                               "cache": "disk", "sites": 2})
            rel = f"result/{Path(kernel_dirs[kernel]).name}.ntr"
            fh = files.get(rel) or files.setdefault(rel, open(run / rel, "ab"))
            off, size = nt.append_frame(fh, grid=grid, block=block, shared_bytes=0, maps=sections)
            k = int(Path(kernel_dirs[kernel]).name.split("_")[0])
            records[index] = (index + 1, index, 7, off, size, grid, block, 0, k, 0, 0, 500.0 + index, 0)
    finally:
        for fh in files.values():
            fh.close()
    (run / "result" / "index.bin").write_bytes(nt.INDEX_MAGIC + nt.INDEX_HEADER_TAIL + records.tobytes())
    events.append({"event": "exit", "time": 3.0, "launches": len(launches)})
    (run / "event.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def seed_block_sched(root: Path, rng) -> Path:
    launches = []
    for grid in ((4, 1, 1), (2, 2, 1), (3, 1, 1)):
        block = (64, 1, 1)
        launches.append(("sched_kernel", grid, block, [block_sched_section(grid, block, rng)]))
    run = write_event_run(root / "20260101-000000_1", launches)
    _context_tables(run)
    return run


def _context_tables(run: Path) -> None:
    """The run's timeline, ranges and launch arguments (spec/trace-format.md, "Context tables")."""
    from context_tables import known_run

    known_run(run)
    (run / "launch_args.jsonl").write_text(
        json.dumps({"argset": 0, "kernel": "sched_kernel", "args": [{"index": 0, "size": 8, "value": 4096, "hex": "0010000000000000",
                                                                    "tensor": None}]}) + "\n"
        + json.dumps({"launch": 0, "argset": 0, "tid": 100, "host_ns": 950}) + "\n")


def seed_sums(root: Path, rng) -> Path:
    """gmem_bytes and tensorop sum maps, a hist map, a per-thread array: the native writer's layout."""
    launches = []
    for i in range(3):
        grid, block = (2 + i, 1, 1), (32, 1, 1)
        launches.append(("mma_kernel", grid, block, [
            sum_section("gmem_bytes", ["bytes", "active_threads"], rng),
            sum_section("tensorop", ["count", "warp_count", "active_warps"], rng),
            hist_section("sizes", "log2" if i % 2 == 0 else "linear:0:100:10", rng),
            array_section("gmem_bytes_thread", "thread", [("bytes", "u64", 0)], 8, 1, grid, block, rng),
        ]))
    return write_index_run(root / "20260101-000000_2", launches)


def seed_dmat(root: Path, rng, launches: int = 6, grid=(2, 1, 1), block=(32, 1, 1)) -> Path:
    runs = [("dmat_kernel", grid, block, [dmat_section(grid, block, rng)]) for _ in range(launches)]
    return write_index_run(root / "20260101-000000_3", runs)


def seed_job(root: Path, rng) -> Path:
    """A job directory of two ranks (each a Python-writer run with block_sched)."""
    job = root / "20260101-000000_9"
    for rank in range(2):
        grid, block = (2, 1, 1), (64, 1, 1)
        write_event_run(job / f"rank{rank}", [("step", grid, block, [block_sched_section(grid, block, rng)])],
                        start=_start(100 + rank, rank=rank, world_size=2, rank_from="torchrun"))
    return job


SEEDS = {"block_sched": seed_block_sched, "sums": seed_sums, "dmat": seed_dmat, "job": seed_job}


# ---------------------------------------------------------------- corruptions


def _files(root: Path, suffixes=None, max_size: int = 32 << 20) -> list[Path]:
    """The files under `root` (named by suffix or name); the large ones (sparse) left to truncate."""
    out = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size <= max_size)
    return [p for p in out if suffixes is None or p.suffix in suffixes or p.name in suffixes]


def _pick(rng: random.Random, items):
    return items[rng.randrange(len(items))] if items else None


def truncate(root: Path, rng: random.Random) -> str:
    p = _pick(rng, _files(root, max_size=1 << 62))
    size = p.stat().st_size
    cut = rng.randrange(size + 1) if size else 0
    os.truncate(p, cut)
    return f"truncate {p.relative_to(root)} at {cut}"


def flip_bytes(root: Path, rng: random.Random) -> str:
    p = _pick(rng, _files(root))
    raw = bytearray(p.read_bytes())
    if not raw:
        return f"flip in empty {p.relative_to(root)}"
    for _ in range(rng.randrange(1, 9)):
        i = rng.randrange(len(raw))
        raw[i] = rng.choice([0, 0xFF, rng.randrange(256), raw[i] ^ (1 << rng.randrange(8))])
    p.write_bytes(bytes(raw))
    return f"flip bytes of {p.relative_to(root)}"


def shuffle_events(root: Path, rng: random.Random) -> str:
    p = _pick(rng, _files(root, {"event.log"}))
    if p is None:
        return "no event.log"
    lines = p.read_bytes().splitlines(keepends=True)
    extra = [rng.choice(lines) for _ in range(rng.randrange(0, 2 * len(lines) + 1))] if lines else []
    lines += extra
    rng.shuffle(lines)
    if lines and rng.random() < 0.3:
        lines.pop(rng.randrange(len(lines)))  # a line lost
    p.write_bytes(b"".join(lines))
    return f"shuffle/duplicate lines of {p.relative_to(root)}"


def file_to_directory(root: Path, rng: random.Random) -> str:
    p = _pick(rng, _files(root))
    p.unlink()
    p.mkdir()
    (p / "event.log").write_text("{}\n") if rng.random() < 0.3 else None
    return f"directory instead of {p.relative_to(root)}"


HUGE = [2**31 - 1, 2**32, 2**63 - 1, 2**63, 2**64, 10**30, -1, -(2**63), 1e308, float("inf")]


def _edit_events(p: Path, edit) -> None:
    out = []
    for line in p.read_bytes().splitlines():
        try:
            ev = json.loads(line)
        except (ValueError, RecursionError):
            out.append(line)
            continue
        if isinstance(ev, dict):
            ev = edit(ev)
        out.append(json.dumps(ev, allow_nan=True).encode())
    p.write_bytes(b"\n".join(out) + b"\n")


def huge_ids(root: Path, rng: random.Random) -> str:
    """Huge values in launch/start events (index, grid, result_offset, pid, rank) or index records."""
    logs = _files(root, {"event.log"})
    indexes = _files(root, {"index.bin"})
    if indexes and rng.random() < 0.4:
        p = _pick(rng, indexes)
        raw = bytearray(p.read_bytes())
        n = (len(raw) - 16) // nt.INDEX_RECORD.itemsize
        if n:
            recs = np.frombuffer(raw, nt.INDEX_RECORD, count=n, offset=16).copy()
            field = rng.choice(["seq", "kernel_launch", "offset", "frame_size", "grid", "block", "kernel_id",
                                "frame_id", "graph", "duration_ns"])
            values = [1e308, -1.0, float("nan")] if field == "duration_ns" else [2**32 - 1, 2**64 - 1, 2**63]
            value = rng.choice(values)
            with np.errstate(all="ignore"):
                recs[field][rng.randrange(n)] = np.array(value).astype(recs.dtype[field].base)
            raw[16:16 + recs.nbytes] = recs.tobytes()
            p.write_bytes(bytes(raw))
            return f"huge {field} in {p.relative_to(root)}"
    p = _pick(rng, logs)
    key = rng.choice(["index", "grid", "block", "result_offset", "pid", "rank", "shared_bytes", "duration_ns",
                      "kernel_launch", "graph", "graph_node", "replay"])

    def edit(ev):
        if rng.random() < 0.5:
            value = rng.choice(HUGE)
            ev[key] = [value, 1, 1] if key in ("grid", "block") else value
        return ev

    _edit_events(p, edit)
    return f"huge {key} in {p.relative_to(root)}"


def nul_names(root: Path, rng: random.Random) -> str:
    """NUL bytes in event keys, kernel names, map and field names of result files."""
    if rng.random() < 0.5:
        p = _pick(rng, _files(root, {"event.log"}))

        def edit(ev):
            if ev and rng.random() < 0.5:
                key = rng.choice(sorted(ev))
                k2 = key[: len(key) // 2] + "\0" + key[len(key) // 2:]
                ev[k2] = ev.pop(key)
            if "kernel" in ev and rng.random() < 0.3:
                ev["kernel"] = str(ev["kernel"]) + "\0x"
            return ev

        _edit_events(p, edit)
        return f"NUL in event keys of {p.relative_to(root)}"
    p = _pick(rng, _files(root, {".bin", ".ntr"}))
    if p is None or p.name == "index.bin":
        return "no result file"
    raw = bytearray(p.read_bytes())
    if len(raw) < 200:
        return "short result file"
    at = nt.FILE_HEADER.itemsize + rng.choice([1, 3, nt.MAP_HEADER.itemsize + 2, nt.MAP_HEADER.itemsize + 1])
    raw[at] = 0
    p.write_bytes(bytes(raw))
    return f"NUL in a name of {p.relative_to(root)}"


def not_utf8(root: Path, rng: random.Random) -> str:
    p = _pick(rng, _files(root, {"event.log", "probe.toml", "kernel.json", "timeline_names.txt"}))
    raw = bytearray(p.read_bytes())
    at = rng.randrange(len(raw) + 1)
    raw[at:at] = rng.choice([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80abc", b'"\\ud800"'])
    p.write_bytes(bytes(raw))
    return f"bytes that are not UTF-8 in {p.relative_to(root)}"


def _first_frame_maps(raw: bytes, base: int = 0) -> list[tuple[int, np.void]]:
    """(offset, header) of each map header of the frame at `base`."""
    head = np.frombuffer(raw, nt.FILE_HEADER, count=1, offset=base)[0]
    out, pos = [], base + nt.FILE_HEADER.itemsize
    for _ in range(int(head["n_maps"])):
        mh = np.frombuffer(raw, nt.MAP_HEADER, count=1, offset=pos)[0].copy()
        out.append((pos, mh))
        pos += nt.MAP_HEADER.itemsize + int(mh["n_fields"]) * nt.FIELD_DESC.itemsize
    return out


def impossible_sizes(root: Path, rng: random.Random) -> str:
    """A map header word (units, cap, record_bytes, offset, size, n_fields, n_maps) set to a huge or odd value."""
    p = _pick(rng, [f for f in _files(root, {".bin", ".ntr"}) if f.name != "index.bin"])
    if p is None:
        return "no result file"
    raw = bytearray(p.read_bytes())
    try:
        maps = _first_frame_maps(bytes(raw))
    except (ValueError, IndexError):
        return "unreadable frame"
    if not maps or rng.random() < 0.1:
        raw[12:16] = np.array(rng.choice([2**32 - 1, 2**20, 0]), "<u4").tobytes()
        p.write_bytes(bytes(raw))
        return f"n_maps of {p.relative_to(root)}"
    pos, mh = _pick(rng, maps)
    field = rng.choice(["units", "cap", "record_bytes", "offset", "size", "n_fields", "type", "level"])
    width = mh.dtype[field].itemsize
    value = rng.choice([0, 1, 3, 12, 2**31, 2**32 - 1, 2**64 - 1, 2**40, 2**27])
    value &= (1 << (8 * width)) - 1
    mh[field] = value
    raw[pos:pos + nt.MAP_HEADER.itemsize] = mh.tobytes()
    p.write_bytes(bytes(raw))
    return f"{field} = {value} in {p.relative_to(root)}"


def sparse_declaration(root: Path, rng: random.Random, units: int | None = None) -> str:
    """A result file rewritten as one array map declaring `units` units (default 2^20..2^24), its
    section a hole: a sparse file whose size matches the header, with no valid record (or a few)."""
    p = _pick(rng, [f for f in _files(root, {".bin", ".ntr"}) if f.name != "index.bin"])
    if p is None:
        return "no result file"
    units = units or 1 << rng.randrange(20, 25)
    write_sparse_result(p, units, cap=rng.choice([1, 2]), record_bytes=16,
                        counts_at=[rng.randrange(units) for _ in range(rng.randrange(0, 4))])
    return f"sparse {p.relative_to(root)} declaring {units} units"


def write_sparse_result(path: Path, units: int, *, cap: int = 1, record_bytes: int = 16, name: str = "block_sched",
                        counts_at=(), kind: str = "array") -> None:
    """A result file of one map declaring `units` units whose section is a hole (no byte written but the
    counts at `counts_at`, set to 1): the file is as long as the header says, and sparse."""
    fields = [("start", "u64", 0), ("elapsed", "u32", 8), ("cuid", "u32", 12)] if record_bytes == 16 else \
        [("v", "u64", 0)]
    section = nt.MapSection(name, "warp", record_bytes, cap, units, fields, b"", type=kind)
    head = np.zeros((), nt.FILE_HEADER)
    head["magic"], head["version"], head["n_maps"] = nt.MAGIC, nt.VERSION, 1
    head["grid"], head["block"] = (units, 1, 1), (32, 1, 1)
    layout = nt.frame_layout([section])
    mh = np.zeros((), nt.MAP_HEADER)
    mh["name"], mh["level"], mh["record_bytes"], mh["cap"] = name.encode(), 1, record_bytes, cap
    mh["units"], mh["n_fields"], mh["type"] = units, len(fields), nt.MAP_TYPES.index(kind)
    mh["offset"], mh["size"] = layout.offsets[0], section.size
    fd = np.zeros(len(fields), nt.FIELD_DESC)
    for i, (fname, ftype, off) in enumerate(fields):
        fd[i] = (fname.encode(), nt.FIELD_TYPES[ftype], off)
    with open(path, "wb") as fh:
        fh.write(head.tobytes() + mh.tobytes() + fd.tobytes())
        for unit in counts_at:
            fh.seek(layout.offsets[0] + 4 * unit)
            fh.write(np.array(1, "<u4").tobytes())
        fh.truncate(layout.offsets[0] + section.size)


def rename_field(root: Path, rng: random.Random) -> str:
    """A field of a result file renamed: to names the readers must take as they are (`unit`, which
    valid() adds; `cnt`, tensorop's other spelling) or must refuse (empty, a duplicate)."""
    p = _pick(rng, [f for f in _files(root, {".bin", ".ntr"}) if f.name != "index.bin"])
    if p is None:
        return "no result file"
    raw = bytearray(p.read_bytes())
    try:
        maps = _first_frame_maps(bytes(raw))
    except (ValueError, IndexError):
        return "unreadable frame"
    candidates = [(pos, mh) for pos, mh in maps if int(mh["n_fields"])]
    if not candidates:
        return "no field"
    pos, mh = _pick(rng, candidates)
    at = pos + nt.MAP_HEADER.itemsize + nt.FIELD_DESC.itemsize * rng.randrange(int(mh["n_fields"]))
    new = rng.choice([b"unit", b"cnt", b"_unit", b"count", b"", b"warp_count", b"bytes", b"clock"])
    raw[at:at + 32] = new.ljust(32, b"\0")
    p.write_bytes(bytes(raw))
    return f"a field of {p.relative_to(root)} renamed {new!r}"


def drop_events(root: Path, rng: random.Random) -> str:
    """Every event of one kind gone (a log cut at its start, a start event lost)."""
    p = _pick(rng, _files(root, {"event.log"}))
    if p is None:
        return "no event.log"
    kind = rng.choice(["start", "instrument", "launch", "exit", "context"]).encode()
    lines = [line for line in p.read_bytes().splitlines(keepends=True) if b'"event": "%s"' % kind not in line]
    p.write_bytes(b"".join(lines))
    return f"{kind.decode()} events dropped from {p.relative_to(root)}"


def giant_numbers(root: Path, rng: random.Random) -> str:
    """Numbers JSON allows and Python refuses to convert (more than 4,300 digits), and deep nesting."""
    p = _pick(rng, _files(root, {"event.log"}))
    if p is None:
        return "no event.log"
    lines = p.read_bytes().splitlines(keepends=True)
    value = rng.choice([b"9" * 5000, b"[" * 5000 + b"]" * 5000, b"1e999", b"-0", b"NaN", b'"\\ud800"'])
    key = rng.choice([b"index", b"grid", b"duration_ns", b"result_offset", b"pid", b"kernel"])
    lines.insert(rng.randrange(len(lines) + 1),
                 b'{"event": "launch", "%s": %s, "result": "result/0.bin", "index": 1}\n' % (key, value))
    p.write_bytes(b"".join(lines))
    return f"a {len(value)}-byte {key.decode()} in {p.relative_to(root)}"


def odd_names(root: Path, rng: random.Random) -> str:
    """A file or directory renamed to a name that is not UTF-8 (copied from another system)."""
    items = sorted(q for q in root.rglob("*") if q.name != "event.log")
    q = _pick(rng, items)
    if q is None:
        return "nothing to rename"
    q.rename(Path(os.fsdecode(os.fsencode(q) + b"\xff")))
    return f"{q.relative_to(root)} renamed with a byte that is not UTF-8"


def sparse_extend(root: Path, rng: random.Random) -> str:
    """A file extended by a hole of 64 MiB to 1 GiB (a full disk's NULs), some of its bytes after it."""
    p = _pick(rng, _files(root))
    tail = p.read_bytes()[: rng.randrange(0, 4096)]
    with open(p, "r+b") as fh:
        fh.seek(p.stat().st_size + (rng.randrange(64, 1024) << 20))
        fh.write(tail)
    return f"{p.relative_to(root)} extended by a hole"


CORRUPTIONS = [sparse_extend, odd_names, truncate, flip_bytes, shuffle_events, file_to_directory, huge_ids, nul_names, not_utf8,
               impossible_sizes, sparse_declaration, rename_field, drop_events, giant_numbers]


def corrupted_copy(seed_dir: Path, dest: Path, rng: random.Random, count: int) -> list[str]:
    """A copy of `seed_dir` at `dest` with `count` corruptions; what was done."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(seed_dir, dest)
    done = []
    for _ in range(count):
        corruption = rng.choice(CORRUPTIONS)
        try:
            done.append(corruption(dest, rng))
        except (OSError, ValueError, IndexError, TypeError, AttributeError, RecursionError) as e:  # nothing left
            done.append(f"{corruption.__name__}: not applicable ({type(e).__name__})")
    return done


# ---------------------------------------------------------------- running every entry point


class Hang(BaseException):
    """The entry point's time ran out (a BaseException: code under test must not catch it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def expire(signum, frame):
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def read_everything(path: Path) -> int:
    """Every Python reader entry point on `path`: the find_* helpers, read_events, load or load_job,
    Trace.kernel_info of every kernel, Launch.maps, MapData.valid/totals/histogram/dropped,
    read_result of every result file. 0, or 1 when the whole trace is refused (TraceError)."""
    from neutrino.errors import NeutrinoError

    nt.find_rank_dirs(path), nt.find_process_dirs(path), nt.find_job_dir(path)
    for log in sorted(path.rglob("event.log"))[:8]:
        with contextlib.suppress(NeutrinoError):
            nt.read_events(log)
    for result in sorted(path.rglob("result/*"))[:16]:
        with contextlib.suppress(NeutrinoError):
            nt.read_result(result)
    _read_context_tables(path)
    try:
        traces = [t for _, t in nt.load_job(path)] if nt.find_job_dir(path) else [nt.load(path)]
    except NeutrinoError as e:
        print(f"neutrino: {e}", file=sys.stderr)
        return 1
    for trace in traces:
        for problem in trace.problems:
            assert isinstance(problem, str)
        for kernel in {launch.kernel for launch in trace.launches}:
            with contextlib.suppress(NeutrinoError):
                trace.kernel_info(kernel)
        for launch in trace.launches:
            try:
                maps = launch.maps
            except NeutrinoError:
                continue
            for data in maps.values():
                _ = data.dropped
                with contextlib.suppress(NeutrinoError):
                    data.valid()
                if data.type == "sum":
                    data.totals()
                elif data.type == "hist":
                    data.histogram().rows()
            getattr(launch, "release", lambda: None)()  # (absent before issue 30)
    return 0


def _read_context_tables(path: Path) -> None:
    """neutrino.timeline and neutrino.ranges on every run directory: values or a TraceError, nothing else."""
    from neutrino import ranges, timeline
    from neutrino.errors import NeutrinoError

    for log in sorted(path.rglob("event.log"))[:8]:
        run = log.parent
        if (run / "timeline.bin").exists():  # a run without one: FileNotFoundError, as documented
            with contextlib.suppress(NeutrinoError):
                timeline.read_timeline(run)
        for reader in (ranges.read_ranges, ranges.read_launch_args, ranges.read_launch_hosts):
            with contextlib.suppress(NeutrinoError):
                reader(run)


def _cli(*argv: str) -> int:
    from neutrino.cli import main

    return main(list(argv))


def _text_report(path: str) -> int:
    """`neutrino report PATH` without its pictures (matplotlib costs seconds a case)."""
    from neutrino.analysis.report import main as report_main

    return report_main(path, plots=False)


def entry_points(path: Path, work: Path, plots: bool = False) -> list[tuple[str, object, tuple]]:
    """Every reader entry point on `path`: the API, `report` as text (with its pictures when
    `plots`), csv and json, and `export --perfetto`."""
    text = ("report", _cli, ("report", str(path), "--out", str(work / "plots"))) if plots else \
        ("report", _text_report, (str(path),))
    return [
        ("api", read_everything, (path,)),
        text,
        ("report-csv", _cli, ("report", str(path), "--format", "csv")),
        ("report-json", _cli, ("report", str(path), "--format", "json")),
        ("export", _cli, ("export", str(path), "--perfetto", str(work / "perfetto.json"))),
    ]


def run_one(name: str, function, args) -> dict:
    """One entry point with stdout/stderr captured, under ENTRY_SECONDS, classified."""
    out, err = io.StringIO(), io.StringIO()
    began = time.monotonic()
    status, detail = None, ""
    try:
        with time_limit(ENTRY_SECONDS), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = function(*args)
    except Hang as e:
        status, detail, rc = "hang", str(e), None
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException as e:  # noqa: BLE001 - what this runner looks for
        status, detail, rc = "traceback", "".join(traceback.format_exception(e, limit=-6)), None
    message = err.getvalue()
    if status is None:
        if "Traceback (most recent call last)" in message or "(MemoryError)" in message:
            status, detail = "traceback", message[-3000:]
        elif rc == 0:
            status = "ok"
        elif rc == 1 and message.strip():
            status, detail = "refused", message[-300:]
        else:
            status, detail = "bad-exit", f"exit status {rc}, stderr {message[-500:]!r}"
    return {"entry": name, "status": status, "detail": detail, "seconds": time.monotonic() - began,
            "peak_rss": peak_rss_bytes()}


def run_all(paths: list[Path], plots: bool = False) -> list[dict]:
    results = []
    for path in paths:
        work = path.parent / (path.name + ".work")
        work.mkdir(exist_ok=True)
        for name, function, args in entry_points(path, work, plots):
            results.append({"trace": str(path), **run_one(name, function, args)})
        shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    plots = os.environ.get("NEUTRINO_FUZZ_PLOTS") == "1"
    out_json, *dirs = sys.argv[1:]
    Path(out_json).write_text(json.dumps(run_all([Path(d) for d in dirs], plots)))
