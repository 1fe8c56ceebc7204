"""AMD RDNA 3 (gfx11, wave32) as the instrumentation core sees it: the GCN steps in gfx11's dialect.

The assembly syntax is LLVM's AMDGPU syntax, as for CDNA, so the IR, parser,
printer, semantics table and steps of `neutrino/isa/gcn/` serve both; what
gfx11 spells or sizes differently is its `Dialect` (`dialect.py`). What is
RDNA's own is where inserted code goes (spec/gcn.md, "RDNA"):

* the kernel's end: gfx11 kernels release their VGPRs before `s_endpgm`
  (`s_nop 0` / `s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)`); exit code runs before
  that epilogue, while the VGPRs are still the wave's;
* hints: `s_clause N` makes the next N+1 memory instructions one clause, and
  `s_delay_alu` tells the next instructions how long to wait for a VALU or
  SALU result. Code for an instruction of a clause goes before the clause (and
  after it, for `after` code), code for an instruction after `s_delay_alu`
  before the hint, so no probe code splits a clause or a hint from its
  instruction;
* wave64 kernels (`.amdhsa_wavefront_size32 0`) are refused: the dialect is wave32.
"""

from __future__ import annotations

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.gcn import ir
from neutrino.isa.gcn.dialect import Dialect
from neutrino.isa.gcn.registers import GcnKernelState
from neutrino.isa.gcn.target import GcnIsa, kernel_state as gcn_kernel_state
from neutrino.isa.rdna.dialect import GFX11

HINTS = ("s_delay_alu",)


def kernel_state(module: ir.Module, kernel: ir.Kernel, dialect: Dialect = GFX11) -> GcnKernelState:
    if kernel.descriptor.get("wavefront_size32") is not None and not kernel.descriptor.get_int("wavefront_size32"):
        raise InstrumentError(f"kernel {kernel.name}: a wave64 gfx11 kernel (.amdhsa_wavefront_size32 0); "
                              "RDNA kernels are instrumented as wave32 (compile without +wavefrontsize64)")
    state = gcn_kernel_state(module, kernel, dialect)
    state.exits = [epilogue_start(state.originals, end) for end in state.exits]
    place_around_hints(state)
    return state


def epilogue_start(originals: list[ir.Instruction], end: ir.Instruction) -> ir.Instruction:
    """The first instruction of the `s_nop` / `s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)` run right before `end`."""
    index = next(i for i, insn in enumerate(originals) if insn is end)
    while index > 0 and _in_epilogue(originals[index - 1]):
        index -= 1
    return originals[index]


def _in_epilogue(insn: ir.Instruction) -> bool:
    if insn.mnemonic == "s_sendmsg":
        return any("MSG_DEALLOC_VGPRS" in str(o) for o in insn.operands)
    return insn.mnemonic == "s_nop"


def place_around_hints(state: GcnKernelState) -> None:
    """Fills state.before_point / after_point: clause members to the clause's ends, hinted instructions to their hint."""
    originals = state.originals
    for index, insn in enumerate(originals):
        if insn.mnemonic == "s_clause":
            members = _clause(originals, index)
            for member in members:
                state.before_point[id(member)] = insn
                state.after_point[id(member)] = members[-1]
        elif insn.mnemonic in HINTS and index + 1 < len(originals):
            state.before_point.setdefault(id(originals[index + 1]), insn)


def _clause(originals: list[ir.Instruction], index: int) -> list[ir.Instruction]:
    """The instructions `s_clause N` at `index` groups: the next N+1, hints not counted."""
    operands = originals[index].operands
    length = int(str(operands[0]), 0) + 1 if operands else 1
    members: list[ir.Instruction] = []
    for insn in originals[index + 1:]:
        if len(members) == length:
            break
        if insn.mnemonic not in HINTS:
            members.append(insn)
    return members


@attrs.frozen
class RdnaIsa(GcnIsa):
    """RDNA 3 behind the Isa interface: one instance, `RDNA`; probe files for it are loaded with isa="rdna"."""

    name: str = "rdna"
    dialect: Dialect = GFX11

    def kernel_state(self, module: ir.Module, kernel: ir.Kernel) -> GcnKernelState:
        return kernel_state(module, kernel, self.dialect)


RDNA = RdnaIsa()
