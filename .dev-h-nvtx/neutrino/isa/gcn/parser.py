"""GCN assembly text → `ir.Module`, one line at a time.

The printer is this parser's exact inverse: every byte of the source is kept
somewhere (indents, separators, comments), so `print(parse(x)) == x`.
"""

from __future__ import annotations

import re

from neutrino.errors import Diagnostic, Location, ParseError
from neutrino.isa.gcn import ir

LABEL = re.compile(r"^(\s*)([.\w$]+):(.*)$", re.S)
MNEMONIC = re.compile(r"^(\s*)([a-z][a-z0-9_.]*)(\s*)(.*)$", re.S)
DESCRIPTOR_ENTRY = re.compile(r"^(\s*)\.amdhsa_(\w+)(\s+)(\S+)(.*)$")
KERNEL_HEAD = re.compile(r"^\s*\.amdhsa_kernel\s+([.\w$]+)\s*$")
SINGLE_REG = re.compile(r"^([sva])(\d+)$")
RANGE_REG = re.compile(r"^([sva])\[(\d+)(?::(\d+))?\]$")
INTEGER = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")
FLOAT = re.compile(r"^-?\d+\.\d*(e[-+]?\d+)?$")
PROBE_REG = re.compile(r"^(%[A-Za-z_][\w$]*|ADDR|BYTES|OUT|IN[1-3])(?:\.(lo|hi))?$")
SPECIALS = frozenset(
    """vcc vcc_lo vcc_hi exec exec_lo exec_hi m0 scc off null flat_scratch flat_scratch_lo flat_scratch_hi
    xnack_mask xnack_mask_lo xnack_mask_hi lds_direct src_shared_base src_shared_limit src_private_base
    src_private_limit src_pops_exiting_wave_id src_execz src_vccz src_scc src_lds_direct""".split()
)
#: instructions whose one operand is a space-separated list (`vmcnt(0) lgkmcnt(0)`)
WHOLE_OPERAND = ("s_waitcnt",)


def parse_module(text: str, source: str = "<gcn>") -> ir.Module:
    lines = text.split("\n")
    trailing_newline = text.endswith("\n")
    if trailing_newline:
        lines.pop()
    items: list[ir.Statement] = []
    problems: list[Diagnostic] = []
    i = 0
    while i < len(lines):
        raw, number = lines[i], i + 1
        stripped = raw.strip()
        if stripped.startswith(".amdhsa_kernel"):
            i = _descriptor(lines, i, source, items, problems)
            continue
        if stripped == ".amdgpu_metadata":
            i = _metadata(lines, i, source, items, problems)
            continue
        try:
            items.append(parse_line(raw, number))
        except ValueError as e:
            problems.append(_diag(source, number, raw, str(e)))
        i += 1
    if problems:
        raise ParseError(problems)
    return ir.Module(items, source, trailing_newline)


def parse_line(raw: str, number: int = 0) -> ir.Statement:
    code, trailer = split_comment(raw)
    if not code.strip() or code.lstrip().startswith("."):
        label = LABEL.match(code)
        if label and code.strip().endswith(":") and label.group(3).strip() == "":
            return ir.Label(label.group(2), label.group(3) + trailer, number)
        return ir.Line(raw, number)
    label = LABEL.match(code)
    if label and label.group(3).strip() == "":
        return ir.Label(label.group(2), label.group(3) + trailer, number)
    return parse_instruction(code, trailer, number)


def split_comment(raw: str) -> tuple[str, str]:
    """(code, whitespace + comment); `;` and `//` start comments in AMDGPU assembly."""
    cut = len(raw)
    for marker in (";", "//"):
        at = raw.find(marker)
        if at != -1:
            cut = min(cut, at)
    code = raw[:cut]
    body = code.rstrip()
    return body, code[len(body):] + raw[cut:]


