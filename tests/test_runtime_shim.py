"""The LD_PRELOAD shim: build, exports, harmlessness, and the whole chain against a fake libcuda.

The fake libcuda (tests/fakecuda/fakecuda.c) lets the shim's three interception
routes (exported symbols, dlsym, cuGetProcAddress) and the Python runtime run
end to end on a machine without a GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import neutrino.trace as nt
import test_runtime_core
from neutrino.runtime.start import build
from neutrino.runtime.start.launcher import libpython, run_main

HERE = Path(__file__).parent
FAKE = HERE / "fakecuda"
VEC_PTX = HERE / "data" / "corpus" / "nvcc" / "vec.sm90.ptx"

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

EXPORTS = {
    "dlsym", "cuGetProcAddress", "cuGetProcAddress_v2", "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx",
    "cuModuleLoadFatBinary", "cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLinkAddData_v2", "cuLinkComplete",
    "cuModuleGetFunction", "cuLibraryGetKernel", "cuKernelGetFunction", "cuLibraryGetModule", "cuLaunchKernel",
    "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel_ptsz", "neutrino_register_callbacks", "neutrino_real_sym", "neutrino_probe_add",
    "neutrino_probe_remove", "neutrino_set_launch_filter", "cuCtxDestroy_v2", "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxRelease", "cuModuleUnload", "cuLibraryUnload", "neutrino_forget_function",
    "neutrino_register_unload_callback", "cuStreamDestroy_v2",
}

BLOCK_SCHED = '''
[block_sched]
position = "kernel"
datamodel = "warp:16"
before = """.reg .b64 %lstart; mov.u64 %lstart, %clock64;"""
after = """.reg .b64 %lend; .reg .b64 %elapsed; .reg .b32 %elapse;
mov.u64 %lend, %clock64; sub.u64 %elapsed, %lend, %lstart; cvt.u32.u64 %elapse, %elapsed;
SAVE.u64 {%lstart}; SAVE.u32 {%elapse, %smid};"""
'''


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    return build.build_shim(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def fakecuda(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("fakecuda")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(FAKE / "fakecuda.c")], check=True)
    subprocess.run(["cc", "-O1", "-o", str(d / "app"), str(FAKE / "app.c"), "-ldl"], check=True)
    return d


def test_shim_exports(shim):
    out = subprocess.run(["nm", "-D", "--defined-only", str(shim)], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if " T " in line}
    assert EXPORTS <= names
    # no generated forwarder per driver symbol: only what we hook (28: cuDevicePrimaryCtxRetain and the pre-CUDA-11 cuDevicePrimaryCtxRelease counted, and 35 graph and capture calls: graphs.c,
    # cuGraphLaunch, cuGraphExecNodeSetParams and cuGraphNodeSetParams for the host's choice of replays included,
    # and the 10 other changes to an executable graph that a twin gets too: graphpick.c)
    graph_calls = {n for n in names if n.startswith(("cuGraph", "cuStreamBeginCapture", "cuStreamEndCapture"))}
    cupti = {n for n in names if n.startswith("cupti")}  # cupti.c: the program's profiler reaches CUPTI through us
    assert cupti == {"cuptiActivityRegisterCallbacks", "cuptiActivityEnable", "cuptiActivityDisable",
                     "cuptiActivityFlushAll", "cuptiFinalize",  # the activity buffers we share
                     "cuptiSubscribe", "cuptiSubscribe_v2", "cuptiUnsubscribe", "cuptiEnableCallback",
                     "cuptiEnableDomain", "cuptiEnableAllDomains", "cuptiGetCallbackState",  # the one subscriber we share
                     "cuptiActivityRegisterTimestampCallback"}  # the program's clock, mapped back to ours
    assert len([n for n in names if n.startswith("cu") and n not in graph_calls | cupti]) == 28
    assert len(graph_calls) == 35


def test_shim_cached_and_rebuilt_on_change(tmp_path, monkeypatch):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    p1 = build.build_shim(tmp_path)
    mtime = p1.stat().st_mtime_ns
    assert build.build_shim(tmp_path) == p1 and p1.stat().st_mtime_ns == mtime  # cached
    sources = build.shim_sources()
    changed = tmp_path / "writer.c"
    changed.write_text(sources[1].read_text() + "\n/* changed */\n")
    monkeypatch.setattr(build, "shim_sources", lambda: [sources[0], changed, *sources[2:]])
    p2 = build.build_shim(tmp_path)
    assert p2 != p1 and p2.exists()


def test_shim_build_error_is_clear(tmp_path, monkeypatch):
    src = tmp_path / "preload.c"
    src.write_text("this is not C\n")
    monkeypatch.setattr(build, "shim_sources", lambda: [src])
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    with pytest.raises(build.ShimBuildError, match="building the shim failed"):
        build.build_shim(tmp_path)
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    with pytest.raises(build.ShimBuildError, match="no C compiler"):
        build.build_shim(tmp_path / "other")


def test_preload_without_cuda_is_harmless(shim):
    env = dict(os.environ, LD_PRELOAD=str(shim))
    r = subprocess.run([sys.executable, "-c", "import ctypes, json; ctypes.CDLL(None).dlsym; print('fine')"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "fine", r.stderr
    r = subprocess.run(["sh", "-c", "echo ok"], env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "ok"
    # the real-symbol lookup degrades to NULL without libcuda, never crashes
    code = (f"import ctypes as C; l=C.CDLL({str(shim)!r}); l.neutrino_real_sym.restype=C.c_void_p; "
            "print(l.neutrino_real_sym(b'cuLaunchKernel'))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "None"


def _run_under_fake(tmp_path, fakecuda, command, *extra, probe_text=BLOCK_SCHED):
    probe = tmp_path / "bs.toml"
    probe.write_text(probe_text)
    log = tmp_path / "fake.log"
    env = {"LD_LIBRARY_PATH": str(fakecuda), "FAKECUDA_LOG": str(log), "FAKECUDA_BUFPARAM": "4",
           "NEUTRINO_CACHE_DIR": str(tmp_path / "cache")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        rc = run_main(["-p", str(probe), "--tracedir", str(tmp_path / "trace"), *extra, "--", *command])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rc, (log.read_text().splitlines() if log.exists() else [])


def test_python_program_via_dlsym(tmp_path, fakecuda, shim):
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "3"])
    assert rc == 0
    assert log == ["saxpy4 probed=1 grid=4"] * 3
    t = nt.load(tmp_path / "trace")
    assert len(t.launches) == 3
    la = t.launches[0]
    assert la.frame.startswith(str(FAKE / "app.py")) and "(launches)" in la.frame  # the function that called the driver
    v = la.maps["block_sched"].valid()
    assert len(v) == 8 and list(v["unit"]) == list(range(8)) and set(v["elapse"]) == {7}


def test_launch_filter_in_shim(tmp_path, fakecuda, shim):
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"],
                              "--launches", "1:5", "--filter", "hscale")
    assert rc == 0
    assert [line.split()[1] for line in log] == ["probed=0", "probed=1", "probed=1", "probed=1", "probed=1", "probed=0"]
    t = nt.load(tmp_path / "trace")
    assert [la.event["kernel_launch"] for la in t.launches] == [1, 2, 3, 4]


def test_kernel_excluded_runs_unprobed(tmp_path, fakecuda, shim):
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "2"],
                              "--filter", "saxpy")
    assert rc == 0 and log == ["saxpy4 probed=0 grid=4"] * 2


@pytest.mark.skipif(libpython() is None, reason="this Python has no shared libpython to embed")
def test_c_program_via_cugetprocaddress_embeds_python(tmp_path, fakecuda, shim):
    rc, log = _run_under_fake(tmp_path, fakecuda, [str(fakecuda / "app"), str(VEC_PTX), "saxpy4", "2"])
    assert rc == 0
    assert log == ["saxpy4 probed=1 grid=4"] * 2 + ["primary context released"]  # through the teardown hook
    t = nt.load(tmp_path / "trace")
    assert len(t.launches) == 2 and t.launches[0].frame is None
    assert len(t.launches[1].maps["block_sched"].valid()) == 8
    assert any(e.get("event") == "start" and e.get("embedded") for e in t.events)


def test_broken_probe_file_program_not_run(tmp_path, fakecuda, shim, capsys):
    probe = tmp_path / "bad.toml"
    probe.write_text("[p]\nposition = 'kernel'\nbefore = 'frobnicate %r1;'\n")
    rc = run_main(["-p", str(probe), sys.executable, "-c", "open('ran','w')"])
    assert rc == 1 and not Path("ran").exists()
    assert "error" in capsys.readouterr().err


def test_c_program_without_libpython_runs_unprobed(tmp_path, fakecuda, shim):
    from neutrino.runtime.start.launcher import child_env
    from neutrino.runtime.start.options import RuntimeOptions

    probe = tmp_path / "bs.toml"
    probe.write_text(BLOCK_SCHED)
    env = child_env(RuntimeOptions(probe=str(probe), tracedir=str(tmp_path / "trace")), shim)
    env.pop("NEUTRINO_LIBPYTHON", None)
    env.update(LD_LIBRARY_PATH=str(fakecuda), FAKECUDA_LOG=str(tmp_path / "log"), FAKECUDA_BUFPARAM="4")
    r = subprocess.run([str(fakecuda / "app"), str(VEC_PTX), "saxpy4", "1"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "app done" in r.stdout
    assert "no shared libpython" in r.stderr
    assert (tmp_path / "log").read_text().splitlines()[0] == "saxpy4 probed=0 grid=4"


@pytest.mark.parametrize("launch_ex", [False, True], ids=["cuLaunchKernel", "cuLaunchKernelEx"])
def test_fast_path_probes_later_launches_in_c(tmp_path, fakecuda, shim, monkeypatch, launch_ex):
    """After the first launch (Python), the shim probes the kernel itself: every launch written, in order."""
    if launch_ex:
        monkeypatch.setenv("FAKEAPP_EX", "1")
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "40"])
    assert rc == 0 and log == ["saxpy4 probed=1 grid=4"] * 40
    t = nt.load(tmp_path / "trace")
    assert [e["kernel"] for e in t.events if e["event"] == "fast_path"] == ["saxpy4"]
    assert [la.index for la in t.launches] == list(range(40))
    assert [la.event["kernel_launch"] for la in t.launches] == list(range(40))
    assert t.launches[0].frame is not None and all(la.frame is None for la in t.launches[1:])  # C path: no frame
    for la in t.launches:
        v = la.maps["block_sched"].valid()
        assert len(v) == 8 and list(v["unit"]) == list(range(8)) and set(v["elapse"]) == {7}
        assert la.grid == (4, 1, 1) and la.block == (64, 1, 1)
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["launches"] == 40 and ex["dropped"] == 0


@pytest.mark.parametrize("every", [None, 1, 3])
def test_fast_path_times_every_nth_launch(tmp_path, fakecuda, shim, every):
    """The C path records the start event (the kernel's own time) on every N-th of its launches only."""
    extra = () if every is None else ("--time-every", str(every))
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "20"],
                              *extra)
    assert rc == 0 and len(log) == 20
    t = nt.load(tmp_path / "trace")
    n = every or 8
    timed = [la.duration_ns is not None for la in t.launches]
    # launch 0 goes through Python (always timed); the C path numbers its own launches from 0
    assert timed == [True] + [i % n == 0 for i in range(19)]
    assert all(d == pytest.approx(4000.0) for d in (la.duration_ns for la in t.launches) if d is not None)


