"""The timeline (spec/trace-format.md "Context tables", spec/runtime.md "Timeline"): the reader,
kernel origins, and the shim's CUPTI recorder end to end against a fake libcuda and a fake
libcupti (tests/fakecuda/fakecupti.c, records laid out as in shim/cupti_abi.h)."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from neutrino import trace as nt
from neutrino.runtime.start import build
from neutrino.runtime.context_tables.cupti import find_cupti, parse_info
from neutrino.runtime.start.launcher import run_main
from neutrino.runtime.results.report import launches_phrase
from neutrino.timeline import (CLOCK_KERNEL, FLAG_GRAPH, GRAPH_REPLAY, FLAG_NO_GPU_TIME, FLAG_PROBED, MAGIC, RECORD, TraceError,
                               globaltimer_offset, globaltimer_to_ns, kernels_by_origin, origin, read_timeline,
                               untimed_by_name)

HERE = Path(__file__).parent
FAKE = HERE / "fakecuda"
SHIM = HERE.parent / "shim"
VEC_PTX = HERE / "data" / "corpus" / "nvcc" / "vec.sm90.ptx"
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

BLOCK_SCHED = '''
[block_sched]
position = "kernel"
datamodel = "warp:16"
before = """.reg .b64 %lstart; mov.u64 %lstart, %clock64;"""
after = """.reg .b64 %lend; .reg .b64 %elapsed; .reg .b32 %elapse;
mov.u64 %lend, %clock64; sub.u64 %elapsed, %lend, %lstart; cvt.u32.u64 %elapse, %elapsed;
SAVE.u64 {%lstart}; SAVE.u32 {%elapse, %smid};"""
'''


# ------------------------------------------------------------------ reader

def _write(run_dir: Path, records: list[dict], names: list[str], *, size: int = 88, tail: bytes = b"",
           magic: bytes = MAGIC, version: int = 1) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    arr = np.zeros(len(records), dtype=RECORD)
    for i, rec in enumerate(records):
        for k, v in rec.items():
            arr[i][k] = v
    # 80: the first writers' records (no host_ns); above 88, a later writer's appended fields
    body = b"".join(arr[i:i + 1].tobytes()[:size] + b"\xee" * (size - RECORD.itemsize) for i in range(len(records)))
    head = magic + version.to_bytes(4, "little") + size.to_bytes(4, "little")
    (run_dir / "timeline.bin").write_bytes(head + body + tail)
    (run_dir / "timeline_names.txt").write_text("".join(n + "\n" for n in names))


def test_reader_fields_names_order(tmp_path):
    recs = [dict(kind=1, start_ns=30, end_ns=40, name_id=1, probe_launch=-1, grid=(2, 1, 1), block=(64, 1, 1), tid=7),
            dict(kind=2, copy_kind=1, start_ns=10, end_ns=20, name_id=0xFFFFFFFF, probe_launch=-1, bytes=4096),
            dict(kind=1, start_ns=20, end_ns=25, name_id=0, flags=FLAG_PROBED | FLAG_GRAPH, probe_launch=3)]
    _write(tmp_path, recs, ["triton_poi_fused_add_0", "_ZN2at6native18elementwise_kernel"])
    tl = read_timeline(tmp_path)
    assert tl["start_ns"].tolist() == [10, 20, 30]
    assert tl["name"].tolist() == ["", "triton_poi_fused_add_0", "_ZN2at6native18elementwise_kernel"]
    assert tl["probe_launch"].tolist() == [-1, 3, -1] and tl["flags"][1] == 3 and tl["bytes"][0] == 4096
    assert tuple(tl["grid"][2]) == (2, 1, 1) and tl["tid"][2] == 7
    assert kernels_by_origin(tl) == {"ATen": 1, "Triton": 1}


def test_reader_never_takes_a_zero_time_for_a_time(tmp_path):
    """CUPTI's 0 is "no timestamp": a record with a 0 start or end, end < start, or flags bit 2 is left
    out of read_timeline, kept (first, times 0, bit 2 set) with untimed=True, and counted by name."""
    _write(tmp_path, [dict(kind=1, name_id=0, start_ns=0, end_ns=0, host_ns=50, tid=7),
                      dict(kind=1, name_id=1, start_ns=100, end_ns=200, host_ns=60, tid=7),
                      dict(kind=1, name_id=0, start_ns=300, end_ns=250, host_ns=70, tid=7),
                      dict(kind=2, copy_kind=1, name_id=0xFFFFFFFF, start_ns=400, end_ns=500, flags=FLAG_NO_GPU_TIME),
                      dict(kind=1, name_id=1, start_ns=0, end_ns=900, host_ns=80, tid=7)], ["a", "b"])
    timed = read_timeline(tmp_path)
    assert timed["name"].tolist() == ["b"] and timed["start_ns"].tolist() == [100]
    every = read_timeline(tmp_path, untimed=True)
    assert len(every) == 5 and every["name"].tolist()[-1] == "b"
    assert (every["flags"][:4] & FLAG_NO_GPU_TIME).all() and not every["flags"][4] & FLAG_NO_GPU_TIME
    assert every["start_ns"][:4].tolist() == [0] * 4 and every["end_ns"][:4].tolist() == [0] * 4
    assert every["host_ns"][:4].tolist() == [50, 70, 0, 80]  # kept as read, in file order
    assert untimed_by_name(tmp_path) == {"a": 2, "": 1, "b": 1}


def test_reader_ignores_a_cut_record_and_reads_longer_records(tmp_path):
    recs = [dict(kind=1, start_ns=i + 1, end_ns=i + 2, name_id=0, probe_launch=-1) for i in range(3)]
    _write(tmp_path / "cut", recs, ["k"], tail=b"\x01" * 37)
    assert len(read_timeline(tmp_path / "cut")) == 3
    _write(tmp_path / "long", recs, ["k"], size=96)
    tl = read_timeline(tmp_path / "long")
    assert tl["start_ns"].tolist() == [1, 2, 3] and set(tl["name"]) == {"k"}


def test_reader_host_ns_appended_field(tmp_path):
    """host_ns (offset 80) is read from 88-byte records and later, longer ones; 80-byte records (the
    first writers') read as host_ns 0 = unknown."""
    recs = [dict(kind=1, start_ns=100 + i, end_ns=101 + i, name_id=0, probe_launch=-1, tid=9, host_ns=50 + i)
            for i in range(3)]
    for size, expected in ((80, [0, 0, 0]), (88, [50, 51, 52]), (104, [50, 51, 52])):
        _write(tmp_path / str(size), recs, ["k"], size=size)
        tl = read_timeline(tmp_path / str(size))
        assert tl["host_ns"].tolist() == expected and tl["tid"].tolist() == [9] * 3, size


@pytest.mark.parametrize("change, message", [
    (dict(magic=b"NTRANGE1"), "not a timeline"), (dict(version=2), "version 2"), (dict(size=40), "smaller than"),
])
def test_reader_bad_header_names_the_file(tmp_path, change, message):
    _write(tmp_path, [], [], **change)
    with pytest.raises(TraceError, match=re.escape(str(tmp_path / "timeline.bin")) + ".*" + message):
        read_timeline(tmp_path)
    (tmp_path / "timeline.bin").write_bytes(b"NTTI")
    with pytest.raises(TraceError, match="not a timeline"):
        read_timeline(tmp_path)


def test_reader_hides_the_calibration_kernel_and_gives_the_offset(tmp_path):
    recs = [dict(kind=1, start_ns=1_000_000, end_ns=1_002_000, name_id=0, probe_launch=-1),
            dict(kind=1, start_ns=1_100_000, end_ns=1_101_000, name_id=1, probe_launch=-1),
            dict(kind=1, start_ns=9_000_000, end_ns=9_002_000, name_id=0, probe_launch=-1)]
    _write(tmp_path, recs, [CLOCK_KERNEL, "k"])
    events = [{"event": "timeline_clock", "phase": "start", "globaltimer_ns": [500, 700]},
              {"event": "timeline_clock", "phase": "stop", "globaltimer_ns": [8_000_900, 8_001_100]}]
    (tmp_path / "event.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert read_timeline(tmp_path)["name"].tolist() == ["k"]
    assert len(read_timeline(tmp_path, own=True)) == 3
    # mid-times: 1_001_000 - 600 and 9_001_000 - 8_001_000: the median of the two
    assert globaltimer_offset(tmp_path) == (1_000_400 + 1_000_000) // 2
    # between the calibrations the offset moves linearly (the GPU timer's drift), outside it holds
    assert globaltimer_to_ns([600, 4_000_800, 8_001_000, 9_000_000], tmp_path).tolist() == [
        1_001_000, 5_001_000, 9_001_000, 10_000_000]


@pytest.mark.parametrize("name, expected", [
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas", "cuBLAS"),
    ("ampere_sgemm_128x64_tn", "cuBLAS"), ("_Z18sgemm_largek_lds64ILb1ELb0ELi5ELi5ELi4ELi4ELi4ELi34EEvPfPKfS2_iiiiiiS2_S2_ffiiPiS3_", "cuBLAS"), ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "cuBLAS"),
    ("_Z17gemv2T_kernel_valIiLi128ELi16ELi4ELi4ELb0ELb0EfffEv", "cuBLAS"), ("gemmSN_TN_kernel", "cuBLAS"),
    ("_Z20magma_sgemmEx_kernelIfffLb0EEviii13BatchedTensor18cublasLtEpilogue_t", "cuBLAS"),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_cudnn", "cuDNN"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "NCCL"), ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "NCCL"),
    ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEE", "ATen"),
    ("void at::native::reduce_kernel<512, 1>", "ATen"), ("_ZN14at_cuda_detail3cub11EmptyKernelIvEEvv", "ATen"),
    ("_ZN43_GLOBAL__N__b6de9c8c_10_SoftMax_cu_9f978f6320softmax_warp_forwardIfffLi9ELb0ELb0EEEvPT0_PKT_iiiPKbib",
     "ATen"),
    ("_ZN7cutlass7Kernel2I50cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align1EEvNT_6ParamsE", "CUTLASS"),
    ("triton_poi_fused_add_0", "Triton"), ("triton_per_fused_native_layer_norm_0", "Triton"),
    ("triton_red_fused_sum_1", "Triton"), ("triton_tem_fused_mm_2", "Triton"),
    ("loop_add_fusion", "XLA"), ("input_reduce_fusion_1", "XLA"), ("wrapped_concatenate", "XLA"),
    ("fusion_12", "XLA"), ("gemm_fusion_dot_1", "XLA"),
    ("_ZN15stream_executor3gpu26RedzoneAllocatorKernelImplEPhhmPj", "XLA"),
    ("_Z6saxpy4PfS_fi", "other"), ("my_kernel", "other"),
])
def test_origin_of_real_names(name, expected):
    assert origin(name) == expected


def test_launches_phrase_counts_launches_per_origin():
    summary = {"kernels": 214, "by_origin": {"Triton": 120, "cuBLAS": 60, "ATen": 34}}
    assert launches_phrase(summary, 120) == "214 kernel launch(es) ran (Triton 120, cuBLAS 60, ATen 34), 120 probed"
    assert launches_phrase(None, 5) == ""


def test_find_cupti_order(tmp_path, monkeypatch):
    lib = tmp_path / "libcupti.so.13"
    lib.write_bytes(b"\x7fELF")
    assert find_cupti({"NEUTRINO_CUPTI": str(lib)}) == (str(lib), "NEUTRINO_CUPTI")
    path, why = find_cupti({"NEUTRINO_CUPTI": str(tmp_path / "missing.so")})
    assert path is None and "missing.so is not a file" in why
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libcupti.so.13").write_bytes(b"\x7fELF")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    monkeypatch.setattr("neutrino.runtime.context_tables.cupti._toolkit_candidates", lambda: [])
    assert find_cupti({}) == (str(wheel / "libcupti.so.13"), "wheel")
    monkeypatch.setattr(sys, "path", [])
    path, why = find_cupti({})
    assert path is None and "no libcupti found" in why
    assert parse_info("library\t/x/libcupti.so\nversion\t130001\nkinds\tconcurrent_kernel\tmemcpy\n") == {
        "library": "/x/libcupti.so", "version": "130001", "kinds": "concurrent_kernel memcpy"}


@needs_cc
def test_abi_offsets_match_the_cupti_headers(tmp_path):
    """shim/cupti_abi.h's offsets against offsetof() in the real headers, wherever they are."""
    include = next((p for p in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include",
                                Path("/usr/local/cuda-13.0/targets/x86_64-linux/include")]
                    if (p / "cupti_activity.h").exists()), None)
    if include is None:
        pytest.skip("no CUPTI headers on this machine")
    exe = tmp_path / "offsets"
    subprocess.run(["cc", f"-I{include}", f"-I{SHIM}", str(FAKE / "cupti_offsets.c"), "-o", str(exe)], check=True)
    rows = [line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()]
    assert len(rows) > 40
    assert [r for r in rows if r[1] != r[2]] == []


