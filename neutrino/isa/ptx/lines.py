"""Source lines of PTX instructions: the `.file`/`.loc` line map (spec/ir.md, "Line map").

Compilers that keep debug lines (Triton always, nvcc with `-lineinfo`, clang/LLVM
with `-g`) put a `.loc FILE LINE COLUMN` before the instructions of each source
position, with `function_name LABEL` and `inlined_at FILE LINE COLUMN` when the
code was inlined. This module reads them for one function, on demand: the
parser keeps `.loc`/`.file` as directives and does no extra work for them, so
modules without debug lines cost nothing more (benchmarks/engine.py).

For an entry function it gives every original instruction its `Loc`, and
splits the body into **basic blocks** (a label starts one, a control transfer
ends one) and **line regions** (maximal runs of one block with the same line
key). The `lines` tool keys its maps by their indices (the `BLOCK` and `LINE`
helpers, spec/probe-toml.md); its analysis rebuilds the same map from the
trace's original PTX, so both sides number them with this one function.
"""

from __future__ import annotations

import os
import re
from typing import Iterator

import attrs

from neutrino.isa.ptx import ir

# `.file 1 "path"` with an optional `, timestamp, size`; LLVM may write `.file 1 "directory" "name"`.
FILE_RE = re.compile(r'\.file\s+(\d+)\s+"((?:[^"\\]|\\.)*)"(?:\s+"((?:[^"\\]|\\.)*)")?')
LOC_RE = re.compile(r"\.loc\s+(\d+)\s+(\d+)\s+(\d+)")
FUNCTION_NAME_RE = re.compile(r"function_name\s+([A-Za-z_$%][\w$]*)(?:\s*\+\s*(\d+))?")
INLINED_AT_RE = re.compile(r"inlined_at\s+(\d+)\s+(\d+)\s+(\d+)")
STRING_LABEL_RE = re.compile(r"([A-Za-z_$%][\w$]*):")
# Instructions after which the next one starts a new basic block (guarded or not).
BLOCK_ENDS = frozenset({"bra", "brx", "ret", "exit", "trap"})
# Positions this module defines (spec/probe-toml.md, "Positions"): the anchor of every block or line region.
LINE_POSITIONS = ("block", "line")


@attrs.frozen
class Position:
    file: str | None  # the `.file` path; None for an index the module does not declare
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file or '?'}:{self.line}" + (f":{self.column}" if self.column else "")


@attrs.frozen
class Loc:
    """Where an instruction comes from: its position, the function it belongs to when
    inlined (`function_name`, demangled only as the compiler wrote it), and the
    inlining chain, innermost call site first."""

    position: Position
    function: str | None = None
    inlined_at: tuple[Position, ...] = ()

    @property
    def key(self) -> tuple:
        """What the line map counts as one line: the position's file and line, and the outermost
        call site when inlined (the same header line inlined at two places is two lines)."""
        site = self.inlined_at[-1] if self.inlined_at else None
        return (self.position.file, self.position.line, None if site is None else (site.file, site.line))


NO_LINE = (None, 0, None)  # the key of instructions before any `.loc`, or at line 0 ("no line")


@attrs.frozen
class Block:
    index: int
    start: int  # index of its first instruction in LineMap.instructions
    stop: int  # one past its last
    anchor: int  # where a probe counting the block goes: its first unguarded instruction
    guarded_anchor: bool  # every instruction of the block is guarded: the anchor's guard filters the count


@attrs.frozen
class Region:
    index: int
    block: int
    line: int  # index into LineMap.keys
    start: int
    stop: int
    anchor: int
    guarded_anchor: bool


