"""Pruning: one entry (and its counting variant) with the `.func`s and globals it uses.

The runtime loads each probed kernel as a module of its own, and the benchmark
compares it with the same kernel pruned and unprobed.

DWARF sections name every function of the original module, so once a function
is dropped they must go too, with what refers to them: a `.section` whose
labels the kept code uses (`.debug_str`, for `.loc … function_name
$L__info_string0` of `-lineinfo` builds) stays when it refers to nothing
itself; `.loc` attributes naming labels that are gone are dropped; a `debug`
target (`-G`) loses `debug`, since ptxas wants the DWARF for it.

Pruning is one scan of each kept function's statements, and none when the
module holds nothing but the kept entries; operand text nobody parsed is
searched with one regex for the whole function.
"""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from neutrino.isa.ptx import ir
from neutrino.passes.state import Context

# A variable may be named like a register (`.global .u32 %x;`, read as `[%x]`): names may start with '%'.
DECLARED_NAME = re.compile(r"(%[A-Za-z0-9_$]+|[A-Za-z_$][A-Za-z0-9_$]*)\s*(\[[^\]]*\])*\s*(=|;)")
NAME = re.compile(r"(?<![%.A-Za-z0-9_$])(?:%[A-Za-z0-9_$]+|[A-Za-z_$][A-Za-z0-9_$]*)")
SECTION_LABEL = re.compile(r"^\s*([A-Za-z_$][A-Za-z0-9_$]*)\s*:", re.M)
# `.loc 1 3 71, function_name $L__info_string0, inlined_at 1 4 42`: the attributes after the position.
LOC_ATTRIBUTES = re.compile(r"^(\.loc\s+\d+\s+\d+\s+\d+)\s*,.*$", re.S)
DATA_DECLARATIONS = (".global", ".const", ".shared", ".extern", ".visible", ".weak", ".common", ".local", ".tex", ".surf", ".samplerref", ".texref")


def declared_name(directive: ir.Directive) -> str | None:
    """The variable a module-level declaration (`.global .b8 x[4] = {...};`) declares."""
    text = directive.text
    if not text.startswith(DATA_DECLARATIONS):
        return None
    head = text.split("=", 1)[0] + ("=" if "=" in text else ";")
    m = DECLARED_NAME.search(head)
    return m.group(1) if m else None


def referenced_symbols(function: ir.Function) -> set[str]:
    """Names the function's operands and directives mention (a superset: labels and registers without '%' too)."""
    names: set[str] = set()
    texts: list[str] = []
    seen: set[int] = set()  # operand tuples already looked at: inserted code shares one per snippet
    stack = [function.body or []]
    while stack:
        for stmt in stack.pop():
            kind = type(stmt)
            if kind is ir.Instruction:
                operands = stmt._operands
                if operands is None:
                    texts.append(stmt.source_operands or "")
                elif operands and id(operands) not in seen:
                    seen.add(id(operands))
                    for operand in operands:
                        names.update(ir.symbols_in(operand))
                        names.update(r.name for r in ir.registers_in(operand))  # `[%x]` may read a variable %x
            elif kind is ir.Directive:
                texts.append(stmt.text)
            elif kind is ir.Scope:
                stack.append(stmt.body)
    names.update(NAME.findall("\n".join(texts)))
    return names


def _section_labels(text: str) -> tuple[set[str], set[str]]:
    """(labels a `.section` defines, names it refers to that are not its own or a section's)."""
    body = text.split("{", 1)[1] if "{" in text else ""
    defined = set(SECTION_LABEL.findall(body))
    body = SECTION_LABEL.sub("", body)
    referenced = {n for n in NAME.findall(body) if n not in defined}
    return defined, referenced


