"""What each PTX instruction does to registers and memory: the one semantics table.

Passes ask `effects(insn)` (or `access_bytes(insn)`, its byte count alone);
nothing else in the code base guesses from opcode strings. The table is keyed
by opcode prefix (dot-separated components); the longest matching prefix wins,
so `cp.async.bulk` refines `cp.async`.
"""

from __future__ import annotations

import functools
from typing import Callable

import attrs

from neutrino.isa.ptx import ir

# -- how many bytes one thread's execution moves


def _vector_bytes(op: ir.Opcode) -> int | None:
    """ld/st/atom/red: vector width × element type (the last type modifier)."""
    types = op.types
    if not types:
        return None
    return op.vector * ir.TYPE_BYTES[types[-1]]


def _immediate_operand(index: int) -> Callable[[ir.Instruction], int | ir.Operand | None]:
    """cp.async*: the copy size is an operand (an immediate or a register)."""

    def rule(insn: ir.Instruction):
        if index >= len(insn.operands):
            return None
        operand = insn.operands[index]
        if isinstance(operand, ir.Immediate):
            return operand.value
        if isinstance(operand, ir.Register):
            return operand
        return None

    return rule


def _matrix_bytes(insn: ir.Instruction) -> int | None:
    """ldmatrix/stmatrix: .xN 8x8 matrices of 16-bit elements per warp, shared over 32 lanes."""
    count = next((int(m[1:]) for m in insn.opcode.modifiers if m in ("x1", "x2", "x4")), 1)
    return count * 8 * 8 * 2 // 32


def _wgmma_bytes(insn: ir.Instruction) -> int | None:
    """wgmma.mma_async: shared-memory operands read by a warpgroup (128 threads), per thread.

    B always comes from shared memory (a descriptor); A does when its operand is
    a 64-bit descriptor rather than a register vector.
    """
    shape = next((m for m in insn.opcode.modifiers if m.startswith("m") and "n" in m and "k" in m), None)
    types = insn.opcode.types
    if shape is None or len(types) < 3:
        return None
    try:
        m = int(shape[1 : shape.index("n")])
        n = int(shape[shape.index("n") + 1 : shape.index("k")])
        k = int(shape[shape.index("k") + 1 :])
    except ValueError:
        return None
    a_bytes, b_bytes = ir.TYPE_BYTES[types[1]], ir.TYPE_BYTES[types[2]]
    total = n * k * b_bytes
    if len(insn.operands) > 1 and not isinstance(insn.operands[1], ir.Vector):
        total += m * k * a_bytes
    return total // 128


@attrs.frozen
class OpSemantics:
    """One row of the table.

    defs: operand indices written (a Vector or Pair operand defines all its registers);
    addresses: (operand index, access) pairs, access in load/store/atomic/prefetch;
    bytes: rule giving the bytes one thread moves, an int, an operand, or None.
    control: 'branch', 'call', 'return', 'exit', 'trap', 'barrier' or None.
    """

    defs: tuple[int, ...] = (0,)
    addresses: tuple[tuple[int, str], ...] = ()
    bytes: Callable[[ir.Instruction], int | ir.Operand | None] | None = None
    control: str | None = None
    also_reads_defs: bool = False  # accumulators (wgmma, mma with d==c) are read too


_by_vector = lambda insn: _vector_bytes(insn.opcode)  # noqa: E731