# ------------------------------------------------------------------ the shim against fake libcuda + libcupti

@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("fakecupti")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(FAKE / "fakecuda.c")], check=True)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", f"-I{SHIM}", "-Wl,-soname,libcupti.so.13", "-o",
                    str(d / "libcupti.so.13"), str(FAKE / "fakecupti.c"), "-lpthread"], check=True)
    build.build_shim(tmp_path_factory.mktemp("cache"))
    return d


def _run(tmp_path, fakes, command, *extra, env=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    probe = tmp_path / "bs.toml"
    probe.write_text(BLOCK_SCHED)
    base = {"LD_LIBRARY_PATH": str(fakes), "FAKECUDA_BUFPARAM": "4", "NEUTRINO_CACHE_DIR": str(tmp_path / "cache"),
            "NEUTRINO_CUPTI": str(fakes / "libcupti.so.13"), **(env or {})}
    old = {k: os.environ.get(k) for k in base}
    os.environ.update(base)
    try:
        rc = run_main(["-p", str(probe), "--tracedir", str(tmp_path / "trace"), *extra, "--", *command])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    runs = [p for p in (tmp_path / "trace").iterdir() if (p / "event.log").exists()]
    assert rc == 0 and len(runs) == 1
    events = [json.loads(line) for line in (runs[0] / "event.log").read_text().splitlines()]
    return runs[0], events


def _one(events, kind):
    found = [e for e in events if e["event"] == kind]
    assert len(found) == 1, (kind, found)
    return found[0]


@pytest.mark.parametrize("level, ext_late", [("copies,api,ext", ""), ("copies,api,ext", "1"), (None, "")])
def test_every_launch_on_the_timeline_probed_ones_joined(tmp_path, fakes, level, ext_late):
    """Small buffers: API records come after their kernels; with FAKECUPTI_EXT_LATE the external
    correlations come after everything (the kernels are flagged when the timeline stops). At the
    default level (no API records) the launch callback at each probed launch's driver entry marks
    its correlation id: joined exactly, none left for the order join at the stop."""
    env = {"FAKECUPTI_BUFFER": "300", "FAKECUPTI_EXT_LATE": ext_late}
    if level:
        env["NEUTRINO_TIMELINE_LEVEL"] = level
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "5"], env=env)
    start = _one(events, "timeline")
    assert start["enabled"] and start["version"] == 130001 and start["library"] == str(fakes / "libcupti.so.13")
    # no graph_trace: graph replays past the sampled ones are quiet by default (NEUTRINO_TIMELINE_GRAPH_REST=quiet)
    full = {"concurrent_kernel", "memcpy", "memset", "memcpy_peer", "external_correlation"}
    assert set(start["kinds"]) == (full if level else full - {"external_correlation"})
    tl = read_timeline(run)
    kernels = tl[tl["kind"] == 1]
    assert kernels["name"].tolist() == ["saxpy4"] * 5
    assert (kernels["flags"] & FLAG_PROBED).all() and sorted(kernels["probe_launch"].tolist()) == [0, 1, 2, 3, 4]
    # launched by the app's main thread: from API records (level api) or the launch callbacks (default)
    assert (kernels["tid"] == int(_one(events, "start")["pid"])).all()
    if level:  # no `host`: no host time
        assert (tl["host_ns"] == 0).all() and start["host_callbacks"] == 0
    else:  # the call's entry, before the (fake) GPU record's start, after the run began
        assert start["host_callbacks"] > 0 and (tl["host_ns"] > 0).all() and (tl["host_ns"] <= tl["start_ns"]).all()
        assert (tl["host_ns"] >= int(_one(events, "start")["time"] * 1e9) - 10**7).all()
    assert [tuple(g) for g in kernels["grid"]] == [(4, 1, 1)] * 5 and [tuple(b) for b in kernels["block"]] == [(64, 1, 1)] * 5
    assert (kernels["end_ns"] - kernels["start_ns"] == 1000).all()
    copies = tl[tl["kind"] != 1]
    assert len(copies) and set(copies["kind"]) <= {2, 3} and (copies["name_id"] == 0xFFFFFFFF).all()
    counts = _one(events, "timeline_counts")
    assert counts["kernels"] == 5 and counts["by_origin"] == {"other": 5} and counts["kernels_flagged_probed"] == 5
    assert (counts["probed"], counts["probed_by_order"]) == (5, 0)
    assert counts["records"] == len(read_timeline(run, own=True)) == len(tl) + 2  # the clock calibrations
    assert counts["no_thread"] == 0
    assert counts["with_host_time"] == (0 if level else counts["records"])


@pytest.mark.parametrize("timeline", [True, False])
def test_fast_path_times_launches_by_their_timeline_records(tmp_path, fakes, timeline):
    """--time-every's default: where the timeline flags probed launches, a kernel's C-path launches after its first
    record no timing events (a timing pair costs a loop of tiny kernels ~5 µs of GPU time), and the trace takes their
    time from their timeline records (the fake CUPTI's kernels last 1000 ns); with --no-timeline events time every
    8th launch, as before."""
    log = tmp_path / "fake.log"
    run, _ = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "20"],
                  *(() if timeline else ("--no-timeline",)),
                  env={"FAKECUDA_LOG": str(log), "FAKECUDA_LOG_STREAM_OPS": "1"})
    lines = log.read_text().splitlines()
    timing = {line.split("event=")[1] for line in lines if line.startswith("create-timed ")}
    records = [line.split("event=")[1] for line in lines if line.startswith("record ")]
    launches = nt.load(run).launches
    assert len(launches) == 20
    if timeline:
        # timing events: the Python path's first launch and the first C-path launch, two each
        assert sum(r in timing for r in records) == 2 + 2
        # every launch's time from its record (the first two were timed by events as well: the record wins)
        assert [la.duration_from for la in launches] == ["timeline"] * 20
        assert [la.duration_ns for la in launches] == [1000.0] * 20
        duckdb = pytest.importorskip("duckdb")
        from neutrino.analysis import columnar, query

        columnar.export(run, tmp_path / "ds")  # the dataset's launches table takes the same times
        rows = duckdb.connect().execute(f"SELECT launch, duration_ns FROM {query.table_scan(tmp_path / 'ds', 'launches')} "
                                        "ORDER BY launch").fetchall()
        assert [ns for _, ns in rows] == [1000.0] * 20
    else:  # the C-path launches 0, 8 and 16 (the program's 2nd, 10th and 18th): their events' times
        assert sum(r in timing for r in records) == 2 + 2 * 3
        assert [la.duration_from for la in launches] == ["events"] + [
            "events" if k % 8 == 0 else None for k in range(19)]