def test_fast_path_untimed_launches_end_on_untimed_events(tmp_path, fakecuda, shim, monkeypatch):
    """A C-path launch that --time-every leaves untimed records no start event and ends on an event made
    with CU_EVENT_DISABLE_TIMING (the GPU writes no timestamp for it); a timed one keeps two timing events.
    The fake refuses elapsed times on untimed events, as CUDA does: every timed launch still has its time."""
    monkeypatch.setenv("FAKECUDA_LOG_STREAM_OPS", "1")
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "20"],
                              "--time-every", "4")
    assert rc == 0
    timing = {line.split("event=")[1] for line in log if line.startswith("create-timed ")}
    untimed = {line.split("event=")[1] for line in log if line.startswith("create-untimed ")}
    records = [line.split("event=")[1] for line in log if line.startswith("record ")]
    launches = [i for i, line in enumerate(log) if line.startswith("saxpy4 ")]
    assert len(launches) == 20
    # after each C-path launch (1..19) the next record is its end event: timed on launches 1, 5, 9, 13, 17
    ends = [next(line.split("event=")[1] for line in log[i + 1:] if line.startswith("record ")) for i in launches[1:]]
    assert [e in timing for e in ends] == [k % 4 == 0 for k in range(19)]
    assert all(e in untimed for k, e in enumerate(ends) if k % 4)
    # timing events recorded: the Python path's first launch (2) and a start and an end per timed launch
    assert sum(r in timing for r in records) == 2 + 2 * 5
    t = nt.load(tmp_path / "trace")
    assert [la.duration_ns is not None for la in t.launches] == [True] + [k % 4 == 0 for k in range(19)]


