"""timeline.bin's format without numpy (spec/trace-format.md, "timeline.bin"): the header, the names table, kernel
origins, and the counts a run's exit line needs, read in pure Python. neutrino.timeline (numpy) re-exports these; a
run that probed nothing imports only this module at exit (issue 29: numpy's import is most of the timeline's exit
cost there)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from neutrino.maps import TraceError

MAGIC = b"NTTIMEL1"
HEADER_BYTES = 16
VERSION = 1
KERNEL, MEMCPY, MEMSET = 1, 2, 3
GRAPH_REPLAY = 4  # one record per CUDA graph replay recorded whole (spec/runtime.md "Graph replays")
FLAG_PROBED, FLAG_GRAPH, FLAG_NO_GPU_TIME = 1, 2, 4
NO_NAME = 0xFFFFFFFF
RECORD_MIN_BYTES = 80  # the first writers' records (no host_ns)
MAX_NAMES_BYTES = 64 << 20  # timeline_names.txt: distinct kernel names; more is not a timeline's
CLOCK_KERNEL = "__neutrino_globaltimer"  # neutrino.runtime.context_tables.clock's calibration kernel

ORIGINS = ("cuBLAS", "cuDNN", "NCCL", "ATen", "Triton", "XLA", "CUTLASS", "other")

# First match wins (spec/trace-format.md, "Kernel origins"). Names are matched as the driver
# knows them: mangled C++ (`_ZN2at6native...`) or plain (Triton, XLA).
_ORIGIN_RULES: tuple[tuple[str, re.Pattern], ...] = (
    ("NCCL", re.compile(r"ncclDevKernel|ncclKernel")),
    ("cuDNN", re.compile(r"cudnn|_fprop_|_dgrad_|_wgrad_|convolve_", re.IGNORECASE)),
    ("cuBLAS", re.compile(r"cublas|^(sm\d+|ampere|volta|turing|hopper)_|xmma_gemm|gemv|gemmSN|gemmk1|nvjet|splitKreduce|"
                          r"^_Z\d+[sdhcz]gemm_",
                          re.IGNORECASE)),
    ("ATen", re.compile(r"at::|at_cuda_detail|_ZN2at|at6native|cunn_|_GLOBAL__N__\w*_(SoftMax|Softmax|Reduce|"
                        r"Normalization|layer_norm_kernel|Loss|Dropout|Indexing|Sort|Embedding|Activation)\w*_cu")),
    ("CUTLASS", re.compile(r"cutlass", re.IGNORECASE)),
    ("Triton", re.compile(r"^triton_|triton")),
    ("XLA", re.compile(r"^(loop_|input_|wrapped_|fusion)|_fusion(_\d+)?$|^(gemm|reduce|convert|transpose)_fusion|"
                       r"stream_executor")),
)


def origin(name: str) -> str:
    """The library a kernel name comes from: one of ORIGINS (`other` when no rule matches)."""
    for label, pattern in _ORIGIN_RULES:
        if pattern.search(name):
            return label
    return "other"


def read_header(data: bytes, path: Path) -> int:
    """The record size the header declares; TraceError naming the file when it is not a timeline."""
    if len(data) < HEADER_BYTES or data[:8] != MAGIC:
        raise TraceError(f"{path}: not a timeline (expected the 16-byte header starting {MAGIC!r})")
    version = int.from_bytes(data[8:12], "little")
    size = int.from_bytes(data[12:16], "little")
    if version != VERSION:
        raise TraceError(f"{path}: timeline version {version}, this reader knows {VERSION}")
    if size < RECORD_MIN_BYTES:
        raise TraceError(f"{path}: record size {size} is smaller than the {RECORD_MIN_BYTES} bytes of version 1")
    return size


def read_names(run_dir: Path) -> list[str]:
    path = Path(run_dir) / "timeline_names.txt"
    if not path.exists():
        return []
    if not path.is_file() or path.stat().st_size > MAX_NAMES_BYTES:
        raise TraceError(f"{path}: not a names table (not a regular file, or over {MAX_NAMES_BYTES >> 20} MiB)")
    return path.read_text(encoding="utf-8", errors="replace").split("\n")[:-1]


def record_count(run_dir: Path) -> int:
    """Whole records in run_dir/timeline.bin (every kind, holes included); TraceError when it is not a timeline."""
    path = Path(run_dir) / "timeline.bin"
    if path.exists() and not path.is_file():
        raise TraceError(f"{path}: not a regular file")
    with open(path, "rb") as fh:
        size = read_header(fh.read(HEADER_BYTES), path)
    return max(0, (path.stat().st_size - HEADER_BYTES) // size)


# kind u8 @0, flags u16 @2, name_id u32 @48; graph_exec, graph_replay u32 @88, @92 (records of 96 bytes and more)
_HEAD = struct.Struct("<BxH44xI")
_GRAPH = struct.Struct("<II")


def kernel_counts(run_dir: Path) -> dict:
    """What the exit line and `timeline_counts` say of the kernel records (the calibration kernel left out, records
    without GPU time counted): `kernels`, `by_origin` (most first), `kernels_flagged_probed`,
    `graph_replays_with_nodes` (distinct (graph_exec, graph_replay) among graph replays' kernel records). One pass
    in Python: for small timelines, where importing numpy costs more than reading them."""
    path = Path(run_dir) / "timeline.bin"
    with open(path, "rb") as fh:
        size = read_header(fh.read(HEADER_BYTES), path)
        body = fh.read()
    names = read_names(run_dir)
    clock = names.index(CLOCK_KERNEL) if CLOCK_KERNEL in names else -1
    per_name: dict[int, int] = {}
    flagged, replays = 0, set()
    graphs = size >= 96
    for at in range(0, len(body) - size + 1, size):
        kind, flags, name_id = _HEAD.unpack_from(body, at)
        if kind != KERNEL or name_id == clock:
            continue
        per_name[name_id] = per_name.get(name_id, 0) + 1
        flagged += flags & FLAG_PROBED
        if graphs and flags & FLAG_GRAPH:
            graph_exec, graph_replay = _GRAPH.unpack_from(body, at + 88)
            if graph_exec:
                replays.add((graph_exec, graph_replay))
    totals: dict[str, int] = {}
    for name_id, n in per_name.items():
        label = origin(names[name_id] if name_id < len(names) else "")
        totals[label] = totals.get(label, 0) + n
    return {"kernels": sum(per_name.values()), "by_origin": dict(sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))),
            "kernels_flagged_probed": flagged, "graph_replays_with_nodes": len(replays)}
