"""Kernels that call device functions and printf are probed, not fallen back (issue 10, on the GPU)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from gpuutil import WORKLOADS, base_env, check_block_sched, fallbacks, gpu, run_plain, run_probed, sm_count

pytestmark = gpu


def test_nvcc_program_with_device_function_and_printf(tmp_path):
    exe = tmp_path / "calls_printf"
    subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=compute_90", "-o", str(exe),
                    str(WORKLOADS / "calls_printf.cu")], check=True)
    env = base_env(tmp_path)
    plain = run_plain([str(exe), str(tmp_path / "plain.bin")], env)
    for tool in ("block_sched", "gmem_bytes"):
        r, trace = run_probed(tool, [str(exe), str(tmp_path / f"{tool}.bin")], tmp_path / tool, env)
        print(f"[calls_printf {tool}] {len(trace.launches)} launches, fallbacks {fallbacks(trace)}")
        assert not fallbacks(trace), fallbacks(trace)
        assert {la.kernel for la in trace.launches} == {"_Z12calls_printfPKfS0_Pfi"}
        assert len(trace.launches) == 3
        assert (tmp_path / f"{tool}.bin").read_bytes() == (tmp_path / "plain.bin").read_bytes()
        assert r.stdout.count("calls_printf: n=65536") == plain.stdout.count("calls_printf: n=65536") == 3
        if tool == "block_sched":
            check_block_sched(trace, sm_count())
        else:  # two 4-byte loads and one 4-byte store per thread; thread 0 reads out[0] for printf
            totals = [la.maps["gmem_bytes"].totals()["bytes"] for la in trace.launches]
            assert totals == [12 * (1 << 16) + 4] * 3


def test_cupy_module_with_device_function_and_printf(tmp_path):
    pytest.importorskip("cupy")
    env = base_env(tmp_path)
    cmd = [sys.executable, str(WORKLOADS / "w_cupy_calls.py")]
    run_plain(cmd + [str(tmp_path / "plain.npy")], env)
    r, trace = run_probed("block_sched", cmd + [str(tmp_path / "probed.npy")], tmp_path / "t", env)
    print(f"[cupy calls] {len(trace.launches)} launches, fallbacks {fallbacks(trace)}")
    assert not fallbacks(trace), fallbacks(trace)
    assert [la.kernel for la in trace.launches] == ["cupy_calls", "cupy_calls"]
    assert np.array_equal(np.load(tmp_path / "plain.npy"), np.load(tmp_path / "probed.npy"))
    assert r.stdout.count("cupy_calls n=32768") == 2
    check_block_sched(trace, sm_count())
