"""Where GPU time went: the context tables of a run (timeline.bin, ranges.bin) for `report` and `export`.

The readers follow spec/trace-format.md, "Context tables". The runtime's own
readers (`neutrino.timeline.read_timeline`, `neutrino.ranges.read_ranges`)
are used when they exist; `_read_timeline_file` and `_read_ranges_file` are
numpy parsers of the same contract so that analysis works on its own.

The report's first section (spec/analysis.md, "Where GPU time went") groups
every kernel, copy and memset of timeline.bin by name: count, total time,
share of the GPU's busy time, mean, origin, and the innermost range that the
launches ran under (the range on the launching thread that holds the
launch call's host time, `host_ns`; for records without one, the launch
arguments' host time of a probed launch, else the kernel's GPU start).
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from pathlib import Path

import attrs
import numpy as np

from neutrino.analysis import _common as C

TIMELINE_MAGIC, RANGES_MAGIC = b"NTTIMEL1", b"NTRANGE1"
NO_NAME = 0xFFFFFFFF
KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET = 1, 2, 3
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 10: "PtoP"}
FLAG_PROBED, FLAG_GRAPH = 1, 2

TIMELINE_DTYPE = np.dtype([
    ("kind", "u1"), ("copy_kind", "u1"), ("flags", "<u2"), ("device", "<u4"), ("stream", "<u4"), ("tid", "<u4"),
    ("start_ns", "<u8"), ("end_ns", "<u8"), ("correlation", "<u8"), ("bytes", "<u8"), ("name_id", "<u4"),
    ("probe_launch", "<i4"), ("grid", "<u4", (3,)), ("block", "<u4", (3,)), ("host_ns", "<u8")])
TIMELINE_MIN_BYTES = 80  # records of the first writers end before host_ns
RANGES_DTYPE = np.dtype([
    ("start_ns", "<u8"), ("end_ns", "<u8"), ("tid", "<u4"), ("depth", "<u2"), ("source", "u1"), ("reserved0", "u1"),
    ("name_id", "<u4"), ("domain_id", "<u4"), ("reserved", "<u8")])
assert TIMELINE_DTYPE.itemsize == 88 and RANGES_DTYPE.itemsize == 40


def _records(path: Path, magic: bytes, dtype: np.dtype) -> np.ndarray:
    """The records of a context table, memory-mapped (a record cut short at the end is ignored)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = f.read(16)
    if len(header) < 16 or header[:8] != magic:
        raise C.AnalysisError(f"{path}: not a {magic[:7].decode()} file (header {header[:8]!r})")
    version, record = int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")
    smallest = TIMELINE_MIN_BYTES if magic == TIMELINE_MAGIC else dtype.itemsize
    if version != 1 or record < smallest:
        raise C.AnalysisError(f"{path}: version {version}, record size {record}: this reader knows version 1, "
                              f"records of {smallest} bytes or more")
    count = (size - 16) // record
    if count == 0:
        return np.zeros(0, dtype=dtype)
    # fields past the record's end (host_ns of 80-byte records) are left out here and read as 0 below
    kept = [n for n in dtype.names if dtype.fields[n][1] + dtype.fields[n][0].itemsize <= record]
    laid = np.dtype({"names": kept, "formats": [dtype.fields[n][0] for n in kept],
                     "offsets": [dtype.fields[n][1] for n in kept], "itemsize": record})
    mapped = np.memmap(path, dtype=laid, mode="r", offset=16, shape=(count,))
    if record == dtype.itemsize:
        return mapped
    out = np.zeros(count, dtype=dtype)
    for n in kept:
        out[n] = mapped[n]
    return out


def _names(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line.replace("\\n", "\n") for line in path.read_text(encoding="utf-8", errors="replace").split("\n")]


def _name_column(ids: np.ndarray, names: list[str]) -> np.ndarray:
    table = np.array(names + [""], dtype=object)
    ids = np.asarray(ids, dtype=np.int64)
    return table[np.where((ids >= 0) & (ids < len(names)), ids, len(names))]


def _with_names(records: np.ndarray, columns: dict[str, np.ndarray]) -> np.ndarray:
    out = np.zeros(len(records), dtype=np.dtype(records.dtype.descr + [(k, object) for k in columns]))
    for field in records.dtype.names:
        out[field] = records[field]
    for k, v in columns.items():
        out[k] = v
    return out


def _read_timeline_file(run_dir) -> np.ndarray | None:
    """timeline.bin of `run_dir` as the contract's structured array (+ `name`), by start_ns; None if absent."""
    path = Path(run_dir) / "timeline.bin"
    if not path.exists():
        return None
    records = _records(path, TIMELINE_MAGIC, TIMELINE_DTYPE)
    names = _names(Path(run_dir) / "timeline_names.txt")
    ids = np.where(records["name_id"] == NO_NAME, -1, records["name_id"].astype(np.int64))
    out = _with_names(records, {"name": _name_column(ids, names)})
    return out[np.argsort(out["start_ns"], kind="stable")]


