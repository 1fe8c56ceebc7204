"""Register virtualization on PTX: probe registers get kernel-unique names (the pass: passes/pipeline.py)."""

from __future__ import annotations

import re

from neutrino.isa.ptx import ir
from neutrino.passes.state import Context, KernelState


def virtualize(module: ir.Module, ctx: Context, state: KernelState) -> None:
    """Maps every `.reg` of the probe file to `<prefix>p_<name>` in this kernel.

    The declarations themselves are emitted by buffer addressing, together with
    the registers later passes add, so that each kernel gets one block of them.
    """
    suffixes = probe_register_suffixes(list(ctx.probes.registers))
    # Against every symbol table: a `.global %nt_x` would be shadowed by a register %nt_x.
    state.prefix = ctx.names(module).fresh_prefix(state.function)
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
