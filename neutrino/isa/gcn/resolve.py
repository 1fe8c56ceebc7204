"""Operand resolution on GCN: each site's snippet with probe registers and helpers made physical.

Helpers (spec/probe-toml.md, "GCN snippets"): BYTES is the access width of the
matched instruction (semantics table); ADDR its 64-bit address, computed into
a VGPR pair of ours; OUT and IN1..IN3 its first written and n-th read operand.
A site whose instruction lacks what a helper needs is skipped and listed with
the reason, never guessed. SAVE stays abstract (`SaveOp`) for SAVE lowering.
"""

from __future__ import annotations

from neutrino.isa.gcn import ir
from neutrino.isa.gcn.semantics import Access, registers, semantics
from neutrino.isa.gcn.snippets import is_gcn
from neutrino.isa.ptx import ir as ptx
from neutrino.isa.gcn.registers import GcnKernelState, half, insn
from neutrino.isa.gcn.translate import GcnTranslation
from neutrino.passes.neutral_ops import Op, Val
from neutrino.passes.site_code import SkipSite as Skip, resolve_sites, snippet_code
from neutrino.passes.state import Context, Site

ORIGIN = "resolve-operands"


def resolve_operands(module: ir.Module, ctx: Context) -> None:
    """GCN's step of the resolve-operands pass (passes/pipeline.py): the sites' loop is passes/site_code.py's."""
    resolve_sites(ctx, lambda state, site, probe, statements: resolve_site(state, site, probe, statements, ctx, module.target))


def resolve_site(state: GcnKernelState, site: Site, probe, statements: list, ctx: Context, target: str | None) -> list:
    """One site's code: the snippet on its registers and helpers, SCC kept; Skip when the site cannot run it."""
    if site.kind == "instruction" and site.where == "after" and semantics(site.anchor).branch:
        raise Skip("after a branch: the code would run only when the branch is not taken")
    helpers = _Helpers(state, site)

    def instruction(stmt) -> list:
        if not is_gcn(stmt):
            return []  # a register declaration
        if stmt.mnemonic == "CUID":
            return cuid(helpers.operand(stmt.operands[0]), target, state, site.probe)
        operands = tuple(helpers.operand(o) for o in stmt.operands)
        return [ir.Instruction(stmt.mnemonic, operands, stmt.modifiers, origin=site.probe, line=stmt.line)]

    code = snippet_code(statements, probe, ctx.probes.maps, instruction, helpers.save_operand)
    prologue = helpers.prologue
    if site.kind == "exit":
        # At s_endpgm every lane the wave started with has finished, including lanes the last
        # branch turned off: exit code runs on all of them (nothing after it needs exec).
        d = state.dialect
        return [insn(d.mask("s_mov"), d.exec, state.registers.sgprs("entry_exec", d.mask_sgprs), origin=ORIGIN), *prologue, *code]
    if site.kind != "instruction":
        return prologue + code
    # Probe code must leave SCC as it found it: the kernel may compare before the site and branch after it.
    scc = state.registers.sgprs("scc")
    return [insn("s_cselect_b32", scc, 1, 0, origin=ORIGIN), *prologue, *code, insn("s_cmp_lg_u32", scc, 0, origin=ORIGIN)]


def cuid(dst: ir.RegRange, target: str | None, state: GcnKernelState, probe: str) -> list[ir.Instruction]:
    """CUID: bits 8-15 of HW_ID (CU, shader array, shader engine); gfx94x also has several dies (XCCs): XCC_ID << 8 on top.
    gfx11: bits 10-20 of HW_ID1 (workgroup processor, shader array, shader engine; the dialect's table)."""
    d = state.dialect
    code = [insn("s_getreg_b32", dst, f"hwreg({d.hw_id})", origin=probe),
            insn("s_bfe_u32", dst, dst, d.cu_field, origin=probe)]  # gfx9: offset 8, width 8
    if target and target.startswith("gfx94"):
        xcc = state.registers.sgprs("xcc")
        code += [insn("s_getreg_b32", xcc, "hwreg(HW_REG_XCC_ID)", origin=probe),
                 insn("s_and_b32", xcc, xcc, 15, origin=probe),
                 insn("s_lshl_b32", xcc, xcc, 8, origin=probe),
                 insn("s_or_b32", dst, dst, xcc, origin=probe)]
    return code


