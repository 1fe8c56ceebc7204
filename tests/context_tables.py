"""Writers of the context tables (spec/trace-format.md, "Context tables") for tests: synthetic runs
with known answers, written byte for byte as the contract says (not with the reader's dtype)."""

from __future__ import annotations

import struct
from pathlib import Path

NO_NAME = 0xFFFFFFFF


def timeline_record(kind, start, end, *, name_id=NO_NAME, copy_kind=0, flags=0, device=0, stream=7, tid=100,
                    correlation=0, nbytes=0, probe_launch=-1, grid=(0, 0, 0), block=(0, 0, 0),
                    host_ns=None, graph=None) -> bytes:
    """An 80-byte record (the first writers'), 88 bytes with `host_ns` (the appended field), 96 with `graph`
    ((graph_exec, graph_replay), appended after host_ns)."""
    rec = struct.pack("<BBHIIIQQQQIi3I3I", kind, copy_kind, flags, device, stream, tid, start, end, correlation,
                      nbytes, name_id, probe_launch, *grid, *block)
    assert len(rec) == 80
    if graph is not None:
        return rec + struct.pack("<QII", host_ns or 0, *graph)
    return rec if host_ns is None else rec + struct.pack("<Q", host_ns)


def write_timeline(run: Path, records: list[bytes], names: list[str], *, cut: int = 0) -> None:
    size = len(records[0]) if records else 88
    assert all(len(r) == size for r in records)
    data = b"NTTIMEL1" + struct.pack("<II", 1, size) + b"".join(records)
    (run / "timeline.bin").write_bytes(data[:len(data) - cut] if cut else data)
    (run / "timeline_names.txt").write_text("".join(n + "\n" for n in names))


def range_record(start, end, name_id, *, tid=100, depth=0, source=1, domain_id=NO_NAME) -> bytes:
    rec = struct.pack("<QQIHBBIIQ", start, end, tid, depth, source, 0, name_id, domain_id, 0)
    assert len(rec) == 40
    return rec


def write_ranges(run: Path, records: list[bytes], names: list[str]) -> None:
    (run / "ranges.bin").write_bytes(b"NTRANGE1" + struct.pack("<II", 1, 40) + b"".join(records))
    (run / "ranges_names.txt").write_text("".join(n + "\n" for n in names))


GEMM = "sm90_xmma_gemm_f16f16_f32_tn_cublas"
TRITON = "triton_poi_fused_add_0"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def known_run(run: Path) -> None:
    """Device 0; stream 7: memcpy HtoD [100, 600] (not at 0: 0 is "no GPU time"), gemm [1000, 3000], triton (probed, launch 0) [3000, 4000],
    gemm [5000, 7000], memset [8000, 8100]; stream 9: NCCL [2000, 6000]. Busy (union) = 500 + 6000 + 100.
    Ranges on tid 100: step [0, 10000] > forward [900, 5500] > attn [2900, 4100]."""
    run.mkdir(parents=True, exist_ok=True)
    names = [GEMM, TRITON, NCCL]
    records = [
        timeline_record(1, 5000, 7000, name_id=0, grid=(132, 1, 1), block=(128, 1, 1)),  # not in time order
        timeline_record(2, 100, 600, copy_kind=1, nbytes=1024),
        timeline_record(1, 1000, 3000, name_id=0, grid=(132, 1, 1), block=(128, 1, 1)),
        timeline_record(1, 3000, 4000, name_id=1, flags=1, probe_launch=0, grid=(4, 1, 1), block=(64, 1, 1)),
        timeline_record(1, 2000, 6000, name_id=2, stream=9),
        timeline_record(3, 8000, 8100, nbytes=4096),
    ]
    write_timeline(run, records, names)
    write_ranges(run, [range_record(2900, 4100, 2, depth=2), range_record(0, 10000, 0),
                       range_record(900, 5500, 1, depth=1)], ["step", "forward", "attn"])


