"""The probe engine for AMD GCN: assembly text + probes → probed assembly + kernel descriptions.

Untested on AMD hardware: what is checked is that every probed kernel
assembles with LLVM's AMDGPU assembler (`neutrino.llvm_mc`), with its
descriptor's register counts and kernel arguments grown to match.
"""

from __future__ import annotations

from neutrino.engine import Instrumented, cycle_collection_paused
from neutrino.errors import InstrumentError
from neutrino.isa.gcn import parse_module, print_module
from neutrino.passes.gcn import gcn_pipeline
from neutrino.passes.manager import Context, PassManager
from neutrino.probefile import ProbeFile


def instrument_gcn(text: str, probes: ProbeFile, kernel: str | None = None, source: str = "<gcn>",
                   pipeline: PassManager | None = None) -> Instrumented:
    if probes.isa != "gcn":
        raise InstrumentError(f"{probes.path}: its snippets are {probes.isa.upper()}; load it with isa='gcn' for a GCN module")
    with cycle_collection_paused():
        module = parse_module(text, source)
        ctx = Context(probes, kernel)
        (pipeline or gcn_pipeline()).run(module, ctx)
        return Instrumented(print_module(module), kernel_info(ctx), dict(ctx.timings))


WAVE_LANES = 64  # gfx90a/gfx942 compute kernels run wave64: a `warp` unit is a wave of 64 lanes


def kernel_info(ctx: Context) -> dict[str, dict]:
    """Per kernel: appended arguments, maps, sites, skipped sites, old and new register counts."""
    out = {}
    for name, state in ctx.kernels.items():
        desc = state.descriptor
        out[name] = {
            "name": name,
            "isa": "gcn",
            "params": state.params,
            "kernarg_size": state.kernarg_size or desc.get_int("kernarg_size"),
            "maps": [dict(ctx.probes.maps[m].to_json(), lanes=WAVE_LANES) for m in state.maps],
            "sites": len(state.sites),
            "skipped": state.skipped,
            "registers": {"before": state.old_counts,
                          "after": {k: desc.get_int(k) for k in ("next_free_sgpr", "next_free_vgpr")}},
        }
    return out
