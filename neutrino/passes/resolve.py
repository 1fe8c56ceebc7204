"""Operand resolution: splice each site's snippet into the kernel.

For every site this pass
* decides the execution predicate: the matched instruction's own guard (or the
  guard of the `ret`/`exit`) and, at warp/block level, the unit leader; the
  leader only where it matters (`leader_free`): a warp/block-level snippet's
  register arithmetic whose results no probe of another level reads runs in
  every lane, as only the leader's values ever leave the registers (its SAVEs
  keep the leader); predicated, ptxas had to keep the other lanes' old values
  (a `SEL` per result); scratch registers (`scratch_registers`) are written
  without the site's predicate at all, and a 64-bit accumulation under the
  site's predicate is a select and an add (`_SiteBuilder.guarded`);
  spec/pipeline.md, "Which probe instructions are predicated";
* materialises the helpers the snippet uses (OUT, IN1-3, ADDR, BYTES), each with
  the type of what it stands for at this site (spec/probe-toml.md, "Helpers"),
  reading kernel registers but never writing them, and checks every use of
  them against that type;
* copies the snippet with renamed registers and the predicate folded into each
  instruction's guard, and inserts it before/after the anchor.

`SAVE` stays a pseudo-instruction here; SAVE lowering turns it into stores.
A site whose instruction lacks a helper the snippet needs is skipped and
recorded (spec/probe-toml.md, "Helpers").
"""

from __future__ import annotations

import itertools
from typing import ClassVar

import attrs

from neutrino.errors import Diagnostic, ProbeError
from neutrino.isa.ptx import formats, ir
from neutrino.isa.ptx.semantics import RuntimeBytes, access_bytes, defined_registers, effects, lookup, missing_bytes_reason
from neutrino.passes.build import entry_index, insn, splice
from neutrino.passes.state import Context, KernelState, Site
from neutrino.passes.probe_loops import analyse as analyse_loops, has_control_flow
from neutrino.passes.verify import WIDE_SPECIAL, expected_widths
from neutrino.probefile import HELPERS, SAVE, Probe, ProbeFile, Snippet

LEVEL_LEADER = {"warp": "lead_warp", "block": "lead_block"}


def read_registers(stmt: ir.Instruction) -> set[str]:
    """The probe registers an instruction of a snippet reads: its guard's, every SAVE operand's, its sources'."""
    names = {stmt.guard.register.name} if stmt.guard is not None else set()
    if stmt.opcode.base == SAVE:
        return names | {r.name for o in stmt.operands for r in ir.registers_in(o)}
    defs = lookup(stmt.opcode).defs
    for i, operand in enumerate(stmt.operands):
        if i not in defs or type(operand) is ir.Address:
            names.update(r.name for r in ir.registers_in(operand))
    return names


def register_readers(probes) -> dict[str, frozenset[str]]:
    """Probe register → the levels of the `probes` (a file's) that read it (a register only written is read by none)."""
    readers: dict[str, set[str]] = {}
    for probe in probes:
        for snippet in (probe.before, probe.after):
            for stmt in ir.instructions(snippet.statements) if snippet is not None else ():
                for name in read_registers(stmt):
                    readers.setdefault(name, set()).add(probe.level)
    return {name: frozenset(levels) for name, levels in readers.items()}


def scratch_registers(probes) -> frozenset[str]:
    """The probe registers that every snippet naming them writes before it reads them: by an instruction without a
    guard of its own whose first mention of the register is that write. A run of a snippet reaches each of its
    instructions only after every one before it (a probe branches only back: spec/verifier.md, "Loops"), so such
    a register's value never outlives the run that wrote it."""
    scratch: set[str] = set()
    refused: set[str] = set()
    for probe in probes:
        for snippet in (probe.before, probe.after):
            seen: set[str] = set()
            for stmt in ir.instructions(snippet.statements) if snippet is not None else ():
                reads = read_registers(stmt)
                refused.update(reads - seen)
                seen |= reads
                if stmt.opcode.base == SAVE:
                    continue
                for reg in defined_registers(stmt):
                    if reg.name not in seen:
                        (scratch if stmt.guard is None else refused).add(reg.name)
                        seen.add(reg.name)
    return frozenset(scratch - refused)


def register_roles(probe_file) -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    """(register_readers, scratch_registers) of a probe file's probes, derived once per file: a run instruments
    many modules with one file. Derived again when its probes or their snippets are other objects."""
    key = tuple((id(p), id(p.before), id(p.after), p.level) for p in probe_file.probes)
    cached = probe_file.derived.get("register_roles")
    if cached is None or cached[0] != key:
        cached = probe_file.derived["register_roles"] = (key, (register_readers(probe_file.probes),
                                                               scratch_registers(probe_file.probes)))
    return cached[1]


