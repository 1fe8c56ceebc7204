"""PTX as the instrumentation core sees it (neutrino/isa/interface.py).

A thin adapter: the PTX steps live in the modules of neutrino/passes/ that
have always held them (resolve, lower_save, buffers, counting, target, prune,
verify); this names them for the passes of passes/pipeline.py.
"""

from __future__ import annotations

import attrs

from neutrino import ptxas
from neutrino.isa.ptx import ir, parse_module, print_module
from neutrino.passes.buffers import PtxBufferAddressing
from neutrino.passes.counting import PtxCountingVariant
from neutrino.passes.lower_save import PtxSaveLowering
from neutrino.passes.match import kernel_state, matcher
from neutrino.passes.prune import PtxPruning
from neutrino.passes.resolve import PtxOperandResolution
from neutrino.passes import register_counters
from neutrino.passes.target import PtxTargetFitting
from neutrino.passes.verify import PtxVerifier, check_engine_atomics, verify_probe_file
from neutrino.passes.virtualize import virtualize


def check(module: ir.Module, ctx, lowered: bool) -> None:
    """Original instructions all present and in order; probe code allowed and writing only our registers;
    once lowered, atomics only into the aggregation maps' counters."""
    for name, state in ctx.kernels.items():
        PtxVerifier.check_kernel(name, state, lowered)
        if lowered:
            check_engine_atomics(name, state, ctx.probes)


def kernel_info(ctx) -> dict[str, dict]:
    """The kernel descriptions of spec/kernel-json.md: the parameters the kernel had, and its counting variant."""
    return {name: ctx.describe(state, original_params=len(state.function.params or []) - len(state.params),
                               count_kernel=state.count_kernel, instructions=instruction_counts(state))
            for name, state in ctx.kernels.items() if not state.counting}


def instruction_counts(state) -> dict[str, int]:
    """Static PTX instructions of the entry before and after probing (nested scopes included): the
    `instructions` of spec/kernel-json.md, read by the probe cost report; with the number of hist
    buckets counted in registers (passes/register_counters.py) where there are any."""
    counts = {"original": len(state.original_ids), "probed": len(ir.instructions(state.function.body or []))}
    counters = register_counters.count(state)
    return {**counts, "register_counters": counters} if counters else counts


@attrs.frozen
class PtxIsa:
    """PTX behind the Isa interface (neutrino/isa/interface.py): one instance, `PTX`."""

    name: str = "ptx"
    entry_words: tuple[str, str] = ("entry", "entries")  # what messages call a kernel, one and many
    comment: str = "//"
    resolve_operands = PtxOperandResolution().run
    lower_save = PtxSaveLowering().run
    buffer_addressing = PtxBufferAddressing().run
    counting_variant = PtxCountingVariant().run
    fit_target = PtxTargetFitting().run
    prune = PtxPruning().run

    @staticmethod
    def parse_module(text: str, source: str = "<ptx>") -> ir.Module:
        return parse_module(text, source)

    @staticmethod
    def print_module(module: ir.Module) -> str:
        return print_module(module)

    @staticmethod
    def show(module: ir.Module, ctx) -> str:
        return print_module(module)  # every pass edits the module itself

    @staticmethod
    def entries(module: ir.Module) -> list[ir.Function]:
        return module.entries()

    kernel_state = staticmethod(kernel_state)
    matcher = staticmethod(matcher)
    virtualize = staticmethod(virtualize)
    verify_probe_file = staticmethod(verify_probe_file)
    check = staticmethod(check)
    kernel_info = staticmethod(kernel_info)
    check_assembles = staticmethod(ptxas.check_assembles)


PTX = PtxIsa()
