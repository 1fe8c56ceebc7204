"""Small constructors for the instructions passes insert.

Inserted code is built as IR objects, never spliced as text; every inserted
instruction records its origin (the probe or pass that asked for it).
"""

from __future__ import annotations

import functools

from neutrino.isa.ptx import ir
from neutrino.isa.ptx.parser import parse_operand


def operand(value) -> ir.Operand:
    if value.__class__ is str or value.__class__ is int:
        return _operand_of(value)
    return value


# Operands and opcodes are immutable values, so passes can share one object per text.
@functools.lru_cache(maxsize=4096)
def _operand_of(value: int | str) -> ir.Operand:
    if isinstance(value, int):
        return ir.Immediate(str(value))
    if value.startswith("%") and "." not in value and value not in ir.SPECIAL_REGISTERS:
        return ir.Register(value)  # the common case, without the parser
    return parse_operand(value)


def insn(opcode_text: str, *operands, origin: str, guard: ir.Guard | str | None = None) -> ir.Instruction:
    if isinstance(guard, str):
        guard = ir.Guard(ir.Register(guard.lstrip("!")), negated=guard.startswith("!"))
    return ir.Instruction(ir.opcode(opcode_text), tuple(map(operand, operands)), guard, 0, origin)


def entry_index(body: list[ir.Statement]) -> int:
    """Where code that must run first goes: after the leading declarations, before any label."""
    for index, stmt in enumerate(body):
        if isinstance(stmt, (ir.Instruction, ir.Label, ir.Scope)):
            return index
    return len(body)


Edit = tuple  # (code before, replacement or None to keep the statement, code after)


def exit_probe_runs(body: list, exits: set[int]) -> tuple[dict[int, ir.Instruction], set[int]]:
    """Per exit (ids in `exits`) with probe code right before it: that code's first instruction (keyed by id) and
    the ids of all of it. No label lies inside such a run, so every path to the exit passes its first instruction."""
    firsts: dict[int, ir.Instruction] = {}
    inside: set[int] = set()

    def visit(stmts: list) -> None:
        for j, stmt in enumerate(stmts):
            if type(stmt) is ir.Scope:
                visit(stmt.body)
            elif id(stmt) in exits:
                k = j
                while k > 0 and type(stmts[k - 1]) is ir.Instruction and stmts[k - 1].origin is not None:
                    k -= 1  # back to the first of the probe instructions right before the exit
                if k < j:
                    firsts[id(stmts[k])] = stmts[k]
                    inside.update(id(s) for s in stmts[k:j])

    visit(body)
    return firsts, inside


def splice(body: list[ir.Statement], edits: dict[int, Edit]) -> None:
    """Applies edits keyed by `id(statement)` to the body and its scopes.

    Finds the edited positions in one scan, then builds the new body in one
    pass, copying the stretches between sites as slices (slice-assigning at
    each site instead would move the rest of the body once per site:
    quadratic in a kernel with a probe at every memory instruction).
    """
    if not edits:
        return
    positions = [i for i, key in enumerate(map(id, body)) if key in edits]
    if ir.Scope in map(type, body):
        for stmt in body:
            if type(stmt) is ir.Scope:
                splice(stmt.body, edits)
    if not positions:
        return
    out: list[ir.Statement] = []
    extend = out.extend
    start = 0
    for i in positions:
        extend(body[start:i])
        stmt = body[i]
        before, replacement, after = edits[id(stmt)]
        extend(before)
        if replacement is None:
            out.append(stmt)
        else:
            extend(replacement)
        extend(after)
        start = i + 1
    extend(body[start:])
    body[:] = out


def site_edits(ctx, shown=lambda code: code) -> dict:
    """For ISAs that splice late (GCN): id(statement) → (code before it, None, code after it), for `splice`, from the
    code each site, and each kernel's entry and exit code (`state.entry_code`, `state.exit_code`) keep until then.
    Entry code and entry sites go before the kernel's first instruction, exit code before each exit; `shown` maps
    each piece of code (--print-after shows it before it is spliced)."""
    before: dict[int, list] = {}
    after: dict[int, list] = {}
    for state in ctx.kernels.values():
        first = id(state.originals[0]) if state.originals else None
        if first is not None:
            before.setdefault(first, []).extend(shown(state.entry_code))
            before[first].extend(c for s in state.sites if s.kind == "entry" for c in shown(s.code))
        for site in state.sites:
            if site.kind == "entry":
                continue
            # exit code runs before the exit instruction: nothing runs after it
            target = before if site.where == "before" or site.kind == "exit" else after
            points = state.before_point if target is before else state.after_point  # an ISA may move code off its anchor
            target.setdefault(id(points.get(id(site.anchor), site.anchor)), []).extend(shown(site.code))
        for anchor in state.exits if state.exit_code else ():
            before.setdefault(id(anchor), []).extend(shown(state.exit_code))
    keys = before.keys() | after.keys()
    return {key: (before.get(key, ()), None, after.get(key, ())) for key in keys}
