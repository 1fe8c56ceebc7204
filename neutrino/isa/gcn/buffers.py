"""Buffer addressing on GCN: map pointers as extra kernel arguments, the entry code, the new counts.

Each map the kernel's probes write gets an 8-byte `global_buffer` argument
appended after the kernel's last argument (hidden ones included), so the
runtime's own argument layout is untouched; `.amdhsa_kernarg_size` and the
metadata's `.kernarg_segment_size` and `.args` grow by them. Code at kernel
entry keeps the kernarg segment pointer, the workgroup ids and the packed
work-item ids (registers the kernel may reuse later) in registers of ours,
loads the map pointers and computes each unit's slot. Last, the descriptor's
register counts are raised to cover every register the probes took, and all
code is spliced in.
"""

from __future__ import annotations

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.gcn import abi, ir, metadata
from neutrino.isa.gcn.registers import GcnKernelState, half, insn
from neutrino.passes.build import splice as insert_around
from neutrino.passes.save_core import RECORDS_ALIGN, address_maps, record_stride
from neutrino.passes.state import Context

ORIGIN = "buffer-addressing"
HIDDEN_NEEDED = ("hidden_block_count_x", "hidden_group_size_x")
UNIFIED_VGPRS = 512  # gfx90a/gfx94x: arch VGPRs and AGPRs share one file of 512 per wave


