"""SAVE lowering: pseudo-instructions → bounds-checked stores, or atomics into counters.

`array` maps: a unit's leader keeps a cursor per map (`<prefix>cur_<map>`).
One execution of a snippet writes one record: its SAVE operands are converted
into field registers where they appear, and at the snippet's last SAVE the
record is stored at `records + cursor * record_bytes` if `cursor < cap`; the
cursor is then incremented either way, so dropped records are counted. Before
every `ret`/`exit` the leader stores its cursor into the counts section
(spec/kernel-json.md). The counting variant of a kernel keeps only the cursor
arithmetic and the counts. These steps are the ones every ISA shares
(passes/neutral_ops.py `NeutralSteps`, with PTX's hooks: `ptx_steps`),
spelled as PTX by isa/ptx/translate.py; what follows is PTX's own.

`sum` maps: the SAVE's values are added to the launch's u64 counters (this
warp's row of them, chosen at entry by buffer addressing). At thread level the
lanes that run the SAVE together (`activemask`) first add their values up
across the warp, then the lowest of them does one `red.global.add.u64` per
non-zero sum; lanes whose guard is false add 0, so every present lane joins
the warp operation wherever the SAVE sits (exits included, where some lanes
may be gone). Targets without warp operations (before sm_30, or a
`.version` that cannot be raised to 6.2: see fit-target) add lane by lane.
`hist` maps: the value's bucket is computed; lanes with the same bucket are
grouped (`match.any.sync`) and one of each group adds the group's size. Neither has a cursor or counts, and the counting variant leaves them out.
A value known when instrumenting (an immediate, or a register the site's own
straight-line code sets to one: passes/save_constants.py) needs neither: its
bucket is folded into the add's offset, and at thread level (from sm_30) the
lanes that save are counted (`activemask`, `vote.sync.ballot` of the guard,
`popc`) and the lowest of them adds the count; a thread-level sum whose values
are all known adds count x value per counter the same way (`constant_store`).

Every store and atomic written here (records, counts, counters) is also
predicated on the probe gate `on` (buffer addressing sets it at entry:
false only in a CUDA graph replay that `--launches` leaves out), so such a
replay writes nothing; what remains of the probe is register arithmetic.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import ClassVar

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import formats, ir
from neutrino.isa.ptx.semantics import access_spaces
from neutrino.isa.ptx.translate import PtxTranslation
from neutrino.passes.address_spaces import generic_spaces
from neutrino.passes.build import insn, splice
from neutrino.passes.state import Context, KernelState
from neutrino.passes.resolve import LEVEL_LEADER
from neutrino.passes.ring import is_ring_map, ring_record
from neutrino.passes.save_constants import constant_bucket, constant_save_values
from neutrino.passes.neutral_ops import NeutralSteps, Op, Pred, Val
from neutrino.passes.save_core import lower_exit_counts, lower_sum
from neutrino.passes import register_counters
from neutrino.passes.shared_agg import func_with_exit, stage_counters
from neutrino.passes.target import version_reachable
from neutrino.probefile import SAVE, Field, MapSpec, ProbeFile
from neutrino.maps import Buckets

ORIGIN = "save-lowering"
COUNT_SUFFIX = "__nt_count"
REDUX_SM = 80  # redux.sync needs sm_80; older targets reduce with shfl.sync.bfly
MATCH_SM = 70  # match.any.sync (grouping a warp's lanes by hist bucket) needs sm_70
WARP_SM = 30  # activemask and shfl.sync need sm_30 (and PTX 6.2): older targets add lane by lane
WARP_OPS = formats.Requirement((6, 2), WARP_SM)
ALL_LANES = 0xFFFFFFFF
WARP_LANES = 32
GATE_REGISTER = "on"  # the probe gate (buffer addressing): false in a graph replay that is not selected
GATE_OFFSET = 8  # the gate word sits this many bytes before the first map's buffer (graph nodes only)


def sm_version(target: str | None) -> int:
    """The SM number of a module's `.target` (`sm_90a` → 90); 0 when unknown."""
    m = re.search(r"sm_(\d+)", target or "")
    return int(m.group(1)) if m else 0


def map_register(state: KernelState, role: str, spec: MapSpec, rtype: str) -> str:
    return state.temp(f"{role}_{spec.name}", rtype)


MIXED_STORE_BYTES = 16  # fields of both widths that fill an aligned 16-byte span: one st.global.v4.b32


def mixed_span(fields, i: int, record_align: int) -> int:
    """How many fields from `i` fill exactly one 16-aligned 16-byte span, laid end to end, with u32 and u64 both
    among them (0: none). Records sit at 16-aligned addresses whenever their size is a multiple of 16 (buffers are
    16-byte aligned and the records section starts at align16: spec/kernel-json.md), so that span is too."""
    if record_align % MIXED_STORE_BYTES or fields[i].offset % MIXED_STORE_BYTES:
        return 0
    end, n = fields[i].offset, 0
    while i + n < len(fields) and fields[i + n].offset == end and end - fields[i].offset < MIXED_STORE_BYTES:
        end += 8 if fields[i + n].type == "u64" else 4
        n += 1
    mixed = len({f.type for f in fields[i : i + n]}) > 1
    return n if mixed and end - fields[i].offset == MIXED_STORE_BYTES else 0


