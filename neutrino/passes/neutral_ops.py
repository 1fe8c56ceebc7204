"""The ISA-neutral operations that SAVE lowering and buffer addressing are written in, and the programs written in them.

An ISA that translates these operations (`translate(ops) -> instructions`: GCN
and RDNA, neutrino/isa/gcn/translate.py; PTX, neutrino/isa/ptx/translate.py) gets
the steps of passes/save_core.py, the thread geometry and the units' slots from
here, written once; what it keeps to itself is how each operation is spelled:
which register file a value lives in, literals and operand limits, waits for
loads, the lane mask. PTX takes an array map's record and the exit's counts from here so
far; its sums and entry are still instructions of its own (passes/lower_save.py, passes/buffers.py).

Values. A value of ours is a `Val`: a role (its name: the same role is the same
register everywhere in a kernel), a width in 32-bit words, and whether it may
differ between the lanes of a wave (`lane`: a per-thread register; GCN: VGPRs)
or is one value per wave (GCN: SGPRs). Operands are Vals, one word of a Val
(`v.word(i)`), integers (sign-extended to the destination's width), predicates
(lane sets: `ACTIVE`, a `Pred`) and the ISA's own operands (a snippet's registers),
which the translation reads as they are.

Operations, `Op(name, dst, a, b, c)` (spec/pipeline.md, "The neutral operations"):

    mov d, a             d = a, zero-extended; a one-per-wave d of a per-lane a: the first running lane's
    add/sub d, a, b      d = a ± b (a 64-bit d takes b zero-extended, or sign-extended when an integer)
    mul d, a, b          d = a * b; a 64-bit d of 32-bit a, b: the whole product; of a 64-bit a or b (per lane):
                         its low 64 bits
    shl/shr d, a, n      shifts (by a constant, or a 32-bit amount per lane)
    and/or/xor d, a, b   bitwise, word by word; not d, a: the complement
    bfe d, a, at, width  the `width` bits of a from bit `at`
    select d, p, a, b    d = a in the lanes of p, b in the others (a per-lane d)
    cmp p, cond, a, b    p = the running lanes where a cond b (cond: eq ne lt le gt ge; unsigned; 32 or 64 bits)
    pand/por/pandn p, a, b   p = a ∧ b, a ∨ b, a ∧ ¬b
    first p, a           p = the lowest running lane of a
    param d, name        d = the kernel's parameter `name` (a map's buffer, the launch geometry)
    lanes p / end        from here the running lanes are those of p among the running ones / as before
    count d              d += 1: in each running lane (a per-lane d) or once if any lane runs (one per wave)
    store b, o, v[, t]   [b + o] = v (global memory, a 64-bit address b and a constant offset o; v a value or a
                         tuple of consecutive ones; t: the value's type, u32 for a count, for an ISA that spells it)
    atomic_add b, o, v   [b + o] += v (u64)

Per-lane operations and memory run in the running lanes only; one-per-wave
operations run once for the wave whatever lanes run (that is why `count` exists).
"""

from __future__ import annotations

from typing import NamedTuple

import attrs

from neutrino.isa.ptx import ir as ptx
from neutrino.passes.save_core import COUNT_BYTES, RECORDS_ALIGN, lower_record, lower_sum, packed_offsets, record_stride


class Val(NamedTuple):
    """A value of ours (see above): tuples, so that programs of them hash fast as the translations' cache keys."""

    role: str
    words: int = 1
    lane: bool = False
    part: int | None = None  # one 32-bit word of the value

    def word(self, index: int) -> "Val":
        return self._replace(part=index)


class Pred(NamedTuple):
    """A set of lanes of ours (GCN: a lane mask)."""

    role: str


class Op(NamedTuple):
    name: str
    dst: object = None
    a: object = None
    b: object = None
    c: object = None


ACTIVE = "active"  # the predicate of every running lane
#: every operation, as the table above lists them: what an ISA's translation implements
OPERATIONS = ("mov", "add", "sub", "mul", "shl", "shr", "and", "or", "xor", "not", "bfe", "select", "cmp", "pand", "por",
              "pandn", "first", "param", "lanes", "end", "count", "store", "atomic_add")


