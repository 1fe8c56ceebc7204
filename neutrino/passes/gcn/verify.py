"""The GCN verifier: probe snippets are untrusted code inside someone else's kernel.

Phase 1 (`verify_probe_file`, when the probe file loads): every GCN line of a
snippet is an admitted instruction whose operands are probe registers,
helpers, literals or read-only words (`exec` as a source, `hwreg(...)`), and
writes only probe registers. Phase 2 (`GcnVerifier`, after SAVE lowering):
the kernel's original instructions are untouched, and the code we insert
writes only registers the allocator gave out, plus `exec` and SCC that our
own code restores (spec/verifier.md, "GCN").
"""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from neutrino.errors import Diagnostic, InstrumentError, ProbeError
from neutrino.isa.gcn import ir
from neutrino.isa.gcn.semantics import semantics
from neutrino.isa.gcn.snippets import is_gcn
from neutrino.passes.manager import Context
from neutrino.probe_model import HELPERS, ProbeFile

ALLOWED = re.compile(
    r"^(s_(mov|movk|cmov|cselect|add|addc|sub|subb|mul|mul_hi|and|or|xor|andn2|orn2|nand|nor|xnor|not|lshl|lshr|ashr|bfe|bfm|"
    r"min|max|abs|ff0|ff1|flbit|bcnt0|bcnt1|brev|sext|cmp|cmpk|bitcmp|absdiff|lshl1_add|lshl2_add|lshl3_add|lshl4_add|pack)[a-z0-9_]*"
    r"|s_memtime|s_memrealtime|s_getreg_b32|s_waitcnt|s_nop|CUID"
    r"|v_(mov|cndmask|add|sub|subrev|addc|subb|mul|mad|and|or|xor|not|lshl|lshr|ashr|lshlrev|lshrrev|ashrrev|bfe|bfi|bfm|"
    r"min|max|alignbit|mbcnt|bcnt|ffbh|ffbl|readfirstlane|readlane|cvt|add3|lshl_add|add_lshl|and_or|or3|xad|cmp_[a-z]+_[iu](32|64))[a-z0-9_]*)$"
)
IMPLICIT_VCC = re.compile(r"(_co_|addc|subb|v_cmp|cndmask).*_e32$")
#: our passes that set exec: leader predication (restored after the stores) and exit code (nothing runs after it)
EXEC_WRITERS = frozenset({"save-lowering", "resolve-operands"})
READ_ONLY = frozenset({"exec", "exec_lo", "exec_hi", "scc", "off"})


def verify_probe_file(probe_file: ProbeFile) -> list[Diagnostic]:
    problems: list[Diagnostic] = []
    for probe in probe_file.probes:
        for snippet in probe.snippets():
            for stmt in snippet.statements:
                if is_gcn(stmt):
                    problems.extend(check_instruction(probe_file, probe.name, stmt))
    problems.sort(key=lambda d: (d.location.line, d.location.column))
    return problems


def check_instruction(probe_file: ProbeFile, probe: str, insn: ir.Instruction) -> list[Diagnostic]:
    def error(message: str, token: str | None = None, hint: str = "") -> Diagnostic:
        return Diagnostic(probe_file.location(insn.line, token or insn.mnemonic), f"[probe {probe}] {message}", hint=hint)

    if not ALLOWED.match(insn.mnemonic) or insn.mnemonic.startswith("v_cmpx"):
        return [error(f"{insn.mnemonic} is not allowed in probes",
                      hint="probes use scalar/vector ALU instructions, s_memtime, s_memrealtime, s_getreg_b32, s_waitcnt and s_nop; "
                           "memory, branches, exec and barriers are refused")]
    if IMPLICIT_VCC.search(insn.mnemonic):
        return [error(f"{insn.mnemonic} writes or reads vcc implicitly", hint="use the _e64 form with probe registers")]
    out: list[Diagnostic] = []
    defs = set(semantics(insn).defs)
    for index, operand in enumerate(insn.operands):
        kind = type(operand)
        if kind is ir.RegRange:
            out.append(error(f"physical register {operand}: probes name their own registers", str(operand),
                             hint="declare one: .reg .s32|.s64|.v32|.v64 %name"))
        elif kind is ir.Special and (index in defs or operand.name not in READ_ONLY):
            out.append(error(f"{operand} is not a probe register", str(operand)))
        elif kind is ir.ProbeReg and operand.name.startswith("%") and operand.name not in probe_file.registers:
            out.append(error(f"undeclared register {operand.name}", operand.name))
        elif kind is ir.ProbeReg and not operand.name.startswith("%") and index in defs:
            out.append(error(f"{operand.name} is read-only", operand.name))
        elif kind is ir.ProbeReg and not operand.name.startswith("%") and operand.name not in HELPERS:
            out.append(error(f"unknown helper {operand.name}", operand.name))
        elif kind is ir.Text and index in defs:
            out.append(error(f"{operand} cannot be written", str(operand)))
        elif kind is ir.Text and "%" in operand.text:
            out.append(error(f"{operand}: probe registers take no operand modifiers (neg, abs, sext)", str(operand)))
        elif kind is ir.Text and list(ir.registers_in(operand)):
            out.append(error(f"physical register in {operand}: probes name their own registers", str(operand)))
    return out


@attrs.frozen
class GcnVerifier:
    name: ClassVar[str] = "verify"
    requires: ClassVar[tuple[str, ...]] = ("lower-save",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        problems = [] if ctx.probes.verified else verify_probe_file(ctx.probes)
        if problems:
            raise ProbeError(problems)
        for state in ctx.kernels.values():
            ours = {(r.file, r.first + k) for r in state.registers.taken.values() for k in range(r.count)}
            for site in state.sites:
                for insn in site.code:
                    check_inserted(state.name, insn, ours)


def check_inserted(kernel: str, insn: ir.Instruction, ours: set[tuple[str, int]]) -> None:
    if insn.origin is None:
        raise InstrumentError(f"kernel {kernel}: internal: an original instruction inside probe code")
    info = semantics(insn)
    for index in info.defs:
        operand = insn.operands[index]
        if type(operand) is ir.Special and operand.name == "exec" and insn.origin in EXEC_WRITERS:
            continue
        for reg in ir.registers_in(operand):
            if any((reg.file, reg.first + k) not in ours for k in range(reg.count)):
                raise InstrumentError(f"kernel {kernel}: {insn.origin} code writes {reg}, a register of the kernel ({insn.mnemonic})")
        if type(operand) is not ir.RegRange:
            raise InstrumentError(f"kernel {kernel}: {insn.origin} code writes {operand} ({insn.mnemonic})")
