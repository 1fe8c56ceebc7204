"""The runtime's hook logic and failure policy, run against a fake driver (no GPU)."""

from __future__ import annotations

import ctypes as C
import gc
import io
import json
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
from attrs import evolve as attrs_evolve

import neutrino.trace as nt
from neutrino.errors import InstrumentError
from neutrino.probefile import parse_probes
from neutrino.runtime.instrument.codecache import CodeCache
from neutrino.runtime.core import NOT_HANDLED, LaunchRequest, Runtime, _SimplePtx
from neutrino.runtime.driver import LAUNCH_KERNEL, LAUNCH_KERNEL_PTSZ
from neutrino.runtime.launch_path.enqueue import BENCH_REPEATS
from neutrino.runtime.start.options import RuntimeOptions
from neutrino.runtime.start.tracedir import TraceDir

from fakedriver import FakeDriver, FakeShim, param_u64, probe_buffer

CORPUS = Path(__file__).parent / "data" / "corpus" / "nvcc"
VEC_PTX = (CORPUS / "vec.sm90.ptx").read_text()

BLOCK_SCHED = '''
[block_sched]
position = "kernel"
datamodel = "warp:16"
before = """.reg .b64 %lstart; mov.u64 %lstart, %clock64;"""
after = """.reg .b64 %lend; .reg .b64 %elapsed; .reg .b32 %elapse;
mov.u64 %lend, %clock64; sub.u64 %elapsed, %lend, %lstart; cvt.u32.u64 %elapse, %elapsed;
SAVE.u64 {%lstart}; SAVE.u32 {%elapse, %smid};"""
'''


def find_ptx(image, arch, *, path=None):
    text = image.decode(errors="replace") if isinstance(image, bytes) else image
    return _SimplePtx(text, "test") if ".version" in text else None


def fake_block_sched(drv, req, params, name):
    """What the probed saxpy4 writes: one record per warp (nothing when its probe is gated off)."""
    buf = probe_buffer(params, 4)
    if buf is None:
        return
    units = nt.units_for("warp", req.grid, req.block)
    counts = (C.c_uint32 * units).from_address(buf)
    rec_base = buf + nt.align(4 * units, 16)
    for u in range(units):
        counts[u] = 1
        C.c_uint64.from_address(rec_base + 16 * u).value = 1000 + u
        C.c_uint32.from_address(rec_base + 16 * u + 8).value = 5
        C.c_uint32.from_address(rec_base + 16 * u + 12).value = u % 132


class CountingEngine:
    def __init__(self, fail=None):
        import neutrino.engine as engine

        self.engine, self.calls, self.fail = engine, 0, fail

    def instrument(self, *a, **k):
        self.calls += 1
        if self.fail:
            raise self.fail
        return self.engine.instrument(*a, **k)

    def prune(self, *a, **k):
        return self.engine.prune(*a, **k)


def make_runtime(tmp_path, *, engine=None, cache_root=None, probe=BLOCK_SCHED, **opts):
    drv, shim = FakeDriver(), FakeShim()
    drv.kernel_impl["saxpy4"] = fake_block_sched
    probes = parse_probes(probe, "probe.toml")
    options = RuntimeOptions(probe="probe.toml", tracedir=str(tmp_path / "trace"), **opts)
    trace = TraceDir.create(tmp_path / "trace")
    rt = Runtime(drv, shim, options, probes, trace=trace, cache=CodeCache(cache_root),
                 engine=engine or CountingEngine(), ptx_finder=find_ptx)
    return rt, drv, shim


def original_params(n=4):
    vals = [C.c_uint64(0xDEAD0000 + i) for i in range(n)]
    arr = (C.c_void_p * n)(*[C.addressof(v) for v in vals])
    arr._keep = vals
    return arr


def load_saxpy(rt, module=0x100, func=0x200):
    rt.on_module("cuModuleLoadData", module, VEC_PTX.encode())
    return rt.on_function("module_function", module, "saxpy4", func)


def req(func=0x200, grid=(4, 1, 1), block=(64, 1, 1), params=None, kind=LAUNCH_KERNEL, index=0):
    params = params if params is not None else original_params()
    r = LaunchRequest(kind, func, grid, block, 0, 0x5, C.addressof(params), index=index)
    return r, params