def site_free(stmt: ir.Instruction, scratch: frozenset[str]) -> bool:
    """Whether a snippet instruction may run without the site's predicate (the matched instruction's guard, the
    leader), under its own guard only: it writes only scratch registers (`scratch_registers`). Where the site's
    predicate is false, what it writes is read only by instructions that keep that predicate (they do not run) or
    write scratch registers too, and by none after the run; ptxas need not keep the old values (a `SEL` each)."""
    if stmt.opcode.base == SAVE:
        return False
    defs = defined_registers(stmt)
    return bool(defs) and all(r.name in scratch for r in defs)


def leader_free(stmt: ir.Instruction, level: str, readers: dict[str, frozenset[str]]) -> bool:
    """Whether a warp/block-level snippet instruction may run in every lane, not only the unit's leader.

    Snippets hold no memory access (spec/probe-toml.md, "Snippets"): an instruction writes only probe
    registers. Run by the other lanes, it changes what they hold, which only code of this level reads,
    and that code saves only from the leader (a SAVE keeps the leader); so what is stored is unchanged
    unless a probe of another level (a thread-level one reads every lane) reads what it writes.
    """
    if level not in LEVEL_LEADER or stmt.opcode.base == SAVE:
        return False
    return all(readers.get(r.name, frozenset()) <= {level} for r in defined_registers(stmt))


@attrs.define
class _KernelRegisterTypes:
    """The kernel's declared register types, collected on first use: only helpers need them."""

    function: ir.Function
    _types: ir.RegisterTypes | None = None

    def type_of(self, name: str) -> str | None:
        if self._types is None:
            self._types = ir.register_types(self.function)
        return self._types.type_of(name)


# A width in the verifier's terms: bits, "pred", or None for "any" (a SAVE operand; an integer immediate).
Width = int | str | None
# What stands for each helper at one site, per width it is read at: (helper, width) → operand.
HelperOperands = dict[tuple[str, Width], ir.Operand]


@attrs.frozen
class HelperUse:
    """One place a snippet reads a helper, with the width the reading instruction expects there."""

    helper: str
    width: Width
    line: int
    opcode: str
    float_slot: bool = False  # the instruction wants a floating-point operand here: no integer constant


@attrs.frozen
class SiteValue:
    """What a helper stands for at one site.

    `operand` is read (a kernel register, special register or immediate);
    `width` is its width (bits or "pred"), None for an integer immediate, which
    fits every width; `type` is how messages name it. A byte count (`count`)
    is an integer of no particular width: it is converted to whatever width a
    use wants. `ignore_source`: cp.async's ignore-src predicate, `full` bytes
    unless it is true.
    """

    operand: ir.Operand
    width: Width
    type: str
    count: bool = False
    ignore_source: int | None = None

    @property
    def immediate(self) -> bool:
        return isinstance(self.operand, ir.Immediate) and self.width is None


class HelperTypeError(Exception):
    """A use of a helper cannot take the helper's type at this site."""

    def __init__(self, use: HelperUse, value: SiteValue):
        super().__init__(use.helper)
        self.use, self.value = use, value


def operand_widths(stmt: ir.Instruction) -> list[Width]:
    """The width each top-level operand of a snippet instruction must have (None where anything goes).

    `expected_widths` (the verifier's typing) lists operands in order with
    `a|b` pairs flattened; a pair holds destinations, never a helper.
    """
    expected = iter(expected_widths(stmt))
    widths = []
    for operand in stmt.operands:
        if isinstance(operand, ir.Pair):
            next(expected, None)
            next(expected, None)
            widths.append(None)
        else:
            item = next(expected, None)
            widths.append(item[1] if item is not None else None)
    return widths


def helper_uses(snippet: Snippet) -> tuple[HelperUse, ...]:
    """Every read of a helper in the snippet, with the width its instruction wants there."""
    uses = []
    for stmt in ir.instructions(snippet.statements):
        if not any(name in HELPERS for name in stmt.symbol_names()):
            continue
        widths = [None] * len(stmt.operands) if stmt.opcode.base == SAVE else operand_widths(stmt)
        floats = float_slots(stmt)
        for index, (operand, width) in enumerate(zip(stmt.operands, widths)):
            for name in ir.symbols_in(operand):
                if name in HELPERS:
                    direct = isinstance(operand, (ir.Symbol, ir.Negated))
                    uses.append(HelperUse(name, width if direct else None, stmt.line, str(stmt.opcode),
                                          direct and index in floats))
    return tuple(uses)


