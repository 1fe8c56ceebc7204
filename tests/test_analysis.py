"""Analyses on hand-built traces with known answers (no neutrino.trace needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from neutrino.analysis import _common as C
from neutrino.analysis import block_sched, dmat, gmem_bytes, perfetto, plot, program_progress, report, tensorop

U64, U32 = "<u8", "<u4"


def make_map(name, level, fields, per_unit, *, cap=None, counts=None):
    """A duck-typed neutrino.trace MapData: `per_unit[u]` lists unit u's records as tuples."""
    dtype = np.dtype(list(fields))
    cap = cap or max(1, max((len(r) for r in per_unit), default=1))
    records = np.zeros((len(per_unit), cap), dtype=dtype)
    for u, recs in enumerate(per_unit):
        for k, rec in enumerate(recs[:cap]):
            records[u, k] = rec
    counts = np.array(counts if counts is not None else [len(r) for r in per_unit], dtype=np.uint32)

    def valid():
        recs, unit = C.read_valid(md)
        out = np.zeros(len(recs), dtype=np.dtype(dtype.descr + [("unit", "<u8")]))
        for f in dtype.names:
            out[f] = recs[f]
        out["unit"] = unit
        return out

    md = SimpleNamespace(name=name, level=level, cap=cap, units=len(per_unit), dtype=dtype,
                         record_bytes=dtype.itemsize, counts=counts, records=records, valid=valid,
                         dropped=int(np.maximum(counts.astype(np.int64) - cap, 0).sum()))
    return md


def make_launch(index, kernel, maps, *, grid=(1, 1, 1), block=(64, 1, 1), duration_ns=None):
    return SimpleNamespace(index=index, kernel=kernel, grid=grid, block=block, shared_bytes=0,
                           duration_ns=duration_ns, frame=None, maps={m.name: m for m in maps})


# --- block_sched -------------------------------------------------------------------------------
# Block (64,1,1) = 2 warps per block. Per-SM clocks differ wildly (unsynchronised).
# SM0: blocks 0, 2, 3 of 100 cycles, 10 cycles apart; SM1: block 1 alone.
WARPS = [  # (unit, start, elapsed, sm)
    (0, 1000, 100, 0), (1, 1005, 90, 0),  # block 0: [1000, 1100] on SM0
    (2, 5000, 100, 1), (3, 5000, 100, 1),  # block 1: [5000, 5100] on SM1
    (4, 1110, 100, 0), (5, 1110, 100, 0),  # block 2: [1110, 1210]
    (6, 1220, 100, 0), (7, 1230, 90, 0),  # block 3: [1220, 1320]
]


def block_sched_map(names=("start", "elapsed", "cuid")):
    fields = [(names[0], U64), (names[1], U32), (names[2], U32)]
    return make_map("block_sched", "warp", fields, [[(s, e, sm)] for _, s, e, sm in WARPS])


def known_timeline():
    u, s, e, sm = (np.array(c) for c in zip(*WARPS))
    return block_sched.build_timeline(s, e, sm, u, units_per_block=2)


def test_block_timeline_groups_warps_per_sm():
    tl = known_timeline()
    assert tl.time_unit == "cycles" and not tl.synchronized
    assert tl.block.tolist() == [0, 2, 3, 1]  # sorted by SM, then start
    assert tl.sm.tolist() == [0, 0, 0, 1]
    assert tl.start.tolist() == [0, 110, 220, 0]  # relative to each SM's own first start
    assert tl.end.tolist() == [100, 210, 320, 100]
    assert tl.warps.tolist() == [2, 2, 2, 2]
    assert tl.slot.tolist() == [0, 0, 0, 0]
    assert tl.refill.tolist() == [-1, 10, 10, -1]
    assert tl.origin == {0: 1000, 1: 5000}
    assert tl.split_blocks == 0
    # warps, sorted like their blocks, relative to the block's SM origin
    assert tl.warp_unit.tolist() == [0, 1, 4, 5, 6, 7, 2, 3]
    assert tl.warp_start.tolist() == [0, 5, 110, 110, 220, 230, 0, 0]
    assert tl.warp_end.tolist() == [100, 95, 210, 210, 320, 320, 100, 100]


