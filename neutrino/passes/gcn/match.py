"""Tracepoint matching on GCN: kernels, their original instructions and the probe sites."""

from __future__ import annotations

from typing import ClassVar

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.gcn import abi, ir
from neutrino.isa.gcn.semantics import kernel_exits
from neutrino.passes.gcn.state import ADDRESSABLE_SGPRS, GcnKernelState, GcnSite, Registers
from neutrino.passes.manager import Context

#: PTX positions a portable probe (the DSL's built-in tools) may name, and the GCN mnemonics they mean
PORTABLE_POSITIONS = {
    "ld.global": ("global_load_",), "st.global": ("global_store_",),
    "atom.global": ("global_atomic_",), "red.global": ("global_atomic_",),
    "ld.shared": ("ds_read", "ds_load"), "st.shared": ("ds_write", "ds_store"),
    "mma": ("v_mfma_",), "wgmma": ("v_mfma_",), "wmma": ("v_mfma_",), "bra": ("s_branch", "s_cbranch_"),
    # selectors of the PTX semantics table (spec/probe-toml.md, "Selectors") the built-in tools name
    "#memory.global": ("global_load_", "global_store_", "global_atomic_"), "#async_copy.global": (),
    "#tensor_core": ("v_mfma_",), "#branch": ("s_branch", "s_cbranch_"),
}


def gcn_prefixes(position) -> tuple[str, ...]:
    """GCN mnemonic prefixes of a probe position: GCN prefixes as written, PTX ones through the table."""
    out: list[str] = []
    for components in position:
        text = ".".join(components)
        mapped = [gcn for ptx, gcns in PORTABLE_POSITIONS.items() if text == ptx or text.startswith(ptx + ".") for gcn in gcns]
        out.extend(mapped or ([text] if "." not in text else []))
    return tuple(dict.fromkeys(out))


@attrs.frozen
class GcnTracepointMatching:
    name: ClassVar[str] = "match-tracepoints"
    requires: ClassVar[tuple[str, ...]] = ()

    def run(self, module: ir.Module, ctx: Context) -> None:
        kernels = module.kernels()
        if ctx.kernel is not None:
            kernels = [k for k in kernels if k.name == ctx.kernel]
            if not kernels:
                names = ", ".join(k.name for k in module.kernels()) or "none"
                raise InstrumentError(f"{module.source}: no kernel named {ctx.kernel!r} (kernels: {names})")
        for kernel in kernels:
            originals = list(ir.instructions(module.items[kernel.start:kernel.end]))
            state = GcnKernelState(kernel.name, kernel.descriptor, module.items[kernel.start], originals,
                                   registers_above(kernel.name, kernel.descriptor, originals))
            exits = state.exits = kernel_exits(originals)
            for probe in ctx.probes.probes:
                state.sites.extend(self.sites_of(probe, originals, exits))
            ctx.kernels[kernel.name] = state

    @staticmethod
    def sites_of(probe, originals: list[ir.Instruction], exits: list[ir.Instruction]) -> list[GcnSite]:
        if probe.at_kernel:
            sites = [GcnSite(probe.name, "before", "entry", None)] if probe.before else []
            if probe.after:
                sites.extend(GcnSite(probe.name, "after", "exit", e) for e in exits)
            return sites
        prefixes = gcn_prefixes(probe.position)
        return [GcnSite(probe.name, s.where, "instruction", i) for i in originals
                if i.mnemonic.startswith(prefixes) for s in probe.snippets()]


def registers_above(kernel: str, desc: ir.Descriptor, originals: list[ir.Instruction]) -> Registers:
    """The first SGPR and VGPR the kernel leaves free, from its descriptor and every register its code names."""
    # SGPRs the hardware fills at launch count as the kernel's even where its code never reads them
    top = {"s": max(desc.get_int("next_free_sgpr"), abi.launched_sgprs(desc)), "v": 0, "a": 0}
    for insn in originals:
        for operand in insn.operands:
            for reg in ir.registers_in(operand):
                top[reg.file] = max(top[reg.file], reg.last + 1)
    agprs = desc.get_int("next_free_vgpr") - desc.get_int("accum_offset", 0) if desc.get("accum_offset") else 0
    # With AGPRs in use, arch VGPRs are those below the accumulation offset; else every one below next_free_vgpr.
    arch = max(top["v"], desc.get_int("accum_offset")) if (top["a"] or agprs > 0) else max(top["v"], desc.get_int("next_free_vgpr"))
    extras = 2 * (desc.get_int("reserve_vcc", 1) + desc.get_int("reserve_flat_scratch", 0) + desc.get_int("reserve_xnack_mask", 0))
    return Registers(kernel, top["s"], arch, ADDRESSABLE_SGPRS - extras)
