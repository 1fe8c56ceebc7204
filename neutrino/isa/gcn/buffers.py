"""Buffer addressing on GCN: map pointers as extra kernel arguments, the entry code, the new counts.

Each map the kernel's probes write gets an 8-byte `global_buffer` argument
appended after the kernel's last argument (hidden ones included), so the
runtime's own argument layout is untouched; `.amdhsa_kernarg_size` and the
metadata's `.kernarg_segment_size` and `.args` grow by them. Code at kernel
entry keeps the kernarg segment pointer, the workgroup ids and the packed
work-item ids (registers the kernel may reuse later) in registers of ours;
the launch geometry, the map pointers and each unit's slot are the neutral
programs of passes/neutral_ops.py, translated. Last, the descriptor's
register counts are raised to cover every register the probes took, and all
code is spliced in.
"""

from __future__ import annotations

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.gcn import abi, ir, metadata
from neutrino.isa.gcn.registers import GcnKernelState, insn
from neutrino.isa.gcn.translate import GcnTranslation
from neutrino.passes.neutral_ops import NeutralSteps, Op, Val, geometry
from neutrino.passes.save_core import address_maps
from neutrino.passes.site_code import splice_all
from neutrino.passes.state import Context

ORIGIN = "buffer-addressing"
HIDDEN_NEEDED = ("hidden_block_count_x", "hidden_group_size_x")
UNIFIED_VGPRS = 512  # gfx90a/gfx94x: arch VGPRs and AGPRs share one file of 512 per wave
#: the implicit arguments' grid shape: block counts x, y, z, then the group sizes packed in 16 bits (code object v5)
GRID, TID = Val("grid", 8), Val("tid_packed", lane=True)
SPECIALS = {"ctaid.x": Val("wg_x"), "ctaid.y": Val("wg_y"), "ctaid.z": Val("wg_z"),
            "nctaid.x": GRID.word(0), "nctaid.y": GRID.word(1), "nctaid.z": GRID.word(2),
            "ntid.x": Val("gx"), "ntid.y": Val("gy"), "ntid.z": Val("gz"),
            "tid.x": Val("vx", lane=True), "tid.y": Val("vy", lane=True), "tid.z": Val("vz", lane=True)}
GROUP_SIZES = [Op("and", SPECIALS["ntid.x"], GRID.word(3), 0xFFFF), Op("shr", SPECIALS["ntid.y"], GRID.word(3), 16),
               Op("and", SPECIALS["ntid.z"], GRID.word(4), 0xFFFF)]


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
        splice_all(module.items, ctx)

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
        """The kernel arguments and ids the probes read, kept in registers of ours, then the neutral geometry and
        passes/save_core.address_maps (passes/neutral_ops.py), translated."""
        desc, regs, d = state.descriptor, state.registers, state.dialect
        kernarg = abi.kernarg_pointer(desc)
        if kernarg is None:
            raise InstrumentError(f"kernel {state.name}: takes no kernel arguments, so probes cannot be given buffers")
        code = [insn("s_mov_b64", regs.sgprs("kernarg", 2), ir.RegRange("s", kernarg, 2, True), origin=ORIGIN)]
        if state.exit_code or any(site.kind == "exit" for site in state.sites):
            code.append(insn(d.mask("s_mov"), regs.sgprs("entry_exec", d.mask_sgprs), d.exec, origin=ORIGIN))
        maps = [ctx.probes.maps[m] for m in state.maps]
        params = {p["map"]: p["offset"] for p in state.params}
        ops: list = []
        if any(spec.type == "array" for spec in maps) or "block" in state.levels:
            ops = self.launch_ids(state, desc) + [Op("param", GRID, "grid"), *GROUP_SIZES, *geometry(SPECIALS, d.wave_lanes)]
            params["grid"] = self.grid_offset(state, meta)
        ops += address_maps(NeutralSteps(d.wave_lanes), maps)
        if state.maps:
            ops.append(Op("mov", Val("zero", lane=True), 0))  # the VGPR offset of stores at an SGPR address
        gcn = GcnTranslation(state, ORIGIN, params)
        code += gcn.translate(ops)
        if gcn.pending:  # a buffer the entry does not read: loaded before any probe code reads it
            code.append(insn("s_waitcnt", "lgkmcnt(0)", origin=ORIGIN))
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
    def launch_ids(state: GcnKernelState, desc: ir.Descriptor) -> list:
        """The workgroup ids (system SGPRs) and packed work-item ids (v0) copied before the kernel reuses them, unpacked."""
        code: list = []
        for axis in "xyz":
            sgpr = abi.system_sgpr(desc, f"workgroup_id_{axis}")
            if sgpr is None:
                raise InstrumentError(f"kernel {state.name}: does not receive workgroup_id_{axis}; its records cannot be placed")
            code.append(Op("mov", SPECIALS[f"ctaid.{axis}"], ir.RegRange("s", sgpr)))
        # gfx90a/gfx942 and gfx11 pack the work-item ids into v0: x | y << 10 | z << 20
        return code + [Op("mov", TID, ir.RegRange("v", 0)), Op("and", SPECIALS["tid.x"], TID, 0x3FF),
                       Op("bfe", SPECIALS["tid.y"], TID, 10, 10), Op("bfe", SPECIALS["tid.z"], TID, 20, 10)]

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

