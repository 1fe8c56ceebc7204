"""Which generic addresses point into shared or local memory: a small address-space inference.

A generic address made by `cvta.shared`/`cvta.local` (the conversion *to*
generic) points into that space, and so does one computed from it by moving,
adding or subtracting an offset. The counting variant keeps writes there
(they are the counting launch's own memory: a `cuda::barrier` arrives on a
shared-memory word through a generic address, a `-G` build keeps its stack
frame behind `%SP`), and drops the other generic writes, which may reach the
program's global memory.

Flow-insensitive and optimistic: a register is said to point into space S
only if every definition of it in the function does (a fixed point that
removes registers until every remaining definition is justified), so a
register that ever holds anything else is not.
"""

from __future__ import annotations

from neutrino.isa.ptx import ir
from neutrino.isa.ptx.semantics import access_spaces, defined_registers, lookup

# Address arithmetic that keeps the space of its one address operand.
_OFFSET_ARITHMETIC = frozenset({"mov", "add", "sub"})
_GENERIC_SOURCES = frozenset({"shared", "local"})


def _conversion_space(insn: ir.Instruction) -> str | None:
    """`cvta.shared.u64 d, a` (to generic; not `cvta.to.shared`): the space it converts from."""
    modifiers = insn.opcode.modifiers
    if insn.opcode.base != "cvta" or "to" in modifiers:
        return None
    spaces = {m.split("::")[0] for m in modifiers} & _GENERIC_SOURCES
    return spaces.pop() if len(spaces) == 1 else None


def generic_spaces(function: ir.Function) -> dict[str, str]:
    """Register name → 'shared' or 'local', for the registers that address the function's generic
    writes and only ever hold generic addresses into that space (and the registers they come from).

    Operands are parsed only for the generic writes and the definitions their addresses come
    from; every other instruction is looked at through its opcode and the text of its destination.
    """
    body = ir.instructions(function.body or [])
    if not any(_conversion_space(insn) for insn in body):
        return {}  # the common case: no generic address into shared or local memory is made here
    wanted = {
        address.base.name
        for insn in body
        for index, access, space in access_spaces(insn.opcode)
        if access in ("store", "atomic") and space is None and index < len(insn.operands)
        and isinstance(address := insn.operands[index], ir.Address) and isinstance(address.base, ir.Register)
    }
    if not wanted:
        return {}
    definitions: dict[str, list[ir.Instruction]] = {}
    for insn in body:
        for name in _defined_names(insn):
            definitions.setdefault(name, []).append(insn)
    eligible: dict[str, list[ir.Instruction]] = {}
    while wanted:  # the writes' addresses, then what each of their definitions computes from
        name = wanted.pop()
        defs = definitions.get(name, [])
        if name in eligible or not defs or not all(_conversion_space(d) or d.opcode.base in _OFFSET_ARITHMETIC for d in defs):
            continue
        eligible[name] = defs
        wanted |= {o.name for d in defs for o in d.operands[1:] if isinstance(o, ir.Register)} - eligible.keys()
    candidates = _spaces_reaching(eligible)
    changed = True
    while changed:  # drop what some definition does not justify, until every one does
        changed = False
        for name in list(candidates):
            if not all(_justified(d, candidates[name], candidates) for d in eligible[name]):
                del candidates[name]
                changed = True
    return candidates


def _defined_names(insn: ir.Instruction) -> list[str]:
    """The registers `insn` writes; for an unparsed one with a plain register destination, from its text."""
    row_defs = lookup(insn.opcode).defs
    if not row_defs:
        return []
    text = insn.source_operands if insn._operands is None else None
    if text is not None and row_defs == (0,):
        first = text.split(",", 1)[0].strip()
        if first.startswith("%") and not any(c in first for c in "{|[ "):
            return [first]
    return [reg.name for reg in defined_registers(insn)]


def _spaces_reaching(eligible: dict[str, list[ir.Instruction]]) -> dict[str, str]:
    """The space each eligible register may get from a conversion, through any chain of arithmetic."""
    spaces: dict[str, set[str]] = {}
    changed = True
    while changed:  # in program order a chain settles in one pass; a loop's increment in two
        changed = False
        for name, defs in eligible.items():
            found = set(spaces.get(name, ()))
            for d in defs:
                conversion = _conversion_space(d)
                if conversion is not None:
                    found.add(conversion)
                else:
                    found.update(s for o in d.operands[1:] if isinstance(o, ir.Register) for s in spaces.get(o.name, ()))
            if found != spaces.get(name, set()):
                spaces[name] = found
                changed = True
    return {name: found.pop() for name, found in spaces.items() if len(found) == 1}


def _justified(insn: ir.Instruction, space: str, candidates: dict[str, str]) -> bool:
    if _conversion_space(insn) is not None:
        return _conversion_space(insn) == space
    sources = list(insn.operands[1:])
    pointers = [o for o in sources if isinstance(o, ir.Register) and o.name in candidates]
    if len(pointers) != 1 or candidates[pointers[0].name] != space:
        return False
    if insn.opcode.base == "sub" and sources.index(pointers[0]) != 0:
        return False  # offset - pointer is no pointer
    return all(isinstance(o, (ir.Register, ir.Immediate)) for o in sources)
