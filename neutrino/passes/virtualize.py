"""Register virtualization: probe registers get kernel-unique names."""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from neutrino.isa.ptx import ir
from neutrino.passes.manager import Context

BASE_PREFIX = "%nt"


def used_register_names(function: ir.Function) -> set[str]:
    """Declared register names (ranges by their prefix): PTX registers must be declared."""
    names: set[str] = set()
    stack = [function.body or []]
    while stack:
        for stmt in stack.pop():
            if type(stmt) is ir.RegDecl:
                names.update(stmt.names)
            elif type(stmt) is ir.Scope:
                stack.append(stmt.body)
    return names


def choose_prefix(function: ir.Function) -> str:
    """`%nt_`, or `%nt1_`, `%nt2_`, … if the kernel already uses names starting so."""
    used = used_register_names(function)
    candidate, n = f"{BASE_PREFIX}_", 0
    while any(name.startswith(candidate) for name in used):
        n += 1
        candidate = f"{BASE_PREFIX}{n}_"
    return candidate


@attrs.frozen
class RegisterVirtualization:
    """Maps every `.reg` of the probe file to `<prefix>p_<name>` and declares them.

    The declarations themselves are emitted by buffer addressing, together with
    the registers later passes add, so that each kernel gets one block of them.
    """

    name: ClassVar[str] = "virtualize-registers"
    requires: ClassVar[tuple[str, ...]] = ("match-tracepoints",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        for state in ctx.kernels.values():
            state.prefix = choose_prefix(state.function)
            for name, rtype in ctx.probes.registers.items():
                renamed = state.prefix + "p_" + re.sub(r"[^A-Za-z0-9_]", "_", name.lstrip("%"))
                state.renames[name] = renamed
                state.temps[renamed] = rtype