def test_program_profiler_keeps_its_records(tmp_path, fakes):
    """A program registering its own CUPTI buffers (as Kineto does) gets the kernel records of its
    window, and the timeline keeps every launch before, inside and after it."""
    out = tmp_path / "theirs.json"
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app_profiler.py"), str(VEC_PTX), "saxpy4",
                                         "2", "3", "4", str(out)], "--no-graphs")
    theirs = json.loads(out.read_text())
    assert theirs["kernels"].count("saxpy4") >= 3 and theirs["open_buffers"] == 0
    tl = read_timeline(run)
    assert (tl["kind"] == 1).sum() == 9
    calls = [c["call"] for c in _one(events, "timeline_profiler")["first"]]
    assert calls[:2] == ["register_callbacks", "enable"] and "flush_all" in calls
    assert _one(events, "timeline_counts")["forwarded_to_program"] >= 3


def test_program_forced_flush_leaves_no_kernel_without_time(tmp_path, fakes):
    """The program disables CONCURRENT_KERNEL mid-run and flushes with FLUSH_FORCED (as Kineto does);
    the fake then cuts the newest kernel (start, end 0) as CUPTI does one still running. The shim
    passes the flush on unforced: no kernel of the program's window loses its times, our records keep
    flowing after its Disable; only the runtime's own forced flush at exit cuts one, written flagged
    and counted, never at time 0."""
    out = tmp_path / "theirs.json"
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app_profiler.py"), str(VEC_PTX), "saxpy4",
                                         "2", "3", "4", str(out)], "--no-graphs", env={"FAKECUPTI_INCOMPLETE": "1"})
    every = read_timeline(run, untimed=True)
    kernels = every[every["kind"] == 1]
    untimed = (kernels["flags"] & FLAG_NO_GPU_TIME) != 0
    assert len(kernels) == 9 and int(untimed.sum()) == 1
    assert kernels["host_ns"][untimed][0] == kernels["host_ns"].max()  # the last launch, cut at exit
    assert kernels["start_ns"][untimed][0] == 0 and (kernels["start_ns"][~untimed] > 0).all()
    assert len(read_timeline(run)[read_timeline(run)["kind"] == 1]) == 8
    counts = _one(events, "timeline_counts")
    assert counts["no_gpu_time"] == 1 and counts["kernels"] == 9
    calls = [c["call"] for c in _one(events, "timeline_profiler")["first"]]
    assert "disable" in calls and "flush_all" in calls


def test_untimed_records_of_a_forced_flush_keep_their_launch_order(tmp_path, fakes):
    """FAKECUPTI_INCOMPLETE=2: the program's profiler forces a flush that hands over every other kernel record
    untimed (start and end 0), the earliest first. The join orders a buffer's records per stream by correlation
    id, so each record, timed or not, takes its own launch's entry: host times rise with the correlation ids.
    (Ordered by GPU start with the untimed ones last, as a first version did, the like kernels' host times came
    out of launch order: test_program_with_its_own_torch_profiler on the H200.)"""
    out = tmp_path / "theirs.json"
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app_profiler.py"), str(VEC_PTX), "saxpy4",
                                         "2", "3", "4", str(out)], "--no-graphs", env={"FAKECUPTI_INCOMPLETE": "2"})
    every = read_timeline(run, untimed=True)
    kernels = every[every["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    untimed = (kernels["flags"] & FLAG_NO_GPU_TIME) != 0
    assert len(kernels) == 9 and 2 <= int(untimed.sum()) < 9
    assert (kernels["host_ns"] > 0).all() and (np.diff(kernels["host_ns"].astype(np.int64)) > 0).all()
    counts = _one(events, "timeline_counts")
    assert counts["hook_passed_over"] == 0 and counts["no_gpu_time"] == int(untimed.sum())


@pytest.mark.parametrize("share, level", [("1", None), ("0", None), ("0", "copies,host")])
def test_program_subscriber_gets_the_callbacks(tmp_path, fakes, share, level):
    """A program taking CUPTI's one callback subscriber (as jax.profiler's XLA tracer and Kineto do): its
    subscribe succeeds and its callback sees exactly its window's launches. Shared (the default): it
    gets a handle of ours, its enables go to our subscriber and our callback calls its callback; every
    record keeps its host time. NEUTRINO_TIMELINE_SHARE_SUBSCRIBER=0: our launch callbacks step aside
    for its window (those records have no host time, a `timeline_host_gap` event says so) and come back
    after its unsubscribe; at the default level (`hooks`) the kernels keep theirs all along (the shim's
    launch hooks need no subscriber), with the callbacks for launches (`copies,host`) they lose it."""
    out = tmp_path / "theirs.json"
    env = {"NEUTRINO_TIMELINE_SHARE_SUBSCRIBER": share, **({"NEUTRINO_TIMELINE_LEVEL": level} if level else {})}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app_profiler.py"), str(VEC_PTX), "saxpy4",
                                         "2", "3", "4", str(out), "subscribe"], "--no-graphs", env=env)
    theirs = json.loads(out.read_text())
    assert theirs["launch_entries"] == 3 and theirs["kernels"].count("saxpy4") >= 3
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    gaps = [e for e in events if e["event"] == "timeline_host_gap"]
    calls = _one(events, "timeline_profiler")["first"]
    assert calls[0]["call"] == "subscribe" and "unsubscribe" in [c["call"] for c in calls]
    if share == "1":
        assert (kernels["host_ns"] > 0).all() and not gaps and calls[0]["kind"] == 2
    else:
        expected = [1, 1, 0, 0, 0, 1, 1, 1, 1] if level else [1] * 9
        assert (kernels["host_ns"] > 0).astype(int).tolist() == expected
        (gap,) = gaps
        assert gap["start"] < gap["end"] and "stepped aside" in gap["note"] and calls[0]["kind"] == 1


def test_program_clock_for_cupti_records_is_mapped_back(tmp_path, fakes):
    """A program registering its own clock for CUPTI's records (Kineto's TSC clock, kept after
    torch.profiler): CUPTI stamps our records with it too; the timeline maps them back to CLOCK_REALTIME
    (here: 2 x CLOCK_MONOTONIC + 12345, so a 1000-unit record lasts 500 ns), and all lie within the run."""
    out = tmp_path / "theirs.json"
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app_profiler.py"), str(VEC_PTX), "saxpy4",
                                         "2", "3", "4", str(out), "timestamp"], "--no-graphs")
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    began, ended = _one(events, "start")["time"] * 1e9, _one(events, "exit")["time"] * 1e9
    assert ((kernels["start_ns"] > began) & (kernels["start_ns"] < ended)).all(), kernels["start_ns"]
    lasted = (kernels["end_ns"].astype(np.int64) - kernels["start_ns"].astype(np.int64)).tolist()
    # the slope comes from two (their clock, realtime) pairs 2 ms apart: a loaded machine can skew it by a
    # few per cent; unmapped, a record would last 1000
    assert lasted[:2] == [1000, 1000] and all(abs(d - 500) <= 25 for d in lasted[2:]), lasted
    assert (np.diff(kernels["start_ns"].astype(np.int64)) > 0).all()  # still in launch order
    calls = [c["call"] for c in _one(events, "timeline_profiler")["first"]]
    assert "timestamp_callback" in calls


@pytest.mark.parametrize("flush", ["1", "0"])
def test_records_held_when_the_program_changes_clock_keep_their_times(tmp_path, fakes, flush):
    """CUPTI converts a kernel's GPU times when it hands the record out, in the clock registered then:
    records of kernels that ran before the program registered its clock (Kineto at torch.profiler's
    start) and were still in CUPTI's buffers came without times (the fake, FAKECUPTI_CLOCK_CUTS=1, does
    the same). The shim flushes CUPTI before passing the registration on: every kernel keeps its times.
    NEUTRINO_TIMELINE_CLOCK_FLUSH=0 leaves the flush out: the 2 kernels launched before lose them."""
    out = tmp_path / "theirs.json"
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app_profiler.py"), str(VEC_PTX), "saxpy4",
                                         "2", "3", "4", str(out), "timestamp"], "--no-graphs",
                       env={"FAKECUPTI_CLOCK_CUTS": "1", "NEUTRINO_TIMELINE_CLOCK_FLUSH": flush})
    every = read_timeline(run, untimed=True)
    kernels = every[every["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    untimed = (kernels["flags"] & FLAG_NO_GPU_TIME) != 0
    assert len(kernels) == 9
    assert untimed.astype(int).tolist() == ([0] * 9 if flush == "1" else [1, 1] + [0] * 7)
    no_time = _one(events, "timeline_counts")["no_gpu_time"]  # copies too: the fake's held ones lose theirs
    untimed_kinds = set(every["kind"][(every["flags"] & FLAG_NO_GPU_TIME) != 0].tolist())
    if flush == "1":
        # Every kernel keeps its times. Our writer's copy-out and zeroing of one launch run on another
        # thread and may land between the flush and the registration (the fake then cuts them): at most
        # that one copy and one memset may be untimed (a stated gap, spec/runtime.md).
        assert untimed_kinds <= {2, 3} and no_time <= 2, (untimed_kinds, no_time)
    else:
        assert no_time >= 2
    calls = [c["call"] for c in _one(events, "timeline_profiler")["first"]]
    assert ("clock_flush" in calls) == (flush == "1")
    assert calls.index("timestamp_callback") > calls.index("clock_flush") if flush == "1" else True


def test_no_timeline_and_missing_library(tmp_path, fakes):
    run, events = _run(tmp_path / "off", fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "2"],
                       "--no-timeline")
    assert _one(events, "timeline") == {**_one(events, "timeline"), "enabled": False, "reason": "--no-timeline"}
    assert not (run / "timeline.bin").exists()
    run, events = _run(tmp_path / "missing", fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "2"],
                       env={"NEUTRINO_CUPTI": str(tmp_path / "nowhere.so")})
    start = _one(events, "timeline")
    assert not start["enabled"] and "nowhere.so is not a file" in start["reason"]
    assert _one(events, "exit")["launches"] == 2  # probing went on