def test_block_sched_known_imbalance_gaps_and_tail():
    st = block_sched.summarize(known_timeline())
    assert (st.blocks, st.warps, len(st.sms)) == (4, 8, 2)
    sm0, sm1 = st.sms
    assert (sm0.blocks, sm0.span, sm0.busy, sm0.work, sm0.slots) == (3, 320, 300, 300, 1)
    assert sm0.gaps.tolist() == [10, 10]
    assert (sm1.blocks, sm1.span, sm1.busy, sm1.gaps.tolist()) == (1, 100, 100, [])
    assert st.busy_imbalance == pytest.approx(1.5)  # 300 / mean(300, 100)
    assert st.work_imbalance == pytest.approx(1.5)
    assert st.blocks_per_sm_cv == pytest.approx(0.5)  # std(3, 1) / mean(3, 1)
    assert (st.span, st.tail) == (320, 220)  # SM1 idles for good after 100 of 320 cycles
    assert st.tail_fraction == pytest.approx(220 / 320)
    assert (st.gap_count, st.gap_total, st.gap_max) == (2, 20, 10)
    assert (st.refill_count, st.refill_mean, st.refill_max) == (2, 10.0, 10)


def test_block_sched_concurrent_blocks_get_slots_best_fit():
    # one SM: A [0,100] B [50,200] C [120,220] D [250,300]
    sm = np.zeros(4, dtype=np.int64)
    start = np.array([0, 50, 120, 250])
    end = np.array([100, 200, 220, 300])
    slot, refill = block_sched.assign_slots(sm, start, end)
    assert slot.tolist() == [0, 1, 0, 0]  # D: slots 0 (free at 220) and 1 (at 200); best fit = 0
    assert refill.tolist() == [-1, -1, 20, 30]
    st = block_sched.sm_stats(0, start, end, slot)
    assert (st.span, st.busy, st.work, st.slots) == (300, 270, 400, 2)
    assert st.gaps.tolist() == [30]


def test_block_sched_globaltimer_is_synchronized():
    # gstart = %globaltimer ns: SM0 block [0,100], SM1 block [50,300] on the common clock.
    md = make_map("block_sched", "warp", [("gstart", U64), ("elapsed", U32), ("smid", U32)],
                  [[(10_000, 100, 0)], [(10_050, 250, 1)]])
    r = block_sched.analyze_launch(make_launch(0, "k", [md], block=(32, 1, 1)), md)
    tl, st = r.timeline, r.stats
    assert tl.synchronized and tl.time_unit == "ns"
    assert tl.start.tolist() == [0, 50] and tl.end.tolist() == [100, 300]
    assert (st.span, st.tail) == (300, 200)
    assert r.fit_ghz is None


def test_block_sched_globaltimer_from_probe_text():
    md = make_map("block_sched", "warp", [("lstart", U64), ("elapse", U32), ("smid", U32)], [[(5, 1, 0)]])
    assert block_sched.time_base(md, "mov.u64 %lstart, %globaltimer;")[1:] == ("ns", True)
    assert block_sched.time_base(md, "mov.u64 %lstart, %clock64;")[1:] == ("cycles", False)


def test_block_sched_toml_field_names_and_clock_rate():
    md = block_sched_map(("lstart", "elapse", "smid"))
    r = block_sched.analyze_launch(make_launch(3, "vadd", [md], duration_ns=160.0), md)
    assert r.stats.busy_imbalance == pytest.approx(1.5)
    assert r.fit_ghz == pytest.approx(2.0)  # 320 cycles in 160 ns: a placement scale, not printed
    row = block_sched.kernel_summary([r])
    assert "clock GHz" not in row and "clock_ghz" not in block_sched.kernel_numbers([r])
    assert row["blocks"] == "4" and row["tail"] == "68.8%" and row["busy max/mean"] == "1.5"


