"""The line map (.file/.loc), positions by source line, the `lines` tools and their analysis
(spec/ir.md "Line map", spec/probe-toml.md "Positions", spec/tools.md "lines")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from neutrino import analysis
from neutrino.tools.lines import analysis as la
from neutrino.analysis import report
from neutrino.analysis.synthetic import RunBuilder, counters_section, hist_info
from neutrino.engine import instrument
from neutrino.errors import ProbeError
from neutrino.isa.ptx import parse_module
from neutrino.isa.ptx.lines import build_line_map, parse_line_ranges
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probes
from tests.helpers import HAVE_PTXAS, ptxas

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "ptx"
if not CORPUS.exists():
    CORPUS = Path("/work/shared/corpus/ptx")
WITH_LOC = sorted(p for p in CORPUS.glob("*/*.ptx") if ".loc" in p.read_text())
LOOP = Path(__file__).parent / "data" / "lines" / "loop.ptx"
ROOT = Path(__file__).resolve().parents[1]


def line_map_of(path: Path, entry: int = 0):
    module = parse_module(path.read_text(), str(path))
    return module, build_line_map(module, module.entries()[entry])


# ---------------------------------------------------------------- the line map


@pytest.mark.skipif(not WITH_LOC, reason="no corpus with .loc")
@pytest.mark.parametrize("path", WITH_LOC, ids=lambda p: p.name)
def test_line_map_partitions_every_corpus_kernel(path):
    module = parse_module(path.read_text(), str(path))
    for function in module.entries():
        lm = build_line_map(module, function)
        n = len(lm.instructions)
        assert lm.has_lines()
        # blocks and regions tile the instructions, in order; every anchor lies in its unit
        assert [b.start for b in lm.blocks][0] == 0 and lm.blocks[-1].stop == n
        assert all(a.stop == b.start for a, b in zip(lm.blocks, lm.blocks[1:]))
        assert sum(r.stop - r.start for r in lm.regions) == n
        for r in lm.regions:
            assert r.start <= r.anchor < r.stop and lm.blocks[r.block].start <= r.start < lm.blocks[r.block].stop
            assert {lm.line_of[i] for i in range(r.start, r.stop)} == {r.line}
        # a block ends after every branch, return and exit
        for b in lm.blocks:
            assert all(i.opcode.base not in ("bra", "ret", "exit") for i in lm.instructions[b.start:b.stop - 1])
        # each line key is the file and line of a .loc of the text
        locs = set(re.findall(r"\.loc\s+(\d+)\s+(\d+)", path.read_text()))
        files = dict(re.findall(r'\.file\s+(\d+)\s+"([^"]+)"', path.read_text()))
        for file, line, _ in lm.keys:
            assert line == 0 or (next(k for k, v in files.items() if v == file), str(line)) in locs


def test_inlined_lines_carry_their_function_and_call_site():
    module, lm = line_map_of(CORPUS / "nvcc" / "reduce_lineinfo.sm90.ptx")
    inlined = [loc for loc in lm.key_loc if loc is not None and loc.inlined_at]
    assert inlined and all(loc.function for loc in inlined)
    shfl = next(loc for loc in inlined if loc.position.line == 440)
    assert "shfl_down_sync" in shfl.function and str(shfl.position) == "cuda/include/sm_30_intrinsics.hpp:440:9"
    assert (shfl.inlined_at[0].file, shfl.inlined_at[0].line) == ("reduce.cu", 6)
    # the same header line inlined at two call sites is two lines
    keys = [k for k in lm.keys if k[:2] == ("cuda/include/sm_30_intrinsics.hpp", 440)]
    assert {k[2] for k in keys} == {("reduce.cu", 6), ("reduce.cu", 11)}


def test_loop_kernel_blocks_and_regions():
    _, lm = line_map_of(LOOP)
    assert [(b.start, b.stop) for b in lm.blocks] == [(0, 4), (4, 10), (10, 12)]
    assert [k[1] for k in lm.keys] == [10, 12, 13, 15]
    assert [(r.block, r.line, r.stop - r.start) for r in lm.regions] == [(0, 0, 4), (1, 1, 2), (1, 2, 4), (2, 3, 2)]
    assert not any(b.guarded_anchor for b in lm.blocks)


def test_line_ranges_parse_and_refuse():
    (a, b) = parse_line_ranges("attn.py:40-60,72")
    assert (a.file, a.first, a.last, b.file, b.first, b.last) == ("attn.py", 40, 60, "attn.py", 72, 72)
    for bad in ("x.py:", "40-30", "a:b", ""):
        with pytest.raises(ValueError):
            parse_line_ranges(bad)


# ---------------------------------------------------------------- positions by line


def test_position_at_lines_matches_only_those_lines():
    probes = parse_probes('[map.m]\ntype = "sum"\nfields = ["n:u64"]\n[probe.p]\nposition = "add:mul @ loop.py:12"\n'
                          'before = "SAVE [ m ] {1};"\n', "p.toml")
    probes.probes[0].lines = parse_line_ranges("kern.py:12")
    result = instrument(LOOP.read_text(), probes, source=str(LOOP))
    assert result.kernels["loopk"]["matched"] == {"p": 2}  # add and mul of line 12, not the add of line 13
    probes.probes[0].lines = parse_line_ranges("kern.py:12-13")
    assert instrument(LOOP.read_text(), probes, source=str(LOOP)).kernels["loopk"]["matched"] == {"p": 3}


def test_position_with_a_bad_line_range_is_refused_with_its_line():
    with pytest.raises(ProbeError) as e:
        parse_probes('[probe.p]\nposition = "add @ k.py:9-3"\nbefore = ".reg .b32 %a; mov.u32 %a, 1;"\n', "p.toml")
    assert "p.toml:2" in str(e.value) and "ends before it starts" in str(e.value)
    with pytest.raises(ProbeError) as e:
        parse_probes('[probe.p]\nposition = "kernel @ k.py:3"\nbefore = ".reg .b32 %a; mov.u32 %a, 1;"\n', "p.toml")
    assert "not with position" in str(e.value)


def test_block_and_line_positions_and_helpers():
    probes = parse_probes('[map.b]\ntype = "hist"\nbuckets = "linear:0:16:1"\n[map.l]\ntype = "hist"\n'
                          'buckets = "linear:0:16:1"\n[probe.pb]\nposition = "block"\nbefore = "SAVE [ b ] {BLOCK};"\n'
                          '[probe.pl]\nposition = "line"\nbefore = "SAVE [ l ] {LINE};"\n', "p.toml")
    result = instrument(LOOP.read_text(), probes, source=str(LOOP))
    assert result.kernels["loopk"]["matched"] == {"pb": 3, "pl": 4}
    if HAVE_PTXAS:
        ptxas(result.ptx)


def test_cli_lines_option(tmp_path):
    out = tmp_path / "o.ptx"
    info = tmp_path / "i.json"
    run = [sys.executable, "-m", "neutrino", "instrument", str(LOOP), "-e", 'position = "add", before = ".reg .b32 %a; mov.u32 %a, 1;"',
           "-o", str(out), "--info", str(info)]
    done = subprocess.run(run + ["--lines", "kern.py:13"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(info.read_text())["kernels"]["loopk"]["matched"] == {"inline": 1}
    bad = subprocess.run(run + ["--lines", "kern.py:x"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode != 0 and "--lines: malformed line range" in bad.stderr and "Traceback" not in bad.stderr


# ---------------------------------------------------------------- the tools on the corpus


@pytest.mark.parametrize("tool", ["lines", "lines_light", "lines_blocktime"])
@pytest.mark.parametrize("path", WITH_LOC, ids=lambda p: p.name)
def test_tools_assemble_on_every_corpus_kernel_with_loc(tool, path):
    probes = load_probes(tool)
    result = instrument(path.read_text(), probes, source=str(path))
    module = parse_module(path.read_text(), str(path))
    for function in module.entries():
        lm = build_line_map(module, function)
        matched = result.kernels[function.name]["matched"]
        assert matched["count_and_tick_block" if tool == "lines_blocktime" else "count_block"] == len(lm.blocks)
        if tool == "lines":  # two probes at every region start: the clock read that closes, the one that opens
            assert matched["close_region"] == matched["open_region"] == len(lm.regions)
        assert not result.kernels[function.name]["skipped"]
    if HAVE_PTXAS:
        ptxas(result.ptx)


def test_dsl_position_with_lines():
    import neutrino.language as nl

    text = nl.compile_source('from neutrino import Map, probe\nimport neutrino.language as nl\n'
                             '@Map(type="hist", buckets="linear:0:8:1")\nclass m:\n    pass\n'
                             '@probe(pos="add:xor @ kern.py:13", level="thread", before=True)\ndef p():\n'
                             '    m.record(nl.line)\n', "p.py")
    probes = parse_probes(text, "p.toml")
    assert probes.probes[0].lines == parse_line_ranges("kern.py:13")
    result = instrument(LOOP.read_text(), probes, source=str(LOOP))
    assert result.kernels["loopk"]["matched"] == {"p": 2}
    assert "SAVE [" not in result.ptx and re.search(r"cvt.u64.u32\s+%\S+, 2;", result.ptx)  # LINE of line 13 is 2


# ---------------------------------------------------------------- the analysis, known answers


LINES_TOTAL = {"name": "lines_total", "level": "thread", "type": "sum", "record_bytes": 16, "cap": 1,
               "fields": [{"name": "ticks", "type": "u64", "offset": 0}, {"name": "excess", "type": "u64", "offset": 8}]}


def loop_trace(tmp_path, threads: int, trips: int, time_values: dict[int, int], totals=None) -> Path:
    """A run of the loop kernel: block 0 and 2 once per thread, block 1 `trips` times; with
    `totals` = (ticks, excess), a lines_total map too."""
    run = RunBuilder(tmp_path / "run")
    blocks_info, time_info = hist_info("lines_blocks", "linear:0:254:1"), hist_info("lines_time", "linear:0:510:1")
    k = run.add_kernel("loopk", [blocks_info, time_info] + ([LINES_TOTAL] if totals else []))
    kdir = next((tmp_path / "run" / "kernel").glob(f"{k}_*"))
    (kdir / "original.ptx").write_text(LOOP.read_text())
    blocks = np.zeros(256, np.uint64)
    blocks[1 + 0], blocks[1 + 1], blocks[1 + 2] = threads, threads * trips, threads
    samples = np.zeros(512, np.uint64)
    for value, count in time_values.items():
        samples[1 + value] = count
    run.events[0]["probe"] = "lines"
    sections = [counters_section(blocks_info, blocks), counters_section(time_info, samples)]
    if totals:
        sections.append(counters_section(LINES_TOTAL, totals))
    run.launch("loopk", (1, 1, 1), (threads, 1, 1), sections, duration_ns=1000.0)
    return run.close()


def test_instructions_per_line_are_exact(tmp_path):
    threads, trips = 64, 10
    # line index 2 (kern.py:13): 100 samples of 1 tick and 10 of 4+; entry: 5 of 2 ticks; line 0: 3 of 1
    time_values = {(2 + 1) * 4 + 0: 100, (2 + 1) * 4 + 3: 10, 0 * 4 + 1: 5, (0 + 1) * 4 + 0: 3}
    path = loop_trace(tmp_path, threads, trips, time_values)
    trace, launches = report.load_trace(str(path))
    rep = report.analyze(trace, launches)
    results = rep.kernels["loopk"].results["lines"]
    k = la.combine(results)
    assert list(k.instructions) == [4 * threads, 2 * trips * threads, 4 * trips * threads, 2 * threads]
    assert list(k.ticks) == [10, 3, 0, 100 + 40, 0] and k.clamped == 10 and k.overflow == 0
    numbers = la.kernel_numbers(results)
    assert numbers == {"lines": 4, "instructions": (4 + 2 * trips + 4 * trips + 2) * threads,
                       "warp_cycles": 153 * 256 / 32}
    summary = la.kernel_summary(results)
    assert summary["top line (instr)"] == f"kern.py:13 {100 * 4 * trips / (6 + 6 * trips):.1f}%"
    assert summary["top line (time)"] == f"kern.py:13 {100 * 140 / 153:.1f}%"


def test_clamped_samples_excess_is_shared_and_the_total_is_exact(tmp_path):
    # line 1 (index 1): 6 clamped samples, line 2: 3 clamped samples, entry: 3 samples of 1 tick.
    # True ticks: line 1 six samples of 10 (60), line 2 three of 5 (15), entry 3: total 78.
    # Counted as 4: 24 + 12 + 3 = 39; excess = 36 + 3 = 39, shared 6 : 3 → 26 and 13.
    time_values = {(1 + 1) * 4 + 3: 6, (2 + 1) * 4 + 3: 3, 0: 3}
    path = loop_trace(tmp_path, 32, 2, time_values, totals=(78, 39))
    trace, launches = report.load_trace(str(path))
    rep = report.analyze(trace, launches)
    k = la.combine(rep.kernels["loopk"].results["lines"])
    assert list(k.ticks) == [3, 0, 24 + 26, 12 + 13, 0]
    assert int(k.ticks.sum()) == k.total_ticks == 78 and k.excess == 39 and k.clamped == 9
    text = report.render(rep)
    assert "their 39 ticks past 4 are shared among their lines" in text


def test_report_ranks_lines_with_source_text(tmp_path, monkeypatch):
    path = loop_trace(tmp_path, 32, 5, {(1 + 1) * 4: 7, (2 + 1) * 4: 20})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kern.py").write_text("".join(f"source of line {i}\n" for i in range(1, 30)))
    trace, launches = report.load_trace(str(path))
    text = report.render(report.analyze(trace, launches))
    body = text[text.index("[lines: loopk]"):].splitlines()
    first, second = body[3], body[4]
    assert first.startswith("kern.py:13") and "source of line 13" in first and " 1 " in first
    assert second.startswith("kern.py:12") and "source of line 12" in second
    assert "thread-ticks x 256 / 32" in text  # the perturbation note


def test_pure_functions_on_hand_built_inputs():
    table = la.LineTable(tuple(la.LineInfo(f"f:{i}", "f", i, None, None, 1, 1) for i in range(3)),
                         (((0, 2), (1, 1)), ((2, 5),)), ())
    per_line, extra = la.line_instructions(np.array([3, 4, 9]), table)  # block 2 is past the table
    assert list(per_line) == [6, 3, 20] and extra == 9
    ticks, clamped, overflow = la.line_ticks(np.array([1, 0, 0, 2, 0, 1] + [0] * 10 + [7]), 3)
    assert list(ticks) == [1 + 8, 2, 0, 0] and list(clamped) == [2, 0, 0, 0] and overflow == 7
    # 10 excess ticks over clamped samples 1 : 2 : 0 : 3 → 10/6 x (1, 2, 0, 3) = 1.67, 3.33, 0, 5 → 2, 3, 0, 5
    assert list(la.share_excess(np.array([1, 2, 0, 3]), 10)) == [2, 3, 0, 5]
    assert list(la.share_excess(np.array([0, 0]), 7)) == [0, 0] and list(la.share_excess(np.array([4, 1]), 0)) == [0, 0]
    assert list(la._ranks(np.array([5, 9, 5, 1]))) == [2, 1, 2, 4]


def test_lines_is_a_builtin_tool_with_an_analysis():
    from neutrino import toolbox

    assert toolbox.analysis(toolbox.get("lines")) is la and toolbox.analysis(toolbox.get("lines_light")) is la
    for tool in ("lines", "lines_light"):
        maps = load_probes(tool).maps
        assert set(maps) <= set(la.MAP_NAMES) and maps["lines_blocks"].buckets.count == 256


def test_every_printed_lines_column_is_defined_in_the_spec(tmp_path):
    from tests.test_report_columns import spec_columns

    spec = spec_columns()
    path = loop_trace(tmp_path, 32, 3, {(1 + 1) * 4: 2})
    trace, launches = report.load_trace(str(path))
    results = report.analyze(trace, launches).kernels["loopk"].results["lines"]
    cols, keys = spec["lines"]
    assert set(la.kernel_summary(results)) <= cols and set(la.kernel_numbers(results)) <= keys
    headers, _ = la.ranked_rows(la.combine(results))
    detail_cols = spec["lines per kernel"][0]
    for h in headers:
        assert h in detail_cols or any(h in c.replace("`", "").split(", ") for c in detail_cols), h


def test_line_table_to_parquet(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = loop_trace(tmp_path, 32, 4, {(2 + 1) * 4 + 1: 3})
    out = tmp_path / "lines.parquet"
    assert la.main([str(path), "--parquet", str(out)]) == 0
    rows = pq.read_table(out).to_pylist()
    by_line = {r["line"]: r for r in rows}
    assert by_line[13]["instructions"] == 4 * 4 * 32 and by_line[13]["thread_ticks"] == 6
    assert by_line[13]["warp_cycles"] == 6 * 256 / 32 and by_line[0]["function"] == la.ENTRY_LABEL
    assert la.main([str(tmp_path / "missing")]) == 1



def test_kernel_without_debug_lines_says_how_to_get_them(tmp_path):
    stripped = "\n".join(line for line in LOOP.read_text().splitlines() if ".loc" not in line and ".file" not in line)
    path = loop_trace(tmp_path, 32, 2, {})
    next((path / "kernel").glob("0_*")).joinpath("original.ptx").write_text(stripped)
    trace, launches = report.load_trace(str(path))
    text = report.render(report.analyze(trace, launches))
    assert "no .loc debug lines: compile CUDA with -lineinfo" in text and "(no line)" in text


# ---------------------------------------------------------------- instructions of called .funcs

CALL = Path(__file__).parent / "data" / "lines" / "call.ptx"
NOINLINE = Path(__file__).parent / "data" / "lines" / "noinline_lineinfo.ptx"  # nvcc -lineinfo of noinline.cu


def call_table(path: Path, entry: str):
    from neutrino.isa.ptx.lines import called_lines

    module = parse_module(path.read_text(), str(path))
    lm = build_line_map(module, module.function(entry))
    return lm, la.table_of(lm, called_lines(module, lm))


def test_called_funcs_are_counted_at_their_own_lines():
    lm, table = call_table(CALL, "callk")
    assert [info.line for info in table.lines] == [10, 12, 13, 15, 3, 4, 6, 7]  # the entry's, then the callees'
    # block 1 (the loop) calls mix (whole: lines 3 and 4) and clampv's first block (lines 6, 7)
    assert dict(table.block_lines[1]) == {1: 7, 2: 3, 4: 3, 5: 3, 6: 1, 7: 2}
    assert table.partial_calls == ("clampv",)  # its blocks after the branch are not counted
    assert [info.instructions for info in table.lines[4:]] == [3, 3, 1, 2]
    threads, trips = 512, 37
    per_line, extra = la.line_instructions(np.array([threads, threads * trips, threads]), table)
    by_line = {info.line: int(n) for info, n in zip(table.lines, per_line)}
    assert extra == 0 and by_line == {10: 4 * threads, 12: 7 * trips * threads, 13: 3 * trips * threads,
                                      15: 2 * threads, 3: 3 * trips * threads, 4: 3 * trips * threads,
                                      6: trips * threads, 7: 2 * trips * threads}


def test_nvcc_noinline_funcs_are_counted_per_call():
    lm, table = call_table(NOINLINE, "callk")
    labels = [info.label for info in table.lines]
    assert {"noinline.cu:2", "noinline.cu:3", "noinline.cu:7", "noinline.cu:8"} <= set(labels)
    assert table.partial_calls == ()  # nvcc made both straight-line (selp): counted whole
    # every block with calls of mix (lines 1-4: 2, 2, 3, 2 instructions) runs them once per call
    line_of = {info.label: i for i, info in enumerate(table.lines)}
    for block in lm.blocks:
        calls = sum(1 for insn in lm.instructions[block.start:block.stop]
                    if insn.opcode.base == "call" and "_Z3mixfi" in str(insn.operands))
        counts = dict(table.block_lines[block.index])
        assert counts.get(line_of["noinline.cu:3"], 0) == 3 * calls and counts.get(line_of["noinline.cu:2"], 0) == 2 * calls


def test_recursion_and_guarded_calls_are_not_counted(tmp_path):
    text = CALL.read_text().replace("call.uni (retval0), mix, (param0, param1);", "@%p2 call.uni (retval0), mix, (param0, param1);")
    text = text.replace("\tmad.lo.s32 \t%r3, %r1, 3, %r2;", "\tmad.lo.s32 \t%r3, %r1, 3, %r2;\n\t{\n\t.param .b32 p;\n"
                        "\tst.param.b32 \t[p+0], %r3;\n\t.param .b32 r;\n\tcall.uni (r), clampv, (p);\n\t}")
    text = text.replace("\tld.param.u32 \t%r1, [clampv_param_0];", "\tld.param.u32 \t%r1, [clampv_param_0];\n\t{\n\t.param .b32 q;\n"
                        "\tst.param.b32 \t[q+0], %r1;\n\t.param .b32 s;\n\tcall.uni (s), clampv, (q);\n\t}")
    path = tmp_path / "call_variants.ptx"
    path.write_text(text)
    _, table = call_table(path, "callk")
    assert set(table.partial_calls) == {"mix", "clampv"}  # mix: a guarded call; clampv: it calls itself
    line_of = {info.line: i for i, info in enumerate(table.lines)}
    assert 3 not in line_of  # the guarded call of mix adds nothing
    # clampv counted once per call of the entry: its first block, the recursive call's callee left out
    assert dict(table.block_lines[1])[line_of[6]] == 3  # ld.param, st.param, call (the callee's own: left out)


@pytest.mark.parametrize("tool", ["lines", "lines_light"])
@pytest.mark.parametrize("path", [CALL, NOINLINE], ids=lambda p: p.name)
def test_tools_assemble_on_kernels_that_call_funcs(tool, path):
    result = instrument(path.read_text(), load_probes(tool), source=str(path))
    assert result.kernels["callk"]["matched"]["count_block"] == len(line_map_of(path, 0)[1].blocks)
    assert ".func" in result.ptx and not result.kernels["callk"]["skipped"]
    if HAVE_PTXAS:
        ptxas(result.ptx)


def test_report_notes_partly_counted_calls(tmp_path):
    run = RunBuilder(tmp_path / "run")
    blocks_info = hist_info("lines_blocks", "linear:0:254:1")
    k = run.add_kernel("callk", [blocks_info])
    (next((tmp_path / "run" / "kernel").glob(f"{k}_*")) / "original.ptx").write_text(CALL.read_text())
    blocks = np.zeros(256, np.uint64)
    blocks[1], blocks[2], blocks[3] = 32, 32 * 5, 32
    run.events[0]["probe"] = "lines_light"
    run.launch("callk", (1, 1, 1), (32, 1, 1), [counters_section(blocks_info, blocks)], duration_ns=1000.0)
    trace, launches = report.load_trace(str(run.close()))
    rep = report.analyze(trace, launches)
    k = la.combine(rep.kernels["callk"].results["lines"])
    assert {info.line: int(n) for info, n in zip(k.table.lines, k.instructions)}[3] == 3 * 5 * 32
    assert "note: called clampv: counted only in part" in report.render(rep)


def test_block_time_is_shared_among_each_blocks_lines(tmp_path, monkeypatch):
    """lines_blocktime: ticks per basic block, shared among the block's lines (here by PTX instructions:
    SASS turned off). loop.ptx: block 0 = line 10 (4), block 1 = lines 12 (2) and 13 (4), block 2 = line 15."""
    monkeypatch.setenv(la.SASS_SWITCH, "0")
    run = RunBuilder(tmp_path / "run")
    blocks_info, time_info = hist_info("lines_blocks", "linear:0:254:1"), hist_info("block_time", "linear:0:1022:1")
    k = run.add_kernel("loopk", [blocks_info, time_info, LINES_TOTAL])
    (next((tmp_path / "run" / "kernel").glob(f"{k}_*")) / "original.ptx").write_text(LOOP.read_text())
    blocks = np.zeros(256, np.uint64)
    blocks[1:4] = (32, 32 * 5, 32)
    samples = np.zeros(1024, np.uint64)
    # entry: 2 samples of 1 tick; block 0: 3 of 2; block 1: 30 of 1; block 2: 1 of 4+ (really 9: excess 5)
    for key, count in {0 * 4 + 0: 2, 1 * 4 + 1: 3, 2 * 4 + 0: 30, 3 * 4 + 3: 1}.items():
        samples[1 + key] = count
    run.events[0]["probe"] = "lines_blocktime"
    run.launch("loopk", (1, 1, 1), (32, 1, 1), [counters_section(blocks_info, blocks), counters_section(time_info, samples),
                                                  counters_section(LINES_TOTAL, (47, 5))], duration_ns=1000.0)
    trace, launches = report.load_trace(str(run.close()))
    rep = report.analyze(trace, launches)
    kl = la.combine(rep.kernels["loopk"].results["lines"])
    assert kl.time_by_block and list(kl.ticks) == [2, 6, 10, 20, 9] and int(kl.ticks.sum()) == kl.total_ticks == 47
    assert list(kl.instructions) == [4 * 32, 2 * 5 * 32, 4 * 5 * 32, 2 * 32]
    text = report.render(rep)
    assert "at basic-block starts (lines_blocktime)" in text and "kern.py:13~" not in text
    # 7 ticks in a block of lines 2 : 1 are 4.67 and 2.33: whole ticks 5 and 2, the total kept
    assert list(la.whole(np.array([4 + 2 / 3, 2 + 1 / 3]), 7)) == [5, 2]


def test_lines_blocktime_tool_assembles_and_counts_every_block():
    text = LOOP.read_text()
    result = instrument(text, load_probes("lines_blocktime"), source="loop.ptx")
    assert result.ptx.count("%clock64") >= 3 + 2  # entry, each of the 3 blocks, exit
    if HAVE_PTXAS:
        ptxas(result.ptx, "sm_90")
