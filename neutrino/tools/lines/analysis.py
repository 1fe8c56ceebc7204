"""lines: executed instructions and time per source line (spec/tools.md, "lines").

Input: the hist maps of the `lines` / `lines_light` tools, keyed by indices of
the kernel's line map, which is rebuilt here from the trace's original.ptx with
the function the engine used (neutrino/isa/ptx/lines.py):

* `lines_blocks`: bucket 1 + b = threads that executed basic block b. A block's
  instructions all run when it is entered, so the thread-instructions of line L
  are Σ_b threads[b] × (instructions of line L in block b): exact.
* `lines_time`: bucket 1 + (L + 1) × 4 + c = samples of c + 1 clock ticks (c = 3:
  four or more) spent after a region of line L started (L = -1: the kernel's
  entry, before any region). One tick is 2^TICK_BITS cycles of %clock64.
* `block_time` (the `lines_blocktime` tool, instead of `lines_time`): the same samples keyed by
  basic block: bucket 1 + (b + 1) × 4 + c; each block's ticks are shared among its lines in
  proportion to their SASS instructions in it (`block_ticks_to_lines`).
* `lines_total` (sum): `ticks`, Σ over threads of the ticks from entry to exit,
  `excess`, Σ of the ticks past 4 of the samples counted as 4, and `probe`, Σ of the
  ticks between the two clock reads of every anchor (the probes' own time, left out
  of the lines; absent in traces of the tools before it): the time total stays exact
  (lines + entry + probe); `excess` is shared among the lines by their clamped samples
  (`share_excess`: an estimate per line).

The numeric work is in `line_instructions` and `line_ticks` (pure, tested on
hand-built inputs); `analyze_launch` reads the maps and the PTX.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import attrs
import numpy as np

from neutrino.analysis import _common as C

MAP_NAMES = ("lines_blocks", "lines_time", "lines_total", "block_time")
HAS_PLOTS = False
TICK_BITS = 8  # as neutrino/tools/lines/probe.py
TICK_CLASSES = 4  # ticks 1, 2, 3, >= 4 per sample
WARP = 32
# A line with at least this many line-region probes per instruction of it has its time inflated by them.
PERTURBED_SITES_PER_INSTRUCTION = 1 / 3
ENTRY_LABEL = "(kernel entry)"


@attrs.frozen
class LineInfo:
    label: str  # FILE:LINE
    file: str | None
    line: int
    function: str | None  # the inlined function, when the line is inlined
    inlined_at: str | None  # FILE:LINE of the outermost call site
    instructions: int  # static: PTX instructions of the line in the kernel
    regions: int  # static: line regions (one timing probe each in full mode)

    @property
    def perturbed(self) -> bool:
        return self.instructions > 0 and self.regions / self.instructions >= PERTURBED_SITES_PER_INSTRUCTION


@attrs.frozen
class LineTable:
    """The kernel's lines and, per block, its instructions per line (from the line map)."""

    lines: tuple[LineInfo, ...]
    block_lines: tuple[tuple[tuple[int, int], ...], ...]  # per block: (line index, instructions)
    guarded_blocks: tuple[int, ...]  # blocks whose every instruction is guarded (counts filtered by that guard)
    partial_calls: tuple[str, ...] = ()  # called .funcs counted only in part (spec/ir.md "Called functions")
    # per block: (line index, loads from off-SM memory whose result that line first reads in the block): block_load_waits
    block_waits: tuple[tuple[tuple[int, int], ...], ...] = ()
    # the original kernel's machine code per line (neutrino/tools/lines/sass.py), or why there is none
    sass: object = attrs.field(default=None, eq=False)
    sass_note: str | None = attrs.field(default=None, eq=False)