def test_exit_line_counts_launches_and_kernels_apart(tmp_path, fakes, capfd):
    _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "3"])
    line = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("neutrino: ") and "seen" in ln][-1]
    assert line.startswith("neutrino: 3 kernel launch(es) ran (other 3), 3 probed; 1 kernel(s) seen, 1 probed; "), line


@pytest.mark.parametrize("level", ["copies", None])
def test_order_join_with_some_launches_unprobed(tmp_path, fakes, level):
    """--launches 1:3 probes launches 1 and 2 of 5. Without launch callbacks (level `copies`) the
    join at the stop pairs each probed launch with the record of its kernel_launch; at the default
    level the callbacks mark them as they launch. The others stay unflagged either way."""
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "5"],
                       "--launches", "1:3", env={"NEUTRINO_TIMELINE_LEVEL": level} if level else None)
    tl = read_timeline(run)
    kernels = tl[tl["kind"] == 1]
    order = np.argsort(kernels["correlation"])
    flags = (kernels["flags"][order] & FLAG_PROBED).tolist()
    assert flags == [0, 1, 1, 0, 0]
    assert kernels["probe_launch"][order].tolist() == [-1, 0, 1, -1, -1]
    counts = _one(events, "timeline_counts")
    assert (counts["probed"], counts["probed_by_order"]) == ((0, 2) if level else (2, 0))


def test_program_profiler_alone_with_no_timeline(tmp_path, fakes):
    """With --no-timeline the shim's CUPTI functions only pass the program's calls on: its
    profiler gets exactly the kernels of its window, and no timeline is written."""
    out = tmp_path / "theirs.json"
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app_profiler.py"), str(VEC_PTX), "saxpy4",
                                         "2", "3", "4", str(out)], "--no-timeline")
    assert json.loads(out.read_text())["kernels"] == ["saxpy4"] * 3
    assert not (run / "timeline.bin").exists()
    assert not [e for e in events if e["event"] == "timeline_profiler"]


def test_graph_replays_flagged_and_joined(tmp_path, fakes):
    """A kernel captured into a CUDA graph and replayed: each replay's record carries the graph
    flag, and the replays of the probed node are joined to their probed launches by order."""
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "3"])
    tl = read_timeline(run)
    kernels = tl[(tl["kind"] == 1) & (tl["name"] == "saxpy4")]
    graph = kernels[(kernels["flags"] & FLAG_GRAPH) != 0]
    assert len(graph) == 3 and (graph["flags"] & FLAG_PROBED).all()
    from neutrino import trace as nt

    replays = sorted(la.index for la in nt.load(run).launches if la.graph is not None)
    assert sorted(graph["probe_launch"].tolist()) == replays and len(replays) == 3
    stream = kernels[(kernels["flags"] & FLAG_GRAPH) == 0]
    assert len(stream) == 1 and stream["flags"][0] & FLAG_PROBED  # the eager launch before the capture


@pytest.mark.parametrize("bad", ["", "1"])
def test_launch_hooks_join_each_kernel_to_its_launch(tmp_path, fakes, bad):
    """Default level (`hooks`): each kernel record takes its thread and host time from the shim's launch
    hook of its stream, in launch order, checked by grid, block and name; CUPTI's callbacks are on for
    the copies only. Two streams, three grids in turn; with FAKEAPP_BAD_LAUNCH each launch is followed
    by one the driver refuses (grid 0, no record): its entry is passed over, never joined."""
    env = {"FAKEAPP_STREAMS": "2", "FAKEAPP_GRIDS": "4,8,2", "FAKECUPTI_BUFFER": "700", "FAKEAPP_BAD_LAUNCH": bad}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "12"],
                       "--launches", "0:1", env=env)
    tl = read_timeline(run)
    kernels = tl[tl["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    pid = int(_one(events, "start")["pid"])
    assert len(kernels) == 12 and (kernels["tid"] == pid).all()
    assert [int(g[0]) for g in kernels["grid"]] == [4, 8, 2] * 4
    assert (kernels["host_ns"] > 0).all() and (kernels["host_ns"] <= kernels["start_ns"]).all()
    for stream in set(kernels["stream"].tolist()):  # one stream's launches in launch order
        host = kernels["host_ns"][kernels["stream"] == stream].astype(np.int64)
        assert (np.diff(host) > 0).all()
    assert (kernels["flags"] & FLAG_PROBED).tolist() == [FLAG_PROBED] + [0] * 11
    counts = _one(events, "timeline_counts")
    assert counts["hook_joined"] == 12 + 2  # and the two clock calibrations
    assert counts["hooked_launches"] == 12 * (2 if bad else 1) + 2
    assert counts["with_host_time"] == counts["records"] and counts["no_thread"] == 0
    assert counts["hook_passed_over"] == 0  # a refused launch's entry is marked dead at its return
    assert counts["launch_callbacks"] == counts["memcpys"] + counts["memsets"]  # no callback per kernel launch
    assert (counts["probed"], counts["probed_by_order"]) == (1, 0)


def test_launch_hooks_pass_over_an_entry_without_record(tmp_path, fakes):
    """A launch whose record never comes (CUPTI dropped it, or the launch made none) leaves an entry that
    fits no record: the next record of its stream takes the entry after it, and the one passed over is
    counted. FAKECUPTI_SKIP_KERNEL=2: the fake makes no record of the third kernel launch (the first is
    the clock calibration's, on its own stream)."""
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"],
                       "--launches", "0:1", env={"FAKEAPP_GRIDS": "4,8", "FAKECUPTI_SKIP_KERNEL": "2"})
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    assert [int(g[0]) for g in kernels["grid"]] == [4, 4, 8, 4, 8]  # the 8 of launch 1 left out
    counts = _one(events, "timeline_counts")
    assert counts["hook_passed_over"] == 1 and counts["hook_joined"] == 5 + 2
    host = kernels["host_ns"].astype(np.int64)
    assert (host > 0).all() and (np.diff(host) > 0).all() and (host <= kernels["start_ns"]).all()


def test_launch_hooks_with_threads_launching_on_one_stream(tmp_path, fakes):
    """Four threads launching on the NULL stream at once: every record joined, none passed over, and each
    thread has as many kernels as it launched (two threads' launches of like kernels may enter the queue
    in the other order than the driver's: their host times then swap, their counts never do)."""
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "25"],
                       "--launches", "0:1", env={"FAKEAPP_THREADS": "4", "FAKECUPTI_BUFFER": "2000"})
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    pid = int(_one(events, "start")["pid"])
    per_thread = sorted(collections.Counter(kernels["tid"].tolist()).items(), key=lambda kv: kv[0] != pid)
    assert per_thread[0] == (pid, 1) and sorted(n for _, n in per_thread[1:]) == [25] * 4
    counts = _one(events, "timeline_counts")
    assert counts["hook_joined"] == 101 + 2 and counts["hook_passed_over"] == 0 and counts["no_thread"] == 0


def test_launch_hooks_with_threads_on_their_per_thread_default_streams(tmp_path, fakes):
    """Four threads launching on the NULL stream through the _ptsz entry points: each launches into its own
    per-thread default stream (CUPTI gives each its own stream id: the fake's is 1000 + the thread's id), so
    each thread's launches are a queue of their own, and every record takes its own thread's entry."""
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "25"],
                       "--launches", "0:1",
                       env={"FAKEAPP_THREADS": "4", "FAKEAPP_PTSZ": "1", "FAKECUPTI_BUFFER": "2000"})
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    assert len(kernels) == 101 and len(set(kernels["stream"].tolist())) == 5
    assert (kernels["tid"].astype(np.int64) == kernels["stream"].astype(np.int64) - 1000).all()
    counts = _one(events, "timeline_counts")
    assert counts["hook_joined"] == 101 + 2 and counts["hook_passed_over"] == 0 and counts["no_thread"] == 0


def test_launch_hooks_on_a_stream_made_again_at_the_same_address(tmp_path, fakes):
    """FAKEAPP_REMAKE_STREAM=1: each launch on a stream made for it and destroyed after it; the allocator gives
    the new one the old one's address, CUPTI another id (the fake's: one per stream made). The destroyed
    stream's queue is retired, so each kernel joins its own launch's entry."""
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"],
                       "--launches", "0:1", env={"FAKEAPP_REMAKE_STREAM": "1", "FAKEAPP_GRIDS": "4,8"})
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    assert len(kernels) == 6 and len(set(kernels["stream"].tolist())) == 6
    assert (kernels["tid"] > 0).all() and (np.diff(kernels["host_ns"].astype(np.int64)) > 0).all()
    counts = _one(events, "timeline_counts")
    assert counts["hook_joined"] == 6 + 2 and counts["hook_passed_over"] == 0 and counts["no_thread"] == 0


