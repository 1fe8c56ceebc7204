"""SAVE lowering on GCN and RDNA: the primitives of the ISA-neutral lowering (passes/save_core.py).

Where a record goes (spec/pipeline.md, "GCN"): each unit (thread, wave or
workgroup) owns `cap` records of its map, from a base address the kernel
entry computes (buffer addressing). A cursor counts the unit's records; a
SAVE past `cap` writes nothing. The lanes that save are chosen by narrowing
`exec` (and restoring it after): the guard's lanes at thread level, else one
lane, the leader:

    thread   every active lane, at its own slot (VGPR address, VGPR cursor)
    warp     the wave's first active lane (s_ff1 of exec), SGPR slot and cursor
    block    the lane holding work-item (0,0,0)

The values go through VGPRs of ours (a store's data is a VGPR).
"""

from __future__ import annotations

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.gcn import ir
from neutrino.isa.gcn.registers import GcnKernelState, SaveOp, half, insn
from neutrino.passes.save_core import lower_exit_counts, lower_record, lower_sum, packed_offsets
from neutrino.passes.state import Context

ORIGIN = "save-lowering"


@attrs.frozen
class GcnSaveLowering:
    """GCN's step of the lower-save pass (passes/pipeline.py): each SaveOp of a site's code replaced by its stores."""

    def run(self, module: ir.Module, ctx: Context) -> None:
        for state in ctx.kernels.values():
            prims = GcnSavePrimitives(state, ctx.probes.maps)
            for site in state.sites:
                code: list = []
                for item in site.code:
                    code.extend(prims.lower(item) if type(item) is SaveOp else [item])
                site.code = code
            exit_code = lower_exit_counts(prims, [ctx.probes.maps[name] for name in state.maps])
            if exit_code:  # at s_endpgm every lane the wave started with counts, whatever the last branch left in exec
                d = state.dialect
                exit_code.insert(0, insn(d.mask("s_mov"), d.exec, state.registers.sgprs("entry_exec", d.mask_sgprs), origin=ORIGIN))
            state.exit_code = exit_code


