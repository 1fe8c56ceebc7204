"""Probe cost (issue 24 item 4): the occupancy formula, the runtime's `probe_cost` event against the
fake driver, and the report's "probe cost" section on synthetic events with known answers."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from neutrino import occupancy as occ
from neutrino.analysis import probe_cost as cost_report
from neutrino.analysis import report
from neutrino.analysis.tables import format_table, short
from neutrino.runtime.instrument import probe_cost
from test_report_columns import spec_columns
from test_runtime_core import events, finish, load_saxpy, make_runtime, req

H100 = occ.DeviceLimits()  # the sm_90 limits an H100 reports (fakedriver.H100_SM_LIMITS)


# ---------------------------------------------------------------- the formula
@pytest.mark.parametrize("threads, regs, static, dynamic, blocks, limiter", [
    (256, 32, 0, 0, 8, "warps"),  # 8 warps a block: 64 slots / 8; the registers allow 8 too (tie: warps first)
    (256, 64, 0, 0, 4, "registers"),  # 2048 registers a warp: 8 warps per sub-partition, 32 per SM
    (128, 37, 0, 0, 12, "registers"),  # 37 x 32 = 1184 rounds up to 1280: 12 warps per sub-partition
    (128, 40, 0, 0, 12, "registers"),  # the same allocation as 37
    (256, 16, 49152, 0, 4, "shared"),  # 49152 + 1024 reserved = 50176 bytes: 233472 // 50176
    (128, 0, 0, 100, 16, "warps"),  # 1124 bytes round up to 1152: 202 blocks by shared memory
    (96, 32, 0, 0, 21, "warps"),  # 3 warps a block: 64 // 3, the last slot unused
    (32, 16, 0, 0, 32, "blocks"),  # one warp a block: the hardware's 32 blocks per SM
    (1024, 255, 0, 0, 0, "registers"),  # 8192 registers a warp x 32 warps: more than a block may have
])
def test_occupancy_known_answers(threads, regs, static, dynamic, blocks, limiter):
    got = occ.occupancy(threads, regs, static, dynamic, H100, max_threads=1024)
    warps = blocks * -(-threads // 32)
    assert (got.blocks, got.limiter, got.warps) == (blocks, limiter, warps)
    assert got.fraction == pytest.approx(warps / 64)


def test_a_block_larger_than_the_function_allows_fits_zero_times():
    """A probed kernel with more registers may run smaller blocks only (MAX_THREADS_PER_BLOCK)."""
    got = occ.occupancy(1024, 32, 0, 0, H100, max_threads=512)
    assert (got.blocks, got.limiter, got.fraction) == (0, "warps", 0.0)
    assert occ.occupancy(1024, 32, 0, 0, H100, max_threads=0).blocks == 2  # 0: the limit is unknown


ORACLE = r'''
#include <cstdio>
#include <cuda_occupancy.h>
// stdin: "threads regs static dynamic" per line; stdout: "blocks limitingFactors" for an sm_90 device.
int main() {
    cudaOccDeviceProp p;
    p.computeMajor = 9; p.computeMinor = 0; p.maxThreadsPerBlock = 1024; p.maxThreadsPerMultiprocessor = 2048;
    p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536; p.warpSize = 32; p.sharedMemPerBlock = 49152;
    p.sharedMemPerMultiprocessor = 233472; p.numSms = 132; p.sharedMemPerBlockOptin = 232448;
    p.reservedSharedMemPerBlock = 1024;
    int t, r, s, d;
    while (scanf("%d %d %d %d", &t, &r, &s, &d) == 4) {
        cudaOccFuncAttributes a;
        a.maxThreadsPerBlock = 1024; a.numRegs = r; a.sharedSizeBytes = s;
        a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN; a.maxDynamicSharedSizeBytes = 232448 - s;
        cudaOccDeviceState st;  // default carveout, as the runtime's formula assumes
        cudaOccResult res;
        if (cudaOccMaxActiveBlocksPerMultiprocessor(&res, &p, &a, &st, t, d) != CUDA_OCC_SUCCESS) return 1;
        printf("%d %u\n", res.activeBlocksPerMultiprocessor, res.limitingFactors);
    }
    return 0;
}
'''
HEADER = Path("/usr/local/cuda/include/cuda_occupancy.h")
LIMIT_BITS = {"warps": 1, "registers": 2, "shared": 4, "blocks": 8}


@pytest.mark.skipif(not HEADER.exists() or shutil.which("g++") is None, reason="needs g++ and cuda_occupancy.h")
def test_the_formula_agrees_with_the_cuda_occupancy_header(tmp_path):
    """NVIDIA's header-only occupancy calculator as the oracle, over 2,080 launch shapes and resources."""
    src, exe = tmp_path / "occ.cpp", tmp_path / "occ"
    src.write_text(ORACLE)
    subprocess.run(["g++", "-O1", f"-I{HEADER.parent}", "-o", str(exe), str(src)], check=True, timeout=300)
    cases = list(itertools.product([32, 64, 96, 128, 192, 256, 384, 512, 640, 1024],
                                   [0, 16, 24, 32, 37, 40, 48, 64, 72, 96, 128, 168, 255],
                                   [0, 1000, 16384, 49152], [0, 100, 8192, 65536]))
    stdin = "".join(f"{t} {r} {s} {d}\n" for t, r, s, d in cases)
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True, timeout=120).stdout
    answers = [tuple(map(int, line.split())) for line in out.splitlines()]
    assert len(answers) == len(cases)
    for (t, r, s, d), (blocks, factors) in zip(cases, answers):
        got = occ.occupancy(t, r, s, d, H100, max_threads=1024)
        assert got.blocks == blocks, (t, r, s, d)
        assert factors & LIMIT_BITS[got.limiter], (t, r, s, d, got.limiter, factors)


