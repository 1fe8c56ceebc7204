"""The device ring of a count-sized map: reserve, then commit, from device code (PTX).

A map declared with `cap = "count"` is written into one ring per launch
(layout in spec/kernel-json.md, "Ring of a count-sized map"): a header whose
first u64 is the head, then a u32 unit tag per slot, then the slots' records.
The model is the BPF ring buffer's: a producer reserves room with one atomic
on the head and writes what it reserved; a reservation past the ring's end is
not written but stays counted in the head, so the loss is known; nothing
waits. No counting launch sizes the ring and the host never synchronises with
the kernel: the ring's slots (`cap`, a parameter) come from the buffer budget.

Per record, the warp's lanes that save reserve together: one lane adds their
number to the head (`atom.global.add.u64`), the old head is shuffled to the
others, and each writes its record at slot `old + its rank among them` when
that slot is below `cap`. Targets without warp operations (before sm_30)
reserve lane by lane. Every atomic and store is predicated on the probe gate
(passes/buffers.py), like every other write of the SAVE lowering.

The counting variant of a kernel (passes/counting.py) is not used for such
maps; it keeps the per-unit cursor code of the old protocol.
"""

from __future__ import annotations

from neutrino.isa.ptx import ir
from neutrino.maps import RING_HEADER


def is_ring_map(spec, counting: bool) -> bool:
    """Whether the real (not counting) kernel writes this map as a ring."""
    return spec.type == "array" and spec.cap == "count" and not counting


def map_register(state, role: str, spec, rtype: str) -> str:
    """The register of a map's `role` (the naming of passes/lower_save.map_register)."""
    return state.temp(f"{role}_{spec.name}", rtype)


def ring_pointers(prologue, spec, unit: str, cap_param: str) -> None:
    """Entry code: the ring's slots (`cap`), tags and records pointers, and this thread's unit tag.

    `prologue` is passes/buffers._Prologue with the map's buffer already loaded; `cap_param`
    the name of the map's `.u32` cap parameter.
    """
    state = prologue.state
    buf = map_register(state, "buf", spec, "b64")
    cap = map_register(state, "cap", spec, "b32")
    tags = map_register(state, "rtag", spec, "b64")
    rec = map_register(state, "rec", spec, "b64")
    tag = map_register(state, "runit", spec, "b32")
    w = prologue.t("w64", "b64")
    prologue.emit("ld.param.u32", cap, ir.Address(ir.Symbol(cap_param)))
    prologue.emit("add.u64", tags, buf, RING_HEADER)
    # records at align16(RING_HEADER + 4 * cap) (neutrino.maps.ring_records_offset)
    prologue.emit("mul.wide.u32", w, cap, 4)
    prologue.emit("add.u64", w, w, RING_HEADER + 15)
    prologue.emit("and.b64", w, w, -16)
    prologue.emit("add.u64", rec, buf, w)
    prologue.emit("cvt.u32.u64", tag, unit)


def ring_record(lowerer, spec, guard: ir.Guard | None, warp_ops: bool) -> list[ir.Instruction]:
    """One record of ring map `spec`: reserve a slot for each saving lane, write where it fits.

    `lowerer` is passes/lower_save._Lowerer (its field registers are filled already);
    `warp_ops`: the target has activemask, vote.sync and shfl.sync.
    """
    state, emit = lowerer.state, lowerer.emit
    t = state.temp
    code, go = lowerer.gated(guard, "ring_go")
    buf = map_register(state, "buf", spec, "b64")
    cap = map_register(state, "cap", spec, "b32")
    slot, cap64 = t("ring_slot", "b64"), t("ring_cap", "b64")
    if warp_ops:
        code += _warp_reserve(lowerer, buf, go, slot)
    else:  # no warp operations: every saving lane reserves its own slot
        code += [emit("mov.u64", slot, 0), emit("atom.global.add.u64", slot, ir.Address(ir.Register(buf)), 1, guard=go)]
    ok, ptr = map_register(state, "ok", spec, "pred"), map_register(state, "ptr", spec, "b64")
    rec, tags = map_register(state, "rec", spec, "b64"), map_register(state, "rtag", spec, "b64")
    tag_ptr = t("ring_tag_ptr", "b64")
    code += [
        emit("cvt.u64.u32", cap64, cap),
        emit("setp.lt.and.u64", ok, slot, cap64, go.register),  # a slot past the ring: not written, counted in the head
        emit("mad.lo.u64", ptr, slot, spec.record_bytes, rec),
    ]
    code += lowerer.record_stores(spec)  # the fields at ptr, where ok
    code += [
        emit("mad.lo.u64", tag_ptr, slot, 4, tags),
        emit("st.global.u32", ir.Address(ir.Register(tag_ptr)), map_register(state, "runit", spec, "b32"),
             guard=ir.Guard(ir.Register(ok))),
    ]
    return code


def _warp_reserve(lowerer, buf: str, go: ir.Guard, slot: str) -> list[ir.Instruction]:
    """slot = this lane's slot: the lowest saving lane adds the warp's saving lanes to the head, then
    shuffles the old head to the others, who add their rank among the saving lanes."""
    t, emit = lowerer.state.temp, lowerer.emit
    mask, ballot, n = t("ring_mask", "b32"), t("ring_ballot", "b32"), t("ring_n", "b32")
    lt, rank, lead = t("ring_lt", "b32"), t("ring_rank", "b32"), t("ring_lead", "pred")
    low, source = t("ring_low", "b32"), t("ring_src", "b32")
    lo, hi, wide = t("ring_lo", "b32"), t("ring_hi", "b32"), t("ring_wide", "b64")
    pair = ir.Vector((ir.Register(lo), ir.Register(hi)))
    return [
        emit("activemask.b32", mask),
        emit("vote.sync.ballot.b32", ballot, go.register, mask),
        emit("popc.b32", n, ballot),
        emit("mov.u32", lt, "%lanemask_lt"),
        emit("and.b32", lt, lt, ballot),
        emit("popc.b32", rank, lt),
        emit("setp.eq.and.u32", lead, rank, 0, go.register),  # the lowest saving lane
        # its lane number: the bits below the ballot's lowest set bit
        emit("neg.s32", low, ballot),
        emit("and.b32", low, low, ballot),
        emit("sub.u32", low, low, 1),
        emit("popc.b32", source, low),
        emit("mov.u64", slot, 0),
        emit("cvt.u64.u32", wide, n),
        emit("atom.global.add.u64", slot, ir.Address(ir.Register(buf)), wide, guard=ir.Guard(ir.Register(lead))),
        emit("mov.b64", pair, slot),
        emit("shfl.sync.idx.b32", lo, lo, source, 31, mask),
        emit("shfl.sync.idx.b32", hi, hi, source, 31, mask),
        emit("mov.b64", slot, pair),
        emit("cvt.u64.u32", wide, rank),
        emit("add.u64", slot, slot, wide),
    ]