@attrs.frozen
class LaunchResult:
    index: int
    kernel: str
    duration_ns: float | None
    map: str
    table: LineTable
    instructions: tuple[int, ...] | None = None  # lines_blocks: thread-instructions per line
    block_threads: tuple[int, ...] | None = None  # lines_blocks: threads that executed each block (SASS weights)
    ticks: tuple[int, ...] | None = None  # lines_time: thread-ticks per line, index 0 = kernel entry
    clamped: int = 0  # samples of 4 or more ticks (counted as 4)
    overflow: int = 0  # samples whose key was beyond the map's buckets (not attributed)
    clamped_by_key: tuple[int, ...] | None = None  # lines_time: clamped samples per key (0: kernel entry)
    block_ticks: tuple[int, ...] | None = None  # block_time: thread-ticks per block, index 0 = kernel entry
    block_clamped_by_key: tuple[int, ...] | None = None  # block_time: clamped samples per key
    total_ticks: int | None = None  # lines_total: thread-ticks from entry to exit, exact
    excess: int | None = None  # lines_total: ticks past 4 of the clamped samples
    probe_ticks: int | None = None  # lines_total: ticks inside the probes (between an anchor's two clock reads)


# ---------------------------------------------------------------- pure functions


def line_instructions(block_threads: np.ndarray, table: LineTable) -> tuple[np.ndarray, int]:
    """Thread-instructions per line from threads per block; also the threads of blocks past the table."""
    out = np.zeros(len(table.lines), dtype=np.uint64)
    block_threads = np.asarray(block_threads, dtype=np.uint64)
    for block, pairs in enumerate(table.block_lines[: len(block_threads)]):
        for line, count in pairs:
            out[line] += block_threads[block] * np.uint64(count)
    extra = int(block_threads[len(table.block_lines):].sum(dtype=np.uint64))
    return out, extra