def float_slots(stmt: ir.Instruction) -> set[int]:
    """Operand positions where the instruction's format wants a floating-point type."""
    if stmt.opcode.base == SAVE:
        return set()
    form = formats.match_opcode(stmt.opcode).format
    if form is None:
        return set()
    return {i for i, slot in enumerate(form.operands) if formats.type_class(formats.slot_type(slot, stmt.opcode)) == "f"}


def width_name(width: Width) -> str:
    return ".pred" if width == "pred" else f"{width}-bit"


# Their symbol operands name code (labels, functions), which no instruction can read as a value.
CONTROL_TRANSFERS = frozenset({"bra", "brx", "call"})


class SkipSite(Exception):
    """The matched instruction lacks what the snippet needs."""


def helpers_used(snippet: Snippet) -> set[str]:
    return {use.helper for use in helper_uses(snippet)}


@attrs.define
class _SnippetCache:
    """What one kernel's sites of the same snippet share: computed once, copied per site."""

    uses: dict[int, tuple[HelperUse, ...]] = attrs.Factory(dict)  # id(snippet) → its helper reads
    bodies: dict[tuple, list[ir.Instruction]] = attrs.Factory(dict)  # (id(snippet), site guard, helper operands) → code
    module: ir.Module | None = None  # for the line map's `.file`s and debug strings
    line_map: object = None  # neutrino.isa.ptx.lines.LineMap of the kernel, built on the first LINE/BLOCK
    loop_control: dict[int, frozenset[int]] = attrs.Factory(dict)  # id(snippet) → ids of its loops' control instructions
    readers: dict[str, frozenset[str]] = attrs.Factory(dict)  # probe register → levels reading it (register_readers)
    scratch: frozenset[str] = frozenset()  # probe registers written before read in every snippet (scratch_registers)

    def control_ids(self, snippet: Snippet) -> frozenset[int]:
        """A bounded loop's counter, compare and branch (spec/verifier.md, "Loops"): they run in every
        lane, outside the site's predicate, so that every lane makes the same trips and the branch is uniform."""
        ids = self.loop_control.get(id(snippet))
        if ids is None:
            ids = frozenset()
            if has_control_flow(snippet.statements):
                ids = analyse_loops(snippet.statements).control_ids
            self.loop_control[id(snippet)] = ids
        return ids

    def helper_uses(self, snippet: Snippet) -> tuple[HelperUse, ...]:
        uses = self.uses.get(id(snippet))
        if uses is None:
            uses = self.uses[id(snippet)] = helper_uses(snippet)
        return uses


