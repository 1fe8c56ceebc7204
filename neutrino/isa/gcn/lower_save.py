"""SAVE lowering on GCN and RDNA: the neutral steps (passes/neutral_ops.py `NeutralSteps`) translated for the kernel.

Where a record goes (spec/pipeline.md, "GCN"): each unit (thread, wave or
workgroup) owns `cap` records of its map, from a base address the kernel
entry computes (buffer addressing). A cursor counts the unit's records; a
SAVE past `cap` writes nothing. The lanes that save are the guard's at thread
level, else one lane, the leader: the wave's first active lane (warp), the
lane holding work-item (0,0,0) (block). The loop over the sites is
passes/site_code.py's; what is GCN's: `exec` narrowing and registers
(isa/gcn/translate.py), and at the kernel's end every lane the wave started with counts.
"""

from __future__ import annotations

from neutrino.isa.gcn import ir
from neutrino.isa.gcn.registers import insn
from neutrino.isa.gcn.translate import GcnTranslation
from neutrino.passes.site_code import LOWERING_ORIGIN as ORIGIN, lower_saves
from neutrino.passes.state import Context


def lower_save(module: ir.Module, ctx: Context) -> None:
    """GCN's step of the lower-save pass (passes/pipeline.py): each SaveOp of a site's code replaced by its stores."""
    for state in ctx.kernels.values():
        d = state.dialect
        exit_code = lower_saves(ctx, d.wave_lanes, state, GcnTranslation(state, ORIGIN).translate)
        if exit_code:  # at s_endpgm every lane the wave started with counts, whatever the last branch left in exec
            exit_code.insert(0, insn(d.mask("s_mov"), d.exec, state.registers.sgprs("entry_exec", d.mask_sgprs), origin=ORIGIN))
        state.exit_code = exit_code