def test_device_limits_come_from_the_device_attributes():
    from fakedriver import H100_SM_LIMITS

    assert occ.from_device(H100_SM_LIMITS.__getitem__, 9) == H100
    assert occ.from_device(H100_SM_LIMITS.__getitem__, 7).shared_unit == 256


# ---------------------------------------------------------------- the runtime's event
def set_resources(drv, *, original=(32, 0, 0), probed=(40, 0, 16), func=0x200):
    """NUM_REGS, SHARED_SIZE_BYTES and LOCAL_SIZE_BYTES of the program's function and of ours."""
    regs, shared, local = original
    drv.attrs.update({(func, 4): regs, (func, 1): shared, (func, 3): local, (func, 0): 1024, (func, 2): 8})
    regs, shared, local = probed
    drv.resources[("saxpy4", True)] = {4: regs, 1: shared, 3: local, 0: 1024, 2: 8}


def test_one_probe_cost_event_per_kernel_with_the_drivers_occupancy(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    set_resources(drv)
    drv.occupancy[(0x200, 256, 0)] = 8
    drv.occupancy[(("saxpy4", True), 256, 0)] = 6
    assert load_saxpy(rt)
    for i in range(3):
        r, keep = req(block=(128, 2, 1), index=i)
        assert rt.on_launch(r) == 0
    finish(rt)
    (ev,) = events(rt, "probe_cost")
    assert (ev["kernel"], ev["threads"], ev["block"], ev["dynamic_shared"]) == ("saxpy4", 256, [128, 2, 1], 0)
    orig, probed = ev["original"], ev["probed"]
    assert (orig["regs"], probed["regs"], probed["local"], probed["const"]) == (32, 40, 16, 8)
    assert (orig["blocks_per_sm"], probed["blocks_per_sm"]) == (8, 6)
    assert (orig["occupancy"], probed["occupancy"]) == (1.0, 0.75)  # 6 blocks x 8 warps / 64
    assert probed["occupancy_from"] == "driver" and probed["limiter"] == "registers"
    assert (orig["formula_blocks"], probed["formula_blocks"]) == (8, 6)  # 40 x 32 = 1280 a warp: 12 per sub-partition
    insns = ev["instructions"]
    assert insns["inserted"] == insns["probed"] - insns["original"] > 0 and insns["sites"] == 2
    assert insns["per_site"] == pytest.approx(insns["inserted"] / 2)


def test_without_the_drivers_answer_the_formula_gives_occupancy(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    set_resources(drv, original=(32, 0, 0), probed=(72, 4096, 0))
    assert load_saxpy(rt)
    r, keep = req(block=(256, 1, 1))
    assert rt.on_launch(r) == 0
    finish(rt)
    (ev,) = events(rt, "probe_cost")
    probed = ev["probed"]
    # 72 x 32 = 2304 a warp: 7 warps per sub-partition, 28 per SM: 3 blocks of 8 warps
    assert (probed["blocks_per_sm"], probed["occupancy_from"], probed["limiter"]) == (3, "formula", "registers")
    assert probed["occupancy"] == pytest.approx(24 / 64) and probed["shared_static"] == 4096


def test_a_failing_query_is_the_events_error_and_the_launch_is_still_probed(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    assert load_saxpy(rt)

    def refuse(func, attr):
        raise probe_cost.DriverError("cuFuncGetAttribute", 1, "CUDA_ERROR_INVALID_VALUE")

    drv.func_get_attribute = refuse
    r, keep = req()
    assert rt.on_launch(r) == 0
    finish(rt)
    (ev,) = events(rt, "probe_cost")
    assert "CUDA_ERROR_INVALID_VALUE" in ev["error"] and "probed" not in ev
    assert rt.probed_launches == 1 and not events(rt, "fallback")


def test_a_cukernel_handle_is_asked_through_its_function(tmp_path):
    """nvcc 12+ programs launch CUkernel handles, which cuFuncGetAttribute refuses (seen on an H200:
    CUDA_ERROR_INVALID_HANDLE for every kernel of an nvcc program): the event asks for the
    handle's function in the context (cuKernelGetFunction) instead."""
    rt, drv, _ = make_runtime(tmp_path)
    set_resources(drv, original=(30, 2048, 0), func=0x250)
    assert load_saxpy(rt)
    asked = drv.func_get_attribute

    def refuse_kernels(func, attr):
        if func == 0x200:
            raise probe_cost.DriverError("cuFuncGetAttribute", 400, "CUDA_ERROR_INVALID_HANDLE")
        return asked(func, attr)

    drv.func_get_attribute = refuse_kernels
    drv.kernel_get_function = lambda kernel: 0x250 if kernel == 0x200 else kernel
    r, keep = req()
    assert rt.on_launch(r) == 0
    finish(rt)
    (ev,) = events(rt, "probe_cost")
    assert "error" not in ev, ev
    assert (ev["original"]["regs"], ev["original"]["shared_static"]) == (30, 2048)


def test_the_engine_counts_the_instructions_of_the_probed_entry():
    import neutrino.engine as engine
    from neutrino.isa.ptx import ir, parse_module
    from neutrino.probefile import parse_probes
    from test_runtime_core import BLOCK_SCHED, VEC_PTX

    out = engine.instrument(VEC_PTX, parse_probes(BLOCK_SCHED, "probe.toml"), kernel="saxpy4")
    counts = out.kernels["saxpy4"]["instructions"]
    assert counts["original"] == len(ir.instructions(parse_module(VEC_PTX).function("saxpy4").body))
    assert counts["probed"] == len(ir.instructions(parse_module(out.ptx).function("saxpy4").body))
    assert counts["probed"] > counts["original"]


# ---------------------------------------------------------------- the report section
def cost_event(kernel, **over):
    side = {"regs": 32, "shared_static": 0, "local": 0, "const": 0, "max_threads": 1024, "blocks_per_sm": 8,
            "warps_per_sm": 64, "occupancy": 1.0, "formula_blocks": 8, "limiter": "warps", "occupancy_from": "driver"}
    probed = {**side, "regs": 40, "local": 16, "blocks_per_sm": 6, "warps_per_sm": 48, "occupancy": 0.75,
              "formula_blocks": 6, "limiter": "registers"}
    ev = {"event": "probe_cost", "kernel": kernel, "block": [256, 1, 1], "threads": 256, "dynamic_shared": 0,
          "instructions": {"original": 24, "probed": 95, "inserted": 71, "sites": 2, "per_site": 35.5},
          "original": side, "probed": probed}
    ev.update(over)
    return ev


def bench_event(kernel, base, probed):
    return {"event": "benchmark", "kernel": kernel, "kernel_launch": 0, "baseline_ns": base, "probed_ns": probed}


def test_the_report_section_shows_what_probing_added():
    evs = [cost_event("k"), bench_event("k", [100.0, 300.0], [150.0, 450.0]), bench_event("k", [200.0], [300.0]),
           cost_event("old", instructions={}), {"event": "launch", "kernel": "k"}]
    lines, warnings = cost_report.section(evs, format_table, short)
    text = "\n".join(lines)
    assert "[probe cost]" in text and not warnings
    row_k = next(line for line in lines[2].splitlines() if line.startswith("k "))
    for cell in ("256", "32 -> 40", "8 -> 6", "100% -> 75%", "registers", "0 -> 0", "0 -> 16",
                 "24 -> 95 (+71)", "35.5", "1.50x"):  # medians 300 / 200 over both benchmarked launches
        assert cell in row_k, cell
    row_old = next(line for line in lines[2].splitlines() if line.startswith("old "))
    assert row_old.split()[-3:] == ["-", "-", "-"]  # no instruction counts, no benchmark


def test_without_benchmark_the_section_says_how_to_measure_the_slowdown():
    lines, _ = cost_report.section([cost_event("k")], format_table, short)
    assert lines[-1] == "slowdown: run with --benchmark to measure it"
    assert cost_report.section([{"event": "launch"}], format_table, short) == ([], [])


def test_an_events_error_is_a_warning_and_a_row_of_dashes():
    lines, warnings = cost_report.section([{"event": "probe_cost", "kernel": "k", "threads": 64,
                                            "error": "DriverError: no"}], format_table, short)
    assert warnings == ["probe cost of k: DriverError: no"]
    assert lines[2].splitlines()[-1].split() == ["k", "64"] + ["-"] * 9


def test_report_text_and_json_carry_the_section():
    from test_analysis import block_sched_map, make_launch

    launches = [make_launch(0, "k", [block_sched_map()], duration_ns=160.0)]
    trace = SimpleNamespace(path="", probe_text="", launches=launches,
                            events=[cost_event("k"), bench_event("k", [100.0], [125.0])])
    rep = report.analyze(trace, launches)
    assert "[probe cost]" in report.render(rep)
    (row,) = json.loads(report.render_json(rep))["kernels"]
    assert (row["probe_cost.regs_original"], row["probe_cost.regs_probed"]) == (32, 40)
    assert (row["probe_cost.blocks_probed"], row["probe_cost.occupancy_probed"]) == (6, 0.75)
    assert (row["probe_cost.instructions_inserted"], row["probe_cost.slowdown"]) == (71, 1.25)


def test_every_probe_cost_column_is_defined_in_the_spec():
    cols, keys = spec_columns()["probe cost"]
    assert set(cost_report.HEADERS) <= cols
    (row,) = cost_report.numbers([cost_event("k")])
    assert set(row) - {"kernel", "error"} <= keys, set(row) - keys


def test_report_of_a_benchmarked_run_written_by_the_runtime(tmp_path, capsys):
    """End to end on the fake driver: `neutrino report` of the run directory shows the section, with the
    slowdown of the fake's constant event times (5 us baseline and probed: 1.00x)."""
    rt, drv, _ = make_runtime(tmp_path, benchmark=True)
    set_resources(drv)
    assert load_saxpy(rt)
    r, keep = req(block=(256, 1, 1))
    assert rt.on_launch(r) == 0
    finish(rt)
    assert report.main(str(rt.trace.path), plots=False) == 0
    out = capsys.readouterr().out
    row = out[out.index("[probe cost]"):].splitlines()[3]
    assert row.split()[:2] == ["saxpy4", "256"] and "32 -> 40" in row and row.endswith("1.00x")
