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
