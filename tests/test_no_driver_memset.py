"""No driver memset in a profiled process (issue 24): the C fast path's fresh rings and the writer's reused regions
are zeroed by copies of pinned zeros (shim/writer.c, neutrino_zero_async), on the fake libcuda that logs every
driver call."""

from __future__ import annotations

import sys

import pytest

import neutrino.trace as nt

from test_graph_pick import fakecuda_calls  # noqa: F401 - fixture
from test_runtime_shim import FAKE, VEC_PTX, _run_under_fake, shim  # noqa: F401 - fixture


@pytest.mark.parametrize("measure", ["", "zero-by-memset"])
def test_no_driver_memset_in_the_profiled_process(tmp_path, fakecuda_calls, shim, monkeypatch, measure):
    """Issue 24: one cuMemsetD8Async in a process (the driver's own kernel) left a torch.compile decode graph's
    later replays 12% slower for the rest of the process (H200, benchmarks/memset_residual.py). Rings and the
    regions the writer copied back are zeroed by copies of pinned zeros instead: across fresh rings, a ring
    grown past the 4 MiB chunk and reused regions (alternating launches write half the records: the rest must
    read 0), no memset is called on any thread. NEUTRINO_MEASURE=zero-by-memset puts the memsets back."""
    monkeypatch.setenv("FAKECUDA_LOG_CALLS", str(tmp_path / "calls.log"))
    monkeypatch.setenv("FAKECUDA_ALTERNATE", "1")
    monkeypatch.setenv("FAKEAPP_GRIDS", "4,4,30000,4")  # 30000 blocks: a 15 MiB region (ring starts at 8 MiB)
    monkeypatch.setenv("NEUTRINO_MEASURE", measure)
    rc, log = _run_under_fake(tmp_path, fakecuda_calls, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4",
                                                         "16"])
    assert rc == 0 and len(log) == 16
    t = nt.load(tmp_path / "trace")
    grids = [4, 4, 30000, 4] * 4
    assert [la.grid[0] for la in t.launches] == grids
    for i, (la, g) in enumerate(zip(t.launches, grids)):
        units = len(la.maps["block_sched"].valid())
        assert units == (2 * g if i % 2 == 0 else g)  # (FAKECUDA_ALTERNATE: odd launches write half)
        assert int(la.maps["block_sched"].counts[units:].sum()) == 0
    calls = [line.split()[1] for line in (tmp_path / "calls.log").read_text().splitlines()
             if not line.startswith("==") and len(line.split()) > 1]
    if measure:
        assert "cuMemsetD8Async" in calls
    else:
        assert "cuMemsetD8Async" not in calls and "cuMemcpyHtoDAsync_v2" in calls


class _Calls:
    """A libcuda of ctypes callbacks for RealDriver that logs cuMemHostAlloc, cuMemcpyHtoDAsync_v2 and
    cuMemsetD8Async as (name, flags or destination, bytes)."""

    def __init__(self):
        import ctypes as C

        self.log = []
        self.fns = {"cuMemHostAlloc": C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_size_t, C.c_uint)(
                        lambda pp, size, flags: self.log.append(("alloc", flags, size)) or 0),
                    "cuMemcpyHtoDAsync_v2": C.CFUNCTYPE(C.c_int, C.c_uint64, C.c_void_p, C.c_size_t, C.c_void_p)(
                        lambda dst, src, n, stream: self.log.append(("copy", dst, n)) or 0),
                    "cuMemsetD8Async": C.CFUNCTYPE(C.c_int, C.c_uint64, C.c_ubyte, C.c_size_t, C.c_void_p)(
                        lambda dst, value, n, stream: self.log.append(("memset", dst, n)) or 0)}

    def driver(self):
        import ctypes as C

        from neutrino.runtime.driver import RealDriver

        return RealDriver(lambda name: C.cast(self.fns[name], C.c_void_p).value if name in self.fns else 0)


def test_a_driver_without_the_shims_function_zeroes_by_the_drivers_memset():
    """RealDriver.zero_async outside bootstrap (no shim: `zero_with` unset) has only the driver's memset."""
    calls = _Calls()
    drv = calls.driver()
    drv.zero_async(0x1000, 64, 0)
    assert calls.log == [("memset", 0x1000, 64)]


def test_python_path_uses_the_shims_zeroing_when_it_has_it():
    """Under the shim, RealDriver.zero_async calls neutrino_zero_async (one pinned chunk for the process): no chunk
    of its own, no memset; a failure is a DriverError."""
    from neutrino.runtime.driver import DriverError

    calls = _Calls()
    drv = calls.driver()
    got = []
    drv.zero_with = lambda ptr, size, stream: got.append((ptr, size, stream)) or 0
    drv.zero_async(0x1000, 10 << 20, 7)
    assert got == [(0x1000, 10 << 20, 7)] and calls.log == []
    drv.zero_with = lambda ptr, size, stream: 2
    with pytest.raises(DriverError, match="neutrino_zero_async"):
        drv.zero_async(0x1000, 64, 7)
