"""GCN probe snippets: one statement per line, `;` and `//` start comments.

    .reg .s64 %t          ; probe registers: .s32 / .s64 (SGPRs, one value per wave),
    .reg .v32 %x, %y      ;                  .v32 / .v64 (VGPRs, one value per lane)
    s_memtime %t          ; any GCN instruction the verifier admits, on probe registers,
    v_mov_b32 %x, %t.lo   ; their 32-bit halves (`.lo`, `.hi`) and the helpers
    SAVE.u64 {%t}         ; SAVE as in PTX snippets (compact and explicit forms)
    @%p SAVE [ m ] {%x}   ; a SAVE guarded by a lane mask (an .s64 register): only those lanes save
    CUID %c               ; %c (.s32) = this compute unit's id: HW_ID's CU/SH/SE bits, and on gfx942 the XCC

`.reg` and `SAVE` are the probe language's own statements and are read into
the same objects as in PTX snippets (`neutrino.isa.ptx.ir.RegDecl`, a `SAVE`
instruction), so the probe-file loader treats both ISAs alike; every other line
is a GCN instruction (`neutrino.isa.gcn.ir.Instruction`).
"""

from __future__ import annotations

import re

from neutrino.errors import Diagnostic, Location, ParseError
from neutrino.isa.gcn import ir as gcn
from neutrino.isa.gcn.parser import parse_instruction, parse_operand, split_comment
from neutrino.isa.ptx import ir as ptx
from neutrino.isa.ptx import parse_statements as parse_ptx_statements

REGISTER_KINDS = {"s32": ("s", 1), "s64": ("s", 2), "v32": ("v", 1), "v64": ("v", 2)}
REG_DECL = re.compile(r"^\.reg\s+\.(\w+)\s+(.+)$")
NAME = re.compile(r"^%[A-Za-z_][\w$]*$")


def parse_snippet(text: str, source: str = "<snippet>", first_line: int = 1) -> list:
    statements: list = []
    problems: list[Diagnostic] = []
    for offset, raw in enumerate(text.split("\n")):
        number = first_line + offset
        code, _ = split_comment(raw)
        code = code.strip()
        if not code:
            continue
        try:
            statements.append(_statement(code, source, number))
        except ValueError as e:
            problems.append(Diagnostic(Location(source, number, 0, raw), str(e)))
        except ParseError as e:
            problems.extend(e.diagnostics)
    if problems:
        raise ParseError(problems)
    return statements


def _statement(code: str, source: str, number: int):
    if code.startswith(".reg"):
        m = REG_DECL.match(code.rstrip(";").strip())
        if not m or m.group(1) not in REGISTER_KINDS:
            raise ValueError(f"malformed register declaration {code!r}: write `.reg .s32|.s64|.v32|.v64 %name, ...`")
        names = tuple(n.strip() for n in m.group(2).split(","))
        bad = [n for n in names if not NAME.match(n)]
        if bad:
            raise ValueError(f"bad register name {bad[0]!r}: probe registers are `%` + letters, digits, _")
        return ptx.RegDecl(m.group(1), names, None, number)
    if code.startswith("SAVE") or (code.startswith("@") and "SAVE" in code):
        return parse_ptx_statements(code.rstrip(";") + ";", source, number)[0]
    if code.split()[0] == "CUID":
        return gcn.Instruction("CUID", tuple(parse_operand(o.strip()) for o in code[4:].split(",") if o.strip()), line=number, gap=" ")
    return parse_instruction("\t" + code, "", number)


def register_shape(rtype: str) -> tuple[str, int]:
    """('s' or 'v', registers) of a probe register type."""
    return REGISTER_KINDS[rtype]


def is_gcn(stmt) -> bool:
    return type(stmt) is gcn.Instruction
