"""Tracepoint matching: where does each probe run?"""

from __future__ import annotations

from typing import ClassVar

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir
from neutrino.isa.ptx.lines import LINE_POSITIONS, build_line_map, position_anchors, selected
from neutrino.isa.ptx.semantics import kernel_exits
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


@attrs.define
class _LazyLineMap:
    """The entry's line map (neutrino/isa/ptx/lines.py), built only when a probe selects by line."""

    module: ir.Module
    function: ir.Function
    _map: object = None
    anchors: dict = attrs.Factory(dict)  # probe name → ids of the `block`/`line` anchors its position names

    def get(self):
        if self._map is None:
            self._map = build_line_map(self.module, self.function)
        return self._map

    def matched(self, probe, originals: list[ir.Instruction]) -> list[ir.Instruction]:
        """The originals a probe with `@ lines` may match, and its `block`/`line` anchors noted."""
        line_map = self.get()
        words = [p[0] for p in probe.position if len(p) == 1 and p[0] in LINE_POSITIONS]
        self.anchors[probe.name] = {id(line_map.instructions[i]) for w in words for i in position_anchors(line_map, w)}
        if not probe.lines:
            return originals
        keep = {id(insn) for i, insn in enumerate(line_map.instructions) if selected(line_map, i, probe.lines)}
        return [insn for insn in originals if id(insn) in keep]


def lines_anchors(lines: "_LazyLineMap | None", probe) -> set[int]:
    return lines.anchors.get(probe.name, ()) if lines is not None else ()


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
            lines = _LazyLineMap(module, function)
            for probe in ctx.probes.probes:
                sites = self.sites_of(probe, function, originals, state.exits, lines)
                if not probe.at_kernel:  # how many instructions its position matched: 0 is worth a warning
                    state.matched[probe.name] = len({id(site.anchor) for site in sites})
                state.sites.extend(sites)
            ctx.kernels[function.name] = state

    @staticmethod
    def sites_of(probe, function: ir.Function, originals: list[ir.Instruction], exits: list[ir.Instruction],
                 lines: "_LazyLineMap | None" = None) -> list[Site]:
        sites: list[Site] = []
        if probe.at_kernel:
            if probe.before:
                sites.append(Site(probe.name, "before", "entry", None, function.name))
            if probe.after:
                sites.extend(Site(probe.name, "after", "exit", insn, function.name) for insn in exits)
            return sites
        snippets = probe.snippets()
        if lines is not None and (probe.lines or any(len(p) == 1 and p[0] in LINE_POSITIONS for p in probe.position)):
            originals = lines.matched(probe, originals)
        matches: dict[str, bool] = {}  # opcode text → matched; a kernel repeats few opcodes
        # A set lookup per prefix length, not a comparison per prefix: gmem_bytes lists ~150 of them.
        prefixes = set(probe.position)
        lengths = sorted({len(prefix) for prefix in prefixes})
        anchors = lines_anchors(lines, probe)
        for insn in originals:
            opcode = insn.opcode
            hit = matches.get(opcode.text)
            if hit is None:
                components = opcode.components
                hit = matches[opcode.text] = any(components[:n] in prefixes for n in lengths)
            if hit or id(insn) in anchors:
                for snippet in snippets:
                    sites.append(Site(probe.name, snippet.where, "instruction", insn, function.name))
        return sites
