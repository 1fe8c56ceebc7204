"""SAVE lowering: pseudo-instructions → bounds-checked, aligned vector stores.

A unit's leader keeps a cursor per map (`<prefix>cur_<map>`). One execution of
a snippet writes one record: its SAVE operands are converted into field
registers where they appear, and at the snippet's last SAVE the record is
stored at `records + cursor * record_bytes` if `cursor < cap`; the cursor is
then incremented either way, so dropped records are counted. Before every
`ret`/`exit` the leader stores its cursor into the counts section
(spec/kernel-json.md). The counting variant of a kernel keeps only the cursor
arithmetic and the counts.
"""

from __future__ import annotations

import copy
import functools
from typing import ClassVar

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir
from neutrino.isa.ptx.semantics import access_spaces
from neutrino.passes.build import insn, splice
from neutrino.passes.manager import Context, KernelState
from neutrino.passes.match import exits_of
from neutrino.passes.resolve import LEVEL_LEADER
from neutrino.probefile import SAVE, Field, MapSpec, ProbeFile

ORIGIN = "save-lowering"
COUNT_SUFFIX = "__nt_count"


def map_register(state: KernelState, role: str, spec: MapSpec, rtype: str) -> str:
    return state.temp(f"{role}_{spec.name}", rtype)


def store_chunks(spec: MapSpec) -> list[list[int]]:
    """Field indices grouped into the widest aligned vector stores (at most 16 bytes)."""
    fields = spec.fields
    record_align = spec.record_bytes & -spec.record_bytes  # largest power of two dividing the size
    chunks, i = [], 0
    while i < len(fields):
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
        return [map_register(self.state, f"f{i}", spec, "b64" if f.type == "u64" else "b32") for i, f in enumerate(spec.fields)]

    def record_store(self, spec: MapSpec, guard: ir.Guard | None) -> list[ir.Instruction]:
        cur = map_register(self.state, "cur", spec, "b32")
        bump = self.emit("add.u32", cur, cur, 1, guard=guard)
        if self.state.counting:
            return [bump]
        ok = map_register(self.state, "ok", spec, "pred")
        cap = map_register(self.state, "cap", spec, "b32") if spec.cap == "count" else spec.cap
        code = [self.emit("setp.lt.u32", ok, cur, cap)]
        if guard is not None:
            g = guard.register
            if guard.negated:
                neg = map_register(self.state, "nok", spec, "pred")
                code += [self.emit("not.pred", neg, g), self.emit("and.pred", ok, ok, neg)]
            else:
                code.append(self.emit("and.pred", ok, ok, g))
        off = map_register(self.state, "off", spec, "b64")
        ptr = map_register(self.state, "ptr", spec, "b64")
        rec = map_register(self.state, "rec", spec, "b64")
        code += [self.emit("mul.wide.u32", off, cur, spec.record_bytes), self.emit("add.u64", ptr, rec, off)]
        regs = self.field_registers(spec)
        for chunk in store_chunks(spec):
            first = spec.fields[chunk[0]]
            suffix = "b64" if first.type == "u64" else "b32"
            vec = "" if len(chunk) == 1 else f".v{len(chunk)}"
            value = ir.Register(regs[chunk[0]]) if len(chunk) == 1 else ir.Vector(tuple(ir.Register(regs[i]) for i in chunk))
            address = ir.Address(ir.Register(ptr), ir.Immediate(str(first.offset)) if first.offset else None)
            code.append(self.emit(f"st.global{vec}.{suffix}", address, value, guard=ir.Guard(ir.Register(ok))))
        return code + [bump]

    # -- a whole kernel
    def lower(self) -> None:
        body = self.state.function.body
        edits: dict[int, tuple] = {}
        groups: dict[str, list[ir.Instruction]] = {}
        for stmt in ir.instructions(body):
            if stmt.origin is not None and stmt.origin.startswith("probe ") and stmt.opcode.base == SAVE:
                groups.setdefault(stmt.origin, []).append(stmt)
        for origin, saves in groups.items():
            self.lower_group(origin, saves, edits)
        self.store_counts(edits)
        splice(body, edits)

    def lower_group(self, origin: str, saves: list[ir.Instruction], edits: dict[int, tuple]) -> None:
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
            tuple((s.opcode, s.operands, s.guard) for s in saves),
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
            regs = self.field_registers(spec)
            k = 0
            for position, save in enumerate(record):
                values = save.operands[-1].items
                code: list[ir.Instruction] = []
                for value in values:
                    code += self.convert(regs[k], spec.fields[k].type, value)
                    k += 1
                if position == len(record) - 1:
                    code += self.record_store(spec, save.guard)
                out.append(code)
        return out

    def store_counts(self, edits: dict[int, tuple]) -> None:
        maps = [self.probes.maps[m] for m in self.state.maps]
        if not maps:
            return
        for anchor in self.state.exits:
            code: list[ir.Instruction] = []
            for spec in maps:
                guard, prep = self.leader_guard(spec.level, anchor.guard)
                cnt = map_register(self.state, "cnt", spec, "b64")
                cur = map_register(self.state, "cur", spec, "b32")
                code += prep + [self.emit("st.global.u32", ir.Address(ir.Register(cnt)), cur, guard=guard)]
            edits[id(anchor)] = (code, None, [])

    def leader_guard(self, level: str, exit_guard: ir.Guard | None) -> tuple[ir.Guard | None, list[ir.Instruction]]:
        leader = None
        if level in LEVEL_LEADER:
            leader = self.state.temp(LEVEL_LEADER[level], "pred")
            self.state.levels.add(level)
        if exit_guard is None:
            return (ir.Guard(ir.Register(leader)) if leader else None), []
        if leader is None:
            return exit_guard, []
        e = self.state.temp(f"exit_{level}", "pred")
        first = self.emit("not.pred" if exit_guard.negated else "mov.pred", e, exit_guard.register)
        return ir.Guard(ir.Register(e)), [first, self.emit("and.pred", e, e, leader)]