def store_chunks(spec: MapSpec, mixed: bool = False) -> list[list[int]]:
    """Field indices grouped into the widest aligned vector stores (at most 16 bytes); with `mixed` (the engine's
    `mixed_stores` option), fields of both widths that fill an aligned 16-byte span are one store too
    (`mixed_span`: block_sched's u64, u32, u32 in one instead of two)."""
    fields = spec.fields
    record_align = spec.record_bytes & -spec.record_bytes  # largest power of two dividing the size
    chunks, i = [], 0
    while i < len(fields):
        n = mixed_span(fields, i, record_align) if mixed else 0
        if n:
            chunks.append(list(range(i, i + n)))
            i += n
            continue
        size = 8 if fields[i].type == "u64" else 4
        for n in (4, 2, 1):
            width = n * size
            if n > 1 and (width > 16 or fields[i].offset % width or record_align % width):
                continue
            run = fields[i : i + n]
            if len(run) == n and all(f.type == fields[i].type and f.offset == fields[i].offset + k * size for k, f in enumerate(run)):
                chunks.append(list(range(i, i + n)))
                i += n
                break
    return chunks


@attrs.define
class _Lowerer:
    state: KernelState
    probes: ProbeFile
    sm: int = 0  # the module's target, which decides how warps reduce
    register_counting: bool = False  # hist buckets inside loops may be counted in registers (passes/register_counters.py)
    mixed_stores: bool = False  # a record's u64 and u32 fields filling 16 aligned bytes: one store (store_chunks)

    def emit(self, opcode: str, *operands, guard=None) -> ir.Instruction:
        return insn(opcode, *operands, origin=ORIGIN, guard=guard)

    def probe_type(self, operand: ir.Operand) -> str | None:
        if isinstance(operand, ir.Register):
            return self.state.temps.get(operand.name)
        return None

    def convert(self, dst: str, ftype: str, value: ir.Operand) -> list[ir.Instruction]:
        """A SAVE operand → the field register (zero-extend or truncate)."""
        if isinstance(value, ir.Immediate):
            return [self.emit(f"mov.b{'64' if ftype == 'u64' else '32'}", dst, value)]
        if isinstance(value, ir.SpecialRegister):
            wide = value.name in ("%clock64", "%globaltimer", "%gridid")
            if wide == (ftype == "u64"):
                return [self.emit(f"mov.{ftype}", dst, value)]
            if wide:
                h = self.state.temp("sx64", "b64")
                return [self.emit("mov.u64", h, value), self.emit("cvt.u32.u64", dst, h)]
            h = self.state.temp("sx32", "b32")
            return [self.emit("mov.u32", h, value), self.emit("cvt.u64.u32", dst, h)]
        rtype = self.probe_type(value) or "b64"
        if rtype == "pred":
            return [self.emit(f"selp.{ftype}", dst, 1, 0, value)]
        bits = ir.TYPE_BYTES[rtype] * 8
        want = 64 if ftype == "u64" else 32
        if bits == want:
            return [self.emit(f"mov.b{bits}", dst, value)]
        if rtype.startswith("f"):  # reinterpret float bits before resizing
            h = self.state.temp(f"fbits{bits}", f"b{bits}")
            return [self.emit(f"mov.b{bits}", h, value), self.emit(f"cvt.{ftype}.u{bits}", dst, h)]
        return [self.emit(f"cvt.{ftype}.u{bits}", dst, value)]

    def field_registers(self, spec: MapSpec) -> list[str]:
        return [self.state.temp(v.role, "b64" if v.words == 2 else "b32") for v in field_values(spec)]

    def store(self, spec: MapSpec | "_MapValue", guard: ir.Guard | None) -> list[ir.Instruction]:
        """The code that writes a complete record (its fields are in the field registers)."""
        if spec.type == "array":
            return self.record_store(spec, guard)
        if self.state.counting:
            return []  # the counting kernel only sizes array maps
        if spec.type == "sum":
            return self.sum_store(spec, guard)
        return self.hist_store(spec, guard)

    def counter_address(self, spec, offset: int) -> ir.Address:
        """[buf+offset]: a counter of an aggregation map (its buffer pointer is set up by buffer addressing)."""
        buf = ir.Register(map_register(self.state, "buf", spec, "b64"))
        return ir.Address(buf, ir.Immediate(str(offset)) if offset else None)

    def masked(self, reg: str, guard: ir.Guard | None) -> list[ir.Instruction]:
        """reg = 0 where the SAVE's guard is false: absent samples add nothing."""
        if guard is None:
            return []
        g = guard.register
        return [self.emit("selp.b64", reg, 0, reg, g) if guard.negated else self.emit("selp.b64", reg, reg, 0, g)]

    @property
    def has_redux(self) -> bool:
        """Whether the target has redux.sync (sm_80+): warp sums in one instruction per 32-bit part."""
        return self.sm >= REDUX_SM

    @property
    def on(self) -> str:
        """The probe gate's register (set at entry by buffer addressing)."""
        return self.state.temp(GATE_REGISTER, "pred")

    def gated(self, guard: ir.Guard | None, name: str = "gated") -> tuple[list[ir.Instruction], ir.Guard]:
        """A guard that holds where `guard` does (always, for None) and the probe gate is on."""
        if guard is None:
            return [], ir.Guard(ir.Register(self.on))
        g = self.state.temp(name, "pred")
        if guard.negated:
            return [self.emit("not.pred", g, guard.register), self.emit("and.pred", g, g, self.on)], ir.Guard(ir.Register(g))
        return [self.emit("and.pred", g, guard.register, self.on)], ir.Guard(ir.Register(g))

    def add_if_nonzero(self, address: ir.Address, value: str, guard: ir.Guard | str | None) -> list[ir.Instruction]:
        """`red.global.add.u64 [address], value` where guard holds, value is not 0 and the gate is on.

        Adding 0 changes nothing, and counters that stay 0 (tensor-core
        instructions in a kernel without any) then cost no atomic at all.
        """
        go = self.state.temp("agg_go", "pred")
        code = [self.emit("setp.ne.and.u64", go, value, 0, self.on)]
        if isinstance(guard, str):
            guard = ir.Guard(ir.Register(guard.lstrip("!")), guard.startswith("!"))
        if guard is not None and guard.negated:
            off = self.state.temp("agg_off", "pred")
            code += [self.emit("not.pred", off, guard.register), self.emit("and.pred", go, go, off)]
        elif guard is not None:
            code.append(self.emit("and.pred", go, go, guard.register))
        return code + [self.emit("red.global.add.u64", address, value, guard=go)]

    def sum_store(self, spec, guard: ir.Guard | None) -> list[ir.Instruction]:
        return lower_sum(self, spec, self.field_registers(spec), guard)

    def counter_add(self, spec, index: int, value: str, guard: ir.Guard | None) -> list[ir.Instruction]:
        """Field `index`'s value added to its counter: at thread level from sm_30 on, summed across the warp first."""
        field = spec.fields[index]
        if spec.level != "thread" or self.sm < WARP_SM:
            # One lane per warp or block runs it (nothing to aggregate), or the target has no warp
            # operations: every lane adds its own value, as the hist map does before sm_70.
            return self.add_if_nonzero(self.counter_address(spec, field.offset), value, guard)
        mask, lt, lead = self.state.temp("agg_mask", "b32"), self.state.temp("agg_lt", "b32"), self.state.temp("agg_lead", "pred")
        code = []
        if index == 0:  # the warp's lanes that run the SAVE, and the lowest of them, once for all fields
            code = [
                self.emit("activemask.b32", mask),
                self.emit("mov.u32", lt, "%lanemask_lt"),
                self.emit("and.b32", lt, lt, mask),
                self.emit("setp.eq.u32", lead, lt, 0),  # the lowest present lane
            ]
            if self.sm < REDUX_SM:
                code.append(self.emit("setp.eq.u32", self.state.temp("agg_full", "pred"), mask, ALL_LANES))
        reduce = self.redux_sum if self.sm >= REDUX_SM else self.shfl_sum
        return code + self.masked(value, guard) + reduce(spec, field, value, mask, lead)

    def redux_sum(self, spec, field: Field, reg: str, mask: str, lead: str) -> list[ir.Instruction]:
        """sm_80+: redux.sync adds u32 only, so the u64 is cut into 16+16+32 bits.

        Each low part sums to at most 21 bits over 32 lanes; the high word's sum
        only matters modulo 2^32, as the counter wraps modulo 2^64 anyway.
        """
        lo, hi = self.state.temp("agg_lo", "b32"), self.state.temp("agg_hi", "b32")
        a, b = self.state.temp("agg_a", "b32"), self.state.temp("agg_b", "b32")
        total, part = self.state.temp("agg_total", "b64"), self.state.temp("agg_part", "b64")
        return [
            self.emit("mov.b64", ir.Vector((ir.Register(lo), ir.Register(hi))), reg),
            self.emit("and.b32", a, lo, 0xFFFF),
            self.emit("shr.u32", b, lo, 16),
            self.emit("redux.sync.add.u32", a, a, mask),
            self.emit("redux.sync.add.u32", b, b, mask),
            self.emit("redux.sync.add.u32", hi, hi, mask),
            self.emit("cvt.u64.u32", total, a),
            self.emit("cvt.u64.u32", part, b),
            self.emit("shl.b64", part, part, 16),
            self.emit("add.u64", total, total, part),
            self.emit("cvt.u64.u32", part, hi),
            self.emit("shl.b64", part, part, 32),
            self.emit("add.u64", total, total, part),
            *self.add_if_nonzero(self.counter_address(spec, field.offset), total, lead),
        ]

    def shfl_sum(self, spec, field: Field, reg: str, mask: str, lead: str) -> list[ir.Instruction]:
        """Before sm_80: a butterfly of shfl.sync when the whole warp is present, else one atomic per lane.

        A butterfly reads lanes that may be absent, so its sum is only used
        when all 32 lanes are there; the shuffles still name exactly the
        present lanes, which keeps them legal in a partial warp.
        """
        lo, hi = self.state.temp("agg_lo", "b32"), self.state.temp("agg_hi", "b32")
        total, part = self.state.temp("agg_total", "b64"), self.state.temp("agg_part", "b64")
        full, first = self.state.temp("agg_full", "pred"), self.state.temp("agg_first", "pred")
        pair = ir.Vector((ir.Register(lo), ir.Register(hi)))
        code = [self.emit("mov.b64", total, reg)]
        for distance in (16, 8, 4, 2, 1):
            code += [
                self.emit("mov.b64", pair, total),
                self.emit("shfl.sync.bfly.b32", lo, lo, distance, 31, mask),
                self.emit("shfl.sync.bfly.b32", hi, hi, distance, 31, mask),
                self.emit("mov.b64", part, pair),
                self.emit("add.u64", total, total, part),
            ]
        address = self.counter_address(spec, field.offset)
        return (code + [self.emit("and.pred", first, full, lead)] + self.add_if_nonzero(address, total, first)
                + self.add_if_nonzero(address, reg, "!" + full))

    def hist_store(self, spec, guard: ir.Guard | None) -> list[ir.Instruction]:
        """bucket = index of the value (trace.Buckets.index), then an atomic add to it.

        At thread level from sm_70 on, the lanes present that fall in the same
        bucket are counted together (`match.any.sync`) and the lowest of them
        adds their number: one atomic per bucket per warp instead of per lane.
        """
        value = self.field_registers(spec)[0]
        buckets: Buckets = spec.buckets
        bucket = self.state.temp("hist_bucket", "b32")
        if buckets.kind == "log2":
            code = [self.emit("clz.b64", bucket, value), self.emit("sub.u32", bucket, 64, bucket)]
        else:
            code = self.linear_bucket(buckets, value, bucket)
        offset, amount = map_register(self.state, "hoff", spec, "b64"), self.state.temp("hist_amount", "b64")
        buf = map_register(self.state, "buf", spec, "b64")
        code += [self.emit("mul.wide.u32", offset, bucket, 8), self.emit("add.u64", offset, offset, buf)]
        if spec.level != "thread" or self.sm < MATCH_SM:
            gate, go = self.gated(guard, "hist_go")
            return code + gate + [
                self.emit("mov.u64", amount, 1),
                self.emit("red.global.add.u64", ir.Address(ir.Register(offset)), amount, guard=go),
            ]
        return code + self.grouped_increment(bucket, offset, amount, guard)

    def grouped_increment(self, bucket: str, offset: str, amount: str, guard: ir.Guard | None) -> list[ir.Instruction]:
        """Lanes with equal buckets add their count once; lanes whose guard is false join as a group of their own that adds nothing."""
        mask, key, peers = self.state.temp("agg_mask", "b32"), self.state.temp("hist_key", "b32"), self.state.temp("hist_peers", "b32")
        lt, first, n = self.state.temp("agg_lt", "b32"), self.state.temp("hist_first", "pred"), self.state.temp("hist_n", "b32")
        code = [self.emit("activemask.b32", mask)]
        if guard is None:
            key = bucket
        else:  # no bucket index reaches 2^32 - 1
            code += [self.emit("mov.b32", key, bucket),
                     self.emit("mov.b32", key, ALL_LANES, guard=ir.Guard(guard.register, not guard.negated))]
        code += [
            self.emit("match.any.sync.b32", peers, key, mask),
            self.emit("mov.u32", lt, "%lanemask_lt"),
            self.emit("and.b32", lt, lt, peers),
            self.emit("setp.eq.and.u32", first, lt, 0, self.on),  # the lowest lane of its group
            self.emit("popc.b32", n, peers),
            self.emit("cvt.u64.u32", amount, n),
        ]
        if guard is not None:
            counted = self.state.temp("hist_counted", "pred")
            code += [self.emit("setp.ne.u32", counted, key, ALL_LANES), self.emit("and.pred", first, first, counted)]
        return code + [self.emit("red.global.add.u64", ir.Address(ir.Register(offset)), amount, guard=first)]

    def constant_store(self, spec, values: tuple[int, ...], guard: ir.Guard | None) -> list[ir.Instruction]:
        """A record whose values are all known (`folds`): its hist bucket or sum amounts are constants."""
        if spec.type == "hist":
            return self.constant_hist_store(spec, values[0], guard)
        return self.constant_sum_store(spec, values, guard)

    def constant_hist_store(self, spec, value: int, guard: ir.Guard | None) -> list[ir.Instruction]:
        """The bucket of a known value, folded (save_constants.constant_bucket): one add at a constant offset.

        At thread level with warp operations every lane that saves is in that bucket, so the
        lowest of them adds their number (`uniform_count`); otherwise each saving lane adds 1.
        """
        bucket = constant_bucket(spec.buckets, value)
        offset, amount = map_register(self.state, "hoff", spec, "b64"), self.state.temp("hist_amount", "b64")
        address = ir.Address(ir.Register(offset), ir.Immediate(str(8 * bucket)) if bucket else None)
        code = [self.emit("mov.b64", offset, map_register(self.state, "buf", spec, "b64"))]  # hoff: shared_agg's hist adds
        if spec.level != "thread" or self.sm < WARP_SM:
            gate, go = self.gated(guard, "hist_go")
            return code + gate + [self.emit("mov.u64", amount, 1), self.emit("red.global.add.u64", address, amount, guard=go)]
        count, first = self.uniform_count(guard, amount)
        return code + count + [self.emit("red.global.add.u64", address, amount, guard=first)]

    def constant_sum_store(self, spec, values: tuple[int, ...], guard: ir.Guard | None) -> list[ir.Instruction]:
        """Thread level, every value known: the lowest saving lane adds (saving lanes) x value to each counter.

        The product wraps modulo 2^64 as the counter does; a field whose value is 0 adds nothing.
        """
        if not any(values):
            return []
        amount = self.state.temp("agg_count", "b64")
        code, first = self.uniform_count(guard, amount)
        for field, value in zip(spec.fields, values):
            if value == 0:
                continue
            total = amount
            if value != 1:
                total = self.state.temp("agg_total", "b64")
                code.append(self.emit("mul.lo.u64", total, amount, _u64(value)))
            code.append(self.emit("red.global.add.u64", self.counter_address(spec, field.offset), total, guard=first))
        return code

    def uniform_count(self, guard: ir.Guard | None, amount: str) -> tuple[list[ir.Instruction], str]:
        """amount = the warp's lanes that save here (as u64); the returned predicate holds in the lowest of them, gate on.

        The lanes present (`activemask`), narrowed to those whose guard holds (`vote.sync.ballot`):
        no grouping by value, since every one of them saves the same.
        """
        mask, lt = self.state.temp("agg_mask", "b32"), self.state.temp("agg_lt", "b32")
        first, n = self.state.temp("agg_first", "pred"), self.state.temp("agg_n", "b32")
        code = [self.emit("activemask.b32", mask)]
        if guard is not None:
            saving = ir.Negated(guard.register) if guard.negated else guard.register
            code.append(self.emit("vote.sync.ballot.b32", mask, saving, mask))
        code += [
            self.emit("mov.u32", lt, "%lanemask_lt"),
            self.emit("and.b32", lt, lt, mask),
            self.emit("setp.eq.and.u32", first, lt, 0, self.on),  # no saving lane below this one
        ]
        if guard is not None:  # ... and this one saves
            code.append(self.emit("and.pred", first, first, ir.Negated(guard.register) if guard.negated else guard.register))
        # The count as the lanes from this one up (lt holds those below it): all of them in the lowest lane. Not
        # popc(mask): a value ptxas sees as warp-uniform makes it wrap the add in its own aggregation loop again.
        code += [self.emit("xor.b32", lt, lt, mask), self.emit("popc.b32", n, lt)]
        return code + [self.emit("cvt.u64.u32", amount, n)], first

    def linear_bucket(self, buckets: Buckets, value: str, bucket: str) -> list[ir.Instruction]:
        under, over = self.state.temp("hist_under", "pred"), self.state.temp("hist_over", "pred")
        scaled = self.state.temp("hist_scaled", "b64")
        step = buckets.step
        code = []
        if buckets.min:
            code += [self.emit("setp.lt.u64", under, value, _u64(buckets.min)), self.emit("sub.u64", scaled, value, _u64(buckets.min))]
        else:
            code += [self.emit("mov.b64", scaled, value)]
        code.append(self.emit("setp.ge.u64", over, value, _u64(buckets.max)))
        if step & (step - 1) == 0:
            if step > 1:
                code.append(self.emit("shr.u64", scaled, scaled, step.bit_length() - 1))
        else:
            code.append(self.emit("div.u64", scaled, scaled, _u64(step)))
        code += [self.emit("cvt.u32.u64", bucket, scaled), self.emit("add.u32", bucket, bucket, 1)]
        if buckets.min:
            code.append(self.emit("mov.u32", bucket, 0, guard=under))
        code.append(self.emit("mov.u32", bucket, buckets.count - 1, guard=over))
        return code

    def record_store(self, spec: MapSpec, guard: ir.Guard | None) -> list[ir.Instruction]:
        if is_ring_map(spec, self.state.counting):  # cap = "count": the launch's ring (passes/ring.py)
            return ring_record(self, spec, guard, self.sm >= WARP_SM)
        # the neutral steps every ISA shares (passes/neutral_ops.py), spelled as PTX (isa/ptx/translate.py)
        ops = ptx_steps(self.state.counting, mixed=self.mixed_stores).lower_fields(spec, field_values(spec), guard)
        code = PtxTranslation(self.state, ORIGIN).translate(ops)
        if guard is not None and not guard.negated and guard.register.name == self.leader_name(spec.level):
            code = self.cursor_in_every_lane(spec, code)
        return code

    def leader_name(self, level: str) -> str | None:
        return self.state.prefix + LEVEL_LEADER[level] if level in LEVEL_LEADER else None

    def cursor_in_every_lane(self, spec, code: list[ir.Instruction]) -> list[ir.Instruction]:
        """A SAVE guarded by its unit's leader alone: its cursor counts in every lane that runs it. Only the leader's
        cursor is read where it matters (the bounds check and the record's stores are ANDed with the leader, the
        exit's count is stored by it), and the leader's counts as before; ptxas no longer keeps the other lanes'
        old value (a `SEL`), and folds a cursor that only straight-line code bumps (block_sched: the count is 1)."""
        cursor = map_register(self.state, "cur", spec, "b32")
        return [ir.Instruction(i.opcode, i.operands, None, 0, ORIGIN)
                if i.opcode.base == "add" and i.operands and i.operands[0] == ir.Register(cursor) else i for i in code]

    # -- the primitives of save_core.lower_sum: each counter add takes the SAVE's guard itself (counter_add)
    def saving_lanes(self, level: str, guard: ir.Guard | None, at_exit: bool = False) -> list[ir.Instruction]:
        return []

    def end_saving(self, level: str) -> list[ir.Instruction]:
        return []

    def record_stores(self, spec) -> list[ir.Instruction]:
        """A ring map's record (passes/ring.py): the field registers stored at `ptr` where `ok`, as an array record's."""
        steps = ptx_steps(False, mixed=self.mixed_stores)
        steps.offsets = [f.offset for f in spec.fields]
        values = field_values(spec)
        ops = [s for chunk in steps.store_chunks(spec, len(values)) for s in steps.store_fields(spec, [values[i] for i in chunk], chunk[0])]
        return PtxTranslation(self.state, ORIGIN).translate([Op("lanes", Pred(_ptx_role("below_cap", spec))), *ops, Op("end")])

    def leader(self, level: str) -> Pred | None:
        """The unit leader's predicate, computed at entry by buffer addressing (asked for here); None at thread level."""
        if level not in LEVEL_LEADER:
            return None
        self.state.levels.add(level)
        self.state.temp(LEVEL_LEADER[level], "pred")  # declared ahead of the exit's own predicates
        return Pred(LEVEL_LEADER[level])

    # -- a whole kernel
    def lower(self) -> None:
        body = self.state.function.body
        edits: dict[int, tuple] = {}
        aggregating = not self.state.counting and any(self.probes.maps[m].type != "array" for m in self.state.maps)
        indexed = aggregating and ir.Scope not in map(type, body)  # save_constants then reads only near each SAVE
        groups, saves_at = self.probe_saves(body, indexed)
        constants = constant_save_values(body, self.state.temps, saves_at if indexed else None) if groups and aggregating else {}
        counted = register_counters.plan(self, groups, constants) if self.register_counting and aggregating else register_counters.Plan()
        for origin, saves in groups.items():
            if origin not in counted:
                self.lower_group(origin, saves, edits, self.save_shapes(saves, constants))
        self.store_counts(edits)
        register_counters.apply(self, counted, groups, edits)
        splice(body, edits)

    @staticmethod
    def probe_saves(body: list[ir.Statement], indexed: bool) -> tuple[dict[str, list[ir.Instruction]], list[tuple[int, ir.Instruction]]]:
        """The probe SAVEs grouped by origin (one snippet execution each); with `indexed` (a body
        without nested scopes), also (index in the body, SAVE) of each, in body order."""
        groups: dict[str, list[ir.Instruction]] = {}
        saves_at: list[tuple[int, ir.Instruction]] = []
        # Only inserted code can hold a SAVE: one cheap test drops the kernel's own instructions first.
        if indexed:
            inserted = [(i, s) for i, s in enumerate(body) if type(s) is ir.Instruction and s.origin is not None]
        else:
            inserted = [(-1, s) for s in ir.instructions(body) if s.origin is not None]
        for index, stmt in inserted:
            if stmt.origin.startswith("probe ") and stmt.opcode.base == SAVE:
                groups.setdefault(stmt.origin, []).append(stmt)
                if indexed:
                    saves_at.append((index, stmt))
        return groups, saves_at

    def lower_group(self, origin: str, saves: list[ir.Instruction], edits: dict[int, tuple], shapes: tuple) -> None:
        """Each SAVE of one snippet execution → its part of the record's code.

        The code depends only on the SAVEs, the probe file and a few facts of
        the kernel, so it is built once per such shape (`_lowered_group`) and
        copied for every site and kernel that has the same.
        """
        probe_name = origin.split(" ", 1)[1].split("#")[0]
        probe_map = next(p for p in self.probes.probes if p.name == probe_name).map
        values = tuple(v for s in saves for v in s.operands[-1].items)
        template = _lowered_group(
            probe_name,
            probe_map,
            tuple(_MapValue.of(spec) for spec in self.probes.maps.values()),
            self.state.prefix,
            self.state.counting,
            self.sm,
            shapes,
            self.mixed_stores,
            tuple((v.name, self.state.temps[v.name]) for v in values if type(v) is ir.Register and v.name in self.state.temps),
        )
        for name, rtype in template.registers:
            self.state.temp_named(name, rtype)
        for save, code in zip(saves, template.code):
            edits[id(save)] = ([], [ir.Instruction(t.opcode, t.operands, t.guard, 0, ORIGIN, text) for t, text in code], [])

    def build_group(self, probe_name: str, probe_map: str | None, maps: dict, saves: list[ir.Instruction]) -> list[list[ir.Instruction]]:
        """The code replacing each SAVE of `saves` (one snippet execution of probe `probe_name`)."""
        out: list[list[ir.Instruction]] = []
        explicit = isinstance(saves[0].operands[0], ir.Address)
        records = [[s] for s in saves] if explicit else [saves]
        for record in records:
            spec = maps[record[0].operands[0].base.name if explicit else probe_map]
            guards = {(s.guard.register.name, s.guard.negated) if s.guard else None for s in record}
            if len(guards) > 1:
                raise InstrumentError(f"probe {probe_name}: the SAVEs of one record must share one predicate")
            constants = tuple(_immediate_value(v) for s in record for v in s.operands[-1].items)
            if self.folds(spec, constants):  # every value known: no field registers (save_constants.py)
                out += [[] for _ in record[:-1]] + [self.constant_store(spec, constants, record[-1].guard)]
                continue
            regs = self.field_registers(spec)
            k = 0
            for position, save in enumerate(record):
                values = save.operands[-1].items
                code: list[ir.Instruction] = []
                for value in values:
                    code += self.convert(regs[k], spec.fields[k].type, value)
                    k += 1
                if position == len(record) - 1:
                    code += self.store(spec, save.guard)
                out.append(code)
        return out

    def folds(self, spec, values: tuple[int | None, ...]) -> bool:
        """Whether a record of `spec` whose values are `values` (None: known at run time only) is lowered as constants.

        hist: its value is known (the bucket is folded at every level and target). sum: every
        value is known and the map is thread-level on a target with warp operations (the count of
        the lanes that save times each constant). Array maps and the counting variant never.
        """
        if self.state.counting or None in values or not values:
            return False
        if spec.type == "hist":
            return True
        return spec.type == "sum" and spec.level == "thread" and self.sm >= WARP_SM

    def save_shapes(self, saves: list[ir.Instruction], constants: dict) -> tuple:
        """(opcode, operands, guard) of each SAVE; in records that `folds` takes, known values replace the registers.

        The shapes key the template cache (`_lowered_group`), so sites with different constants get their own code.
        """
        shapes = [(s.opcode, s.operands, s.guard) for s in saves]
        if not any(id(s) in constants for s in saves):
            return tuple(shapes)
        explicit = isinstance(saves[0].operands[0], ir.Address)
        probe_name = saves[0].origin.split(" ", 1)[1].split("#")[0]
        probe_map = next(p for p in self.probes.probes if p.name == probe_name).map
        records = [[k] for k in range(len(saves))] if explicit else [list(range(len(saves)))]
        for record in records:
            spec = self.probes.maps[saves[record[0]].operands[0].base.name if explicit else probe_map]
            known = [constants.get(id(saves[k]), (None,) * len(saves[k].operands[-1].items)) for k in record]
            if not self.folds(spec, tuple(v for values in known for v in values)):
                continue
            for k, values in zip(record, known):
                opcode, operands, guard = shapes[k]
                shapes[k] = (opcode, (*operands[:-1], ir.Vector(tuple(_u64(v) for v in values))), guard)
        return tuple(shapes)

    def store_counts(self, edits: dict[int, tuple]) -> None:
        maps = [self.probes.maps[m] for m in self.state.maps
                if self.probes.maps[m].type == "array" and not is_ring_map(self.probes.maps[m], self.state.counting)]
        if not maps:
            return
        steps = ptx_steps(self.state.counting, self.leader)
        for anchor in self.state.exits:
            ops = lower_exit_counts(steps, maps, anchor.guard)
            edits[id(anchor)] = (PtxTranslation(self.state, ORIGIN).translate(ops), None, [])


