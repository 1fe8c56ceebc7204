"""Operand resolution: splice each site's snippet into the kernel.

For every site this pass
* decides the execution predicate: the matched instruction's own guard (or the
  guard of the `ret`/`exit`) and, at warp/block level, the unit leader;
* materialises the helpers the snippet uses (OUT, IN1-3, ADDR, BYTES) into
  registers of fixed type, reading kernel registers but never writing them;
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

from neutrino.isa.ptx import ir
from neutrino.isa.ptx.semantics import access_bytes, effects, lookup
from neutrino.passes.build import entry_index, insn, splice
from neutrino.passes.manager import Context, KernelState, Site
from neutrino.probefile import HELPERS, SAVE, Probe, Snippet

LEVEL_LEADER = {"warp": "lead_warp", "block": "lead_block"}


@attrs.define
class _KernelRegisterTypes:
    """The kernel's declared register types, collected on first use: only helpers need them."""

    function: ir.Function
    _types: ir.RegisterTypes | None = None

    def type_of(self, name: str) -> str | None:
        if self._types is None:
            self._types = ir.register_types(self.function)
        return self._types.type_of(name)


class SkipSite(Exception):
    """The matched instruction lacks what the snippet needs."""


def helpers_used(snippet: Snippet) -> set[str]:
    return {name for stmt in ir.instructions(snippet.statements) for name in stmt.symbol_names() if name in HELPERS}


@attrs.define
class _SnippetCache:
    """What one kernel's sites of the same snippet share: computed once, copied per site."""

    helpers: dict[int, set[str]] = attrs.Factory(dict)  # id(snippet) → helpers it uses
    bodies: dict[tuple, list[ir.Instruction]] = attrs.Factory(dict)  # (id(snippet), site guard) → renamed code

    def helpers_used(self, snippet: Snippet) -> set[str]:
        used = self.helpers.get(id(snippet))
        if used is None:
            used = self.helpers[id(snippet)] = helpers_used(snippet)
        return used


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

    def nbytes(self, dst: str, anchor: ir.Instruction) -> list[ir.Instruction]:
        count = access_bytes(anchor)
        if count is None:
            raise SkipSite("the semantics table gives no byte count for it")
        if isinstance(count, int):
            return [self.emit("mov.u32", dst, count)]
        rtype = self.types.type_of(count.name) if isinstance(count, ir.Register) else None
        if rtype and rtype.endswith("64"):
            return [self.emit("cvt.u32.u64", dst, count)]
        return [self.emit("mov.b32", dst, count)]

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

    def captures(self, used: set[str], anchor: ir.Instruction) -> tuple[list[ir.Instruction], list[ir.Instruction]]:
        """Code that fills helper registers: (before the anchor, after the anchor)."""
        before: list[ir.Instruction] = []
        after: list[ir.Instruction] = []
        sources = None
        for helper in sorted(used):
            dst = self.helper_register(helper)
            if helper == "ADDR":
                before += self.address(dst, anchor)
            elif helper == "BYTES":
                before += self.nbytes(dst, anchor)
            elif helper == "OUT":
                after += self.widen(dst, self.output(anchor))
            else:
                sources = sources if sources is not None else self.sources(anchor)
                k = int(helper[2:]) - 1
                if k >= len(sources):
                    raise SkipSite(f"the instruction has no operand {helper}")
                before += self.widen(dst, sources[k])
        return before, after

    def helper_register(self, helper: str) -> str:
        return self.temp("h_" + helper.lower(), "b32" if helper == "BYTES" else "b64")

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
    def rename(self, operand: ir.Operand) -> ir.Operand:
        kind = type(operand)
        if kind is ir.Register:
            return ir.Register(self.state.renames[operand.name])
        if kind is ir.SpecialRegister or kind is ir.Immediate:
            return operand
        if isinstance(operand, ir.Symbol) and operand.name in HELPERS:
            return ir.Register(self.helper_register(operand.name))
        if isinstance(operand, ir.Vector):
            return ir.Vector(tuple(self.rename(o) for o in operand.items))
        if isinstance(operand, ir.Pair):
            return ir.Pair(self.rename(operand.first), self.rename(operand.second))
        if isinstance(operand, ir.Negated):
            return ir.Negated(self.rename(operand.operand))
        return operand

    def body(self, snippet: Snippet, site_guard: ir.Guard | None) -> list[ir.Instruction]:
        """The snippet renamed and predicated: the same for every site with this guard, so built once."""
        key = (id(snippet), site_guard)
        template = self.cache.bodies.get(key)
        if template is None:
            template = self.cache.bodies[key] = self.build_body(snippet, site_guard)
        origin = self.origin
        return [ir.Instruction(t.opcode, t.operands, t.guard, 0, origin) for t in template]

    def build_body(self, snippet: Snippet, site_guard: ir.Guard | None) -> list[ir.Instruction]:
        code: list[ir.Instruction] = []
        for stmt in ir.instructions(snippet.statements):
            own = None
            if stmt.guard is not None:
                own = ir.Guard(ir.Register(self.state.renames[stmt.guard.register.name]), stmt.guard.negated)
            guard, prep = self.combine(own, site_guard)
            code += prep
            operands = tuple(self.rename(o) for o in stmt.operands)
            if stmt.opcode.base not in ("mov", SAVE):
                reads, operands = self.read_special(operands)
                code += reads
            code.append(ir.Instruction(stmt.opcode, operands, guard, 0, self.origin))
        return code

    def read_special(self, operands: tuple[ir.Operand, ...]) -> tuple[list[ir.Instruction], tuple[ir.Operand, ...]]:
        """ptxas lets only `mov` read special registers: read them into registers first."""
        code: list[ir.Instruction] = []
        out = []
        for operand in operands:
            if isinstance(operand, ir.SpecialRegister):
                wide = operand.name in ("%clock64", "%globaltimer", "%gridid")
                reg = self.temp("sr_" + operand.name.lstrip("%").replace(".", "_"), "b64" if wide else "b32")
                code.append(self.emit("mov.u64" if wide else "mov.u32", reg, operand))
                operand = ir.Register(reg)
            out.append(operand)
        return code, tuple(out)


