"""The probes' own time is left out of the lines (issue 27; spec/tools.md "lines", probe time).

`lines` and `lines_blocktime` read the clock twice at every anchor: once before its probes (closing
the region or block that ran) and once after them (opening the next). What lies between an opening
read and the next closing read is the kernel's own code; what lies between a closing and an opening
read is the probes'. Checked on the instrumented PTX (every interval between two clock reads is one
or the other), on a cost model of one thread's run whose per-line cycles are known by construction,
and in the analysis (the probe ticks kept apart, the total exact). The tools before this change
(benchmarks/lines_before/) fail the first two checks: their block counts fell into the line before.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from neutrino.analysis import report
from neutrino.analysis.synthetic import RunBuilder, counters_section, hist_info
from neutrino.engine import instrument
from neutrino.isa.ptx import parse_module
from neutrino.isa.ptx.lines import build_line_map
from neutrino.tools.lines import analysis as la
from neutrino.toolbox import load_probes
from tests.helpers import HAVE_PTXAS, ptxas

DATA = Path(__file__).parent / "data" / "lines"
ROOT = Path(__file__).resolve().parents[1]
BEFORE = {"lines": ROOT / "benchmarks" / "lines_before" / "lines_probe_time_in.py",
          "lines_blocktime": ROOT / "benchmarks" / "lines_before" / "blocktime_probe_time_in.py"}
KERNELS = ["loop.ptx", "nested.ptx", "noinline_lineinfo.ptx"]
CLOCK = "%clock64"
# probe work that costs more than an ALU step: memory, warp-wide and control instructions
HEAVY = re.compile(r"^\s*(@\S+\s+)?(red|atom|st|ld|vote|match|activemask|redux|shfl|bar|bra|popc)\b")


def entry_lines(ptx: str) -> list[str]:
    """The lines of the instrumented entry function (from `.entry` to its closing brace; .funcs are not probed)."""
    lines = ptx.splitlines()
    start = next(i for i, line in enumerate(lines) if ".entry" in line)
    depth, out = 0, []
    for line in lines[start:]:
        out.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0 and "}" in line:
            break
    return out


def is_instruction(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith((".", "//", "{", "}", ")", "(")) and not stripped.endswith(":") \
        and stripped.endswith(";")


def intervals(lines: list[str]) -> list[list[str]]:
    """The instructions of the kernel's body between consecutive clock reads (the reads left out)."""
    out, current = [], []
    for line in lines:
        if not is_instruction(line):
            continue
        if CLOCK in line:
            out.append(current)
            current = []
        else:
            current.append(line.strip())
    out.append(current)
    return out


def mixed_intervals(lines: list[str]) -> list[list[str]]:
    """Intervals holding the kernel's own instructions (no `%nt_` register) and heavy probe work too.
    The kernel's `ret`/`exit` come after the exit probe's records by design (its time is not measured); the
    barriers of the staged maps (entry, exit) name no register (these kernels have none of their own)."""
    bad = []
    for interval in intervals(lines):
        own = [i for i in interval if "%nt_" not in i and not re.match(r"^(@\S+\s+)?(ret|exit|bar|membar)\b", i)]
        heavy = [i for i in interval if "%nt_" in i and HEAVY.match(i)]
        if own and heavy:
            bad.append(interval)
    return bad


@pytest.mark.parametrize("tool", ["lines", "lines_blocktime"])
@pytest.mark.parametrize("name", KERNELS)
def test_no_probe_work_between_a_regions_clock_reads(tool, name):
    text = (DATA / name).read_text()
    result = instrument(text, load_probes(tool), source=name)
    lines = entry_lines(result.ptx)
    assert mixed_intervals(lines) == []
    if tool == "lines":  # two reads per region, one at entry and one per exit
        module = parse_module(text, name)
        function = next(iter(module.entries()))
        regions = len(build_line_map(module, function).regions)
        exits = sum(1 for line in lines if re.match(r"^\s*(@\S+\s+)?(ret|exit)\s*;", line))
        assert sum(CLOCK in line for line in lines) == 1 + 2 * regions + exits
    if HAVE_PTXAS:
        ptxas(result.ptx, "sm_90")


@pytest.mark.parametrize("tool", ["lines", "lines_blocktime"])
def test_the_tools_before_put_block_counts_into_the_line_before(tool):
    """The check above catches the earlier probes (one read per anchor, the block count before it)."""
    lines = entry_lines(instrument((DATA / "loop.ptx").read_text(), load_probes(str(BEFORE[tool])), source="loop.ptx").ptx)
    bad = mixed_intervals(lines)
    assert bad and any("lines_blocks" in i for interval in bad for i in interval)
    if tool == "lines":  # and every region's time held the record of the one before
        assert len(bad) >= len(build_line_map(*_module_and_entry((DATA / "loop.ptx").read_text())).regions)


def _module_and_entry(text: str):
    module = parse_module(text, "k.ptx")
    return module, next(iter(module.entries()))


# ---------------------------------------------------------------- the definition, on a run known by construction


