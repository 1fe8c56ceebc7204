"""AMD GCN (CDNA: gfx90a, gfx942) as the instrumentation core sees it (neutrino/isa/interface.py).

Untested on AMD hardware: what is checked is that every probed kernel
assembles with LLVM's AMDGPU assembler (`neutrino.llvm_mc`), with its
descriptor's register counts and kernel arguments grown to match.

GCN lacks three optional steps: a counting variant (`cap = "count"` maps are
refused by SAVE lowering), target fitting (the inserted code is gfx9 code,
valid on every target we parse) and pruning (`-k` instruments one kernel
and leaves the others as they were).
"""

from __future__ import annotations

import attrs

from neutrino import llvm_mc
from neutrino.errors import InstrumentError
from neutrino.isa.gcn import abi, ir, parse_module, print_module
from neutrino.isa.gcn.buffers import GcnBufferAddressing
from neutrino.isa.gcn.dialect import GFX9, Dialect
from neutrino.isa.gcn.positions import gcn_prefixes
from neutrino.isa.gcn.registers import GcnKernelState, Registers
from neutrino.isa.gcn.resolve import resolve_operands
from neutrino.isa.gcn.registers import insn
from neutrino.isa.gcn.semantics import kernel_exits
from neutrino.isa.gcn.snippets import register_shape
from neutrino.isa.gcn.translate import GcnTranslation
from neutrino.isa.gcn.verify import check, verify_probe_file
from neutrino.passes import site_code


def matcher(module: ir.Module, state: GcnKernelState):
    """For one kernel: probe → the original instructions whose mnemonic starts with one of its position's prefixes."""
    def instructions_at(probe) -> list[ir.Instruction]:
        prefixes = gcn_prefixes(probe.position, state.dialect)
        return [i for i in state.originals if i.mnemonic.startswith(prefixes)]

    return instructions_at


def kernel_state(module: ir.Module, kernel: ir.Kernel, dialect: Dialect = GFX9) -> GcnKernelState:
    originals = list(ir.instructions(module.items[kernel.start:kernel.end]))
    return GcnKernelState(kernel, originals=originals, exits=kernel_exits(originals), descriptor=kernel.descriptor,
                          label=module.items[kernel.start], dialect=dialect,
                          registers=registers_above(kernel.name, kernel.descriptor, originals, dialect))


def registers_above(kernel: str, desc: ir.Descriptor, originals: list[ir.Instruction], dialect: Dialect = GFX9) -> Registers:
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
    if not dialect.reserved_in_sgprs:  # gfx10+: vcc and the others are registers of their own
        extras = 0
    return Registers(kernel, top["s"], arch, dialect.sgpr_limit - extras)


def virtualize(module: ir.Module, ctx, state: GcnKernelState) -> None:
    """`.reg .s64 %t` → an aligned SGPR pair above the kernel's own, `.reg .v32 %x` → one free VGPR."""
    def home(name: str, rtype: str) -> ir.RegRange:
        file, count = register_shape(rtype)
        return (state.registers.sgprs if file == "s" else state.registers.vgprs)("probe" + name, count)

    site_code.virtualize(ctx, state, home)


def lower_save(module: ir.Module, ctx) -> None:
    """GCN's step of the lower-save pass: passes/site_code.py's, on the neutral steps translated (isa/gcn/translate.py)."""
    for state in ctx.kernels.values():
        d = state.dialect
        exit_code = site_code.lower_saves(ctx, d.wave_lanes, state, GcnTranslation(state, site_code.LOWERING_ORIGIN).translate)
        if exit_code:  # at s_endpgm every lane the wave started with counts, whatever the last branch left in exec
            exit_code.insert(0, insn(d.mask("s_mov"), d.exec, state.registers.sgprs("entry_exec", d.mask_sgprs),
                                     origin=site_code.LOWERING_ORIGIN))
        state.exit_code = exit_code


def kernel_info(ctx) -> dict[str, dict]:
    """Per kernel: the ISA, the kernel argument segment's size, the maps' wave width, old and new register counts."""
    return {name: ctx.describe(
        state, isa=ctx.isa.name if ctx.isa is not None else "gcn",
        kernarg_size=state.kernarg_size or state.descriptor.get_int("kernarg_size"),
        maps=[dict(ctx.probes.maps[m].to_json(), lanes=state.dialect.wave_lanes) for m in state.maps],
        registers={"before": state.old_counts,
                   "after": {k: state.descriptor.get_int(k) for k in ("next_free_sgpr", "next_free_vgpr")}})
        for name, state in ctx.kernels.items()}


def show(module: ir.Module, ctx) -> str:
    """The module as --print-after shows it: before buffer addressing splices it, each site's code in place in a copy."""
    items = site_code.shown(module.items, ctx, lambda text: ir.Line(f"\t; {text}"))
    return print_module(module if items is None else ir.Module(items, module.source, module.trailing_newline))


@attrs.frozen
class GcnIsa:
    """GCN behind the Isa interface (neutrino/isa/interface.py): one instance, `GCN`."""

    name: str = "gcn"
    dialect: Dialect = GFX9  # what differs between the generations sharing these steps (RDNA: neutrino/isa/rdna/)
    entry_words: tuple[str, str] = ("kernel", "kernels")  # what messages call a kernel, one and many
    comment: str = ";"
    resolve_operands = staticmethod(resolve_operands)
    lower_save = staticmethod(lower_save)
    buffer_addressing = GcnBufferAddressing().run
    counting_variant = None
    fit_target = None
    prune = None

    parse_module = staticmethod(parse_module)
    print_module = staticmethod(print_module)
    entries = staticmethod(ir.Module.kernels)

    def kernel_state(self, module: ir.Module, kernel: ir.Kernel) -> GcnKernelState:
        target = module.target or ""
        if self.dialect is GFX9 and target.startswith("gfx1"):  # gfx10+: wave32 and other spellings
            raise InstrumentError(f"{module.source}: {target} is not a gfx9 (CDNA) target: gfx11 (RDNA 3) is the ISA "
                                  "'rdna'; gfx10 and gfx12 are not supported")
        return kernel_state(module, kernel, self.dialect)

    matcher = staticmethod(matcher)
    virtualize = staticmethod(virtualize)
    verify_probe_file = staticmethod(verify_probe_file)
    check = staticmethod(check)
    kernel_info = staticmethod(kernel_info)
    show = staticmethod(show)
    check_assembles = staticmethod(llvm_mc.check)


GCN = GcnIsa()