def prune_module(module: ir.Module, keep_entries: set[str]) -> None:
    functions = {f.name: f for f in module.functions() if f.body is not None}
    if all(
        item.name in keep_entries if isinstance(item, ir.Function) else not (isinstance(item, ir.Directive) and declared_name(item))
        for item in module.items
    ):
        return  # nothing here could be dropped (the runtime's usual case): no need to look at the code
    # What the kept entries reach: functions through their code, variables through their
    # initializers (`.global .u64 ops[2] = {f, g};` is a table of function pointers).
    initializers = {
        name: item.text.split("=", 1)[1]
        for item in module.items
        if isinstance(item, ir.Directive) and "=" in item.text and (name := declared_name(item)) is not None
    }
    symbols: set[str] = set()
    needed: set[str] = set()
    work = list(keep_entries & functions.keys())
    while work:
        name = work.pop()
        if name in symbols:
            continue
        symbols.add(name)
        if name in functions:
            needed.add(name)
            work.extend(referenced_symbols(functions[name]) - symbols)
        elif name in initializers:
            work.extend(set(NAME.findall(initializers[name])) - symbols)
    kept: list[ir.TopLevel] = []
    sections: list[ir.Directive] = []
    dropped_any = False
    for item in module.items:
        if isinstance(item, ir.Function):
            keep = item.name in needed or (item.body is None and item.name in symbols)
        elif isinstance(item, ir.Directive):
            if item.text.startswith(".section"):
                sections.append(item)
                keep = True  # decided below, once we know whether anything was dropped
            else:
                name = declared_name(item)
                keep = name is None or name in symbols
        else:
            keep = True
        if keep:
            kept.append(item)
        else:
            dropped_any = True
    if dropped_any and sections:
        kept = _drop_sections(kept, sections, symbols, [functions[n] for n in needed])
    module.items = kept


def _drop_sections(items: list[ir.TopLevel], sections: list[ir.Directive], symbols: set[str], kept_functions: list[ir.Function]) -> list[ir.TopLevel]:
    """Items without the DWARF sections that name dropped code, and without what then dangles."""
    keep: set[int] = set()
    defined: set[str] = set()
    for section in sections:
        labels, refers_to = _section_labels(section.text)
        if labels & symbols and not refers_to:
            keep.add(id(section))
            defined |= labels
    dropped = len(keep) < len(sections)
    out: list[ir.TopLevel] = []
    for item in items:
        if isinstance(item, ir.Directive) and item.text.startswith(".section") and id(item) not in keep:
            continue
        if dropped and isinstance(item, ir.Directive) and item.text.startswith(".target") and "debug" in item.text:
            words = [w.strip() for w in item.text[len(".target") :].split(",")]
            ir.edit(item, text=".target " + ", ".join(w for w in words if w != "debug"))
        out.append(item)
    for function in kept_functions:
        _drop_dangling_loc_attributes(function.body, defined)
    return out


def _drop_dangling_loc_attributes(body: list[ir.Statement], defined: set[str]) -> None:
    """`.loc` lines keep `function_name`/`inlined_at` only when the labels they name are still defined."""
    for stmt in body:
        kind = type(stmt)
        if kind is ir.Directive and stmt.text.startswith(".loc") and "," in stmt.text:
            m = LOC_ATTRIBUTES.match(stmt.text)
            labels = set(NAME.findall(stmt.text.split(",", 1)[1])) - {"function_name", "inlined_at"}
            if m and not labels <= defined:
                ir.edit(stmt, text=m.group(1))
        elif kind is ir.Scope:
            _drop_dangling_loc_attributes(stmt.body, defined)


@attrs.frozen
class PtxPruning:
    name: ClassVar[str] = "prune"
    requires: ClassVar[tuple[str, ...]] = ()

    def run(self, module: ir.Module, ctx: Context) -> None:
        if ctx.kernel is None:
            return
        state = ctx.kernels.get(ctx.kernel)
        count_kernel = state.count_kernel if state is not None else None
        prune_module(module, {ctx.kernel} | ({count_kernel} if count_kernel else set()))
