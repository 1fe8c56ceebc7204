"""The GCN verifier: probe snippets are untrusted code inside someone else's kernel.

Phase 1 (`verify_probe_file`, when the probe file loads): every GCN line of a
snippet is an admitted instruction whose operands are probe registers,
helpers, literals or read-only words (`exec` as a source, `hwreg(...)`), and
writes only probe registers. Phase 2 (`check`, at the verify pass and after every pass with --verify-each):
the kernel's original instructions are untouched, and the code we insert
writes only registers the allocator gave out, plus `exec` and SCC that our
own code restores (spec/verifier.md, "GCN").
"""

from __future__ import annotations

import re

from neutrino.errors import Diagnostic, InstrumentError
from neutrino.isa.gcn import ir
from neutrino.isa.gcn.mnemonics import closest, did_you_mean, is_known
from neutrino.isa.gcn.positions import DIALECTS
from neutrino.isa.gcn.semantics import semantics
from neutrino.isa.gcn.snippets import is_gcn
from neutrino.isa.interface import HELPERS
from neutrino.passes.site_code import check_kernels

ALLOWED = re.compile(
    r"^(s_(mov|movk|cmov|cselect|add|addc|sub|subb|mul|mul_hi|and|or|xor|andn2|orn2|nand|nor|xnor|not|lshl|lshr|ashr|bfe|bfm|"
    r"min|max|abs|ff0|ff1|ctz|clz|flbit|bcnt0|bcnt1|brev|sext|cmp|cmpk|bitcmp|absdiff|lshl1_add|lshl2_add|lshl3_add|lshl4_add|pack)[a-z0-9_]*"
    r"|s_memtime|s_memrealtime|s_sendmsg_rtn_b64|s_getreg_b32|s_waitcnt|s_nop|CUID"
    r"|v_(mov|cndmask|add|sub|subrev|addc|subb|mul|mad|and|or|xor|not|lshl|lshr|ashr|lshlrev|lshrrev|ashrrev|bfe|bfi|bfm|"
    r"min|max|alignbit|mbcnt|bcnt|ffbh|ffbl|readfirstlane|readlane|cvt|add3|lshl_add|add_lshl|and_or|or3|xad|cmp_[a-z]+_[iu](32|64))[a-z0-9_]*)$"
)
IMPLICIT_VCC = re.compile(r"(_co_|addc|subb|v_cmp|cndmask).*_e32$")
#: our passes that set exec: leader predication (restored after the stores) and exit code (nothing runs after it)
EXEC_WRITERS = frozenset({"save-lowering", "resolve-operands"})
READ_ONLY = frozenset({"exec", "exec_lo", "exec_hi", "scc", "off"})
#: per snippet language, admitted-looking instructions its generation lacks, with what to write instead
#: (gfx11 has no s_memtime/s_memrealtime; s_sendmsg_rtn is gfx11's)
OTHER_GENERATION = {
    "gcn": {"s_sendmsg_rtn_b64": "on gfx9 read clocks with s_memtime / s_memrealtime"},
    "rdna": {"s_memtime": "on gfx11 read the shader clock with s_getreg_b32 %t, hwreg(HW_REG_SHADER_CYCLES, 0, 20)",
             "s_memrealtime": "on gfx11 read the 100 MHz clock with s_sendmsg_rtn_b64 %t, sendmsg(MSG_RTN_GET_REALTIME)"},
}
REALTIME = "sendmsg(MSG_RTN_GET_REALTIME)"  # the one message a probe may send


def verify_probe_file(probe_file: "ProbeFile") -> list[Diagnostic]:  # noqa: F821 (neutrino.probefile, which calls this)
    problems: list[Diagnostic] = []
    for probe in probe_file.probes:
        for snippet in probe.snippets():
            for stmt in snippet.statements:
                if is_gcn(stmt):
                    problems.extend(check_instruction(probe_file, probe.name, stmt))
    problems.sort(key=lambda d: (d.location.line, d.location.column))
    return problems


def check_instruction(probe_file: "ProbeFile",  # noqa: F821
                       probe: str, insn: ir.Instruction) -> list[Diagnostic]:
    def error(message: str, token: str | None = None, hint: str = "") -> Diagnostic:
        return Diagnostic(probe_file.location(insn.line, token or insn.mnemonic), f"[probe {probe}] {message}", hint=hint)

    isa = getattr(probe_file, "isa", "gcn")
    lacking = OTHER_GENERATION.get(isa, {}).get(insn.mnemonic)
    if lacking:
        return [error(f"{insn.mnemonic} does not exist on {isa.upper()}", hint=lacking)]
    known = DIALECTS[isa].mnemonics
    # a typo (not PTX, whose dotted opcodes the next check refuses): the admitted spellings nearest it
    if insn.mnemonic != "CUID" and "." not in insn.mnemonic and not is_known(insn.mnemonic, known):
        admitted = [m for m in known if ALLOWED.match(m) and not m.startswith("v_cmpx")]
        return [error(f"unknown {isa.upper()} mnemonic {insn.mnemonic}",
                      hint=did_you_mean(closest(insn.mnemonic, admitted) or closest(insn.mnemonic, known)))]
    if insn.mnemonic == "s_sendmsg_rtn_b64" and [str(o) for o in insn.operands[1:]] != [REALTIME]:
        return [error(f"s_sendmsg_rtn_b64 may only read the clock in probes ({REALTIME})")]
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


def check(module: ir.Module, ctx, lowered: bool) -> None:
    """Phase 2, after any pass (passes/site_code.py `check_kernels`): what we insert writes only registers the allocator gave out."""
    instruction = ir.Instruction
    originals = [i for i in module.items if type(i) is instruction and i.origin is None]  # one scan for all kernels
    check_kernels(originals, ctx, lowered, owned, check_inserted)


def owned(state) -> set[tuple[str, int]]:
    return {(r.file, r.first + k) for r in state.registers.taken.values() for k in range(r.count)}


def check_inserted(kernel: str, insn: ir.Instruction, ours: set[tuple[str, int]]) -> None:
    info = semantics(insn)
    for index in info.defs:
        operand = insn.operands[index]
        if type(operand) is ir.Special and operand.name in ("exec", "exec_lo") and insn.origin in EXEC_WRITERS:  # exec_lo: wave32
            continue
        for reg in ir.registers_in(operand):
            if any((reg.file, reg.first + k) not in ours for k in range(reg.count)):
                raise InstrumentError(f"kernel {kernel}: {insn.origin} code writes {reg}, a register of the kernel ({insn.mnemonic})")
        if type(operand) is not ir.RegRange:
            raise InstrumentError(f"kernel {kernel}: {insn.origin} code writes {operand} ({insn.mnemonic})")
