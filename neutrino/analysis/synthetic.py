"""Synthetic trace directories with known contents, for tests and benchmarks.

Written with the trace writer of `neutrino.trace` exactly as the native writer lays them out
(spec/trace-format.md): per-kernel result files of appended frames, `result/index.bin`,
`event.log` with `start`, `instrument` and `frame` events. Nothing here runs on a GPU.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from neutrino import trace as nt

BLOCK_SCHED = {"name": "block_sched", "level": "warp", "type": "array", "record_bytes": 16, "cap": 1,
               "fields": [{"name": "start", "type": "u64", "offset": 0}, {"name": "elapsed", "type": "u32", "offset": 8},
                          {"name": "cuid", "type": "u32", "offset": 12}]}
GMEM_BYTES = {"name": "gmem_bytes", "level": "thread", "type": "sum", "record_bytes": 16, "cap": 1,
              "fields": [{"name": "bytes", "type": "u64", "offset": 0},
                         {"name": "active_threads", "type": "u64", "offset": 8}]}
TENSOROP = {"name": "tensorop", "level": "thread", "type": "sum", "record_bytes": 24, "cap": 1,
            "fields": [{"name": "count", "type": "u64", "offset": 0}, {"name": "warp_count", "type": "u64", "offset": 8},
                       {"name": "active_warps", "type": "u64", "offset": 16}]}


def hist_info(name: str, buckets: str) -> dict:
    count = nt.Buckets.parse(buckets).count
    return {"name": name, "level": "thread", "type": "hist", "record_bytes": 8 * count, "cap": 1, "buckets": buckets,
            "fields": [{"name": "buckets", "type": "u64", "offset": 0}]}


def array_section(info: dict, units: int, cap: int, counts: np.ndarray, records: np.ndarray) -> nt.MapSection:
    """An array map's section: `counts` (u32 per unit) and `records`, a structured array of
    (units, cap) records with the map's fields."""
    rb = int(info["record_bytes"])
    buf = np.zeros(nt.buffer_bytes(units, cap, rb), np.uint8)
    buf[: 4 * units].view("<u4")[:] = counts
    dtype = nt.record_dtype(nt._fields(info["fields"]), rb)
    body = buf[nt.align(4 * units, 16):].view(dtype).reshape(units, cap)
    for name in dtype.names:
        body[name] = records[name]
    return nt.MapSection.of(info, units, cap, buf)


def block_sched_section(grid, block, start, elapsed, cuid) -> nt.MapSection:
    """A block_sched map of one launch: one record per warp (arrays of units = warps)."""
    units, _ = nt.map_buffer_bytes(BLOCK_SCHED, grid, block)
    dtype = nt.record_dtype(nt._fields(BLOCK_SCHED["fields"]), 16)
    recs = np.zeros((units, 1), dtype)
    recs["start"][:, 0], recs["elapsed"][:, 0], recs["cuid"][:, 0] = start, elapsed, cuid
    return array_section(BLOCK_SCHED, units, 1, np.ones(units, np.uint32), recs)