@attrs.define
class GcnSavePrimitives:
    """The steps of passes/save_core.py in GCN (the kernel's dialect): exec narrowing, global stores, atomics."""

    state: GcnKernelState
    maps: dict
    narrowed: bool = False  # saving_lanes narrowed exec: end_saving restores it
    offsets: list[int] = attrs.Factory(list)  # byte offset of each field of the record being lowered

    def lower(self, save: SaveOp) -> list[ir.Instruction]:
        spec = self.maps[save.map]
        if spec.type == "hist":
            raise InstrumentError(f"[probe {save.probe}] hist maps are not supported on GCN yet (map {save.map})")
        if spec.cap == "count":
            raise InstrumentError(f"[probe {save.probe}] cap = \"count\" is not supported on GCN yet (map {save.map})")
        self.state.levels.add(spec.level)
        data = [self.to_vgprs(value, ftype, i) for i, (value, ftype) in enumerate(zip(save.values, save.types))]
        code = [c for _, moves in data for c in moves]
        fields = [reg for reg, _ in data]
        if spec.type == "sum":
            return code + lower_sum(self, spec, fields, save.guard)
        self.offsets = [f.offset for f in spec.fields] if len(spec.fields) == len(data) else packed_offsets(save.types)
        return code + lower_record(self, spec, fields, save.guard)

    def to_vgprs(self, value: ir.Operand, ftype: str, index: int) -> tuple[ir.RegRange, list]:
        """The field's value in VGPRs of ours: one for u32, a pair for u64 (zero-extended from 32 bits)."""
        wide = ftype == "u64"
        out = self.state.registers.vgprs(f"save_data{index}_{ftype}", 2 if wide else 1)
        parts = [value] if type(value) is not ir.RegRange or value.count == 1 else [half(value, 0), half(value, 1)]
        code = [insn("v_mov_b32_e32", half(out, 0), parts[0], origin=ORIGIN)]
        if wide:
            code.append(insn("v_mov_b32_e32", half(out, 1), parts[1] if len(parts) > 1 else 0, origin=ORIGIN))
        return out, code

    # -- the lanes that save
    def saving_lanes(self, level: str, guard: ir.RegRange | None, at_exit: bool = False) -> list[ir.Instruction]:
        """exec narrowed to the lanes that save: at thread level the guard's (all, unguarded), else the unit's leader."""
        regs, d = self.state.registers, self.state.dialect
        self.narrowed = level != "thread" or guard is not None
        if not self.narrowed:
            return []
        saved = regs.sgprs("exec_saved", d.mask_sgprs)
        if level == "thread":
            return [insn(d.mask("s_mov"), saved, d.exec, origin=ORIGIN), insn(d.mask("s_and"), d.exec, d.exec, guard, origin=ORIGIN)]
        leader = regs.sgprs("leader", d.mask_sgprs)
        return self.leader(level, leader, guard) + [insn(d.mask("s_and_saveexec"), saved, leader, origin=ORIGIN)]

    def leader(self, level: str, mask: ir.RegRange, guard: ir.RegRange | None) -> list[ir.Instruction]:
        """`mask` = the unit's leader lane among the active (and guarded) ones, or no lane."""
        regs, d = self.state.registers, self.state.dialect
        if level == "warp":
            lane, candidates = regs.sgprs("leader_lane"), regs.sgprs("candidates", d.mask_sgprs)
            return [insn(d.mask("s_and"), candidates, d.exec, guard if guard is not None else d.exec, origin=ORIGIN),
                    insn(d.first_one, lane, candidates, origin=ORIGIN),
                    insn(d.mask("s_lshl"), mask, 1, lane, origin=ORIGIN),
                    insn(d.mask("s_and"), mask, mask, candidates, origin=ORIGIN)]  # no lane when none is a candidate
        code = [insn("v_cmp_eq_u32_e64", mask, 0, regs.vgprs("flat_tid"), origin=ORIGIN)]
        if guard is not None:
            code.append(insn(d.mask("s_and"), mask, mask, guard, origin=ORIGIN))
        return code

    def end_saving(self, level: str) -> list[ir.Instruction]:
        if not self.narrowed:
            return []
        d = self.state.dialect
        return [insn(d.mask("s_mov"), d.exec, self.state.registers.sgprs("exec_saved", d.mask_sgprs), origin=ORIGIN)]

    # -- one record of an array map
    def below_cap(self, spec, guard) -> list[ir.Instruction]:
        """exec narrowed further to the lanes whose unit cursor is below cap (a wave's cursor is an SGPR: all or none)."""
        regs, d = self.state.registers, self.state.dialect
        if spec.level != "thread":
            return [insn("s_cmp_lt_u32", regs.sgprs(f"cursor_{spec.name}"), int(spec.cap), origin=ORIGIN),
                    insn(d.mask("s_cselect"), d.exec, d.exec, 0, origin=ORIGIN)]
        mask = regs.sgprs("mask", d.mask_sgprs)
        return [*self.constant("cap", int(spec.cap)),
                insn("v_cmp_gt_u32_e64", mask, self.inline("cap", int(spec.cap)), regs.vgprs(f"cursor_{spec.name}"), origin=ORIGIN),
                insn(d.mask("s_and_saveexec"), regs.sgprs("exec_saving", d.mask_sgprs), mask, origin=ORIGIN)]

    def record_address(self, spec) -> list[ir.Instruction]:
        """A lane's slot is its next record already; a wave's record is at its slot + cursor * record bytes."""
        if spec.level == "thread":
            return []
        regs = self.state.registers
        voffset = regs.vgprs("record_offset")
        return [insn("v_mov_b32_e32", voffset, regs.sgprs(f"cursor_{spec.name}"), origin=ORIGIN),
                insn("v_mul_u32_u24_e32", voffset, spec.record_bytes, voffset, origin=ORIGIN)]

    def store_chunks(self, spec, count: int) -> list[list[int]]:
        return [[i] for i in range(count)]  # one global_store per field: each field's VGPRs are its own

    def store_fields(self, spec, values: list[ir.RegRange], first: int) -> list[ir.Instruction]:
        regs = self.state.registers
        if spec.level == "thread":
            return [self.store(values[0], regs.vgprs(f"slot_{spec.name}", 2), "off", self.offsets[first])]
        return [self.store(values[0], regs.vgprs("record_offset"), regs.sgprs(f"slot_{spec.name}", 2), self.offsets[first])]

    def store(self, data: ir.RegRange, vaddr: ir.RegRange, saddr, offset: int) -> ir.Instruction:
        mnemonic = self.state.dialect.store[0 if data.count == 1 else 1]
        return insn(mnemonic, vaddr, data, saddr, origin=ORIGIN, modifiers=(f"offset:{offset}",) if offset else ())

    def end_below_cap(self, spec) -> list[ir.Instruction]:
        """exec back to the saving lanes; at thread level the lanes that stored move their slot to the next record."""
        regs, d = self.state.registers, self.state.dialect
        if spec.level != "thread":
            return [insn(d.mask("s_mov"), d.exec, regs.sgprs("leader", d.mask_sgprs), origin=ORIGIN)]
        address, carry, sink = regs.vgprs(f"slot_{spec.name}", 2), regs.sgprs("carry", d.mask_sgprs), regs.sgprs("carry_out", d.mask_sgprs)
        size = self.inline("record_bytes", spec.record_bytes)
        return [*self.constant("record_bytes", spec.record_bytes),
                insn("v_add_co_u32_e64", half(address, 0), carry, size, half(address, 0), origin=ORIGIN),
                insn(d.add_carry_in, half(address, 1), sink, 0, half(address, 1), carry, origin=ORIGIN),
                insn(d.mask("s_mov"), d.exec, regs.sgprs("exec_saving", d.mask_sgprs), origin=ORIGIN)]

    def bump_cursor(self, spec, guard) -> list[ir.Instruction]:
        """Every attempt counts, stored or not: each saving lane's cursor, or the wave's when it had a leader."""
        regs, d = self.state.registers, self.state.dialect
        if spec.level == "thread":
            cursor = regs.vgprs(f"cursor_{spec.name}")
            return [insn(d.add_u32, cursor, 1, cursor, origin=ORIGIN)]
        cursor = regs.sgprs(f"cursor_{spec.name}")
        return [insn(d.compare_mask(), regs.sgprs("leader", d.mask_sgprs), 0, origin=ORIGIN),
                insn("s_addc_u32", cursor, cursor, 0, origin=ORIGIN)]

    def store_count(self, spec) -> list[ir.Instruction]:
        """The unit's cursor into its count (spec/kernel-json.md), by the saving lanes."""
        regs = self.state.registers
        if spec.level == "thread":
            count, cursor = regs.vgprs(f"count_{spec.name}", 2), regs.vgprs(f"cursor_{spec.name}")
            return [insn(self.state.dialect.store[0], count, cursor, "off", origin=ORIGIN)]
        value = regs.vgprs("count_value")
        return [insn("v_mov_b32_e32", value, regs.sgprs(f"cursor_{spec.name}"), origin=ORIGIN),
                self.store(value, regs.vgprs("zero"), regs.sgprs(f"count_{spec.name}", 2), 0)]

    # -- sum maps
    def counter_add(self, spec, index: int, value: ir.RegRange, guard) -> list[ir.Instruction]:
        """Each saving lane adds its value to the launch's counter (u64 atomics; no wave reduction yet)."""
        regs, d = self.state.registers, self.state.dialect
        return [insn(d.atomic_add_u64, regs.vgprs("zero"), value, regs.sgprs(f"map_{spec.name}", 2), origin=ORIGIN,
                     modifiers=(f"offset:{8 * index}",) if index else ())]

    # -- literals: gfx9's VOP3 encoding has none, so a value outside the inline range goes through an SGPR
    def constant(self, role: str, value: int) -> list[ir.Instruction]:
        return [] if -16 <= value <= 64 else [insn("s_mov_b32", self.state.registers.sgprs(role), value, origin=ORIGIN)]

    def inline(self, role: str, value: int):
        return value if -16 <= value <= 64 else self.state.registers.sgprs(role)