def test_launch_hooks_a_refused_probed_launch_leaves_the_original_unflagged(tmp_path, fakes):
    """FAKECUDA_REFUSE_PROBED=1: the driver refuses the instrumented copy, the original runs in its place
    (the program's results unchanged): its record is joined to the launch's entry but not flagged probed, as
    no probed kernel ran."""
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "3"],
                       "--launches", "0:1", env={"FAKECUDA_REFUSE_PROBED": "1"})
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    assert len(kernels) == 3 and (kernels["tid"] > 0).all()
    assert not (kernels["flags"] & FLAG_PROBED).any()
    counts = _one(events, "timeline_counts")
    assert counts["hook_joined"] == 3 + 2 and counts["probed"] == 0


def test_graph_level_records_one_per_replay(tmp_path, fakes):
    """Level `graphs` (GRAPH_TRACE): each replay of the graph is one record of kind 4 (flags bit 1, the
    graph's id in `bytes`, the cuGraphLaunch call's thread and host time), and none of its nodes is a
    kernel record; launches outside graphs are kernel records as before. read_timeline shows the replay
    records only when asked (graphs=True)."""
    env = {"NEUTRINO_TIMELINE_LEVEL": "copies,host,hooks,graphs"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "3"],
                       env=env)
    assert "graph_trace" in _one(events, "timeline")["kinds"]
    tl = read_timeline(run, graphs=True)
    replays = tl[tl["kind"] == GRAPH_REPLAY]
    kernels = tl[tl["kind"] == 1]
    assert len(replays) == 3 and (replays["flags"] & FLAG_GRAPH).all() and len(set(replays["bytes"].tolist())) == 1
    assert (replays["tid"] == int(_one(events, "start")["pid"])).all() and (replays["host_ns"] > 0).all()
    assert (replays["end_ns"] > replays["start_ns"]).all() and (replays["host_ns"] <= replays["start_ns"]).all()
    assert len(kernels) == 1 and not kernels["flags"][0] & FLAG_GRAPH  # the eager launch before the capture
    assert len(read_timeline(run)) == len(tl) - 3
    counts = _one(events, "timeline_counts")
    assert counts["graph_replays"] == 3 and counts["kernels"] == 1


@pytest.mark.parametrize("grids, buffer", [("4,8", "100000"), ("4", "100000"), ("4,8", "300"), ("4", "300")])
def test_launch_hooks_join_records_out_of_launch_order(tmp_path, fakes, grids, buffer):
    """CUPTI can hand one stream's kernel records over out of launch order (seen with jax.profiler on the
    H200); FAKECUPTI_SWAP=1 swaps each pair. Every record still takes an entry of its own stream, none is
    given up. Within one buffer (100000 bytes: all of them) the records are joined per stream in correlation id
    order, which is launch order: each takes its own launch's entry, like kernels too (before: like kernels'
    host times swapped pairwise). Across buffers (300 bytes: one record each) unlike kernels still take their
    own (grid and name differ), like kernels of a pair swap host times: what remains (spec/runtime.md)."""
    env = {"FAKEAPP_GRIDS": grids, "FAKECUPTI_SWAP": "1", "FAKECUPTI_BUFFER": buffer}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "10"],
                       "--launches", "0:1", env=env)
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    counts = _one(events, "timeline_counts")
    assert len(kernels) == 10 and (kernels["host_ns"] > 0).all() and (kernels["tid"] > 0).all()
    assert counts["hook_joined"] == 12 and counts["hook_passed_over"] == 0 and counts["no_thread"] == 0
    host = kernels["host_ns"].astype(np.int64)
    assert len(set(host.tolist())) == 10
    if grids == "4,8" or buffer == "100000":
        assert (np.diff(host) > 0).all()
    else:  # one record per buffer, like kernels: of each swapped pair (launches 1-2, 3-4, ...) the later launch's
        # record came first and took the pair's first entry
        assert (np.diff(host)[1::2] < 0).all() and (np.diff(host)[0::2] > 0).all()


def test_launch_hooks_join_when_the_driver_names_functions_otherwise(tmp_path, fakes):
    """FAKECUDA_OTHER_NAME=1: cuFuncGetName gives a name no record carries; each record still takes its own
    launch's entry by stream order, grid and block, none given up."""
    env = {"FAKEAPP_GRIDS": "4,8", "FAKECUDA_OTHER_NAME": "1"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"],
                       "--launches", "0:1", env=env)
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    counts = _one(events, "timeline_counts")
    assert counts["hook_joined"] == 6 + 2 and counts["hook_passed_over"] == 0 and counts["no_thread"] == 0
    assert (np.diff(kernels["host_ns"].astype(np.int64)) > 0).all()


def test_launch_hooks_without_callbacks(tmp_path, fakes):
    """NEUTRINO_TIMELINE_LEVEL=copies,hooks: no CUPTI subscriber at all; the kernels keep their thread and host
    time from the launch hooks (probed launches flagged through them), copies and memsets have none."""
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "4"],
                       "--launches", "0:2", env={"NEUTRINO_TIMELINE_LEVEL": "copies,hooks"})
    tl = read_timeline(run)
    kernels, copies = tl[tl["kind"] == 1], tl[tl["kind"] != 1]
    assert len(kernels) == 4 and (kernels["host_ns"] > 0).all() and (kernels["tid"] > 0).all()
    assert len(copies) and (copies["host_ns"] == 0).all()
    order = np.argsort(kernels["correlation"])
    assert (kernels["flags"][order] & FLAG_PROBED).tolist() == [FLAG_PROBED, FLAG_PROBED, 0, 0]
    counts = _one(events, "timeline_counts")
    assert counts["launch_callbacks"] == 0 and counts["hook_joined"] == 4 + 2 and counts["probed"] == 2
    assert "host_callbacks" not in _one(events, "timeline") or _one(events, "timeline")["host_callbacks"] == 0


@pytest.mark.parametrize("knobs", ["set", "defaults", "bad"])
def test_cupti_settings_applied_and_records_still_join(tmp_path, fakes, knobs):
    """CUPTI's own settings (spec/runtime.md, "CUPTI settings"): each NEUTRINO_TIMELINE_* variable reaches CUPTI
    and is read back into the `timeline` event's cupti_settings; KERNEL records (`serial`) in place of
    CONCURRENT_KERNEL ones, 64 KiB host buffers handed out zeroed, and HW trace refused as on an H100 change
    nothing in the join: every kernel keeps its launch's thread and host time. Unset, CUPTI's defaults are
    reported; a variable that is not a number, or an attribute CUPTI refuses, is said so and changes nothing."""
    env = {"FAKEAPP_GRIDS": "4,8", "FAKECUPTI_BUFFER": "1000"}
    if knobs == "set":
        env.update({"NEUTRINO_TIMELINE_KERNEL_RECORDS": "serial", "NEUTRINO_TIMELINE_DEVICE_BUFFER_BYTES": "8388608",
                    "NEUTRINO_TIMELINE_DEVICE_BUFFERS": "5", "NEUTRINO_TIMELINE_DEVICE_BUFFER_LIMIT": "40",
                    "NEUTRINO_TIMELINE_HOST_PINNED": "1", "NEUTRINO_TIMELINE_PER_THREAD_BUFFERS": "0",
                    "NEUTRINO_TIMELINE_ZEROED_BUFFERS": "1", "NEUTRINO_TIMELINE_BUFFER_BYTES": "1000",
                    "NEUTRINO_TIMELINE_HW_TRACE": "1", "NEUTRINO_TIMELINE_FLUSH_PERIOD_MS": "10"})
    if knobs == "bad":
        env.update({"NEUTRINO_TIMELINE_DEVICE_BUFFERS": "many", "NEUTRINO_TIMELINE_DEVICE_BUFFER_BYTES": "8388608",
                    "FAKECUPTI_REFUSE_ATTR": "0"})
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"],
                       "--launches", "0:1", env=env)
    timeline = _one(events, "timeline")
    settings = timeline["cupti_settings"]
    defaults = {"kernel_records": "concurrent", "host_buffer_bytes": 4 << 20, "device_buffer_bytes": 3200000,
                "device_buffers_preallocated": 3, "device_buffer_limit": 250, "host_pinned": 0,
                "per_thread_buffers": 1, "zeroed_buffers": 0}
    if knobs == "set":
        assert settings == {"kernel_records": "serial", "host_buffer_bytes": 64 << 10, "device_buffer_bytes": 8388608,
                            "device_buffers_preallocated": 5, "device_buffer_limit": 40, "host_pinned": 1,
                            "per_thread_buffers": 0, "zeroed_buffers": 1, "hw_trace": "error:27",
                            "flush_period_ms": 10}
        assert "kernel" in timeline["kinds"] and "concurrent_kernel" not in timeline["kinds"]
    elif knobs == "bad":
        assert settings == {**defaults, "device_buffer_bytes": "error:1", "device_buffers_preallocated": "bad:many"}
    else:
        assert settings == defaults and "concurrent_kernel" in timeline["kinds"]
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    assert [int(g[0]) for g in kernels["grid"]] == [4, 8] * 3 and (kernels["tid"] > 0).all()
    assert (np.diff(kernels["host_ns"].astype(np.int64)) > 0).all()
    counts = _one(events, "timeline_counts")
    assert counts["hook_joined"] == 6 + 2 and counts["hook_passed_over"] == 0 and counts["kernels"] == 6