#: PTX's register of each value of a map that the neutral steps name (NeutralSteps.role): `<name>_<map>`
_PTX_ROLES = {"cursor": "cur", "slot": "rec", "count": "cnt", "below_cap": "ok", "offset": "off", "record": "ptr"}


def _ptx_role(kind: str, spec) -> str:
    return f"{_PTX_ROLES[kind]}_{spec.name}"


def _ptx_chunks(spec, count: int) -> list[list[int]]:
    return store_chunks(spec)


def _ptx_mixed_chunks(spec, count: int) -> list[list[int]]:
    return store_chunks(spec, mixed=True)


def ptx_steps(counting: bool, leader=None, mixed: bool = False) -> NeutralSteps:
    """The neutral steps with PTX's hooks: its register names and vector stores; the unit's leader is in each SAVE's
    guard already (passes/resolve.py) and, at exits, `leader(level)`'s predicate (computed at entry); the probe gate
    joins the lanes that store; a counting variant only counts."""
    return NeutralSteps(WARP_LANES, role=_ptx_role, chunks=_ptx_mixed_chunks if mixed else _ptx_chunks, leaders_in_guard=True, gate=Pred(GATE_REGISTER),
                        counting=counting, leader=leader)


def field_values(spec) -> list[Val]:
    """The field registers of a record of `spec` (`f<i>_<map>`, as `_Lowerer.field_registers` names them)."""
    return [Val(f"f{i}_{spec.name}", 2 if f.type == "u64" else 1) for i, f in enumerate(spec.fields)]


