"""Register virtualization: probe registers get kernel-unique names."""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from neutrino.isa.ptx import ir
from neutrino.passes.manager import Context

BASE_PREFIX = "%nt"
TAKEN_PREFIX = re.compile(re.escape(BASE_PREFIX) + r"([1-9][0-9]*)?_")  # %nt_…, %nt1_…: prefixes in use


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
    # One pass over the names (not one per candidate): which numbers are taken.
    taken = set()
    for name in used_register_names(function):
        m = TAKEN_PREFIX.match(name)
        if m:
            taken.add(int(m.group(1) or 0))
    n = 0
    while n in taken:
        n += 1
    return f"{BASE_PREFIX}_" if n == 0 else f"{BASE_PREFIX}{n}_"


@attrs.frozen
class RegisterVirtualization:
    """Maps every `.reg` of the probe file to `<prefix>p_<name>` and declares them.

    The declarations themselves are emitted by buffer addressing, together with
    the registers later passes add, so that each kernel gets one block of them.
    """

    name: ClassVar[str] = "virtualize-registers"
    requires: ClassVar[tuple[str, ...]] = ("match-tracepoints",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        suffixes = probe_register_suffixes(list(ctx.probes.registers))
        for state in ctx.kernels.values():
            state.prefix = choose_prefix(state.function)
            for name, rtype in ctx.probes.registers.items():
                renamed = state.prefix + suffixes[name]
                state.renames[name] = renamed
                state.temps[renamed] = rtype


PLAIN_SUFFIX = re.compile(r"%[A-Za-z0-9_]+")


def probe_register_suffixes(names: list[str]) -> dict[str, str]:
    """One distinct name part per probe register: `%t0` → `p_t0`; `t0`, `%a$b`, `__$1` → `q<n>_…`.

    `%t0` and `t0` are two registers in PTX, and `a$b` and `a_b` would both
    sanitize to `a_b`, so names other than `%` + [A-Za-z0-9_] get a numbered
    form that cannot meet any `p_` name nor each other.
    """
    out: dict[str, str] = {}
    for name in names:
        if PLAIN_SUFFIX.fullmatch(name):
            out[name] = "p_" + name[1:]
        else:
            out[name] = f"q{len(out)}_" + re.sub(r"[^A-Za-z0-9_]", "_", name.lstrip("%"))
    return out
