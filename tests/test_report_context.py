"""The report's opening section: where GPU time went (timeline.bin, ranges.bin), with known answers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from neutrino.analysis import context, ranks, report
from neutrino.maps import TraceError
from tests.context_tables import GEMM, NCCL, TRITON, graph_run, known_run, range_record, timeline_record, \
    write_ranges, write_timeline


def test_reader_follows_the_contract(tmp_path):
    known_run(tmp_path)
    tl = context.read_timeline(tmp_path)
    assert tl["start_ns"].tolist() == [100, 1000, 2000, 3000, 5000, 8000]  # ordered by start
    assert tl["name"].tolist() == ["", GEMM, NCCL, TRITON, GEMM, ""]
    assert tl["kind"].tolist() == [2, 1, 1, 1, 1, 3] and tl["stream"].tolist() == [7, 7, 9, 7, 7, 7]
    assert tl["probe_launch"].tolist() == [-1, -1, -1, 0, -1, -1] and tl["grid"][1].tolist() == [132, 1, 1]
    rg = context.read_ranges(tmp_path)
    assert rg["name"].tolist() == ["step", "forward", "attn"] and rg["domain"].tolist() == ["", "", ""]  # by start
    assert rg["depth"].tolist() == [0, 1, 2]


def test_a_record_cut_short_is_ignored_and_a_bad_header_named(tmp_path):
    write_timeline(tmp_path, [timeline_record(1, 1, 2, name_id=0)] * 2, ["k"], cut=30)
    assert len(context.read_timeline(tmp_path)) == 1
    (tmp_path / "timeline.bin").write_bytes(b"garbage-garbage-")
    with pytest.raises(TraceError, match="timeline.bin: not a timeline"):
        context.read_timeline(tmp_path)


def test_busy_time_is_the_union_per_device():
    s, e = np.array([0, 1000, 2000, 3000, 10]), np.array([500, 3000, 6000, 4000, 20])
    assert context.busy_ns(s, e, np.zeros(5, int)) == 500 + 5000
    assert context.busy_ns(s, e, np.array([0, 0, 0, 0, 1])) == 500 + 5000 + 10  # devices add up


def test_innermost_range_by_thread_and_time():
    rg = np.zeros(4, dtype=context.RANGES_DTYPE)
    rg["start_ns"], rg["end_ns"], rg["tid"] = [0, 10, 20, 0], [100, 50, 30, 100], [1, 1, 1, 2]
    tid = np.array([1, 1, 1, 1, 2, 0, 3])
    when = np.array([5, 15, 25, 60, 5, 5, 5])
    assert context.innermost_ranges(rg, tid, when).tolist() == [0, 1, 2, 0, 3, -1, -1]
    assert context.innermost_ranges(rg, tid, np.array([100, 50, 30, 0, 200, 5, 5])).tolist() == [-1, 0, 1, 0, -1, -1, -1]


def test_origins_from_names():
    assert [context.origin(n) for n in (GEMM, TRITON, NCCL, "_ZN2at6native29vectorized_elementwise_kernel",
                                        "cutlass_80_tensorop_gemm", "loop_add_fusion", "cudnn::conv", "mykernel")] \
        == ["cuBLAS", "Triton", "NCCL", "ATen", "CUTLASS", "XLA", "cuDNN", "other"]


def test_context_rows_have_known_answers(tmp_path):
    known_run(tmp_path)
    ctx = context.load(tmp_path)
    assert (ctx.kernels, ctx.probed, ctx.copies, ctx.memsets, ctx.devices, ctx.ranges) == (4, 1, 1, 1, 1, 3)
    assert ctx.busy_ns == 6600 and ctx.window_ns == 8000
    rows = {r.name: r for r in ctx.rows}
    assert [r.name for r in ctx.rows] == [NCCL, GEMM, TRITON, "[memcpy HtoD]", "[memset]"]  # ties by name
    g = rows[GEMM]
    assert (g.origin, g.count, g.probed, g.total_ns, g.mean_ns) == ("cuBLAS", 2, 0, 4000, 2000.0)
    assert g.share == pytest.approx(4000 / 6600) and (g.range, g.range_launches) == ("forward", 2)
    t = rows[TRITON]
    assert (t.origin, t.probed, t.range, t.total_ns) == ("Triton", 1, "attn", 1000)
    assert (rows[NCCL].origin, rows[NCCL].range) == ("NCCL", "forward")
    assert (rows["[memcpy HtoD]"].origin, rows["[memcpy HtoD]"].range) == ("copy", "step")
    assert rows["[memset]"].total_ns == 100


def test_report_opens_with_the_context(tmp_path, capsys):
    run = tmp_path / "run"
    known_run(run)
    (run / "event.log").write_text(json.dumps({"event": "start", "time": 0, "pid": 1}) + "\n")
    assert report.main(str(run), plots=False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("[where GPU time went] 4 kernel launch(es) (1 probed), 1 copies, 1 memsets "
                               "on 1 device(s): GPU busy 6.6 us of a 8.0 us window")
    header = lines[3].split()
    assert header[:4] == ["kernel", "origin", "count", "probed"]
    gemm = next(line for line in lines if line.startswith(GEMM))
    assert gemm.split()[1:] == ["cuBLAS", "2", "0", "4.0", "60.6%", "2.00", "forward"]
    assert "[probed launches]" in lines


def test_report_json_has_the_gpu_time(tmp_path, capsys):
    run = tmp_path / "run"
    known_run(run)
    (run / "event.log").write_text(json.dumps({"event": "start", "time": 0, "pid": 1}) + "\n")
    assert report.main(str(run), output_format="json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu_time"]["busy_ns"] == 6600
    assert doc["gpu_time"]["rows"][0]["name"] == NCCL and doc["gpu_time"]["rows"][0]["total_ns"] == 4000


def test_records_without_gpu_time_are_counted_not_timed(tmp_path):
    """known_run plus a gemm and a copy CUPTI gave no times (flags bit 2; a 0 start): counted in the
    rows and the headline, left out of busy, window, totals and means, and said in a line."""
    known_run(tmp_path)
    records = [timeline_record(1, 5000, 7000, name_id=0), timeline_record(2, 100, 600, copy_kind=1, nbytes=1024),
               timeline_record(1, 1000, 3000, name_id=0), timeline_record(1, 3000, 4000, name_id=1, flags=1,
                                                                            probe_launch=0),
               timeline_record(1, 2000, 6000, name_id=2, stream=9), timeline_record(3, 8000, 8100, nbytes=4096),
               timeline_record(1, 0, 0, name_id=0, flags=4), timeline_record(2, 0, 900, copy_kind=1, nbytes=8)]
    write_timeline(tmp_path, records, [GEMM, TRITON, NCCL])
    ctx = context.load(tmp_path)
    assert (ctx.kernels, ctx.copies, ctx.untimed) == (5, 2, 2)
    assert ctx.busy_ns == 6600 and ctx.window_ns == 8000  # as without the two
    gemm = next(r for r in ctx.rows if r.name == GEMM)
    assert (gemm.count, gemm.total_ns, gemm.mean_ns) == (3, 4000, 2000.0)
    copy = next(r for r in ctx.rows if r.name == "[memcpy HtoD]")
    assert (copy.count, copy.total_ns, copy.mean_ns) == (2, 500, 500.0)
    assert any(line.startswith("(2 record(s) without GPU time") for line in context.render(ctx))


def test_ranges_absent_is_said(tmp_path):
    write_timeline(tmp_path, [timeline_record(1, 1, 10, name_id=0)], ["k"])
    text = "\n".join(context.render(context.load(tmp_path)))
    assert "(no ranges recorded" in text and "100.0%" in text
    write_ranges(tmp_path, [range_record(0, 5, 0)], ["r"])
    assert context.load(tmp_path).rows[0].range == "r"


def test_a_run_with_no_probed_launch_still_shows_where_time_went(tmp_path, capsys):
    run = tmp_path / "run"
    known_run(run)  # an eager PyTorch program: kernels on the timeline, none probed by us in the trace
    (run / "event.log").write_text(json.dumps({"event": "start", "time": 0, "pid": 1}) + "\n")
    assert report.main(str(run)) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(": 0 probed launches, 0 probed kernels")
    assert "[where GPU time went] 4 kernel launch(es)" in out and "(no probed launch in this trace)" in out
    assert "kernel  launches  maps" not in out


def test_a_probed_launch_uses_its_host_call_time_when_recorded(tmp_path):
    known_run(tmp_path)
    # the triton kernel (probed launch 0) ran at 3000 on the GPU, inside attn; its launch call was at 950,
    # on thread 100, inside forward but not attn: the host time decides
    (tmp_path / "launch_args.jsonl").write_text(
        '{"argset": 0, "kernel": "triton_poi_fused_add_0", "args": []}\n'
        '{"launch": 0, "argset": 0, "tid": 100, "host_ns": 950}\n{"launch": 1, "arg')
    rows = {r.name: r for r in context.load(tmp_path).rows}
    assert rows[TRITON].range == "forward"
    assert context.read_launch_hosts(tmp_path) == {0: (100, 950)}


def test_every_kernel_uses_its_launch_host_time_when_the_timeline_has_it(tmp_path):
    """88-byte records with host_ns (the default timeline level): unprobed kernels too are placed by
    their launch call's host time, not their GPU start; a record with host_ns 0 falls back to the
    GPU start. Ranges on tid 100: step [0, 10000] > forward [900, 5500] > attn [2900, 4100]."""
    from neutrino import ranges as nr

    write_timeline(tmp_path, [
        timeline_record(1, 3000, 3500, name_id=0, host_ns=950),   # GPU start in attn, launched in forward
        timeline_record(1, 6000, 6500, name_id=0, host_ns=3000),  # GPU start in step only, launched in attn
        timeline_record(1, 4000, 4100, name_id=1, host_ns=0),     # no host time: its GPU start, attn
        timeline_record(1, 20000, 20100, name_id=2, host_ns=9999, tid=0),  # unknown thread: no range
    ], [GEMM, TRITON, NCCL])
    write_ranges(tmp_path, [range_record(2900, 4100, 2, depth=2), range_record(0, 10000, 0),
                            range_record(900, 5500, 1, depth=1)], ["step", "forward", "attn"])
    assert nr.timeline_ranges(tmp_path) == [["step", "forward"], ["step", "forward", "attn"],
                                             ["step", "forward", "attn"], []]
    rows = {r.name: r for r in context.load(tmp_path).rows}
    assert (rows[GEMM].range, rows[GEMM].range_launches) == ("forward", 1)  # 1 of 2 under forward, 1 under attn
    assert rows[TRITON].range == "attn" and rows[NCCL].range == ""
    tl = context.read_timeline(tmp_path)
    assert tl["host_ns"].tolist() == [950, 0, 3000, 9999]  # by GPU start


def test_each_rank_of_a_job_opens_with_its_context(tmp_path, capsys):
    for rank in (0, 1):
        run = tmp_path / "job" / f"rank{rank}"
        known_run(run)
        (run / "event.log").write_text(json.dumps({"event": "start", "time": 0, "pid": 10 + rank}) + "\n")
    assert ranks.main(str(tmp_path / "job"), plots=False) == 0
    out = capsys.readouterr().out
    assert out.count("[where GPU time went] 4 kernel launch(es)") == 2
    assert "== rank 0 (pid 10)" in out and "== rank 1 (pid 11)" in out
    assert "GPU busy (us): rank 0 6.6, rank 1 6.6; max/min 1.00" in out.splitlines()  # then the cross-rank part


def test_probed_launch_ranges_from_the_timeline_host_time(tmp_path):
    """A probed launch without a launch_args.jsonl use line (the argument trace off) gets its enclosing
    ranges from its timeline record's host_ns; one with a use line keeps that line's host time."""
    from neutrino import ranges as nr

    write_timeline(tmp_path, [timeline_record(1, 6000, 6500, name_id=0, probe_launch=0, host_ns=3000),
                              timeline_record(1, 7000, 7500, name_id=0, probe_launch=1, host_ns=3000)], [TRITON])
    write_ranges(tmp_path, [range_record(2900, 4100, 2, depth=2), range_record(0, 10000, 0),
                            range_record(900, 5500, 1, depth=1)], ["step", "forward", "attn"])
    (tmp_path / "launch_args.jsonl").write_text('{"launch": 1, "argset": 0, "tid": 100, "host_ns": 950}\n')
    assert nr.launch_ranges(tmp_path) == {0: ["step", "forward", "attn"], 1: ["step", "forward"]}


def test_graph_replays_recorded_whole_with_their_sampled_kernels(tmp_path):
    """Replays recorded whole are rows of their own (`[graph #N replay]`, origin graph) in the busy time; the
    kernel rows hold the sampled replays' kernels; per graph, the sampled replays' figures (tests/context_tables.py
    graph_run has the known answers)."""
    graph_run(tmp_path)
    ctx = context.load(tmp_path)
    assert (ctx.kernels, ctx.busy_ns, ctx.window_ns) == (5, 6600, 49300)
    rows = {r.name: r for r in ctx.rows}
    assert [r.name for r in ctx.rows] == [GEMM, "[graph #1 replay]", TRITON, "[graph #2 replay]"]
    assert (rows["[graph #1 replay]"].origin, rows["[graph #1 replay]"].count, rows["[graph #1 replay]"].total_ns) \
        == ("graph", 2, 2200)
    assert (rows[GEMM].count, rows[GEMM].total_ns, rows[TRITON].count, rows[TRITON].total_ns) == (3, 3200, 2, 900)
    g1, g2 = ctx.graphs
    assert (g1.graph, g1.sampled, g1.whole, g1.whole_ns, g1.whole_mean_ns) == (1, 2, 2, 2200, 1100.0)
    assert (g1.sampled_mean_ns, g1.nodes, g1.top) == (1050.0, 2.0, ((GEMM, 600.0), (TRITON, 450.0)))
    assert (g2.graph, g2.sampled, g2.whole, g2.whole_ns, g2.top) == (2, 0, 1, 300, ())
    text = "\n".join(context.render(ctx))
    assert "3 graph replay(s) recorded whole" in text.splitlines()[0]
    assert "per graph, what its sampled replays" in text and "#1" in text
    numbers = context.graph_numbers(ctx)
    assert numbers[0]["whole_replays"] == 2 and numbers[0]["top_sampled"][0] == {"name": GEMM, "ns_per_replay": 600.0}


def test_report_json_has_the_graph_replays(tmp_path, capsys):
    run = tmp_path / "run"
    graph_run(run)
    (run / "event.log").write_text(json.dumps({"event": "start", "time": 0, "pid": 1}) + "\n")
    assert report.main(str(run), output_format="json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [g["graph"] for g in doc["gpu_time"]["graph_replays"]] == [1, 2]
    assert doc["gpu_time"]["graph_replays"][0]["sampled_mean_ns"] == 1050.0


def test_older_records_without_graph_fields_read_as_unknown(tmp_path):
    """88-byte records (before graph_exec / graph_replay): a replay recorded whole is `[graph replay]`, and no
    graph figures are made (its graph is unknown)."""
    write_timeline(tmp_path, [timeline_record(4, 100, 400, flags=2, host_ns=50),
                              timeline_record(1, 500, 900, name_id=0, host_ns=60)], [GEMM])
    ctx = context.load(tmp_path)
    assert [r.name for r in ctx.rows] == [GEMM, "[graph replay]"] and ctx.busy_ns == 700
    assert len(ctx.graphs) == 1 and (ctx.graphs[0].graph, ctx.graphs[0].sampled, ctx.graphs[0].whole) == (0, 0, 1)