@attrs.define(eq=False)
class SaveOp:
    """A SAVE after operand resolution, until SAVE lowering: the values of one record of `map`, each with its field's type."""

    map: str
    values: tuple  # the ISA's operands, one per field
    types: tuple[str, ...]  # u32 / u64 per field
    probe: str
    guard: object = None  # the ISA's lane predicate: only those lanes save

    def joined(self, earlier: "SaveOp | None") -> "SaveOp":
        """The compact form's SAVEs of one snippet fill one record: this one's values after `earlier`'s."""
        if earlier is None:
            return self
        return SaveOp(self.map, earlier.values + self.values, earlier.types + self.types, self.probe, self.guard)


def save_of(stmt, probe, maps: dict, operand) -> SaveOp:
    """A snippet's SAVE statement (read as PTX whatever the ISA: `SAVE [ m ] {a, b}` or `SAVE.u32 {a}` into the
    probe's map) as a SaveOp; `operand(item, None)` is a value item, `operand(register, "guard")` the guard's predicate.
    Field types: the map's, for the explicit form and aggregation maps; else the compact form's type for every value."""
    explicit = bool(stmt.operands) and type(stmt.operands[0]) is ptx.Address
    map_name = stmt.operands[0].base.name if explicit else probe.map
    items = stmt.operands[1 if explicit else 0].items
    spec = maps[map_name]
    if stmt.opcode.text == "SAVE" or spec.type != "array":
        types = tuple(f.type for f in spec.fields) if len(spec.fields) == len(items) else ("u64",) * len(items)
    else:
        types = (stmt.opcode.modifiers[-1],) * len(items)
    guard = operand(stmt.guard.register, "guard") if stmt.guard is not None else None
    return SaveOp(map_name, tuple(operand(item, None) for item in items), types, probe.name, guard)


# the entry's geometry (one per wave unless `lane`)
WG, BLOCKS, TPB, WPB, T = Val("wg"), Val("blocks"), Val("tpw"), Val("waves_per_wg"), Val("t")
FLAT = Val("flat_tid", lane=True)
SPECIALS = ("ctaid.x", "ctaid.y", "ctaid.z", "nctaid.x", "nctaid.y", "nctaid.z", "tid.x", "tid.y", "tid.z",
            "ntid.x", "ntid.y", "ntid.z")


def geometry(special: dict, lanes: int) -> list[Op]:
    """Linear block index and blocks, threads per block, linear thread index in the block, warps per block.

    `special` names the operand of each of SPECIALS (the ISA's registers, or Vals it computed)."""
    s = special
    return [Op("mul", T, s["nctaid.y"], s["ctaid.z"]), Op("add", T, T, s["ctaid.y"]), Op("mul", T, T, s["nctaid.x"]),
            Op("add", WG, T, s["ctaid.x"]),
            Op("mul", TPB, s["ntid.x"], s["ntid.y"]), Op("mul", TPB, TPB, s["ntid.z"]),
            Op("mul", BLOCKS, s["nctaid.x"], s["nctaid.y"]), Op("mul", BLOCKS, BLOCKS, s["nctaid.z"]),
            Op("mul", FLAT, s["tid.z"], s["ntid.y"]), Op("add", FLAT, FLAT, s["tid.y"]),
            Op("mul", FLAT, FLAT, s["ntid.x"]), Op("add", FLAT, FLAT, s["tid.x"]),
            Op("add", WPB, TPB, lanes - 1), Op("shr", WPB, WPB, lanes.bit_length() - 1)]


def _gcn_role(kind: str, spec) -> str:
    """The default roles of a map's values (GCN, RDNA): `kind_<map>`; the record's address one per level (per lane at
    thread level, else one per wave: two roles, as they live in different registers), which also holds the offsets
    (the offset becomes the address; at entry, the offsets into the map: the two are never live together)."""
    if kind == "below_cap":
        return kind
    if kind in ("record", "offset"):
        return "record" + ("_lane" if spec.level == "thread" else "")
    return f"{kind}_{spec.name}"


