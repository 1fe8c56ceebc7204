"""The Parquet dataset (`neutrino export --parquet`) and `neutrino query`: round trips against the
trace reader, context tables written per the spec, the cached export, SQL errors, and Spark."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb")

from neutrino import cli  # noqa: E402
from neutrino import trace as nt  # noqa: E402
from neutrino.analysis import columnar, query  # noqa: E402
from neutrino.analysis import synthetic as S  # noqa: E402

WIDE = {"name": "wide", "level": "thread", "type": "array", "record_bytes": 16, "cap": 3,
        "fields": [{"name": "a", "type": "u64", "offset": 0}, {"name": "b", "type": "u32", "offset": 8},
                   {"name": "c", "type": "u32", "offset": 12}]}
COUNTED = {**WIDE, "name": "counted", "cap": "count"}
LINEAR = S.hist_info("lat", "linear:0:100:10")
LOG2 = S.hist_info("sizes", "log2")


def _wide(info, units: int, cap: int, counts, seed: int) -> nt.MapSection:
    rng = np.random.default_rng(seed)
    dtype = nt.record_dtype(nt._fields(info["fields"]), 16)
    recs = np.zeros((units, cap), dtype)
    recs["a"] = rng.integers(0, 2 ** 63, (units, cap), dtype=np.uint64) * np.uint64(2)  # above 2^63 too
    recs["b"] = rng.integers(0, 2 ** 32, (units, cap), dtype=np.uint64).astype(np.uint32)
    recs["c"] = rng.integers(0, 2 ** 32, (units, cap), dtype=np.uint64).astype(np.uint32)
    return S.array_section(info, units, cap, np.asarray(counts, np.uint32), recs)


def _every_map_run(run, *, rank=None, seed=0):
    """Two kernels; maps of every type: a block_sched array, an array with cap 3 and partial/over-full
    units, a count-sized array, a sum map, a linear and a log2 hist."""
    rng = np.random.default_rng(seed)
    b = S.RunBuilder(run, rank=rank)
    b.add_kernel("gemm", [S.BLOCK_SCHED, WIDE, S.GMEM_BYTES, LINEAR])
    b.add_kernel("_Z4vaddPfS_", [COUNTED, S.TENSOROP, LOG2])
    for i in range(3):
        grid, block = (2 + i, 1, 1), (64, 1, 1)
        units = 2 * (2 + i) * 64 // 32 * 16  # threads
        counts = rng.integers(0, 5, units)  # 0..4 records tried, cap 3: some units drop records
        maps = [S.block_sched_section(grid, block, *S.lognormal_warps(rng, grid, block)),
                _wide(WIDE, (2 + i) * 64, 3, counts[: (2 + i) * 64], seed + i),
                S.counters_section(S.GMEM_BYTES, [1000 * (i + 1), 64 * (i + 1)]),
                S.counters_section(LINEAR, [i, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 2 ** 40])]
        b.launch("gemm", grid, block, maps, duration_ns=1000.0 + i if i != 1 else None, frame="app.py:3 (f)")
        grid2 = (1, 1, 1)
        maps2 = [_wide(COUNTED, 64, 2 + i, np.full(64, 2 + i), 99 + i),
                 S.counters_section(S.TENSOROP, [7 * i, 3 * i, i]),
                 S.counters_section(LOG2, [0] * 64 + [5])]  # the top bucket: high is 2^64
        b.launch("_Z4vaddPfS_", grid2, block, maps2, duration_ns=500.0, graph=(3 << 32) | 2 if i == 2 else 0)
    return b.close()


def _sql(text: str) -> list[tuple]:
    return duckdb.connect().execute(text).fetchall()


def _table(ds, name) -> dict[str, list]:
    """A table of the dataset as columns of Python values."""
    cursor = duckdb.connect().execute(f"SELECT * FROM {query.table_scan(ds, name)}")
    names = [d[0] for d in cursor.description]
    return dict(zip(names, (list(col) for col in zip(*cursor.fetchall()))))


def test_round_trip_of_every_map_type(tmp_path):
    run = _every_map_run(tmp_path / "run")
    ds = tmp_path / "ds"
    summary = columnar.export(run, ds)
    trace = nt.load(run)
    assert summary.launches == len(trace.launches) == 6 and not summary.problems
    con = query.connect(ds)
    for launch in trace.launches:
        for name, md in launch.maps.items():
            if md.type == "array":
                fields = [f.name for f in md.fields]
                got = con.execute(f"SELECT unit, {', '.join(fields)} FROM map_{name} WHERE launch = ? "
                                  "ORDER BY unit, record", [launch.index]).fetchall()
                want = [tuple(int(v[f]) for f in ["unit", *fields]) for v in md.valid()]
                assert got == want and got
            elif md.type == "sum":
                cols = ", ".join(md.totals())
                row = con.execute(f"SELECT {cols} FROM {name} WHERE launch = ?", [launch.index]).fetchone()
                assert dict(zip(md.totals(), row)) == md.totals()
            else:
                got = con.execute(f"SELECT low, high, count FROM {name} WHERE launch = ? ORDER BY bucket",
                                  [launch.index]).fetchall()
                want = [(lo, hi if hi < 2 ** 64 else None, c) for lo, hi, c in md.histogram().rows()]
                assert got == want and got
    rows = con.execute("SELECT launch, kernel, kernel_launch, grid_x, block_x, duration_ns, graph, graph_node, replay, "
                       "frame, dropped, rank, pid FROM launches ORDER BY launch").fetchall()
    for row, launch in zip(rows, trace.launches):
        assert row[:6] == (launch.index, launch.kernel, launch.event["kernel_launch"], launch.grid[0], launch.block[0],
                           launch.duration_ns)
        assert row[6:8] == (launch.graph or (None, None)) and row[8] == launch.event.get("replay")
        assert row[9] == launch.frame and row[10] == sum(md.dropped for md in launch.maps.values())
        assert row[11:] == (0, 4242)
    assert any(r[10] > 0 for r in rows)  # the over-full units were counted as dropped
    # field_stats: per launch and field, what the full table gives (exact sums of u64 values above 2^63)
    for table, field in (("wide", "a"), ("wide", "b"), ("counted", "c"), ("block_sched", "elapsed")):
        full = con.execute(f"SELECT launch, count(*), sum({field}), min({field}), max({field}) FROM {table} "
                           "GROUP BY launch ORDER BY launch").fetchall()
        rolled = con.execute("SELECT launch, records, sum, min, max FROM field_stats WHERE map = ? AND field = ? "
                             "ORDER BY launch", [table, field]).fetchall()
        assert [tuple(int(v) for v in r) for r in rolled] == [tuple(int(v) for v in r) for r in full] and full
    assert max(int(r[0]) for r in con.execute("SELECT sum FROM field_stats WHERE field = 'a'").fetchall()) > 2 ** 64
    schema = json.loads((ds / columnar.SCHEMA_FILE).read_text())
    assert schema["neutrino_schema_version"] == columnar.SCHEMA_VERSION
    assert schema["tables"]["map_counted"]["map_type"] == "array" and schema["tables"]["map_lat"]["map_type"] == "hist"
    part = next((ds / "map_wide").rglob("*.parquet"))
    assert pq.read_schema(part).metadata[b"neutrino_schema_version"] == str(columnar.SCHEMA_VERSION).encode()


def test_job_is_partitioned_by_rank_and_kernel(tmp_path):
    job = tmp_path / "20261126-120000_99"
    for rank in (0, 1):
        _every_map_run(job / f"rank{rank}", rank=rank, seed=rank)
    ds = tmp_path / "ds"
    columnar.export(job, ds)
    assert sorted(p.name for p in (ds / "launches").iterdir()) == ["rank=0", "rank=1"]
    kernels = sorted(p.name.split("=", 1)[1].rsplit("-", 1)[0] for p in (ds / "map_wide" / "rank=1").iterdir())
    assert kernels == ["gemm"]
    got = _sql(f"SELECT rank, kernel, count(*) FROM {query.table_scan(ds, 'launches')} GROUP BY ALL ORDER BY ALL")
    assert got == [(0, "_Z4vaddPfS_", 3), (0, "gemm", 3), (1, "_Z4vaddPfS_", 3), (1, "gemm", 3)]
    events = _table(ds, "events")
    assert set(events["rank"]) == {0, 1} and set(events["event"]) >= {"start", "instrument", "exit"}
    assert json.loads(events["json"][0])["event"] == events["event"][0]


def test_old_trace_of_one_result_file_per_launch(tmp_path):
    """A trace of the Python writer: `launch` events name result/<n>.bin files."""
    run = tmp_path / "old"
    (run / "result").mkdir(parents=True)
    sec = _wide(WIDE, 64, 3, np.full(64, 1), 5)
    nt.write_result(run / "result" / "0.bin", grid=(1, 1, 1), block=(64, 1, 1), shared_bytes=0, maps=[sec])
    events = [{"event": "start", "time": 1.0, "pid": 7},
              {"event": "launch", "time": 1.0, "index": 0, "kernel": "k", "grid": [1, 1, 1], "block": [64, 1, 1],
               "shared_bytes": 0, "stream": "0x0", "result": "result/0.bin", "frame": None, "duration_ns": 12.5}]
    (run / "event.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    ds = tmp_path / "ds"
    columnar.export(run, ds)
    got = _sql(f"SELECT sum(a), count(*) FROM {query.table_scan(ds, 'map_wide')}")[0]
    valid = nt.load(run).launches[0].maps["wide"].valid()
    assert got == (int(valid["a"].astype(object).sum()), 64)
    assert _sql(f"SELECT duration_ns, pid FROM {query.table_scan(ds, 'launches')}")[0] == (12.5, 7)


def test_row_groups_stream_and_hold_every_row(tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "ROW_GROUP_ROWS", 100)
    monkeypatch.setattr(columnar, "CHUNK_RECORDS", 64)
    run = _every_map_run(tmp_path / "run")
    ds = tmp_path / "ds"
    columnar.export(run, ds)
    part = next((ds / "map_wide").rglob("*.parquet"))
    assert pq.ParquetFile(part).metadata.num_row_groups > 1
    n = _sql(f"SELECT count(*) FROM {query.table_scan(ds, 'map_wide')}")[0][0]
    assert n == sum(len(la.maps["wide"].valid()) for la in nt.load(run).launches if "wide" in la.maps)
    # pieces cut at row-group boundaries keep each row's launch, unit and fields
    con = query.connect(ds)
    for la in nt.load(run).launches:
        if "wide" in la.maps:
            got = con.execute("SELECT kernel, kernel_launch, unit, a, b, c FROM map_wide WHERE launch = ? "
                              "ORDER BY unit, record", [la.index]).fetchall()
            want = [(la.kernel, la.event["kernel_launch"], *(int(v[f]) for f in ("unit", "a", "b", "c")))
                    for v in la.maps["wide"].valid()]
            assert got == want


def test_per_launch_columns_of_a_row_group():
    """kernel: one dictionary for the row group; launch ids as int64 runs, null where the event had none."""
    heads = [{"kernel": "k", "launch": 3, "kernel_launch": None}, {"kernel": "k2", "launch": 4, "kernel_launch": 1},
             {"kernel": "k", "launch": 3, "kernel_launch": None}]
    cols = columnar._head_columns(pa, heads, [2, 1, 3])
    assert cols["kernel"].to_pylist() == ["k", "k", "k2", "k", "k", "k"] and len(cols["kernel"].dictionary) == 2
    assert cols["launch"].type == pa.int64() and cols["launch"].to_pylist() == [3, 3, 4, 3, 3, 3]
    assert cols["kernel_launch"].to_pylist() == [None, None, 1, None, None, None]


def test_context_tables_per_the_spec(tmp_path):
    run = _every_map_run(tmp_path / "run")
    S.write_timeline(run, [
        {"kind": 1, "flags": 1, "device": 0, "stream": 7, "tid": 11, "start_ns": 2000, "end_ns": 2600, "correlation": 5,
         "bytes": 128, "name_id": 1, "probe_launch": 0, "grid": (2, 1, 1), "block": (64, 1, 1)},
        {"kind": 2, "copy_kind": 1, "start_ns": 1000, "end_ns": 1500, "bytes": 4096, "tid": 11},
    ], ["other_kernel", "gemm"])
    S.write_ranges(run, [{"start_ns": 900, "end_ns": 3000, "tid": 11, "depth": 0, "source": 3, "name_id": 0},
                         {"start_ns": 1900, "end_ns": 2700, "tid": 11, "depth": 1, "source": 1, "name_id": 1,
                          "domain_id": 2}], ["step", "attention\nblock", "mydomain"])
    S.write_launch_args(run, [{"argset": 0, "kernel": "gemm", "args": [
        {"index": 0, "size": 8, "value": 140000000, "hex": "00", "tensor": {"name": "x", "shape": [4, 8],
                                                                           "dtype": "float32", "strides": [8, 1],
                                                                           "offset_bytes": 0, "device": 0}},
        {"index": 1, "size": 4, "value": 32, "hex": "20000000", "tensor": None}]}], {0: 0, 2: 0})
    ds = tmp_path / "ds"
    columnar.export(run, ds)
    con = query.connect(ds)
    assert con.execute("SELECT kind, name, start_ns, end_ns, grid_x, block_x, probe_launch, correlation FROM timeline "
                       "ORDER BY start_ns").fetchall() == [(2, "", 1000, 1500, 0, 0, -1, 0),
                                                          (1, "gemm", 2000, 2600, 2, 64, 0, 5)]
    assert con.execute("SELECT origin FROM timeline ORDER BY start_ns").fetchall() == [("copy",), ("other",)]
    assert con.execute("SELECT name, domain, depth, source FROM ranges ORDER BY start_ns").fetchall() == [
        ("step", "", 0, 3), ("attention\nblock", "mydomain", 1, 1)]
    got = con.execute("SELECT launch, arg, value, tensor_name, tensor_shape, tensor_dtype FROM launch_args "
                      "ORDER BY launch, arg").fetchall()
    assert got == [(0, 0, 140000000, "x", "[4, 8]", "float32"), (0, 1, 32, None, None, None),
                   (2, 0, 140000000, "x", "[4, 8]", "float32"), (2, 1, 32, None, None, None)]


def test_context_tables_parsed_without_the_readers(tmp_path, monkeypatch):
    """The local numpy parse (no neutrino.timeline / neutrino.ranges in the tree) gives the same table."""
    import sys

    run = _every_map_run(tmp_path / "run")
    S.write_timeline(run, [{"kind": 1, "start_ns": 5, "end_ns": 9, "name_id": 0, "grid": (1, 2, 3)}], ["k"])
    import neutrino

    for name in ("timeline", "ranges"):  # the import fails: the fallback parses
        monkeypatch.setitem(sys.modules, f"neutrino.{name}", None)
        monkeypatch.delattr(neutrino, name, raising=False)
    from neutrino.analysis import context_tables

    recs, names = context_tables.read_timeline(run)
    assert list(names) == ["k"] and recs["grid"].tolist() == [[1, 2, 3]] and int(recs["end_ns"][0]) == 9
    (run / "timeline.bin").write_bytes(b"NOTTIMEL" + bytes(8))
    with pytest.raises(nt.TraceError, match="timeline.bin: not a NTTIMEL1 file"):
        context_tables.read_timeline(run)


def _cli(capsys, *argv):
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_query_cli_formats_cache_and_errors(tmp_path, capsys):
    run = _every_map_run(tmp_path / "run")
    status, out, _ = _cli(capsys, "query", str(run), "SELECT kernel, count(*) AS n FROM launches GROUP BY kernel "
                                                     "ORDER BY kernel", "--format", "csv")
    assert status == 0 and out == "kernel,n\n_Z4vaddPfS_,3\ngemm,3\n"
    cache = run / query.CACHE_NAME / columnar.SCHEMA_FILE
    stamp = cache.stat().st_mtime_ns
    status, out, _ = _cli(capsys, "query", str(run), "SELECT sum(bytes) AS b FROM gmem_bytes", "--format", "json")
    assert status == 0 and json.loads(out) == [{"b": 6000}] and cache.stat().st_mtime_ns == stamp  # reused
    status, out, _ = _cli(capsys, "query", str(run), "SELECT max(launch) AS last FROM launches")
    assert status == 0 and out.splitlines()[0].strip() == "last" and out.splitlines()[2].strip() == "5"
    # the trace changes (its last launch record goes): the cached export is stale and made again
    (run / "result" / "index.bin").write_bytes((run / "result" / "index.bin").read_bytes()[:-96])
    status, out, _ = _cli(capsys, "query", str(run), "SELECT count(*) AS n FROM launches", "--format", "csv")
    assert status == 0 and out == "n\n5\n"
    status, out, err = _cli(capsys, "query", str(run / query.CACHE_NAME), "SELECT nope FROM launches")
    assert status == 1 and "nope" in err and "Traceback" not in err and "hint: tables:" in err
    status, _, err = _cli(capsys, "query", str(tmp_path / "missing"), "SELECT 1")
    assert status == 1 and "missing" in err


def test_export_refuses_to_overwrite_other_files(tmp_path, capsys):
    run = _every_map_run(tmp_path / "run")
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    status, _, err = _cli(capsys, "export", str(run), "--parquet", str(other))
    assert status == 1 and "not a Neutrino Parquet dataset" in err and (other / "notes.txt").exists()
    ds = tmp_path / "ds"
    assert _cli(capsys, "export", str(run), "--parquet", str(ds))[0] == 0
    assert _cli(capsys, "export", str(run), "--parquet", str(ds))[0] == 0  # a dataset is replaced
    assert not list(tmp_path.glob("*.partial-*"))


def _java_works() -> bool:
    java = shutil.which("java")
    return bool(java) and subprocess.run([java, "-version"], capture_output=True).returncode == 0


def test_duckdb_and_spark_agree_per_kernel_and_rank(tmp_path):
    pyspark = pytest.importorskip("pyspark", reason="pyspark not installed (pip install neutrino-probe[spark])")
    if not _java_works():
        pytest.skip("no working Java runtime for Spark")
    from pyspark.sql import SparkSession

    from neutrino.analysis import spark as nspark

    job = tmp_path / "20261126-120000_99"
    for rank in (0, 1):
        _every_map_run(job / f"rank{rank}", rank=rank, seed=rank)
    ds = tmp_path / "ds"
    columnar.export(job, ds)
    sql = ("SELECT rank, kernel, count(*) AS n, sum(b) AS total, avg(b) AS mean FROM {t} "
           "GROUP BY rank, kernel ORDER BY rank, kernel")
    con = query.connect(ds)
    want = con.execute(sql.format(t="wide")).fetchall() + con.execute(sql.format(t="counted")).fetchall()
    session = (SparkSession.builder.master("local[1]").appName("neutrino-test")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    try:
        views = nspark.load(session, ds)
        assert {"launches", "events", "wide", "map_wide", "block_sched"} <= set(views)
        got = [tuple(r) for t in ("wide", "counted") for r in session.sql(sql.format(t=t)).collect()]
        launches = session.sql("SELECT count(*) FROM launches").collect()[0][0]
    finally:
        session.stop()
    assert len(got) == len(want) == 4 and launches == 12
    for g, w in zip(got, want):
        assert g[:4] == w[:4] and g[4] == pytest.approx(w[4], rel=1e-12)
    assert pyspark.__version__


def test_a_kernel_instrumented_twice_keeps_every_launch(tmp_path):
    """Two kernel directories of one name (two modules) with another kernel between them: the
    partition of that name is written in two groups, into two part files."""
    b = S.RunBuilder(tmp_path / "run")
    for name in ("dup", "other", "dup2"):
        b.add_kernel(name, [WIDE])
    for i, name in enumerate(("dup", "dup2", "other", "dup", "dup2")):
        b.launch(name, (1, 1, 1), (64, 1, 1), [_wide(WIDE, 64, 3, np.full(64, 1), i)])
    run = b.close()
    log = (run / "event.log").read_text().replace('"kernel": "dup2"', '"kernel": "dup"')  # kernel/2_… is "dup" too
    (run / "event.log").write_text(log)
    ds = tmp_path / "ds"
    columnar.export(run, ds)
    scan = query.table_scan(ds, "map_wide")
    assert _sql(f"SELECT kernel, count(DISTINCT launch), count(*) FROM {scan} GROUP BY ALL ORDER BY ALL") == [
        ("dup", 4, 256), ("other", 1, 64)]
    assert len(list((ds / "map_wide").rglob("*.parquet"))) == 3
