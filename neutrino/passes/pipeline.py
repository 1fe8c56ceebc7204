"""The passes, written once for every ISA, and the default pipeline.

Each pass does what is common to all ISAs and asks the context's ISA
(neutrino/isa/interface.py) for the steps that depend on its instructions and
registers. See passes/__init__.py for the order and why.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from neutrino.errors import InstrumentError, ProbeError
from neutrino.passes.manager import PassManager
from neutrino.passes.state import Context, KernelState, Site


def selected_entries(isa, module, kernel: str | None) -> list:
    """The kernels to instrument: all, or the one named (an error naming the others if absent)."""
    entries = isa.entries(module)
    if kernel is None:
        return entries
    chosen = [e for e in entries if e.name == kernel]
    if not chosen:
        names = ", ".join(e.name for e in entries) or "none"
        one, many = isa.entry_words
        raise InstrumentError(f"{module.source}: no {one} named {kernel!r} ({many}: {names})")
    return chosen


@attrs.frozen
class TracepointMatching:
    """Creates a KernelState per entry and lists its sites, in probe-file order.

    Only original instructions are matched, so probes never probe each other.
    """

    name: ClassVar[str] = "match-tracepoints"
    requires: ClassVar[tuple[str, ...]] = ()

    def run(self, module, ctx: Context) -> None:
        isa = ctx.isa
        for entry in selected_entries(isa, module, ctx.kernel):
            state = isa.kernel_state(module, entry)
            instructions_at = isa.matcher(module, state)
            for probe in ctx.probes.probes:
                sites = self.sites_of(probe, state, instructions_at)
                if not probe.at_kernel:  # how many instructions its position matched: 0 is worth a warning
                    state.matched[probe.name] = len({id(site.anchor) for site in sites})
                state.sites.extend(sites)
            ctx.kernels[entry.name] = state

    @staticmethod
    def sites_of(probe, state: KernelState, instructions_at) -> list[Site]:
        name = state.name
        if probe.at_kernel:
            sites = [Site(probe.name, "before", "entry", None, name)] if probe.before else []
            if probe.after:
                sites.extend(Site(probe.name, "after", "exit", insn, name) for insn in state.exits)
            return sites
        snippets = probe.snippets()
        return [Site(probe.name, snippet.where, "instruction", insn, name)
                for insn in instructions_at(probe) for snippet in snippets]


@attrs.frozen
class RegisterVirtualization:
    """Every probe register gets a home of its own in each kernel (the ISA's register model), before any code is built."""

    name: ClassVar[str] = "virtualize-registers"
    requires: ClassVar[tuple[str, ...]] = ("match-tracepoints",)

    def run(self, module, ctx: Context) -> None:
        for state in ctx.kernels.values():
            ctx.isa.virtualize(module, ctx, state)


@attrs.frozen
class OperandResolution:
    """Each site's snippet made concrete: probe registers renamed, helpers computed, predicates folded in; SAVE stays abstract."""

    name: ClassVar[str] = "resolve-operands"
    requires: ClassVar[tuple[str, ...]] = ("match-tracepoints", "virtualize-registers")

    def run(self, module, ctx: Context) -> None:
        ctx.isa.resolve_operands(module, ctx)


@attrs.frozen
class CountingVariant:
    """For maps with cap = "count": a copy of each kernel that only counts records (an ISA without one refuses such maps)."""

    name: ClassVar[str] = "counting-variant"
    requires: ClassVar[tuple[str, ...]] = ("resolve-operands",)

    def run(self, module, ctx: Context) -> None:
        if ctx.isa.counting_variant is not None:
            ctx.isa.counting_variant(module, ctx)


@attrs.frozen
class SaveLowering:
    """SAVE → the ISA's bounds-checked stores, cursor bumps and atomics."""

    name: ClassVar[str] = "lower-save"
    requires: ClassVar[tuple[str, ...]] = ("resolve-operands",)

    def run(self, module, ctx: Context) -> None:
        ctx.isa.lower_save(module, ctx)


@attrs.frozen
class Verifier:
    """Re-checks the probe file (phase 1, if it was changed after loading) and every kernel's invariants (phase 2).

    Runs after SAVE lowering so that what it checks is what will be printed.
    """

    name: ClassVar[str] = "verify"
    requires: ClassVar[tuple[str, ...]] = ("match-tracepoints", "virtualize-registers")

    def run(self, module, ctx: Context) -> None:
        # Files from parse_probes were verified when loaded; check again only what was built by hand.
        problems = [] if ctx.probes.verified else ctx.isa.verify_probe_file(ctx.probes)
        if problems:
            raise ProbeError(problems)
        ctx.isa.check(module, ctx, True)


@attrs.frozen
class BufferAddressing:
    """Map buffers as kernel parameters, the entry code that addresses them, our registers declared, code spliced in."""

    name: ClassVar[str] = "buffer-addressing"
    requires: ClassVar[tuple[str, ...]] = ("lower-save",)

    def run(self, module, ctx: Context) -> None:
        ctx.isa.buffer_addressing(module, ctx)


@attrs.frozen
class TargetFitting:
    """The module's target/version raised to what the inserted code needs, or refused with a location."""

    name: ClassVar[str] = "fit-target"
    requires: ClassVar[tuple[str, ...]] = ("buffer-addressing",)

    def run(self, module, ctx: Context) -> None:
        if ctx.isa.fit_target is not None:
            ctx.isa.fit_target(module, ctx)


@attrs.frozen
class Pruning:
    """When one kernel was asked for, what it does not use is dropped."""

    name: ClassVar[str] = "prune"
    requires: ClassVar[tuple[str, ...]] = ()

    def run(self, module, ctx: Context) -> None:
        if ctx.isa.prune is not None:
            ctx.isa.prune(module, ctx)


#: the order of spec/pipeline.md; passes/__init__.py says why each comes where it does
PASSES = (TracepointMatching, RegisterVirtualization, OperandResolution, CountingVariant, SaveLowering, Verifier,
          BufferAddressing, TargetFitting, Pruning)
#: passes whose only work is an ISA step that an ISA may lack (None): left out of that ISA's default pipeline
OPTIONAL_STEPS = {"counting-variant": "counting_variant", "fit-target": "fit_target", "prune": "prune"}


def default_pipeline(isa=None) -> PassManager:
    """Every pass in order, less those whose step `isa` lacks; no ISA: PTX's (which has them all)."""
    passes = [p() for p in PASSES if isa is None or getattr(isa, OPTIONAL_STEPS.get(p.name, "name")) is not None]
    return PassManager(passes, isa=isa)