def _read_ranges_file(run_dir) -> np.ndarray | None:
    """ranges.bin of `run_dir` as the contract's structured array (+ `name`, `domain`); None if absent."""
    path = Path(run_dir) / "ranges.bin"
    if not path.exists():
        return None
    records = _records(path, RANGES_MAGIC, RANGES_DTYPE)
    names = _names(Path(run_dir) / "ranges_names.txt")
    domains = np.where(records["domain_id"] == NO_NAME, -1, records["domain_id"].astype(np.int64))
    return _with_names(records, {"name": _name_column(records["name_id"], names),
                                 "domain": _name_column(domains, names)})


def read_timeline(run_dir, *, untimed: bool = False) -> np.ndarray | None:
    """The runtime's reader when it exists (neutrino.timeline), else ours; records without GPU time
    only with untimed=True."""
    try:
        from neutrino import timeline as runtime_timeline  # written by the CUPTI work; may not exist yet
    except ImportError:
        found = _read_timeline_file(run_dir)
        return found if found is None or untimed else found[has_gpu_time(found)]
    if not (Path(run_dir) / "timeline.bin").exists():
        return None
    return runtime_timeline.read_timeline(run_dir, untimed=untimed)


def read_ranges(run_dir) -> np.ndarray | None:
    try:
        from neutrino import ranges as runtime_ranges
    except ImportError:
        return _read_ranges_file(run_dir)
    if not (Path(run_dir) / "ranges.bin").exists():
        return None
    return runtime_ranges.read_ranges(run_dir)


def read_launch_hosts(run_dir) -> dict[int, tuple[int, int]]:
    """probed launch index -> (tid, host_ns) of its launch call: the `tid` and `host_ns` of
    launch_args.jsonl's use lines (`neutrino.ranges.read_launch_hosts` when that module exists)."""
    try:
        from neutrino import ranges as runtime_ranges
        return runtime_ranges.read_launch_hosts(run_dir)
    except (ImportError, AttributeError):
        pass
    path = Path(run_dir) / "launch_args.jsonl"
    out: dict[int, tuple[int, int]] = {}
    if not path.exists():
        return out
    import json

    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        if isinstance(value, dict) and all(isinstance(value.get(k), int) for k in ("launch", "tid", "host_ns")):
            out[value["launch"]] = (value["tid"], value["host_ns"])
    return out


