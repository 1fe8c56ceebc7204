"""Pruning: one entry (and its counting variant) with the `.func`s and globals it uses.

The runtime loads each probed kernel as a module of its own, and the benchmark
compares it with the same kernel pruned and unprobed. DWARF sections are
dropped: they name every function of the original module.
"""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from neutrino.isa.ptx import ir
from neutrino.passes.lower_save import COUNT_SUFFIX
from neutrino.passes.manager import Context

DECLARED_NAME = re.compile(r"([A-Za-z_$][A-Za-z0-9_$]*)\s*(\[[^\]]*\])*\s*(=|;)")


def declared_name(directive: ir.Directive) -> str | None:
    """The variable a module-level declaration (`.global .b8 x[4] = {...};`) declares."""
    text = directive.text
    if not text.startswith((".global", ".const", ".shared", ".extern", ".visible", ".weak", ".common", ".local", ".tex", ".surf", ".samplerref", ".texref")):
        return None
    head = text.split("=", 1)[0] + ("=" if "=" in text else ";")
    m = DECLARED_NAME.search(head)
    return m.group(1) if m else None


def referenced_symbols(function: ir.Function) -> set[str]:
    names: set[str] = set()
    for _, _, stmt in ir.walk(function.body or []):
        if isinstance(stmt, ir.Instruction):
            names.update(stmt.symbol_names())
        elif isinstance(stmt, ir.Directive):
            names.update(re.findall(r"[A-Za-z_$][A-Za-z0-9_$]*", stmt.text))
    return names


def prune_module(module: ir.Module, keep_entries: set[str]) -> None:
    functions = {f.name: f for f in module.functions() if f.body is not None}
    needed: set[str] = set()
    work = [n for n in keep_entries if n in functions]
    while work:
        name = work.pop()
        if name in needed:
            continue
        needed.add(name)
        for sym in referenced_symbols(functions[name]):
            if sym in functions and sym not in needed:
                work.append(sym)
    symbols = set().union(*(referenced_symbols(functions[n]) for n in needed)) if needed else set()
    # globals may point at each other or at functions (initializers): keep what they name too
    kept: list[ir.TopLevel] = []
    for item in module.items:
        if isinstance(item, ir.Function):
            if item.name in needed or (item.body is None and item.name in symbols):
                kept.append(item)
        elif isinstance(item, ir.Directive):
            if item.text.startswith(".section"):
                continue
            name = declared_name(item)
            if name is None or name in symbols:
                kept.append(item)
        else:
            kept.append(item)
    module.items = kept


@attrs.frozen
class Pruning:
    name: ClassVar[str] = "prune"
    requires: ClassVar[tuple[str, ...]] = ()

    def run(self, module: ir.Module, ctx: Context) -> None:
        if ctx.kernel is None:
            return
        prune_module(module, {ctx.kernel, ctx.kernel + COUNT_SUFFIX})