def test_fast_path_trace_budget_drops_counted(tmp_path, fakecuda, shim):
    frame = 512  # one saxpy4 block_sched frame (header + 8 records), checked below
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "10"],
                              "--trace-budget", str(4 * frame))
    assert rc == 0 and len(log) == 10
    assert [line.split()[1] for line in log] == ["probed=1"] * 4 + ["probed=0"] * 6  # the rest ran unprobed
    t = nt.load(tmp_path / "trace")
    assert len(t.launches) == 4 and all(la.event.get("result_offset") % 64 == 0 for la in t.launches)
    assert {la.event["result_offset"] for la in t.launches} == {0, frame, 2 * frame, 3 * frame}
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["launches"] == 4 and ex["dropped"] == 6 and ex["result_bytes"] == 4 * frame


def test_fast_path_buffer_budget_drops_counted_none_lost(tmp_path, fakecuda, shim):
    """A buffer budget of two slots: launches the pool has no room for run unprobed and are
    counted; every other launch is written; the program's launches all happen."""
    n = 300
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", str(n)],
                              "--buffer-budget", "8K")
    assert rc == 0 and len(log) == n
    probed = sum(line.split()[1] == "probed=1" for line in log)
    t = nt.load(tmp_path / "trace")
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert len(t.launches) == probed == ex["launches"] and ex["dropped"] == n - probed
    for la in t.launches:
        assert list(la.maps["block_sched"].valid()["unit"]) == list(range(8))