def test_block_sched_missing_field_is_a_clear_error():
    md = make_map("block_sched", "warp", [("start", U64), ("when", U32)], [[(1, 2)]])
    with pytest.raises(C.AnalysisError, match=r"no field named 'elapsed' or 'elapse'"):
        block_sched.analyze_launch(make_launch(0, "k", [md]), md)


def test_block_sched_split_block_counted():
    tl = block_sched.build_timeline([0, 0], [10, 10], [0, 1], [0, 1], units_per_block=2)
    assert len(tl) == 1 and tl.split_blocks == 1


def test_block_sched_empty():
    st = block_sched.summarize(block_sched.build_timeline([], [], [], [], units_per_block=2))
    assert st.blocks == 0 and st.sms == ()


def test_occupancy_image_counts_resident_blocks():
    img = block_sched.occupancy_image(known_timeline(), bins=32)  # 10 cycles per bin over [0, 320)
    assert img.shape == (32, 2)
    assert img[:, 0].sum() * 10 == pytest.approx(300)  # block-cycles on SM0
    assert img[:, 1].sum() * 10 == pytest.approx(100)
    assert img[10, 0] == 0 and img[0, 0] == 1  # [100,110) idle; [0,10) one block


# --- gmem_bytes --------------------------------------------------------------------------------
def test_gmem_bytes_known_total_and_bandwidth():
    per_thread = [[(8 if t < 200 else 0,)] for t in range(256)]
    md = make_map("gmem_bytes", "thread", [("bytes", U64)], per_thread)
    r = gmem_bytes.analyze_launch(make_launch(0, "vadd", [md], block=(128, 1, 1), duration_ns=1000.0), md)
    assert r.stats == gmem_bytes.ByteStats(total=1600, records=256, active=200, max_per_record=8)
    assert r.bandwidth_gbs == pytest.approx(1.6)
    r2 = gmem_bytes.LaunchResult(1, "vadd", None, gmem_bytes.ByteStats.of(np.array([400])))
    assert gmem_bytes.kernel_total([r, r2]) == (2000, pytest.approx(1.6))  # bandwidth over timed launches
    assert gmem_bytes.kernel_summary([r, r2])["bytes"] == "2000"
    numbers = gmem_bytes.kernel_numbers([r, r2])  # what report --format csv|json writes
    assert numbers["bytes"] == 2000 and numbers["bytes_per_launch"] == 1000 and numbers["active_threads"] == 201
    assert numbers["gb_per_s"] == pytest.approx(1.6)


def test_gmem_bytes_large_values_do_not_overflow():
    big = np.array([2**40, 2**40, 3], dtype=np.uint64)
    assert gmem_bytes.ByteStats.of(big).total == 2**41 + 3