@attrs.frozen
class OperandResolution:
    name: ClassVar[str] = "resolve-operands"
    requires: ClassVar[tuple[str, ...]] = ("match-tracepoints", "virtualize-registers")

    def run(self, module: ir.Module, ctx: Context) -> None:
        probes = {p.name: p for p in ctx.probes.probes}
        for state in ctx.kernels.values():
            self.splice_kernel(state, probes)
            state.maps = list(ctx.probes.maps)

    def splice_kernel(self, state: KernelState, probes: dict[str, Probe]) -> None:
        body = state.function.body
        types = _KernelRegisterTypes(state.function)
        entry_code: list[ir.Instruction] = []
        before: dict[int, list[ir.Instruction]] = {}
        after: dict[int, list[ir.Instruction]] = {}
        anchors: dict[int, ir.Instruction] = {}
        counter = itertools.count()
        kept: list[Site] = []
        cache = _SnippetCache()
        for site in state.sites:
            probe = probes[site.probe]
            snippet = probe.before if site.where == "before" else probe.after
            origin = f"probe {probe.name}#{next(counter)}"
            builder = _SiteBuilder(state, types, origin, cache)
            try:
                pre, code, post = self.site_code(builder, site, probe, snippet)
            except SkipSite as reason:
                state.skipped.append(
                    {"line": site.anchor.line, "instruction": str(site.anchor.opcode), "probe": probe.name, "reason": str(reason)}
                )
                continue
            kept.append(site)
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
    def site_code(builder: _SiteBuilder, site: Site, probe: Probe, snippet: Snippet):
        """(code before the anchor, the snippet, code right after the anchor)."""
        pre, post = [], []
        used = builder.cache.helpers_used(snippet)
        if used and site.anchor is not None and site.kind == "instruction":
            pre, post = builder.captures(used, site.anchor)
        guard, predicate_code = builder.exec_predicate(site, probe.level)
        code = predicate_code + builder.body(snippet, guard)
        if site.where == "after" and site.kind == "instruction":
            return pre, code, post
        return pre + post, code, []
