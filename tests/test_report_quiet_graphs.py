"""Quiet graph replays (issue 24): timeline_graphs.tsv read, counted in the report (text, json), the job's busy
line, the Perfetto args and the Parquet dataset; older runs without the file as before. Known answers:
tests/context_tables.py quiet_run."""

from __future__ import annotations

import json

import pytest

from neutrino.analysis import context, export_timeline, ranks, report
from neutrino.maps import TraceError
from neutrino.timeline import GRAPH_COUNTS, read_graph_counts
from tests.context_tables import GEMM, GRAPHS_HEADER, TRITON, graph_run, quiet_run, write_graph_counts


def test_reader_reads_the_rows_by_graph(tmp_path):
    assert read_graph_counts(tmp_path) is None  # absent: an older run, or no graph launched
    write_graph_counts(tmp_path, [(2, 3, 3, 0, 0), (1, 5000, 52, 4948, 0), (3, 2**64 - 1, 2**64 - 1, 0, 0)])
    rows = read_graph_counts(tmp_path)
    assert rows.dtype == GRAPH_COUNTS
    assert [tuple(int(v) for v in r) for r in rows] == [(1, 5000, 52, 4948, 0), (2, 3, 3, 0, 0),
                                                        (3, 2**64 - 1, 2**64 - 1, 0, 0)]
    write_graph_counts(tmp_path, [], text=GRAPHS_HEADER.rstrip("\n") + "\tlater\n1\t4\t1\t3\t0\t99\n")
    assert read_graph_counts(tmp_path)["quiet_replays"].tolist() == [3]  # a later writer's column is dropped
    write_graph_counts(tmp_path, [])
    assert len(read_graph_counts(tmp_path)) == 0


@pytest.mark.parametrize("text, where", [
    ("", "line 1: expected the header"),
    ("graph_exec\treplays\n1\t2\n", "line 1: expected the header"),
    (GRAPHS_HEADER + "1\t5\t2\t3\t0\n2\t5\t2\t2\t0\n", "line 3: replays 5 != node_replays 2 \\+ quiet_replays 2"),
    (GRAPHS_HEADER + "1\t5\t2\t3\n", "line 2: 4 field\\(s\\), the header has 5"),
    (GRAPHS_HEADER + "1\t5\t2\t-3\t6\n", "line 2: not unsigned decimal integers"),
    (GRAPHS_HEADER + "1\t5\t2\t3\t0\r\n", "line 2: not unsigned decimal integers"),
    (GRAPHS_HEADER + "0\t1\t1\t0\t0\n", "line 2: graph_exec 0 not in"),
    (GRAPHS_HEADER + f"{2**32}\t1\t1\t0\t0\n", "line 2: graph_exec 4294967296 not in"),
    (GRAPHS_HEADER + f"1\t{2**64}\t{2**64}\t0\t0\n", "line 2: .*a count over 2\\^64-1"),
    (GRAPHS_HEADER + "1\t1\t1\t0\t0\n1\t2\t2\t0\t0\n", "line 3: graph_exec 1 listed twice"),
    (GRAPHS_HEADER + "1\t5\t2\t3", "line 2: no line end"),
])
def test_a_malformed_file_is_an_error_naming_file_and_line(tmp_path, text, where):
    write_graph_counts(tmp_path, [], text=text)
    with pytest.raises(TraceError, match=f"timeline_graphs.tsv: {where}"):
        read_graph_counts(tmp_path)


def test_graphs_with_quiet_replays_have_known_counts_and_estimate(tmp_path):
    quiet_run(tmp_path)
    ctx = context.load(tmp_path)
    assert (ctx.busy_ns, ctx.kernels, ctx.memsets, ctx.quiet, ctx.counted) == (6500, 9, 1, 8, True)
    g1, g2, g3 = ctx.graphs
    # graph 1: quiet replay 5's memset record makes no sampled replay of it (no kernel record)
    assert (g1.graph, g1.launched, g1.sampled, g1.quiet, g1.whole) == (1, (10, 2, 8, 0), 2, 8, 0)
    assert (g1.sampled_mean_ns, g1.nodes, g1.top) == (1050.0, 2.0, ((GEMM, 600.0), (TRITON, 450.0)))
    assert g1.quiet_estimate_ns == 1050.0 * 8
    # graph 2: node by node only (listed although it has no replay recorded whole), nothing quiet: no estimate
    assert (g2.graph, g2.launched, g2.sampled, g2.whole, g2.quiet_estimate_ns) == (2, (3, 3, 0, 0), 3, 0, None)
    assert g2.sampled_mean_ns == pytest.approx(700 / 3)
    assert (g3.graph, g3.sampled, g3.whole, g3.whole_ns, g3.sampled_mean_ns) == (3, 1, 3, 1500, 100.0)
    assert ctx.quiet_estimate_ns == 8400.0


