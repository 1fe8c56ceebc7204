"""`ir.Module` → GCN assembly text: the parser's exact inverse.

Source statements print with the spacing they were read with; statements
built by passes print in LLVM's layout (`\\tmnemonic a, b, c mod mod`).
"""

from __future__ import annotations

from neutrino.isa.gcn import ir


def print_module(module: ir.Module) -> str:
    out: list[str] = []
    for item in module.items:
        out.append(print_statement(item))
    text = "\n".join(out)
    return text + "\n" if module.trailing_newline else text


def print_statement(item: ir.Statement) -> str:
    kind = type(item)
    if kind is ir.Instruction:
        return print_instruction(item)
    if kind is ir.Line:
        return item.text
    if kind is ir.Label:
        return f"{item.name}:{item.trailer}"
    if kind is ir.Descriptor:
        body = [f"{e.indent}.amdhsa_{e.key}{e.gap}{e.value}{e.trailer}" for e in item.entries]
        return "\n".join([item.head, *body, item.tail])
    if kind is ir.Metadata:
        return "\n".join([item.head, *item.lines, item.tail])
    raise TypeError(f"not a GCN statement: {item!r}")


def print_instruction(insn: ir.Instruction) -> str:
    text = insn.indent + insn.mnemonic
    operands = [str(o) for o in insn.operands]
    words = operands[-1:] + list(insn.modifiers)
    if not operands and not insn.modifiers:
        return text + insn.trailer
    text += " " if insn.gap is None else insn.gap
    seps = insn.separators if insn.separators is not None and len(insn.separators) == len(operands) - 1 else None
    for i, operand in enumerate(operands[:-1]):
        text += operand + (seps[i] if seps else ", ")
    gaps = insn.modifier_gaps if insn.modifier_gaps is not None and len(insn.modifier_gaps) == len(words) - 1 else None
    if not operands:  # modifiers only
        words = list(insn.modifiers)
        gaps = None
    for i, word in enumerate(words):
        text += word
        if i < len(words) - 1:
            text += gaps[i] if gaps else " "
    return text + insn.trailer
