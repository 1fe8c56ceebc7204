"""Buffer addressing: map parameters, unit indices, slot pointers, declarations.

Appends one `.param .u64` per map (and a `.u32` cap for `count` maps) to the
entry, and emits at kernel entry, ahead of every probe, the code computing
what the other passes' code reads: the leader predicates, each array map's
counts and records pointers for this thread's unit and its zeroed cursor, and
each sum/hist map's counters pointer (layout in spec/kernel-json.md), and
the probe gate `on` (below). Finally declares every register the probes and
passes introduced, in one block at the top of the kernel.

The probe gate: every store and atomic of the SAVE lowering is predicated on
`on`. A launch passes the first map's buffer pointer as it is (always
16-byte aligned): `on` is true. A CUDA graph node passes it with bit 0 set:
the u32 eight bytes before the buffer is then the gate its replays share,
0 for a replay that probes, anything else for one `--launches` leaves out
(the graph's append kernel writes it for the next replay: runtime/cudagraphs/ring.py).
An unselected replay then writes nothing and leaves the maps zero.
"""

from __future__ import annotations

import functools
import re
from typing import ClassVar

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir
from neutrino.isa.ptx.symbols import NameAllocator
from neutrino.passes import graph_chain
from neutrino.passes.build import entry_index, exit_probe_runs, insn, splice
from neutrino.passes.lower_save import GATE_OFFSET, GATE_REGISTER, map_register
from neutrino.passes.state import Context, KernelState
from neutrino.passes.param_space import check_param_space
from neutrino.passes.resolve import LEVEL_LEADER
from neutrino.passes.ring import is_ring_map, ring_pointers
from neutrino.passes.save_core import COUNT_BYTES, RECORDS_ALIGN, address_maps, record_stride
from neutrino.passes.shared_agg import func_with_exit
from neutrino.maps import stripe_row_bytes, stripes

ORIGIN = "buffer-addressing"


def param_names(kernel: str, map_name: str) -> tuple[str, str]:
    """The names we want for a map's parameters; the allocator appends `_1`, … if the module has them."""
    return f"{kernel}__nt_buf_{map_name}", f"{kernel}__nt_cap_{map_name}"


def declarations(registers: dict[str, str]) -> list[ir.RegDecl]:
    """One `.reg` per type, names in the order they were asked for."""
    by_type: dict[str, list[str]] = {}
    for name, rtype in registers.items():
        by_type.setdefault(rtype, []).append(name)
    return [ir.RegDecl(rtype, tuple(names), None, 0, ORIGIN) for rtype, names in by_type.items()]