@attrs.define
class _SiteBuilder:
    """Builds the code of one site."""

    state: KernelState
    types: _KernelRegisterTypes
    origin: str
    cache: _SnippetCache = attrs.Factory(_SnippetCache)

    def temp(self, role: str, rtype: str) -> str:
        return self.state.temp(role, rtype)

    def emit(self, opcode: str, *operands, guard=None) -> ir.Instruction:
        return insn(opcode, *operands, origin=self.origin, guard=guard)

    # -- helpers
    def widen(self, dst: str, value: ir.Operand) -> list[ir.Instruction]:
        """value → .u64 register dst: zero-extended integer, 0/1 predicate, raw float bits."""
        if isinstance(value, ir.Immediate):
            text = value.text
            if text[:2] in ("0f", "0F"):
                h32 = self.temp("h32", "b32")
                return [self.emit("mov.b32", h32, value), self.emit("cvt.u64.u32", dst, h32)]
            if text[:2] in ("0d", "0D"):
                return [self.emit("mov.b64", dst, value)]
            if value.value is None:
                raise SkipSite(f"operand {text} is not an integer")
            return [self.emit("mov.u64", dst, value)]
        if isinstance(value, ir.SpecialRegister):
            if value.name in ("%clock64", "%globaltimer", "%gridid") or value.name.endswith("_64"):
                return [self.emit("mov.u64", dst, value)]
            h32 = self.temp("h32", "b32")
            return [self.emit("mov.u32", h32, value), self.emit("cvt.u64.u32", dst, h32)]
        if isinstance(value, ir.Register):
            rtype = self.types.type_of(value.name)
            if rtype is None:
                raise SkipSite(f"register {value.name} has no declaration we can see")
            if rtype.startswith("v"):
                raise SkipSite(f"register {value.name} is a vector (.{rtype.replace(' ', ' .')})")
            bits = ir.TYPE_BYTES.get(rtype.split()[-1], -1) * 8
            if rtype == "pred":
                return [self.emit("selp.u64", dst, 1, 0, value)]
            if bits == 64:
                return [self.emit("mov.b64", dst, value)]
            if bits == 32:
                h32 = self.temp("h32", "b32")
                return [self.emit("mov.b32", h32, value), self.emit("cvt.u64.u32", dst, h32)]
            if bits == 16:
                h16 = self.temp("h16", "b16")
                return [self.emit("mov.b16", h16, value), self.emit("cvt.u64.u16", dst, h16)]
            raise SkipSite(f"register {value.name} is .{rtype}")
        raise SkipSite(f"operand {value} is not a register or constant")

    def address(self, dst: str, anchor: ir.Instruction) -> list[ir.Instruction]:
        access = effects(anchor).primary_memory
        if access is None or not isinstance(access.address, ir.Address):
            raise SkipSite("the instruction has no memory address")
        addr = access.address
        if access.space == "param":
            raise SkipSite("parameter-space addresses are not probed")
        code: list[ir.Instruction]
        if isinstance(addr.base, ir.Register):
            code = self.widen(dst, addr.base)
        elif isinstance(addr.base, ir.Symbol):
            code = [self.emit("mov.u64", dst, addr.base)]
        else:
            code = [self.emit("mov.u64", dst, addr.base)]
        if addr.offset is not None and addr.offset_value != 0:
            code.append(self.emit("add.u64", dst, dst, ir.Immediate(str(addr.offset_value))))
        return code

    def site_value(self, helper: str, anchor: ir.Instruction) -> SiteValue:
        """What OUT, IN1-3 or BYTES stands for at this site (ADDR is always the 64-bit address)."""
        if helper == "BYTES":
            return self.bytes_value(anchor)
        if helper in ("LINE", "BLOCK"):
            return self.line_value(helper, anchor)
        if helper == "OUT":
            return self.value_of(self.output(anchor))
        sources = self.sources(anchor)
        k = int(helper[2:]) - 1
        if k >= len(sources):
            raise SkipSite(f"the instruction has no operand {helper}")
        if isinstance(sources[k], ir.Symbol) and anchor.opcode.base in CONTROL_TRANSFERS:
            raise SkipSite(f"{helper} of {anchor.opcode.base} is a branch target or callee, not a value")
        return self.value_of(sources[k])

    def line_value(self, helper: str, anchor: ir.Instruction) -> SiteValue:
        """LINE / BLOCK: the anchor's line or basic-block index in the kernel's line map (a constant)."""
        from neutrino.isa.ptx.lines import build_line_map, helper_value

        if self.cache.line_map is None:
            self.cache.line_map = build_line_map(self.cache.module, self.state.function)
        value = helper_value(self.cache.line_map, helper, anchor)
        if value is None:
            raise SkipSite(f"{helper} is only defined at the kernel's own instructions")
        return SiteValue(ir.Immediate(str(value)), None, f"the constant {value}")

    def value_of(self, operand: ir.Operand) -> SiteValue:
        """An operand of the matched instruction with its type: a register's declared one."""
        if isinstance(operand, ir.Immediate):
            text = operand.text
            if text[:2] in ("0f", "0F"):
                return SiteValue(operand, 32, ".f32 immediate")
            if text[:2] in ("0d", "0D"):
                return SiteValue(operand, 64, ".f64 immediate")
            if operand.value is None:
                raise SkipSite(f"operand {text} is not an integer")
            return SiteValue(operand, None, "an integer immediate")
        if isinstance(operand, ir.SpecialRegister):
            wide = operand.name in WIDE_SPECIAL or operand.name.endswith("_64")
            return SiteValue(operand, 64 if wide else 32, ".u64" if wide else ".u32")
        if isinstance(operand, ir.Register):
            rtype = self.types.type_of(operand.name)
            if rtype is None:
                raise SkipSite(f"register {operand.name} has no declaration we can see")
            if rtype == "pred":
                return SiteValue(operand, "pred", ".pred")
            bits = ir.TYPE_BYTES.get(rtype, 0) * 8
            if bits not in (16, 32, 64):
                raise SkipSite(f"register {operand.name} is .{rtype}")
            return SiteValue(operand, bits, f".{rtype}")
        if isinstance(operand, ir.Symbol):
            return SiteValue(operand, 64, f"the address of {operand.name}")
        raise SkipSite(f"operand {operand} is not a register or constant")

    def bytes_value(self, anchor: ir.Instruction) -> SiteValue:
        """BYTES: a constant (an immediate of every width), or the operand that holds the count at run time."""
        count = access_bytes(anchor)
        if count is None:
            raise SkipSite(missing_bytes_reason(anchor))
        if isinstance(count, int):
            return SiteValue(ir.Immediate(str(count)), None, f"the constant {count}")
        if not isinstance(count, RuntimeBytes) or isinstance(count.operand, ir.Negated):
            raise SkipSite(f"its byte count {count} is not a register or constant")
        value = self.value_of(count.operand)
        if value.width == "pred":
            if count.full is None:
                raise SkipSite(f"its byte count {count.operand} is a predicate")
            return attrs.evolve(value, type="cp.async's ignore-src predicate", ignore_source=count.full)
        return attrs.evolve(value, count=True)

    def sources(self, anchor: ir.Instruction) -> list[ir.Operand]:
        """IN1, IN2, IN3: operands that are neither written nor the memory address."""
        row = lookup(anchor.opcode)
        address_indices = {i for i, _ in row.addresses}
        return [o for i, o in enumerate(anchor.operands) if i not in row.defs and i not in address_indices]

    def output(self, anchor: ir.Instruction) -> ir.Operand:
        row = lookup(anchor.opcode)
        if 0 not in row.defs or not anchor.operands or isinstance(anchor.operands[0], ir.Address):
            raise SkipSite("the instruction writes no register")
        out = anchor.operands[0]
        if isinstance(out, ir.Pair):
            out = out.first
        if isinstance(out, ir.Vector):
            raise SkipSite("OUT is a vector")
        return out

    def captures(self, uses: tuple[HelperUse, ...], anchor: ir.Instruction, values: dict[str, SiteValue]):
        """Code that fills helper registers: (before the anchor, after the anchor, operand per (helper, width)).

        `values` receives what each helper stands for here (for the caller's type ledger).
        """
        before: list[ir.Instruction] = []
        after: list[ir.Instruction] = []
        operands: HelperOperands = {}
        for use in uses:
            key = (use.helper, use.width)
            if use.helper == "ADDR":
                if "ADDR" not in values:
                    values["ADDR"] = SiteValue(ir.Register(self.temp("h_addr", "b64")), 64, ".u64")
                    before += self.address(self.temp("h_addr", "b64"), anchor)
                operands[key] = values["ADDR"].operand
                continue
            value = values.get(use.helper)
            if value is None:
                value = values[use.helper] = self.site_value(use.helper, anchor)
            self.check_use(use, value)
            if key in operands:
                continue
            operand, code = self.materialise(use, value)
            operands[key] = operand
            (after if use.helper == "OUT" else before).extend(code)
        return before, after, operands

    @staticmethod
    def check_use(use: HelperUse, value: SiteValue) -> None:
        """A use takes the helper's own width; a wider integer use takes it zero-extended (0/1 for a
        predicate); a byte count converts to any integer width. Anything else is a type error."""
        want, have = use.width, value.width
        if use.float_slot and isinstance(value.operand, ir.Immediate) and value.operand.value is not None:
            raise HelperTypeError(use, value)  # ptxas takes no integer constant where a float is wanted
        if want is None or have is None or want == have:
            return
        if isinstance(want, int) and (value.count or value.ignore_source is not None or have == "pred"):
            return
        if isinstance(want, int) and isinstance(have, int) and want > have:
            return
        raise HelperTypeError(use, value)

    def materialise(self, use: HelperUse, value: SiteValue) -> tuple[ir.Operand, list[ir.Instruction]]:
        """The operand that stands for the helper at this use, and the code that fills it."""
        want, have, name = use.width, value.width, use.helper.lower()
        if value.immediate:
            return value.operand, []  # an integer constant fits every width
        if value.ignore_source is not None:
            bits = want if isinstance(want, int) else 32
            dst = self.temp(f"h_{name}_b{bits}", f"b{bits}")
            return ir.Register(dst), [self.emit(f"selp.b{bits}", dst, 0, value.ignore_source, value.operand)]
        copy = self.copy(f"h_{name}", value)
        if want is None or want == have:
            return copy
        dst = self.temp(f"h_{name}_b{want}", f"b{want}")
        if have == "pred":
            return ir.Register(dst), [self.emit(f"selp.b{want}", dst, 1, 0, value.operand)]
        raw, code = copy  # a float register cannot be a cvt source: convert its bits
        return ir.Register(dst), code + [self.emit(f"cvt.u{want}.u{have}", dst, raw)]

    def copy(self, role: str, value: SiteValue) -> tuple[ir.Operand, list[ir.Instruction]]:
        """The operand copied into a register of ours of its own width (a bit type: every type of that size takes it)."""
        have = value.width
        tag = "pred" if have == "pred" else f"b{have}"
        dst = self.temp(f"{role}_{tag}", tag)
        operand = value.operand
        if have == "pred":
            opcode = "mov.pred"
        elif isinstance(operand, ir.SpecialRegister):
            opcode = f"mov.u{have}"
        elif isinstance(operand, ir.Symbol):
            opcode = "mov.u64"
        else:
            opcode = f"mov.b{have}"
        return ir.Register(dst), [self.emit(opcode, dst, operand)]

    # -- predicates
    def exec_predicate(self, site: Site, level: str) -> tuple[ir.Guard | None, list[ir.Instruction]]:
        guard = site.anchor.guard if site.anchor is not None else None
        leader = None
        if level in LEVEL_LEADER:
            leader = self.temp(LEVEL_LEADER[level], "pred")
            self.state.levels.add(level)
        if guard is None:
            return (ir.Guard(ir.Register(leader)) if leader else None), []
        if leader is None:
            return guard, []
        e = self.temp("exec", "pred")
        code = [self.emit("not.pred" if guard.negated else "mov.pred", e, guard.register), self.emit("and.pred", e, e, leader)]
        return ir.Guard(ir.Register(e)), code

    def combine(self, own: ir.Guard | None, site_guard: ir.Guard | None) -> tuple[ir.Guard | None, list[ir.Instruction]]:
        if own is None:
            return site_guard, []
        if site_guard is None:
            return own, []
        g = self.temp("g", "pred")
        first = self.emit("not.pred" if own.negated else "mov.pred", g, own.register)
        if site_guard.negated:
            g2 = self.temp("g2", "pred")
            return ir.Guard(ir.Register(g)), [first, self.emit("not.pred", g2, site_guard.register), self.emit("and.pred", g, g, g2)]
        return ir.Guard(ir.Register(g)), [first, self.emit("and.pred", g, g, site_guard.register)]

    # -- the snippet
    def rename(self, operand: ir.Operand, width: Width, helpers: HelperOperands) -> ir.Operand:
        kind = type(operand)
        if kind is ir.Register:
            return ir.Register(self.state.renames[operand.name])
        if kind is ir.SpecialRegister or kind is ir.Immediate:
            return operand
        if isinstance(operand, ir.Symbol) and operand.name in HELPERS:
            return helpers[(operand.name, width)]
        if isinstance(operand, ir.Vector):
            return ir.Vector(tuple(self.rename(o, None, helpers) for o in operand.items))
        if isinstance(operand, ir.Pair):
            return ir.Pair(self.rename(operand.first, None, helpers), self.rename(operand.second, None, helpers))
        if isinstance(operand, ir.Negated):
            return ir.Negated(self.rename(operand.operand, width, helpers))
        return operand

    def body(self, snippet: Snippet, site_guard: ir.Guard | None, helpers: HelperOperands, level: str = "thread",
             free_guard: ir.Guard | None = None) -> list[ir.Instruction]:
        """The snippet renamed and predicated: the same for every site with these guards and helper operands, so built
        once. `site_guard` holds the unit's leader (warp/block level), `free_guard` not: it predicates what `leader_free` lets
        every lane run."""
        key = (id(snippet), site_guard, free_guard, level, tuple(helpers.items()))
        template = self.cache.bodies.get(key)
        if template is None:
            template = self.cache.bodies[key] = self.build_body(snippet, site_guard, helpers, level, free_guard)
        origin = self.origin
        if not self.cache.control_ids(snippet):
            return [ir.Instruction(t.opcode, t.operands, t.guard, 0, origin) for t in template]
        return self.site_labels(template)

    def site_labels(self, template: list) -> list:
        """A copy of the template whose loop labels are this site's own: `<prefix>L_<site>_<n>`."""
        site = self.origin.rsplit("#", 1)[-1]
        names = {t.name: f"{self.state.prefix}L_{site}_{n}" for n, t in enumerate(x for x in template if type(x) is ir.Label)}
        out: list = []
        for t in template:
            if type(t) is ir.Label:
                out.append(ir.Label(names[t.name]))
            elif t.opcode.base == "bra":
                out.append(ir.Instruction(t.opcode, (ir.Symbol(names[t.operands[0].name]),), t.guard, 0, self.origin))
            else:
                out.append(ir.Instruction(t.opcode, t.operands, t.guard, 0, self.origin))
        return out

    def build_body(self, snippet: Snippet, site_guard: ir.Guard | None, helpers: HelperOperands, level: str = "thread",
                   free_guard: ir.Guard | None = None) -> list[ir.Instruction]:
        code: list = []
        readers = self.cache.readers
        control = self.cache.control_ids(snippet)
        statements = [s for s in snippet.statements if type(s) in (ir.Label, ir.Instruction)] if control else ir.instructions(snippet.statements)
        for stmt in statements:
            if type(stmt) is ir.Label:
                code.append(stmt)
                continue
            own = None
            if stmt.guard is not None:
                own = ir.Guard(ir.Register(self.state.renames[stmt.guard.register.name]), stmt.guard.negated)
            if id(stmt) in control:  # unguarded by the site: the loop runs alike in every lane
                operands = stmt.operands if stmt.opcode.base == "bra" else tuple(self.rename(o, None, helpers) for o in stmt.operands)
                code.append(ir.Instruction(stmt.opcode, operands, own, 0, self.origin))
                continue
            if site_free(stmt, self.cache.scratch):
                guard, prep = own, []
            else:
                guard, prep = self.combine(own, free_guard if leader_free(stmt, level, readers) else site_guard)
            code += prep
            widths = operand_widths(stmt) if helpers and stmt.opcode.base != SAVE else [None] * len(stmt.operands)
            operands = tuple(self.rename(o, w, helpers) for o, w in zip(stmt.operands, widths))
            if stmt.opcode.base not in ("mov", SAVE):
                reads, operands = self.read_special(operands)
                code += reads
            made = ir.Instruction(stmt.opcode, operands, guard, 0, self.origin)
            code += self.guarded(made) if own is None else [made]
        return code

    def guarded(self, stmt: ir.Instruction) -> list[ir.Instruction]:
        """A 64-bit accumulation guarded by the site (the matched instruction's guard, the leader), `@g add.u64 r, r, x`,
        as `selp.b64 t, x, 0, g; add.u64 r, r, t`: the same sum, which ptxas turns into a select and an add, where the
        predicated add became an add and two selects (gmem_bytes' count per access). Not for a snippet's own guards
        (the caller): there ptxas kept more registers live (lines: 8 more on Triton's layernorm)."""
        ops = stmt.operands
        if stmt.guard is None or str(stmt.opcode) not in ("add.u64", "add.s64") or len(ops) != 3 \
                or type(ops[0]) is not ir.Register or ops[0] not in ops[1:]:
            return [stmt]
        other = ops[2] if ops[1] == ops[0] else ops[1]
        t = ir.Register(self.temp("acc", "b64"))
        g = stmt.guard
        choose = (ir.Immediate("0"), other) if g.negated else (other, ir.Immediate("0"))
        return [self.emit("selp.b64", t, *choose, g.register), ir.Instruction(stmt.opcode, (ops[0], ops[0], t), None, 0, self.origin)]

    def read_special(self, operands: tuple[ir.Operand, ...]) -> tuple[list[ir.Instruction], tuple[ir.Operand, ...]]:
        """ptxas lets only `mov` read special registers: read them into registers first."""
        code: list[ir.Instruction] = []
        out = []
        for operand in operands:
            if isinstance(operand, ir.SpecialRegister):
                wide = operand.name in WIDE_SPECIAL
                reg = self.temp("sr_" + operand.name.lstrip("%").replace(".", "_"), "b64" if wide else "b32")
                code.append(self.emit("mov.u64" if wide else "mov.u32", reg, operand))
                operand = ir.Register(reg)
            out.append(operand)
        return code, tuple(out)


