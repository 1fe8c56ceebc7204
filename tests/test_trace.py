"""Result-file writing and reading (spec/trace-format.md)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import neutrino.trace as nt
from neutrino.runtime.start.tracedir import TraceDir

BLOCK_SCHED_FIELDS = [("lstart", "u64", 0), ("elapse", "u32", 8), ("smid", "u32", 12)]


def make_buffer(units, cap, record_bytes, counts, records=None):
    buf = np.zeros(nt.buffer_bytes(units, cap, record_bytes), np.uint8)
    buf[: 4 * units] = np.asarray(counts, "<u4").view(np.uint8)
    if records is not None:
        start = nt.align(4 * units, 16)
        buf[start:] = np.frombuffer(records, np.uint8)
    return buf


def test_round_trip_block_sched(tmp_path):
    grid, block = (3, 1, 1), (64, 1, 1)
    units = nt.units_for("warp", grid, block)
    assert units == 6
    dt = nt.record_dtype([nt.Field(*f) for f in BLOCK_SCHED_FIELDS], 16)
    recs = np.zeros((units, 1), dt)
    recs["lstart"] = np.arange(units)[:, None] * 1000
    recs["elapse"] = 7
    recs["smid"] = np.arange(units)[:, None] % 4
    buf = make_buffer(units, 1, 16, [1] * units, recs.tobytes())
    sec = nt.MapSection("block_sched", "warp", 16, 1, units, BLOCK_SCHED_FIELDS, buf)
    p = nt.write_result(tmp_path / "0.bin", grid=grid, block=block, shared_bytes=128, maps=[sec])
    r = nt.read_result(p)
    assert r.grid == grid and r.block == block and r.shared_bytes == 128
    m = r.maps["block_sched"]
    assert (m.level, m.cap, m.record_bytes, m.units) == ("warp", 1, 16, units)
    assert m.dtype.names == ("lstart", "elapse", "smid")
    np.testing.assert_array_equal(m.counts, 1)
    v = m.valid()
    assert len(v) == units and m.dropped == 0
    np.testing.assert_array_equal(v["lstart"], np.arange(units) * 1000)
    np.testing.assert_array_equal(v["unit"], np.arange(units))


def test_dropped_and_partial(tmp_path):
    units, cap = 4, 2
    dt = nt.record_dtype([nt.Field("addr", "u64", 0)], 8)
    recs = np.arange(units * cap, dtype="<u8").reshape(units, cap).astype(dt)
    recs = np.zeros((units, cap), dt)
    recs["addr"] = np.arange(units * cap).reshape(units, cap)
    buf = make_buffer(units, cap, 8, [0, 1, 2, 5], recs.tobytes())
    sec = nt.MapSection("mem", "thread", 8, cap, units, [("addr", "u64", 0)], buf, cap_is_count=False)
    m = nt.read_result(nt.write_result(tmp_path / "1.bin", grid=(1, 1, 1), block=(4, 1, 1), shared_bytes=0, maps=[sec])).maps["mem"]
    v = m.valid()
    assert list(v["unit"]) == [1, 2, 2, 3, 3]
    assert list(v["addr"]) == [2, 4, 5, 6, 7]
    assert m.dropped == 3


def test_empty_map(tmp_path):
    sec = nt.MapSection("m", "block", 4, 1, 0, [("x", "u32", 0)], b"")
    m = nt.read_result(nt.write_result(tmp_path / "e.bin", grid=(0, 1, 1), block=(1, 1, 1), shared_bytes=0, maps=[sec])).maps["m"]
    assert m.counts.shape == (0,) and len(m.valid()) == 0


def test_wrong_buffer_size_refused(tmp_path):
    sec = nt.MapSection("m", "block", 4, 1, 2, [("x", "u32", 0)], b"\0" * 3)
    with pytest.raises(nt.TraceError, match="buffer has 3 bytes"):
        nt.write_result(tmp_path / "x.bin", grid=(2, 1, 1), block=(1, 1, 1), shared_bytes=0, maps=[sec])


def test_bad_files(tmp_path):
    (tmp_path / "bad.bin").write_bytes(b"hello world, not a result file at all......................")
    with pytest.raises(nt.TraceError, match="bad magic"):
        nt.read_result(tmp_path / "bad.bin")
    (tmp_path / "short.bin").write_bytes(nt.MAGIC)
    with pytest.raises(nt.TraceError, match="truncated"):
        nt.read_result(tmp_path / "short.bin")
    with pytest.raises(nt.TraceError, match="cannot read"):
        nt.read_result(tmp_path / "missing.bin")
    sec = nt.MapSection("m", "block", 4, 1, 100, [("x", "u32", 0)], b"\0" * nt.buffer_bytes(100, 1, 4))
    p = nt.write_result(tmp_path / "t.bin", grid=(100, 1, 1), block=(1, 1, 1), shared_bytes=0, maps=[sec])
    p.write_bytes(p.read_bytes()[:-10])
    with pytest.raises(nt.TraceError, match="truncated"):
        nt.read_result(p)


def test_units():
    assert nt.units_for("thread", (2, 3, 1), (33, 1, 1)) == 6 * 33
    assert nt.units_for("warp", (2, 3, 1), (33, 1, 1)) == 12
    assert nt.units_for("block", (2, 3, 4), (33, 2, 1)) == 24
    assert nt.buffer_bytes(3, 2, 8) == 16 + 48


field_types = st.sampled_from(["u32", "u64"])


@st.composite
def map_sections(draw, idx):
    types = draw(st.lists(field_types, min_size=1, max_size=4))
    fields, off = [], 0
    for i, t in enumerate(types):
        w = nt.FIELD_TYPES[t]
        off = nt.align(off, w)
        fields.append((f"f{i}", t, off))
        off += w
    rb = nt.align(off, 8 if "u64" in types else 4)
    level = draw(st.sampled_from(nt.LEVELS))
    units = draw(st.integers(0, 40))
    cap = draw(st.integers(1, 5))
    counts = draw(st.lists(st.integers(0, 9), min_size=units, max_size=units))
    rec = draw(st.binary(min_size=units * cap * rb, max_size=units * cap * rb))
    return nt.MapSection(f"map{idx}", level, rb, cap, units, fields, make_buffer(units, cap, rb, counts, rec),
                         cap_is_count=draw(st.booleans()))


@st.composite
def sections_list(draw):
    n = draw(st.integers(0, 3))
    return [draw(map_sections(i)) for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(secs=sections_list(), grid=st.tuples(*[st.integers(0, 2**31)] * 3), shm=st.integers(0, 2**32 - 1))
def test_round_trip_property(tmp_path_factory, secs, grid, shm):
    d = tmp_path_factory.mktemp("rt")
    p = nt.write_result(d / "r.bin", grid=grid, block=(1, 2, 3), shared_bytes=shm, maps=secs)
    r = nt.read_result(p)
    assert r.grid == grid and r.shared_bytes == shm and list(r.maps) == [s.name for s in secs]
    raw = p.read_bytes()
    for s in secs:
        m = r.maps[s.name]
        assert (m.level, m.cap, m.record_bytes, m.units, m.cap_is_count) == (s.level, s.cap, s.record_bytes, s.units, s.cap_is_count)
        assert [(f.name, f.type, f.offset) for f in m.fields] == [(f.name, f.type, f.offset) for f in s.fields]
        data = bytes(memoryview(s.data))
        assert np.asarray(m.counts).tobytes() == data[: 4 * s.units]
        assert np.asarray(m.records).tobytes() == data[nt.align(4 * s.units, 16):]
        counts = np.asarray(m.counts, np.int64)
        assert len(m.valid()) == int(np.minimum(counts, s.cap).sum())
        assert m.dropped == int(np.clip(counts - s.cap, 0, None).sum())
        # The section is the buffer verbatim, found through the header alone.
        assert data in raw


def test_trace_dir_round_trip(tmp_path):
    td = TraceDir.create(tmp_path, start=0, pid=42)
    td.write_probe("[p]\nposition='kernel'\n")
    td.event("start", pid=42)
    rel = td.write_kernel("vadd", "ptx", "probed", {"name": "vadd", "maps": []})
    td.event("instrument", kernel="vadd", kernel_dir=rel)
    for i in range(3):
        n = td.new_launch_index()
        units = 2
        buf = make_buffer(units, 1, 4, [1, 1], np.array([i, i + 1], "<u4").tobytes())
        res = td.write_result(n, grid=(2, 1, 1), block=(32, 1, 1), shared_bytes=0,
                              maps=[nt.MapSection("m", "warp", 4, 1, units, [("x", "u32", 0)], buf)])
        td.event("launch", index=n, kernel="vadd", grid=[2, 1, 1], block=[32, 1, 1], shared_bytes=0,
                 result=res, frame="t.py:3 (f)", duration_ns=1000.0 + i)
    td.close()
    with open(td.path / "event.log", "a") as fh:
        fh.write('{"event": "launch", "truncat')  # a crash mid-line
    t = nt.load(tmp_path)  # the parent of exactly one run
    assert t.path == td.path and "position" in t.probe_text
    assert [launch.index for launch in t.launches] == [0, 1, 2]
    la = t.launches[2]
    assert la.kernel == "vadd" and la.grid == (2, 1, 1) and la.frame == "t.py:3 (f)" and la.duration_ns == 1002.0
    assert list(la.maps["m"].valid()["x"]) == [2, 3]
    assert t.kernel_info("vadd") == {"name": "vadd", "maps": []}
    assert json.loads((td.path / rel / "kernel.json").read_text())["version"] == 1


def test_load_errors(tmp_path):
    with pytest.raises(nt.TraceError, match="no such trace directory"):
        nt.load(tmp_path / "nope")
    with pytest.raises(nt.TraceError, match="not a trace directory"):
        nt.load(tmp_path)
    TraceDir.create(tmp_path, start=0, pid=1).close()
    TraceDir.create(tmp_path, start=0, pid=2).close()
    with pytest.raises(nt.TraceError, match="holds 2 runs"):
        nt.load(tmp_path)
