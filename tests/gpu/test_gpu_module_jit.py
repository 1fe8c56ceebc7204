"""The driver's JIT of the program's PTX loads on the GPU (issue 29): `module_jit` (spec/runtime.md).

CuPy compiles a RawKernel with NVRTC; the launcher's CUPY_COMPILE_WITH_PTX=1 makes it load PTX, which
the driver JIT-compiles inside cuModuleLoadData: that time is `module_jit`. With the user's
CUPY_COMPILE_WITH_PTX=0 CuPy loads cubins (no JIT: `module_driver` only). CUDA_CACHE_DISABLE=1 makes
every load JIT (the worst case a cold driver cache gives); the printed seconds are its cost.
Written without a GPU (the session's device time was spent): first run on the next device call.
"""

from __future__ import annotations

import sys

import pytest

from gpuutil import base_env, gpu, run_plain, run_probed

pytestmark = gpu

PROGRAM = '''
import cupy as cp
import numpy as np

twice = cp.RawKernel(r"""
extern "C" __global__ void twice_j29(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}""", "twice_j29")
x = cp.arange(1024, dtype=cp.float32)
twice((4,), (256,), (x, np.int32(1024)))
cp.cuda.runtime.deviceSynchronize()
print(float(x.sum()))
'''


@pytest.mark.parametrize("cupy_ptx", ["launcher", "user-0"])
def test_driver_jit_of_cupy_ptx_is_the_module_jit_phase(tmp_path, cupy_ptx):
    pytest.importorskip("cupy")
    env = base_env(tmp_path)
    env["CUPY_CACHE_DIR"] = str(tmp_path / "cupy-cache")  # NVRTC runs: no kernel cached from another run
    env["CUDA_CACHE_DISABLE"] = "1"
    if cupy_ptx == "user-0":
        env["CUPY_COMPILE_WITH_PTX"] = "0"
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    plain = run_plain([sys.executable, str(program)], env)
    r, trace = run_probed("block_sched", [sys.executable, str(program)], tmp_path / "t", env, "-k", "nomatchxyz")
    assert r.stdout.split()[-1] == plain.stdout.split()[-1]  # the same result, nothing probed
    phases = {e["phase"]: e for e in trace.events if e.get("event") == "phase"}
    print(f"{cupy_ptx}: module_jit {phases.get('module_jit')}, module_driver {phases.get('module_driver')}")
    if cupy_ptx == "launcher":
        assert phases["module_jit"]["count"] >= 1 and phases["module_jit"]["seconds"] > 0
    else:
        assert "module_jit" not in phases and phases["module_driver"]["count"] >= 1