@attrs.frozen
class PtxOperandResolution:
    name: ClassVar[str] = "resolve-operands"
    requires: ClassVar[tuple[str, ...]] = ("match-tracepoints", "virtualize-registers")

    def run(self, module: ir.Module, ctx: Context) -> None:
        probes = {p.name: p for p in ctx.probes.probes}
        ledger = HelperTypeLedger(ctx.probes, module.source)
        readers, scratch = register_roles(ctx.probes)
        for state in ctx.kernels.values():
            self.splice_kernel(state, probes, ledger, module, readers, scratch)
            state.maps = list(ctx.probes.maps)
        if ledger.problems:
            raise ProbeError(ledger.problems)

    def splice_kernel(self, state: KernelState, probes: dict[str, Probe], ledger: "HelperTypeLedger | None" = None,
                      module: ir.Module | None = None, readers: dict[str, frozenset[str]] | None = None,
                      scratch: frozenset[str] | None = None) -> None:
        body = state.function.body
        types = _KernelRegisterTypes(state.function)
        entry_code: list[ir.Instruction] = []
        before: dict[int, list[ir.Instruction]] = {}
        after: dict[int, list[ir.Instruction]] = {}
        anchors: dict[int, ir.Instruction] = {}
        counter = itertools.count()
        kept: list[Site] = []
        if readers is None:
            readers, scratch = register_readers(probes.values()), scratch_registers(probes.values())
        cache = _SnippetCache(module=module, readers=readers, scratch=scratch)
        for site in state.sites:
            probe = probes[site.probe]
            snippet = probe.before if site.where == "before" else probe.after
            origin = f"probe {probe.name}#{next(counter)}"
            builder = _SiteBuilder(state, types, origin, cache)
            values: dict[str, SiteValue] = {}
            try:
                pre, code, post = self.site_code(builder, site, probe, snippet, values)
            except HelperTypeError as error:
                if ledger is not None:
                    ledger.mismatch(probe.name, state.function.name, site.anchor, error)
                continue
            except SkipSite as reason:
                state.skipped.append(
                    {"line": site.anchor.line, "instruction": str(site.anchor.opcode), "probe": probe.name, "reason": str(reason)}
                )
                continue
            kept.append(site)
            if ledger is not None and values:
                ledger.record(probe.name, state.function.name, site.anchor, values)
            if site.kind == "entry":
                entry_code += pre + code
                continue
            key = id(site.anchor)
            anchors[key] = site.anchor
            before.setdefault(key, []).extend(pre + (code if site.where == "before" or site.kind == "exit" else []))
            if site.kind == "instruction" and site.where == "after":
                after.setdefault(key, []).extend(post + code)
            else:
                after.setdefault(key, []).extend(post)
        state.sites = kept
        splice(body, {key: (before.get(key, []), None, after.get(key, [])) for key in anchors})
        i = entry_index(body)
        body[i:i] = entry_code

    @staticmethod
    def site_code(builder: _SiteBuilder, site: Site, probe: Probe, snippet: Snippet, values: dict[str, SiteValue]):
        """(code before the anchor, the snippet, code right after the anchor)."""
        pre, post, helpers = [], [], {}
        uses = builder.cache.helper_uses(snippet)
        if uses and site.anchor is not None and site.kind == "instruction":
            pre, post, helpers = builder.captures(uses, site.anchor, values)
        guard, predicate_code = builder.exec_predicate(site, probe.level)
        free = site.anchor.guard if site.anchor is not None else None
        body = builder.body(snippet, guard, helpers, probe.level, free)
        if predicate_code and not any(guard.register in (i.guard.register if i.guard else None, *i.operands)
                                      for i in body if type(i) is ir.Instruction):
            predicate_code = []  # no instruction runs under the leader: its predicate is not needed
        code = predicate_code + body
        if site.where == "after" and site.kind == "instruction":
            return pre, code, post
        return pre + post, code, []