def finish(rt):
    err = io.StringIO()
    rt.finish(err)
    return err.getvalue()


def events(rt, kind=None):
    evs = nt.read_events(rt.trace.path / "event.log")
    return [e for e in evs if kind is None or e["event"] == kind]


def test_probed_launch_writes_trace(tmp_path):
    rt, drv, shim = make_runtime(tmp_path)
    seen = []

    def kernel(drv, req, params, name):
        seen.append([param_u64(params, i) for i in range(5)])
        fake_block_sched(drv, req, params, name)

    drv.kernel_impl["saxpy4"] = kernel
    assert load_saxpy(rt)
    r, keep = req()
    assert rt.on_launch(r) == 0
    # the probed function got the original 4 params + the buffer
    kind, func, grid, block, params = drv.launches[-1]
    assert drv.functions[func][1] == "saxpy4" and func != 0x200
    assert seen[0][:4] == [0xDEAD0000 + i for i in range(4)] and seen[0][4] > 0
    out = finish(rt)
    assert "1 probed launch" in out
    t = nt.load(rt.trace.path)
    (la,) = t.launches
    assert la.kernel == "saxpy4" and la.grid == (4, 1, 1) and la.block == (64, 1, 1)
    assert la.frame and "test_runtime_core.py" in la.frame and "test_probed_launch_writes_trace" in la.frame
    assert la.duration_ns == pytest.approx(5000)
    v = la.maps["block_sched"].valid()
    assert len(v) == 8 and list(v["lstart"]) == list(range(1000, 1008)) and set(v["elapse"]) == {5}
    inst = events(rt, "instrument")[0]
    assert inst["cache"] == "miss"
    kdir = rt.trace.path / inst["kernel_dir"]
    assert (kdir / "original.ptx").read_text() == VEC_PTX
    assert "block_sched" in (kdir / "probed.ptx").read_text()
    assert json.loads((kdir / "kernel.json").read_text())["kernels"]["saxpy4"]["original_params"] == 4
    assert len(drv.mem) == 0  # the pool's device and pinned buffers are freed at exit
    assert drv.syncs == 0  # no synchronisation for a fixed-cap map
    assert la.result_path.name.endswith(".ntr") and la.result_offset == 0