LOOP = DATA / "loop.ptx"  # line indices: 0 = kern.py:10 (block 0), 1 = :12 and 2 = :13 (block 1, the loop), 3 = :15
LINES_TOTAL3 = {"name": "lines_total", "level": "thread", "type": "sum", "record_bytes": 24, "cap": 1,
                "fields": [{"name": "ticks", "type": "u64", "offset": 0}, {"name": "excess", "type": "u64", "offset": 8},
                           {"name": "probe", "type": "u64", "offset": 16}]}


def one_thread(regions, probe_ticks: int, block_ticks: int, probe_time_apart: bool):
    """The maps one thread of `lines` fills over `regions` = [(line, own ticks, starts a block)], the clock in whole
    ticks: every anchor's probes take `probe_ticks`, a block count `block_ticks` more. With `probe_time_apart` (the
    tool now) the anchor reads the clock before and after its probes; without (before) once, after the block count.
    Returns (lines_time samples by key, (total, excess, probe))."""
    samples: dict[int, int] = {}
    clock = last = 0
    current, excess, probe = 0, 0, 0

    def close(now):
        nonlocal excess
        ticks = now - last
        if ticks:
            excess += max(ticks - 4, 0)
            key = current * 4 + min(ticks, 4) - 1
            samples[key] = samples.get(key, 0) + 1

    for line, own, starts_block in regions:
        if probe_time_apart:  # read, record, count the block, read: the new region opens at the second read
            close(clock)
            closed = clock
            clock += probe_ticks + (block_ticks if starts_block else 0)
            probe += clock - closed
            last = clock
        else:  # count the block, read (the new region opens there), record
            clock += block_ticks if starts_block else 0
            close(clock)
            last = clock
            clock += probe_ticks
        current = line + 1
        clock += own
    close(clock)
    return samples, (clock, excess, probe)


@pytest.mark.parametrize("apart", [True, False])
def test_line_time_is_the_lines_own_time_known_by_construction(tmp_path, monkeypatch, apart):
    """loop.ptx, 32 threads, 3 trips: own ticks per execution line 10: 1, line 12: 1, line 13: 2, line 15: 1; each
    anchor's probes 1 tick, a block count 1 more (no interval past 4 ticks: no estimate). Measured apart, every line
    gets its own ticks and the probes theirs; before, a line also got the probe that opened it and the block count of
    the block after it (lines 10 and 13), which is how lines of few instructions were ranked by their probes."""
    monkeypatch.setenv(la.SASS_SWITCH, "0")
    threads, trips = 32, 3
    regions = [(0, 1, True)] + [(1, 1, True), (2, 2, False)] * trips + [(3, 1, True)]
    samples, totals = one_thread(regions, 1, 1, apart)
    run = RunBuilder(tmp_path / "run")
    blocks_info, time_info = hist_info("lines_blocks", "linear:0:254:1"), hist_info("lines_time", "linear:0:510:1")
    k = run.add_kernel("loopk", [blocks_info, time_info, LINES_TOTAL3])
    (next((tmp_path / "run" / "kernel").glob(f"{k}_*")) / "original.ptx").write_text(LOOP.read_text())
    blocks = np.zeros(256, np.uint64)
    blocks[1:4] = (threads, threads * trips, threads)
    hist = np.zeros(512, np.uint64)
    for key, count in samples.items():
        hist[1 + key] = count * threads
    run.events[0]["probe"] = "lines"
    run.launch("loopk", (1, 1, 1), (threads, 1, 1), [counters_section(blocks_info, blocks), counters_section(time_info, hist),
                                                      counters_section(LINES_TOTAL3, [v * threads for v in totals])],
               duration_ns=1000.0)
    trace, launches = report.load_trace(str(run.close()))
    rep = report.analyze(trace, launches)
    kl = la.combine(rep.kernels["loopk"].results["lines"])
    own = [0, 1, 1 * trips, 2 * trips, 1]
    if apart:
        assert list(kl.ticks) == [t * threads for t in own]
        anchors, block_anchors = len(regions), sum(1 for *_, b in regions if b)
        assert kl.probe_ticks == (anchors + block_anchors) * threads and kl.clamped == 0
        assert int(kl.ticks.sum()) + kl.probe_ticks == kl.total_ticks
        assert "the probes' own time is left out of the lines" in report.render(rep)
    else:  # the probe's 3 ticks after each read go to the line that opens, a block count to the line (or entry) before
        assert list(kl.ticks) == [t * threads for t in [1, 1 + 1 + 1, (1 + 1) * trips, (1 + 2 + 1) * trips, 1 + 1]]
        assert kl.probe_ticks == 0 and kl.excess == 0


# ---------------------------------------------------------------- lines_blocktime: a load's wait goes to the line that waits


