"""SAVE lowering on GCN: records become `global_store`s, sums `global_atomic_add_x2`.

Where a record goes (spec/pipeline.md, "GCN"): each unit (thread, wave or
workgroup) owns `cap` records of its map, from a base address the kernel
entry computes (buffer addressing). A cursor counts the unit's records; a
SAVE past `cap` writes nothing. Wave- and workgroup-level SAVEs are stored by
one lane, the leader, by narrowing `exec` around the stores and restoring it:

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
from neutrino.passes.state import Context

ORIGIN = "save-lowering"


@attrs.frozen
class GcnSaveLowering:
    """GCN's step of the lower-save pass (passes/pipeline.py)."""

    def run(self, module: ir.Module, ctx: Context) -> None:
        for state in ctx.kernels.values():
            for site in state.sites:
                code: list = []
                for item in site.code:
                    code.extend(self.lower(state, item, ctx) if type(item) is SaveOp else [item])
                site.code = code
            state.exit_code = self.exit_counts(state, ctx)

    def lower(self, state: GcnKernelState, save: SaveOp, ctx: Context) -> list[ir.Instruction]:
        spec = ctx.probes.maps[save.map]
        if spec.type == "hist":
            raise InstrumentError(f"[probe {save.probe}] hist maps are not supported on GCN yet (map {save.map})")
        if spec.cap == "count":
            raise InstrumentError(f"[probe {save.probe}] cap = \"count\" is not supported on GCN yet (map {save.map})")
        state.levels.add(spec.level)
        regs = state.registers
        data = [self.to_vgprs(state, value, ftype, i) for i, (value, ftype) in enumerate(zip(save.values, save.types))]
        code = [c for _, c in data for c in c]
        if spec.type == "sum":
            return code + self.sum(state, spec, [d for d, _ in data], save.guard)
        offsets = [f.offset for f in spec.fields] if len(spec.fields) == len(data) else _packed(save.types)
        if spec.level == "thread":
            return code + self.thread_record(state, spec, data, offsets, save.guard)
        regs, d = state.registers, state.dialect
        leader, mask, saved = regs.sgprs("leader", d.mask_sgprs), regs.sgprs("mask", d.mask_sgprs), regs.sgprs("exec_saved", d.mask_sgprs)
        cursor, base, voffset = regs.sgprs(f"cursor_{save.map}"), regs.sgprs(f"slot_{save.map}", 2), regs.vgprs("record_offset")
        code += self.leader(state, spec.level, leader, save.guard)
        code += [insn("s_cmp_lt_u32", cursor, int(spec.cap), origin=ORIGIN),  # records past cap are counted, not written
                 insn(d.mask("s_cselect"), mask, leader, 0, origin=ORIGIN),
                 insn("v_mov_b32_e32", voffset, cursor, origin=ORIGIN),
                 insn("v_mul_u32_u24_e32", voffset, spec.record_bytes, voffset, origin=ORIGIN),
                 insn(d.mask("s_and_saveexec"), saved, mask, origin=ORIGIN)]
        code += [self.store(state, value, voffset, base, off) for (value, _), off in zip(data, offsets)]
        code += [insn(d.mask("s_mov"), d.exec, saved, origin=ORIGIN),
                 insn(d.compare_mask(), leader, 0, origin=ORIGIN),
                 insn("s_addc_u32", cursor, cursor, 0, origin=ORIGIN)]  # one more attempt when the wave had a leader
        return code

    def thread_record(self, state: GcnKernelState, spec, data: list, offsets: list[int], guard) -> list[ir.Instruction]:
        """Every active lane (of the guard's) counts an attempt; those below cap store at their own slot."""
        regs, d = state.registers, state.dialect
        mask, saved = regs.sgprs("mask", d.mask_sgprs), regs.sgprs("exec_saved", d.mask_sgprs)
        cursor, address = regs.vgprs(f"cursor_{spec.name}"), regs.vgprs(f"slot_{spec.name}", 2)
        carry, sink = regs.sgprs("carry", d.mask_sgprs), regs.sgprs("carry_out", d.mask_sgprs)
        code = [insn(d.mask("s_mov"), saved, d.exec, origin=ORIGIN)]
        if guard is not None:
            code.append(insn(d.mask("s_and"), d.exec, d.exec, guard, origin=ORIGIN))
        code += [*constant(state, "cap", int(spec.cap)),
                 insn("v_cmp_gt_u32_e64", mask, inline(state, "cap", int(spec.cap)), cursor, origin=ORIGIN),
                 insn(d.add_u32, cursor, 1, cursor, origin=ORIGIN),
                 insn(d.mask("s_and"), d.exec, d.exec, mask, origin=ORIGIN)]
        code += [self.store(state, value, address, "off", off) for (value, _), off in zip(data, offsets)]
        code += [*constant(state, "record_bytes", spec.record_bytes),
                 insn("v_add_co_u32_e64", half(address, 0), carry, inline(state, "record_bytes", spec.record_bytes), half(address, 0), origin=ORIGIN),
                 insn(d.add_carry_in, half(address, 1), sink, 0, half(address, 1), carry, origin=ORIGIN),
                 insn(d.mask("s_mov"), d.exec, saved, origin=ORIGIN)]
        return code

    def exit_counts(self, state: GcnKernelState, ctx: Context) -> list[ir.Instruction]:
        """At every s_endpgm, with the wave's launch exec: each unit's leader stores its attempt count (spec/kernel-json.md)."""
        regs, d = state.registers, state.dialect
        code: list[ir.Instruction] = []
        for name in state.maps:
            spec = ctx.probes.maps[name]
            if spec.type != "array":
                continue
            state.levels.add(spec.level)
            if spec.level == "thread":
                code.append(insn(d.store[0], regs.vgprs(f"count_{name}", 2), regs.vgprs(f"cursor_{name}"), "off", origin=ORIGIN))
                continue
            leader, saved, value = regs.sgprs("leader", d.mask_sgprs), regs.sgprs("exec_saved", d.mask_sgprs), regs.vgprs("count_value")
            code += self.leader(state, spec.level, leader)
            code += [insn("v_mov_b32_e32", value, regs.sgprs(f"cursor_{name}"), origin=ORIGIN),
                     insn(d.mask("s_and_saveexec"), saved, leader, origin=ORIGIN),
                     insn(d.store[0], regs.vgprs("zero"), value, regs.sgprs(f"count_{name}", 2), origin=ORIGIN),
                     insn(d.mask("s_mov"), d.exec, saved, origin=ORIGIN)]
        if code:
            code.insert(0, insn(d.mask("s_mov"), d.exec, regs.sgprs("entry_exec", d.mask_sgprs), origin=ORIGIN))
        return code

    @staticmethod
    def to_vgprs(state: GcnKernelState, value: ir.Operand, ftype: str, index: int) -> tuple[ir.RegRange, list]:
        """The field's value in VGPRs of ours: one for u32, a pair for u64 (zero-extended from 32 bits)."""
        wide = ftype == "u64"
        out = state.registers.vgprs(f"save_data{index}_{ftype}", 2 if wide else 1)
        parts = [value] if type(value) is not ir.RegRange or value.count == 1 else [half(value, 0), half(value, 1)]
        code = [insn("v_mov_b32_e32", half(out, 0), parts[0], origin=ORIGIN)]
        if wide:
            code.append(insn("v_mov_b32_e32", half(out, 1), parts[1] if len(parts) > 1 else 0, origin=ORIGIN))
        return out, code

    @staticmethod
    def leader(state: GcnKernelState, level: str, mask: ir.RegRange, guard: ir.RegRange | None = None) -> list[ir.Instruction]:
        """`mask` = the lanes that save: for a thread-level sum the guarded lanes, else the leader (when guarded)."""
        d = state.dialect
        if level == "thread":
            return [insn(d.mask("s_and"), mask, d.exec, guard, origin=ORIGIN)] if guard is not None else []
        if level == "warp":
            lane, candidates = state.registers.sgprs("leader_lane"), state.registers.sgprs("candidates", d.mask_sgprs)
            code = [insn(d.mask("s_and"), candidates, d.exec, guard if guard is not None else d.exec, origin=ORIGIN),
                    insn(d.first_one, lane, candidates, origin=ORIGIN),
                    insn(d.mask("s_lshl"), mask, 1, lane, origin=ORIGIN),
                    insn(d.mask("s_and"), mask, mask, candidates, origin=ORIGIN)]  # no lane when none is a candidate
            return code
        flat = state.registers.vgprs("flat_tid")
        code = [insn("v_cmp_eq_u32_e64", mask, 0, flat, origin=ORIGIN)]
        if guard is not None:
            code.append(insn(d.mask("s_and"), mask, mask, guard, origin=ORIGIN))
        return code

    @staticmethod
    def store(state: GcnKernelState, data: ir.RegRange, vaddr: ir.RegRange, saddr, offset: int) -> ir.Instruction:
        mnemonic = state.dialect.store[0 if data.count == 1 else 1]
        modifiers = (f"offset:{offset}",) if offset else ()
        return insn(mnemonic, vaddr, data, saddr, origin=ORIGIN, modifiers=modifiers)

    def sum(self, state: GcnKernelState, spec, data: list[ir.RegRange], guard: ir.RegRange | None) -> list[ir.Instruction]:
        """Each saving lane adds its values to the launch's counters (u64 atomics; no wave reduction yet)."""
        regs, d = state.registers, state.dialect
        base, zero = regs.sgprs(f"map_{spec.name}", 2), regs.vgprs("zero")
        mask, saved = regs.sgprs("mask", d.mask_sgprs), regs.sgprs("exec_saved", d.mask_sgprs)
        code = self.leader(state, spec.level, mask, guard)
        if code:
            code.append(insn(d.mask("s_and_saveexec"), saved, mask, origin=ORIGIN))
        for i, value in enumerate(data):
            code.append(insn(d.atomic_add_u64, zero, value, base, origin=ORIGIN, modifiers=(f"offset:{8 * i}",) if i else ()))
        if len(code) > len(data):
            code.append(insn(d.mask("s_mov"), d.exec, saved, origin=ORIGIN))
        return code


def _packed(types: tuple[str, ...]) -> list[int]:
    out, offset = [], 0
    for t in types:
        out.append(offset)
        offset += 8 if t == "u64" else 4
    return out


def constant(state: GcnKernelState, role: str, value: int) -> list[ir.Instruction]:
    """gfx9's VOP3 encoding has no literal: a value outside the inline range goes through an SGPR."""
    if -16 <= value <= 64:
        return []
    return [insn("s_mov_b32", state.registers.sgprs(role), value, origin=ORIGIN)]


def inline(state: GcnKernelState, role: str, value: int):
    return value if -16 <= value <= 64 else state.registers.sgprs(role)