def test_report_text_says_how_many_replays_are_in_no_row(tmp_path):
    quiet_run(tmp_path)
    lines = "\n".join(context.render(context.load(tmp_path))).splitlines()
    assert "8 graph replay(s) quiet (not recorded)" in lines[0]
    quiet = next(line for line in lines if line.startswith("(8 graph replay(s) quiet"))
    assert "their kernels are in no row above" in quiet and "ESTIMATED at 8.4 us" in quiet
    header = next(line for line in lines if line.startswith("graph "))
    assert header.split("  ")[:5] == ["graph", "replays", "sampled", "quiet", "whole"] and "quiet est. (us)" in header
    row1 = next(line for line in lines if line.startswith("#1 ")).split()
    assert row1[:8] == ["#1", "10", "2", "8", "0", "-", "1.05", "2.0"] and row1[8] == "8.4"
    row2 = next(line for line in lines if line.startswith("#2 ")).split()
    assert row2[:9] == ["#2", "3", "3", "0", "0", "-", "0.23", "1.0", "-"]


def test_report_json_has_the_counts(tmp_path, capsys):
    run = tmp_path / "run"
    quiet_run(run)
    (run / "event.log").write_text(json.dumps({"event": "start", "time": 0, "pid": 1}) + "\n")
    assert report.main(str(run), output_format="json") == 0
    gpu = json.loads(capsys.readouterr().out)["gpu_time"]
    assert (gpu["quiet_replays"], gpu["quiet_estimate_ns"], gpu["graph_counts_error"]) == (8, 8400.0, None)
    g1 = gpu["graph_replays"][0]
    assert g1["launched"] == {"replays": 10, "node_replays": 2, "quiet_replays": 8, "whole_replays": 0}
    assert (g1["sampled_replays"], g1["quiet_replays"], g1["quiet_estimate_ns"]) == (2, 8, 8400.0)
    assert [g["graph"] for g in gpu["graph_replays"]] == [1, 2, 3]


def test_older_runs_without_the_file_are_reported_as_before(tmp_path, capsys):
    """No timeline_graphs.tsv: no quiet line, no launched columns, json null; the figures as the records say."""
    graph_run(tmp_path)
    ctx = context.load(tmp_path)
    assert (ctx.quiet, ctx.counted, ctx.quiet_estimate_ns, ctx.counts_error) == (0, False, None, "")
    text = "\n".join(context.render(ctx))
    assert "quiet" not in text
    assert "graph  sampled  whole  whole mean (us)  sampled mean (us)  kernels  top kernels, sampled" in text
    assert all(g.launched is None and g.quiet is None for g in ctx.graphs)
    quiet_run(tmp_path / "q", counts=False)  # a node-only graph is listed even without the file
    assert [g.graph for g in context.load(tmp_path / "q").graphs] == [1, 2, 3]


def test_a_malformed_file_costs_the_counts_not_the_section(tmp_path, capsys):
    run = tmp_path / "run"
    quiet_run(run)
    write_graph_counts(run, [], text=GRAPHS_HEADER + "1\t10\t2\t7\t0\n")
    (run / "event.log").write_text(json.dumps({"event": "start", "time": 0, "pid": 1}) + "\n")
    assert report.main(str(run), plots=False) == 0
    out, err = capsys.readouterr()
    assert "timeline_graphs.tsv: line 2: replays 10 != node_replays 2" in err and "Traceback" not in err
    assert "[where GPU time went]" in out and "timeline_graphs.tsv could not be read" in out


def test_the_job_busy_line_names_the_quiet_replays(tmp_path):
    quiet_run(tmp_path / "a")
    graph_run(tmp_path / "b")
    reports = [(0, report.Report("a", context=context.load(tmp_path / "a"))),
               (1, report.Report("b", context=context.load(tmp_path / "b")))]
    line = ranks.busy_line(reports)
    assert line.startswith("GPU busy (us): rank 0 6.5, rank 1 6.6")
    assert line.endswith("; graph replays quiet (not recorded, in no busy time): rank 0 8")


