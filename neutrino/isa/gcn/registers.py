"""GCN's register model: what the passes learn about one kernel, and the registers they take.

Probe code may only write registers the kernel never touches: SGPRs and
VGPRs from the first one above the kernel's own (its descriptor's counts and
every register its code names). `Registers` hands them out, aligned as the
hardware wants tuples (pairs even, quads on a multiple of 4), and the
buffer-addressing pass writes the new counts back into the descriptor.
"""

from __future__ import annotations

import functools

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.gcn import ir
from neutrino.isa.gcn.dialect import GFX9, Dialect
from neutrino.isa.gcn.parser import parse_operand
from neutrino.passes.state import KernelState

ARCH_VGPRS = 256


@attrs.define(eq=False)
class Registers:
    """A bump allocator over the registers above the kernel's own."""

    kernel: str
    next_s: int
    next_v: int
    sgpr_limit: int
    taken: dict[str, ir.RegRange] = attrs.Factory(dict)

    def sgprs(self, role: str, count: int = 1) -> ir.RegRange:
        return self._take(role, "s", count)

    def vgprs(self, role: str, count: int = 1) -> ir.RegRange:
        return self._take(role, "v", count)

    def _take(self, role: str, file: str, count: int) -> ir.RegRange:
        old = self.taken.get(role)
        if old is not None:
            if (old.file, old.count) != (file, count):
                raise InstrumentError(f"internal: register {role} requested as {file}x{count} and {old.file}x{old.count}")
            return old
        align = 1 if count == 1 else (2 if count == 2 or file == "v" else 4)
        first = -(-(self.next_s if file == "s" else self.next_v) // align) * align
        end = first + count
        limit = self.sgpr_limit if file == "s" else ARCH_VGPRS
        if end > limit:
            what = "SGPRs" if file == "s" else "VGPRs"
            raise InstrumentError(f"kernel {self.kernel}: the probes need more {what} than are free "
                                  f"({end} > {limit}); use fewer probe registers or probe a smaller kernel")
        if file == "s":
            self.next_s = end
        else:
            self.next_v = end
        reg = self.taken[role] = ir.RegRange(file, first, count, bracketed=count > 1)
        return reg


@attrs.define(eq=False)
class GcnKernelState(KernelState):
    """A KernelState (`function` is the ir.Kernel view) with what GCN needs besides: descriptor, registers, entry/exit code."""

    descriptor: ir.Descriptor = attrs.field(kw_only=True)
    label: ir.Label = attrs.field(kw_only=True)
    registers: Registers = attrs.field(kw_only=True)
    entry_code: list[ir.Instruction] = attrs.field(kw_only=True, factory=list)  # runs before the kernel's first instruction
    exit_code: list[ir.Instruction] = attrs.field(kw_only=True, factory=list)  # before every s_endpgm, after the exit probes
    kernarg_size: int = attrs.field(kw_only=True, default=0)
    old_counts: dict[str, int] = attrs.field(kw_only=True, factory=dict)
    spliced: bool = attrs.field(kw_only=True, default=False)  # buffer addressing put the code into the module
    dialect: Dialect = attrs.field(kw_only=True, default=GFX9)  # what the steps emit for this kernel's target
    before_point: dict = attrs.field(kw_only=True, factory=dict)  # id(insn) → where its before-code goes, when not before it
    after_point: dict = attrs.field(kw_only=True, factory=dict)  # id(insn) → after which its after-code goes


def insn(mnemonic: str, *operands, origin: str, modifiers: tuple[str, ...] = ()) -> ir.Instruction:
    """An instruction passes insert: operands as IR values, ints as literals, str as operand text (`exec`, `hwreg(...)`)."""
    return ir.Instruction(mnemonic, tuple(map(operand, operands)), tuple(modifiers), origin=origin)


def operand(value) -> ir.Operand:
    return _literal(value) if isinstance(value, (int, str)) else value


@functools.lru_cache(maxsize=1024)  # operands are values: the few literals and words passes use, parsed once
def _literal(value: int | str) -> ir.Operand:
    if isinstance(value, int):
        return ir.Imm(hex(value) if value > 64 else str(value))
    return parse_operand(value)


@functools.lru_cache(maxsize=4096)
def half(reg: ir.RegRange | ir.ProbeReg, which: int) -> ir.RegRange | ir.ProbeReg:
    """One 32-bit register of a pair: of registers, or of a probe register (`%t.lo`, `%t.hi`)."""
    if type(reg) is ir.ProbeReg:
        return ir.ProbeReg(reg.name, ("lo", "hi")[which])
    return ir.RegRange(reg.file, reg.first + which)