def test_launch_hooks_on_more_than_256_streams(tmp_path, fakes):
    """300 streams alive at once (FAKEAPP_STREAMS=300: the NULL stream and 299 made), launches round-robin over
    them: the table of stream queues grows past its first chunk of 256, so every launch has an entry and every
    kernel record takes its own (before: the launches on streams past the 256th had none, their records no
    host time)."""
    env = {"FAKEAPP_STREAMS": "300", "FAKEAPP_GRIDS": "4,8,2"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "900"],
                       "--launches", "0:1", env=env)
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    assert len(kernels) == 900 and len(set(kernels["stream"].tolist())) == 300
    assert (kernels["tid"] > 0).all() and (kernels["host_ns"] > 0).all()
    kernels = kernels[np.argsort(kernels["correlation"])]
    for stream in set(kernels["stream"].tolist()):  # each stream's three launches, in launch order
        host = kernels["host_ns"][kernels["stream"] == stream].astype(np.int64)
        assert len(host) == 3 and (np.diff(host) > 0).all()
    counts = _one(events, "timeline_counts")
    assert counts["hook_joined"] == 900 + 2 and counts["hook_passed_over"] == 0 and counts["no_thread"] == 0


@pytest.mark.parametrize("reset_at", ["2", "4"])
def test_launch_hooks_join_older_launches_first_after_a_reset(tmp_path, fakes, reset_at):
    """The primary context reset before launch 2 or 4 (FAKEAPP_RESET_AT; the fake keeps its streams): the NULL
    stream's queue is retired and its next launch makes a second queue of the same CUPTI stream id. CUPTI hands
    the records over one per buffer, pairs swapped (FAKECUPTI_SWAP), so a launch after the reset can have its
    record joined before an older launch's. Each record still takes its own launch's entry: host times in
    launch order, none given up (before: the join tried the queue that joined last first, and an older
    launch's record took a newer launch's entry of the same kernel in the second queue)."""
    env = {"FAKEAPP_GRIDS": "4,8", "FAKECUPTI_SWAP": "1", "FAKECUPTI_BUFFER": "300", "FAKEAPP_RESET_AT": reset_at}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"],
                       "--launches", "0:1", env=env)
    kernels = read_timeline(run)
    kernels = kernels[kernels["kind"] == 1]
    kernels = kernels[np.argsort(kernels["correlation"])]
    assert len(kernels) == 6 and len(set(kernels["stream"].tolist())) == 1
    assert [int(g[0]) for g in kernels["grid"]] == [4, 8] * 3
    assert (kernels["tid"] > 0).all() and (np.diff(kernels["host_ns"].astype(np.int64)) > 0).all()
    counts = _one(events, "timeline_counts")
    assert counts["hook_passed_over"] == 0 and counts["no_thread"] == 0


def _replays_by_kind(tl):
    """(graph_exec, graph_replay) -> 'nodes' (kernel records, how many) or 'whole' (one kind-4 record)."""
    out = {}
    for rec in tl[(tl["flags"] & FLAG_GRAPH) != 0]:
        key = (int(rec["graph_exec"]), int(rec["graph_replay"]))
        if rec["kind"] == GRAPH_REPLAY:
            assert key not in out, key  # one record per replay recorded whole, and never with node records
            out[key] = "whole"
        else:
            assert out.get(key, 0) != "whole", key
            out[key] = out.get(key, 0) + 1
    return out


def _graph_tallies(run) -> list[list[int]]:
    """timeline_graphs.tsv's rows (graph_exec, replays, node_replays, quiet_replays, whole_replays)."""
    lines = (Path(run) / "timeline_graphs.tsv").read_text().splitlines()
    assert lines[0] == "graph_exec\treplays\tnode_replays\tquiet_replays\twhole_replays"
    return [[int(v) for v in line.split("\t")] for line in lines[1:]]


def test_graph_replays_quiet_by_default(tmp_path, fakes):
    """The default: an executable graph's first 3 replays and every M-th come node by node, the others are quiet
    (launched with kernel records off: no record at all), never a graph-level record. An eager launch between
    replays is recorded (its hook turns kernel records on again first); a steady run of quiet replays switches
    nothing. timeline_graphs.tsv tallies each graph's replays by how they were launched."""
    env = {"GRAPH_APP_KERNELS": "2", "NEUTRINO_TIMELINE_GRAPH_EVERY": "5", "GRAPH_APP_EAGER_EVERY": "4"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "2", "12"],
                       "--no-graphs", env=env)
    start = _one(events, "timeline")
    assert start["graph_records"] == "quiet:3:5" and "graph_trace" not in start["kinds"]
    tl = read_timeline(run, graphs=True)
    recorded = {1, 2, 3, 5, 10}
    assert _replays_by_kind(tl) == {(g, r): 2 for g in (1, 2) for r in recorded}
    eager = tl[(tl["flags"] & FLAG_GRAPH) == 0]
    assert (eager["kind"] == 1).sum() == 1 + 2 * 3  # the first launch, and one after replays 4, 8, 12 of each cycle
    counts = _one(events, "timeline_counts")
    assert (counts["graph_replays_sampled"], counts["graph_replays_quiet"], counts["graph_replays_whole"]) == (10, 14, 0)
    # per cycle: off at replay 4, on (eager), off at 6, on (eager after 8), off at 9, on at 10, off at 11, on (eager)
    assert (counts["kernel_records_switches"], counts["kernel_records_switch_errors"]) == (16, 0)
    assert counts["kernel_records_switch_ns"] > 0 and counts["graph_trace_switches"] == 0
    assert _graph_tallies(run) == [[1, 12, 5, 7, 0], [2, 12, 5, 7, 0]]


def test_no_eager_launch_lost_to_quiet_replays_of_another_thread(tmp_path, fakes):
    """A thread of the program launches kernels as fast as it can while the main thread replays a graph whose
    replays past the first are quiet: every one of its launches is recorded (a launch in flight keeps a replay from
    going quiet; a launch that sees records off turns them on before it reaches the driver)."""
    env = {"NEUTRINO_TIMELINE_GRAPH_NODES": "1", "NEUTRINO_TIMELINE_GRAPH_EVERY": "0", "GRAPH_APP_EAGER_THREAD": "400"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "300"],
                       "--no-graphs", env=env)
    tl = read_timeline(run, graphs=True)
    eager = tl[((tl["flags"] & FLAG_GRAPH) == 0) & (tl["kind"] == 1)]
    assert len(eager) == 1 + 400
    (row,) = _graph_tallies(run)
    assert row[:2] == [1, 300] and row[2] + row[3] == 300 and row[4] == 0
    nodes = tl[(tl["flags"] & FLAG_GRAPH) != 0]
    assert len(nodes) >= row[2]  # a quiet replay may still come recorded (records turned on during its launch)
    assert _one(events, "timeline_counts")["kernel_records_switch_errors"] == 0


def test_no_quiet_replay_while_the_program_records_kernels(tmp_path, fakes):
    """While the program's own profiler records kernels (torch.profiler's CONCURRENT_KERNEL), the kind is its too:
    no replay goes quiet (it would lose the replay from the program's records); after it stops they are quiet again."""
    env = {"NEUTRINO_TIMELINE_GRAPH_NODES": "2", "NEUTRINO_TIMELINE_GRAPH_EVERY": "0", "GRAPH_APP_PROFILE_AT": "4",
           "GRAPH_APP_PROFILE_OFF_AT": "8"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "10"],
                       "--no-graphs", env=env)
    got = _replays_by_kind(read_timeline(run, graphs=True))
    assert sorted(got) == [(1, r) for r in (1, 2, 5, 6, 7, 8)]
    assert _graph_tallies(run) == [[1, 10, 6, 4, 0]]


@pytest.mark.parametrize("scenario", ["graphs", "probed"])
def test_exit_counts_in_python_equal_numpys(tmp_path, fakes, scenario):
    """The exit's kernel counts of a small timeline are read in pure Python when numpy is not loaded (a run that
    probed nothing: timeline_format.kernel_counts); they equal the numpy reader's on the same run: graph replays
    with kernel records, quiet ones, probed kernels flagged, the calibration kernel left out."""
    from neutrino import timeline_format
    from neutrino.runtime.context_tables.cupti import _kernel_origins

    if scenario == "graphs":
        env = {"GRAPH_APP_KERNELS": "2", "NEUTRINO_TIMELINE_GRAPH_EVERY": "5", "GRAPH_APP_EAGER_EVERY": "4"}
        run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "2",
                                             "12"], "--no-graphs", env=env)
    else:
        env = {"FAKEAPP_STREAMS": "2", "FAKEAPP_GRIDS": "4,8,2"}
        run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"],
                           "--launches", "0:3", env=env)
    assert "numpy" in sys.modules  # (this process: _kernel_origins takes numpy's way)
    by_python, by_numpy = timeline_format.kernel_counts(run), _kernel_origins(run)
    assert by_python == by_numpy and by_python["kernels"] > 0
    assert by_python["graph_replays_with_nodes"] == (10 if scenario == "graphs" else 0)
    assert by_python["kernels_flagged_probed"] > 0  # (the eager launches are probed in both)
    counts = _one(events, "timeline_counts")  # what the program's process wrote at exit, by either way
    assert {k: counts[k] for k in by_python} == by_python


def test_graph_tallies_written_in_every_mode(tmp_path, fakes):
    """timeline_graphs.tsv in the modes that record later replays whole or node by node: the tallies follow."""
    env = {"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "NEUTRINO_TIMELINE_GRAPH_NODES": "2"}
    run, _ = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "2", "5"],
                  "--no-graphs", env=env)
    assert _graph_tallies(run) == [[1, 5, 2, 0, 3], [2, 5, 2, 0, 3]]
    run, _ = _run(tmp_path / "all", fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1",
                                            "4"], "--no-graphs", env={"NEUTRINO_TIMELINE_GRAPH_NODES": "all"})
    assert _graph_tallies(run) == [[1, 4, 4, 0, 0]]


