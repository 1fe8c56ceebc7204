"""Per-kernel result files with an index: frames appended, launches rebuilt from index records."""

from __future__ import annotations

import json

import numpy as np
import pytest

import neutrino.trace as nt


def _section(units: int, value: int) -> nt.MapSection:
    buf = np.zeros(nt.buffer_bytes(units, 1, 8), np.uint8)
    buf[: 4 * units].view("<u4")[:] = 1
    buf[nt.align(4 * units, 16):].view("<u8")[:] = value
    return nt.MapSection("m", "block", 8, 1, units, [("v", "u64", 0)], buf.tobytes())


def _run(tmp_path, frames: int, *, truncate: int = 0):
    run = tmp_path / "run"
    (run / "result").mkdir(parents=True)
    events = [{"event": "instrument", "kernel": "k", "kernel_dir": "kernel/3_abc"},
              {"event": "frame", "id": 1, "frame": "app.py:7 (main)"}]
    records = np.zeros(frames, nt.INDEX_RECORD)
    with open(run / "result" / "3_abc.ntr", "ab") as fh:
        for i in range(frames):
            sec = _section(2 + i, 100 + i)
            off, size = nt.append_frame(fh, grid=(2 + i, 1, 1), block=(32, 1, 1), shared_bytes=0, maps=[sec])
            records[i] = (i + 1, i, 7, off, size, (2 + i, 1, 1), (32, 1, 1), 0, 3, 1 if i == 0 else 0, 0, 1000.0 * i, 0)
    raw = nt.INDEX_MAGIC + nt.INDEX_HEADER_TAIL + records.tobytes()
    (run / "result" / "index.bin").write_bytes(raw[: len(raw) - truncate])
    (run / "event.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def test_frames_are_aligned_and_read_back(tmp_path):
    t = nt.load(_run(tmp_path, 4))
    assert [la.index for la in t.launches] == [0, 1, 2, 3]
    assert all(la.result_offset % nt.SECTION_ALIGN == 0 for la in t.launches)
    assert len({la.result_path for la in t.launches}) == 1
    for i, la in enumerate(t.launches):
        v = la.maps["m"].valid()
        assert la.grid == (2 + i, 1, 1) and len(v) == 2 + i and set(v["v"]) == {100 + i}
        assert la.event["kernel_launch"] == i and la.duration_ns == 1000.0 * i
    assert t.launches[0].frame == "app.py:7 (main)" and t.launches[1].frame is None


def test_a_record_cut_short_is_ignored(tmp_path):
    assert len(nt.load(_run(tmp_path, 3, truncate=10)).launches) == 2


def test_bad_index_is_refused_with_its_name(tmp_path):
    run = _run(tmp_path, 1)
    (run / "result" / "index.bin").write_bytes(b"garbage!" + bytes(40))
    with pytest.raises(nt.TraceError, match="index.bin: not a Neutrino launch index"):
        nt.load(run)


def test_offset_not_a_frame_is_refused(tmp_path):
    run = _run(tmp_path, 2)
    with pytest.raises(nt.TraceError, match="no result frame at offset"):
        nt.read_result(run / "result" / "3_abc.ntr", 10)


def test_frame_layout_is_what_append_writes_for_every_map_type(tmp_path):
    """One layout rule: the frame size and header positions the C path uses are the written ones
    (a hist map's field table is its bucket spec, not its fields)."""
    maps = [
        {"name": "h", "level": "thread", "type": "hist", "record_bytes": 8 * 10, "cap": 1, "buckets": "linear:0:80:10",
         "fields": [{"name": "buckets", "type": "u64", "offset": 0}]},
        {"name": "a", "level": "warp", "type": "array", "record_bytes": 16, "cap": 1,
         "fields": [{"name": "x", "type": "u64", "offset": 0}, {"name": "y", "type": "u32", "offset": 8}]},
    ]
    sections = []
    for m in maps:
        units, size = nt.map_buffer_bytes(m, (3, 1, 1), (64, 1, 1))
        sections.append(nt.MapSection.of(m, units, 1, bytes(size)))
    layout = nt.frame_layout(sections)
    with open(tmp_path / "f.ntr", "ab") as fh:
        fh.write(b"x")
        off, size = nt.append_frame(fh, grid=(3, 1, 1), block=(64, 1, 1), shared_bytes=0, maps=sections)
    assert size == layout.size and (tmp_path / "f.ntr").stat().st_size == off + size
    header, offsets = nt.encode_header(grid=(3, 1, 1), block=(64, 1, 1), shared_bytes=0, maps=sections)
    assert tuple(offsets) == layout.offsets
    assert layout.map_headers[1] != nt.FILE_HEADER.itemsize + nt.MAP_HEADER.itemsize + nt.FIELD_DESC.itemsize
    for pos, m in zip(layout.map_headers, maps):
        assert header[pos:pos + 64].rstrip(b"\0").decode() == m["name"]


def test_one_reader_of_the_index_for_the_trace_and_the_stream(tmp_path):
    """trace.read_index and launch_stream.launches_by_kernel read result/index.bin through one reader: the
    same launches, a record of zeros (seq 0) and one of an unknown kernel left out by both."""
    from neutrino.analysis import launch_stream

    run = _run(tmp_path, 4)
    path = run / "result" / "index.bin"
    records = np.frombuffer(path.read_bytes(), nt.INDEX_RECORD, offset=16).copy()
    records[1] = np.zeros(1, nt.INDEX_RECORD)[0]  # a block never written
    records[2]["kernel_id"] = 9  # no instrument event names kernel 9
    path.write_bytes(nt.INDEX_MAGIC + nt.INDEX_HEADER_TAIL + records.tobytes())
    events = nt.read_events(run / "event.log")
    problems: list[str] = []
    from_trace = nt.read_index(run, events, problems)
    streamed = list(launch_stream.launches_by_kernel(run, events))
    assert [e["index"] for e in from_trace] == [0, 3] and streamed == from_trace
    assert len(problems) == 1 and "1 record(s) of zeros" in problems[0]
    path.write_bytes(b"NTINDEX")  # shorter than a header: refused with its name by both
    for read in (lambda: nt.read_index(run, events), lambda: list(launch_stream.launches_by_kernel(run, events))):
        with pytest.raises(nt.TraceError, match="index.bin: not a Neutrino launch index"):
            read()


def test_launch_durations_from_the_timeline_records(tmp_path):
    """Known answer: three launches of k (events: 5000 ns, unknown, unknown), a graph replay, and a timeline whose
    probed records give launches 0 and 1 their GPU times (1200, 1300 ns). load() prefers the record (0, 1), keeps
    the events' time or none where the timeline has no record (2), and never times a replay from it (3); the
    dataset's launches table and the report's time column say the same."""
    from neutrino.analysis import report
    from neutrino.analysis import synthetic as S

    b = S.RunBuilder(tmp_path / "run")
    b.add_kernel("k", [S.GMEM_BYTES])
    for i, (duration, graph) in enumerate([(5000.0, 0), (None, 0), (None, 0), (None, (3 << 32) | 1)]):
        b.launch("k", (1, 1, 1), (32, 1, 1), [S.counters_section(S.GMEM_BYTES, [100 * (i + 1), 32])],
                 duration_ns=duration, graph=graph)
    run = b.close()
    S.write_timeline(run, [{"kind": 1, "start_ns": 10_000, "end_ns": 11_200, "probe_launch": 0, "name_id": 0},
                           {"kind": 1, "start_ns": 20_000, "end_ns": 21_300, "probe_launch": 1, "name_id": 0},
                           {"kind": 1, "start_ns": 30_000, "end_ns": 30_400, "probe_launch": 3, "name_id": 0},
                           {"kind": 1, "start_ns": 40_000, "end_ns": 40_900, "name_id": 0}], ["k"])
    launches = nt.load(run).launches
    assert [(la.duration_ns, la.duration_from) for la in launches] == [
        (1200.0, "timeline"), (1300.0, "timeline"), (None, None), (None, None)]
    assert nt.launch_duration({"index": 2, "duration_ns": 700.0}, {2: 900}) == (900.0, "timeline")
    assert nt.launch_duration({"index": 2, "duration_ns": 700.0, "graph": 5}, {2: 900}) == (700.0, "events")
    assert nt.launch_duration({"index": 2, "duration_ns": -1.0}, {}) == (None, None)
    rep = report.analyze(nt.load(run), launches)
    assert (rep.kernels["k"].duration_ns, rep.kernels["k"].timed_launches) == (2500.0, 2)
    duckdb = pytest.importorskip("duckdb")
    from neutrino.analysis import columnar, query

    columnar.export(run, tmp_path / "ds")
    rows = duckdb.connect().execute(f"SELECT launch, duration_ns, duration_from FROM "
                                    f"{query.table_scan(tmp_path / 'ds', 'launches')} ORDER BY launch").fetchall()
    assert rows == [(0, 1200.0, "timeline"), (1, 1300.0, "timeline"), (2, None, None), (3, None, None)]


def test_probed_gpu_ns_reads_old_record_sizes_in_place(tmp_path):
    """A timeline of 80-byte records (before host_ns): the probed kernel records with GPU times, by launch; a
    record without an end time and copies are left out."""
    from neutrino.timeline import _FIELDS_80, probed_gpu_ns
    from neutrino.timeline_format import MAGIC

    recs = np.zeros(4, np.dtype(_FIELDS_80))
    recs["kind"] = [1, 1, 1, 2]
    recs["start_ns"], recs["end_ns"], recs["probe_launch"] = [10, 20, 30, 40], [15, 27, 0, 50], [0, 4, 5, 6]
    (tmp_path / "timeline.bin").write_bytes(MAGIC + np.array([1, 80], "<u4").tobytes() + recs.tobytes())
    assert probed_gpu_ns(tmp_path) == {0: 5, 4: 7}
