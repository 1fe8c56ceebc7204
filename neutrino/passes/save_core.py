"""SAVE lowering and buffer addressing, written once for every ISA on the primitives of isa/interface.py (`SavePrimitives`).

What a SAVE does is the same on every ISA (spec/pipeline.md, "SAVE lowering";
layout in spec/kernel-json.md); only how each step is spelled differs:

    array map, one record      the lanes that save (unit leader, guard, gate) are chosen;
                               those whose unit cursor is below cap store the fields at
                               the unit's next record; the cursor counts every attempt
    sum map                    the lanes that save add the fields to the launch's counters
    kernel exit                each unit's leader stores its cursor into the counts

    entry (buffer addressing)  per map: its buffer; for an array map this unit's counts
                               address (buffer + 4 * unit) and first record (records
                               from align16(4 * units), cap records per unit), cursor 0

Each ISA supplies the steps as primitives: passes/neutral_ops.py `NeutralSteps`, translated (GCN and RDNA
for every step; PTX for an array map's record and the exit's counts, its sums and entry still in passes/lower_save.py
and passes/buffers.py);
the order in which they run, which maps get which, and the record layout are here.
"""

from __future__ import annotations

#: bytes of one unit's count: the counts section is u32[units] (spec/kernel-json.md)
COUNT_BYTES = 4
#: the records section starts at the counts' end rounded up to this many bytes
RECORDS_ALIGN = 16


def packed_offsets(types: tuple[str, ...]) -> list[int]:
    """Field offsets of a record whose fields are laid end to end (u64: 8 bytes, else 4)."""
    out, offset = [], 0
    for t in types:
        out.append(offset)
        offset += 8 if t == "u64" else 4
    return out


def record_stride(spec) -> int:
    """Bytes one unit owns in an array map with a constant cap."""
    return int(spec.cap) * spec.record_bytes


def lower_record(prims, spec, fields: list, guard) -> list:
    """One record of array map `spec`: `fields` are the field values (registers of the ISA) in map order."""
    code = prims.saving_lanes(spec.level, guard)
    code += prims.below_cap(spec, guard)
    code += prims.record_address(spec)
    for chunk in prims.store_chunks(spec, len(fields)):
        code += prims.store_fields(spec, [fields[i] for i in chunk], chunk[0])
    code += prims.end_below_cap(spec)
    code += prims.bump_cursor(spec, guard)
    return code + prims.end_saving(spec.level)


def lower_sum(prims, spec, fields: list, guard) -> list:
    """The lanes that save add each field to its u64 counter of sum map `spec`."""
    code = prims.saving_lanes(spec.level, guard)
    for index, value in enumerate(fields):
        code += prims.counter_add(spec, index, value, guard)
    return code + prims.end_saving(spec.level)


def lower_exit_counts(prims, maps: list, exit_guard=None) -> list:
    """At a kernel exit: each array map's unit leader stores the unit's cursor (its attempts) into the counts."""
    code: list = []
    for spec in maps:
        if spec.type != "array":
            continue
        code += prims.saving_lanes(spec.level, exit_guard, at_exit=True)
        code += prims.store_count(spec)
        code += prims.end_saving(spec.level)
    return code


def address_maps(prims, maps: list) -> list:
    """Entry code: each map's buffer, and for array maps this unit's counts address, first record and zero cursor.

    The first map is told so (`first`): a launch's gate travels with its buffer pointer (PTX, spec/runtime.md).
    """
    code: list = []
    units: dict[str, object] = {}  # level → (unit index, units): computed once per level, before the first map of it
    for i, spec in enumerate(maps):
        if spec.type != "array":
            code += prims.map_base(spec, first=i == 0)
            code += prims.counters_address(spec)
            continue
        if spec.level not in units:
            units[spec.level], unit_code = prims.unit_index(spec.level)
            code += unit_code
        code += prims.map_base(spec, first=i == 0)
        code += prims.unit_slot(spec, units[spec.level])
    return code