@pytest.mark.parametrize("budget", [None, "16K"])
def test_fast_path_many_threads_lose_nothing_uncounted(tmp_path, fakecuda, shim, monkeypatch, budget):
    """Eight threads launching at once through the C path: every launch is either written,
    complete, or counted as dropped; the program's launches all happen."""
    monkeypatch.setenv("FAKEAPP_THREADS", "8")
    extra = ("--buffer-budget", budget) if budget else ()
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "100"],
                            *extra)
    assert rc == 0 and len(log) == 1 + 8 * 100
    t = nt.load(tmp_path / "trace")
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["launches"] == len(t.launches) == sum(" probed=1 " in f" {ln} " for ln in log)
    assert ex["launches"] + ex["dropped"] == 1 + 8 * 100
    assert budget or ex["dropped"] == 0
    assert sorted(la.index for la in t.launches) == list(range(len(t.launches)))
    for la in t.launches:
        v = la.maps["block_sched"].valid()
        assert list(v["unit"]) == list(range(8)) and set(v["elapse"]) == {7}


def test_fast_path_buffers_come_back_zeroed(tmp_path, fakecuda, shim, monkeypatch):
    """Pooled buffers are reused: counts a launch does not write must read 0, not the previous launch's."""
    monkeypatch.setenv("FAKECUDA_ALTERNATE", "1")
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "8"])
    assert rc == 0 and len(log) == 8
    t = nt.load(tmp_path / "trace")
    assert [len(la.maps["block_sched"].valid()) for la in t.launches] == [8, 4] * 4
    assert all(int(la.maps["block_sched"].counts[4:].sum()) == 0 for la in t.launches[1::2])