@attrs.frozen
class _MapValue:
    """A map as the lowering sees it, as a value (MapSpec compares by identity)."""

    name: str
    cap: int | str
    record_bytes: int
    fields: tuple[Field, ...]
    type: str
    level: str
    buckets: Buckets | None

    @classmethod
    def of(cls, spec: MapSpec) -> "_MapValue":
        return cls(spec.name, spec.cap, spec.record_bytes, tuple(spec.fields), spec.type, spec.level, spec.buckets)


@attrs.frozen
class _GroupTemplate:
    code: tuple[tuple[tuple[ir.Instruction, str | None], ...], ...]  # per SAVE: (instruction, operand text)
    registers: tuple[tuple[str, str], ...]  # registers in first-use order


@functools.lru_cache(maxsize=256)  # a pure function of its arguments: kernels and sites of one shape share it
def _lowered_group(
    probe_name: str, probe_map: str | None, maps: tuple[_MapValue, ...], prefix: str, counting: bool, sm: int, saves: tuple,
    mixed_stores: bool, value_types: tuple,
) -> _GroupTemplate:
    scratch = KernelState(ir.Function("entry", ""), prefix=prefix, counting=counting, temps=dict(value_types))
    origin = f"probe {probe_name}#0"
    lowerer = _Lowerer(scratch, None, sm, mixed_stores=mixed_stores)
    code = lowerer.build_group(
        probe_name, probe_map, {m.name: m for m in maps}, [ir.Instruction(op, ops, guard, 0, origin) for op, ops, guard in saves]
    )
    printed = tuple(tuple((insn, ", ".join(map(str, insn.operands)) or None) for insn in part) for part in code)
    return _GroupTemplate(printed, tuple(scratch.temps.items()))


