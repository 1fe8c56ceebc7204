"""Register virtualization on GCN: every probe register gets physical registers the kernel leaves free."""

from __future__ import annotations

from typing import ClassVar

import attrs

from neutrino.isa.gcn import ir
from neutrino.isa.gcn.snippets import register_shape
from neutrino.passes.manager import Context


@attrs.frozen
class GcnRegisterVirtualization:
    """`.reg .s64 %t` → an aligned SGPR pair above the kernel's own, `.reg .v32 %x` → one free VGPR.

    Probe registers are shared by name across the probes of a file (a `before`
    at kernel entry hands values to an `after` at exit), so each gets one home
    per kernel.
    """

    name: ClassVar[str] = "virtualize-registers"
    requires: ClassVar[tuple[str, ...]] = ("match-tracepoints",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        for state in ctx.kernels.values():
            for name, rtype in ctx.probes.registers.items():
                file, count = register_shape(rtype)
                take = state.registers.sgprs if file == "s" else state.registers.vgprs
                state.renames[name] = take("probe" + name, count)