def test_fast_path_ring_grows_with_launches_in_flight(tmp_path, fakecuda, shim, monkeypatch):
    """Launches larger than the first device ring: it is retired and replaced by a larger one while
    earlier launches are still queued; every launch is written whole, in order, none dropped."""
    monkeypatch.setenv("FAKEAPP_GRIDS", "4,3000,4,30000")  # 30000 blocks: a 15 MiB region (ring starts at 8 MiB)
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "12"])
    assert rc == 0 and len(log) == 12
    t = nt.load(tmp_path / "trace")
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["launches"] == 12 and ex["dropped"] == 0
    for la, g in zip(t.launches, [4, 3000, 4, 30000] * 3):
        v = la.maps["block_sched"].valid()
        assert la.grid == (g, 1, 1) and list(v["unit"]) == list(range(2 * g)) and set(v["elapse"]) == {7}


def test_fast_path_when_full_wait_drops_nothing(tmp_path, fakecuda, shim):
    """--when-full=wait: a buffer budget of one launch makes launches wait for the writer, not drop."""
    n = 200
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", str(n)],
                              "--buffer-budget", "8K", "--when-full", "wait")
    assert rc == 0 and log == ["saxpy4 probed=1 grid=4"] * n
    t = nt.load(tmp_path / "trace")
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["launches"] == len(t.launches) == n and ex["dropped"] == 0
    assert [la.index for la in t.launches] == list(range(n))


def test_fast_path_writer_makes_few_driver_calls_per_launch(tmp_path, fakecuda, shim, monkeypatch, capfd):
    """The writer copies back and zeroes a batch of consecutive ring regions with one call each and
    asks the driver once per batch: well under one driver call per launch (it made four per launch
    before the ring, which made the program's own driver calls wait on a GPU host)."""
    monkeypatch.setenv("NEUTRINO_FAST_PROFILE", "1")
    n = 400
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", str(n)])
    assert rc == 0 and len(log) == n
    m = re.search(r"writer, (\d+) jobs in (\d+) batches, ([\d.]+) driver calls per job", capfd.readouterr().err)
    assert m, "NEUTRINO_FAST_PROFILE printed no writer line"
    jobs, batches, calls = int(m[1]), int(m[2]), float(m[3])
    assert jobs == n  # the first launch, taken by Python, is written by the same writer
    assert batches <= jobs // 4 and calls < 1.0, (batches, calls)
    t = nt.load(tmp_path / "trace")
    assert [la.index for la in t.launches] == list(range(n))