def line_ticks(samples: np.ndarray, lines: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Thread-ticks per line (index 0: kernel entry, 1 + L: line L) from the time map's values
    (value v = (L + 1) × 4 + c, c + 1 ticks, a clamped sample counting 4); also the clamped
    samples per key and the samples of keys past `lines`."""
    samples = np.asarray(samples, dtype=np.uint64)
    keys = lines + 1
    usable = samples[: keys * TICK_CLASSES]
    usable = np.pad(usable, (0, keys * TICK_CLASSES - len(usable)))
    by_class = usable.reshape(keys, TICK_CLASSES)
    weights = np.arange(1, TICK_CLASSES + 1, dtype=np.uint64)
    ticks = (by_class * weights).sum(axis=1, dtype=np.uint64)
    clamped = by_class[:, -1].copy()
    overflow = int(samples[keys * TICK_CLASSES:].sum(dtype=np.uint64))
    return ticks, clamped, overflow


def share_excess(clamped_by_key: np.ndarray, excess: int) -> np.ndarray:
    """`excess` ticks shared among the keys in proportion to their clamped samples, in whole ticks
    (largest remainders first, ties to the lower key): the shares add up to `excess` exactly."""
    clamped = np.asarray(clamped_by_key, dtype=np.float64)
    out = np.zeros(len(clamped), dtype=np.uint64)
    total = clamped.sum()
    if not excess or total == 0:
        return out
    exact = clamped * (excess / total)
    out[:] = np.floor(exact).astype(np.uint64)
    left = int(excess - int(out.sum(dtype=np.uint64)))
    if left > 0:
        order = np.argsort(-(exact - np.floor(exact)), kind="stable")[:left]
        out[order] += np.uint64(1)
    return out


def block_ticks_to_lines(block_ticks, table: LineTable, sass_static=None, waits=None) -> np.ndarray:
    """Thread-ticks per line (index 0: the kernel entry, 1 + L: line L) from thread-ticks per block
    (index 0: the entry, 1 + b: block b): each block's ticks shared among its lines in proportion to
    w(b, L) = PTX instructions of L in b x sigma_L + LOAD_WAIT_WEIGHT x loads_b(L), sigma_L = SASS / PTX
    instructions of L in the whole kernel (1 without SASS), loads_b(L) = the loads whose wait line L takes in
    block b (`waits`, per block (line, loads): block_load_waits; none when not given); PTX counts alone where
    every weight of the block is 0. Float: shares."""
    block_ticks = np.asarray(block_ticks, np.float64)
    out = np.zeros(len(table.lines) + 1)
    out[0] = block_ticks[0] if len(block_ticks) else 0.0
    sigma = np.ones(len(table.lines))
    if sass_static is not None:
        for line, info in enumerate(table.lines):
            sigma[line] = sass_static[line] / info.instructions if info.instructions else 0.0
    for block, pairs in enumerate(table.block_lines):
        ticks = block_ticks[1 + block] if 1 + block < len(block_ticks) else 0.0
        if not ticks or not pairs:
            continue
        lines = np.array([line for line, _ in pairs])
        weights = np.array([n for _, n in pairs], np.float64) * sigma[lines]
        if waits is not None and block < len(waits):
            where = {line: i for i, line in enumerate(lines)}
            for line, loads in waits[block]:
                if line in where:
                    weights[where[line]] += LOAD_WAIT_WEIGHT * loads
        if weights.sum() <= 0:
            weights = np.array([n for _, n in pairs], np.float64)
        out[1 + lines] += ticks * weights / weights.sum()
    return out


# A load from memory outside the SM (global, local, generic, texture; an atomic with a result) keeps the warp waiting
# at the first instruction that reads its result, hundreds of cycles (about 500 on H100/H200 from DRAM, 250 from L2)
# where an instruction issues every few cycles: Nsight Compute's warp samples charge that wait to the reading
# instruction's line (its `long_sb` stalls). Sharing a block's measured time by instructions alone gives the wait to
# the block's lines by their size instead; this weight (SASS-instruction equivalents per load, a model constant:
# about 500 cycles / 16 cycles per instruction of a warp among several) gives it to the line that waits.
LOAD_WAIT_WEIGHT = 32
LONG_LATENCY_SPACES = ("global", "local", None, "tex")  # None: generic addressing


def block_load_waits(line_map) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per basic block: (line index, loads) for each line whose instruction is the first, in the block, to read the
    result of a load from memory outside the SM issued earlier in the same block (a load read first in a later block,
    or overwritten unread, counts nowhere: its wait is not in this block's time). A vector load counts once."""
    from neutrino.isa.ptx.semantics import effects

    out = []
    for block in line_map.blocks:
        pending: dict[str, int] = {}  # register → the index of the load that writes it
        written: dict[int, list[str]] = {}  # load index → its registers (a read retires them all: linear)
        counts: dict[int, int] = {}
        for i in range(block.start, block.stop):
            e = effects(line_map.instructions[i])
            loads = {pending[r.name] for r in e.uses if r.name in pending}
            if loads:
                line = line_map.line_of[i]
                counts[line] = counts.get(line, 0) + len(loads)
                for load in loads:
                    for name in written.pop(load, ()):
                        if pending.get(name) == load:
                            del pending[name]
            long = any(m.access in ("load", "atomic") and m.space in LONG_LATENCY_SPACES for m in e.memory)
            for r in e.defs:
                if long:
                    pending[r.name] = i
                    written.setdefault(i, []).append(r.name)
                else:
                    pending.pop(r.name, None)
        out.append(tuple(sorted(counts.items())))
    return tuple(out)


def whole(shares: np.ndarray, total: int) -> np.ndarray:
    """Float shares in whole units adding up to `total`: floors, then one more to the largest
    remainders (ties to the lower index), as share_excess."""
    out = np.floor(np.asarray(shares, np.float64) + 1e-9).astype(np.uint64)
    left = int(total) - int(out.sum(dtype=np.uint64))
    if left > 0:
        order = np.argsort(-(shares - np.floor(shares + 1e-9)), kind="stable")[:left]
        out[order] += np.uint64(1)
    return out


def warp_cycles(thread_ticks: int | np.ndarray):
    """Thread-ticks → cycles of a 32-thread warp (spec/tools.md, lines: time)."""
    return thread_ticks * (1 << TICK_BITS) / WARP


# ---------------------------------------------------------------- the line table of a kernel


def table_of(line_map, calls=None) -> LineTable:
    """The kernel's line table: its lines, then (with `calls`, neutrino.isa.ptx.lines.called_lines)
    the lines of the .funcs it calls; per block, the instructions per line a thread entering it runs."""
    key_locs = list(zip(line_map.keys, line_map.key_loc))
    if calls is not None:
        key_locs += list(zip(calls.keys, calls.key_loc))
    lines = []
    for key, loc in key_locs:
        file, line, site = key
        label = f"{file or '?'}:{line}" if line else "(no line)"
        lines.append(LineInfo(label, file, line, loc.function if loc is not None and loc.inlined_at else None,
                              f"{site[0] or '?'}:{site[1]}" if site else None, 0, 0))
    static = np.zeros(len(lines), dtype=np.int64)
    regions = np.zeros(len(lines), dtype=np.int64)
    for region in line_map.regions:
        static[region.line] += region.stop - region.start
        regions[region.line] += 1
    if calls is not None:
        static[len(line_map.keys):] = calls.key_static
    lines = [attrs.evolve(info, instructions=int(static[i]), regions=int(regions[i])) for i, info in enumerate(lines)]
    block_lines = []
    for block in line_map.blocks:
        counts = line_map.line_counts(block)
        for line, n in (calls.block_counts[block.index].items() if calls is not None else ()):
            counts[line] = counts.get(line, 0) + n
        block_lines.append(tuple(sorted(counts.items())))
    guarded = tuple(b.index for b in line_map.blocks if b.guarded_anchor)
    return LineTable(tuple(lines), tuple(block_lines), guarded, calls.partial if calls is not None else (),
                     block_waits=block_load_waits(line_map))


@functools.lru_cache(maxsize=16)
def _table_cached(ptx_path: str, mtime: float, kernel: str) -> LineTable:
    from neutrino.isa.ptx import parse_module
    from neutrino.isa.ptx.lines import build_line_map, called_lines

    module_text = Path(ptx_path).read_text(errors="replace")
    module = parse_module(module_text, ptx_path)
    function = module.function(kernel)
    if function is None or not function.is_entry:
        raise ValueError(f"{ptx_path}: no entry {kernel!r} to rebuild the line map from")
    line_map = build_line_map(module, function)
    return with_sass(table_of(line_map, called_lines(module, line_map)), module_text, kernel)


SASS_SWITCH = "NEUTRINO_LINES_SASS"  # "0": no SASS instructions per line (no ptxas / nvdisasm run)


def with_sass(table: LineTable, ptx: str, kernel: str) -> LineTable:
    """The table with the kernel's SASS per line (spec/tools.md "lines", SASS instructions), or the reason why not."""
    from neutrino.tools.lines import sass

    if os.environ.get(SASS_SWITCH, "1") == "0":
        return attrs.evolve(table, sass_note=f"{SASS_SWITCH}=0")
    try:
        return attrs.evolve(table, sass=sass.sass_lines_of(ptx, kernel, table))
    except (sass.SassUnavailable, ValueError) as e:
        return attrs.evolve(table, sass_note=str(e))


def kernel_ptx(launch) -> Path:
    """The original.ptx of the launch's kernel: kernel/<k>_<hash>/ next to result/<k>_<hash>.ntr."""
    result = Path(launch.result_path)
    path = result.parent.parent / "kernel" / result.stem / "original.ptx"
    if not path.exists():
        raise ValueError(f"{path}: not found; the lines analysis rebuilds the kernel's line map from it")
    return path


def line_table(launch) -> LineTable:
    path = kernel_ptx(launch)
    return _table_cached(str(path), os.stat(path).st_mtime, launch.kernel)


def counters_result(map_name: str, counts: np.ndarray, table: LineTable) -> dict:
    """The figures of one map's folded counters (a hist's buckets, linear:0:N:1; a sum's fields):
    `instructions` (lines_blocks), `ticks` and `clamped` (lines_time), with `overflow` (not
    attributed); `total_ticks`, `excess` and (a map with the field) `probe_ticks` (lines_total)."""
    counts = np.asarray(counts, dtype=np.uint64)
    values = counts[1:-1]  # bucket 1 + v holds value v; bucket 0 (below 0) is always empty
    if map_name == "lines_blocks":
        per_line, extra = line_instructions(values, table)
        return {"instructions": tuple(int(v) for v in per_line), "overflow": extra + int(counts[-1]),
                "block_threads": tuple(int(v) for v in values[: len(table.block_lines)])}
    if map_name == "lines_time":
        ticks, clamped, overflow = line_ticks(values, len(table.lines))
        return {"ticks": tuple(int(v) for v in ticks), "clamped": int(clamped.sum()),
                "clamped_by_key": tuple(int(v) for v in clamped), "overflow": overflow + int(counts[-1])}
    if map_name == "block_time":
        ticks, clamped, overflow = line_ticks(values, len(table.block_lines))
        return {"block_ticks": tuple(int(v) for v in ticks), "clamped": int(clamped.sum()),
                "block_clamped_by_key": tuple(int(v) for v in clamped), "overflow": overflow + int(counts[-1])}
    if map_name == "lines_total":  # a sum map: its counters are the fields in order
        out = {"total_ticks": int(counts[0]), "excess": int(counts[1])}
        if len(counts) > 2:  # the `probe` field (tools from issue 27's probe-time change on)
            out["probe_ticks"] = int(counts[2])
        return out
    raise ValueError(f"map {map_name}: not a map of the lines tools ({', '.join(MAP_NAMES)})")


def analyze_launch(launch, md, probe_text: str | None = None) -> LaunchResult:
    kind = getattr(md, "type", "array")
    if kind != ("sum" if md.name == "lines_total" else "hist"):
        raise ValueError(f"map {md.name}: the lines analysis reads the hist maps and the lines_total sum map of "
                         f"the lines tools, not a {kind} map")
    table = line_table(launch)
    if kind == "sum":
        totals = md.totals()
        fields = ("ticks", "excess") + (("probe",) if "probe" in totals else ())
        counts = np.array([totals.get(name, 0) for name in fields], dtype=np.uint64)
    else:
        counts = md.histogram().counts
    figures = counters_result(md.name, counts, table)
    return LaunchResult(int(launch.index), launch.kernel, launch.duration_ns, md.name, table, **figures)


# ---------------------------------------------------------------- the kernel's lines, ranked


@attrs.frozen
class KernelLines:
    table: LineTable
    instructions: np.ndarray | None  # per line, Σ over launches
    ticks: np.ndarray | None  # per line + entry, Σ over launches, the clamped samples' excess shared in
    clamped: int
    overflow: int
    launches: int
    excess: int | None = None  # ticks past 4 of the clamped samples (None: a trace without lines_total)
    total_ticks: int | None = None  # thread-ticks from entry to exit, exact (None: no lines_total)
    block_threads: np.ndarray | None = None  # threads per basic block, Σ over launches (lines_blocks)
    time_by_block: bool = False  # ticks measured per block (lines_blocktime) and shared among its lines
    probe_ticks: int | None = None  # thread-ticks inside the probes, left out of the lines (None: not measured)

    def sass_instructions(self) -> tuple[np.ndarray, np.ndarray] | None:
        """SASS thread-instructions per line and whether each is exact (sass.sass_line_instructions); None
        without the kernel's machine code or block counts."""
        from neutrino.tools.lines import sass

        if self.table.sass is None or self.block_threads is None:
            return None
        return sass.sass_line_instructions(self.block_threads, self.table, self.table.sass)


def combine(results) -> KernelLines | None:
    """The launches of one kernel added up (launches of another PTX of the same name are left out)."""
    if not results:
        return None
    table = results[0].table
    same = [r for r in results if r.table == table]
    instr = [np.asarray(r.instructions, np.uint64) for r in same if r.instructions is not None]
    ticks = [np.asarray(r.ticks, np.uint64) for r in same if r.ticks is not None]
    totals = [r for r in same if r.total_ticks is not None]
    excess = sum(r.excess for r in totals) if totals else None
    ticks_sum = sum(ticks) if ticks else None
    if ticks_sum is not None and excess:
        clamped = sum(np.asarray(r.clamped_by_key, np.uint64) for r in same if r.clamped_by_key is not None)
        ticks_sum = ticks_sum + share_excess(clamped, excess)
    by_block = [r for r in same if r.block_ticks is not None]
    if ticks_sum is None and by_block:  # lines_blocktime: per-block ticks, shared among each block's lines
        block_ticks = sum(np.asarray(r.block_ticks, np.uint64) for r in by_block)
        if excess:
            block_ticks = block_ticks + share_excess(sum(np.asarray(r.block_clamped_by_key, np.uint64)
                                                         for r in by_block), excess)
        sass = table.sass.static if table.sass is not None else None
        ticks_sum = whole(block_ticks_to_lines(block_ticks, table, sass, table.block_waits), int(block_ticks.sum()))
    blocks = [np.asarray(r.block_threads, np.float64) for r in same if r.block_threads is not None]
    probed = [r.probe_ticks for r in totals if r.probe_ticks is not None]
    return KernelLines(table, sum(instr) if instr else None, ticks_sum,
                       sum(r.clamped for r in same), sum(r.overflow for r in same),
                       len({r.index for r in same}), excess, sum(r.total_ticks for r in totals) if totals else None,
                       sum(blocks) if blocks else None, bool(by_block) and not ticks, sum(probed) if probed else None)


def _share(value: float, total: float) -> str:
    return f"{100.0 * value / total:.1f}%" if total else "-"


def kernel_summary(results) -> dict[str, str]:
    k = combine(results)
    if k is None:
        return {}
    out = {"lines": str(len(k.table.lines))}
    if k.instructions is not None:
        total = int(k.instructions.sum())
        top = int(np.argmax(k.instructions)) if len(k.instructions) else None
        out["instructions (threads)"] = C.fmt_num(total)
        if top is not None:
            out["top line (instr)"] = f"{k.table.lines[top].label} {_share(int(k.instructions[top]), total)}"
    if k.ticks is not None:
        total = int(k.ticks.sum())
        top = int(np.argmax(k.ticks[1:])) if len(k.ticks) > 1 else None
        out["time (warp-cycles)"] = C.fmt_num(warp_cycles(total))
        if top is not None:
            out["top line (time)"] = f"{k.table.lines[top].label} {_share(int(k.ticks[top + 1]), total)}"
    return out


def kernel_numbers(results) -> dict:
    k = combine(results)
    if k is None:
        return {}
    out = {"lines": len(k.table.lines)}
    if k.instructions is not None:
        out["instructions"] = int(k.instructions.sum())
    if k.ticks is not None:
        out["warp_cycles"] = float(warp_cycles(int(k.ticks.sum())))
    return out


def ranked_rows(k: KernelLines, source=None, top: int = 20) -> tuple[list[str], list[list[str]]]:
    """The report's line table: lines by time (when measured), else by executed instructions."""
    n = len(k.table.lines)
    instr = k.instructions if k.instructions is not None else np.zeros(n, np.uint64)
    ticks = k.ticks if k.ticks is not None else np.zeros(n + 1, np.uint64)
    total_i, total_t = int(instr.sum()), int(ticks.sum())
    rank_t = _ranks(ticks[1:]) if k.ticks is not None else None
    rank_i = _ranks(instr) if k.instructions is not None else None
    order = np.argsort(-(ticks[1:].astype(np.float64) if k.ticks is not None else instr.astype(np.float64)), kind="stable")
    headers = ["line", "time rank", "time %", "warp-cycles", "instr rank", "instr %", "instructions", "SASS instr", "source"]
    derived = k.sass_instructions()
    rows = []
    for i in order[:top]:
        info = k.table.lines[i]
        if not instr[i] and not ticks[i + 1]:
            continue
        text = source(info) if source else ""
        marked = info.perturbed and k.ticks is not None and not k.time_by_block
        where = info.label + (f" (in {info.inlined_at})" if info.inlined_at else "") + ("~" if marked else "")
        rows.append([where, str(rank_t[i]) if rank_t is not None else "-", _share(int(ticks[i + 1]), total_t) if rank_t is not None else "-",
                     C.fmt_num(warp_cycles(int(ticks[i + 1]))) if rank_t is not None else "-",
                     str(rank_i[i]) if rank_i is not None else "-", _share(int(instr[i]), total_i) if rank_i is not None else "-",
                     C.fmt_num(int(instr[i])) if rank_i is not None else "-", _sass_cell(derived, i), text])
    if k.ticks is not None and ticks[0]:
        rows.append([ENTRY_LABEL, "-", _share(int(ticks[0]), total_t), C.fmt_num(warp_cycles(int(ticks[0]))), "-", "-", "-", "-", ""])
    return headers, rows


def _sass_cell(derived, line: int) -> str:
    """SASS thread-instructions of a line; `~` before an estimate (some of its SASS in no matched block)."""
    if derived is None:
        return "-"
    counts, exact = derived
    return ("" if exact[line] else "~") + C.fmt_num(int(round(counts[line])))


def _ranks(values: np.ndarray) -> np.ndarray:
    """1 for the largest; ties share the best rank."""
    values = np.asarray(values)
    order = np.argsort(-values.astype(np.float64), kind="stable")
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = np.arange(1, len(values) + 1)
    for v in np.unique(values):
        same = values == v
        ranks[same] = ranks[same].min()
    return ranks


class SourceFiles:
    """Source lines read once per file; a file that cannot be read shows nothing."""

    def __init__(self, search: tuple[str, ...] = ()):
        self.search = search
        self.files: dict[str, list[str] | None] = {}

    def __call__(self, info: LineInfo) -> str:
        if not info.file or info.line <= 0:
            return ""
        if info.file not in self.files:
            self.files[info.file] = self._read(info.file)
        lines = self.files[info.file]
        if not lines or info.line > len(lines):
            return ""
        text = lines[info.line - 1].strip()
        return text if len(text) <= 60 else text[:57] + "..."

    def _read(self, name: str) -> list[str] | None:
        for base in ("", *self.search):
            path = Path(base) / name if base else Path(name)
            try:
                return path.read_text(errors="replace").splitlines()
            except (OSError, ValueError):
                continue
        return None


PERTURBATION_NOTE = (
    "note: time is sampled in the kernel: every line region reads %clock64 and adds the 256-cycle ticks that "
    "passed since the previous region opened to the line that was running (warp-cycles = thread-ticks x 256 / 32). "
    "These probes sit between the line's instructions and change how the compiler schedules them: '~' marks lines "
    "with a probe per 3 instructions or more, whose time is inflated most. Executed instructions are exact and "
    "unperturbed (block-level counts); lines_light measures them alone at low cost.")


BLOCK_TIME_NOTE = (
    "note: time is sampled in the kernel at basic-block starts (lines_blocktime): every block start reads %clock64 "
    "and adds the 256-cycle ticks since the previous one to the block that was running; each block's ticks are "
    "shared among its lines by their SASS instructions (PTX instructions without ptxas/nvdisasm), a line that "
    "first reads a memory load's result in the block also taking the load's wait (32 instructions' worth): fewer probes "
    "than at every line region, and no probe between a block's lines (warp-cycles = thread-ticks x 256 / 32).")


def details(kernel: str, results, format_table, search: tuple[str, ...] = ()) -> list[str]:
    """The report's per-kernel line table (after the tool's summary row), with the perturbation note."""
    k = combine(results)
    if k is None:
        return []
    headers, rows = ranked_rows(k, SourceFiles(search))
    out = ["", f"[lines: {kernel}] {k.launches} launch(es)"]
    out.append(format_table(headers, rows, left=(0, 8)) if rows else "(no line executed)")
    if all(info.line == 0 for info in k.table.lines):
        out.append("note: this kernel's PTX has no .loc debug lines: compile CUDA with -lineinfo "
                   "(Triton always writes them); every instruction is under (no line)")
    if k.overflow:
        out.append(f"note: {C.fmt_num(k.overflow)} samples or threads had a block or line index past the map's "
                   "buckets (a kernel with over 254 blocks or 126 lines) and are not attributed")
    if k.clamped and k.excess is None:
        out.append(f"note: {C.fmt_num(k.clamped)} time samples spanned 4 ticks or more and count as 4 (a lower bound)")
    elif k.clamped:
        out.append(f"note: {C.fmt_num(k.clamped)} time samples spanned 4 ticks or more; their {C.fmt_num(k.excess)} "
                   "ticks past 4 are shared among their lines by clamped samples (an estimate per line; the total "
                   "is exact)")
    if k.table.partial_calls and k.instructions is not None:
        out.append(f"note: called {', '.join(k.table.partial_calls)}: counted only in part (the first basic block of "
                   "each called .func runs once per unguarded call and is counted; its later blocks, guarded, "
                   "indirect and recursive calls are not)")
    if k.table.guarded_blocks and k.instructions is not None:
        out.append(f"note: {len(k.table.guarded_blocks)} block(s) have only guarded instructions: their threads are "
                   "counted when the first one's guard holds")
    if k.instructions is not None:
        out.append(_sass_note(k))
    if k.ticks is not None:
        out.append(BLOCK_TIME_NOTE if k.time_by_block else PERTURBATION_NOTE)
    if k.ticks is not None and k.probe_ticks is not None:
        out.append(probe_time_note(k))
    return out


def probe_time_note(k: KernelLines) -> str:
    """The probes' own time, left out of every line (spec/tools.md "lines": probe time)."""
    share = _share(k.probe_ticks, k.total_ticks) if k.total_ticks else "-"
    return (f"note: the probes' own time is left out of the lines: every region (block) start reads %clock64 "
            f"before its probes, closing the region that ran, and again after them, opening the next; the "
            f"{C.fmt_num(warp_cycles(k.probe_ticks))} warp-cycles between those reads are {share} of the kernel's "
            "entry-to-exit time under the probes")


def _sass_note(k: KernelLines) -> str:
    if k.table.sass is None:
        return f"note: SASS instr: not derived ({k.table.sass_note})"
    sass = k.table.sass
    return (f"note: SASS instr = machine instructions per line of the original kernel (ptxas -lineinfo, nvdisasm) "
            f"weighted by the exact block counts: {sass.matched_blocks} of {sass.sass_blocks} SASS blocks matched to "
            "a PTX block (exact); '~': the line's other SASS instructions counted as often as its PTX "
            "instructions on average (an estimate)")


# ---------------------------------------------------------------- a table per line, for Parquet / CSV


LINE_COLUMNS = ("kernel", "file", "line", "inlined_at", "function", "instructions", "thread_ticks", "warp_cycles",
                "static_instructions", "perturbed", "sass_instructions", "sass_exact")


def line_records(report_) -> list[dict]:
    """One row per kernel and line of a report (`neutrino.analysis.report.analyze`), columns LINE_COLUMNS;
    `instructions` / `thread_ticks` are None when the trace has no such map; the kernel entry is line 0."""
    rows = []
    for entry in report_.kernels.values():
        k = combine(entry.results.get("lines", []))
        if k is None:
            continue
        if k.ticks is not None:
            rows.append(dict(kernel=entry.kernel, file=None, line=0, inlined_at=None, function=ENTRY_LABEL,
                             instructions=None, thread_ticks=int(k.ticks[0]), warp_cycles=float(warp_cycles(int(k.ticks[0]))),
                             static_instructions=0, perturbed=False, sass_instructions=None, sass_exact=None))
        derived = k.sass_instructions()
        for i, info in enumerate(k.table.lines):
            ticks = int(k.ticks[i + 1]) if k.ticks is not None else None
            rows.append(dict(kernel=entry.kernel, file=info.file, line=info.line, inlined_at=info.inlined_at,
                             function=info.function,
                             instructions=int(k.instructions[i]) if k.instructions is not None else None,
                             thread_ticks=ticks, warp_cycles=None if ticks is None else float(warp_cycles(ticks)),
                             static_instructions=info.instructions, perturbed=info.perturbed,
                             sass_instructions=None if derived is None else float(derived[0][i]),
                             sass_exact=None if derived is None else bool(derived[1][i])))
    return rows


def main(argv=None) -> int:
    """`python -m neutrino.tools.lines.analysis TRACE [--parquet OUT.parquet | --csv OUT.csv]`: the per-line table."""
    import argparse
    import sys

    from neutrino.analysis import report

    ap = argparse.ArgumentParser(prog="python -m neutrino.tools.lines.analysis", description=main.__doc__)
    ap.add_argument("trace")
    ap.add_argument("--parquet")
    ap.add_argument("--csv")
    args = ap.parse_args(argv)
    try:
        trace, launches = report.load_trace(args.trace)
    except C.AnalysisError as e:
        print(f"neutrino: {e}", file=sys.stderr)
        return 1
    rows = line_records(report.analyze(trace, launches))
    if not rows:
        print(f"neutrino: {args.trace}: no lines or lines_light map in this trace", file=sys.stderr)
        return 1
    if args.parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), args.parquet)
    if args.csv or not args.parquet:
        import csv

        out = open(args.csv, "w", newline="") if args.csv else sys.stdout
        writer = csv.DictWriter(out, LINE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
        if args.csv:
            out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