def graph_run(run: Path) -> None:
    """Stream 7: an eager GEMM [1000, 3000]; graph #1 (flags bit 1) replays 1 and 2 sampled, node by node (TRITON
    then GEMM: [10000, 10400] + [10400, 11000], [20000, 20500] + [20500, 21100]), replays 3 and 4 recorded whole
    (kind 4: [30000, 31000], [40000, 41200]); a replay recorded whole of graph #2, never sampled, [50000, 50300].
    Busy 2000 + 1000 + 1100 + 1000 + 1200 + 300 = 6600."""
    run.mkdir(parents=True, exist_ok=True)
    h = dict(host_ns=500)
    records = [
        timeline_record(1, 1000, 3000, name_id=0, correlation=1, graph=(0, 0), **h),
        timeline_record(1, 10000, 10400, name_id=1, flags=2, correlation=50, graph=(1, 1), **h),
        timeline_record(1, 10400, 11000, name_id=0, flags=2, correlation=50, graph=(1, 1), **h),
        timeline_record(1, 20000, 20500, name_id=1, flags=2, correlation=51, graph=(1, 2), **h),
        timeline_record(1, 20500, 21100, name_id=0, flags=2, correlation=51, graph=(1, 2), **h),
        timeline_record(4, 30000, 31000, flags=2, correlation=52, nbytes=77, graph=(1, 3), **h),
        timeline_record(4, 40000, 41200, flags=2, correlation=53, nbytes=77, graph=(1, 4), **h),
        timeline_record(4, 50000, 50300, flags=2, correlation=60, nbytes=78, graph=(2, 1), **h),
    ]
    write_timeline(run, records, [GEMM, TRITON])


GRAPHS_HEADER = "graph_exec\treplays\tnode_replays\tquiet_replays\twhole_replays\n"


def write_graph_counts(run: Path, rows: list[tuple], *, text: str | None = None) -> None:
    """timeline_graphs.tsv as the shim writes it (spec/trace-format.md): the header, then one row per graph
    (graph_exec, replays, node_replays, quiet_replays, whole_replays); `text` instead: the file's bytes as given."""
    body = text if text is not None else GRAPHS_HEADER + "".join("\t".join(map(str, r)) + "\n" for r in rows)
    (run / "timeline_graphs.tsv").write_text(body)


def quiet_run(run: Path, *, counts: bool = True) -> None:
    """Stream 7: an eager GEMM [1000, 3000]. Graph #1, 10 replays launched: replays 1 and 2 sampled (TRITON then
    GEMM: [10000, 10400] + [10400, 11000], [20000, 20500] + [20500, 21100]: spans 1000 and 1100, mean 1050),
    replays 3-10 quiet; quiet replay 5's memset node is recorded ([50000, 50100]: not a sampled replay).
    Graph #2, node by node only: GEMM [60000, 60200], [61000, 61200], [62000, 62300] (replays 1-3; mean span
    700/3). Graph #3 (the rest recorded whole): replay 1 sampled (TRITON [70000, 70100]), replays 2-4 whole
    ([71000, 71500], [72000, 72500], [73000, 73500]). timeline_graphs.tsv (with `counts`): #1 10 2 8 0,
    #2 3 3 0 0, #3 4 1 0 3. Quiet: 8, estimated 1050 x 8 = 8400 ns. Busy 2000 + 1000 + 1100 + 100 + 700 + 100
    + 1500 = 6500."""
    run.mkdir(parents=True, exist_ok=True)
    h = dict(host_ns=500)

    def node(kind, start, end, g, r, name_id=NO_NAME):
        return timeline_record(kind, start, end, name_id=name_id, flags=2, correlation=100 * g + r, graph=(g, r), **h)

    records = [
        timeline_record(1, 1000, 3000, name_id=0, correlation=1, graph=(0, 0), **h),
        node(1, 10000, 10400, 1, 1, 1), node(1, 10400, 11000, 1, 1, 0),
        node(1, 20000, 20500, 1, 2, 1), node(1, 20500, 21100, 1, 2, 0),
        node(3, 50000, 50100, 1, 5),
        node(1, 60000, 60200, 2, 1, 0), node(1, 61000, 61200, 2, 2, 0), node(1, 62000, 62300, 2, 3, 0),
        node(1, 70000, 70100, 3, 1, 1),
        node(4, 71000, 71500, 3, 2), node(4, 72000, 72500, 3, 3), node(4, 73000, 73500, 3, 4),
    ]
    write_timeline(run, records, [GEMM, TRITON])
    if counts:
        write_graph_counts(run, [(1, 10, 2, 8, 0), (2, 3, 3, 0, 0), (3, 4, 1, 0, 3)])
