"""Cost and honesty of the `lines` tools (issue 27): slowdown per kernel in full and light mode, and
agreement of the per-line figures with an unperturbed reference (Nsight Compute).

    python benchmarks/lines_cost.py [--modes loop,call,cuda,triton,matmul,attention] [--ncu cuda,matmul,attention]
                                    [--out DIR] [--reps 40] [--budget-s 150] [--rows R,R] [--dry-run]
                                    [--no-global] [--no-registers] [--no-match]

One process per run, no neutrino runtime: for each kernel of tests/gpu/workloads/w_lines.py it takes
the kernel's PTX (loop.ptx; nvcc -lineinfo; Triton's compiled PTX), builds five modules with the
engine (the pruned unprobed kernel, `lines_light`, `lines`, and each with the other map placement:
`lines@global`, unstaged, and `lines_light@staged`), loads
them with CuPy and launches them interleaved (rotating the order) with the same arguments, each launch
timed with CUDA events. Printed per kernel:

* `plain us`: median plain launch time (microseconds, CUDA events around one launch);
* `light x`, `full x`: median light / full launch time over median plain launch time;
* `map KB`: bytes of map buffers one launch of the full / light tool needs (maps.map_buffer_bytes);
* `exact`: both tools give the same per-line executed instructions (and, for `loop` and `call`, the
  ones known by construction: spec/tools.md "lines", spec/ir.md "Called functions");
* `same out`: the probed launches left the kernel's outputs bit for bit as the plain one did;
* `TOOL_total_ticks_exact`: the per-line ticks, the clamped samples' excess shared back
  (analysis.share_excess), and the probes' own ticks (lines_total.probe) add up to lines_total's exact
  entry-to-exit ticks; `TOOL_probe_share`: the probes' own ticks / the entry-to-exit ticks (spec/tools.md
  "lines", probe time);
* `lines_light@staged_x` / `_exact`: lines_light with its map staged per block (as before it went to
  global rows); `TOOL@global_x`, `TOOL@global_exact`: the same tool with its maps' `stage` dropped (every add a
  `red.global` into 32 rows, as before staging, spec/probe-toml.md "Aggregation maps"): its slowdown,
  and whether its per-line instructions equal lines_light's;
* with `--no-global`, the `@global` variants are left out; with `--no-registers`, `TOOL@noreg_x` and
  `TOOL@noreg_exact`: the tool lowered without register counters (passes/register_counters.py: every
  block's add at the block, the lowering before them); with `--no-match`, `lines@nomatch_x`/`_exact`:
  `lines` with its time samples added lane by lane (no `match.any.sync` grouping); with `--register-cap N`,
  `lines_light@capN_x`: lines_light with at most N register counters; `register_counters` (JSON rows):
  the register counters of each variant's kernel; with `--block-time`, `lines@blocktime_x` and
  `time_rho_ncu_top10_blocktime`: the `lines_blocktime` tool (clock at block starts), each block's
  ticks shared among its lines by SASS weight and load waits (analysis.block_ticks_to_lines;
  `_blocktime_nowait`: by SASS weight alone), and both time tools as they were before the probes' own
  time was left out (benchmarks/lines_before/): `lines@before_x`, `time_rho_ncu_top10_before`,
  `lines@blocktime_before_x`, `time_rho_ncu_top10_blocktime_before` (SASS weight alone); `instr_rho_ncu_sass`:
  the instruction rho of our SASS thread-instructions per line (spec/tools.md "lines", SASS instructions);
* `regs` (JSON rows): per variant [registers per thread, local bytes per thread, blocks per SM for the
  launch's block and dynamic shared memory], as the driver answers for the loaded function;
* with `--rows R,...`: `TOOL@globalRrows_x`, the slowdown of the unstaged TOOL when its warps add to
  counter row `%smid % R` instead of `% 32` (`rows_ptx`: what a global map of R rows would cost), and
  `TOOL@globalRrows_exact`;
* with `--ncu MODES` and Nsight Compute on PATH: `instr rho` = Spearman correlation, over the source
  lines of the kernel's own file that both know, of our executed thread-instructions with ncu's
  per-line instructions executed; `time rho` = the same of our thread-ticks with ncu's warp-stall
  samples, over ncu's 10 lines with the most samples (inlined code folded into its call site; the
  `_innermost` columns: left at its own line). ncu profiles every launch of the unprobed workload
  (SourceCounters, WarpStateStats, densest warp sampling); the per-address `inst_executed` and
  `smsp__pcsamp_sample_count` are read with Nsight Compute's Python module (extras/python/ncu_report)
  and placed at their source lines (`ncu_report_lines`); without it, the CLI's
  `--page source --csv --print-source cuda,sass` page is parsed.

Spearman rho = Pearson correlation of the ranks (ties get their mean rank; scipy.stats.spearmanr).
`--dry-run` (no GPU): builds, instruments and assembles (ptxas) every variant of the modes it can
build on the CPU (loop, call, cuda) and prints the map bytes; timings are `-`. With --out it writes
lines_cost.json (rows + per-line figures) and the raw ncu CSV pages there.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
WORKLOADS = REPO / "tests" / "gpu" / "workloads"
W_LINES = WORKLOADS / "w_lines.py"
TOOLS = ("lines_light", "lines")
# The time probes before the probe time was left out (issue 27): one clock read per anchor, after the block count.
BEFORE = {"lines": REPO / "benchmarks" / "lines_before" / "lines_probe_time_in.py",
          "lines_blocktime": REPO / "benchmarks" / "lines_before" / "blocktime_probe_time_in.py"}
VARIANTS = ("plain",) + TOOLS
OWN_FILE = {"loop": "kern.py", "call": "kern.py", "cuda": "expensive_line.cu", "triton": "w_lines.py", "matmul": "w_lines.py",
            "attention": "w_lines.py"}
NCU_KERNEL = {"cuda": "expensive_line", "triton": "expensive_line_kernel", "matmul": "matmul_kernel",
              "attention": "attention_fwd_kernel"}
NCU_VIEWS = ("cuda,sass", "cuda", "sass")  # ncu 2025.3's `cuda` view alone prints no metric columns (docs/lines.md)
NCU_SECONDS = 45  # what one ncu run may take (its start, the workload's, the replays); skipped when short of budget


@attrs.define
class Case:
    """One kernel to launch: its PTX, launch shape and arguments (by the PTX's parameter types)."""

    mode: str
    kernel: str
    ptx: str
    grid: tuple
    block: tuple
    args: list  # the kernel's own arguments: device pointers as ints, scalars as Python numbers
    outputs: list = attrs.Factory(list)  # CuPy views of what the kernel writes (compared across variants)
    shared: int = 0
    known: dict | None = None  # line → thread-instructions, when known by construction
    keep: list = attrs.Factory(list)  # objects whose memory the arguments point into


# ---------------------------------------------------------------- pure helpers (tested in tests/test_lines_cost.py)


def spearman(a, b) -> float | None:
    """Spearman's rho: Pearson correlation of the ranks, ties sharing their mean rank (as
    scipy.stats.spearmanr; written out so the GPU machine needs no SciPy). None when undefined."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 3 or np.all(a == a[0]) or np.all(b == b[0]):
        return None
    ra, rb = _mean_ranks(a), _mean_ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def _mean_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for v in np.unique(values):
        same = values == v
        ranks[same] = ranks[same].mean()
    return ranks


def median_ratio(times: dict[str, list[float]], variant: str) -> float | None:
    """median(times[variant]) / median(times['plain']): the slowdown of one variant."""
    base, probed = times.get("plain") or [], times.get(variant) or []
    if not base or not probed or np.median(base) <= 0:
        return None
    return float(np.median(probed) / np.median(base))


def param_values(param_types: list[str], args: list) -> list:
    """The kernel's arguments as NumPy scalars of its PTX parameter types; parameters past `args`
    (Triton's scratch pointers) get 0."""
    convert = {"u64": np.uint64, "b64": np.uint64, "s64": np.int64, "u32": np.uint32, "b32": np.uint32,
               "s32": np.int32, "f32": np.float32, "f64": np.float64}
    out = []
    for i, kind in enumerate(param_types):
        if kind not in convert:
            raise ValueError(f"parameter {i}: type .{kind} is not handled by this benchmark")
        value = args[i] if i < len(args) else 0
        out.append(convert[kind](value & 0xFFFFFFFF if kind in ("u32", "b32") and isinstance(value, int) else value))
    return out


def parse_ncu_source(text: str) -> list[tuple[str | None, dict[int, tuple[float, float]]]]:
    """`ncu --page source --csv --print-source cuda` → per source file (None when unnamed):
    line → (warp-stall samples, instructions executed). A header row names the columns (the line
    number's is `#` or `Line No`); a `"File Name","PATH"` row, or a one-cell row, before it names
    the file. A table without an `Instructions Executed` column gives nothing."""
    blocks: list[tuple[str | None, dict]] = []
    cols = None
    last_single = None
    for row in csv.reader(io.StringIO(text)):
        cells = [c.strip() for c in row]
        if not any(cells):
            continue
        instr = next((i for i, c in enumerate(cells) if c.startswith("Instructions Executed")), None)
        if "Source" in cells and instr is not None:
            stall = next((i for i, c in enumerate(cells) if c.startswith("Warp Stall Sampling (All")), None)
            line_col = next((cells.index(c) for c in ("#", "Line No") if c in cells), 0)
            cols = (line_col, stall, instr)
            blocks.append((last_single, {}))
            continue
        if cells[0] == "File Name" and len(cells) >= 2:
            last_single = cells[1]
            continue
        if len([c for c in cells if c]) == 1:
            last_single = next(c for c in cells if c)
            continue
        if cols is None:
            continue
        try:
            line = int(cells[cols[0]])
            stall = _number(cells[cols[1]]) if cols[1] is not None else 0.0
            blocks[-1][1][line] = (stall, _number(cells[cols[2]]))
        except (ValueError, IndexError):
            continue
    return blocks


def _number(text: str) -> float:
    return float(text.replace(",", "")) if text else 0.0


def own_file_lines(blocks, suffix: str) -> dict[int, tuple[float, float]] | None:
    named = [b for f, b in blocks if f and (f == suffix or f.endswith("/" + suffix) or f.endswith(suffix))]
    if named:
        return named[0]
    return blocks[0][1] if len(blocks) == 1 else None


def our_lines(table, instructions, ticks, suffix: str, fold: bool = True) -> tuple[dict[int, float], dict[int, float]]:
    """Our thread-instructions and thread-ticks per line of the file ending in `suffix`; inlined
    lines are folded into their outermost call site (`fold`), or left at their own line and file."""
    by_instr: dict[int, float] = {}
    by_ticks: dict[int, float] = {}
    for i, info in enumerate(table.lines):
        if info.inlined_at and fold:
            file, line = info.inlined_at.rsplit(":", 1)
            line = int(line)
        else:
            file, line = info.file or "", info.line
        if line <= 0 or not file.endswith(suffix):
            continue
        by_instr[line] = by_instr.get(line, 0.0) + float(instructions[i])
        if ticks is not None:
            by_ticks[line] = by_ticks.get(line, 0.0) + float(ticks[i + 1])
    return by_instr, by_ticks


def compare_with_ncu(ours_instr: dict, ours_ticks: dict, ncu: dict) -> tuple[float | None, float | None]:
    """(time rho over ncu's top 10 lines by stall samples, instruction rho over the common lines)."""
    common = sorted(set(ours_instr) & set(ncu))
    top = sorted((line for line in common if line in ours_ticks), key=lambda line: -ncu[line][0])[:10]
    time_rho = spearman([ours_ticks[line] for line in top], [ncu[line][0] for line in top]) if ours_ticks else None
    instr_rho = spearman([ours_instr[line] for line in common], [ncu[line][1] for line in common])
    return time_rho, instr_rho


# ---------------------------------------------------------------- building the variants (CPU)


def entry_param_types(ptx: str, kernel: str) -> list[str]:
    from neutrino.isa.ptx import parse_module

    function = parse_module(ptx, kernel).function(kernel)
    return [p.text.split()[1].lstrip(".") for p in function.params or []]


def build_variants(case: Case, row_counts: tuple = (), unstaged_too: bool = True,
                   no_registers: bool = False, no_match: bool = False, block_time: bool = False,
                   register_cap: int | None = None) -> dict[str, tuple[str, dict | None]]:
    """variant → (PTX, kernel description or None for plain).

    `no_registers`: also each tool as lowered before register counters (passes/register_counters.py,
    MAX_REGISTER_COUNTERS = 0: every block's add at the block), named `TOOL@noreg`. `no_match`: also
    `lines` with its time samples added lane by lane (lower_save.MATCH_SM past every target: no
    `match.any.sync` grouping; staged, each lane's `red.shared.add.u32`), named `lines@nomatch`."""
    from neutrino.engine import instrument, prune
    from neutrino.passes import register_counters
    from neutrino.toolbox import load_probes

    out = {"plain": (prune(case.ptx, case.kernel, case.mode), None)}
    for tool in TOOLS:
        done = instrument(case.ptx, load_probes(tool), kernel=case.kernel, source=f"{case.mode}.ptx")
        out[tool] = (done.ptx, done.kernels[case.kernel])
    for tool in TOOLS if unstaged_too else ():  # the tool with the other map placement: staged ↔ global rows
        probes = load_probes(tool)
        is_staged = any(spec.stage for spec in probes.maps.values())
        other, name = (unstaged(probes), "global") if is_staged else (staged(probes), "staged")
        done = instrument(case.ptx, other, kernel=case.kernel, source=f"{case.mode}.ptx")
        out[f"{tool}@{name}"] = (done.ptx, done.kernels[case.kernel])
    if no_registers:
        cap, register_counters.MAX_REGISTER_COUNTERS = register_counters.MAX_REGISTER_COUNTERS, 0
        try:
            for tool in TOOLS:
                done = instrument(case.ptx, load_probes(tool), kernel=case.kernel, source=f"{case.mode}.ptx")
                out[f"{tool}@noreg"] = (done.ptx, done.kernels[case.kernel])
        finally:
            register_counters.MAX_REGISTER_COUNTERS = cap
    if no_match:
        from neutrino.passes import lower_save

        match_sm, lower_save.MATCH_SM = lower_save.MATCH_SM, 1 << 30
        lower_save._lowered_group.cache_clear()  # templates are cached by shape: built again without grouping
        try:
            done = instrument(case.ptx, load_probes("lines"), kernel=case.kernel, source=f"{case.mode}.ptx")
            out["lines@nomatch"] = (done.ptx, done.kernels[case.kernel])
        finally:
            lower_save.MATCH_SM = match_sm
            lower_save._lowered_group.cache_clear()
    if register_cap is not None:  # lines_light with another cap on register counters
        cap, register_counters.MAX_REGISTER_COUNTERS = register_counters.MAX_REGISTER_COUNTERS, register_cap
        try:
            done = instrument(case.ptx, load_probes("lines_light"), kernel=case.kernel, source=f"{case.mode}.ptx")
            out[f"lines_light@cap{register_cap}"] = (done.ptx, done.kernels[case.kernel])
        finally:
            register_counters.MAX_REGISTER_COUNTERS = cap
    if block_time:  # lines with its clock at block starts (the lines_blocktime tool); both tools as before (probe time in)
        for name, probes in (("lines@blocktime", "lines_blocktime"), ("lines@before", str(BEFORE["lines"])),
                             ("lines@blocktime_before", str(BEFORE["lines_blocktime"]))):
            done = instrument(case.ptx, load_probes(probes), kernel=case.kernel, source=f"{case.mode}.ptx")
            out[name] = (done.ptx, done.kernels[case.kernel])
    for rows in row_counts:
        for tool in TOOLS:
            unstaged_name = tool if f"{tool}@global" not in out else f"{tool}@global"
            out[f"{tool}@global{rows}rows"] = (rows_ptx(out[unstaged_name][0], rows), out[unstaged_name][1])
    return out


def unstaged(probes):
    """A copy of the probe file with its maps' `stage` dropped (spec/probe-toml.md): the tools before staging."""
    import copy

    out = copy.copy(probes)
    out.maps = {name: attrs.evolve(spec, stage=None) for name, spec in probes.maps.items()}
    return out


def staged(probes):
    """A copy of the probe file with its maps staged per block (`stage = "block"`): lines_light as it was before."""
    import copy

    out = copy.copy(probes)
    out.maps = {name: attrs.evolve(spec, stage="block") for name, spec in probes.maps.items()}
    return out


STRIPE_RE = re.compile(r"(mov\.u32\s+(%\w+),\s*%smid;\s*and\.b32\s+\2,\s*\2,\s*)31;")


def rows_ptx(ptx: str, rows: int) -> str:
    """An experiment for the map size (spec/tools.md, lines): every warp adds to row %smid % rows
    of the counters instead of %smid % 32, as a map of `rows` rows would (a power of two); the
    buffer keeps its 32 rows, the others stay 0."""
    patched, n = STRIPE_RE.subn(rf"\g<1>{rows - 1};", ptx)
    if n == 0:
        raise ValueError("no %smid stripe selection found to patch")
    return patched


def map_layout(info: dict | None, grid, block) -> list[tuple[dict, int, int]]:
    """(map entry, units, bytes) of every appended buffer parameter, in parameter order."""
    from neutrino.maps import map_buffer_bytes

    if info is None:
        return []
    maps = {m["name"]: m for m in info["maps"]}
    out = []
    for param in info["params"]:
        if param["role"] != "buffer":
            raise ValueError(f"{info['name']}: parameter {param['name']} ({param['role']}) is not handled here")
        entry = maps[param["map"]]
        units, size = map_buffer_bytes(entry, tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block)))
        out.append((entry, units, size))
    return out