@attrs.define
class LineMap:
    instructions: list[ir.Instruction]  # the function's original instructions, in order
    locs: list[Loc | None]
    keys: list[tuple]  # distinct line keys in order of first appearance
    key_loc: list[Loc | None]  # the first Loc seen for each key (for its column, function and chain)
    blocks: list[Block]
    regions: list[Region]
    block_of: list[int] = attrs.Factory(list)  # per instruction: its block's index
    line_of: list[int] = attrs.Factory(list)  # per instruction: its line's index in keys
    _index: dict[int, int] = attrs.field(factory=dict, repr=False)  # id(instruction) → index

    def index_of(self, instruction: ir.Instruction) -> int | None:
        if not self._index:
            self._index = {id(insn): i for i, insn in enumerate(self.instructions)}
        return self._index.get(id(instruction))

    def line_counts(self, block: Block) -> dict[int, int]:
        """Instructions of the block per line index."""
        counts: dict[int, int] = {}
        for region in self.regions_of(block):
            counts[region.line] = counts.get(region.line, 0) + region.stop - region.start
        return counts

    def regions_of(self, block: Block) -> list[Region]:
        return [r for r in self.regions if r.block == block.index]  # a block's regions are contiguous; few

    def has_lines(self) -> bool:
        return any(loc is not None for loc in self.locs)


def module_files(module: ir.Module) -> dict[int, str]:
    files = {}
    for item in module.items:
        if isinstance(item, ir.Directive) and item.text.startswith(".file"):
            match = FILE_RE.match(item.text)
            if match:
                path = match.group(2) if match.group(3) is None else os.path.join(match.group(2), match.group(3))
                files[int(match.group(1))] = path.encode().decode("unicode_escape")
    return files


def module_strings(module: ir.Module) -> dict[str, bytes]:
    """The NUL-terminated byte strings of the debug sections, by label (`function_name` points there)."""
    strings: dict[str, bytes] = {}
    for item in module.items:
        if not (isinstance(item, ir.Directive) and item.text.startswith(".section") and "debug_str" in item.text):
            continue
        body = item.text.split("{", 1)[-1].rsplit("}", 1)[0]
        label = None
        data = bytearray()
        for line in body.splitlines():
            line = line.strip()
            found = STRING_LABEL_RE.match(line)
            if found:
                if label is not None:
                    strings[label] = bytes(data)
                label, data = found.group(1), bytearray()
                line = line[found.end():].strip()
            if line.startswith(".b8"):
                data.extend(int(v, 0) for v in line[3:].replace(",", " ").split() if v.strip())
        if label is not None:
            strings[label] = bytes(data)
    return strings


def _function_name(strings: dict[str, bytes], label: str, offset: int) -> str:
    data = strings.get(label)
    if data is None:
        return label
    return data[offset:].split(b"\0", 1)[0].decode("utf-8", "replace")


def parse_loc(text: str, files: dict[int, str], strings: dict[str, bytes]) -> Loc | None:
    """The Loc of one `.loc` directive's text; None for line 0 (the compiler's "no line")."""
    match = LOC_RE.match(text)
    if match is None:
        return None
    file_index, line, column = (int(g) for g in match.groups())
    if line == 0:
        return None
    named = FUNCTION_NAME_RE.search(text, match.end())
    function = _function_name(strings, named.group(1), int(named.group(2) or 0)) if named else None
    chain = tuple(Position(files.get(int(f)), int(n), int(c)) for f, n, c in INLINED_AT_RE.findall(text, match.end()))
    return Loc(Position(files.get(file_index), line, column), function, chain)


def _walk(body: list[ir.Statement]) -> Iterator[ir.Statement]:
    for stmt in body:
        if type(stmt) is ir.Scope:
            yield from _walk(stmt.body)
        else:
            yield stmt


def build_line_map(module: ir.Module | None, function: ir.Function) -> LineMap:
    """The line map of one function's original instructions (inserted ones are left out)."""
    files, strings = (module_files(module), module_strings(module)) if module is not None else ({}, {})
    instructions: list[ir.Instruction] = []
    locs: list[Loc | None] = []
    starts: list[int] = [0]  # indices where a basic block starts
    current: Loc | None = None
    parsed: dict[str, Loc | None] = {}
    for stmt in _walk(function.body or []):
        kind = type(stmt)
        if kind is ir.Directive and stmt.text.startswith(".loc"):
            current = parsed.get(stmt.text, False)
            if current is False:
                current = parsed[stmt.text] = parse_loc(stmt.text, files, strings)
        elif kind is ir.Label:
            starts.append(len(instructions))
        elif kind is ir.Instruction and stmt.origin is None:
            instructions.append(stmt)
            locs.append(current)
            if stmt.opcode.base in BLOCK_ENDS:
                starts.append(len(instructions))
    return _partition(instructions, locs, starts)