def test_iter_valid_chunks_equal_whole_and_respect_counts():
    per_unit = [[(u * 10 + k,) for k in range(u % 4)] for u in range(50)]
    md = make_map("m", "thread", [("v", U64)], per_unit, cap=2,
                  counts=[len(r) for r in per_unit])  # units with 3 records drop one
    whole, units = C.read_valid(md)
    chunks = list(C.iter_valid(md, max_records=6, align=4))
    assert len(chunks) > 1 and all(len(set((u // 4).tolist())) == 1 for _, u in chunks)  # 4-unit steps
    assert np.concatenate([r["v"] for r, _ in chunks]).tolist() == whole["v"].tolist()
    expected = [(u, u * 10 + k) for u in range(50) for k in range(min(u % 4, 2))]
    assert list(zip(units.tolist(), whole["v"].tolist())) == expected
    assert C.record_stats(md) == (len(expected), sum(1 for u in range(50) if u % 4 == 3))


# --- dmat --------------------------------------------------------------------------------------
def test_dmat_linear_pattern_is_diagonal():
    clock = np.arange(1000)
    addr = 0x7F0000000000 + 4 * np.arange(1000)
    h = dmat.dmat_histogram(clock, addr, time_bins=10, addr_bins=10, granule=4)
    assert h.counts.shape == (10, 10)
    np.testing.assert_array_equal(h.counts, np.diag([100] * 10))
    assert h.regions() == [{"addr_lo": 0x7F0000000000, "addr_hi": 0x7F0000000000 + 4000,
                            "bin_lo": 0, "bin_hi": 10}]


def test_dmat_densifies_distant_buffers():
    # x and y read at t in [0,100), out written at t in [100,200); buffers terabytes apart
    t = np.arange(100)
    x, y, out = 0x1000_0000, 0x7F00_0000_0000, 0x7F80_0000_0000
    clock = np.r_[t, t, 100 + t]
    addr = np.r_[x + 4 * t, y + 4 * t, out + 4 * t]
    h = dmat.dmat_histogram(clock, addr, time_bins=2, addr_bins=3, granule=4)
    np.testing.assert_array_equal(h.counts, [[100, 100, 0], [0, 0, 100]])
    assert [(g["addr_lo"], g["bin_lo"], g["bin_hi"]) for g in h.regions()] == [(x, 0, 1), (y, 1, 2), (out, 2, 3)]
    linear = dmat.dmat_histogram(clock, addr, time_bins=2, addr_bins=3, granule=4, densify=False)
    assert linear.counts[:, 0].tolist() == [100, 0]  # x alone in the low third, y and out in the top
    assert linear.counts[:, 2].tolist() == [100, 100]


def test_dmat_fewer_ticks_than_bins_and_empty():
    h = dmat.dmat_histogram([5, 6, 6], [0, 128, 256], time_bins=512, addr_bins=256)
    np.testing.assert_array_equal(h.counts, [[1, 0, 0], [0, 1, 1]])
    e = dmat.dmat_histogram([], [])
    assert e.counts.shape == (0, 0) and e.accesses == 0 and e.regions() == []


def dmat_map(n_blocks=4, threads=64, accesses=3):
    """Thread t of block b reads address base + 4*(b*threads + t) + 4096*k at clock base_b + k."""
    per_unit = []
    for b in range(n_blocks):
        for t in range(threads):
            i = b * threads + t
            per_unit.append([(1_000_000 * b + 10 * k, 0x10000 + 4 * i + 4096 * k) for k in range(accesses)])
    return make_map("dmat", "thread", [("clock", U64), ("addr", U64)], per_unit)


def test_dmat_analyze_launch_block_time_base():
    md = dmat_map()
    launch = make_launch(0, "k", [md], grid=(4, 1, 1), block=(64, 1, 1))
    raw = dmat.analyze_launch(launch, md, granule=4)
    assert raw.hist.accesses == 4 * 64 * 3 and raw.hist.t_span == 3_000_021
    blk = dmat.analyze_launch(launch, md, time_base="block", granule=4, time_bins=3)
    assert blk.hist.t_span == 21 and blk.hist.counts.sum(axis=1).tolist() == [256, 256, 256]
    with pytest.raises(C.AnalysisError, match="time base"):
        dmat.analyze_launch(launch, md, time_base="wall")


def image_of(fig):
    """The heat map of a density figure: (axes, AxesImage, colour bar present)."""
    ax = fig.axes[0]
    (shown,) = ax.get_images()
    return ax, shown, len(fig.axes) == 2  # the colour bar is the figure's second axes


def test_dmat_figure_shows_the_histogram(tmp_path):
    clock = np.arange(1000)
    addr = 4 * np.arange(1000)
    h = dmat.dmat_histogram(clock, addr, time_bins=20, addr_bins=10, granule=4)
    r = dmat.LaunchResult(7, "vadd<float>", "raw", h)
    fig = dmat.figure(r)
    ax, shown, colour_bar = image_of(fig)
    assert colour_bar and fig.axes[1].get_ylabel() == "accesses per cell (log scale)"
    assert ax.get_title() == "DMAT: launch 7 vadd<float>"
    assert ax.get_xlabel().startswith("clock cycles since the first access")
    assert ax.get_ylabel() == "address (4-byte lines, accessed lines only)"
    # x = time to the right, y = address upwards: the drawn array is counts[address, time], origin below
    np.testing.assert_array_equal(np.ma.filled(shown.get_array(), 0), h.counts.T)
    assert shown.origin == "lower" and tuple(shown.get_extent()) == (0, 1000, 0, 10)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0x0"]  # one region
    meta = json.load(open(dmat.write_description(r, str(tmp_path))))
    assert meta["accesses"] == 1000 and meta["regions"][0]["addr_lo"] == "0x0"


def test_dmat_figure_of_nothing_says_why():
    from neutrino.analysis.plot import NoPlot

    r = dmat.LaunchResult(1, "k", "raw", dmat.dmat_histogram(np.zeros(0), np.zeros(0)))
    with pytest.raises(NoPlot, match="no access recorded"):
        dmat.figure(r)


def test_block_sched_figure_rows_are_sms_lowest_on_top():
    md = block_sched_map()
    r = block_sched.analyze_launch(make_launch(0, "vadd", [md]), md)
    fig = block_sched.figure(r)
    ax, shown, colour_bar = image_of(fig)
    assert colour_bar and "resident blocks" in fig.axes[1].get_ylabel()
    assert ax.get_ylabel() == "SM" and ax.get_xlabel().startswith("cycles since each SM's first block")
    assert ax.get_title() == "resident blocks per SM: launch 0 vadd"
    np.testing.assert_allclose(np.ma.filled(shown.get_array(), 0), block_sched.occupancy_image(r.timeline).T)
    assert tuple(shown.get_extent()) == (0, 320, 2, 0)  # 320 cycles; SM 0 in [0, 1] at the top
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1"]


def test_program_progress_figure_labels():
    warps = [[(100 + 10 * k, 16 * (k + 1)) for k in range(4)], [(500 + 20 * k, 16 * (k + 1)) for k in range(4)]]
    md = make_map("program_progress", "warp", [("clock", U64), ("branch", U32), ("cuid", U32)],
                  [[(c, b, 0) for c, b in w] for w in warps])
    r = program_progress.analyze_launch(make_launch(0, "loop", [md]), md)
    fig = program_progress.figure(r)
    ax, shown, colour_bar = image_of(fig)
    assert colour_bar and ax.get_ylabel() == "progress (branch: branches executed)"
    assert ax.get_xlabel() == "cycles since the warp's first sample (its SM's clock)"
    assert tuple(shown.get_extent()) == (0, 61, 0, 65)  # longest span 60 cycles, progress up to 64
    assert np.ma.filled(shown.get_array(), 0).sum() == 8  # 8 distinct warp samples


def test_tensorop_thread_and_warp_counts():
    # block of 64 threads: warp 0 all lanes 4 mma; warp 1 lanes 0-15 run 2, the rest none
    counts = [4] * 32 + [2] * 16 + [0] * 16
    md = make_map("tensorop", "thread", [("count", U64)], [[(c,)] for c in counts])
    r = tensorop.analyze_launch(make_launch(0, "mm", [md], block=(64, 1, 1), duration_ns=1000.0), md)
    assert r.stats == tensorop.TensorStats(thread_instructions=160, warp_instructions=6, threads=64,
                                           active_threads=48, active_warps=2)
    assert tensorop.kernel_summary([r])["warp mma/us"] == "6"
    assert tensorop.kernel_numbers([r]) == {"mma_threads": 160, "mma_warps": 6, "active_warps": 2,
                                            "warp_mma_per_us": pytest.approx(6.0)}


def test_tensorop_partial_warps_in_odd_blocks():
    # block of 40 threads = warps of 32 and 8; 2 blocks; chunks never split a warp
    counts = [1] * 40 + [3] * 40
    warp = C.unit_to_warp(np.arange(80), "thread", (40, 1, 1))
    assert warp.tolist() == [0] * 32 + [1] * 8 + [2] * 32 + [3] * 8
    assert tensorop.tensor_stats(np.array(counts), warp).warp_instructions == 1 + 1 + 3 + 3


# --- program_progress --------------------------------------------------------------------------
def test_program_progress_per_warp_curves():
    samples = {0: [(100, 1), (200, 2), (300, 3)], 1: [(1000, 1), (1500, 2)]}
    per_unit = [samples[t // 32] for t in range(64)]  # every lane records the same samples
    md = make_map("program_progress", "thread", [("clock", U64), ("pc", U32)], per_unit)
    r = program_progress.analyze_launch(make_launch(0, "loop", [md], block=(64, 1, 1)), md)
    w = r.warps
    assert w.warp.tolist() == [0, 1] and w.samples.tolist() == [3, 2]
    assert w.span.tolist() == [200, 500] and w.values.tolist() == [3, 2]
    assert w.progress.tolist() == [3, 2] and r.counter is None  # site ids: progress = samples passed
    assert w.straggler_ratio == pytest.approx(500 / 350)
    assert r.picture.sum() == 5  # one point per warp sample
    x, y = program_progress.progress_points(np.array([0, 0, 0, 1, 1]), np.array([100, 200, 300, 1000, 1500]))
    assert x.tolist() == [0, 100, 200, 0, 500] and y.tolist() == [1, 2, 3, 1, 2]


def test_program_progress_branch_counter_fields_of_the_tool():
    # spec/tools.md: clock, branch (bra executed so far, every 16th sampled), cuid.
    # Warp 0 (lanes 0-31) reaches branch 48 in 200 cycles; warp 1 only 32 in 500; lane 33 diverges.
    w0 = [(100, 16, 0), (200, 32, 0), (300, 48, 0)]
    w1 = [(1000, 16, 1), (1500, 32, 1)]
    per_unit = [w0] * 32 + [w1, w1 + [(1700, 48, 1)]] + [w1] * 30
    md = make_map("program_progress", "thread", [("clock", U64), ("branch", U32), ("cuid", U32)], per_unit)
    r = program_progress.analyze_launch(make_launch(0, "loop", [md], block=(64, 1, 1)), md)
    assert r.counter == "branch"
    assert r.warps.progress.tolist() == [48, 48] and r.warps.samples.tolist() == [3, 3]
    assert r.warps.span.tolist() == [200, 700]
    # picture: x bins = cycles since the warp's first sample, y bins = branch count
    assert r.picture.shape == (min(512, 701), 49) and r.picture.sum() == 6
    per_progress = r.picture.sum(axis=0)
    assert np.flatnonzero(per_progress).tolist() == [16, 32, 48] and per_progress[48] == 2
    assert r.picture[0, 16] == 2 and r.picture[-1, 48] == 1  # warp 1 reaches 48 last (x = 700)
    assert r.picture[200 * 512 // 701, 48] == 1  # warp 0 reaches 48 at x = 200
    row = program_progress.kernel_summary([r])
    assert row["warps"] == "2" and row["progress"] == "48..48"
    numbers = program_progress.kernel_numbers([r])
    assert numbers["warps"] == 2 and (numbers["progress_min"], numbers["progress_max"]) == (48, 48)


# --- perfetto ----------------------------------------------------------------------------------
def check_chrome_trace(doc):
    """Structure that chrome://tracing and Perfetto require of the JSON object format."""
    assert isinstance(doc["traceEvents"], list)
    json.dumps(doc)
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M") and isinstance(e["name"], str) and isinstance(e["pid"], int)
        if e["ph"] == "X":
            assert isinstance(e["tid"], int)
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float)
            assert e["ts"] >= 0 and e["dur"] >= 0
        else:
            assert isinstance(e["args"], dict)
    # slices of one track nest or are disjoint (Perfetto drops others)
    tracks = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            assert b0 >= a1 - 1e-9 or b1 <= a1 + 1e-9


def test_perfetto_block_events_and_times():
    tl = known_timeline()
    r = block_sched.LaunchResult(0, "vadd", 200.0, tl, block_sched.summarize(tl))
    events, end = perfetto.trace_events([r], clock_ghz=2.0)
    check_chrome_trace({"traceEvents": events})
    blocks = [e for e in events if e.get("cat") == "block"]
    assert len(blocks) == 4
    by_name = {e["name"]: e for e in blocks}
    assert by_name["block 2"]["ts"] == pytest.approx(0.055)  # 110 cycles at 2 GHz = 55 ns
    assert by_name["block 2"]["dur"] == pytest.approx(0.05)
    assert by_name["block 1"]["ts"] == 0.0
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert by_name["block 3"]["pid"] == 1 and names[(1, by_name["block 3"]["tid"])] == "SM 0"
    assert names[(1, by_name["block 1"]["tid"])] == "SM 1"
    launch = [e for e in events if e.get("cat") == "launch"]
    assert len(launch) == 1 and launch[0]["dur"] == pytest.approx(0.2)
    assert end == pytest.approx(200.0 + perfetto.LAUNCH_GAP_NS)


def test_perfetto_warps_nested_and_slots_separate():
    # two concurrent blocks on SM 0 must go to two tracks
    tl = block_sched.build_timeline([0, 0, 50, 60], [100, 90, 100, 80], [0, 0, 0, 0], [0, 1, 2, 3],
                                    units_per_block=2)
    r = block_sched.LaunchResult(2, "k", None, tl, block_sched.summarize(tl))
    events, _ = perfetto.trace_events([r], warps=True)
    check_chrome_trace({"traceEvents": events})
    blocks = [e for e in events if e.get("cat") == "block"]
    warps = [e for e in events if e.get("cat") == "warp"]
    assert len(blocks) == 2 and len(warps) == 4
    assert blocks[0]["tid"] != blocks[1]["tid"]
    for w in warps:
        b = next(e for e in blocks if e["args"]["block"] == w["args"]["block"])
        assert b["ts"] <= w["ts"] and w["ts"] + w["dur"] <= b["ts"] + b["dur"] + 1e-9
    assert all(e["pid"] == 3 for e in events)  # launch index 2


# --- report (on a fake trace) ------------------------------------------------------------------
def fake_trace():
    bs = block_sched_map()
    gm = make_map("gmem_bytes", "thread", [("bytes", U64)], [[(12,)]] * 128)
    dm = dmat_map(n_blocks=2)
    other = make_map("custom", "block", [("x", U32)], [[(1,)]], counts=[3])  # 2 dropped
    launches = [make_launch(0, "vadd", [bs, gm], grid=(4, 1, 1), duration_ns=1000.0),
                make_launch(1, "vadd", [gm], duration_ns=3000.0),
                make_launch(2, "copy", [dm, other], grid=(2, 1, 1))]
    return SimpleNamespace(path="/tmp/t", probe_text="", events=[], launches=launches)


def test_report_tables_and_plots(tmp_path):
    tr = fake_trace()
    rep = report.analyze(tr, tr.launches)
    assert list(rep.kernels) == ["vadd", "copy"]
    vadd, copy = rep.kernels["vadd"], rep.kernels["copy"]
    assert (vadd.launches, vadd.maps, vadd.records, vadd.dropped) == (2, ["block_sched", "gmem_bytes"], 8 + 256, 0)
    assert (copy.records, copy.dropped) == (2 * 64 * 3 + 1, 2)
    text = report.render(rep)
    assert "[block_sched]" in text and "[gmem_bytes]" in text and "[dmat]" in text
    assert "[tensorop]" not in text
    gm_line = next(line for line in text.splitlines()[text.splitlines().index("[gmem_bytes]"):]
                   if line.startswith("vadd"))
    assert "3072" in gm_line and "0.768" in gm_line  # 2*128*12 bytes in 4000 ns
    paths, skipped, notes = report.write_plots(rep, str(tmp_path))
    assert skipped == 0 and notes == []
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == [
        "0000_vadd_block_sched.png", "0002_copy_dmat.json", "0002_copy_dmat.png"]
    for p in paths:
        if p.endswith(".png"):
            assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_report_warns_on_unreadable_map():
    bad = make_map("block_sched", "warp", [("start", U64)], [[(1,)]])
    tr = SimpleNamespace(path="p", probe_text="", launches=[make_launch(0, "k", [bad])])
    rep = report.analyze(tr, tr.launches)
    assert len(rep.warnings) == 1 and "no field named 'elapsed'" in rep.warnings[0]


def test_report_main_missing_directory(tmp_path, capsys):
    assert report.main(str(tmp_path / "nope")) == 1
    err = capsys.readouterr().err
    assert err.startswith("neutrino: error:") and "no such trace directory" in err
    assert "Traceback" not in err


def test_format_table_alignment():
    text = report.format_table(["kernel", "n"], [["a", "1"], ["long_name", "100"]])
    assert text.splitlines() == ["kernel       n", "---------  ---", "a            1", "long_name  100"]


def test_plots_skipped_without_matplotlib_are_said(tmp_path, monkeypatch):
    monkeypatch.setattr(plot, "matplotlib_missing", lambda: "matplotlib cannot be imported (ImportError: x)")
    tr = fake_trace()
    paths, _, notes = report.write_plots(report.analyze(tr, tr.launches), str(tmp_path))
    assert paths == [] and notes == ["2 picture(s) not drawn: matplotlib cannot be imported (ImportError: x)"]


def test_dmat_globaltimer_time_axis_in_ns_across_sms():
    """A %globaltimer time field: one clock for every SM, so the raw axis is ns since the launch's first
    access, exact. Block b (on its own SM) accesses at 2000 + 250*b + 10*k ns: first access 2000 ns,
    last 2000 + 750 + 20, span 771 ns; 4 time bins of 771/4 ns hold blocks 0, 1, 2, 3 in turn."""
    per_unit = [[(2000 + 250 * b + 10 * k, 0x10000 + 4 * (b * 64 + t) + 4096 * k) for k in range(3)]
                for b in range(4) for t in range(64)]
    md = make_map("dmat", "thread", [("gtime", U64), ("addr", U64)], per_unit)
    launch = make_launch(0, "k", [md], grid=(4, 1, 1), block=(64, 1, 1))
    r = dmat.analyze_launch(launch, md, granule=4, time_bins=4)
    assert r.time_unit == "ns" and r.synchronized and r.hist.t0 == 2000 and r.hist.t_span == 771
    assert r.hist.counts.sum(axis=1).tolist() == [192, 192, 192, 192]
    fig = dmat.figure(r)
    ax, shown, _ = image_of(fig)
    assert ax.get_xlabel() == "time since the launch's first access (ns, %globaltimer)"
    # times step by 10 ns (the tick): 78 ticks in 4 bins of 20 ticks (200 ns), the last one whole
    assert r.hist.tick == 10 and r.hist.bin_width == 200 and tuple(shown.get_extent())[:2] == (0, 800)
    assert dmat.describe(r)["time_unit"] == "ns" and "(ns, %globaltimer)" in dmat.describe(r)["x"]
    blk = dmat.analyze_launch(launch, md, granule=4, time_base="block")
    assert blk.hist.t_span == 21 and dmat.figure(blk).axes[0].get_xlabel().startswith("time since each block's")
    # the same records under a field named `clock`: cycles, unless the probe says it loads %globaltimer
    cyc = make_map("dmat", "thread", [("clock", U64), ("addr", U64)], per_unit)
    assert dmat.analyze_launch(launch, cyc, granule=4).time_unit == "cycles"
    loaded = dmat.analyze_launch(launch, cyc, "clock = nl.time()\ndmat.save(clock, nl.addr)", granule=4)
    assert loaded.time_unit == "ns" and loaded.hist.t_span == 771
    assert dmat.figure(dmat.analyze_launch(launch, cyc, granule=4)).axes[0].get_xlabel() == (
        "clock cycles since the first access (%clock64 of each SM, not aligned across SMs)")