@pytest.mark.parametrize("nodes, expected", [
    (None, {r: (2 if r <= 3 else "whole") for r in range(1, 7)}),  # the default: the first 3 replays node by node
    ("3", {r: (2 if r <= 3 else "whole") for r in range(1, 7)}),
    ("2", {r: (2 if r <= 2 else "whole") for r in range(1, 7)}),
    ("all", {r: 2 for r in range(1, 7)}),
    ("0", {r: "whole" for r in range(1, 7)}),
])
def test_graph_replays_sampled_then_whole(tmp_path, fakes, nodes, expected):
    """NEUTRINO_TIMELINE_GRAPH_NODES=N: each executable graph's first N replays come node by node (every kernel node
    a kernel record, flags bit 1), its later ones as one graph-level record each (kind 4); every record of a replay
    carries the graph's number and the replay's (graph_exec, graph_replay), joined by the cuGraphLaunch call's
    correlation id. Two cycles: the second executable graph is another (number 2) even at the first one's address.
    GRAPH_TRACE is switched only where a replay wants the other kind than the one before (twice a cycle)."""
    env = {"GRAPH_APP_KERNELS": "2", "NEUTRINO_TIMELINE_GRAPH_REST": "whole"}
    if nodes is not None:
        env["NEUTRINO_TIMELINE_GRAPH_NODES"] = nodes
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "2", "6"],
                       "--no-graphs", env=env)
    start = _one(events, "timeline")
    mode = {None: "sampled:3", "3": "sampled:3", "2": "sampled:2", "all": "nodes", "0": "graphs"}[nodes]
    assert start["graph_records"] == mode and ("graph_trace" in start["kinds"]) == (nodes != "all")
    tl = read_timeline(run, graphs=True)
    got = _replays_by_kind(tl)
    assert got == {(g, r): kind for g in (1, 2) for r, kind in expected.items()}
    graph = tl[(tl["flags"] & FLAG_GRAPH) != 0]
    pid = int(_one(events, "start")["pid"])
    assert (graph["tid"] == pid).all() and (graph["host_ns"] > 0).all() and (graph["host_ns"] <= graph["start_ns"]).all()
    for key in got:  # the records of one replay share its launch's correlation id, and no other replay has it
        mine = graph[(graph["graph_exec"] == key[0]) & (graph["graph_replay"] == key[1])]
        assert len(set(mine["correlation"].tolist())) == 1
    assert len(set(graph["correlation"].tolist())) == 12
    eager = tl[(tl["flags"] & FLAG_GRAPH) == 0]
    assert (eager["kind"] != GRAPH_REPLAY).all() and (eager["graph_exec"] == 0).all() and (eager["kind"] == 1).sum() == 1
    counts = _one(events, "timeline_counts")
    whole = sum(v == "whole" for v in got.values())
    assert counts["graph_replays"] == whole and counts["kernels"] == 1 + 2 * (12 - whole)
    if nodes == "all":
        assert counts["graph_replays_sampled"] == counts["graph_replays_whole"] == counts["graph_trace_switches"] == 0
    else:
        assert (counts["graph_replays_sampled"], counts["graph_replays_whole"]) == (12 - whole, whole)
        assert counts["graph_trace_switches"] == (4 if nodes in (None, "3", "2") else 0)
        assert (counts["graph_trace_switch_ns"] > 0) == (counts["graph_trace_switches"] > 0)  # timed


def test_graph_replays_of_two_graphs_interleaved_and_an_update(tmp_path, fakes):
    """Two executable graphs of one capture replayed in turn (A1 B1 A2 B2 ...), and A updated (cuGraphExecUpdate)
    before its replay 4: each graph counts its own replays; the update makes A another graph to the timeline
    (a new number), sampled again. GRAPH_TRACE switches off at the first replay of each graph new to the timeline
    while it is on, and on again at the first replay past the sampled ones."""
    env = {"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "GRAPH_APP_TWIN": "graph", "GRAPH_APP_UPDATE_AT": "3", "NEUTRINO_TIMELINE_GRAPH_NODES": "2"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "6"],
                       "--no-graphs", env=env)
    got = _replays_by_kind(read_timeline(run, graphs=True))
    sampled = {key for key, kind in got.items() if kind != "whole"}
    # A is graph 1 (replays 1-3), then graph 3 after its update (its replays 1-3); B is graph 2 (replays 1-6)
    assert sorted(got) == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3), (2, 4), (2, 5), (2, 6), (3, 1), (3, 2), (3, 3)]
    assert sampled == {(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)}
    counts = _one(events, "timeline_counts")
    # launch order A1 B1 A2 B2 A3 B3 A'1 B4 A'2 B5 A'3 B6: off at A1, on at A3, off at A'1, on at B4, off at A'2,
    # on at B5
    assert counts["graph_trace_switches"] == 6


