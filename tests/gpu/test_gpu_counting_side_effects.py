"""The counting variant of a cap = "count" tool repeats none of the program's side effects (issue 30, section 1).

workloads/counting_side_effects.cu: three launches of a kernel that calls a
`__noinline__` device function doing an atomicAdd on a global counter, a global
read-modify-write and printf (thread 0), and does a read-modify-write of its
own. Run plain and under dmat and program_progress (count-sized maps: once sized by a
counting launch before each real one, now written into a device ring): the counter and both arrays must be
bitwise identical to the plain run's, and printf's lines must appear exactly
as often, once per launch.
"""

from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest

from gpuutil import WORKLOADS, base_env, fallbacks, gpu, run_plain, run_probed

pytestmark = gpu

N = 1 << 16
LAUNCHES = 3
KERNEL = "_Z12side_effectsPjS_ii"  # side_effects(unsigned*, unsigned*, int, int)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    if not shutil.which("nvcc"):
        pytest.skip("no nvcc")
    exe = tmp_path_factory.mktemp("counting") / "counting_side_effects"
    subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=compute_90", "-o", str(exe),
                    str(WORKLOADS / "counting_side_effects.cu")], check=True)
    return exe


def read_result(path) -> tuple[int, np.ndarray, np.ndarray]:
    data = path.read_bytes()
    assert len(data) == 8 + 8 * N, f"{path}: {len(data)} bytes"
    (counter,) = struct.unpack_from("<Q", data)
    arrays = np.frombuffer(data, dtype="<u4", offset=8)
    return counter, arrays[:N], arrays[N:]


def printed_launches(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("record: launch ")]


def test_plain_run_is_what_the_program_says(program, tmp_path):
    """The reference: one atomicAdd per thread and launch, each printf once, `seen` = 3 everywhere."""
    plain = run_plain([str(program), str(tmp_path / "plain.bin")], base_env(tmp_path))
    counter, _, seen = read_result(tmp_path / "plain.bin")
    assert counter == LAUNCHES * N
    assert (seen == LAUNCHES).all()
    assert printed_launches(plain.stdout) == [f"record: launch {k}" for k in range(LAUNCHES)]
    assert f"counter={LAUNCHES * N}" in plain.stdout


@pytest.mark.parametrize("tool", ["dmat", "program_progress"])
def test_counting_tools_leave_results_and_output_unchanged(program, tmp_path, tool):
    env = base_env(tmp_path)
    plain = run_plain([str(program), str(tmp_path / "plain.bin")], env)
    r, trace = run_probed(tool, [str(program), str(tmp_path / f"{tool}.bin")], tmp_path / tool, env)
    print(f"[counting_side_effects {tool}] {len(trace.launches)} launches, fallbacks {fallbacks(trace)}")
    # Probed, not fallen back.
    assert not fallbacks(trace), fallbacks(trace)
    assert [la.kernel for la in trace.launches] == [KERNEL] * LAUNCHES
    assert all(tool in la.maps for la in trace.launches)
    # Bitwise the plain run's results: the counter, the callee's array and the kernel's own.
    assert (tmp_path / f"{tool}.bin").read_bytes() == (tmp_path / "plain.bin").read_bytes()
    counter, _, seen = read_result(tmp_path / f"{tool}.bin")
    assert counter == LAUNCHES * N and (seen == LAUNCHES).all()
    # printf: each launch's line exactly once, as in the plain run.
    assert printed_launches(r.stdout) == printed_launches(plain.stdout) == [f"record: launch {k}" for k in range(LAUNCHES)]
    if tool == "dmat":  # the kernel's own ld.global and st.global of `seen`, per thread, all kept
        for la in trace.launches:
            counts = np.asarray(la.maps["dmat"].counts)
            assert counts.size == N and (counts == 2).all(), np.unique(counts)
            assert len(la.maps["dmat"].valid()) == 2 * N  # every record fitted in the launch's ring
            assert la.maps["dmat"].dropped == 0