TABLE: dict[tuple[str, ...], OpSemantics] = {
    ("ld",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_by_vector),
    ("ldu",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_by_vector),
    ("st",): OpSemantics(defs=(), addresses=((0, "store"),), bytes=_by_vector),
    ("st", "async"): OpSemantics(defs=(), addresses=((0, "store"),), bytes=_by_vector),
    ("atom",): OpSemantics(defs=(0,), addresses=((1, "atomic"),), bytes=_by_vector),
    ("red",): OpSemantics(defs=(), addresses=((0, "atomic"),), bytes=_by_vector),
    ("prefetch",): OpSemantics(defs=(), addresses=((0, "prefetch"),)),
    ("prefetchu",): OpSemantics(defs=(), addresses=((0, "prefetch"),)),
    # cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size}: the global side is the source.
    ("cp", "async"): OpSemantics(defs=(), addresses=((1, "load"), (0, "store")), bytes=_immediate_operand(2)),
    ("cp", "async", "commit_group"): OpSemantics(defs=()),
    ("cp", "async", "wait_group"): OpSemantics(defs=()),
    ("cp", "async", "wait_all"): OpSemantics(defs=()),
    ("cp", "async", "mbarrier"): OpSemantics(defs=(), addresses=((0, "atomic"),)),
    ("cp", "async", "bulk"): OpSemantics(defs=(), addresses=((1, "load"), (0, "store")), bytes=_immediate_operand(2)),
    ("cp", "async", "bulk", "tensor"): OpSemantics(defs=(), addresses=((0, "store"), (1, "load"))),
    ("cp", "async", "bulk", "commit_group"): OpSemantics(defs=()),
    ("cp", "async", "bulk", "wait_group"): OpSemantics(defs=()),
    ("cp", "async", "bulk", "prefetch"): OpSemantics(defs=(), addresses=((0, "prefetch"),)),
    ("cp", "reduce", "async", "bulk"): OpSemantics(defs=(), addresses=((0, "atomic"), (1, "load")), bytes=_immediate_operand(2)),
    ("ldmatrix",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_matrix_bytes),
    ("stmatrix",): OpSemantics(defs=(), addresses=((0, "store"),), bytes=_matrix_bytes),
    ("wmma", "load"): OpSemantics(defs=(0,), addresses=((1, "load"),)),
    ("wmma", "store"): OpSemantics(defs=(), addresses=((0, "store"),)),
    ("wgmma", "mma_async"): OpSemantics(defs=(0,), bytes=_wgmma_bytes, also_reads_defs=True),
    ("wgmma", "fence"): OpSemantics(defs=(), control="barrier"),
    ("wgmma", "commit_group"): OpSemantics(defs=(), control="barrier"),
    ("wgmma", "wait_group"): OpSemantics(defs=(), control="barrier"),
    ("mma",): OpSemantics(defs=(0,)),
    ("tex",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_by_vector),
    ("tld4",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_by_vector),
    ("suld",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_by_vector),
    ("sust",): OpSemantics(defs=(), addresses=((0, "store"),), bytes=_by_vector),
    ("sured",): OpSemantics(defs=(), addresses=((0, "atomic"),), bytes=_by_vector),
    ("mbarrier", "init"): OpSemantics(defs=(), addresses=((0, "store"),)),
    ("mbarrier", "inval"): OpSemantics(defs=(), addresses=((0, "store"),)),
    ("mbarrier", "expect_tx"): OpSemantics(defs=(), addresses=((0, "atomic"),)),
    ("mbarrier", "complete_tx"): OpSemantics(defs=(), addresses=((0, "atomic"),)),
    ("mbarrier", "arrive"): OpSemantics(defs=(0,), addresses=((1, "atomic"),)),
    ("mbarrier", "arrive_drop"): OpSemantics(defs=(0,), addresses=((1, "atomic"),)),
    ("mbarrier", "test_wait"): OpSemantics(defs=(0,), addresses=((1, "load"),)),
    ("mbarrier", "try_wait"): OpSemantics(defs=(0,), addresses=((1, "load"),)),
    ("bra",): OpSemantics(defs=(), control="branch"),
    ("brx",): OpSemantics(defs=(), control="branch"),
    ("call",): OpSemantics(defs=(), control="call"),
    ("ret",): OpSemantics(defs=(), control="return"),
    ("exit",): OpSemantics(defs=(), control="exit"),
    ("trap",): OpSemantics(defs=(), control="trap"),
    ("brkpt",): OpSemantics(defs=(), control="trap"),
    ("bar",): OpSemantics(defs=(), control="barrier"),
    ("barrier",): OpSemantics(defs=(), control="barrier"),
    ("bar", "red"): OpSemantics(defs=(0,), control="barrier"),
    ("barrier", "red"): OpSemantics(defs=(0,), control="barrier"),
    ("membar",): OpSemantics(defs=(), control="barrier"),
    ("fence",): OpSemantics(defs=(), control="barrier"),
    ("griddepcontrol",): OpSemantics(defs=(), control="barrier"),
    ("setmaxnreg",): OpSemantics(defs=(), control="barrier"),
    ("nanosleep",): OpSemantics(defs=(), control="barrier"),
    ("pmevent",): OpSemantics(defs=()),
    ("discard",): OpSemantics(defs=(), addresses=((0, "store"),)),
    ("applypriority",): OpSemantics(defs=(), addresses=((0, "prefetch"),)),
}
DEFAULT = OpSemantics(defs=(0,))