@attrs.define
class NeutralSteps:
    """The steps of passes/save_core.py (isa/interface.py `SavePrimitives`) in neutral operations.

    `lanes`: lanes per wave (a `warp` unit); `guard` arguments are the ISA's lane predicates. The ISA's hooks, whose
    defaults are GCN's: `role(kind, spec)` names the values of a map (kinds: cursor, slot, count, below_cap, offset,
    record), `chunks(spec, count)` groups fields into one store each, `leaders_in_guard`: operand resolution already
    folded the unit's leader into each SAVE's guard (PTX), `gate`: a predicate ANDed into the lanes that store (PTX's
    probe gate), `counting`: a counting variant, which only counts a record's attempts, `leader(level)`: the unit
    leader's predicate, computed once at entry (PTX; None: found at each exit, as the first running lane or thread 0)."""

    lanes: int
    narrowed: bool = False  # saving_lanes narrowed the running lanes: end_saving widens them again
    offsets: list[int] = attrs.Factory(list)  # byte offset of each field of the record being lowered
    role: object = _gcn_role
    chunks: object = None
    leaders_in_guard: bool = False
    gate: object = None
    counting: bool = False
    leader: object = None  # level → the unit leader's predicate computed at entry (PTX), None at thread level

    def val(self, kind: str, spec, words: int = 1) -> Val:
        """A value of map `spec`: per lane for a thread-level map, else one per wave."""
        return Val(self.role(kind, spec), words, lane=spec.level == "thread")

    def lower_fields(self, spec, fields: list, guard) -> list[Op]:
        """One record of array map `spec` whose field values are already `fields` (the ISA's field registers)."""
        self.offsets = [f.offset for f in spec.fields]
        return lower_record(self, spec, fields, guard)

    def lower(self, spec, values: tuple, types: tuple[str, ...], guard) -> tuple[list[Op], list[Op]]:
        """One SAVE of `values` (ISA operands, one per field, of `types`) into map `spec` (array or sum): the moves
        of the values into the fields (one site's own operands), then the record's code (the same at every site)."""
        fields = [Val(f"save_data{i}_{t}", 2 if t == "u64" else 1, lane=True) for i, t in enumerate(types)]
        moves = [Op("mov", field, value) for field, value in zip(fields, values)]
        if spec.type == "sum":
            return moves, lower_sum(self, spec, fields, guard)
        self.offsets = [f.offset for f in spec.fields] if len(spec.fields) == len(types) else packed_offsets(types)
        return moves, lower_record(self, spec, fields, guard)

    # -- the lanes that save: at thread level (or with the leader in the guard) the guard's (all, unguarded), else the
    # unit's leader
    def saving_lanes(self, level: str, guard, at_exit: bool = False) -> list[Op]:
        if at_exit and self.leader is not None:
            return self.exit_lanes(level, guard)
        folded = level == "thread" or self.leaders_in_guard
        self.narrowed = not folded or guard is not None
        if folded:
            return [Op("lanes", guard)] if guard is not None else []
        leader = Pred("leader")
        if level == "warp":
            return [Op("first", leader, guard if guard is not None else ACTIVE), Op("lanes", leader)]
        code = [Op("cmp", leader, "eq", FLAT, 0)]  # the lane holding thread (0,0,0)
        return code + ([Op("pand", leader, leader, guard)] if guard is not None else []) + [Op("lanes", leader)]

    def exit_lanes(self, level: str, guard) -> list[Op]:
        """At an exit, with the leaders computed at entry: the unit's leader ∧ the exit's guard ∧ the gate."""
        code, leader = [], self.leader(level)
        if leader is not None and guard is not None:
            both = Pred(f"exit_{level}")
            code, guard = [Op("mov", both, guard), Op("pand", both, both, leader)], both
        elif leader is not None:
            guard = leader
        if self.gate is not None and guard is not None:
            code.append(Op("pand", Pred("count_go"), guard, self.gate))
            guard = Pred("count_go")
        guard = self.gate if guard is None else guard
        self.narrowed = guard is not None
        return code + ([Op("lanes", guard)] if guard is not None else [])

    def end_saving(self, level: str) -> list[Op]:
        return [Op("end")] if self.narrowed else []

    # -- a record of an array map (a counting variant stores none: it only counts)
    def below_cap(self, spec, guard) -> list[Op]:
        if self.counting:
            return []
        below = Pred(self.role("below_cap", spec))
        gated = [Op("pand", below, below, self.gate)] if self.gate is not None else []
        return [Op("cmp", below, "lt", self.val("cursor", spec), int(spec.cap)), *gated, Op("lanes", below)]

    def record_address(self, spec) -> list[Op]:
        """The record's address (`record`): the unit's slot + cursor * record bytes."""
        if self.counting:
            return []
        record, offset = self.val("record", spec, 2), self.val("offset", spec, 2)
        return [Op("mul", offset, self.val("cursor", spec), spec.record_bytes),
                Op("add", record, self.val("slot", spec, 2), offset)]

    def store_chunks(self, spec, count: int) -> list[list[int]]:
        if self.counting:
            return []
        return self.chunks(spec, count) if self.chunks is not None else [[i] for i in range(count)]  # one per field

    def store_fields(self, spec, values: list, first: int) -> list[Op]:
        value = values[0] if len(values) == 1 else tuple(values)  # a tuple: one store of consecutive fields
        return [Op("store", self.val("record", spec, 2), self.offsets[first], value)]

    def end_below_cap(self, spec) -> list[Op]:
        return [] if self.counting else [Op("end")]

    def bump_cursor(self, spec, guard) -> list[Op]:
        return [Op("count", self.val("cursor", spec))]  # every attempt counts, stored or not

    def store_count(self, spec) -> list[Op]:
        # the count is an unsigned integer (`u32`: the ISA may spell its type), a record's fields are bits
        return [Op("store", self.val("count", spec, 2), 0, self.val("cursor", spec), "u32")]

    def counter_add(self, spec, index: int, value, guard) -> list[Op]:
        """Each saving lane adds its value to the launch's u64 counter `index`."""
        return [Op("atomic_add", Val(f"map_{spec.name}", 2), 8 * index, value)]

    # -- entry: the units and their slots
    def map_base(self, spec, first: bool) -> list[Op]:
        return [Op("param", Val(f"map_{spec.name}", 2), spec.name)]

    def counters_address(self, spec) -> list[Op]:
        return []  # one row of counters per launch: the buffer itself

    def unit_index(self, level: str) -> tuple[tuple[Val, Val], list[Op]]:
        """(unit, units) of `level` and the code computing them: a block's linear index, a warp's
        (block * warps per block + its index in the block), a thread's (per lane)."""
        if level == "block":
            return (WG, BLOCKS), []
        units, per_block = Val(f"units_{level}"), TPB if level == "thread" else WPB
        code = [Op("mul", units, BLOCKS, per_block), Op("mul", T, WG, per_block)]
        if level == "thread":
            unit = Val("unit_thread", lane=True)
            return (unit, units), code + [Op("add", unit, T, FLAT)]
        wave, unit = Val("wave"), Val("unit_warp")  # a warp's index in its block: its first thread's / lanes
        return (unit, units), code + [Op("mov", wave, FLAT), Op("shr", wave, wave, self.lanes.bit_length() - 1),
                                      Op("add", unit, T, wave)]

    def unit_slot(self, spec, unit_and_units: tuple[Val, Val]) -> list[Op]:
        """This unit's count address (buffer + 4 * unit) and first record (records at align16(4 * units),
        `cap` records per unit) in `spec`'s buffer, and its cursor set to 0 (layout: spec/kernel-json.md)."""
        unit, units = unit_and_units
        records, offset, base = Val("records_at"), self.val("offset", spec, 2), Val(f"map_{spec.name}", 2)
        return [Op("mul", records, units, COUNT_BYTES), Op("add", records, records, RECORDS_ALIGN - 1),
                Op("and", records, records, -RECORDS_ALIGN & 0xFFFFFFFF),
                Op("mul", offset, unit, COUNT_BYTES), Op("add", self.val("count", spec, 2), base, offset),
                Op("mul", offset, unit, record_stride(spec)), Op("add", offset, offset, records),
                Op("add", self.val("slot", spec, 2), base, offset), Op("mov", self.val("cursor", spec), 0)]