WAITS_PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry w(.param .u64 p)
{
.reg .b64 %rd<6>; .reg .b32 %r<12>; .reg .f32 %f<9>; .reg .pred %q<3>;
.loc 1 2 1
ld.param.u64 %rd1, [p];
mov.u32 %r1, %tid.x;
.loc 1 3 1
ld.global.f32 %f1, [%rd1];
ld.global.v2.f32 {%f2, %f3}, [%rd1+8];
ld.global.f32 %f4, [%rd1+16];
ld.shared.f32 %f5, [%rd1];
.loc 1 4 1
add.f32 %f6, %f3, %f5;
add.f32 %f7, %f2, %f6;
mov.f32 %f4, 0f00000000;
.loc 1 5 1
setp.gt.f32 %q1, %f1, %f4;
@%q1 bra $L_done;
.loc 1 6 1
ld.global.f32 %f8, [%rd1+24];
$L_done:
.loc 1 7 1
st.global.f32 [%rd1], %f8;
ret;
}
.file 1 "w.cu"
"""


def test_load_waits_go_to_the_first_reader_in_the_block():
    """Block 0: line 3 loads %f1, {%f2, %f3} and %f4 from global memory and %f5 from shared memory; line 4 first reads
    the vector load (one wait for both registers; %f5's shared load is not off-SM); %f4 is overwritten unread; line 5
    first reads %f1. Block 1's load (line 6) is read in block 2 only: its wait is in no block's own time."""
    module = parse_module(WAITS_PTX, "w.ptx")
    line_map = build_line_map(module, module.function("w"))
    waits = la.block_load_waits(line_map)
    lines_of = [key[1] for key in line_map.keys]
    assert [[(lines_of[line], n) for line, n in block] for block in waits] == [[(4, 1), (5, 1)], [], []]


def test_block_time_goes_to_the_line_that_waits():
    """One block, lines 0 (5 SASS), 1 (3 SASS, the first reader of one load): 370 ticks shared 5 : 3 + 32 = 5 : 35."""
    table = la.LineTable((la.LineInfo("f:1", "f", 1, None, None, 5, 1), la.LineInfo("f:2", "f", 2, None, None, 3, 1)),
                         (((0, 5), (1, 3)),), (), block_waits=(((1, 1),),))
    assert la.LOAD_WAIT_WEIGHT == 32
    shares = la.block_ticks_to_lines([0, 370], table, (5, 3), table.block_waits)
    assert list(shares) == pytest.approx([0, 370 * 5 / 40, 370 * 35 / 40])
    assert list(la.block_ticks_to_lines([0, 370], table, (5, 3))) == pytest.approx([0, 370 * 5 / 8, 370 * 3 / 8])


HEAVY_SASS = re.compile(r"\b(ATOMS|ATOMG|REDG|RED|MATCH|VOTE|VOTEU|BAR|REDUX)\b")


def sass_intervals(ptx: str, kernel: str) -> str | None:
    """The kernel's machine code (ptxas sm_90, nvdisasm) cut at its clock reads, in address order: one character per
    interval, `H` when it holds an atomic, reduction, vote, match or barrier (probe work), `.` otherwise."""
    import subprocess
    import tempfile

    from neutrino.tools.lines import sass

    nvdisasm = sass.find_nvdisasm()
    if nvdisasm is None or not HAVE_PTXAS:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "k.ptx").write_text(ptx)
        subprocess.run(["ptxas", "-arch=sm_90", f"{tmp}/k.ptx", "-o", f"{tmp}/k.cubin"], check=True)
        text = subprocess.run([nvdisasm, "-c", f"{tmp}/k.cubin"], capture_output=True, text=True, check=True).stdout
    section = text.split(f".text.{kernel}:", 1)[1].split("//----", 1)[0]
    code = [line for line in section.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", line)]
    reads = [i for i, line in enumerate(code) if "SR_CLOCKLO" in line]
    return "".join("H" if any(HEAVY_SASS.search(line) for line in code[a + 1:b]) else "." for a, b in zip(reads, reads[1:]))


@pytest.mark.parametrize("tool", ["lines", "lines_blocktime"])
@pytest.mark.parametrize("name", ["loop.ptx", "nested.ptx", "noinline_lineinfo.ptx"])
def test_ptxas_keeps_probe_work_out_of_the_kernels_intervals(tool, name):
    """After ptxas: the entry's interval and every region's (block's) own interval, from its opening clock read to the
    next read, hold no probe work; the tools before had probe work in every interval."""
    text = (DATA / name).read_text()
    module, function = _module_and_entry(text)
    line_map = build_line_map(module, function)
    anchors = len(line_map.regions) if tool == "lines" else len(line_map.blocks)
    now = sass_intervals(instrument(text, load_probes(tool), source=name).ptx, function.name)
    if now is None:
        pytest.skip("needs ptxas and nvdisasm")
    before = sass_intervals(instrument(text, load_probes(str(BEFORE[tool])), source=name).ptx, function.name)
    assert now.startswith(".H.") and ".." not in now and before.count(".") == 0
    if name == "nested.ptx":  # a guarded exit mid-kernel: its exit probe's flush shares an interval with a region's
        assert now.count(".") >= anchors
    else:
        assert now.count(".") == 1 + anchors