def test_buffers_pooled_and_one_result_file_per_kernel(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    for i in range(5):
        r, keep = req(index=i)
        assert rt.on_launch(r) == 0
        rt.drain()
    allocs = [c for c in drv.calls if c == "mem_alloc"]
    assert len(allocs) == 1 and drv.host_allocs == 1  # device and pinned buffers come back to the pool
    finish(rt)
    assert len(drv.mem) == 0  # freed at exit
    launches = nt.load(rt.trace.path).launches
    assert [la.index for la in launches] == [0, 1, 2, 3, 4]
    assert len({la.result_path for la in launches}) == 1  # frames appended to one file per kernel
    assert len(sorted({la.result_offset for la in launches})) == 5
    assert [len(la.maps["block_sched"].valid()) for la in launches] == [8] * 5
    assert list((rt.trace.path / "result").iterdir()) == [launches[0].result_path]


def test_module_without_ptx(tmp_path):
    rt, drv, shim = make_runtime(tmp_path)
    rt.on_module("cuLibraryLoadData", 0x300, b"\x7fELF....\0.text.at_kernel\0.nv.info.at_kernel\0.text.other\0")
    assert rt.on_function("library_kernel", 0x300, "at_kernel", 0x301) is False
    finish(rt)
    (ev,) = events(rt, "no_ptx")
    assert ev["kind"] == "cuLibraryLoadData"
    assert ev["kernels"] == ["at_kernel", "other"]  # which kernels run unprobed


def test_kernel_filter(tmp_path):
    rt, _, _ = make_runtime(tmp_path, kernels="hscale", exclude="")
    assert not load_saxpy(rt)
    rt, _, _ = make_runtime(tmp_path, kernels="sax:foo", exclude="4")
    assert not load_saxpy(rt)
    rt, _, _ = make_runtime(tmp_path, kernels="sax")
    assert load_saxpy(rt)


def test_library_kernel_and_function_share_a_record(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    rt.on_module("cuLibraryLoadData", 0x400, VEC_PTX.encode())
    assert rt.on_function("library_kernel", 0x400, "saxpy4", 0x401)  # CUkernel
    assert rt.on_function("kernel_function", 0x401, None, 0x402)  # its CUfunction
    rt.on_function("library_module", 0x400, None, 0x403)
    assert rt.on_function("module_function", 0x403, "saxpy4", 0x404)
    for f in (0x401, 0x402, 0x404):
        r, keep = req(func=f)
        assert rt.on_launch(r) == 0
    finish(rt)
    assert len(events(rt, "instrument")) == 1  # one kernel, instrumented once
    assert len(nt.load(rt.trace.path).launches) == 3


def test_instrument_failure_is_permanent_fallback(tmp_path):
    eng = CountingEngine(fail=InstrumentError("entry saxpy4 uses something unsupported"))
    rt, drv, shim = make_runtime(tmp_path, engine=eng)
    load_saxpy(rt)
    r, keep = req()
    assert rt.on_launch(r) == NOT_HANDLED
    assert 0x200 in shim.removed  # later launches take the shim's fast path
    assert rt.on_launch(r) == NOT_HANDLED and eng.calls == 1
    assert not drv.launches
    out = finish(rt)
    (fb,) = events(rt, "fallback")
    assert fb["stage"] == "instrument" and "unsupported" in fb["reason"] and fb["permanent"]
    assert "1 launch(es) ran unprobed" in out and "instrument" in out


@pytest.mark.parametrize("method,stage", [("mem_alloc", "alloc"), ("module_load_data", "jit")])
def test_driver_failures_fall_back(tmp_path, method, stage):
    rt, drv, shim = make_runtime(tmp_path)
    load_saxpy(rt)
    drv.fail[method] = "CUDA_ERROR_OUT_OF_MEMORY"
    r, keep = req()
    assert rt.on_launch(r) == NOT_HANDLED
    assert not drv.launches
    finish(rt)
    (fb,) = events(rt, "fallback")
    assert fb["stage"] == stage and "CUDA_ERROR_OUT_OF_MEMORY" in fb["reason"]
    assert len(drv.mem) == 0  # nothing allocated, or freed again


def test_alloc_failure_is_transient(tmp_path):
    rt, drv, shim = make_runtime(tmp_path)
    load_saxpy(rt)
    drv.fail["mem_alloc"] = "CUDA_ERROR_OUT_OF_MEMORY"
    r, keep = req()
    assert rt.on_launch(r) == NOT_HANDLED
    assert not shim.removed
    del drv.fail["mem_alloc"]
    assert rt.on_launch(r) == 0
    finish(rt)
    assert len(nt.load(rt.trace.path).launches) == 1


def test_failed_probed_launch_frees_and_falls_back(tmp_path):
    rt, drv, shim = make_runtime(tmp_path)
    load_saxpy(rt)
    drv.launch_rc = 701
    r, keep = req()
    assert rt.on_launch(r) == NOT_HANDLED
    finish(rt)
    (fb,) = events(rt, "fallback")
    assert "LAUNCH_OUT_OF_RESOURCES" in fb["reason"]
    assert len(drv.mem) == 0  # the device buffer was freed, no pinned buffer taken


def test_copy_back_failure_after_launch_does_not_rerun(tmp_path):
    rt, drv, shim = make_runtime(tmp_path)
    load_saxpy(rt)
    drv.fail["memcpy_dtoh_async"] = "CUDA_ERROR_UNKNOWN"
    r, keep = req()
    assert rt.on_launch(r) == 0  # the probed kernel ran: the original must not run again
    finish(rt)
    assert events(rt, "result_error")


def test_extra_params_refused(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    r = LaunchRequest(LAUNCH_KERNEL, 0x200, (1, 1, 1), (32, 1, 1), 0, 0, 0, extra=0x1234)
    assert rt.on_launch(r) == NOT_HANDLED
    finish(rt)
    assert "extra" in events(rt, "fallback")[0]["reason"]


def test_ptsz_default_stream():
    r = LaunchRequest(LAUNCH_KERNEL_PTSZ, 1, (1, 1, 1), (1, 1, 1), 0, 0, 0)
    assert r.our_stream == 2
    assert LaunchRequest(LAUNCH_KERNEL, 1, (1, 1, 1), (1, 1, 1), 0, 0, 0).our_stream == 1
    assert LaunchRequest(LAUNCH_KERNEL, 1, (1, 1, 1), (1, 1, 1), 0, 77, 0).our_stream == 77


def test_internal_error_falls_back(tmp_path, monkeypatch):
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    monkeypatch.setattr(rt.enqueuer, "launch", lambda *a, **k: 1 / 0)
    r, keep = req()
    assert rt.on_launch(r) == NOT_HANDLED
    finish(rt)
    assert "ZeroDivisionError" in events(rt, "fallback")[0]["reason"]


def test_disk_cache_second_run(tmp_path):
    cache = tmp_path / "cache"
    rt, drv, _ = make_runtime(tmp_path / "a", cache_root=cache)
    load_saxpy(rt)
    r, keep = req()
    rt.on_launch(r)
    finish(rt)
    assert drv.links == 1
    eng = CountingEngine()
    rt2, drv2, _ = make_runtime(tmp_path / "b", cache_root=cache, engine=eng)
    load_saxpy(rt2)
    assert rt2.on_launch(r) == 0
    finish(rt2)
    assert eng.calls == 0 and drv2.links == 0  # neither instrumentation nor JIT
    assert events(rt2, "instrument")[0]["cache"] == "disk"
    # a different probe is a different key
    rt3, _, _ = make_runtime(tmp_path / "c", cache_root=cache, engine=eng, probe=BLOCK_SCHED.replace("%smid", "%nsmid"))
    load_saxpy(rt3)
    rt3.on_launch(r)
    finish(rt3)
    assert eng.calls == 1


def test_attributes_copied(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    drv.attrs[(0x200, 8)] = 100_000  # MAX_DYNAMIC_SHARED_SIZE_BYTES set by the program
    r, keep = req()
    rt.on_launch(r)
    probed = drv.launches[-1][1]
    assert drv.attrs[(probed, 8)] == 100_000
    drv.attrs[(0x200, 8)] = 120_000  # raised later: carried when a launch needs more than was copied
    calls = len(drv.calls)
    rt.on_launch(r)
    assert drv.attrs[(probed, 8)] == 100_000
    r2 = attrs_evolve(r, shared_bytes=110_000)
    rt.on_launch(r2)
    assert drv.attrs[(probed, 8)] == 120_000
    finish(rt)


def test_threads_lose_nothing(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    n_threads, per = 8, 25
    errors = []

    def work(t):
        for i in range(per):
            r, keep = req(grid=(t + 1, 1, 1), index=i)
            if rt.on_launch(r) != 0:
                errors.append((t, i))

    ths = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    finish(rt)
    assert not errors
    la = nt.load(rt.trace.path).launches
    assert sorted(x.index for x in la) == list(range(n_threads * per))
    for x in la:
        assert len(x.maps["block_sched"].valid()) == 2 * x.grid[0]
    assert len(events(rt, "instrument")) == 1


def test_callback_failure_not_fatal(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    seen = []

    def cb(path, event):
        seen.append(path)
        if len(seen) == 2:
            raise ValueError("analysis bug")

    rt.set_callback(cb)
    load_saxpy(rt)
    for i in range(3):
        r, keep = req(index=i)
        assert rt.on_launch(r) == 0
    finish(rt)
    assert len(seen) == 3 and all(Path(p).exists() for p in seen)
    (ev,) = events(rt, "callback_error")
    assert "analysis bug" in ev["reason"]


def test_memusage_runs_nothing_probed(tmp_path):
    rt, drv, _ = make_runtime(tmp_path, memusage=True)
    load_saxpy(rt)
    r, keep = req(grid=(10, 1, 1), block=(128, 1, 1))
    assert rt.on_launch(r) == NOT_HANDLED
    assert not drv.launches
    out = finish(rt)
    (ev,) = events(rt, "memusage")
    assert ev["bytes"] == nt.buffer_bytes(40, 1, 16)
    assert "memusage" in out and str(nt.buffer_bytes(40, 1, 16)) in (rt.trace.path / "memusage.txt").read_text()


def test_benchmark_table(tmp_path):
    rt, drv, _ = make_runtime(tmp_path, benchmark=True)
    load_saxpy(rt)
    r, keep = req()
    assert rt.on_launch(r) == 0
    funcs = [f for _, f, *_ in drv.launches]
    assert {drv.functions[f][1] for f in funcs} == {"saxpy4"}
    baseline, probed = funcs[0], funcs[-1]
    assert baseline != probed
    # one warm pair, then BENCH_REPEATS timed pairs interleaved, then the launch the program gets
    assert funcs == [baseline, probed] * (1 + BENCH_REPEATS) + [probed]
    out = finish(rt)
    assert "slowdown" in out and "saxpy4" in (rt.trace.path / "benchmark.txt").read_text()
    (ev,) = events(rt, "benchmark")
    assert ev["baseline_ns"] == [pytest.approx(5000)] * BENCH_REPEATS and len(ev["probed_ns"]) == BENCH_REPEATS


def test_benchmark_table_flags_speedups_beyond_noise():
    from neutrino.runtime.results.report import benchmark_table

    noisy = {"k": [([100.0, 60.0, 140.0], [90.0, 95.0, 92.0])]}  # 0.92x, but the baseline swings ±40%
    assert "!" not in benchmark_table(noisy)
    steady = {"k": [([100.0, 101.0, 99.0], [30.0, 30.5, 29.5])]}  # 0.30x with 2% noise: not believable
    table = benchmark_table(steady)
    assert "0.30x" in table and "measurement problem" in table


def test_linked_ptx_found_by_cubin_address(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    rt.on_link_add(0x77, VEC_PTX)
    rt.on_link_complete(0x77, 0xCAFE)
    rt.on_module("cuModuleLoadData", 0x500, b"\x7fELF not ptx", image_addr=0xCAFE)
    assert rt.on_function("module_function", 0x500, "saxpy4", 0x501)
    finish(rt)


def test_closed_runtime_passes_through(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    finish(rt)
    r, keep = req()
    assert rt.on_launch(r) == NOT_HANDLED


def test_module_globals_mirrored(tmp_path):
    """__constant__/__device__ variables live per module: ours gets the program's values, and
    writable ones are copied back after the launch."""
    rt, drv, _ = make_runtime(tmp_path)
    ptx = (CORPUS / "stencil.sm90.ptx").read_text()
    rt.on_module("cuModuleLoadData", 0x600, ptx.encode())
    assert rt.on_function("module_function", 0x600, "stencil3d", 0x601)
    orig, _ = drv.module_get_global(0x600, "coeff")
    (C.c_float * 4).from_address(orig)[:] = [0.5, 0.1, 0.1, 0.05]
    seen = []

    def kernel(drv_, req_, params, name):
        module = drv_.functions[drv_.launches[-1][1]][0]
        ours, _ = drv_.module_get_global(module, "coeff")
        seen.append(list((C.c_float * 4).from_address(ours)))

    drv.kernel_impl["stencil3d"] = kernel
    r, keep = req(func=0x601, params=original_params(5))
    assert rt.on_launch(r) == 0
    finish(rt)
    assert seen == [[0.5, pytest.approx(0.1), pytest.approx(0.1), pytest.approx(0.05)]]
    from neutrino.runtime.core import module_globals

    assert module_globals(ptx) == [("coeff", False)]
    src = ".global .u32 counter;\n.extern .global .u32 x;\n.entry k(){\n .global .u32 inner;\n}\n.global .b8 s[2] = {1, 2};\n"
    assert module_globals(src) == [("counter", True), ("s", False)]


COUNT_PROBE = '''
[map.mem]
level = "thread"
cap = "count"
fields = ["addr:u64"]

[probe.rec]
position = "ld.global"
level = "thread"
before = """SAVE [ mem ] {ADDR};"""
'''


def without_ring_layout(monkeypatch):
    """kernel.json as code built before the device ring wrote it: count-sized maps without `layout`."""
    from neutrino.probe_model import MapSpec

    to_json = MapSpec.to_json
    monkeypatch.setattr(MapSpec, "to_json", lambda self: {k: v for k, v in to_json(self).items() if k != "layout"})


def ring_kernel(tries, launched=None):
    """A fake probed kernel writing a count-sized map's ring as the device does (passes/ring.py):
    unit u tries `tries(u, grid)` records 1000 * u + j, the units' reservations interleaved (round
    by round), each a slot from the head; a slot past `cap` is not written, only counted in the head."""
    def probed(drv_, req_, params, name):
        from fakedriver import param_u32

        units = nt.units_for("thread", req_.grid, req_.block)
        buf, cap = param_u64(params, 4), param_u32(params, 5)
        head = C.c_uint64.from_address(buf)
        tags = (C.c_uint32 * cap).from_address(buf + nt.RING_HEADER)
        recs = (C.c_uint64 * cap).from_address(buf + nt.ring_records_offset(cap))
        want = [tries(u, req_.grid) for u in range(units)]
        for j in range(max(want, default=0)):
            for u in range(units):
                if j < want[u]:
                    slot = head.value
                    head.value += 1
                    if slot < cap:
                        tags[slot], recs[slot] = u, 1000 * u + j
        if launched is not None:
            launched.append(cap)
    return probed


def test_count_sized_map_writes_a_ring_without_counting(tmp_path):
    """cap = "count": no counting launch; the kernel reserves slots in the launch's ring. The first
    launch's ring has --ring-records slots per unit and its head is read back (the one
    synchronisation): the next launches' rings have a quarter more than it needed per unit, and no
    synchronisation. Records that fit read back exactly, each unit's in the order it wrote them."""
    rt, drv, _ = make_runtime(tmp_path, probe=COUNT_PROBE)
    grid, block = (2, 1, 1), (32, 1, 1)
    units = nt.units_for("thread", grid, block)
    caps = []
    drv.kernel_impl["saxpy4"] = ring_kernel(lambda u, g: u % 3, caps)
    load_saxpy(rt)
    keep = []
    for _ in range(3):
        r, params = req(grid=grid, block=block)
        keep.append(params)
        assert rt.on_launch(r) == 0
    finish(rt)
    names = [drv.functions[f][1] for _, f, *_ in drv.launches]
    assert names == ["saxpy4"] * 3 and drv.syncs == 1
    need = sum(u % 3 for u in range(units))
    assert caps == [nt.RING_RECORDS_PER_UNIT * units] + [nt.learned_slots_per_unit(need, units) * units] * 2
    (sizing,) = events(rt, "ring_sizing")
    assert sizing["slots_per_unit"] == {"mem": nt.learned_slots_per_unit(need, units)}
    for la in nt.load(rt.trace.path).launches:
        m = la.maps["mem"]
        assert m.cap_is_count and m.dropped == 0 and m.cap == 2
        assert list(m.counts) == [u % 3 for u in range(units)]
        v = m.valid()
        assert len(v) == need
        assert list(v["addr"][:3]) == [1000, 2000, 2001] and list(v["unit"][:3]) == [1, 2, 2]
    assert [e["dropped"] for e in events(rt, "launch")] == [{"mem": 0}] * 3


def test_full_ring_counts_the_loss_and_never_waits(tmp_path):
    """A launch trying more records than its ring holds writes the first `cap` reservations, drops
    the rest and counts them (head - cap), without waiting or retrying; each unit keeps a prefix of
    its records. Its head still says what it needed: the next launch's ring holds everything."""
    rt, drv, _ = make_runtime(tmp_path, probe=COUNT_PROBE, ring_records=1)
    grid, block = (2, 1, 1), (32, 1, 1)
    units = nt.units_for("thread", grid, block)
    drv.kernel_impl["saxpy4"] = ring_kernel(lambda u, g: 3 if u < 40 else 0)
    load_saxpy(rt)
    keep = []
    for _ in range(2):
        r, params = req(grid=grid, block=block)
        keep.append(params)
        assert rt.on_launch(r) == 0
    finish(rt)
    first, second = (la.maps["mem"] for la in nt.load(rt.trace.path).launches)
    assert first.dropped == 3 * 40 - units and first.record_stats() == (units, 3 * 40 - units)
    v = first.valid()
    assert len(v) == units  # slots are taken round by round: units 0..39 get 2 records, the rest of round 2 is lost
    for u in range(40):
        got = list(v["addr"][v["unit"] == u])
        assert got == [1000 * u + j for j in range(len(got))]  # a prefix, in order
    assert second.dropped == 0 and len(second.valid()) == 3 * 40
    assert [e["dropped"] for e in events(rt, "launch")] == [{"mem": 3 * 40 - units}, {"mem": 0}]


def test_ring_is_bounded_by_the_buffer_budget(tmp_path):
    """A ring takes at most a quarter of the buffer budget, however many units the launch has."""
    budget = 64 << 10
    rt, drv, _ = make_runtime(tmp_path, probe=COUNT_PROBE, buffer_budget=budget)
    caps = []
    drv.kernel_impl["saxpy4"] = ring_kernel(lambda u, g: 1, caps)
    load_saxpy(rt)
    r, keep = req(grid=(64, 1, 1), block=(256, 1, 1))
    assert rt.on_launch(r) == 0
    finish(rt)
    assert caps == [nt.ring_slot_limit(8, budget // nt.RING_BUDGET_SHARE)]
    assert nt.ring_bytes(caps[0], 8) <= budget // nt.RING_BUDGET_SHARE
    m = nt.load(rt.trace.path).launches[0].maps["mem"]
    assert m.dropped == 64 * 256 - caps[0] and len(m.valid()) == caps[0]


def test_ring_sizing_waits_for_a_launch_with_records(tmp_path):
    """A first launch that saved nothing says nothing about the need: the heads of the next
    launches are read back, up to RING_LEARN_LAUNCHES of them, until one saved records."""
    rt, drv, _ = make_runtime(tmp_path, probe=COUNT_PROBE)
    grid, block = (2, 1, 1), (32, 1, 1)
    units = nt.units_for("thread", grid, block)
    caps, calls = [], {"n": 0}

    def tries(u, g):
        return 0 if calls["n"] < 2 * units else 2

    probed = ring_kernel(tries, caps)

    def kernel(drv_, req_, params, name):
        probed(drv_, req_, params, name)
        calls["n"] += units
    drv.kernel_impl["saxpy4"] = kernel
    load_saxpy(rt)
    keep = []
    for _ in range(4):
        r, params = req(grid=grid, block=block)
        keep.append(params)
        assert rt.on_launch(r) == 0
    finish(rt)
    assert drv.syncs == 3  # launches 0 and 1 saved nothing; launch 2 did
    first = nt.RING_RECORDS_PER_UNIT * units
    assert caps == [first] * 3 + [nt.learned_slots_per_unit(2 * units, units) * units]


def test_code_built_before_the_ring_still_counts(tmp_path, monkeypatch):
    """kernel.json without `layout: "ring"` (probed code from before the device ring, from the code
    cache): the counting kernel sizes its launches as before, --recount-every N of them; a reused
    cap that is too small keeps cap records per unit and counts the rest as dropped."""
    without_ring_layout(monkeypatch)
    rt, drv, _ = make_runtime(tmp_path, probe=COUNT_PROBE, recount_every=3)
    block = (32, 1, 1)
    extra = {"n": 0}  # records per thread beyond the counted u % 3 (the kernel's data changed)

    def count_kernel(drv_, req_, params, name):
        units = nt.units_for("thread", req_.grid, req_.block)
        counts = (C.c_uint32 * units).from_address(param_u64(params, 4))
        for u in range(units):
            counts[u] = u % 3 + extra["n"]

    def probed(drv_, req_, params, name):
        from fakedriver import param_u32

        units = nt.units_for("thread", req_.grid, req_.block)
        buf, cap = param_u64(params, 4), param_u32(params, 5)
        counts = (C.c_uint32 * units).from_address(buf)
        recs = (C.c_uint64 * (units * cap)).from_address(buf + nt.align(4 * units, 16))
        for u in range(units):
            counts[u] = u % 3 + extra["n"]  # the cursor counts every record tried
            for j in range(min(counts[u], cap)):
                recs[u * cap + j] = 1000 * u + j

    drv.kernel_impl["saxpy4__nt_count"] = count_kernel
    drv.kernel_impl["saxpy4"] = probed
    load_saxpy(rt)
    keep = []
    for i, grid in enumerate([(2, 1, 1)] * 4 + [(3, 1, 1)]):
        extra["n"] = 1 if i == 1 else 0
        r, params = req(grid=grid, block=block)
        keep.append(params)
        assert rt.on_launch(r) == 0
    finish(rt)
    names = [drv.functions[f][1] for _, f, *_ in drv.launches]
    assert names == ["saxpy4__nt_count", "saxpy4", "saxpy4", "saxpy4", "saxpy4__nt_count", "saxpy4",
                     "saxpy4__nt_count", "saxpy4"]
    assert drv.syncs == 3
    maps = [la.maps["mem"] for la in nt.load(rt.trace.path).launches]
    assert [m.cap for m in maps] == [2, 2, 2, 2, 2]
    units = nt.units_for("thread", (2, 1, 1), block)
    # launch 1 tried u % 3 + 1 records per thread with room for 2: the threads with u % 3 == 2 lose one
    assert [m.dropped for m in maps] == [0, sum(1 for u in range(units) if u % 3 == 2), 0, 0, 0]
    assert len(maps[1].valid()) == sum(min(u % 3 + 1, 2) for u in range(units))


def test_compile_failure_loads_the_ptx_instead(tmp_path):
    """Without a ptxas, or one that refuses the PTX (vprintf and other driver builtins stay
    unresolved there): the probed PTX goes to the driver's JIT, and the launch is probed."""
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    drv.fail["compile_ptx"] = "CUDA_ERROR_INVALID_PTX"
    r, keep = req()
    assert rt.on_launch(r) == 0
    finish(rt)
    assert not events(rt, "fallback")
    probed_module = drv.functions[drv.launches[-1][1]][0]
    assert drv.modules[probed_module].startswith(b"//") or b".entry" in drv.modules[probed_module]


MEM_COUNT = '''
[loads]
position = "ld.global"
datamodel = "thread:16:count"
before = "SAVE.u64 {ADDR, ADDR};"
'''


@pytest.mark.parametrize("ring", [True, False])
def test_count_sized_maps_with_device_only_buffers(tmp_path, monkeypatch, ring):
    """With the native writer the pool's buffers have no pinned memory: the first launch's ring
    heads, and the counting kernel's counts of code from before the ring (no `layout` in
    kernel.json), come back through a staging buffer of the enqueuer's, after one sync."""
    if not ring:
        without_ring_layout(monkeypatch)
    rt, drv, _ = make_runtime(tmp_path, probe=MEM_COUNT)
    rt.pool.host = False
    rt.enqueuer.copy_back = False
    load_saxpy(rt)
    r, keep = req()
    assert rt.on_launch(r) == 0
    assert not events(rt, "fallback")
    assert drv.syncs == 1  # the ring heads' or the counting kernel's one synchronisation
    rt.writer.submit = lambda flight: rt.pool.release(flight.slots)  # no host copies to write here
    finish(rt)


@pytest.mark.parametrize("fail", [None, "compile_ptx", "module_load_data", "module_get_function", "launch"])
def test_a_launch_leaves_no_cycle_holding_the_programs_frames(tmp_path, fail):
    """Whatever the launch path does (build, a refused compile, a fallback), nothing of ours may keep
    the launching frames alive after the launch: a cycle through an exception's traceback would hold
    every caller's locals (the program's tensors) until a cycle collection. PyTorch's CUDA-graph trees
    check that freed outputs left their memory pool, and failed under block_sched when the ptxas
    refusal was kept as an exception object (H200, torch.compile reduce-overhead training loop)."""
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    if fail:
        drv.fail[fail] = "CUDA_ERROR_INVALID_PTX"

    class Tensor:
        pass

    def program_frame():
        tensor = Tensor()
        r, keep = req()
        rt.on_launch(r)
        return weakref.ref(tensor)

    gc.collect()
    gc.disable()  # a cycle would be found only by the collector: keep it from running
    try:
        held = program_frame()
        assert held() is None, "the program's local outlived its frame (a reference cycle through it)"
    finally:
        gc.enable()
        finish(rt)