@attrs.frozen
class _MapValue:
    """A map as the lowering sees it, as a value (MapSpec compares by identity)."""

    name: str
    cap: int | str
    record_bytes: int
    fields: tuple[Field, ...]

    @classmethod
    def of(cls, spec: MapSpec) -> "_MapValue":
        return cls(spec.name, spec.cap, spec.record_bytes, tuple(spec.fields))


@attrs.frozen
class _GroupTemplate:
    code: tuple[tuple[tuple[ir.Instruction, str | None], ...], ...]  # per SAVE: (instruction, operand text)
    registers: tuple[tuple[str, str], ...]  # registers in first-use order


@functools.lru_cache(maxsize=256)  # a pure function of its arguments: kernels and sites of one shape share it
def _lowered_group(
    probe_name: str, probe_map: str | None, maps: tuple[_MapValue, ...], prefix: str, counting: bool, saves: tuple, value_types: tuple
) -> _GroupTemplate:
    scratch = KernelState(ir.Function("entry", ""), prefix=prefix, counting=counting, temps=dict(value_types))
    origin = f"probe {probe_name}#0"
    lowerer = _Lowerer(scratch, None)
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
_COUNTING_ORIGIN = "counting-variant"


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
    return ir.Instruction(ir.opcode(opcode), operands, original.guard, original.line, _COUNTING_ORIGIN)


def _write_replacement(insn: ir.Instruction) -> list[ir.Instruction] | None:
    """None to keep the instruction; otherwise what replaces a write to the program's memory.

    Stores and reductions disappear; an atomic becomes a plain load of the same
    location into its destination (`atomic_as_load`), so code that uses the old
    value still runs.
    """
    writes = [i for i, access, space in access_spaces(insn.opcode) if access in ("store", "atomic") and space in _PROGRAM_SPACES]
    if not writes or writes[0] >= len(insn.operands):
        return None  # decided from the opcode alone for all but the writes themselves
    if insn.opcode.base == "atom" and not isinstance(insn.operands[0], ir.Address):
        return atomic_as_load(insn)
    return []


def drop_global_writes(function: ir.Function) -> None:
    """The counting kernel runs before the real one: it must leave the program's memory alone.

    One pass over each body, rebuilding it only where something changed: linear in its size.
    """
    _drop_writes_in(function.body or [])


def _drop_writes_in(body: list[ir.Statement]) -> None:
    rebuilt: list[ir.Statement] = []
    changed = False
    for stmt in body:
        kind = type(stmt)
        if kind is ir.Scope:
            _drop_writes_in(stmt.body)
        elif kind is ir.Instruction and stmt.origin is None:
            replacement = _write_replacement(stmt)
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
            append(ir.Instruction(stmt.opcode, stmt._operands, stmt.guard, stmt.line, stmt.origin, stmt.source_operands))
        elif kind is ir.Scope:
            append(ir.Scope(_clone_body(stmt.body), stmt.line))
        elif kind is ir.RegDecl:
            append(ir.RegDecl(stmt.type, stmt.names, stmt.count, stmt.line, stmt.origin))
        else:
            append(copy.copy(stmt))
    return out


@attrs.frozen
class CountingVariant:
    """For maps with cap = "count": a copy of the kernel that only counts records.

    Made before lowering, from the kernel with its SAVE pseudo-instructions, so
    that both copies see exactly the same probe code. The copy writes nothing to
    global (or generic) memory: stores and reductions are dropped and atomics
    become loads, so running it first leaves the program's data unchanged.
    """

    name: ClassVar[str] = "counting-variant"
    requires: ClassVar[tuple[str, ...]] = ("resolve-operands",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        if not any(m.cap == "count" for m in ctx.probes.maps.values()):
            return
        for name, state in list(ctx.kernels.items()):
            clone = clone_function(state.function)
            clone.name = name + COUNT_SUFFIX
            drop_global_writes(clone)
            module.items.insert(module.items.index(state.function) + 1, clone)
            originals = [i for i in ir.instructions(clone.body) if i.origin is None]
            ctx.kernels[clone.name] = attrs.evolve(
                state,
                function=clone,
                counting=True,
                original_ids=[id(i) for i in originals],
                exits=exits_of(originals),
                temps=dict(state.temps),
                levels=set(state.levels),
                sites=list(state.sites),
                skipped=[],
                params=[],
            )
            state.count_kernel = clone.name


@attrs.frozen
class SaveLowering:
    name: ClassVar[str] = "lower-save"
    requires: ClassVar[tuple[str, ...]] = ("resolve-operands",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        for state in ctx.kernels.values():
            _Lowerer(state, ctx.probes).lower()
