"""Tracepoint matching on PTX: an entry's original instructions, its exits, and what a position names.

The pass itself (which kernels, which sites, in what order) is ISA-neutral:
passes/pipeline.py, TracepointMatching.
"""

from __future__ import annotations

import attrs

from neutrino.isa.ptx import ir
from neutrino.isa.ptx.lines import LINE_POSITIONS, build_line_map, position_anchors, selected
from neutrino.isa.ptx.semantics import kernel_exits, position_matcher
from neutrino.passes.state import KernelState


def exits_of(instructions: list[ir.Instruction]) -> list[ir.Instruction]:
    """The instructions that end the kernel, where kernel-position `after` code goes."""
    return kernel_exits(instructions)


def kernel_state(module: ir.Module, function: ir.Function) -> KernelState:
    originals = [i for i in ir.instructions(function.body) if i.origin is None]
    return KernelState(function, originals=originals, original_ids=[id(i) for i in originals], exits=exits_of(originals))


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


def _selects_by_line(probe) -> bool:
    return bool(probe.lines) or any(len(p) == 1 and p[0] in LINE_POSITIONS for p in probe.position)


def matcher(module: ir.Module, state: KernelState):
    """For one entry: probe → the original instructions its position names (opcode component prefixes,
    selectors of the semantics table, or source lines and line/block anchors of the entry's line map)."""
    lines = _LazyLineMap(module, state.function)

    def instructions_at(probe) -> list[ir.Instruction]:
        originals = state.originals
        anchors = ()
        if _selects_by_line(probe):
            originals = lines.matched(probe, originals)
            anchors = lines.anchors.get(probe.name, ())
        named = position_matcher(probe.position)  # opcode text → matched, kept per position
        if not anchors:
            return [insn for insn in originals if named[insn.opcode.text]]
        return [insn for insn in originals if named[insn.opcode.text] or id(insn) in anchors]

    return instructions_at
