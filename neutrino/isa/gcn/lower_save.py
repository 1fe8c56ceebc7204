"""SAVE lowering on GCN and RDNA: the neutral steps (passes/neutral_ops.py `NeutralSteps`) translated for the kernel.

Where a record goes (spec/pipeline.md, "GCN"): each unit (thread, wave or
workgroup) owns `cap` records of its map, from a base address the kernel
entry computes (buffer addressing). A cursor counts the unit's records; a
SAVE past `cap` writes nothing. The lanes that save are the guard's at thread
level, else one lane, the leader: the wave's first active lane (warp), the
lane holding work-item (0,0,0) (block). What is GCN's: `exec` narrowing and
registers (isa/gcn/translate.py), and at the kernel's end every lane the wave
started with counts.
"""

from __future__ import annotations

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.gcn import ir
from neutrino.isa.gcn.registers import insn
from neutrino.isa.gcn.translate import GcnTranslation
from neutrino.passes.neutral_ops import NeutralSteps, SaveOp
from neutrino.passes.save_core import lower_exit_counts
from neutrino.passes.state import Context

ORIGIN = "save-lowering"


@attrs.frozen
class GcnSaveLowering:
    """GCN's step of the lower-save pass (passes/pipeline.py): each SaveOp of a site's code replaced by its stores."""

    def run(self, module: ir.Module, ctx: Context) -> None:
        for state in ctx.kernels.values():
            steps, gcn = NeutralSteps(state.dialect.wave_lanes), GcnTranslation(state, ORIGIN)
            for site in state.sites:
                code: list = []
                for item in site.code:
                    if type(item) is not SaveOp:
                        code.append(item)
                        continue
                    moves, record = lowered(steps, ctx.probes.maps, item, state)
                    code += gcn.translate(moves, shared=False) + gcn.translate(record)
                site.code = code
            exit_code = gcn.translate(lower_exit_counts(steps, [ctx.probes.maps[name] for name in state.maps]))
            if exit_code:  # at s_endpgm every lane the wave started with counts, whatever the last branch left in exec
                d = state.dialect
                exit_code.insert(0, insn(d.mask("s_mov"), d.exec, state.registers.sgprs("entry_exec", d.mask_sgprs), origin=ORIGIN))
            state.exit_code = exit_code


def lowered(steps: NeutralSteps, maps: dict, save: SaveOp, state) -> tuple[list, list]:
    """The neutral operations of one SAVE (NeutralSteps.lower), or the refusal of a map GCN cannot fill yet."""
    spec = maps[save.map]
    if spec.type == "hist":
        raise InstrumentError(f"[probe {save.probe}] hist maps are not supported on GCN yet (map {save.map})")
    if spec.cap == "count":
        raise InstrumentError(f"[probe {save.probe}] cap = \"count\" is not supported on GCN yet (map {save.map})")
    state.levels.add(spec.level)
    return steps.lower(spec, save.values, save.types, save.guard)
