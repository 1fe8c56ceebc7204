"""`Module` → PTX text: the inverse of the parser.

Printing a parsed module and parsing the result gives the same structure;
printing is idempotent. Original instructions keep their text apart from
whitespace.
"""

from __future__ import annotations

from neutrino.isa.ptx import ir


def print_module(module: ir.Module) -> str:
    out: list[str] = []
    for item in module.items:
        if isinstance(item, ir.Function):
            out.append(print_function(item))
        elif isinstance(item, ir.Directive):
            out.append(item.text)
        else:
            out.append(item.text)
    return "\n".join(out) + "\n"


def print_function(function: ir.Function) -> str:
    head = " ".join([*function.linkage, "." + function.kind])
    if function.returns is not None:
        head += " " + _param_list(function.returns)
    head += " " + function.name
    if function.params is not None:
        head += _param_list(function.params)
    lines = [head]
    lines.extend(function.directives)
    if function.body is None:
        lines[-1] += ";"
        return "\n".join(lines)
    lines.append("{")
    _print_body(function.body, 1, lines)
    lines.append("}")
    return "\n".join(lines)


def _param_list(params: list[ir.Param]) -> str:
    if not params:
        return "()"
    return "(\n" + ",\n".join("\t" + p.text for p in params) + "\n)"


def _print_body(body: list[ir.Statement], depth: int, lines: list[str]) -> None:
    indent = "\t" * depth
    append = lines.append
    for stmt in body:
        kind = type(stmt)
        if kind is ir.Instruction:
            if stmt.guard is None and stmt.source_operands is not None:  # the common case, inline
                append(f"{indent}{stmt.opcode.text} \t{stmt.source_operands};")
            else:
                append(indent + print_instruction(stmt))
        elif kind is ir.Directive or kind is ir.Comment:
            append(indent + stmt.text)
        elif kind is ir.Label:
            append(stmt.name + ":")
        elif kind is ir.Scope:
            append(indent + "{")
            _print_body(stmt.body, depth + 1, lines)
            append(indent + "}")
        else:
            append(indent + print_statement(stmt))


def print_statement(stmt: ir.Statement) -> str:
    if isinstance(stmt, ir.Instruction):
        return print_instruction(stmt)
    if isinstance(stmt, ir.RegDecl):
        names = f"{stmt.names[0]}<{stmt.count}>" if stmt.count is not None else ", ".join(stmt.names)
        rtype = " ".join("." + t for t in stmt.type.split())
        return f".reg {rtype} {names};"
    if isinstance(stmt, ir.Label):
        return f"{stmt.name}:"
    if isinstance(stmt, (ir.Directive, ir.Comment)):
        return stmt.text
    raise TypeError(f"cannot print {type(stmt).__name__}")


def print_instruction(insn: ir.Instruction) -> str:
    guard = insn.guard
    head = insn.opcode.text if guard is None else f"@{'!' if guard.negated else ''}{guard.register.name} {insn.opcode.text}"
    if insn.source_operands is not None:  # operands as written: untouched since parsing
        return f"{head} \t{insn.source_operands};"
    if not insn.operands:
        return head + ";"
    return f"{head} \t{', '.join(map(str, insn.operands))};"