ENDS_KERNEL = ("return", "exit")
# First components of the rows that end the kernel: a cheap filter before the full lookup.
_ENDING_BASES = frozenset(key[0] for key, row in TABLE.items() if row.control in ENDS_KERNEL)


def kernel_exits(instructions: list[ir.Instruction]) -> list[ir.Instruction]:
    """The instructions that end the kernel (`ret`, `exit`)."""
    return [
        i for i in instructions if i.opcode.components[0] in _ENDING_BASES and lookup(i.opcode).control in ENDS_KERNEL
    ]


def lookup(opcode: ir.Opcode) -> OpSemantics:
    return _lookup_text(opcode.text)


@functools.lru_cache(maxsize=4096)  # keyed by the text: its hash is cached by the string
def _lookup_text(text: str) -> OpSemantics:
    return _lookup_components(tuple(text.split(".")))


@functools.lru_cache(maxsize=4096)  # a pure function of the opcode: memoised, not state
def _lookup_components(components: tuple[str, ...]) -> OpSemantics:
    for n in range(len(components), 0, -1):
        row = TABLE.get(components[:n])
        if row is not None:
            return row
    return DEFAULT


@attrs.frozen
class MemoryAccess:
    address: ir.Operand  # usually an ir.Address
    access: str  # load / store / atomic / prefetch
    space: str | None  # global / shared / local / const / param / generic(None)


@attrs.frozen
class Effects:
    defs: tuple[ir.Register, ...]
    uses: tuple[ir.Register, ...]
    memory: tuple[MemoryAccess, ...]
    bytes: int | ir.Operand | None
    control: str | None

    @property
    def primary_memory(self) -> MemoryAccess | None:
        """The access a probe's ADDR names: the first one outside shared memory, else the first."""
        for m in self.memory:
            if m.space != "shared":
                return m
        return self.memory[0] if self.memory else None


def _space_of(insn: ir.Instruction, index: int, access_count: int) -> str | None:
    """State space of address operand `index`: for two-address copies the modifiers name dst then src."""
    spaces = [m.split("::")[0] for m in insn.opcode.modifiers if m.split("::")[0] in ir.STATE_SPACES]
    if access_count == 2 and len(spaces) >= 2:
        return spaces[0] if index == 0 else spaces[1]
    return spaces[0] if spaces else None


def defined_registers(insn: ir.Instruction) -> list[ir.Register]:
    """The registers `insn` writes: `effects(insn).defs`, without the rest."""
    ops = insn.operands
    return [
        reg
        for i in lookup(insn.opcode).defs
        if i < len(ops) and not isinstance(ops[i], ir.Address)
        for reg in ir.registers_in(ops[i])
    ]


def access_bytes(insn: ir.Instruction) -> int | ir.Operand | None:
    """`effects(insn).bytes` alone: most rules read only the opcode, so no operand is parsed."""
    rule = lookup(insn.opcode).bytes
    return rule(insn) if rule is not None else None


def effects(insn: ir.Instruction) -> Effects:
    row = lookup(insn.opcode)
    ops = insn.operands
    defs: list[ir.Register] = []
    uses: list[ir.Register] = []
    for i, operand in enumerate(ops):
        regs = list(ir.registers_in(operand))
        if i in row.defs and not isinstance(operand, ir.Address):
            defs.extend(regs)
            if row.also_reads_defs:
                uses.extend(regs)
        else:
            uses.extend(regs)
    if insn.guard is not None:
        uses.append(insn.guard.register)
    memory = tuple(
        MemoryAccess(ops[i], access, _space_of(insn, i, len(row.addresses)))
        for i, access in row.addresses
        if i < len(ops)
    )
    nbytes = row.bytes(insn) if row.bytes is not None else None
    return Effects(tuple(defs), tuple(uses), memory, nbytes, row.control)