def query_points(timeline: np.ndarray, hosts: dict[int, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(tid, time) at which to look up each record's enclosing range: the launch call's thread and host
    time (the record's `host_ns`, every kernel and copy at the default timeline level); else, for a
    probed launch, those of launch_args.jsonl; else the record's tid and GPU start."""
    tid = timeline["tid"].astype(np.int64).copy()
    when = timeline["start_ns"].astype(np.int64).copy()
    if hosts:
        for i in np.flatnonzero(timeline["probe_launch"] >= 0).tolist():
            host = hosts.get(int(timeline["probe_launch"][i]))
            if host is not None:
                tid[i], when[i] = host
    if "host_ns" in (timeline.dtype.names or ()):
        known = timeline["host_ns"] > 0
        when[known] = timeline["host_ns"][known].astype(np.int64)
    return tid, when


_ORIGINS = (  # (origin, pattern on the mangled or plain name), first match wins
    ("NCCL", re.compile(r"nccl", re.I)),
    ("cuDNN", re.compile(r"cudnn", re.I)),
    ("CUTLASS", re.compile(r"cutlass", re.I)),
    ("cuBLAS", re.compile(r"cublas|^(sm\d+|ampere|volta|turing|hopper|blackwell)_.*(gemm|xmma)|gemv|gemmSN|gemmk1", re.I)),
    ("ATen", re.compile(r"at::native|at6native|^_ZN2at|c10::|3c10")),
    ("Triton", re.compile(r"^triton_|^_?triton", re.I)),
    ("XLA", re.compile(r"(^|_)fusion(_\d+)?$|^wrapped_|^loop_.*fusion|^input_.*fusion|^gemm_fusion")),
)


def origin(name: str) -> str:
    """The library a kernel comes from, by its name: cuBLAS, cuDNN, NCCL, ATen, Triton, XLA, CUTLASS or other
    (`neutrino.timeline.origin`, the contract's classifier, when that module exists; else ours)."""
    return _classifier()(name)


@functools.lru_cache(maxsize=1)
def _classifier():
    try:
        from neutrino.timeline import origin as runtime_origin
    except ImportError:
        return _origin
    return runtime_origin


def _origin(name: str) -> str:
    for label, pattern in _ORIGINS:
        if pattern.search(name):
            return label
    return "other"


def busy_ns(start: np.ndarray, end: np.ndarray, device: np.ndarray) -> int:
    """GPU busy time: per device, the length of the union of the activity intervals; summed over devices."""
    total = 0
    for d in np.unique(device):
        sel = device == d
        s, e = start[sel].astype(np.int64), end[sel].astype(np.int64)
        order = np.argsort(s, kind="stable")
        s, e = s[order], np.maximum.accumulate(e[order])  # the reach so far: overlaps merge
        gaps = np.maximum(s[1:] - e[:-1], 0)
        total += int(e[-1] - s[0] - gaps.sum())
    return total


def innermost_ranges(ranges: np.ndarray | None, tid: np.ndarray, time_ns: np.ndarray) -> np.ndarray:
    """Per query (tid, time), the index in `ranges` of the innermost range on thread `tid` whose
    [start, end) holds the time, -1 for none (tid 0 = unknown: none). Nesting is by thread: the
    open range that started last holds the query. One sweep per thread: linear after sorting."""
    out = np.full(len(tid), -1, dtype=np.int64)
    if ranges is None or len(ranges) == 0 or len(tid) == 0:
        return out
    for t in np.unique(tid):
        if t == 0:
            continue
        mine = np.flatnonzero(ranges["tid"] == t)
        if len(mine) == 0:
            continue
        mine = mine[np.lexsort((-ranges["end_ns"][mine].astype(np.int64), ranges["start_ns"][mine]))]
        starts, ends = ranges["start_ns"][mine].tolist(), ranges["end_ns"][mine].tolist()
        queries = np.flatnonzero(tid == t)
        queries = queries[np.argsort(time_ns[queries], kind="stable")]
        stack, k = [], 0
        for q, when in zip(queries.tolist(), time_ns[queries].tolist()):
            while k < len(starts) and starts[k] <= when:
                stack.append(k)
                k += 1
            while stack and ends[stack[-1]] <= when:
                stack.pop()
            # a closed range below the top (not nested) is dropped when it surfaces
            out[q] = mine[stack[-1]] if stack else -1
    return out


@attrs.frozen
class KernelTime:
    """One row of the context table: the activities of one name."""

    name: str
    origin: str
    count: int
    probed: int  # launches that ran Neutrino's probed code (flags bit 0)
    total_ns: int
    share: float  # total_ns / the GPU's busy time
    mean_ns: float
    range: str  # the innermost enclosing range most launches ran under ("" for none)
    range_launches: int  # how many launches ran under that range


@attrs.frozen
class Context:
    kernels: int  # kernel records
    probed: int  # kernel records that ran probed code
    copies: int
    memsets: int
    busy_ns: int
    window_ns: int  # last end - first start over the records with GPU time
    devices: int
    ranges: int  # ranges in ranges.bin (0: none recorded)
    rows: tuple  # KernelTime, by total time, largest first
    untimed: int = 0  # records without GPU time (flags bit 2, or a 0 time): counted, in no time sum


def activity_names(timeline: np.ndarray) -> np.ndarray:
    """Kernels by name; copies `[memcpy HtoD]`…; memsets `[memset]`."""
    names = timeline["name"].astype(object)
    kind = timeline["kind"]
    copy = [f"[memcpy {COPY_KINDS.get(int(k), k)}]" for k in timeline["copy_kind"][kind == KIND_MEMCPY]]
    names = names.copy()
    names[kind == KIND_MEMCPY] = np.array(copy, dtype=object) if copy else names[kind == KIND_MEMCPY]
    names[kind == KIND_MEMSET] = "[memset]"
    return names


def summarize(timeline: np.ndarray, ranges: np.ndarray | None,
              hosts: dict[int, tuple[int, int]] | None = None) -> Context:
    """The context table of one run (spec/analysis.md, "Where GPU time went"); `hosts`: read_launch_hosts."""
    start = timeline["start_ns"].astype(np.int64)
    end = np.maximum(timeline["end_ns"].astype(np.int64), start)
    kind = timeline["kind"]
    if len(timeline) == 0:
        return Context(0, 0, 0, 0, 0, 0, 0, 0 if ranges is None else len(ranges), ())
    timed = has_gpu_time(timeline)
    end = np.where(timed, end, start)  # a record without GPU time adds 0 to every sum
    busy = busy_ns(start[timed], end[timed], timeline["device"][timed])
    names = activity_names(timeline)
    enclosing = innermost_ranges(ranges, *query_points(timeline, hosts or {}))
    range_names = ranges["name"] if ranges is not None and len(ranges) else np.zeros(0, dtype=object)
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names.tolist()):
        groups.setdefault(name, []).append(i)
    rows = []
    for name, members in groups.items():
        idx = np.array(members)
        total = int((end[idx] - start[idx]).sum())
        n_timed = int(np.count_nonzero(timed[idx]))
        under = Counter(str(range_names[j]) if j >= 0 else "" for j in enclosing[idx].tolist())
        top, top_n = max(under.items(), key=lambda kv: (kv[1], kv[0] != ""))
        row_origin = origin(name) if kind[idx[0]] == KIND_KERNEL else ("copy" if kind[idx[0]] == KIND_MEMCPY else "memset")
        rows.append(KernelTime(name=name, origin=row_origin, count=len(idx),
                               probed=int(np.count_nonzero(timeline["flags"][idx] & FLAG_PROBED)),
                               total_ns=total, share=total / busy if busy else float("nan"),
                               mean_ns=total / n_timed if n_timed else 0.0, range=top,
                               range_launches=top_n))
    rows.sort(key=lambda r: (-r.total_ns, r.name))
    is_kernel = kind == KIND_KERNEL
    return Context(kernels=int(is_kernel.sum()), probed=int(np.count_nonzero(timeline["flags"][is_kernel] & FLAG_PROBED)),
                   copies=int((kind == KIND_MEMCPY).sum()), memsets=int((kind == KIND_MEMSET).sum()),
                   busy_ns=busy, window_ns=int(end[timed].max() - start[timed].min()) if timed.any() else 0,
                   devices=len(np.unique(timeline["device"])), ranges=0 if ranges is None else len(ranges),
                   rows=tuple(rows), untimed=int(np.count_nonzero(~timed)))


FLAG_NO_GPU_TIME = 4  # timeline.bin flags bit 2 (spec/trace-format.md)


def has_gpu_time(timeline: np.ndarray) -> np.ndarray:
    """Records with GPU times: bit 2 clear, start and end not 0 (CUPTI's "no timestamp"), end >= start."""
    start, end = timeline["start_ns"], timeline["end_ns"]
    return ((timeline["flags"] & FLAG_NO_GPU_TIME) == 0) & (start > 0) & (end > 0) & (end >= start)


def load(run_dir) -> Context | None:
    """The context of a run directory; None when it has no timeline.bin."""
    if not run_dir or not os.path.isdir(run_dir):
        return None
    timeline = read_timeline(run_dir, untimed=True)
    if timeline is None:
        return None
    return summarize(timeline, read_ranges(run_dir), read_launch_hosts(run_dir))


def render(ctx: Context, top: int = 15) -> list[str]:
    """The report's opening section: a headline and the top rows by total GPU time."""
    from neutrino.analysis.tables import format_table, short

    head = (f"[where GPU time went] {ctx.kernels} kernel launch(es) ({ctx.probed} probed), {ctx.copies} copies, "
            f"{ctx.memsets} memsets on {ctx.devices} device(s): GPU busy {ctx.busy_ns / 1e3:.1f} us "
            f"of a {ctx.window_ns / 1e3:.1f} us window")
    rows = []
    for r in ctx.rows[:top]:
        where = "-" if not r.range else (r.range if r.range_launches == r.count else f"{r.range} ({r.range_launches}/{r.count})")
        rows.append([short(r.name), r.origin, str(r.count), str(r.probed), f"{r.total_ns / 1e3:.1f}",
                     f"{100 * r.share:.1f}%", f"{r.mean_ns / 1e3:.2f}", short(where, 40)])
    out = [head, format_table(["kernel", "origin", "count", "probed", "total (us)", "share", "mean (us)", "range"],
                              rows, left=(0, 1, 7))]
    rest = ctx.rows[top:]
    if rest:
        out.append(f"({len(rest)} more: {sum(r.total_ns for r in rest) / 1e3:.1f} us, "
                   f"{100 * sum(r.total_ns for r in rest) / ctx.busy_ns:.1f}% of busy time)")
    if ctx.untimed:
        out.append(f"({ctx.untimed} record(s) without GPU time (CUPTI gave no timestamp): counted above, "
                   "left out of every time, share and the window)")
    if not ctx.ranges:
        out.append("(no ranges recorded: ranges.bin is absent or empty)")
    return out


def numbers(ctx: Context) -> list[dict]:
    """The rows as numbers, for `report --format json` (`gpu_time`)."""
    return [{"name": r.name, "origin": r.origin, "count": r.count, "probed": r.probed, "total_ns": r.total_ns,
             "share": r.share, "mean_ns": r.mean_ns, "range": r.range or None, "range_launches": r.range_launches}
            for r in ctx.rows]