def _anchor(instructions: list[ir.Instruction], start: int, stop: int) -> tuple[int, bool]:
    for i in range(start, stop):
        if instructions[i].guard is None:
            return i, False
    return start, True


def _partition(instructions: list[ir.Instruction], locs: list[Loc | None], starts: list[int]) -> LineMap:
    bounds = sorted(set(starts) | {len(instructions)})
    line_map = LineMap(instructions, locs, [], [], [], [])
    key_index: dict[tuple, int] = {}
    for start, stop in zip(bounds, bounds[1:]):
        if start >= stop:
            continue
        anchor, guarded = _anchor(instructions, start, stop)
        block = Block(len(line_map.blocks), start, stop, anchor, guarded)
        line_map.blocks.append(block)
        run = start
        for i in range(start + 1, stop + 1):
            if i < stop and _key(locs[i]) == _key(locs[run]):
                continue
            key = _key(locs[run])
            line = key_index.get(key)
            if line is None:
                line = key_index[key] = len(line_map.keys)
                line_map.keys.append(key)
                line_map.key_loc.append(locs[run])
            r_anchor, r_guarded = _anchor(instructions, run, i)
            line_map.regions.append(Region(len(line_map.regions), block.index, line, run, i, r_anchor, r_guarded))
            line_map.block_of.extend([block.index] * (i - run))
            line_map.line_of.extend([line] * (i - run))
            run = i
    return line_map


def _key(loc: Loc | None) -> tuple:
    return NO_LINE if loc is None else loc.key


# ---------------------------------------------------------------- selecting positions by line


@attrs.frozen
class LineRange:
    """`[FILE:]FIRST[-LAST]`: lines FIRST..LAST (inclusive) of files whose path ends with FILE."""

    file: str | None
    first: int
    last: int

    def covers(self, loc: Loc | None) -> bool:
        if loc is None:
            return False
        places = (loc.position, *loc.inlined_at)  # an inlined line is also at its call sites
        return any(self._covers(p) for p in places)

    def _covers(self, position: Position) -> bool:
        if not self.first <= position.line <= self.last:
            return False
        if self.file is None:
            return True
        path = position.file or ""
        return path == self.file or path.endswith("/" + self.file)


LINE_RANGE_RE = re.compile(r"(?:(.+):)?(\d+)(?:-(\d+))?$")


def parse_line_ranges(text: str) -> tuple[LineRange, ...]:
    """`attn.py:40-60,72` → ranges; raises ValueError with the reason when malformed."""
    ranges = []
    last_file = None
    for part in (p.strip() for p in text.split(",")):
        match = LINE_RANGE_RE.match(part)
        if not part or match is None:
            raise ValueError(f"malformed line range {part!r}: write [FILE:]LINE or [FILE:]FIRST-LAST, e.g. attn.py:40-60")
        file = match.group(1) if match.group(1) is not None else last_file
        first = int(match.group(2))
        last = int(match.group(3)) if match.group(3) else first
        if last < first:
            raise ValueError(f"line range {part!r} ends before it starts")
        ranges.append(LineRange(file, first, last))
        last_file = file
    return tuple(ranges)


def selected(line_map: LineMap, index: int, ranges: tuple[LineRange, ...]) -> bool:
    loc = line_map.locs[index]
    return any(r.covers(loc) for r in ranges)


def position_anchors(line_map: LineMap, word: str) -> list[int]:
    """The instructions a `block` or `line` position matches: each block's or region's anchor."""
    units = line_map.blocks if word == "block" else line_map.regions
    return [unit.anchor for unit in units]


def helper_value(line_map: LineMap, helper: str, instruction: ir.Instruction) -> int | None:
    """BLOCK: index of the instruction's basic block; LINE: index of its line key. None if not original."""
    index = line_map.index_of(instruction)
    if index is None:
        return None
    return (line_map.block_of if helper == "BLOCK" else line_map.line_of)[index]