@attrs.frozen
class GcnBufferAddressing:
    """GCN's step of the buffer-addressing pass (passes/pipeline.py)."""

    def run(self, module: ir.Module, ctx: Context) -> None:
        meta = module.metadata()
        if meta is None:
            raise InstrumentError(f"{module.source}: no .amdgpu_metadata block: cannot add kernel arguments")
        for state in ctx.kernels.values():
            if not state.sites:
                continue
            self.arguments(state, meta, ctx)
            state.entry_code = self.entry_code(state, meta, ctx)
            self.counts(state, meta)
        splice(module, ctx)

    @staticmethod
    def arguments(state: GcnKernelState, meta: ir.Metadata, ctx: Context) -> None:
        old = state.descriptor.get_int("kernarg_size")
        offset = -(-old // 8) * 8
        new = []
        for name in state.maps:
            new.append({".address_space": "global", ".name": f"nt_map_{name}", ".offset": str(offset), ".size": "8",
                        ".value_kind": "global_buffer"})
            state.params.append({"name": f"nt_map_{name}", "map": name, "offset": offset, "size": 8})
            offset += 8
        state.kernarg_size = offset
        state.descriptor.set("kernarg_size", offset)
        metadata.set_key(meta, state.name, "kernarg_segment_size", offset)
        metadata.append_arguments(meta, state.name, [{k.lstrip("."): v for k, v in a.items()} for a in new])

    def entry_code(self, state: GcnKernelState, meta: ir.Metadata, ctx: Context) -> list[ir.Instruction]:
        """The kernel arguments and ids the probes read, kept in registers of ours, then passes/save_core.address_maps."""
        desc, regs, d = state.descriptor, state.registers, state.dialect
        kernarg = abi.kernarg_pointer(desc)
        if kernarg is None:
            raise InstrumentError(f"kernel {state.name}: takes no kernel arguments, so probes cannot be given buffers")
        kptr = regs.sgprs("kernarg", 2)
        code = [insn("s_mov_b64", kptr, ir.RegRange("s", kernarg, 2, True), origin=ORIGIN)]
        if state.exit_code or any(site.kind == "exit" for site in state.sites):
            code.append(insn(d.mask("s_mov"), regs.sgprs("entry_exec", d.mask_sgprs), d.exec, origin=ORIGIN))
        maps = [ctx.probes.maps[m] for m in state.maps]
        need_ids = any(spec.type == "array" for spec in maps) or "block" in state.levels
        if need_ids:
            code += self.capture_ids(state, desc)
        for param in state.params:  # every map's buffer, loaded together: one wait for all
            code.append(insn(d.scalar_load[0], regs.sgprs(f"map_{param['map']}", 2), kptr, param["offset"], origin=ORIGIN))
        if need_ids:
            code.append(insn(d.scalar_load[1], regs.sgprs("grid", 8), kptr, self.grid_offset(state, meta), origin=ORIGIN))
        code.append(insn("s_waitcnt", "lgkmcnt(0)", origin=ORIGIN))
        if need_ids:
            code += self.geometry(state)
        code += address_maps(GcnAddressPrimitives(state), maps)
        if state.maps:
            code.append(insn("v_mov_b32_e32", regs.vgprs("zero"), 0, origin=ORIGIN))
        return code

    @staticmethod
    def grid_offset(state: GcnKernelState, meta: ir.Metadata) -> int:
        """Where the implicit arguments' grid shape starts (block counts, then group sizes: code object v5)."""
        hidden = {a.get("value_kind"): int(a.get("offset", "0")) for a in metadata.arguments(meta, state.name)}
        missing = [h for h in HIDDEN_NEEDED if h not in hidden]
        if missing or hidden["hidden_group_size_x"] != hidden["hidden_block_count_x"] + 12:
            raise InstrumentError(f"kernel {state.name}: its implicit arguments lack {', '.join(missing) or 'the v5 layout'}: "
                                  "the grid shape is unknown (compile for code object v5 with implicit arguments)")
        return hidden["hidden_block_count_x"]

    @staticmethod
    def capture_ids(state: GcnKernelState, desc: ir.Descriptor) -> list[ir.Instruction]:
        regs = state.registers
        code = []
        for axis in "xyz":
            sgpr = abi.system_sgpr(desc, f"workgroup_id_{axis}")
            if sgpr is None:
                raise InstrumentError(f"kernel {state.name}: does not receive workgroup_id_{axis}; its records cannot be placed")
            code.append(insn("s_mov_b32", regs.sgprs(f"wg_{axis}"), ir.RegRange("s", sgpr), origin=ORIGIN))
        code.append(insn("v_mov_b32_e32", regs.vgprs("tid_packed"), ir.RegRange("v", 0), origin=ORIGIN))
        return code

    @staticmethod
    def geometry(state: GcnKernelState) -> list[ir.Instruction]:
        """Linear workgroup id, workgroups, work-items per workgroup, waves per workgroup, flat work-item id."""
        r, d = state.registers, state.dialect
        g = r.sgprs("grid", 8)
        bcx, bcy, sizes_xy, sizes_z = half(g, 0), half(g, 1), half(g, 3), half(g, 4)
        wg, t, gx, gy, gz, tpw, wpw = (r.sgprs(n) for n in ("wg", "t", "gx", "gy", "gz", "tpw", "waves_per_wg"))
        vx, vy, vz, flat, tid = r.vgprs("vx"), r.vgprs("vy"), r.vgprs("vz"), r.vgprs("flat_tid"), r.vgprs("tid_packed")
        return [insn("s_mul_i32", t, bcy, r.sgprs("wg_z"), origin=ORIGIN), insn("s_add_u32", t, t, r.sgprs("wg_y"), origin=ORIGIN),
                insn("s_mul_i32", t, t, bcx, origin=ORIGIN), insn("s_add_u32", wg, t, r.sgprs("wg_x"), origin=ORIGIN),
                insn("s_and_b32", gx, sizes_xy, 0xffff, origin=ORIGIN), insn("s_lshr_b32", gy, sizes_xy, 16, origin=ORIGIN),
                insn("s_and_b32", gz, sizes_z, 0xffff, origin=ORIGIN),
                insn("s_mul_i32", tpw, gx, gy, origin=ORIGIN), insn("s_mul_i32", tpw, tpw, gz, origin=ORIGIN),
                insn("s_mul_i32", r.sgprs("blocks"), bcx, bcy, origin=ORIGIN),
                insn("s_mul_i32", r.sgprs("blocks"), r.sgprs("blocks"), half(g, 2), origin=ORIGIN),
                # gfx90a/gfx942 and gfx11 pack the work-item ids into v0: x | y << 10 | z << 20
                insn("v_and_b32_e32", vx, 0x3ff, tid, origin=ORIGIN), insn("v_bfe_u32", vy, tid, 10, 10, origin=ORIGIN),
                insn("v_bfe_u32", vz, tid, 20, 10, origin=ORIGIN),
                insn("v_mul_lo_u32", vz, vz, gy, origin=ORIGIN), insn(d.add_u32, vz, vz, vy, origin=ORIGIN),
                insn("v_mul_lo_u32", vz, vz, gx, origin=ORIGIN), insn(d.add_u32, flat, vz, vx, origin=ORIGIN),
                insn("s_add_u32", wpw, tpw, d.wave_lanes - 1, origin=ORIGIN), insn("s_lshr_b32", wpw, wpw, d.wave_shift(), origin=ORIGIN)]

    @staticmethod
    def counts(state: GcnKernelState, meta: ir.Metadata) -> None:
        """Raises the descriptor's register counts over every register the probes took (AGPRs move up with accum_offset)."""
        desc, regs = state.descriptor, state.registers
        old_sgpr, old_vgpr = desc.get_int("next_free_sgpr"), desc.get_int("next_free_vgpr")
        state.old_counts = {"next_free_sgpr": old_sgpr, "next_free_vgpr": old_vgpr}
        new_sgpr = max(old_sgpr, regs.next_s)
        desc.set("next_free_sgpr", new_sgpr)
        if desc.get("accum_offset") is not None:
            accum = desc.get_int("accum_offset")
            agprs = max(0, old_vgpr - accum)
            new_accum = max(accum, -(-regs.next_v // 4) * 4)
            desc.set("accum_offset", new_accum)
            new_vgpr = new_accum + agprs if agprs else max(old_vgpr, regs.next_v)
        else:
            new_vgpr = max(old_vgpr, regs.next_v)
        if new_vgpr > UNIFIED_VGPRS:
            raise InstrumentError(f"kernel {state.name}: the probes need {new_vgpr} VGPRs with its AGPRs, more than "
                                  f"the {UNIFIED_VGPRS} a wave can have")
        desc.set("next_free_vgpr", new_vgpr)
        for key, growth in (("sgpr_count", new_sgpr - old_sgpr), ("vgpr_count", new_vgpr - old_vgpr)):
            old = metadata.get_int(meta, state.name, key)
            if old is not None:
                metadata.set_key(meta, state.name, key, old + growth)


@attrs.define
class GcnAddressPrimitives:
    """The entry steps of passes/save_core.address_maps in GCN: a unit's index (SGPR, or VGPR for a lane), its slot."""

    state: GcnKernelState

    def map_base(self, spec, first: bool) -> list[ir.Instruction]:
        return []  # loaded with the other kernel arguments, before one s_waitcnt

    def counters_address(self, spec) -> list[ir.Instruction]:
        return []  # one row of counters per launch: the buffer itself

    def unit_index(self, level: str) -> tuple[tuple, list[ir.Instruction]]:
        """(unit, units) of `level`: a workgroup's linear id, a wave's (workgroup * waves + its index), a lane's (VGPR)."""
        r, d = self.state.registers, self.state.dialect
        if level == "block":
            return (r.sgprs("wg"), r.sgprs("blocks")), []
        units = r.sgprs(f"units_{level}")
        per_block = r.sgprs("tpw" if level == "thread" else "waves_per_wg")
        code = [insn("s_mul_i32", units, r.sgprs("blocks"), per_block, origin=ORIGIN),
                insn("s_mul_i32", r.sgprs("t"), r.sgprs("wg"), per_block, origin=ORIGIN)]
        if level == "thread":
            unit = r.vgprs("unit_thread")
            return (unit, units), code + [insn(d.add_u32, unit, r.sgprs("t"), r.vgprs("flat_tid"), origin=ORIGIN)]
        wave, unit = r.sgprs("wave"), r.sgprs("unit_warp")  # a wave's index in its workgroup: its first work-item's / lanes
        return (unit, units), code + [insn("v_readfirstlane_b32", wave, r.vgprs("flat_tid"), origin=ORIGIN),
                                      insn("s_lshr_b32", wave, wave, d.wave_shift(), origin=ORIGIN),
                                      insn("s_add_u32", unit, r.sgprs("t"), wave, origin=ORIGIN)]

    def unit_slot(self, spec, unit_and_units: tuple) -> list[ir.Instruction]:
        """This unit's count address (buffer + 4 * unit) and first record (records at align16(4 * units), `cap`
        records per unit) in `spec`'s buffer, and its cursor set to 0 (layout: spec/kernel-json.md)."""
        r = self.state.registers
        unit, units = unit_and_units
        records = r.sgprs("records_at")
        code = [insn("s_lshl_b32", records, units, 2, origin=ORIGIN),  # COUNT_BYTES * units, aligned up
                insn("s_add_u32", records, records, RECORDS_ALIGN - 1, origin=ORIGIN),
                insn("s_and_b32", records, records, -RECORDS_ALIGN & 0xFFFFFFFF, origin=ORIGIN)]
        if spec.level == "thread":
            return code + self.lane_slot(spec, unit, records)
        base, stride = r.sgprs(f"map_{spec.name}", 2), record_stride(spec)
        slot, count, lo, hi = r.sgprs(f"slot_{spec.name}", 2), r.sgprs(f"count_{spec.name}", 2), r.sgprs("t"), r.sgprs("t_hi")
        return code + [
            insn("s_lshl_b32", lo, unit, 2, origin=ORIGIN),
            insn("s_add_u32", half(count, 0), half(base, 0), lo, origin=ORIGIN),
            insn("s_addc_u32", half(count, 1), half(base, 1), 0, origin=ORIGIN),
            insn("s_mul_i32", lo, unit, stride, origin=ORIGIN), insn("s_mul_hi_u32", hi, unit, stride, origin=ORIGIN),
            insn("s_add_u32", lo, lo, records, origin=ORIGIN), insn("s_addc_u32", hi, hi, 0, origin=ORIGIN),
            insn("s_add_u32", half(slot, 0), half(base, 0), lo, origin=ORIGIN),
            insn("s_addc_u32", half(slot, 1), half(base, 1), hi, origin=ORIGIN),
            insn("s_mov_b32", r.sgprs(f"cursor_{spec.name}"), 0, origin=ORIGIN)]

    def lane_slot(self, spec, unit: ir.RegRange, records: ir.RegRange) -> list[ir.Instruction]:
        """unit_slot of a lane: 64-bit address arithmetic in VGPRs, the carries in lane masks."""
        r, d = self.state.registers, self.state.dialect
        base, stride = r.sgprs(f"map_{spec.name}", 2), record_stride(spec)
        slot, count = r.vgprs(f"slot_{spec.name}", 2), r.vgprs(f"count_{spec.name}", 2)
        lo, hi, offset = r.vgprs("vx"), r.vgprs("vy"), r.vgprs("vz")
        sstride, carry, sink = r.sgprs("stride"), r.sgprs("carry", d.mask_sgprs), r.sgprs("carry_out", d.mask_sgprs)
        return [
            # counts[unit]
            insn("v_lshlrev_b32_e32", offset, 2, unit, origin=ORIGIN),
            insn("v_add_co_u32_e64", half(count, 0), carry, half(base, 0), offset, origin=ORIGIN),
            insn("v_mov_b32_e32", half(count, 1), half(base, 1), origin=ORIGIN),
            insn(d.add_carry_in, half(count, 1), sink, 0, half(count, 1), carry, origin=ORIGIN),
            # records + unit * stride
            insn("s_mov_b32", sstride, stride, origin=ORIGIN),
            insn("v_mul_lo_u32", lo, unit, sstride, origin=ORIGIN), insn("v_mul_hi_u32", hi, unit, sstride, origin=ORIGIN),
            insn("v_add_co_u32_e64", lo, carry, records, lo, origin=ORIGIN),
            insn(d.add_carry_in, hi, sink, 0, hi, carry, origin=ORIGIN),
            insn("v_add_co_u32_e64", half(slot, 0), carry, half(base, 0), lo, origin=ORIGIN),
            insn("v_mov_b32_e32", half(slot, 1), half(base, 1), origin=ORIGIN),
            insn(d.add_carry_in, half(slot, 1), sink, half(slot, 1), hi, carry, origin=ORIGIN),
            insn("v_mov_b32_e32", r.vgprs(f"cursor_{spec.name}"), 0, origin=ORIGIN)]


def splice(module: ir.Module, ctx: Context) -> None:
    """All sites' code and each kernel's entry and exit code into the module, in one pass over it."""
    insert_around(module.items, edits(ctx))
    for state in ctx.kernels.values():
        state.spliced = True


def edits(ctx: Context, shown=lambda code: code) -> dict:
    """id(statement) → (code before it, None, code after it), for passes/build.splice; `shown` maps each piece of code."""
    before: dict[int, list] = {}
    after: dict[int, list] = {}
    for state in ctx.kernels.values():
        first = id(state.originals[0]) if state.originals else None
        if first is not None:
            before.setdefault(first, []).extend(shown(state.entry_code))
            before[first].extend(c for s in state.sites if s.kind == "entry" for c in shown(s.code))
        for site in state.sites:
            if site.kind == "entry":
                continue
            # code after the kernel's end runs before it: nothing runs after s_endpgm
            target = before if site.where == "before" or site.kind == "exit" else after
            points = state.before_point if target is before else state.after_point  # an ISA may move code off its anchor
            target.setdefault(id(points.get(id(site.anchor), site.anchor)), []).extend(shown(site.code))
        for anchor in state.exits if state.exit_code else ():
            before.setdefault(id(anchor), []).extend(shown(state.exit_code))
    keys = before.keys() | after.keys()
    return {key: (before.get(key, ()), None, after.get(key, ())) for key in keys}