# Spaces a counting kernel must not write: the program's memory (generic may be global).
_PROGRAM_SPACES = ("global", None)
# Types `ld` takes (PTX ISA, ld): an atomic's packed or half types are loaded as bits of their width.
_LOAD_TYPES = frozenset("b8 b16 b32 b64 b128 u8 u16 u32 u64 s8 s16 s32 s64 f32 f64".split())
# The widest vector `ld` takes per element size below 4 bytes (`.v8` loads exist only for 32-bit elements).
_MAX_LOAD_VECTOR = {1: 4, 2: 4}
COUNTING_ORIGIN = "counting-variant"


def load_type(atomic_type: str) -> str:
    """The `ld` type moving the bits of one element of an atomic's type."""
    return atomic_type if atomic_type in _LOAD_TYPES else f"b{ir.TYPE_BYTES[atomic_type] * 8}"


def _offset_address(address: ir.Address, delta: int) -> ir.Address:
    if delta == 0:
        return address
    return ir.Address(address.base, ir.Immediate(str(address.offset_value + delta)))


def atomic_as_load(atom: ir.Instruction) -> list[ir.Instruction]:
    """The loads that put in an atomic's destination what it would have read, touching nothing.

    `atom{.sem}{.scope}{.space}.op{.noftz}{.L2::cache_hint}{.vN}.type d, [a], b{, c}{, policy}`
    becomes `ld{.space}{.vN}.T d, [a]`: the operation, its sources (`cas` has two), memory
    ordering and cache policy go; T is the type itself where `ld` has it, else the bit type of
    its width (`.bf16x2` → `.b32`, `.f16` → `.b16`). A vector keeps its shape, except
    `.v8` of 16-bit elements, which `ld` lacks: two `.v4.b16` loads, 8 bytes apart.
    An atomic whose result is thrown away (`_`) is dropped like a reduction.
    """
    destination, address = atom.operands[0], atom.operands[1]
    if isinstance(destination, ir.Sink) or not isinstance(address, ir.Address):
        return []
    element = atom.opcode.types[-1] if atom.opcode.types else "b32"
    space = atom.opcode.space
    prefix = f"ld.{space}" if space else "ld"
    ltype = load_type(element)
    if not isinstance(destination, ir.Vector):
        return [_counting_insn(f"{prefix}.{ltype}", (destination, address), atom)]
    items = destination.items
    size = ir.TYPE_BYTES[element]
    step = min(len(items), _MAX_LOAD_VECTOR.get(size, len(items)))
    loads = []
    for first in range(0, len(items), step):
        part = items[first : first + step]
        shape = f".v{len(part)}" if len(part) > 1 else ""
        value = ir.Vector(part) if len(part) > 1 else part[0]
        loads.append(_counting_insn(f"{prefix}{shape}.{ltype}", (value, _offset_address(address, first * size)), atom))
    return loads


