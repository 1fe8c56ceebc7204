"""Issue 27 on the GPU: the `lines` tools count exactly and rank the expensive line first.

* loop.ptx (tests/data/lines): per-line executed instructions are known by construction
  (4, 2 x trips, 4 x trips and 2 instructions per thread on its four lines): `lines` and
  `lines_light` must give exactly those;
* a Triton kernel and an nvcc -lineinfo kernel with one deliberately expensive line
  (marked EXPENSIVE in tests/gpu/workloads/w_lines.py): it is first by executed
  instructions and by time.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuutil import WORKLOADS, base_env, gpu, run_probed

pytestmark = gpu

W_LINES = WORKLOADS / "w_lines.py"


def kernel_lines(trace, kernel_part: str):
    from neutrino.tools.lines import analysis as la
    from neutrino.analysis import report

    rep = report.analyze(trace, list(trace.launches))
    names = [k for k in rep.kernels if kernel_part in k]
    assert names, f"no probed kernel named like {kernel_part}: {list(rep.kernels)}"
    k = la.combine(rep.kernels[names[0]].results["lines"])
    assert k is not None, f"{names[0]}: no lines result ({rep.warnings})"
    return k


def expensive_line(mode: str) -> int:
    """The marked line's number in its source: w_lines.py (Triton) or the .cu it writes (CUDA)."""
    sys.path.insert(0, str(WORKLOADS))
    import w_lines

    src = (w_lines.CUDA_SOURCE if mode == "cuda" else W_LINES.read_text()).splitlines()
    marker = "// EXPENSIVE" if mode == "cuda" else "# EXPENSIVE"
    return [i + 1 for i, line in enumerate(src) if marker in line][0]


@pytest.mark.parametrize("tool", ["lines", "lines_light", "lines_blocktime"])
def test_loop_counts_are_exact(tool, tmp_path):
    sys.path.insert(0, str(WORKLOADS))
    import w_lines

    env = base_env(tmp_path)
    _, trace = run_probed(tool, [sys.executable, str(W_LINES), "loop"], tmp_path / "t", env)
    k = kernel_lines(trace, "loopk")
    threads, trips = w_lines.LOOP_GRID * w_lines.LOOP_BLOCK, w_lines.LOOP_TRIPS
    by_line = {info.line: int(n) for info, n in zip(k.table.lines, k.instructions)}
    print(f"loopk {tool}: {by_line}")
    assert by_line == {10: 4 * threads, 12: 2 * trips * threads, 13: 4 * trips * threads, 15: 2 * threads}
    if tool != "lines_light":
        assert k.ticks is not None and int(k.ticks.sum()) > 0
        assert k.time_by_block == (tool == "lines_blocktime")
        if k.total_ticks is not None and not k.overflow:
            assert int(k.ticks.sum()) + (k.probe_ticks or 0) == k.total_ticks  # entry to exit: lines + probes, exact
            assert k.probe_ticks is not None  # the probes' own time, kept apart (spec/tools.md "lines")
        top = max(range(len(k.table.lines)), key=lambda i: k.ticks[i + 1])
        print(f"loopk time by line: {[(i.line, int(t)) for i, t in zip(k.table.lines, k.ticks[1:])]}")
        assert k.table.lines[top].line in (12, 13)  # the loop's lines


@pytest.mark.parametrize("tool", ["lines", "lines_light"])
def test_nested_loops_with_a_guarded_exit_are_exact(tool, tmp_path):
    """nested.ptx: per-thread trip counts (divergent warps) and a guarded exit inside the outer loop; the
    loop blocks are counted in registers (passes/register_counters.py) and flushed at both exits."""
    sys.path.insert(0, str(WORKLOADS))
    import w_lines

    _, trace = run_probed(tool, [sys.executable, str(W_LINES), "nested"], tmp_path / "t", base_env(tmp_path))
    k = kernel_lines(trace, "nestk")
    want = {20: 0, 22: 0, 24: 0, 26: 0, 27: 0, 29: 0}
    for t in range(w_lines.NESTED_BLOCK):
        outer, inner, early = w_lines.nested_trips(t)
        for line, n in ((20, 7), (22, 3 * outer), (24, 4 * outer * inner), (26, 4 * outer),
                        (27, 2 * (outer - early)), (29, 2 * (not early))):
            want[line] += w_lines.NESTED_GRID * n
    by_line = {info.line: int(n) for info, n in zip(k.table.lines, k.instructions)}
    print(f"nestk {tool}: {by_line}")
    assert by_line == want


