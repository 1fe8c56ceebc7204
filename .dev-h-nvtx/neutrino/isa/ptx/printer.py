"""`Module` → PTX text: the exact inverse of the parser.

A parsed statement prints as it was written (`written`: the whitespace before
it and its own text, comments and spelling included), so
`print_module(parse_module(text)) == text` byte for byte. A statement that a
pass inserted or edited has no `written`; it prints in canonical form after
the whitespace that stood before it (`leading`) or, for a new one, on a line
of its own at its depth. Function heads print as written while their
`head_key()` is the one they were parsed with.
"""

from __future__ import annotations

from neutrino.isa.ptx import ir


def print_module(module: ir.Module) -> str:
    out: list[str] = []
    for item in module.items:
        if type(item) is ir.Function:
            _print_function(item, out)
        elif item.written is not None:
            out.append(item.written)
        else:
            out.append(_leading(item.leading, "\n" if out else ""))
            out.append(item.text)
    out.append("\n" if module.trailing is None else module.trailing)
    return "".join(out)


def _print_function(function: ir.Function, out: list[str]) -> None:
    written = function.written_head
    if written is not None and function.written_key == function.head_key():
        out.append(written)
    else:
        first = not out
        out.append(_leading(None if written is None else ir.leading_space(written), "" if first else "\n"))
        out.append(_canonical_head(function))
        out.append(";" if function.body is None else "\n{")
    if function.body is None:
        return
    _print_body(function.body, 1, out)
    out.append("\n" if function.closing is None else function.closing)
    out.append("}")


def _canonical_head(function: ir.Function) -> str:
    head = " ".join([*function.linkage, "." + function.kind])
    if function.returns is not None:
        head += " " + _param_list(function.returns)
    head += " " + function.name
    if function.params is not None:
        head += _param_list(function.params)
    return "\n".join([head, *function.directives])


def _param_list(params: list[ir.Param]) -> str:
    if not params:
        return "()"
    return "(\n" + ",\n".join("\t" + p.text for p in params) + "\n)"


def _leading(leading: str | None, default: str) -> str:
    return default if leading is None else leading


def _print_body(body: list[ir.Statement], depth: int, out: list[str]) -> None:
    append = out.append
    newline_indent = "\n" + "\t" * depth
    for stmt in body:
        written = stmt.written
        if written is not None:  # the common case: untouched since parsing
            append(written)
            continue
        kind = type(stmt)
        if kind is ir.Scope:
            append(_leading(stmt.leading, newline_indent))
            append("{")
            _print_body(stmt.body, depth + 1, out)
            append(_leading(stmt.closing, newline_indent))
            append("}")
            continue
        append(_leading(stmt.leading, "\n" if kind is ir.Label else newline_indent))
        append(print_statement(stmt))


def print_statement(stmt: ir.Statement) -> str:
    """The canonical text of one statement (no whitespace before it)."""
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
    if insn.source_operands is not None:  # operands as written: unchanged since parsing, or text a pass wrote
        return f"{head} \t{insn.source_operands};"
    if not insn.operands:
        return head + ";"
    return f"{head} \t{', '.join(map(str, insn.operands))};"