def _counting_insn(opcode: str, operands: tuple, original: ir.Instruction) -> ir.Instruction:
    return ir.Instruction(ir.opcode(opcode), operands, original.guard, original.line, COUNTING_ORIGIN)


def _write_replacement(insn: ir.Instruction, own: dict[str, str]) -> list[ir.Instruction] | None:
    """None to keep the instruction; otherwise what replaces a write to the program's memory.

    Stores and reductions disappear; an atomic becomes a plain load of the same
    location into its destination (`atomic_as_load`), so code that uses the old
    value still runs. A generic address in `own` (registers pointing into shared
    or local memory, `address_spaces.generic_spaces`) is the launch's own memory.
    """
    writes = [i for i, access, space in access_spaces(insn.opcode) if access in ("store", "atomic") and space in _PROGRAM_SPACES]
    if not writes or writes[0] >= len(insn.operands):
        return None  # decided from the opcode alone for all but the writes themselves
    if own and all(_points_into_own_memory(insn.operands[i], own) for i in writes if i < len(insn.operands)):
        return None
    if insn.opcode.base == "atom" and not isinstance(insn.operands[0], ir.Address):
        return atomic_as_load(insn)
    return []


def drop_global_writes(function: ir.Function) -> None:
    """The counting kernel runs before the real one: it must leave the program's memory alone.

    One pass over each body, rebuilding it only where something changed: linear in its size.
    """
    _drop_writes_in(function.body or [], generic_spaces(function))