def test_threads_past_the_staging_limit_stay_exact(tmp_path):
    """200,000 trips. The loop's block is counted in a register (passes/register_counters.py): each thread
    flushes 200,000 at the exit, 6.4 M per warp (more than THREAD_STAGED_LIMIT, 2^22, which bounds the
    per-site staged adds that the other blocks still make): the counts stay exact. With `lines`, whose
    maps are staged (lines_light adds into global rows)."""
    sys.path.insert(0, str(WORKLOADS))
    import w_lines
    from neutrino.passes.shared_agg import THREAD_STAGED_LIMIT

    trips = 200_000
    assert trips * 32 > THREAD_STAGED_LIMIT
    env = dict(base_env(tmp_path), W_LINES_TRIPS=str(trips))
    _, trace = run_probed("lines", [sys.executable, str(W_LINES), "loop"], tmp_path / "t", env)
    k = kernel_lines(trace, "loopk")
    threads = w_lines.LOOP_GRID * w_lines.LOOP_BLOCK
    by_line = {info.line: int(n) for info, n in zip(k.table.lines, k.instructions)}
    print(f"loopk, {trips} trips: {by_line}")
    assert by_line == {10: 4 * threads, 12: 2 * trips * threads, 13: 4 * trips * threads, 15: 2 * threads}


@pytest.mark.parametrize("mode", ["triton", "cuda"])
def test_expensive_line_is_ranked_first(mode, tmp_path):
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    _, trace = run_probed("lines", [sys.executable, str(W_LINES), mode], tmp_path / "t", env)
    k = kernel_lines(trace, "expensive_line")
    labels = [info.label for info in k.table.lines]
    ours = [i for i, info in enumerate(k.table.lines) if info.line == expensive_line(mode) and
            (info.file or "").endswith(("w_lines.py", "expensive_line.cu"))]
    inlined = [i for i, info in enumerate(k.table.lines) if info.inlined_at and info.inlined_at.endswith(f":{expensive_line(mode)}")]
    print(f"{mode}: lines {labels}")
    print(f"{mode}: instructions {[int(v) for v in k.instructions]}; ticks {[int(v) for v in k.ticks]}")
    # the expensive line, or what the compiler inlined into it (sinf/cosf/expf), is first
    line_rows = set(ours) | set(inlined)
    assert line_rows, f"line {expensive_line(mode)} not in the line map: {labels}"
    first_instr = max(range(len(labels)), key=lambda i: k.instructions[i])
    first_time = max(range(len(labels)), key=lambda i: k.ticks[i + 1])
    assert first_instr in line_rows, f"first by instructions: {labels[first_instr]}"
    assert first_time in line_rows, f"first by time: {labels[first_time]}"
    from neutrino.tools.lines import sass

    if sass.find_nvdisasm() is not None:  # SASS thread-instructions per line (spec/tools.md "lines")
        assert k.table.sass is not None, k.table.sass_note
        counts, exact = k.sass_instructions()
        print(f"{mode}: SASS instructions {[int(v) for v in counts]}; exact {[bool(e) for e in exact]}; "
              f"{k.table.sass.matched_blocks} of {k.table.sass.sass_blocks} SASS blocks matched")
        assert max(range(len(labels)), key=lambda i: counts[i]) in line_rows
    rep = subprocess.run([sys.executable, "-m", "neutrino.cli", "report", str(trace.path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    print(rep.stdout[-3000:])
    assert "[lines: " in rep.stdout and ("tl.sin(acc)" in rep.stdout or "sinf(acc)" in rep.stdout)  # its source text


@pytest.mark.parametrize("tool", ["lines", "lines_light"])
def test_called_funcs_are_counted_exactly(tool, tmp_path):
    """call.ptx: the loop calls mix (counted whole) and clampv (its first block) once per trip."""
    sys.path.insert(0, str(WORKLOADS))
    import w_lines

    env = base_env(tmp_path)
    _, trace = run_probed(tool, [sys.executable, str(W_LINES), "call"], tmp_path / "t", env)
    k = kernel_lines(trace, "callk")
    threads, n = w_lines.LOOP_GRID * w_lines.LOOP_BLOCK, w_lines.LOOP_TRIPS
    by_line = {info.line: int(v) for info, v in zip(k.table.lines, k.instructions)}
    print(f"callk {tool}: {by_line}")
    assert by_line == {10: 4 * threads, 12: 7 * n * threads, 13: 3 * n * threads, 15: 2 * threads,
                       3: 3 * n * threads, 4: 3 * n * threads, 6: n * threads, 7: 2 * n * threads}
    assert k.table.partial_calls == ("clampv",)
    if tool == "lines":
        assert k.total_ticks is not None and int(k.ticks.sum()) + k.probe_ticks == k.total_ticks  # the total is exact