def _as_gcn(item) -> ir.Operand:
    """A SAVE operand (read as PTX) as the GCN snippet operand it stands for."""
    if type(item) is ptx.Register or type(item) is ptx.Symbol:  # a probe register, a helper
        return ir.ProbeReg(item.name)
    if type(item) is ptx.Immediate:
        return ir.Imm(item.text)
    raise Skip(f"SAVE operand {item} is not a probe register, helper or integer")


class _Helpers:
    """Resolves the operands of one site; computes ADDR once, on first use."""

    def __init__(self, state: GcnKernelState, site: Site):
        self.state, self.site = state, site
        self.prologue: list[ir.Instruction] = []
        self.info = semantics(site.anchor) if site.anchor is not None else None
        self.addr: ir.RegRange | None = None

    def save_operand(self, item, role: str | None):
        """A SAVE's value (its whole value) or guard (a probe register's lane mask), read as PTX."""
        return self.operand(ir.ProbeReg(item.name) if role else _as_gcn(item), whole=True)

    def operand(self, operand: ir.Operand, whole: bool = False) -> ir.Operand:
        """The operand at this site; OUT/INn in an instruction are their first register (spec/gcn.md), in a SAVE
        (`whole`) the whole value, so SAVE.u64 {OUT} of a 64-bit load saves both halves."""
        if type(operand) is not ir.ProbeReg:
            return operand
        name = operand.name
        if name.startswith("%"):
            reg = self.state.renames[name]
        elif name == "BYTES":
            return ir.Imm(str(self._access().bytes))
        elif name == "ADDR":
            reg = self._address()
        else:
            reg = self._operand_helper(name)
            if operand.half is None and not whole and reg.count > 1:
                return half(reg, 0)
        if operand.half is None:
            return reg
        if reg.count < 2:
            raise Skip(f"{operand} names half of a 32-bit value")
        return half(reg, 0 if operand.half == "lo" else 1)

    def _access(self) -> Access:
        if self.info is None or self.info.access is None:
            raise Skip("the instruction does not access memory (BYTES/ADDR)")
        return self.info.access

    def _operand_helper(self, name: str) -> ir.RegRange:
        if self.site.anchor is None:
            raise Skip(f"{name} at kernel position")
        indices = self.info.defs[:1] if name == "OUT" else self.info.uses[int(name[2]) - 1:int(name[2])]
        regs = registers(self.site.anchor, indices)
        if not regs:
            raise Skip(f"{name}: the instruction has no such register operand")
        if regs[0].file == "a":
            raise Skip(f"{name} is an AGPR: probes read VGPRs and SGPRs only")
        if name == "OUT" and self.site.where == "after":
            # a load's result lands asynchronously; wait for it before reading it
            self.prologue.insert(0, insn("s_waitcnt", "vmcnt(0) lgkmcnt(0)", origin=ORIGIN))
        return regs[0]

    def _address(self) -> ir.RegRange:
        if self.addr is not None:
            return self.addr
        access = self._access()
        if access.space not in ("global", "flat"):
            raise Skip(f"ADDR of a {access.space} access is not a 64-bit address")
        anchor = self.site.anchor
        vaddr = next(ir.registers_in(anchor.operands[access.address[0]]), None)
        saddr = next(ir.registers_in(anchor.operands[access.address[1]]), None) if len(access.address) > 1 else None
        offset = next((int(m.split(":", 1)[1], 0) for m in anchor.modifiers if m.startswith("offset:")), 0)
        # a VGPR pair, or an SGPR base + a 32-bit VGPR offset; then the instruction's own offset
        out = Val("addr", 2, lane=True)
        ops = [Op("mov", out, vaddr)] if saddr is None else [Op("add", out, saddr, vaddr)]
        self.prologue += GcnTranslation(self.state, ORIGIN).translate(ops + ([Op("add", out, out, offset)] if offset else []), shared=False)
        self.addr = self.state.registers.vgprs("addr", 2)
        return self.addr