def _points_into_own_memory(address: ir.Operand, own: dict[str, str]) -> bool:
    return isinstance(address, ir.Address) and isinstance(address.base, ir.Register) and address.base.name in own


def _drop_writes_in(body: list[ir.Statement], own: dict[str, str]) -> None:
    rebuilt: list[ir.Statement] = []
    changed = False
    for stmt in body:
        kind = type(stmt)
        if kind is ir.Scope:
            _drop_writes_in(stmt.body, own)
        elif kind is ir.Instruction and stmt.origin is None:
            replacement = _write_replacement(stmt, own)
            if replacement is not None:
                rebuilt.extend(replacement)
                changed = True
                continue
        rebuilt.append(stmt)
    if changed:
        body[:] = rebuilt


def clone_function(function: ir.Function) -> ir.Function:
    """A copy of a function whose statements are new objects (passes edit statements in place).

    Operands, opcodes and guards are immutable values, so the copies share them;
    an unparsed instruction stays unparsed. `copy.deepcopy` did the same work
    object by object, more than ten times slower on large kernels.
    """
    clone = copy.copy(function)
    clone.returns = None if function.returns is None else [ir.Param(p.text) for p in function.returns]
    clone.params = None if function.params is None else [ir.Param(p.text) for p in function.params]
    clone.directives = list(function.directives)
    clone.body = None if function.body is None else _clone_body(function.body)
    return clone