# ---------------------------------------------------------------- instructions of called .funcs


@attrs.frozen
class CalledLines:
    """What the calls of an entry execute in the `.func`s they call, per thread and call
    (spec/ir.md "Line map", "Called functions")."""

    keys: list[tuple]  # line keys of the callees not already among the entry's, appended after them
    key_loc: list[Loc | None]
    key_static: list[int]  # per appended key: its instructions in one call's counted code
    block_counts: list[dict[int, int]]  # per entry block: line index → instructions run per thread entering it
    partial: tuple[str, ...]  # callees (or calls) of which only a part is counted: see `callee_counts`


def call_target(instruction: ir.Instruction) -> str | None:
    """The function a `call` names (None for an indirect call through a register)."""
    if instruction.opcode.base != "call":
        return None
    for operand in instruction.operands:
        if isinstance(operand, ir.Symbol):
            return operand.name
    return None


def called_lines(module: ir.Module, line_map: LineMap) -> CalledLines:
    """Per block of the entry, the callee instructions each thread runs through its calls: of every
    called `.func`, its first basic block (which runs once per call), and the same of the functions
    that block calls. Calls under a guard, indirect calls, recursion and the blocks after a callee's
    first are not counted; their callees are listed in `partial`."""
    files, strings = module_files(module), module_strings(module)
    key_index = {key: i for i, key in enumerate(line_map.keys)}
    result = CalledLines([], [], [], [{} for _ in line_map.blocks], ())
    partial: set[str] = set()
    memo: dict[str, dict[tuple, tuple[int, Loc | None]]] = {}
    for index, instruction in enumerate(line_map.instructions):
        target = call_target(instruction)
        if instruction.opcode.base != "call":
            continue
        if target is None or instruction.guard is not None:
            partial.add(target or "(indirect call)")
            continue
        counts = _callee_counts(module, target, files, strings, memo, partial, ())
        block = result.block_counts[line_map.block_of[index]]
        for key, (n, loc) in counts.items():
            if key not in key_index:
                key_index[key] = len(line_map.keys) + len(result.keys)
                result.keys.append(key)
                result.key_loc.append(loc)
                result.key_static.append(n)
            block[key_index[key]] = block.get(key_index[key], 0) + n
    return attrs.evolve(result, partial=tuple(sorted(partial)))


def _callee_counts(module, name: str, files, strings, memo, partial: set, active: tuple) -> dict[tuple, tuple[int, Loc | None]]:
    """Line key → (instructions, a Loc) that one call of `name` runs for sure: its first block and,
    recursively, what that block's calls run."""
    if name in memo:
        return memo[name]
    function = module.function(name)
    if function is None or function.body is None or name in active:
        partial.add(name)
        return {}
    starts_with_label = next((type(s) is ir.Label for s in _walk(function.body) if type(s) in (ir.Label, ir.Instruction)), True)
    callee_map = build_line_map(module, function)
    if starts_with_label or not callee_map.blocks:
        partial.add(name)  # its first block may run more than once per call (a loop back to the entry)
        memo[name] = {}
        return {}
    first = callee_map.blocks[0]
    if len(callee_map.blocks) > 1:
        partial.add(name)
    out: dict[tuple, tuple[int, Loc | None]] = {}
    for i in range(first.start, first.stop):
        key = _key(callee_map.locs[i])
        n, loc = out.get(key, (0, callee_map.locs[i]))
        out[key] = (n + 1, loc)
        instruction = callee_map.instructions[i]
        if instruction.opcode.base == "call":
            target = call_target(instruction)
            if target is None or instruction.guard is not None:
                partial.add(target or "(indirect call)")
                continue
            for k, (m, inner_loc) in _callee_counts(module, target, files, strings, memo, partial, active + (name,)).items():
                n2, loc2 = out.get(k, (0, inner_loc))
                out[k] = (n2 + m, loc2)
    memo[name] = out
    return out