def line_table(case: Case):
    from neutrino.isa.ptx import parse_module
    from neutrino.isa.ptx.lines import build_line_map, called_lines
    from neutrino.tools.lines import analysis as la

    module = parse_module(case.ptx, case.mode)
    line_map = build_line_map(module, module.function(case.kernel))
    return la.table_of(line_map, called_lines(module, line_map))


def dry_run(case: Case, row: dict) -> None:
    """Instrument and assemble every variant (ptxas for sm_90); the map bytes per launch."""
    variants = build_variants(case, no_registers=True, no_match=True, block_time=True)
    for name, (ptx, info) in variants.items():
        if shutil.which("ptxas"):
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "k.ptx"
                src.write_text(ptx)
                done = subprocess.run(["ptxas", "-arch=sm_90", str(src), "-o", str(Path(tmp) / "k.cubin")],
                                      capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{case.mode} {name}: ptxas refused the module:\n{done.stderr[-1500:]}")
        if info is not None:
            row[f"map_bytes_{name}"] = sum(size for _, _, size in map_layout(info, case.grid, case.block))
    row["lines"] = len(line_table(case).lines)


# ---------------------------------------------------------------- the kernels (GPU)


def build_case(mode: str, work: Path) -> Case:
    sys.path.insert(0, str(WORKLOADS))
    import w_lines

    if mode == "loop":
        threads = w_lines.LOOP_GRID * w_lines.LOOP_BLOCK
        trips = w_lines.LOOP_TRIPS
        known = {10: 4 * threads, 12: 2 * trips * threads, 13: 4 * trips * threads, 15: 2 * threads}
        case = Case(mode, "loopk", w_lines.LOOP_PTX.read_text(), (w_lines.LOOP_GRID,), (w_lines.LOOP_BLOCK,),
                    [0, trips], known=known)
        return _with_arrays(case, [("out", 1, np.uint32)])
    if mode == "call":
        return _with_arrays(call_case(w_lines), [("out", 1, np.uint32)])
    if mode == "cuda":
        os.environ.setdefault("W_LINES_DIR", str(work))
        case = Case(mode, "expensive_line", w_lines.cuda_ptx().read_text(), (w_lines.N // 256,), (256,),
                    [0, 0, w_lines.N, w_lines.ITERS])
        return _with_arrays(case, [("x", w_lines.N, np.float32), ("y", w_lines.N, np.float32)], outputs=(1,))
    return _triton_case(mode, w_lines)


def call_case(w_lines) -> Case:
    """call.ptx: per-line thread-instructions known by construction, the called .funcs' lines
    included (mix whole, clampv's first block: spec/ir.md "Called functions")."""
    threads, n = w_lines.LOOP_GRID * w_lines.LOOP_BLOCK, w_lines.LOOP_TRIPS
    known = {10: 4 * threads, 12: 7 * n * threads, 13: 3 * n * threads, 15: 2 * threads,
             3: 3 * n * threads, 4: 3 * n * threads, 6: n * threads, 7: 2 * n * threads}
    return Case("call", "callk", w_lines.CALL_PTX.read_text(), (w_lines.LOOP_GRID,), (w_lines.LOOP_BLOCK,), [0, n],
                known=known)


def _with_arrays(case: Case, arrays, outputs=(0,)) -> Case:
    """CuPy arrays for the pointer arguments (filled with a fixed pseudo-random pattern)."""
    import cupy as cp

    rng = np.random.RandomState(0)
    for i, (_, n, dtype) in enumerate(arrays):
        host = rng.uniform(-1, 1, n).astype(dtype) if dtype != np.uint32 else np.zeros(n, dtype)
        dev = cp.asarray(host)
        case.keep.append(dev)
        case.args[i] = int(dev.data.ptr)
        if i in outputs:
            case.outputs.append(dev)
    return case


def _triton_case(mode: str, w_lines) -> Case:
    """Triton compiles the kernel (one real launch); its PTX, warps and shared memory make the case."""
    import cupy as cp
    import torch

    expensive, matmul = w_lines.triton_kernels()
    (x, y), (a, b, c) = w_lines.triton_inputs()
    if mode == "attention":
        q, k, v, o, scale = w_lines.attention_inputs()
        grid, d = w_lines.attention_grid(), w_lines.ATTN_D
        compiled = w_lines.attention_kernel()[grid](q, k, v, o, w_lines.ATTN_CTX, scale, BM=w_lines.ATTN_BLOCK,
                                                     BN=w_lines.ATTN_BLOCK, D=d)
        args, keep, outs = [q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), w_lines.ATTN_CTX, scale], [q, k, v, o], [o]
    elif mode == "triton":
        grid, compiled = (w_lines.N // 256,), expensive[(w_lines.N // 256,)](x, y, w_lines.N, w_lines.ITERS, BLOCK=256)
        args, keep, outs = [x.data_ptr(), y.data_ptr(), w_lines.N, w_lines.ITERS], [x, y], [y]
    else:
        n = w_lines.MATMUL
        grid = (n // 64, n // 64)
        compiled = matmul[grid](a, b, c, n, n, n, BM=64, BN=64, BK=32)
        args, keep, outs = [a.data_ptr(), b.data_ptr(), c.data_ptr(), n, n, n], [a, b, c], [c]
    torch.cuda.synchronize()
    md = compiled.metadata
    name = getattr(md, "name", None) or compiled.name
    case = Case(mode, name, compiled.asm["ptx"], grid, (32 * md.num_warps,), args, shared=int(md.shared), keep=keep)
    case.outputs = [cp.asarray(t) for t in outs]  # zero-copy views (__cuda_array_interface__)
    return case


@attrs.define
class Loaded:
    """One variant, loaded: the CuPy function, its full argument tuple and its map buffers."""

    function: object
    args: tuple
    buffers: list  # (map entry, units, CuPy uint8 array)


def load_variant(case: Case, ptx: str, info: dict | None, work: Path, name: str) -> Loaded:
    import cupy as cp

    path = work / f"{case.mode}_{name}.ptx"
    path.write_text(ptx)
    function = cp.RawModule(path=str(path)).get_function(case.kernel)
    if case.shared > 48 * 1024:
        function.max_dynamic_shared_size_bytes = case.shared
    values = param_values(entry_param_types(case.ptx, case.kernel), case.args)
    buffers = [(entry, units, cp.zeros(size, np.uint8)) for entry, units, size in map_layout(info, case.grid, case.block)]
    return Loaded(function, tuple(values) + tuple(np.uint64(buf.data.ptr) for _, _, buf in buffers), buffers)


def blocks_per_sm(function, threads: int, dynamic_shared: int) -> int | None:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor for a CuPy function; None where the driver does not answer."""
    import ctypes

    try:
        from cupy.cuda import driver

        return int(driver.occupancyMaxActiveBlocksPerMultiprocessor(function.ptr, threads, dynamic_shared))
    except Exception:  # noqa: BLE001 - older CuPy: ask libcuda directly
        pass
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        blocks = ctypes.c_int(0)
        status = cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), ctypes.c_void_p(function.ptr), ctypes.c_int(threads), ctypes.c_size_t(dynamic_shared))
        return blocks.value if status == 0 else None
    except (OSError, AttributeError):
        return None


def launch(case: Case, loaded: Loaded) -> None:
    loaded.function(case.grid, case.block, loaded.args, shared_mem=case.shared)


def time_variants(case: Case, loaded: dict[str, Loaded], reps: int, warmup: int = 3) -> dict[str, list[float]]:
    """Per-launch times (microseconds, CUDA events), the variants interleaved in rotating order."""
    import cupy as cp

    times: dict[str, list[float]] = {v: [] for v in loaded}
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    names = list(loaded)
    for r in range(warmup + reps):
        for name in names[r % len(names):] + names[: r % len(names)]:
            start.record()
            launch(case, loaded[name])
            stop.record()
            stop.synchronize()
            if r >= warmup:
                times[name].append(1000.0 * cp.cuda.get_elapsed_time(start, stop))
    return times


def counts_of(case: Case, loaded: Loaded, table) -> dict:
    """One launch with zeroed maps, read back and analysed: per-line instructions and ticks."""
    import cupy as cp

    from neutrino.maps import fold_rows
    from neutrino.tools.lines import analysis as la

    for _, _, buf in loaded.buffers:
        buf.fill(0)
    launch(case, loaded)
    cp.cuda.runtime.deviceSynchronize()
    out: dict = {}
    for entry, units, buf in loaded.buffers:
        rows = buf.get().view("<u8").reshape(units, -1)
        result = la.counters_result(entry["name"], fold_rows(rows, int(entry["record_bytes"])), table)
        out.update({k: v for k, v in result.items() if v is not None})
    return out


def outputs_of(case: Case) -> list[np.ndarray]:
    return [o.get().copy() for o in case.outputs]


def measure(case: Case, work: Path, reps: int, row: dict, row_counts: tuple = (), options: dict | None = None) -> dict:
    """Time the three variants, check outputs and counts; fills `row`, returns the per-line figures."""
    from neutrino.tools.lines import analysis as la

    table = line_table(case)
    variants = build_variants(case, row_counts, **(options or {}))
    loaded = {name: load_variant(case, ptx, info, work, name) for name, (ptx, info) in variants.items()}
    # per variant: registers per thread, local (spill) bytes, blocks per SM for this launch (the driver's answers)
    threads = int(np.prod(case.block))
    row["regs"] = {name: [getattr(v.function, "num_regs", None), getattr(v.function, "local_size_bytes", None),
                          blocks_per_sm(v.function, threads, case.shared)] for name, v in loaded.items()}
    row["register_counters"] = {name: (info or {}).get("instructions", {}).get("register_counters", 0)
                                for name, (_, info) in variants.items() if info is not None}
    launch(case, loaded["plain"])
    reference = outputs_of(case)
    same = True
    for tool in TOOLS:
        launch(case, loaded[tool])
        same = same and all(np.array_equal(a, b) for a, b in zip(reference, outputs_of(case)))
    times = time_variants(case, loaded, reps)
    counts = {tool: counts_of(case, loaded[tool], table) for tool in TOOLS}
    light_i, full_i = counts["lines_light"]["instructions"], counts["lines"]["instructions"]
    exact = bool(np.array_equal(light_i, full_i))
    if case.known is not None:
        exact = exact and {info.line: int(n) for info, n in zip(table.lines, full_i)} == case.known
    row.update(plain_us=float(np.median(times["plain"])), light_x=median_ratio(times, "lines_light"),
               full_x=median_ratio(times, "lines"), lines=len(table.lines), exact=exact, same_output=same,
               clamped=int(counts["lines"].get("clamped", 0)),
               overflow=int(counts["lines"].get("overflow", 0) + counts["lines_light"].get("overflow", 0)),
               **{f"map_bytes_{t}": sum(b.nbytes for _, _, b in loaded[t].buffers) for t in TOOLS})
    for name in loaded:
        if "@" in name:  # the rows experiment: its slowdown, and the same counts
            row[f"{name}_x"] = median_ratio(times, name)
            row[f"{name}_exact"] = counts_of(case, loaded[name], table)["instructions"] == tuple(light_i)
    ticks = line_time(counts["lines"], row, "lines")
    sass_counts, sass_lines = sass_instructions(case, table, counts["lines_light"].get("block_threads"), row)
    variant_ticks = {}
    if "lines@before" in loaded:  # lines as before: each region's time with the probes at its start and end
        before = line_time(counts_of(case, loaded["lines@before"], table), row, "lines@before")
        if before is not None:
            variant_ticks["before"] = [float(v) for v in before]
    sass_static = sass_lines.static if sass_lines is not None else None
    # time at block starts, shared among each block's lines: `blocktime` as the analysis does now (SASS weight and the
    # load waits at the line that waits), `blocktime_nowait` (SASS weight alone), `blocktime_before` (the tool and the
    # sharing before issue 27's probe-time change: SASS weight alone)
    for name, sharings in (("lines@blocktime", (("blocktime", table.block_waits), ("blocktime_nowait", None))),
                           ("lines@blocktime_before", (("blocktime_before", None),))):
        if name in loaded:
            block_ticks = line_time(counts_of(case, loaded[name], table), row, name, key="block_ticks")
            for key, waits in sharings if block_ticks is not None else ():
                variant_ticks[key] = [float(v) for v in la.block_ticks_to_lines(block_ticks, table, sass_static, waits)]
    return {"labels": [info.label + (f" (in {info.inlined_at})" if info.inlined_at else "") for info in table.lines],
            "instructions": [int(v) for v in full_i], "ticks": None if ticks is None else [int(v) for v in ticks],
            "sass_instructions": sass_counts, "variant_ticks": variant_ticks, "times_us": times, "table": table}


def line_time(counts: dict, row: dict, name: str, key: str = "ticks"):
    """Thread-ticks per line (or per block, `key` = "block_ticks") of one launch, the clamped samples' excess
    shared back; fills `row`: NAME_total_ticks_exact (lines + entry + probe time = lines_total.ticks) and,
    where the tool measures it, NAME_probe_share (the probes' own ticks / all ticks)."""
    from neutrino.tools.lines import analysis as la

    ticks = counts.get(key)
    if ticks is None:
        return None
    ticks = np.asarray(ticks, np.uint64)
    clamped = counts.get("clamped_by_key" if key == "ticks" else "block_clamped_by_key")
    if counts.get("excess"):
        ticks = ticks + la.share_excess(clamped, counts["excess"])
    probe = counts.get("probe_ticks")
    if counts.get("total_ticks") is not None:
        row[f"{name}_total_ticks_exact"] = int(ticks.sum()) + int(probe or 0) == counts["total_ticks"]
    if probe is not None and counts.get("total_ticks"):
        row[f"{name}_probe_share"] = probe / counts["total_ticks"]
    return ticks


def sass_instructions(case: Case, table, block_threads, row: dict):
    """SASS thread-instructions per line (neutrino/tools/lines/sass.py: the original PTX assembled with
    ptxas -lineinfo, nvdisasm, matched blocks exact, the rest estimated) and the SassLines; None, None
    where the tools are missing (`sass_note` in the row says why)."""
    from neutrino.tools.lines import sass

    if block_threads is None:
        return None, None
    try:
        lines = sass.sass_lines_of(case.ptx, case.kernel, table)
    except (sass.SassUnavailable, ValueError) as e:
        row["sass_note"] = str(e)[:300]
        return None, None
    counts, exact = sass.sass_line_instructions(block_threads, table, lines)
    row.update(sass_blocks=lines.sass_blocks, sass_matched_blocks=lines.matched_blocks,
               sass_exact_lines=int(sum(1 for i, e in enumerate(exact) if e and lines.static[i])),
               sass_lines=int(sum(1 for n in lines.static if n)))
    return [float(v) for v in counts], lines


def ncu_lines(mode: str, work: Path, out: Path | None, timeout: int) -> str | None:
    """The unprobed workload under Nsight Compute (one launch of the kernel); its source page as CSV."""
    ncu = shutil.which("ncu")
    if ncu is None:
        print("ncu: not on PATH", file=sys.stderr)
        return None
    report = work / f"ncu_{mode}"
    env = dict(os.environ, W_LINES_DIR=str(work / f"ncu_src_{mode}"), TRITON_CACHE_DIR=str(work / f"tc_ncu_{mode}"))
    Path(env["W_LINES_DIR"]).mkdir(parents=True, exist_ok=True)
    # every launch of the workload (REPEAT), warp states sampled every 2^5 cycles (the shortest interval)
    profile = [ncu, "--section", "SourceCounters", "--section", "WarpStateStats", "--import-source", "yes",
               "--warp-sampling-interval", "0", "-k", f"regex:{NCU_KERNEL[mode]}", "-c", "3", "-f", "-o", str(report),
               sys.executable, str(W_LINES), mode]
    try:
        done = subprocess.run(profile, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            print(f"ncu {mode}: rc {done.returncode}: {done.stderr[-800:]}{done.stdout[-800:]}", file=sys.stderr)
            return None
        try:  # the per-PC metrics and their source lines, from the report itself
            blocks, metrics = ncu_report_lines(Path(f"{report}.ncu-rep"), ncu, out, mode)
            print(f"ncu {mode}: per-line figures from ncu_report ({metrics})", file=sys.stderr)
            if out is not None:  # the CLI's view of the same report, kept beside the figures
                page = subprocess.run([ncu, "-i", f"{report}.ncu-rep", "--page", "source", "--csv", "--print-source",
                                       "cuda,sass"], capture_output=True, text=True, timeout=60)
                (out / f"ncu_{mode}_source.csv").write_text(page.stdout[:400_000] + page.stderr[-2000:])
            return blocks
        except Exception as e:  # noqa: BLE001 - then the CLI's source page
            print(f"ncu {mode}: ncu_report: {type(e).__name__}: {e}"[:600], file=sys.stderr)
        pages = []
        for view in NCU_VIEWS:  # the first whose table has metric columns is read; all are kept
            page = subprocess.run([ncu, "-i", f"{report}.ncu-rep", "--page", "source", "--csv", "--print-source", view],
                                  capture_output=True, text=True, timeout=60)
            pages.append(f"# --print-source {view}: rc {page.returncode}\n{page.stdout}{page.stderr}")
            if page.returncode == 0 and any(blocks for _, blocks in parse_ncu_source(page.stdout)):
                break
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"ncu {mode}: {e}", file=sys.stderr)
        return None
    if out is not None:
        (out / f"ncu_{mode}_source.csv").write_text("\n".join(pages))
    return page.stdout if page.returncode == 0 else None


# Per-PC metrics of the SourceCounters section, by preference: instructions executed (warp level), and
# warp-stall samples (all reasons). The first name a report has is read; the others stay for other ncu versions.
NCU_INSTR_METRICS = ("inst_executed", "smsp__sass_inst_executed", "sass__inst_executed")
NCU_SAMPLE_METRICS = ("smsp__pcsamp_sample_count", "smsp__pcsamp_warps_issue_stalled_all")


def ncu_python_dirs(ncu: str) -> list[Path]:
    """Where Nsight Compute keeps its Python report module (extras/python), next to the ncu it runs."""
    real = Path(os.path.realpath(ncu))
    out = [parent / "extras" / "python" for parent in (real.parent, real.parent.parent)]
    out += sorted(Path("/usr/local/cuda/").glob("nsight-compute*/extras/python"))
    out += sorted(Path("/opt/nvidia").glob("nsight-compute/*/extras/python"))
    return [d for d in out if (d / "ncu_report.py").exists()]


def by_source_line(pcs, instructions, samples, where) -> list[tuple[str | None, dict[int, tuple[float, float]]]]:
    """Per-PC values → per source file, line → (samples, instructions): the shape of parse_ncu_source.
    `where(pc)` gives (file, line) or None for a PC without a source line."""
    files: dict[str | None, dict[int, list[float]]] = {}
    for pc, instr, sample in zip(pcs, instructions, samples):
        place = where(pc)
        if place is None or place[1] <= 0:
            continue
        entry = files.setdefault(place[0], {}).setdefault(place[1], [0.0, 0.0])
        entry[0] += sample
        entry[1] += instr
    return [(f, {line: (v[0], v[1]) for line, v in sorted(table.items())}) for f, table in files.items()]


def per_pc(counts: dict, samples: dict) -> tuple[list, list, list]:
    """Every PC with instructions executed or warp samples (the union: a PC a warp never issues, such as the
    `BRA` after the last `EXIT` where warps wait for their stores to drain, has samples and no instruction
    count), with both values (0 where missing), in address order."""
    pcs = sorted(set(counts) | set(samples))
    return pcs, [counts.get(pc, 0.0) for pc in pcs], [samples.get(pc, 0.0) for pc in pcs]


def ncu_report_lines(report: Path, ncu: str, out: Path | None, mode: str):
    """The report's per-PC SourceCounters metrics, through Nsight Compute's own Python module, per source line."""
    dirs = ncu_python_dirs(ncu)
    if not dirs:
        raise RuntimeError(f"no extras/python/ncu_report.py next to {ncu}")
    sys.path.insert(0, str(dirs[0]))
    import ncu_report

    rng = ncu_report.load_report(str(report)).range_by_idx(0)
    actions = [rng.action_by_idx(i) for i in range(rng.num_actions())]  # the profiled launches (same code)
    correlated = {}  # metric name -> the per-PC metric
    for name in actions[0].metric_names():
        metric = actions[0].metric_by_name(name)
        if metric is not None and metric.num_instances() > 1 and metric.has_correlation_ids():
            correlated[name] = metric
    if out is not None:
        (out / f"ncu_{mode}_metrics.txt").write_text("\n".join(f"{n} {correlated[n].num_instances()}" for n in sorted(correlated)))
    instr_name = next((n for n in NCU_INSTR_METRICS if n in correlated), None)
    sample_name = next((n for n in NCU_SAMPLE_METRICS if n in correlated), None)
    if instr_name is None:
        raise RuntimeError(f"no per-PC instructions-executed metric among {sorted(correlated)[:40]}")
    counts: dict[int, float] = {}
    samples: dict[int, float] = {}
    for action in actions:  # summed over the launches
        for name, into in ((instr_name, counts), (sample_name, samples)):
            metric = action.metric_by_name(name) if name else None
            if metric is None:
                continue
            ids = metric.correlation_ids()
            for i in range(metric.num_instances()):
                pc = ids.as_uint64(i)
                into[pc] = into.get(pc, 0.0) + metric.as_double(i)
    pcs, instructions, sampled = per_pc(counts, samples)

    def where(pc):
        info = actions[0].source_info(pc)
        return None if info is None else (info.file_name(), int(info.line()))

    blocks = by_source_line(pcs, instructions, sampled, where)
    return blocks, f"{instr_name} / {sample_name}, {len(actions)} launches"


def ncu_compare(mode: str, figures: dict, text, row: dict) -> None:
    blocks = parse_ncu_source(text) if isinstance(text, str) else text
    figures["ncu_files"] = {str(f): len(b) for f, b in blocks}
    lines = own_file_lines(blocks, OWN_FILE[mode])
    if not lines:
        print(f"ncu {mode}: no per-line table for {OWN_FILE[mode]} in its source page", file=sys.stderr)
        return
    ours_i, ours_t = our_lines(figures["table"], figures["instructions"], figures["ticks"], OWN_FILE[mode])
    row["time_rho_ncu_top10"], row["instr_rho_ncu"] = compare_with_ncu(ours_i, ours_t, lines)
    if figures.get("sass_instructions") is not None:  # SASS thread-instructions per line against ncu's (SASS)
        sass_i, _ = our_lines(figures["table"], figures["sass_instructions"], None, OWN_FILE[mode])
        row["instr_rho_ncu_sass"] = compare_with_ncu(sass_i, {}, lines)[1]
        figures["sass_by_line"] = {str(k): v for k, v in sorted(sass_i.items())}
    for variant, ticks in (figures.get("variant_ticks") or {}).items():  # other time measures (--block-time)
        _, variant_t = our_lines(figures["table"], figures["instructions"], ticks, OWN_FILE[mode])
        row[f"time_rho_ncu_top10_{variant}"] = compare_with_ncu(ours_i, variant_t, lines)[0]
    row["ncu_lines"] = len(lines)
    figures["ncu"] = {str(k): v for k, v in sorted(lines.items())}
    figures["ours_by_line"] = {str(k): [ours_i[k], ours_t.get(k)] for k in sorted(ours_i)}
    # the same with inlined code left at its own file and line, as a source view that shows the innermost line does
    inner_i, inner_t = our_lines(figures["table"], figures["instructions"], figures["ticks"], OWN_FILE[mode], fold=False)
    row["time_rho_ncu_top10_innermost"], row["instr_rho_ncu_innermost"] = compare_with_ncu(inner_i, inner_t, lines)
    figures["ncu_all"] = {str(f): {str(k): v for k, v in sorted(b.items())} for f, b in blocks}


COLUMNS = ["kernel", "plain_us", "light_x", "full_x", "map_bytes_lines_light", "map_bytes_lines", "lines", "exact",
           "same_output", "time_rho_ncu_top10", "instr_rho_ncu", "instr_rho_ncu_sass"]


def print_table(rows: list[dict]) -> None:
    def fmt(v):
        return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)

    extra = sorted({c for row in rows for c in row if c.endswith(("_x", "_exact")) and "@" in c
                    or c.endswith(("total_ticks_exact", "_probe_share"))
                    or c.startswith(("time_rho_ncu_top10_", "sass_"))})
    print("  ".join(COLUMNS + extra))
    for row in rows:
        print("  ".join(fmt(row.get(c)) for c in COLUMNS + extra))


def run_mode(mode: str, args, work: Path, out: Path | None, started: float) -> tuple[dict, dict]:
    case_work = work / mode
    case_work.mkdir(parents=True, exist_ok=True)
    row: dict = {"kernel": mode}
    if args.dry_run:
        sys.path.insert(0, str(WORKLOADS))
        import w_lines

        if mode == "loop":
            case = Case(mode, "loopk", w_lines.LOOP_PTX.read_text(), (w_lines.LOOP_GRID,), (w_lines.LOOP_BLOCK,), [])
        elif mode == "call":
            case = call_case(w_lines)
        elif mode == "cuda":
            os.environ.setdefault("W_LINES_DIR", str(case_work))
            case = Case(mode, "expensive_line", w_lines.cuda_ptx().read_text(), (w_lines.N // 256,), (256,), [])
        else:
            row["note"] = "needs the GPU (Triton compiles there)"
            return row, {}
        row["kernel"] = f"{mode}:{case.kernel}"
        dry_run(case, row)
        return row, {}
    case = build_case(mode, case_work)
    row["kernel"] = f"{mode}:{case.kernel}"
    figures = measure(case, case_work, args.reps, row, tuple(int(r) for r in args.rows.split(',') if r),
                      {"unstaged_too": not args.no_global, "no_registers": args.no_registers, "no_match": args.no_match,
                       "block_time": args.block_time, "register_cap": args.register_cap})
    if mode in args.ncu.split(",") and mode in NCU_KERNEL:
        if time.monotonic() - started + NCU_SECONDS > args.budget_s:
            row["note"] = "ncu skipped: out of time budget"
        else:
            try:
                text = ncu_lines(mode, case_work, out, NCU_SECONDS)
                if text:
                    ncu_compare(mode, figures, text, row)
            except Exception as e:  # noqa: BLE001 - the measurement above stays
                row["note"] = f"ncu comparison failed: {type(e).__name__}: {e}"[:300]
    return row, figures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="loop,call,cuda,triton,matmul,attention")
    ap.add_argument("--ncu", default="", metavar="MODES", help="kernels (cuda, triton, matmul) to compare with ncu")
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=40, help="timed launches per variant (after 3 warm-up rounds)")
    ap.add_argument("--budget-s", type=float, default=150.0, help="skip ncu runs that would end past this")
    ap.add_argument("--rows", default="", metavar="R,R", help="also time both tools with warps on R counter rows "
                    "(%%smid %% R, R a power of two <= 32) instead of 32")
    ap.add_argument("--no-global", action="store_true", help="leave out the unstaged (@global) variants")
    ap.add_argument("--no-registers", action="store_true", help="also time each tool without register counters (@noreg)")
    ap.add_argument("--no-match", action="store_true", help="also time lines without match.any grouping (@nomatch)")
    ap.add_argument("--register-cap", type=int, metavar="N", help="also time lines_light with at most N register "
                    "counters (lines_light@capN; passes/register_counters.py MAX_REGISTER_COUNTERS)")
    ap.add_argument("--block-time", action="store_true", help="also time the lines_blocktime tool (lines@blocktime: "
                    "the clock at block starts) and compare its time ranking with ncu's")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: instrument, assemble and size only")
    args = ap.parse_args(argv)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="lines_cost_"))
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TRITON_CACHE_DIR", str(work / "tc"))
    rows, per_line = [], {}
    for mode in args.modes.split(","):
        try:
            row, figures = run_mode(mode, args, work, out, started)
        except Exception as e:  # noqa: BLE001 - one kernel's failure is reported, the others still run
            import traceback

            traceback.print_exc()
            row, figures = {"kernel": mode, "error": f"{type(e).__name__}: {e}"[:500]}, {}
        rows.append(row)
        figures.pop("table", None)
        per_line[mode] = figures
        print(json.dumps(row), flush=True)
    print_table(rows)
    if out is not None:
        (out / "lines_cost.json").write_text(json.dumps({"rows": rows, "per_line": per_line}, indent=1, default=str))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