@attrs.define
class _Prologue:
    state: KernelState
    code: list[ir.Instruction] = attrs.Factory(list)
    block: tuple[int, int, int] | None = None  # the kernel's .reqntid (thread_geometry)
    whole_counts: dict[str, int] = attrs.Factory(dict)  # units register → its units per block, when the block's shape
    # makes them a multiple of 4 (the counts section then ends 16-byte aligned: map_pointers)
    chain: bool = False  # the graph_chain variant (passes/graph_chain.py): the tagged pointer is a head's
    first_buf: str | None = None  # the first map's buffer register (chain: the others are offsets from it)

    def t(self, role: str, rtype: str) -> str:
        return self.state.temp(role, rtype)

    def emit(self, opcode: str, *operands, guard=None) -> None:
        self.code.append(insn(opcode, *operands, origin=ORIGIN, guard=guard))

    def zero_probe_registers(self) -> None:
        """Probe registers start at zero (false), so counters need no initialisation."""
        for name in self.state.renames.values():
            rtype = self.state.temps[name]
            if rtype == "pred":
                self.emit("setp.ne.u32", name, 0, 0)
            else:
                bits = ir.TYPE_BYTES[rtype] * 8
                self.emit(f"mov.b{bits}", name, 0)

    def thread_geometry(self, block: tuple[int, int, int] | None = None) -> None:
        """Linear thread index in the block, threads per block, linear block index, blocks. `block`: the
        kernel's `.reqntid` (every launch has that block shape): its sizes are constants, and the index of a
        dimension of size 1 is 0, so ptxas folds the block's arithmetic (no special-register or constant-bank
        reads for them: on a tiny kernel those are a good part of what the probe adds per warp)."""
        self.block = block
        tx, ty, tz = (self.t(f"tid_{d}", "b32") for d in "xyz")
        nx, ny, nz = (self.t(f"ntid_{d}", "b32") for d in "xyz")
        sources = {tx: "%tid.x", ty: "%tid.y", tz: "%tid.z", nx: "%ntid.x", ny: "%ntid.y", nz: "%ntid.z"}
        if block is not None:
            sources.update({nx: block[0], ny: block[1], nz: block[2]})
            sources.update({t: 0 for t, size in ((tx, block[0]), (ty, block[1]), (tz, block[2])) if size == 1})
        for reg, source in sources.items():
            self.emit("mov.u32", reg, source)
        tlin, tpb = self.t("tlin", "b32"), self.t("tpb", "b32")
        self.emit("mad.lo.u32", tlin, tz, ny, ty)
        self.emit("mad.lo.u32", tlin, tlin, nx, tx)
        self.emit("mul.lo.u32", tpb, nx, ny)
        self.emit("mul.lo.u32", tpb, tpb, nz)
        cx, cy, cz = (self.t(f"ctaid_{d}", "b32") for d in "xyz")
        gx, gy, gz = (self.t(f"nctaid_{d}", "b32") for d in "xyz")
        for reg, special in ((cx, "%ctaid.x"), (cy, "%ctaid.y"), (cz, "%ctaid.z"), (gx, "%nctaid.x"), (gy, "%nctaid.y"), (gz, "%nctaid.z")):
            self.emit("mov.u32", reg, special)
        blin, nblocks, w = self.t("blin", "b64"), self.t("nblocks", "b64"), self.t("w64", "b64")
        zy, yz = self.t("zy", "b32"), self.t("yz", "b32")
        # block_linear = (cz*gy + cy)*gx + cx and blocks = gx*(gy*gz), in 64 bits: grids can exceed 2^32 blocks. gy
        # and gz are below 2^16 (CUDA's limit), so cz*gy + cy < gy*gz < 2^32 fit 32 bits: one 32-bit and one widening
        # multiply-add each, where 64-bit products cost ptxas three multiplies.
        self.emit("mad.lo.u32", zy, cz, gy, cy)
        self.emit("cvt.u64.u32", w, cx)
        self.emit("mad.wide.u32", blin, zy, gx, w)
        self.emit("mul.lo.u32", yz, gy, gz)
        self.emit("mul.wide.u32", nblocks, yz, gx)

    def leaders(self) -> None:
        tlin = self.t("tlin", "b32")
        if "warp" in self.state.levels:
            lane = self.t("lane", "b32")
            self.emit("and.b32", lane, tlin, 31)
            self.emit("setp.eq.u32", self.t(LEVEL_LEADER["warp"], "pred"), lane, 0)
        if "block" in self.state.levels:
            self.emit("setp.eq.u32", self.t(LEVEL_LEADER["block"], "pred"), tlin, 0)

    def unit(self, level: str) -> tuple[str, str]:
        """(this thread's unit index, number of units), both .u64."""
        unit, units = self.t(f"unit_{level}", "b64"), self.t(f"units_{level}", "b64")
        blin, nblocks, w = self.t("blin", "b64"), self.t("nblocks", "b64"), self.t("w64", "b64")
        tlin, tpb = self.t("tlin", "b32"), self.t("tpb", "b32")
        if level == "block":
            self.emit("mov.b64", unit, blin)
            self.emit("mov.b64", units, nblocks)
            return unit, units
        per_block, index = tpb, tlin
        if level == "warp":
            per_block, index = self.t("wpb", "b32"), self.t("warp", "b32")
            self.emit("add.u32", per_block, tpb, 31)
            self.emit("shr.u32", per_block, per_block, 5)
            self.emit("shr.u32", index, tlin, 5)
        self.emit("cvt.u64.u32", w, per_block)
        self.emit("mul.lo.u64", units, nblocks, w)
        self.emit("mul.lo.u64", unit, blin, w)
        self.emit("cvt.u64.u32", w, index)
        self.emit("add.u64", unit, unit, w)
        if self.block is not None:
            threads = self.block[0] * self.block[1] * self.block[2]
            each = threads if level == "thread" else -(-threads // 32)
            if each * COUNT_BYTES % RECORDS_ALIGN == 0:
                self.whole_counts[units] = each
        return unit, units

    def load_buffer(self, buf: str, buffer_param: str, first: bool) -> None:
        """buf = the map's buffer parameter, in the global window; for the first map, the gate too."""
        self.emit("ld.param.u64", buf, ir.Address(ir.Symbol(buffer_param)))
        if not first:
            if self.chain:  # a chain node's other maps: their offsets from the first map's buffer (its slot)
                gated = self.t("gated", "pred")
                self.emit("cvta.to.global.u64", buf, buf, guard=ir.Guard(ir.Register(gated), negated=True))
                self.emit("add.u64", buf, buf, self.first_buf, guard=gated)
                return
            self.emit("cvta.to.global.u64", buf, buf)
            return
        self.first_buf = buf
        tag, gated = self.t("gate_tag", "b32"), self.t("gated", "pred")
        gate = None if self.chain else self.t("gate", "b32")
        on = self.t(GATE_REGISTER, "pred")
        # the tag tested in 32 bits (one predicate-setting instruction, not a 64-bit compare's two)
        self.emit("cvt.u32.u64", tag, buf)
        self.emit("and.b32", tag, tag, 1)
        self.emit("setp.ne.u32", gated, tag, 0)
        self.emit("and.b64", buf, buf, -2)
        self.emit("cvta.to.global.u64", buf, buf)
        if self.chain:
            regs = graph_chain.ChainRegisters(self.t)
            graph_chain.head_load(self.emit, regs, buf, gated, on, self.t("tlin", "b32"), self.t("blin", "b64"))
            return
        self.emit("mov.u32", gate, 0)
        self.emit("ld.global.u32", gate, ir.Address(ir.Register(buf), ir.Immediate(str(-GATE_OFFSET))), guard=ir.Guard(ir.Register(gated)))
        self.emit("setp.eq.u32", on, gate, 0)

    def counters_pointer(self, spec) -> None:
        """A sum or hist map: this warp's row of the launch's counters, row = %smid % rows (maps.stripes).

        A warp stays on its SM, so the row is fixed at entry; warps of
        different SMs add to different rows (kernel.json's `rows`; readers add them up).
        """
        buf = map_register(self.state, "buf", spec, "b64")
        if getattr(spec, "stage", None) == "block":
            return  # one row (passes/shared_agg.py): the buffer itself
        sm, w = self.t("stripe", "b32"), self.t("w64", "b64")
        self.emit("mov.u32", sm, "%smid")
        self.emit("and.b32", sm, sm, stripes(spec.type) - 1)
        self.emit("mul.wide.u32", w, sm, stripe_row_bytes(spec.record_bytes))
        self.emit("add.u64", buf, buf, w)

    def map_pointers(self, spec, unit: str, units: str) -> None:
        """An array map: this unit's counts pointer, records pointer and zero cursor (the buffer is loaded)."""
        if is_ring_map(spec, self.state.counting):  # cap = "count": one ring for the launch (passes/ring.py)
            ring_pointers(self, spec, unit, param_names("", spec.name)[1])
            return
        buf = map_register(self.state, "buf", spec, "b64")
        cnt = map_register(self.state, "cnt", spec, "b64")
        rec = map_register(self.state, "rec", spec, "b64")
        w = self.t("w64", "b64")
        self.emit("mad.lo.u64", cnt, unit, COUNT_BYTES, buf)
        self.emit("mov.u32", map_register(self.state, "cur", spec, "b32"), 0)
        if self.state.counting:
            return
        # records start after the counts, rounded up to 16 bytes; when the block's shape makes the units a multiple
        # of 4 they end there already, at blocks * (units per block * 4): ptxas sees neither, nor folds the products
        if units in self.whole_counts:
            self.emit("mad.lo.u64", rec, self.t("nblocks", "b64"), self.whole_counts[units] * COUNT_BYTES, buf)
        else:
            self.emit("mad.lo.u64", rec, units, COUNT_BYTES, RECORDS_ALIGN - 1)
            self.emit("and.b64", rec, rec, -RECORDS_ALIGN)
            self.emit("add.u64", rec, rec, buf)
        if spec.cap == "count":
            cap = map_register(self.state, "cap", spec, "b32")
            self.emit("ld.param.u32", cap, ir.Address(ir.Symbol(param_names("", spec.name)[1])))
            self.emit("mul.wide.u32", w, cap, spec.record_bytes)
            self.emit("mad.lo.u64", rec, unit, w, rec)
        else:
            self.emit("mad.lo.u64", rec, unit, record_stride(spec), rec)

    # -- the primitives of passes/save_core.address_maps: each returns the code it emitted
    def _emitted(self, emit, *args):
        """What `emit(*args)` returns, and the code it appended, taken back out of self.code."""
        start = len(self.code)
        result = emit(*args)
        out = self.code[start:]
        del self.code[start:]
        return result, out

    def map_base(self, spec, first: bool) -> list[ir.Instruction]:
        buf = map_register(self.state, "buf", spec, "b64")
        # the registers of its pointers are declared with its buffer's, ahead of the gate's
        if spec.type == "array":
            map_register(self.state, "cnt", spec, "b64")
            map_register(self.state, "rec", spec, "b64")
        else:
            self.t("stripe", "b32")
            self.t("w64", "b64")
        return self._emitted(self.load_buffer, buf, param_names("", spec.name)[0], first)[1]

    def counters_address(self, spec) -> list[ir.Instruction]:
        return self._emitted(self.counters_pointer, spec)[1]

    def unit_index(self, level: str) -> tuple[tuple[str, str], list[ir.Instruction]]:
        return self._emitted(self.unit, level)

    def unit_slot(self, spec, unit_and_units: tuple[str, str]) -> list[ir.Instruction]:
        return self._emitted(self.map_pointers, spec, *unit_and_units)[1]


@attrs.frozen
class _MapShape:
    """What the prologue needs of a map."""

    name: str
    level: str
    cap: int | str
    record_bytes: int
    type: str = "array"
    stage: str | None = None  # "block": staged per block, one row (no stripe)


@attrs.frozen
class _PrologueShape:
    """Everything the prologue's code depends on, but the kernel's name."""

    prefix: str
    probe_registers: tuple[tuple[str, str], ...]  # (renamed register, type), in order
    levels: frozenset[str]
    maps: tuple[_MapShape, ...]
    counting: bool
    block: tuple[int, int, int] | None = None  # the kernel's .reqntid (thread_geometry)
    chain: bool = False  # the graph_chain variant

    @classmethod
    def of(cls, state: KernelState, maps: list, chain: bool = False) -> "_PrologueShape":
        return cls(
            state.prefix,
            tuple((name, state.temps[name]) for name in state.renames.values()),
            frozenset(state.levels),
            tuple(_MapShape(m.name, m.level, m.cap, m.record_bytes, m.type, getattr(m, "stage", None)) for m in maps),
            state.counting,
            required_block(getattr(state.function, "directives", ())),
            chain,
        )


def required_block(directives) -> tuple[int, int, int] | None:
    """The block shape a `.reqntid` directive requires (missing sizes are 1), or None."""
    for directive in directives:
        m = re.fullmatch(r"\s*\.reqntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?\s*", directive)
        if m:
            x, y, z = (int(v) if v else 1 for v in m.groups())
            return (x, y, z) if x * y * z > 0 else None
    return None


@attrs.frozen
class _PrologueTemplate:
    code: tuple[ir.Instruction, ...]  # parameters named as for a kernel called ""
    registers: tuple[tuple[str, str], ...]  # every register the code uses, in first-use order
    param_loads: tuple[int, ...]  # indices of the instructions that name a parameter
    operand_texts: tuple[str | None, ...]  # how each instruction's operands print: computed once, not per kernel

    def instantiate(self, state: KernelState, params: dict[str, str]) -> list[ir.Instruction]:
        for name, rtype in self.registers:
            old = state.temps.setdefault(name, rtype)
            if old != rtype:
                raise InstrumentError(f"internal: register {name} requested as .{rtype} and .{old}")
        code = [
            ir.Instruction(t.opcode, t.operands, t.guard, 0, ORIGIN, text)
            for t, text in zip(self.code, self.operand_texts)
        ]
        for i in self.param_loads:
            code[i].operands = _for_kernel(code[i].operands, params)
        return code


def _names_parameter(insn: ir.Instruction) -> bool:
    return any(type(o) is ir.Address and type(o.base) is ir.Symbol for o in insn.operands)


def _for_kernel(operands: tuple[ir.Operand, ...], params: dict[str, str]) -> tuple[ir.Operand, ...]:
    """The template's only symbols are its parameters (`[__nt_buf_x]`): the names chosen for the kernel."""
    return tuple(
        ir.Address(ir.Symbol(params[o.base.name]), o.offset) if type(o) is ir.Address and type(o.base) is ir.Symbol else o
        for o in operands
    )


@functools.lru_cache(maxsize=256)  # a pure function of the shape: kernels of one probe file share it
def prologue_template(shape: _PrologueShape) -> _PrologueTemplate:
    scratch = KernelState(
        ir.Function("entry", ""),
        prefix=shape.prefix,
        renames={name: name for name, _ in shape.probe_registers},
        temps=dict(shape.probe_registers),
        levels=set(shape.levels),
        counting=shape.counting,
    )
    prologue = _Prologue(scratch, chain=shape.chain)
    prologue.zero_probe_registers()
    if any(m.type == "array" for m in shape.maps) or shape.levels or shape.chain:  # (chain: block 0, thread 0)
        prologue.thread_geometry(shape.block)
        prologue.leaders()
    prologue.code += address_maps(prologue, list(shape.maps))
    code = tuple(prologue.code)
    return _PrologueTemplate(
        code,
        tuple(scratch.temps.items()),
        tuple(i for i, insn in enumerate(code) if _names_parameter(insn)),
        tuple(", ".join(map(str, insn.operands)) or None for insn in code),
    )


@attrs.frozen
class PtxBufferAddressing:
    name: ClassVar[str] = "buffer-addressing"
    requires: ClassVar[tuple[str, ...]] = ("lower-save",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        names = ctx.names(module)
        # The counting variant takes the parameters of the kernel it counts for, names included.
        owners = {state.count_kernel: name for name, state in ctx.kernels.items() if state.count_kernel}
        chosen: dict[str, dict[str, str]] = {}  # owner → template placeholder → parameter name
        if ctx.graph_chain:
            graph_chain.refuse_exiting_funcs(module, func_with_exit)
        for name, state in ctx.kernels.items():
            owner = owners.get(name, name)
            if owner not in chosen:
                chosen[owner] = choose_param_names(ctx.kernels[owner], owner, names, ctx)
            original = len(state.function.params or [])
            self.add_params(state, chosen[owner], ctx)
            check_param_space(module, state.function, original)
            chain = ctx.graph_chain and not state.counting and bool(state.maps)
            shape = _PrologueShape.of(state, [ctx.probes.maps[m] for m in state.maps], chain)
            code = prologue_template(shape).instantiate(state, chosen[owner])
            if chain and ctx.late_head:
                code = self.defer_head(state, code, ctx.probes.maps[state.maps[0]])
            body = state.function.body
            i = entry_index(body)
            body[i:i] = code
            if chain:
                self.advance_at_exits(state)
            elif ctx.late_gate and state.maps:
                gate_again_at_exits(state)
            body[0:0] = declarations(state.temps)

    @staticmethod
    def defer_head(state: KernelState, code: list, first) -> list:
        """The chain's `late_head` option (passes/graph_chain.py: defer_head) on the instantiated prologue."""
        t = state.temp
        return graph_chain.defer_head(state, code, graph_chain.ChainRegisters(t), map_register(state, "buf", first, "b64"),
                                      t("gated", "pred"), t(GATE_REGISTER, "pred"), f"{state.prefix}L_chain_head")

    @staticmethod
    def advance_at_exits(state: KernelState) -> None:
        """The chain's advance before each of the kernel's exits, after every probe's exit code."""
        regs = graph_chain.ChainRegisters(state.temp)
        edits = {}
        for n, anchor in enumerate(state.exits):
            labels = (f"{state.prefix}L_chain_prime{n}", f"{state.prefix}L_chain_done{n}")
            edits[id(anchor)] = (graph_chain.advance(regs, anchor, labels), None, [])
        splice(state.function.body, edits)

    @staticmethod
    def add_params(state: KernelState, params_named: dict[str, str], ctx: Context) -> None:
        params = state.function.params if state.function.params is not None else []
        for map_name in state.maps:
            spec = ctx.probes.maps[map_name]
            buf_param, cap_param = (params_named.get(p) for p in param_names("", map_name))
            params.append(ir.Param(f".param .u64 {buf_param}"))
            state.params.append({"name": buf_param, "type": "u64", "map": map_name, "role": "buffer"})
            if spec.cap == "count":
                params.append(ir.Param(f".param .u32 {cap_param}"))
                state.params.append({"name": cap_param, "type": "u32", "map": map_name, "role": "cap"})
        state.function.params = params


def gate_again_at_exits(state: KernelState) -> None:
    """The probe gate's predicate set again (from the gate word loaded at entry: the same value) before each exit's
    probe code: ptxas then waits for the gate's load there, at the end of the warp, instead of before the body's
    own loads (issue 24: a tagged launch's warps otherwise stall at entry for it). Where nothing after entry uses
    the entry's predicate, ptxas drops it. Only the instrument(..., late_gate=True) option; not the chain variant."""
    on, gate = state.temp(GATE_REGISTER, "pred"), state.temp("gate", "b32")
    firsts, _ = exit_probe_runs(state.function.body, {id(anchor) for anchor in state.exits})
    splice(state.function.body, {k: ([insn("setp.eq.u32", on, gate, 0, origin=ORIGIN)], None, []) for k in firsts})


def choose_param_names(state: KernelState, owner: str, names: NameAllocator, ctx: Context) -> dict[str, str]:
    """Template placeholder (`__nt_buf_m`) → a parameter name fresh in the owner's scope (`k__nt_buf_m`)."""
    out = {}
    for map_name in state.maps:
        (buf, cap), (want_buf, want_cap) = param_names("", map_name), param_names(owner, map_name)
        out[buf] = names.fresh_local(state.function, want_buf)
        if ctx.probes.maps[map_name].cap == "count":
            out[cap] = names.fresh_local(state.function, want_cap)
    return out
