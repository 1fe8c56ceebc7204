"""Tracepoint matching on PTX: an entry's original instructions, its exits, and what a position names.

The pass itself (which kernels, which sites, in what order) is ISA-neutral:
passes/pipeline.py, TracepointMatching.
"""

from __future__ import annotations

from neutrino.isa.ptx import ir
from neutrino.isa.ptx.semantics import kernel_exits
from neutrino.passes.state import KernelState


def exits_of(instructions: list[ir.Instruction]) -> list[ir.Instruction]:
    """The instructions that end the kernel, where kernel-position `after` code goes."""
    return kernel_exits(instructions)


def kernel_state(module: ir.Module, function: ir.Function) -> KernelState:
    originals = [i for i in ir.instructions(function.body) if i.origin is None]
    return KernelState(function, originals=originals, original_ids=[id(i) for i in originals], exits=exits_of(originals))


def matcher(module: ir.Module, state: KernelState):
    """For one entry: probe → the original instructions its position names (opcode component prefixes)."""
    originals = state.originals
    matches: dict[tuple, dict[str, bool]] = {}  # position → opcode text → matched; a kernel repeats few opcodes

    def instructions_at(probe) -> list[ir.Instruction]:
        seen = matches.setdefault(probe.position, {})
        # A set lookup per prefix length, not a comparison per prefix: gmem_bytes lists ~150 of them.
        prefixes = set(probe.position)
        lengths = sorted({len(prefix) for prefix in prefixes})
        out = []
        for insn in originals:
            opcode = insn.opcode
            hit = seen.get(opcode.text)
            if hit is None:
                components = opcode.components
                hit = seen[opcode.text] = any(components[:n] in prefixes for n in lengths)
            if hit:
                out.append(insn)
        return out

    return instructions_at