def parse_instruction(code: str, trailer: str = "", number: int = 0, origin: str | None = None) -> ir.Instruction:
    m = MNEMONIC.match(code)
    if not m:
        raise ValueError(f"cannot read an instruction in {code.strip()!r}")
    indent, mnemonic, gap, rest = m.groups()
    if rest and not gap:
        raise ValueError(f"unexpected {rest[:1]!r} after {mnemonic}")
    if not rest:
        return ir.Instruction(mnemonic, (), (), indent, gap + trailer, number, origin, "", (), ())
    if mnemonic in WHOLE_OPERAND:
        return ir.Instruction(mnemonic, (ir.Text(rest),), (), indent, trailer, number, origin, gap, (), ())
    parts, separators = _split_top(rest, ",")
    last_words, word_gaps = _split_top(parts[-1], None)
    parts[-1] = last_words[0]
    operands = tuple(parse_operand(p) for p in parts)
    modifiers = tuple(last_words[1:])
    return ir.Instruction(mnemonic, operands, modifiers, indent, trailer, number, origin, gap, tuple(separators), tuple(word_gaps))


def parse_operand(text: str) -> ir.Operand:
    if not text:
        raise ValueError("empty operand")
    m = SINGLE_REG.match(text)
    if m:
        return ir.RegRange(m.group(1), int(m.group(2)))
    m = RANGE_REG.match(text)
    if m:
        first = int(m.group(2))
        last = int(m.group(3)) if m.group(3) is not None else first
        if last < first:
            raise ValueError(f"register range {text} ends before it starts")
        return ir.RegRange(m.group(1), first, last - first + 1, bracketed=True)
    if text in SPECIALS:
        return ir.Special(text)
    if INTEGER.match(text) or FLOAT.match(text):
        return ir.Imm(text)
    m = PROBE_REG.match(text)
    if m:
        return ir.ProbeReg(m.group(1), m.group(2))
    return ir.Text(text)


def _split_top(text: str, sep: str | None) -> tuple[list[str], list[str]]:
    """Splits at `sep` (None: runs of whitespace) outside brackets and parentheses.

    Returns the parts and the exact separator texts between them (whitespace
    around a comma belongs to its separator).
    """
    parts, seps = [], []
    depth, start, i = 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and (c == sep if sep else c.isspace()):
            j = i + 1
            while j < len(text) and text[j].isspace():
                j += 1
            part = text[start:i]
            body = part.rstrip()
            parts.append(body)
            seps.append(part[len(body):] + text[i:j])
            start = i = j
            continue
        i += 1
    parts.append(text[start:])
    return parts, seps


def _descriptor(lines: list[str], i: int, source: str, items: list, problems: list) -> int:
    head = lines[i]
    m = KERNEL_HEAD.match(head)
    if not m:
        problems.append(_diag(source, i + 1, head, "malformed .amdhsa_kernel line", "write `.amdhsa_kernel NAME`"))
        return i + 1
    entries: list[ir.DescriptorEntry] = []
    j = i + 1
    while j < len(lines) and lines[j].strip() != ".end_amdhsa_kernel":
        e = DESCRIPTOR_ENTRY.match(lines[j])
        if e:
            indent, key, gap, value, trailer = e.groups()
            entries.append(ir.DescriptorEntry(key, value, indent, trailer, gap))
        else:
            problems.append(_diag(source, j + 1, lines[j], "expected `.amdhsa_<key> <value>` inside .amdhsa_kernel"))
        j += 1
    if j == len(lines):
        problems.append(_diag(source, i + 1, head, f".amdhsa_kernel {m.group(1)} has no .end_amdhsa_kernel"))
        return j
    items.append(ir.Descriptor(m.group(1), entries, head, lines[j], i + 1))
    return j + 1


def _metadata(lines: list[str], i: int, source: str, items: list, problems: list) -> int:
    j = i + 1
    while j < len(lines) and lines[j].strip() != ".end_amdgpu_metadata":
        j += 1
    if j == len(lines):
        problems.append(_diag(source, i + 1, lines[i], ".amdgpu_metadata has no .end_amdgpu_metadata"))
        return j
    items.append(ir.Metadata(lines[i], lines[i + 1:j], lines[j], i + 1))
    return j + 1


def _diag(source: str, number: int, text: str, message: str, hint: str = "") -> Diagnostic:
    col = len(text) - len(text.lstrip()) + 1 if text.strip() else 0
    return Diagnostic(Location(source, number, col, text), message, hint=hint)
