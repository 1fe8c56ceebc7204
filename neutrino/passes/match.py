"""Tracepoint matching: where does each probe run?"""

from __future__ import annotations

from typing import ClassVar

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir
from neutrino.isa.ptx.semantics import kernel_exits, position_matcher
from neutrino.passes.manager import Context, KernelState, Site


def selected_entries(module: ir.Module, kernel: str | None) -> list[ir.Function]:
    entries = module.entries()
    if kernel is None:
        return entries
    chosen = [f for f in entries if f.name == kernel]
    if not chosen:
        names = ", ".join(f.name for f in entries) or "none"
        raise InstrumentError(f"{module.source}: no entry named {kernel!r} (entries: {names})")
    return chosen


def exits_of(instructions: list[ir.Instruction]) -> list[ir.Instruction]:
    """The instructions that end the kernel, where kernel-position `after` code goes."""
    return kernel_exits(instructions)


@attrs.frozen
class TracepointMatching:
    """Creates a KernelState per entry and lists its sites, in probe-file order.

    Only original instructions are matched, so probes never probe each other.
    """

    name: ClassVar[str] = "match-tracepoints"
    requires: ClassVar[tuple[str, ...]] = ()

    def run(self, module: ir.Module, ctx: Context) -> None:
        for function in selected_entries(module, ctx.kernel):
            originals = [i for i in ir.instructions(function.body) if i.origin is None]
            state = KernelState(function, original_ids=[id(i) for i in originals], exits=exits_of(originals))
            for probe in ctx.probes.probes:
                sites = self.sites_of(probe, function, originals, state.exits)
                if not probe.at_kernel:  # how many instructions its position matched: 0 is worth a warning
                    state.matched[probe.name] = len({id(site.anchor) for site in sites})
                state.sites.extend(sites)
            ctx.kernels[function.name] = state

    @staticmethod
    def sites_of(probe, function: ir.Function, originals: list[ir.Instruction], exits: list[ir.Instruction]) -> list[Site]:
        sites: list[Site] = []
        if probe.at_kernel:
            if probe.before:
                sites.append(Site(probe.name, "before", "entry", None, function.name))
            if probe.after:
                sites.extend(Site(probe.name, "after", "exit", insn, function.name) for insn in exits)
            return sites
        snippets = probe.snippets()
        matches: dict[str, bool] = {}  # opcode text → matched; a kernel repeats few opcodes
        named = position_matcher(probe.position)  # opcode prefixes and selectors (semantics table)
        for insn in originals:
            opcode = insn.opcode
            hit = matches.get(opcode.text)
            if hit is None:
                hit = matches[opcode.text] = named(opcode)
            if hit:
                for snippet in snippets:
                    sites.append(Site(probe.name, snippet.where, "instruction", insn, function.name))
        return sites