def test_benchmark_graph_check_reads_a_sampled_run(tmp_path, fakes):
    """benchmarks/timeline_cost.py --suite ends with a check of the sampled graph records (its `graph_check`):
    on a run with known replays it counts, per graph, the replays with node records and those recorded whole."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("timeline_cost", HERE.parent / "benchmarks" / "timeline_cost.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "7"], "--no-graphs",
         env={"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "GRAPH_APP_KERNELS": "3", "NEUTRINO_TIMELINE_GRAPH_NODES": "3"})
    lines = bench.graph_check(str(tmp_path / "trace"))
    assert lines[0].startswith("graph check: graph_records=sampled:3; launched sampled 3, whole 4, GRAPH_TRACE switches 2 (")
    assert "graph records without graph_exec 0 of 13" in lines[0]
    assert lines[1].startswith("  graph 1: replays with node records 3 (replays [1, 2, 3], kernel records each [3]")
    assert lines[1].endswith("replays recorded whole 4 (median 3.0 us), both 0")


@pytest.mark.parametrize("streams", ["2", "1"])
def test_threads_streams_two_devices_peer_copies_and_profiler_calls(tmp_path, fakes, streams):
    """What an outside checker tries on a program we have not seen: three host threads launching at once on two
    devices and two streams (launch i on device i % 2: its NULL stream, CUPTI id 7 on every device, or a stream
    made, id 13), a peer-to-peer copy after each launch (MEMCPY2 records, copy kind PtoP), and cuProfilerStop /
    cuProfilerStart calls around them (passed through: the timeline records everything). Every kernel and copy
    has its device, stream, thread and host time (the launch hooks' queues are per device too: a record never
    takes another device's entry: with one stream, both devices' NULL streams), and the report's first section and
    the Perfetto export place them so."""
    env = {"FAKEAPP_THREADS": "3", "FAKEAPP_STREAMS": streams, "FAKEAPP_DEVICES": "2", "FAKECUDA_CC": "90,90",
           "FAKEAPP_PEER": "1", "FAKEAPP_PROFILER": "1", "FAKECUPTI_BUFFER": "3000"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "8"],
                       "--launches", "0:1", env=env)
    assert "memcpy_peer" in _one(events, "timeline")["kinds"]
    tl = read_timeline(run)
    kernels, copies = tl[tl["kind"] == 1], tl[(tl["kind"] == 2) & (tl["copy_kind"] == 10)]
    assert len(kernels) == 25 and len(copies) == 25
    made = int(kernels["stream"][kernels["device"] == 1][0])  # the stream the app made (the fake's ids: 13 up)
    assert made > 7 if streams == "2" else made == 7
    for part in (kernels, copies):
        assert sorted(set(zip(part["device"].tolist(), part["stream"].tolist()))) == [(0, 7), (1, made)]
        assert int((part["device"] == 0).sum()) == 13
        assert (part["tid"] > 0).all() and (part["host_ns"] > 0).all()
        lag = part["start_ns"].astype(np.int64) - part["host_ns"].astype(np.int64)
        assert (lag >= 0).all() and np.median(lag) < 10**7  # (the probed first launch is built in between)
    assert len(set(kernels["tid"].tolist())) == 4  # the main thread's first launch, then the three threads
    assert sorted(collections.Counter(kernels["tid"].tolist()).values()) == [1, 8, 8, 8]
    assert collections.Counter(copies["tid"].tolist()) == collections.Counter(kernels["tid"].tolist())
    counts = _one(events, "timeline_counts")
    assert counts["hook_joined"] == 25 + 2 and counts["hook_passed_over"] == 0 and counts["no_thread"] == 0
    assert counts["memcpys"] == 25 + int((tl["kind"] == 2).sum()) - 25

    from neutrino.analysis import context, export_timeline
    from tests.test_export_perfetto import decode, track_name

    ctx = context.load(run)
    rows = {r.name: r for r in ctx.rows}
    assert ctx.devices == 2 and (rows["saxpy4"].count, rows["saxpy4"].origin) == (25, "other")
    assert (rows["[memcpy PtoP]"].count, rows["[memcpy PtoP]"].origin) == (25, "copy")
    out = tmp_path / "t.pftrace"
    export_timeline.export_protobuf(str(run), str(out))
    tracks, slices = decode(out)
    per_track = collections.Counter(track_name(tracks, s[0]) for s in slices if s[1] in ("saxpy4", "[memcpy PtoP]"))
    assert per_track == {"GPU 0 stream 7": 26, f"GPU 1 stream {made}": 24}  # tracks per (device, stream)
    assert {s[4]["tid"] for s in slices if s[1] == "saxpy4"} == set(kernels["tid"].tolist())


def test_graph_replays_node_by_node_while_the_program_records_kernels(tmp_path, fakes):
    """GRAPH_TRACE is the process's, so while the program's own profiler records kernels (Kineto enabling
    CONCURRENT_KERNEL) the shim keeps it off: every replay then comes node by node, in its records and ours;
    once the program disables them, replays past the sampled ones are recorded whole again."""
    env = {"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "NEUTRINO_TIMELINE_GRAPH_NODES": "2", "GRAPH_APP_PROFILE_AT": "4", "GRAPH_APP_PROFILE_OFF_AT": "6"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "8"],
                       "--no-graphs", env=env)
    got = _replays_by_kind(read_timeline(run, graphs=True))
    assert got == {(1, r): (1 if r in (1, 2, 5, 6) else "whole") for r in range(1, 9)}
    counts = _one(events, "timeline_counts")
    assert (counts["graph_replays_sampled"], counts["graph_replays_whole"], counts["graph_trace_switches"]) == (4, 4, 4)


def test_a_graph_instantiated_after_sampled_replays_is_instantiated_traced(tmp_path, fakes):
    """torch.compile's training loop: the backward graph (B) is instantiated after the forward graph's (A) first
    replays switched GRAPH_TRACE off. Launched later with GRAPH_TRACE on, such a graph crashed CUPTI (the fake
    aborts so: fakecuda.c, graph_trace_now). The shim switches GRAPH_TRACE on before every instantiation, so B is
    sampled like any graph: its first 3 replays node by node, the rest whole."""
    env = {"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "GRAPH_APP_TWIN": "graph", "GRAPH_APP_TWIN_AT": "1"}  # the default sampling: 3 replays
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "7"],
                       "--no-graphs", env=env)
    got = _replays_by_kind(read_timeline(run, graphs=True))
    assert got == {**{(1, r): (1 if r <= 3 else "whole") for r in range(1, 8)},
                   **{(2, r): (1 if r <= 3 else "whole") for r in range(1, 7)}}
    counts = _one(events, "timeline_counts")
    assert counts["graph_execs_untraced"] == 0 and counts["graph_trace_switches"] >= 3


def test_a_graph_instantiated_while_graph_trace_cannot_be_on_stays_node_by_node(tmp_path, fakes):
    """B instantiated while the program's own profiler records kernels (GRAPH_TRACE kept off then): B is
    untraced, every replay of it node by node (GRAPH_TRACE off at each of its launches, never a crash), while A
    goes on being recorded whole past its sampled replays once the profiler stops."""
    env = {"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "GRAPH_APP_TWIN": "graph", "GRAPH_APP_TWIN_AT": "2", "GRAPH_APP_PROFILE_AT": "1",
           "GRAPH_APP_PROFILE_OFF_AT": "3"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "7"],
                       "--no-graphs", env=env)
    got = _replays_by_kind(read_timeline(run, graphs=True))
    assert got == {**{(1, r): (1 if r <= 3 else "whole") for r in range(1, 8)}, **{(2, r): 1 for r in range(1, 6)}}
    assert _one(events, "timeline_counts")["graph_execs_untraced"] == 1


def test_a_graph_instantiated_under_a_pause_every_replay_node_by_node(tmp_path, fakes):
    """neutrino_timeline_pause(5) (every replay node by node, GRAPH_TRACE off) before the second cycle's graph is
    instantiated, pause(0) (sampled again, GRAPH_TRACE on) before its second replay: that graph was instantiated
    with GRAPH_TRACE off, so every replay of it comes node by node (the fake would abort at a launch with it on)."""
    env = {"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "GRAPH_APP_PAUSE": "1:0,5:5"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "2", "6"],
                       "--no-graphs", env=env)
    got = _replays_by_kind(read_timeline(run, graphs=True))
    assert got == {**{(1, r): (1 if r in (1, 2, 3, 6) else "whole") for r in range(1, 7)},
                   **{(2, r): 1 for r in range(1, 7)}}
    assert _one(events, "timeline_counts")["graph_execs_untraced"] == 1


def test_sampled_replays_without_node_records_are_said(tmp_path, fakes):
    """If CUPTI kept recording replays whole after GRAPH_TRACE was switched off (FAKECUPTI_GRAPH_TRACE_STICKY: what
    the GPU test checks CUPTI does not do), the replays launched to be sampled come without node records: the
    exit says so in one event with the variable that records every replay node by node."""
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "5"],
                       "--no-graphs", env={"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "FAKECUPTI_GRAPH_TRACE_STICKY": "1", "NEUTRINO_TIMELINE_GRAPH_NODES": "3"})
    note = _one(events, "timeline_graph_records")
    assert (note["sampled_launched"], note["missing"]) == (3, 3) and "NEUTRINO_TIMELINE_GRAPH_NODES=all" in note["note"]
    assert _one(events, "timeline_counts")["graph_replays_with_nodes"] == 0
    run, events = _run(tmp_path / "b", fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1",
                                               "5"], "--no-graphs", env={"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "NEUTRINO_TIMELINE_GRAPH_NODES": "3"})
    assert not [e for e in events if e["event"] == "timeline_graph_records"]
    assert _one(events, "timeline_counts")["graph_replays_with_nodes"] == 3


@pytest.mark.parametrize("keep", ["", "1"])
def test_graph_numbers_with_a_small_table(tmp_path, fakes, keep):
    """NEUTRINO_TIMELINE_GRAPH_EXECS=64: 60 cycles of an executable graph made, replayed twice, destroyed: every one
    gets its own number (the slots of destroyed ones are reclaimed) and is sampled. With all 60 alive at once
    (GRAPH_APP_KEEP_EXECS) the table holds 48 (3/4 of it): the later ones go unnumbered and are recorded whole."""
    env = {"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "NEUTRINO_TIMELINE_GRAPH_EXECS": "64", "GRAPH_APP_KEEP_EXECS": keep, "NEUTRINO_TIMELINE_GRAPH_NODES": "3"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "60",
                                         "2"], "--no-graphs", env=env)
    tl = read_timeline(run, graphs=True)
    graph = tl[(tl["flags"] & FLAG_GRAPH) != 0]
    numbered = graph[graph["graph_exec"] > 0]
    nodes = graph[graph["kind"] == 1]
    if not keep:
        assert sorted(set(numbered["graph_exec"].tolist())) == list(range(1, 61)) and len(graph) == len(numbered) == 120
        assert len(nodes) == 120
    else:
        assert sorted(set(numbered["graph_exec"].tolist())) == list(range(1, 49)) and len(nodes) == 96
        unnumbered = graph[graph["graph_exec"] == 0]
        assert len(unnumbered) == 24 and (unnumbered["kind"] == GRAPH_REPLAY).all()


def test_threads_on_two_devices_each_kernel_in_its_own_threads_ranges(tmp_path, fakes):
    """Three threads launching on two devices, each launch i inside neutrino.annotate("annot{i%2}") and an NVTX
    range "nvtx{i}" on its own thread (the fake NVTX library): every kernel's enclosing ranges are its own
    launch's, on its launching thread, in the timeline's lookup, the report's range column and the Perfetto
    export's thread tracks."""
    nvtx = tmp_path / "libfakenvtx.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(nvtx), str(HERE / "fakenvtx" / "fakenvtx.c"), "-ldl"],
                   check=True)
    env = {"FAKEAPP_THREADS": "3", "FAKEAPP_DEVICES": "2", "FAKECUDA_CC": "90,90", "FAKEAPP_NVTX": str(nvtx),
           "PYTHONPATH": str(HERE.parent)}
    run, events = _run(tmp_path / "r", fakes, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"],
                       "--launches", "0:1", env=env)
    from neutrino import ranges as nr

    tl = read_timeline(run)
    around = nr.timeline_ranges(run)
    ranges = nr.read_ranges(run)
    by_name = {str(r["name"]): r for r in ranges}
    kernels = [(tl[i], around[i]) for i in range(len(tl)) if tl["kind"][i] == 1]
    assert len(kernels) == 19
    seen = set()
    for rec, names in kernels:
        assert len(names) == 2 and names[1].startswith("nvtx"), names
        i = int(names[1][4:])
        assert names[0] == f"annot{i % 2}" and int(rec["device"]) == i % 2
        assert int(by_name[names[1]]["tid"]) == int(rec["tid"])  # the range of its own launching thread
        seen.add(i)
    assert seen == set(range(19))

    from neutrino.analysis import context, export_timeline
    from tests.test_export_perfetto import decode, track_name

    ctx = context.load(run)
    (row,) = [r for r in ctx.rows if r.name == "saxpy4"]
    assert row.count == 19 and row.range.startswith("nvtx")  # innermost: each launch its own (1 of 19 each)
    out = tmp_path / "t.pftrace"
    export_timeline.export_protobuf(str(run), str(out))
    tracks, slices = decode(out)
    threads = {track_name(tracks, s[0]) for s in slices if s[1].startswith("nvtx")}
    assert threads == {f"thread {t}" for t in set(tl["tid"][tl["kind"] == 1].tolist())}
    assert collections.Counter(s[1][:5] for s in slices if s[1].startswith("annot")) == {"annot": 19}


def test_pause_ways_for_the_graph_benchmark(tmp_path, fakes):
    """The benchmark's in-process A/B (NEUTRINO_BENCH_AB_WAYS=graphs) switches the recording between replays of one
    graph: way 5 records every replay node by node, 0 goes back to the default (replays past the sampled ones
    whole), 1 pauses (no record)."""
    env = {"NEUTRINO_TIMELINE_GRAPH_REST": "whole", "NEUTRINO_TIMELINE_GRAPH_NODES": "2", "GRAPH_APP_PAUSE": "3:5,5:0,7:1"}
    run, events = _run(tmp_path, fakes, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "1", "8"],
                       "--no-graphs", env=env)
    got = _replays_by_kind(read_timeline(run, graphs=True))
    assert got == {(1, 1): 1, (1, 2): 1, (1, 3): "whole", (1, 4): 1, (1, 5): 1, (1, 6): "whole", (1, 7): "whole"}
