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


def reg_decl(name: str, rtype: str, origin: str) -> ir.RegDecl:
    return ir.RegDecl(rtype, (name,), None, 0, origin)


def entry_index(body: list[ir.Statement]) -> int:
    """Where code that must run first goes: after the leading declarations, before any label."""
    for index, stmt in enumerate(body):
        if isinstance(stmt, (ir.Instruction, ir.Label, ir.Scope)):
            return index
    return len(body)


def containers(body: list[ir.Statement]) -> dict[int, list[ir.Statement]]:
    """id(instruction) → the list that holds it (the function body or a nested scope)."""
    out: dict[int, list[ir.Statement]] = {}
    stack = [body]
    while stack:
        container = stack.pop()
        for stmt in container:
            if type(stmt) is ir.Instruction:
                out[id(stmt)] = container
            elif type(stmt) is ir.Scope:
                stack.append(stmt.body)
    return out


def index_of(container: list[ir.Statement], stmt: ir.Statement) -> int:
    return container.index(stmt)  # statements compare by identity (eq=False)