def counters_section(info: dict, counters: Sequence[int]) -> nt.MapSection:
    """A sum or hist map whose counters (in field or bucket order) add up to `counters`; the
    values are spread over two rows, as the device's stripes leave them."""
    units, size = nt.map_buffer_bytes(info, (1, 1, 1), (1, 1, 1))
    rows = np.zeros((units, nt.stripe_row_bytes(int(info["record_bytes"])) // 8), np.uint64)
    values = np.asarray(counters, dtype=np.uint64)
    rows[0, : len(values)] = values // np.uint64(2)
    rows[3, : len(values)] = values - values // np.uint64(2)
    return nt.MapSection.of(info, units, 1, rows.tobytes())


class RunBuilder:
    """A run directory written launch by launch: `add_kernel`, `launch`…, then `close`."""

    def __init__(self, run: Path, *, pid: int = 4242, rank: int | None = None, start_time: float = 1.7e9):
        self.run = Path(run)
        (self.run / "result").mkdir(parents=True, exist_ok=True)
        start = {"event": "start", "time": start_time, "pid": pid, "argv": ["synthetic"], "probe": "synthetic",
                 "options": {}, "version": "test"}
        if rank is not None:
            start.update(rank=rank, local_rank=rank, world_size=None, rank_from="torchrun")
        self.events: list[dict] = [start]
        self.kernels: dict[str, int] = {}
        self.launches_of: dict[str, int] = {}
        self.files: dict[int, object] = {}
        self.index = open(self.run / "result" / "index.bin", "wb")
        self.index.write(nt.INDEX_MAGIC + nt.INDEX_HEADER_TAIL)
        self.frames: dict[str, int] = {}
        self.seq = 0
        self.map_bytes = 0

    def add_kernel(self, name: str, maps: Sequence[dict] = ()) -> int:
        k = len(self.kernels)
        self.kernels[name] = k
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        kdir = f"kernel/{k}_{digest}"
        (self.run / kdir).mkdir(parents=True, exist_ok=True)
        (self.run / kdir / "kernel.json").write_text(json.dumps({"version": 1, "kernels": {name: {"maps": list(maps)}}}))
        self.events.append({"event": "instrument", "time": 1.7e9, "kernel": name, "kernel_dir": kdir,
                            "seconds": 0.01, "cache": "miss", "sites": 1})
        self.files[k] = open(self.run / "result" / f"{k}_{digest}.ntr", "ab")
        return k

    def frame_id(self, text: str) -> int:
        if text not in self.frames:
            self.frames[text] = len(self.frames) + 1
            self.events.append({"event": "frame", "time": 1.7e9, "id": self.frames[text], "frame": text})
        return self.frames[text]

    def launch(self, kernel: str, grid, block, maps: Sequence[nt.MapSection], *, duration_ns: float | None = None,
               stream: int = 7, shared_bytes: int = 0, graph: int = 0, frame: str | None = None) -> int:
        """Append one probed launch; returns its index."""
        k = self.kernels[kernel]
        offset, size = nt.append_frame(self.files[k], grid=grid, block=block, shared_bytes=shared_bytes, maps=maps)
        rec = np.zeros(1, nt.INDEX_RECORD)
        kernel_launch = self.launches_of.get(kernel, 0)
        self.launches_of[kernel] = kernel_launch + 1
        rec[0] = (self.seq + 1, kernel_launch, stream, offset, size, tuple(grid), tuple(block), shared_bytes,
                  k, self.frame_id(frame) if frame else 0, 0, -1.0 if duration_ns is None else duration_ns, graph)
        self.index.write(rec.tobytes())
        self.map_bytes += sum(m.size for m in maps)
        self.seq += 1
        return self.seq - 1

    def close(self, extra_events: Sequence[dict] = ()) -> Path:
        for fh in self.files.values():
            fh.close()
        self.index.close()
        exit_event = {"event": "exit", "time": 1.7e9 + 1, "launches": self.seq, "fallbacks": 0, "dropped": 0}
        lines = [json.dumps(e) for e in [*self.events, *extra_events, exit_event]]
        (self.run / "event.log").write_text("\n".join(lines) + "\n")
        return self.run


def lognormal_warps(rng: np.random.Generator, grid, block, *, scale: float = 1.0, sms: int = 8,
                    warp_cycles: float = 10_000.0, spread: float = 0.02):
    """(start, elapsed, cuid) of the warps of a launch whose blocks run round-robin on `sms` SMs,
    one at a time, each block's warps lasting about `warp_cycles * scale` (lognormal, `spread`)."""
    blocks = int(np.prod(grid))
    warps = -(-int(np.prod(block)) // 32)
    length = rng.lognormal(np.log(warp_cycles * scale), spread, size=blocks)
    sm = np.arange(blocks) % sms
    start = np.zeros(blocks)
    for s in range(sms):  # blocks of an SM one after another
        mine = np.flatnonzero(sm == s)
        start[mine] = np.concatenate([[0.0], np.cumsum(length[mine])[:-1]]) + 1000.0
    start_w = np.repeat(start, warps).astype(np.uint64)
    elapsed_w = np.repeat(length, warps).astype(np.uint32)
    return start_w, elapsed_w, np.repeat(sm, warps).astype(np.uint32)


def write_timeline(run: Path, kernels: Sequence[dict], names: Sequence[str]) -> Path:
    """run/timeline.bin and timeline_names.txt (spec/trace-format.md, "Context tables"); each dict
    gives fields of TIMELINE_RECORD (missing ones 0; name_id 0xFFFFFFFF, probe_launch -1 by default)."""
    from neutrino.analysis.context_tables import TIMELINE_MAGIC, TIMELINE_RECORD

    recs = np.zeros(len(kernels), TIMELINE_RECORD)
    recs["name_id"], recs["probe_launch"] = 0xFFFFFFFF, -1
    for i, k in enumerate(kernels):
        for name, value in k.items():
            recs[name][i] = value
    header = TIMELINE_MAGIC + np.array([1, TIMELINE_RECORD.itemsize], "<u4").tobytes()
    (Path(run) / "timeline.bin").write_bytes(header + recs.tobytes())
    (Path(run) / "timeline_names.txt").write_text("".join(n + "\n" for n in names))
    return Path(run) / "timeline.bin"


def write_ranges(run: Path, ranges: Sequence[dict], names: Sequence[str]) -> Path:
    """run/ranges.bin and ranges_names.txt; each dict gives fields of RANGE_RECORD."""
    from neutrino.analysis.context_tables import RANGE_RECORD, RANGES_MAGIC

    recs = np.zeros(len(ranges), RANGE_RECORD)
    recs["domain_id"] = 0xFFFFFFFF
    for i, r in enumerate(ranges):
        for name, value in r.items():
            recs[name][i] = value
    header = RANGES_MAGIC + np.array([1, RANGE_RECORD.itemsize], "<u4").tobytes()
    (Path(run) / "ranges.bin").write_bytes(header + recs.tobytes())
    (Path(run) / "ranges_names.txt").write_text("".join(n.replace("\n", "\\n") + "\n" for n in names))
    return Path(run) / "ranges.bin"


def write_launch_args(run: Path, argsets: Sequence[dict], uses: dict[int, int]) -> Path:
    """run/launch_args.jsonl: the argument sets, then one use line per probed launch."""
    lines = [json.dumps(a) for a in argsets] + [json.dumps({"launch": k, "argset": v}) for k, v in uses.items()]
    path = Path(run) / "launch_args.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def kernel_runs(run: Path, *, seed: int, kernels: int = 10, launches: int = 30, shift: dict | None = None,
                rank: int | None = None, spread: float = 0.015, grid=(16, 1, 1), block=(64, 1, 1),
                bytes_shift: dict | None = None, run_spread: float = 0.0) -> Path:
    """A run of `kernels` kernels (k0, k1, …), each launched `launches` times with a block_sched and a
    gmem_bytes map: block lengths and launch durations lognormal with `spread` (sigma of the log)
    around a per-kernel base; `shift` = {kernel: factor} multiplies both for those kernels,
    `bytes_shift` = {kernel: factor} their bytes per launch (4096 × (i + 1) for kernel i);
    `run_spread` > 0 multiplies each kernel's times by a factor of this run, lognormal with that
    sigma (what differs between two processes of the same program)."""
    rng = np.random.default_rng(seed)
    shift = dict(shift or {})
    if run_spread > 0:
        for i in range(kernels):
            shift[f"k{i}"] = shift.get(f"k{i}", 1.0) * float(rng.lognormal(0.0, run_spread))
    b = RunBuilder(run, rank=rank)
    names = [f"k{i}" for i in range(kernels)]
    for name in names:
        b.add_kernel(name, [BLOCK_SCHED, GMEM_BYTES])
    for _ in range(launches):
        for i, name in enumerate(names):
            scale = shift.get(name, 1.0)
            warps = lognormal_warps(rng, grid, block, scale=scale, spread=spread, warp_cycles=10_000.0 * (1 + i % 7))
            moved = int(4096 * (i + 1) * (bytes_shift or {}).get(name, 1.0))
            maps = [block_sched_section(grid, block, *warps), counters_section(GMEM_BYTES, [moved, 1024])]
            duration = float(rng.lognormal(np.log(1e5 * (1 + i % 7) * scale), spread))
            b.launch(name, grid, block, maps, duration_ns=duration)
    return b.close()
