"""`neutrino export --perfetto` (protobuf): tracks and slices decoded with the perfetto package's
generated messages (the trace_processor shell cannot be downloaded here: see test at the end)."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import pytest

from neutrino import cli
from neutrino.analysis import export_timeline
from neutrino.analysis.perfetto_proto import ProtoWriter
from tests.context_tables import GEMM, TRITON, graph_run, range_record, timeline_record, write_ranges, write_timeline
from tests.test_analysis_trace import BLOCK_SCHED, WARPS, section, write_trace

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def decode(path):
    """(tracks: uuid -> TrackDescriptor, slices: [(track uuid, name, start, end, args)]) of a protobuf trace."""
    trace = pb.Trace.FromString(open(path, "rb").read())
    tracks, open_slices, slices = {}, {}, []
    for p in trace.packet:
        assert p.trusted_packet_sequence_id == 1
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        elif p.HasField("track_event"):
            e = p.track_event
            if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                args = {a.name: a.string_value or a.int_value or a.double_value for a in e.debug_annotations}
                open_slices.setdefault(e.track_uuid, []).append((e.name, p.timestamp, args))
            else:
                assert e.type == pb.TrackEvent.TYPE_SLICE_END
                name, start, args = open_slices[e.track_uuid].pop()
                slices.append((e.track_uuid, name, start, p.timestamp, args))
    assert trace.packet[0].sequence_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    assert not any(open_slices.values())
    return tracks, slices


def track_name(tracks, uuid):
    t = tracks[uuid]
    return t.process.process_name if t.HasField("process") else t.name


def vadd_run(root, with_timeline=True):
    launches = [{"kernel": "vadd", "grid": (4, 1, 1), "block": (64, 1, 1), "duration_ns": d,
                 "sections": [section("block_sched", "warp", BLOCK_SCHED, 16, [[w] for w in WARPS])]}
                for d in (160.0, 240.0)]
    run = write_trace(root, launches)
    if with_timeline:
        write_timeline(run, [
            timeline_record(1, 1000, 3000, name_id=0),
            timeline_record(1, 10_000, 10_160, name_id=1, flags=1, probe_launch=0, grid=(4, 1, 1), block=(64, 1, 1)),
            timeline_record(1, 20_000, 20_240, name_id=1, flags=1, probe_launch=1, grid=(4, 1, 1), block=(64, 1, 1)),
            timeline_record(2, 100, 600, copy_kind=1, nbytes=1024),
            timeline_record(3, 30_000, 30_100, stream=9),
        ], [GEMM, "vadd"])
        write_ranges(run, [range_record(0, 40_000, 0), range_record(900, 20_500, 1, depth=1),
                           range_record(5, 15, 2, tid=200, source=2), range_record(10, 20, 2, tid=200, source=2)],
                     ["step", "forward", "async"])
    return run


def test_tracks_and_slices_per_track(tmp_path):
    run = vadd_run(tmp_path)
    out = tmp_path / "t.pftrace"
    line = export_timeline.export_protobuf(str(run), str(out))
    tracks, slices = decode(out)
    per_track = Counter(track_name(tracks, u) for u, *_ in slices)
    assert per_track == {"thread 100": 2, "start/end ranges #0": 1, "start/end ranges #1": 1,
                         "GPU 0 stream 7": 4, "GPU 0 stream 9": 1,
                         "SM 0": 6, "SM 1": 2, "SM 0 w0": 6, "SM 0 w1": 6, "SM 1 w0": 2, "SM 1 w1": 2}
    assert "blocks placed: 2 cycles scaled into the kernel's timeline interval" in line
    process = next(t for t in tracks.values() if t.HasField("process"))
    assert process.process.pid == 1 and process.process.process_name.startswith("run 0 (pid 1")
    thread = next(t for t in tracks.values() if t.HasField("thread"))
    assert (thread.thread.pid, thread.thread.tid) == (1, 100)
    stream = next(u for u, t in tracks.items() if t.name == "GPU 0 stream 7")
    assert tracks[stream].parent_uuid == process.uuid
    sm0 = next(u for u, t in tracks.items() if t.name == "SM 0")
    assert tracks[sm0].parent_uuid == stream  # block tracks nest under the kernel's stream track
    assert tracks[next(u for u, t in tracks.items() if t.name == "SM 0 w1")].parent_uuid == sm0


def test_blocks_lie_inside_their_kernel_slice(tmp_path):
    run = vadd_run(tmp_path)
    out = tmp_path / "t.pftrace"
    export_timeline.export_protobuf(str(run), str(out))
    tracks, slices = decode(out)
    kernels = {s[4].get("probed launch", -1): s for s in slices if s[1] == "vadd"}
    assert (kernels[0][2], kernels[0][3]) == (10_000, 10_160)
    blocks = [s for s in slices if s[1].startswith("block ")]
    for _, _, start, end, args in blocks:
        k = kernels[args["launch"]] if args["launch"] else kernels[0]
        assert k[2] <= start <= end <= k[3]
    # launch 0: 320 cycles into 160 ns: block 2 (SM 0, cycles 110..210) at 10_055..10_105
    b2 = next(s for s in blocks if s[1] == "block 2" and s[2] < 20_000)
    assert (b2[2], b2[3]) == (10_055, 10_105)
    gemm = next(s for s in slices if s[1] == GEMM)
    assert gemm[4]["origin"] == "cuBLAS" and (gemm[2], gemm[3]) == (1000, 3000)
    copy = next(s for s in slices if s[1] == "[memcpy HtoD]")
    assert copy[4]["bytes"] == 1024


def test_without_timeline_launches_are_laid_out_and_said(tmp_path):
    run = vadd_run(tmp_path, with_timeline=False)
    out = tmp_path / "t.pftrace"
    line = export_timeline.export_protobuf(str(run), str(out))
    assert "no timeline.bin: probed launches only" in line and "laid out from the host clock" in line
    tracks, slices = decode(out)
    launches = sorted((s for s in slices if track_name(tracks, s[0]) == "probed launches"), key=lambda s: s[2])
    assert [(s[2], s[3]) for s in launches] == [(0, 160), (1160, 1400)]  # host anchor 0 (start event), 1 us apart
    assert all(launches[0][2] <= s[2] <= s[3] <= launches[0][3] for s in slices
               if s[1].startswith("block ") and s[2] < 1000)


def test_a_job_is_one_process_per_rank_on_one_clock(tmp_path):
    job = tmp_path / "job"
    for rank in (0, 1):
        run = vadd_run(tmp_path / f"r{rank}")
        shutil.move(str(run), str(job / f"rank{rank}"))
    out = tmp_path / "job.pftrace"
    export_timeline.export_protobuf(str(job), str(out))
    tracks, slices = decode(out)
    processes = sorted((t.process.pid, t.process.process_name.split(" (")[0]) for t in tracks.values()
                       if t.HasField("process"))
    assert processes == [(1, "rank 0"), (2, "rank 1")]
    gemms = [s for s in slices if s[1] == GEMM]
    assert len(gemms) == 2 and {(s[2], s[3]) for s in gemms} == {(1000, 3000)}  # timestamps as recorded


def test_cli_protobuf_by_default_json_by_suffix_or_format(tmp_path, capsys):
    run = vadd_run(tmp_path)
    assert cli.main(["export", str(run), "--perfetto", str(tmp_path / "a.pftrace")]) == 0
    assert decode(tmp_path / "a.pftrace")[1]
    assert cli.main(["export", str(run), "--perfetto", str(tmp_path / "b.json")]) == 0
    assert "traceEvents" in json.loads((tmp_path / "b.json").read_text())
    assert cli.main(["export", str(run), "--perfetto", str(tmp_path / "c.trace"), "--format", "json"]) == 0
    assert "traceEvents" in json.loads((tmp_path / "c.trace").read_text())
    assert cli.main(["export", str(tmp_path / "nope"), "--perfetto", str(tmp_path / "d.pftrace")]) != 0
    assert "no such trace directory" in capsys.readouterr().err


def test_varints_and_negative_ints_decode():
    import io

    buf = io.BytesIO()
    w = ProtoWriter(buf)
    t = w.track("t", pid=3, process_name="p")
    w.slice(t, "s", 2**62, 2**62 + 5, {"neg": -7, "big": 2**40, "f": 0.5, "text": "x", "flag": True})
    trace = pb.Trace.FromString(buf.getvalue())
    (ann := {a.name: a for a in trace.packet[1].track_event.debug_annotations})
    assert ann["neg"].int_value == -7 and ann["big"].int_value == 2**40 and ann["f"].double_value == 0.5
    assert ann["text"].string_value == "x" and ann["flag"].bool_value
    assert trace.packet[1].timestamp == 2**62 and trace.packet[2].timestamp == 2**62 + 5


def trace_processor_shell() -> str | None:
    """A trace_processor_shell binary: $NEUTRINO_TRACE_PROCESSOR, one the perfetto package downloaded
    before (its cache), or one on PATH; None when there is none. No package registry reachable here
    ships it (checked 2026-11-27): the `perfetto` package (0.59.1) fetches it on first use from
    Perfetto's artifact host (perfetto.prebuilts, a URL and sha256 per platform), which this machine and
    CI cannot reach; Debian 12 has no perfetto package; the PyPI packages around it (perfetto-extras
    0.3.4, perfetto-cli 0.3.0) are pure Python and ship no binary; npm has no package named perfetto."""
    import glob
    import shutil

    candidates = [os.environ.get("NEUTRINO_TRACE_PROCESSOR") or ""]
    candidates += sorted(glob.glob(os.path.expanduser("~/.local/share/perfetto/prebuilts/trace_processor_shell*")))
    candidates.append(shutil.which("trace_processor_shell") or "")
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)
                 and not c.endswith(".tmp")), None)


def test_trace_processor_opens_it_when_its_shell_is_available(tmp_path):
    """Perfetto's own TraceProcessor opens our protobuf export: slices per track, the block and warp
    tracks nested under the kernel's stream track, and the ranges nested on their thread (docs:
    spec/analysis.md, "Perfetto"). Skipped without the shell binary."""
    shell = trace_processor_shell()
    if not shell:
        pytest.skip("no trace_processor_shell: set NEUTRINO_TRACE_PROCESSOR to one (the perfetto package "
                    "downloads it from Perfetto's artifact host, not reachable here; no pip, npm or apt package "
                    "ships it)")
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    run = vadd_run(tmp_path)
    out = tmp_path / "t.pftrace"
    export_timeline.export_protobuf(str(run), str(out))
    tp = TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=shell))
    try:
        rows = {r.name: r.n for r in tp.query("select t.name as name, count(*) as n from slice s join track t "
                                              "on s.track_id = t.id where t.name like 'GPU%' or t.name like 'SM%' "
                                              "group by t.name")}
        assert rows == {"GPU 0 stream 7": 4, "GPU 0 stream 9": 1, "SM 0": 6, "SM 1": 2, "SM 0 w0": 6,
                        "SM 0 w1": 6, "SM 1 w0": 2, "SM 1 w1": 2}
        parents = {r.name: r.parent for r in tp.query(
            "select t.name as name, p.name as parent from track t join track p on t.parent_id = p.id "
            "where t.name like 'SM%'")}
        assert parents["SM 0"] == "GPU 0 stream 7" and parents["SM 0 w1"] == "SM 0"
        depth = {r.name: r.depth for r in tp.query("select name, depth from slice where name in ('step', 'forward')")}
        assert depth == {"step": 0, "forward": 1}
    finally:
        tp.close()


def test_vectorised_slices_decode_like_the_slow_path():
    import io

    import numpy as np

    from neutrino.analysis.perfetto_proto import write_slices

    buf = io.BytesIO()
    w = ProtoWriter(buf)
    t = w.track("t", pid=3, process_name="p")
    starts = np.array([0, 127, 128, 2**62, 10**18 + 7])
    numbers = np.array([0, 9, 10, 12345678901234567890 // 10, 5])
    write_slices(w, np.array([t] * 5), "warp ", numbers, starts, starts + np.array([1, 0, 300, 2**20, 5]),
                 {"neg": np.array([-1, -2**40, 0, 1, 2**62]), "unit": numbers}, "warp")
    trace = pb.Trace.FromString(buf.getvalue())
    begins = [p for p in trace.packet if p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN]
    ends = [p for p in trace.packet if p.track_event.type == pb.TrackEvent.TYPE_SLICE_END]
    assert [p.track_event.name for p in begins] == [f"warp {n}" for n in numbers.tolist()]
    assert [p.timestamp for p in begins] == starts.tolist()
    assert [p.timestamp for p in ends] == (starts + np.array([1, 0, 300, 2**20, 5])).tolist()
    assert [p.track_event.debug_annotations[0].int_value for p in begins] == [-1, -2**40, 0, 1, 2**62]
    assert {p.track_event.track_uuid for p in begins + ends} == {t} and w.slices == 5
    assert all(p.track_event.categories == ["warp"] for p in begins)
    kinds = [p.track_event.type for p in trace.packet[1:]]
    assert kinds == [1, 2] * 5  # each BEGIN right before its END


def test_graph_replays_recorded_whole_are_slices_with_their_sampled_kernels(tmp_path):
    """A replay recorded whole is one slice on its stream's track, named for its graph, its args saying what the
    graph's sampled replays showed (kernels per replay, span, top kernels); sampled replays' kernels are slices
    with their graph and replay."""
    run = write_trace(tmp_path, [])
    graph_run(run)
    out = tmp_path / "g.pftrace"
    export_timeline.export_protobuf(str(run), str(out))
    tracks, slices = decode(out)
    on_stream = [s for s in slices if track_name(tracks, s[0]) == "GPU 0 stream 7"]
    assert [s[1] for s in sorted(on_stream, key=lambda s: s[2])] == [
        GEMM, TRITON, GEMM, TRITON, GEMM, "[graph #1 replay]", "[graph #1 replay]", "[graph #2 replay]"]
    whole = [s for s in on_stream if s[1] == "[graph #1 replay]"]
    assert [(s[2], s[3], s[4]["graph replay"]) for s in sorted(whole, key=lambda s: s[2])] == [
        (30000, 31000, 3), (40000, 41200, 4)]
    args = whole[0][4]
    assert args["graph"] == 1 and "2 sampled replay(s)" in args["recorded"]
    assert args["sampled kernels per replay"] == 2.0 and args["sampled replay span (us)"] == 1.05
    assert args["sampled top kernels (us per replay)"] == f"{GEMM} 0.600; {TRITON} 0.450"
    never = next(s for s in on_stream if s[1] == "[graph #2 replay]")
    assert "no sampled replay" in never[4]["recorded"]
    node = next(s for s in on_stream if s[1] == TRITON and s[2] == 20000)
    assert (node[4]["graph"], node[4]["graph replay"]) == (1, 2)