def _clone_body(body: list[ir.Statement]) -> list[ir.Statement]:
    out: list[ir.Statement] = []
    append = out.append
    for stmt in body:
        kind = type(stmt)
        if kind is ir.Instruction:
            # the stored operands (None while unparsed) and their text, not the parsing property
            append(ir.Instruction(
                stmt.opcode, stmt._operands, stmt.guard, stmt.line, stmt.origin, stmt.source_operands, stmt.written, stmt.leading
            ))
        elif kind is ir.Scope:
            append(ir.Scope(_clone_body(stmt.body), stmt.line, stmt.leading, stmt.closing))
        elif kind is ir.RegDecl:
            append(ir.RegDecl(stmt.type, stmt.names, stmt.count, stmt.line, stmt.origin, stmt.written, stmt.leading))
        else:
            append(copy.copy(stmt))
    return out


@attrs.frozen
class PtxSaveLowering:
    name: ClassVar[str] = "lower-save"
    requires: ClassVar[tuple[str, ...]] = ("resolve-operands",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        sm = sm_version(module.target)
        if sm >= WARP_SM and not version_reachable(module, WARP_OPS):
            sm = 0  # .version cannot be raised to what activemask needs: warp operations are left out
        register_counting = func_with_exit(module) is None  # else a thread may leave without flushing its counters
        for state in ctx.kernels.values():
            _Lowerer(state, ctx.probes, sm, register_counting, ctx.mixed_stores).lower()
        stage_counters(module, ctx, sm)  # maps with stage = "block": their adds into shared memory (passes/shared_agg.py)


def _immediate_value(operand) -> int | None:
    """The u64 bits of an integer immediate SAVE operand; None for anything else."""
    if type(operand) is ir.Immediate and operand.value is not None:
        return operand.value & 0xFFFFFFFFFFFFFFFF
    return None


def _u64(value: int) -> ir.Immediate:
    """A u64 immediate; hexadecimal, so values of 2^63 and above keep their bits."""
    return ir.Immediate(str(value) if value < 1 << 31 else f"0x{value:X}")
