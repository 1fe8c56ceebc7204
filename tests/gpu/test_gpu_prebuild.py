"""Probed code built off the launch path (runtime/instrument/prebuild.py) on the GPU: the driver's JIT on a
build thread, the launch waiting for it (default) or running the original kernel (original)."""

from __future__ import annotations

import sys

import pytest

from gpuutil import WORKLOADS, base_env, check_block_sched, fallbacks, gpu, run_plain, run_probed, same_files, sm_count

pytestmark = gpu


@pytest.mark.parametrize("extra", [("--build-threads", "4"), (), ("--build-threads", "4", "--while-building", "original")],
                         ids=["threads", "default-at-first-launch", "original"])
def test_cupy_kernel_built_in_background(tmp_path, extra):
    pytest.importorskip("cupy")
    env = base_env(tmp_path)
    cmd = [sys.executable, str(WORKLOADS / "w_cupy.py")]
    run_plain(cmd + [str(tmp_path / "plain.npy")], env)
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npy")], tmp_path / "t", env, *extra)
    same_files(tmp_path / "plain.npy", tmp_path / "probed.npy")  # results unchanged in every mode
    inst = [e for e in trace.events if e.get("event") == "instrument"]
    building = [e for e in fallbacks(trace) if e["stage"] == "building"]
    print(f"{extra or 'default'}: instrument events {inst}, building fallbacks {building}")
    if "original" in extra and building:  # the one launch came before its code
        assert not trace.launches and len(building) == 1 and "original kernel ran" in building[0]["reason"]
        return
    assert not fallbacks(trace)
    assert [la.kernel for la in trace.launches] == ["saxpy4"]
    check_block_sched(trace, sm_count())
    assert ("built_in_background" in inst[0]) == ("--build-threads" in extra)