@attrs.define
class HelperTypeLedger:
    """The type each probe's helpers had at the first site that used them, and the type errors found.

    A use that cannot take a helper's type at some site is a located error on
    the probe file's line, naming that site and, when the helper had another
    type at an earlier site of the same probe, that one too.
    """

    probes: ProbeFile
    source: str
    first: dict[tuple[str, str], tuple[SiteValue, str]] = attrs.Factory(dict)  # (probe, helper) → (value, site)
    problems: list[Diagnostic] = attrs.Factory(list)
    _reported: set = attrs.Factory(set)

    def site_name(self, kernel: str, anchor: ir.Instruction) -> str:
        return f"{self.source}:{anchor.line} ({anchor.opcode} in {kernel})"

    def record(self, probe: str, kernel: str, anchor: ir.Instruction, values: dict[str, SiteValue]) -> None:
        for helper, value in values.items():
            if (probe, helper) not in self.first:  # once per probe and helper: sites are many
                self.first[(probe, helper)] = (value, self.site_name(kernel, anchor))

    def mismatch(self, probe: str, kernel: str, anchor: ir.Instruction, error: HelperTypeError) -> None:
        use, value = error.use, error.value
        key = (probe, use.helper, use.line, use.width, value.type)
        if key in self._reported:
            return
        self._reported.add(key)
        here = self.site_name(kernel, anchor)
        wanted = "a floating-point" if use.float_slot else f"a {width_name(use.width)}"
        message = f"[probe {probe}] {use.helper} is {value.type} at {here}, but {use.opcode} expects {wanted} operand"
        earlier = self.first.get((probe, use.helper))
        if earlier is not None and earlier[0].type != value.type:
            message += f"; it is {earlier[0].type} at {earlier[1]}"
        hint = "a helper has the type of the operand it stands for at each site: convert it (cvt), or match sites of one type"
        self.problems.append(Diagnostic(self.probes.location(use.line, use.helper), message, hint=hint))