@pytest.mark.parametrize("measure", [None, "zero-by-copy"])
def test_fast_path_ring_regions_come_back_zeroed_after_laps(tmp_path, fakecuda, shim, monkeypatch, measure):
    """A ring of 19 regions (a 4864-byte budget, 256-byte regions) laps many times: a region used
    again by a launch that saves less reads zero where it saved nothing (fake memory starts 0xAB).
    NEUTRINO_MEASURE=zero-by-copy (a benchmark's switch: zeroes by copying pinned zeros) zeroes as well."""
    monkeypatch.setenv("FAKECUDA_ALTERNATE", "1")
    if measure:
        monkeypatch.setenv("NEUTRINO_MEASURE", measure)
    n = 40
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", str(n)],
                              "--buffer-budget", "4864", "--when-full", "wait")
    assert rc == 0 and log == ["saxpy4 probed=1 grid=4"] * n
    t = nt.load(tmp_path / "trace")
    assert [len(la.maps["block_sched"].valid()) for la in t.launches] == [8, 4] * (n // 2)
    assert all(int(la.maps["block_sched"].counts[4:].sum()) == 0 for la in t.launches[1::2])


def test_fast_path_other_streams_wait_for_a_new_rings_memset(tmp_path, fakecuda, shim, monkeypatch):
    """A new ring is zeroed on its first launch's stream; until one of its jobs is written, launches
    on another stream wait for that memset's event first (no kernel races with it). Kernels are
    slow here (events complete 300 ms after their record), so the window stays open."""
    monkeypatch.setenv("FAKEAPP_STREAMS", "2")
    monkeypatch.setenv("FAKECUDA_LOG_WAITS", "1")
    monkeypatch.setenv("FAKECUDA_EVENT_DELAY_MS", "300")
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"])
    assert rc == 0
    launches = [i for i, line in enumerate(log) if line.startswith("saxpy4 ")]
    assert len(launches) == 6 and all(log[i] == "saxpy4 probed=1 grid=4" for i in launches)
    # launch 0 (NULL stream) is Python's; launch 1 (the second stream) makes the ring and zeroes it;
    # launches 2 and 4 (NULL stream) wait first; launches 3 and 5 (the ring's stream) do not
    waited = [k for k, i in enumerate(launches) if i > 0 and log[i - 1].startswith("wait ")]
    assert waited == [2, 4]
    events = {log[launches[k] - 1].split("event=")[1] for k in waited}
    assert len(events) == 1  # the ring's one zeroing event
    t = nt.load(tmp_path / "trace")
    assert [la.index for la in t.launches] == list(range(6))
    assert all(list(la.maps["block_sched"].valid()["unit"]) == list(range(8)) for la in t.launches)


@pytest.mark.parametrize("tries, per_unit", [(3, 4), (3, 2)], ids=["fits", "full"])
def test_fast_path_count_sized_ring(tmp_path, fakecuda, shim, monkeypatch, tries, per_unit):
    """A count-sized map takes the C path (no counting kernel). The first launch (Python) has
    --ring-records slots per unit; its head, read back once, sizes the plan's rings (a quarter more
    than needed per unit: neutrino.maps.learned_slots_per_unit), which the C path computes per
    launch as neutrino.maps.ring_slots does and passes as the cap; the writer hands each ring back
    zeroed, so every launch's head starts at 0. A ring that fits reads back exactly; a full one keeps
    the first `cap` reservations and counts the rest as dropped. The writer writes only the slots
    a launch used."""
    monkeypatch.setenv("FAKECUDA_RING", str(tries))
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "6"],
                              "--ring-records", str(per_unit), probe_text=test_runtime_core.COUNT_PROBE)
    assert rc == 0 and log == ["saxpy4 probed=1 grid=4"] * 6
    t = nt.load(tmp_path / "trace")
    assert [e["kernel"] for e in t.events if e["event"] == "fast_path"] == ["saxpy4"]
    units = 4 * 64
    first = nt.ring_slots(units, 8, per_unit, 1 << 28)
    later = nt.ring_slots(units, 8, nt.learned_slots_per_unit(tries * units, units), 1 << 28)
    for la, cap in zip(t.launches, [first] + [later] * 5):
        m = la.maps["mem"]
        lost = max(tries * units - cap, 0)
        assert m.dropped == lost and len(m.valid()) == min(cap, tries * units)
        v = m.valid()
        for u in (0, 1, units - 1):
            got = list(v["addr"][v["unit"] == u])
            assert got == [1000 * u + j for j in range(len(got))]
        if not lost:
            assert list(m.counts) == [tries] * units
    # trim_rings (writer.c): a frame holds a ring of min(head, cap) slots, not the whole device ring
    (result,) = (tmp_path / "trace").glob("*/result/*.ntr")
    used = tries * units
    frames = [nt.align(256 + nt.ring_bytes(min(used, cap), 8), 64) for cap in [first] + [later] * 5]
    assert result.stat().st_size <= sum(frames) < 6 * nt.align(256 + nt.ring_bytes(later, 8), 64)