def test_perfetto_node_slices_say_how_many_replays_were_quiet(tmp_path):
    from tests.test_export_perfetto import decode, track_name
    from tests.test_analysis_trace import write_trace

    run = write_trace(tmp_path, [])
    quiet_run(run)
    out = tmp_path / "q.pftrace"
    export_timeline.export_protobuf(str(run), str(out))
    tracks, slices = decode(out)
    on_stream = [s for s in slices if track_name(tracks, s[0]) == "GPU 0 stream 7"]
    node = next(s for s in on_stream if s[1] == TRITON and s[2] == 20000)
    assert (node[4]["graph"], node[4]["graph replay"], node[4]["quiet replays of this graph"]) == (1, 2, 8)
    whole = next(s for s in on_stream if s[1] == "[graph #3 replay]")
    assert whole[4]["quiet replays of this graph"] == 0
    eager = next(s for s in on_stream if s[2] == 1000)
    assert "quiet replays of this graph" not in eager[4]


def test_perfetto_export_with_a_malformed_file_warns_and_draws_the_records(tmp_path, capsys):
    from tests.test_export_perfetto import decode
    from tests.test_analysis_trace import write_trace

    run = write_trace(tmp_path, [])
    quiet_run(run)
    write_graph_counts(run, [], text=GRAPHS_HEADER + "1\t10\t2\t8\n")
    out = tmp_path / "q.pftrace"
    export_timeline.export_protobuf(str(run), str(out))
    assert "timeline_graphs.tsv: line 2: 4 field(s)" in capsys.readouterr().err
    _, slices = decode(out)
    graph_slices = [s for s in slices if "graph" in s[4]]
    assert len(graph_slices) == 12 and all("quiet replays of this graph" not in s[4] for s in graph_slices)


SAMPLED_SQL = ("SELECT g.graph_exec, g.quiet_replays, count(DISTINCT t.graph_replay) AS sampled FROM graph_replays g "
               "LEFT JOIN timeline t ON t.rank = g.rank AND t.graph_exec = g.graph_exec AND t.kind = 1 "
               "GROUP BY ALL ORDER BY g.graph_exec")


def test_parquet_graph_replays_table(tmp_path):
    pytest.importorskip("pyarrow")
    pytest.importorskip("duckdb")
    from neutrino.analysis import columnar, query
    from tests.test_analysis_trace import write_trace

    run = write_trace(tmp_path, [])
    quiet_run(run)
    ds = tmp_path / "ds"
    columnar.export(run, ds)
    con = query.connect(ds)
    assert con.execute("SELECT rank, graph_exec, replays, node_replays, quiet_replays, whole_replays FROM graph_replays "
                       "ORDER BY graph_exec").fetchall() == [(0, 1, 10, 2, 8, 0), (0, 2, 3, 3, 0, 0), (0, 3, 4, 1, 0, 3)]
    assert columnar.read_schema(ds)["tables"]["graph_replays"]["rows"] == 3
    # spec/analysis.md's example: the quiet replays beside the sampled ones the timeline holds
    assert con.execute(SAMPLED_SQL).fetchall() == [(1, 8, 2), (2, 0, 3), (3, 0, 1)]
    old = write_trace(tmp_path / "old", [])
    graph_run(old)
    columnar.export(old, tmp_path / "ds_old")
    assert "graph_replays" not in columnar.read_schema(tmp_path / "ds_old")["tables"]


def test_every_graph_column_and_key_is_defined_in_tools_spec(tmp_path):
    from tests.test_report_columns import spec_columns

    quiet_run(tmp_path)
    ctx = context.load(tmp_path)
    lines = "\n".join(context.render_graphs(ctx.graphs)).splitlines()
    header = next(line for line in lines if line.startswith("graph "))
    printed = [c.strip() for c in header.split("  ") if c.strip()]
    cols, keys = spec_columns()["graph replays"]
    assert set(printed) <= cols, set(printed) - cols
    assert set(context.graph_numbers(ctx)[0]) <= keys, set(context.graph_numbers(ctx)[0]) - keys
    assert {"quiet_replays", "quiet_estimate_ns"} <= spec_columns()["where GPU time went"][1]
