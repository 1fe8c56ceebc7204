"""SASS instructions executed per line (neutrino/tools/lines/sass.py; spec/tools.md "lines", SASS
instructions): matching SASS blocks to PTX blocks and the estimate for the rest, on hand-written
machine code whose answer is known, and on what ptxas/nvdisasm make of the test kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from neutrino.isa.ptx import parse_module
from neutrino.isa.ptx.lines import build_line_map, called_lines
from neutrino.tools.lines import analysis as la
from neutrino.tools.lines import sass

DATA = Path(__file__).parent / "data" / "lines"


def table_of(ptx: str, kernel: str):
    module = parse_module(ptx, kernel)
    line_map = build_line_map(module, module.function(kernel))
    return la.table_of(line_map, called_lines(module, line_map))


def test_hand_written_sass_gives_the_known_counts():
    ptx = (DATA / "sass_match.ptx").read_text()
    table = table_of(ptx, "k")
    assert [info.line for info in table.lines] == [10, 11, 14, 12, 13, 15]
    lines = sass.sass_lines_of(ptx, "k", table, disassembly=(DATA / "sass_match.sass").read_text())
    # SASS blocks: A (lines 10, 11) = PTX B0; B (14) = B1; C (10 and 12: no PTX block has both);
    # D (the loop, unrolled twice: on a cycle); E (15) = B3; the BRA to itself after EXIT is unreachable.
    assert lines.sass_blocks == 5 and lines.matched_blocks == 3 and lines.unknown == 0
    assert lines.matched[0] == ((0, 2), (1, 2)) and lines.matched[1] == ((2, 3),) and lines.matched[2] == ()
    assert lines.matched[3] == ((5, 2),)
    assert lines.static == (3, 2, 3, 3, 6, 2) and lines.unmatched == (1, 0, 0, 3, 6, 0)
    # 2 CTAs x 32 threads; tid 0 of each takes B1; 10 trips
    counts, exact = sass.sass_line_instructions(np.array([64, 2, 640, 64]), table, lines)
    # line 10: A's 2 x 64, plus 1 unmatched x (64 x 5 / 5): its only PTX block is matched, so all of them
    # line 12: 3 unmatched x (640 x 2 / 2); line 13: 6 x (640 x 4 / 4)
    assert list(counts) == [128 + 64, 128, 6, 1920, 3840, 128]
    assert list(exact) == [False, True, True, False, False, True]


def test_other_kernels_of_the_module_are_not_counted():
    """A module with two kernels built from the same source lines (two instantiations of one template): the
    machine code of the other kernel's section is not this kernel's (a called function's section still is),
    so its figures are those of the kernel alone."""
    ptx = (DATA / "sass_match.ptx").read_text()
    text = (DATA / "sass_match.sass").read_text()
    twin = ptx.replace(".visible .entry k(", ".visible .entry k2(").replace("k_param_", "k2_param_")
    alone = sass.sass_lines_of(ptx, "k", table_of(ptx, "k"), disassembly=text)
    two = ptx + "\n" + twin[twin.index(".visible .entry k2("):]
    assert {f.name for f in parse_module(two).entries()} == {"k", "k2"}
    both = sass.sass_lines_of(two, "k", table_of(two, "k"), disassembly=text + text.replace(".text.k ", ".text.k2 "))
    assert sum(both.static) == sum(alone.static) == 19
    assert (both.static, both.unmatched, both.matched, both.unknown) == (alone.static, alone.unmatched,
                                                                         alone.matched, alone.unknown)


def test_no_room_for_the_disassembly_is_a_note(monkeypatch):
    """The temporary directory for the cubin cannot be made (a full or read-only TMPDIR): the SASS column is
    `-` with a note saying why, never a traceback."""
    ptx = (DATA / "sass_match.ptx").read_text()
    monkeypatch.setenv(la.SASS_SWITCH, "1")
    monkeypatch.setattr(sass, "find_nvdisasm", lambda: "/bin/true")

    def no_room(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/tmp/neutrino-sass-x")

    monkeypatch.setattr(sass.tempfile, "TemporaryDirectory", no_room)
    table = la.with_sass(table_of(ptx, "k"), ptx, "k")
    assert table.sass is None and "Permission denied" in table.sass_note


def test_unknown_graphs_match_nothing():
    ptx = (DATA / "sass_match.ptx").read_text()
    table = table_of(ptx, "k")
    text = (DATA / "sass_match.sass").read_text()
    indirect = text.replace("@P0 BRA `(.L_x_0) ;", "BRX R4 -0x40 ;")
    lines = sass.sass_lines_of(ptx, "k", table, disassembly=indirect)
    assert lines.matched_blocks == 0 and sum(lines.unmatched) == sum(lines.static)
    counts, exact = sass.sass_line_instructions(np.array([64, 2, 640, 64]), table, lines)
    assert not exact.any()
    # every SASS instruction runs as often as its line's average PTX instruction; with the graph unknown
    # the padding after EXIT counts as reachable (line 15: STG, EXIT, BRA, NOP)
    assert counts[1] == 2 * 64 and counts[5] == 4 * 64 and lines.static[5] == 4


def test_inlined_lines_take_their_outermost_call_site():
    text = """//--------------------- .text.r    ----------
r:
\t//## File "reduce.cu", line 5
        /*0000*/                   S2R R3, SR_CTAID.X ;
\t//## File "shfl.hpp", line 440 inlined at "reduce.cu", line 6
\t//## File "reduce.cu", line 6
        /*0010*/                   SHFL.DOWN PT, R3, R6, 0x10, 0x1f ;
\t//## File "a.h", line 3 inlined at "b.h", line 7
\t//## File "b.h", line 7 inlined at "reduce.cu", line 9
\t//## File "reduce.cu", line 9
        /*0020*/               @P0 FADD R3, R3, R6 ;
        /*0030*/                   EXIT ;
"""
    (section,) = sass.parse_nvdisasm(text)
    keys = [insn.key for insn in section.instructions]
    assert keys == [("reduce.cu", 5, None), ("shfl.hpp", 440, "reduce.cu:6"), ("a.h", 3, "reduce.cu:9"),
                    ("a.h", 3, "reduce.cu:9")]
    assert section.instructions[2].guarded and section.instructions[3].opcode == "EXIT"


def test_cycles_of_a_graph():
    # 0 → 1 → 2 → 1 (a loop), 2 → 3, 3 → 3 (a self loop), 3 → exit; 4 unreachable, alone
    assert sass.cyclic_nodes([(1,), (2,), (1, 3), (3, -1), ()]) == {1, 2, 3}
    assert sass.cyclic_nodes([(1,), (-1,)]) == set()


@pytest.mark.skipif(sass.find_nvdisasm() is None, reason="no nvdisasm (set NVDISASM)")
@pytest.mark.parametrize("name,kernel", [("loop.ptx", "loopk"), ("nested.ptx", "nestk"), ("call.ptx", "callk")])
def test_real_machine_code_keeps_every_reachable_instruction(name, kernel):
    ptx = (DATA / name).read_text()
    table = table_of(ptx, kernel)
    text = sass.disassemble(ptx)
    lines = sass.sass_lines_of(ptx, kernel, table, disassembly=text)
    reachable = 0
    for section in sass.parse_nvdisasm(text):
        graph = sass.sass_graph(section)
        ends = list(graph.starts[1:]) + [len(section.instructions)]
        reachable += sum(stop - start for b, (start, stop) in enumerate(zip(graph.starts, ends)) if b in graph.reachable)
    assert sum(lines.static) + lines.unknown == reachable > 0
    # matched and unmatched add up to the static count of every line
    for line in range(len(table.lines)):
        assert sum(n for pairs in lines.matched for i, n in pairs if i == line) + lines.unmatched[line] == lines.static[line]
    # with one thread through every block once, an exact line's SASS count is its static count in matched blocks
    counts, exact = sass.sass_line_instructions(np.ones(len(table.block_lines)), table, lines)
    for line in np.nonzero(exact)[0]:
        assert counts[line] == lines.static[line]


LOOP_SASS = """//--------------------- .text.loopk       --------------------------
loopk:
\t//## File "kern.py", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   MOV R2, RZ ;
.L_x_0:
\t//## File "kern.py", line 12
        /*0020*/                   IMAD R3, R3, 0x3, R2 ;
\t//## File "kern.py", line 13
        /*0030*/                   LOP3.LUT R3, R3, R2, RZ, 0x3c, !PT ;
        /*0040*/                   VIADD R2, R2, 0x1 ;
        /*0050*/               @P0 BRA `(.L_x_0) ;
\t//## File "kern.py", line 15
        /*0060*/                   STG.E desc[UR4][R6.64], R3 ;
        /*0070*/                   EXIT ;
"""


def test_report_and_parquet_show_sass_instructions(tmp_path, monkeypatch):
    """The report's `SASS instr` column and the Parquet table's sass_instructions on a synthetic trace of
    loop.ptx (32 threads, 4 trips) with hand-written machine code: the entry and exit blocks are matched
    (exact), the loop's block is on a cycle (estimated from the lines' PTX counts)."""
    from neutrino.analysis import report
    from tests.test_lines import loop_trace

    monkeypatch.setenv(la.SASS_SWITCH, "1")
    monkeypatch.setattr(sass, "disassemble", lambda ptx, *a, **k: LOOP_SASS)
    path = loop_trace(tmp_path, 32, 4, {(2 + 1) * 4: 3})
    trace, launches = report.load_trace(str(path))
    rep = report.analyze(trace, launches)
    rows = {r["line"]: r for r in la.line_records(rep) if r["function"] != la.ENTRY_LABEL}
    # line 10: 2 SASS x 32; 12: 1 x (32 x 4 x 2 / 2); 13: 3 x (128 x 4 / 4); 15: 2 x 32
    assert {n: r["sass_instructions"] for n, r in rows.items()} == {10: 64, 12: 128, 13: 384, 15: 64}
    assert {n: r["sass_exact"] for n, r in rows.items()} == {10: True, 12: False, 13: False, 15: True}
    text = report.render(rep)
    table = text[text.index("[lines: loopk]"):]
    assert "SASS instr" in table and "~384" in table and "2 of 3 SASS blocks matched" in table
    monkeypatch.setattr(sass, "disassemble", lambda ptx, *a, **k: (_ for _ in ()).throw(sass.SassUnavailable("no nvdisasm")))
    path = loop_trace(tmp_path / "again", 32, 4, {(2 + 1) * 4: 3})
    trace, launches = report.load_trace(str(path))
    text = report.render(report.analyze(trace, launches))
    assert "note: SASS instr: not derived (no nvdisasm)" in text
