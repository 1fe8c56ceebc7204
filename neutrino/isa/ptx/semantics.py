"""What each PTX instruction does to registers and memory: the one semantics table.

Passes ask `effects(insn)`, or its parts that need fewer operands parsed:
`access_bytes(insn)` (the byte count; `missing_bytes_reason` says why there is
none), `access_spaces(opcode)` (which operand is accessed how, in which state
space), `defined_registers(insn)`. Nothing else in the code base guesses from
opcode strings. The table is keyed by opcode prefix (dot-separated
components); the longest matching prefix wins, so `cp.async.bulk` refines
`cp.async`. Byte counts are specified in spec/probe-toml.md, "Bytes".
"""

from __future__ import annotations

import functools
from typing import Callable

import attrs

from neutrino.isa.ptx import ir

# -- how many bytes one thread's execution moves (spec/probe-toml.md, "Bytes")


@attrs.frozen
class RuntimeBytes:
    """A byte count the instruction takes from an operand at run time.

    `operand` is a register (or immediate) holding the count: cp.async's
    src-size (`full` is then its cp-size: the rest of the copy is zero-filled,
    not read), cp.async.bulk's size (`full` None). cp.async's other form,
    `ignore-src`, is a predicate in the same place: `full` bytes unless it is
    true, then none. Which one a register is, its declared type tells; the
    table sees one instruction, so the caller, who has the declarations, decides.
    """

    operand: ir.Operand
    full: int | None = None


# Element sizes in bits of the types sub-byte matrix operands use (wmma's .s4/.u4/.b1 are not in TYPE_BYTES).
_ELEMENT_BITS = {**{t: 8 * n for t, n in ir.TYPE_BYTES.items() if n}, "s4": 4, "u4": 4, "b1": 1}
WARP_SIZE = 32


def _vector_bytes(op: ir.Opcode) -> int | None:
    """ld/st/atom/red: vector width × element type (the last type modifier)."""
    types = op.types
    if not types:
        return None
    return op.vector * ir.TYPE_BYTES[types[-1]]


def _count_operand(insn: ir.Instruction, index: int) -> int | ir.Operand | None:
    if index >= len(insn.operands):
        return None
    operand = insn.operands[index]
    if isinstance(operand, ir.Immediate):
        return operand.value
    if isinstance(operand, (ir.Register, ir.Negated)):
        return operand
    return None


def _cp_async_bytes(insn: ir.Instruction) -> int | RuntimeBytes | None:
    """cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size | , ignore-src}{, cache-policy}.

    Only src-size bytes are read from global memory (the rest of the
    destination is zero-filled), none when ignore-src is true.
    """
    full = _count_operand(insn, 2)
    if not isinstance(full, int):
        return None
    last = len(insn.operands) - (1 if "L2::cache_hint" in insn.opcode.modifiers else 0)
    if last <= 3:
        return full
    source = _count_operand(insn, 3)
    if isinstance(source, int):
        return min(source, full)
    return RuntimeBytes(source, full) if source is not None else None


def _bulk_bytes(insn: ir.Instruction) -> int | RuntimeBytes | None:
    """cp.async.bulk / cp.reduce.async.bulk [dst], [src], size, ...: `size` bytes (an immediate or a register)."""
    size = _count_operand(insn, 2)
    return size if size is None or isinstance(size, int) else RuntimeBytes(size)


def _bulk_prefetch_bytes(insn: ir.Instruction) -> int | RuntimeBytes | None:
    size = _count_operand(insn, 1)
    return size if size is None or isinstance(size, int) else RuntimeBytes(size)


def _matrix_shape(modifiers: tuple[str, ...]) -> tuple[int, int, int] | None:
    """`m16n8k16` → (16, 8, 16); `m8n8` → (8, 8, 0)."""
    for m in modifiers:
        if m.startswith("m") and "n" in m:
            rest = m[1:].replace("n", " ").replace("k", " ").split()
            if all(part.isdigit() for part in rest) and len(rest) in (2, 3):
                return int(rest[0]), int(rest[1]), int(rest[2]) if len(rest) == 3 else 0
    return None


def _matrix_bytes(insn: ir.Instruction) -> int | None:
    """ldmatrix/stmatrix: .xN matrices of the shape's rows × columns, shared over the warp.

    `.b16` elements are 2 bytes; the 8-bit forms (`.b8`, and the packed
    `.b8x16.b6x16_p32` / `.b8x16.b4x16_p64` whose rows are padded to 16 bytes)
    1 byte per element in memory.
    """
    shape = _matrix_shape(insn.opcode.modifiers)
    if shape is None:
        return None
    count = next((int(m[1:]) for m in insn.opcode.modifiers if m in ("x1", "x2", "x4")), 1)
    element = 2 if "b16" in insn.opcode.modifiers else 1
    return count * shape[0] * shape[1] * element // WARP_SIZE


# wmma fragment → which two of the shape's (M, N, K) are its rows and columns.
_WMMA_FRAGMENT_DIMS = {"a": (0, 2), "b": (2, 1), "c": (0, 1), "d": (0, 1)}


def _wmma_bytes(insn: ir.Instruction) -> int | None:
    """wmma.load.{a,b,c} / wmma.store.d: this thread's share of the fragment's tile.

    The warp moves the whole tile (rows × columns × element size); a thread's
    registers may hold replicated elements (an m16n16k16 `.f16` A fragment is
    8 registers of 2 halves = 32 bytes), so BYTES is tile / 32: summed over the
    warp it is the tile, which is what memory sees.
    """
    mods = insn.opcode.modifiers
    shape = _matrix_shape(mods)
    fragment = next((m for m in mods[1:2] if m in _WMMA_FRAGMENT_DIMS), None)
    element = next((_ELEMENT_BITS[m] for m in reversed(mods) if m in _ELEMENT_BITS), None)
    if shape is None or fragment is None or element is None:
        return None
    rows, columns = (shape[i] for i in _WMMA_FRAGMENT_DIMS[fragment])
    return rows * columns * element // 8 // WARP_SIZE


def _wgmma_bytes(insn: ir.Instruction) -> int | None:
    """wgmma.mma_async: shared-memory operands read by a warpgroup (128 threads), per thread.

    B always comes from shared memory (a descriptor); A does when its operand is
    a 64-bit descriptor rather than a register vector.
    """
    shape = _matrix_shape(insn.opcode.modifiers)
    types = insn.opcode.types
    if shape is None or len(types) < 3:
        return None
    m, n, k = shape
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
    bytes: rule giving the bytes one thread moves: an int, a RuntimeBytes, or None.
    no_bytes: why `bytes` is None for an instruction that does move memory.
    space: the state space of an address written without one (mbarrier objects are always shared).
    control: 'branch', 'call', 'return', 'exit', 'trap', 'barrier' or None.
    """

    defs: tuple[int, ...] = (0,)
    addresses: tuple[tuple[int, str], ...] = ()
    bytes: Callable[[ir.Instruction], int | RuntimeBytes | None] | None = None
    no_bytes: str | None = None
    space: str | None = None
    control: str | None = None
    also_reads_defs: bool = False  # accumulators (wgmma, mma with d==c) are read too
    tensor_core: bool = False  # a warp-wide matrix multiply-accumulate on the tensor cores (what tensorop counts)
    async_copy: bool = False  # a copy the thread starts and does not wait for (cp.async, the bulk and tensor copies)


_TMA_BYTES = "the box size of a tensor copy is in its tensor map, not in the instruction"

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
    ("cp", "async"): OpSemantics(defs=(), addresses=((1, "load"), (0, "store")), bytes=_cp_async_bytes, async_copy=True),
    ("cp", "async", "commit_group"): OpSemantics(defs=()),
    ("cp", "async", "wait_group"): OpSemantics(defs=()),
    ("cp", "async", "wait_all"): OpSemantics(defs=()),
    ("cp", "async", "mbarrier"): OpSemantics(defs=(), addresses=((0, "atomic"),), space="shared"),
    ("cp", "async", "bulk"): OpSemantics(defs=(), addresses=((1, "load"), (0, "store")), bytes=_bulk_bytes, async_copy=True),
    ("cp", "async", "bulk", "tensor"): OpSemantics(defs=(), addresses=((0, "store"), (1, "load")), no_bytes=_TMA_BYTES, async_copy=True),
    ("cp", "async", "bulk", "commit_group"): OpSemantics(defs=()),
    ("cp", "async", "bulk", "wait_group"): OpSemantics(defs=()),
    ("cp", "async", "bulk", "prefetch"): OpSemantics(defs=(), addresses=((0, "prefetch"),), bytes=_bulk_prefetch_bytes),
    ("cp", "async", "bulk", "prefetch", "tensor"): OpSemantics(defs=(), addresses=((0, "prefetch"),), no_bytes=_TMA_BYTES),
    ("cp", "reduce", "async", "bulk"): OpSemantics(defs=(), addresses=((0, "atomic"), (1, "load")), bytes=_bulk_bytes, async_copy=True),
    ("cp", "reduce", "async", "bulk", "tensor"): OpSemantics(defs=(), addresses=((0, "atomic"), (1, "load")), no_bytes=_TMA_BYTES, async_copy=True),
    ("ldmatrix",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_matrix_bytes),
    ("stmatrix",): OpSemantics(defs=(), addresses=((0, "store"),), bytes=_matrix_bytes),
    ("wmma", "load"): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_wmma_bytes),
    ("wmma", "store"): OpSemantics(defs=(), addresses=((0, "store"),), bytes=_wmma_bytes),
    ("wmma", "mma"): OpSemantics(defs=(0,), tensor_core=True),
    ("wgmma", "mma_async"): OpSemantics(defs=(0,), bytes=_wgmma_bytes, also_reads_defs=True, tensor_core=True),
    ("wgmma", "fence"): OpSemantics(defs=(), control="barrier"),
    ("wgmma", "commit_group"): OpSemantics(defs=(), control="barrier"),
    ("wgmma", "wait_group"): OpSemantics(defs=(), control="barrier"),
    ("mma",): OpSemantics(defs=(0,), tensor_core=True),
    ("tex",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_by_vector),
    ("tld4",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_by_vector),
    ("suld",): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_by_vector),
    ("sust",): OpSemantics(defs=(), addresses=((0, "store"),), bytes=_by_vector),
    ("sured",): OpSemantics(defs=(), addresses=((0, "atomic"),), bytes=_by_vector),
    ("mbarrier", "init"): OpSemantics(defs=(), addresses=((0, "store"),), space="shared"),
    ("mbarrier", "inval"): OpSemantics(defs=(), addresses=((0, "store"),), space="shared"),
    ("mbarrier", "expect_tx"): OpSemantics(defs=(), addresses=((0, "atomic"),), space="shared"),
    ("mbarrier", "complete_tx"): OpSemantics(defs=(), addresses=((0, "atomic"),), space="shared"),
    ("mbarrier", "arrive"): OpSemantics(defs=(0,), addresses=((1, "atomic"),), space="shared"),
    ("mbarrier", "arrive_drop"): OpSemantics(defs=(0,), addresses=((1, "atomic"),), space="shared"),
    ("mbarrier", "test_wait"): OpSemantics(defs=(0,), addresses=((1, "load"),), space="shared"),
    ("mbarrier", "try_wait"): OpSemantics(defs=(0,), addresses=((1, "load"),), space="shared"),
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
    # Writes a counting variant must see as writes (multicast memory, tensor maps in memory).
    ("multimem", "st"): OpSemantics(defs=(), addresses=((0, "store"),), bytes=_by_vector),
    ("multimem", "red"): OpSemantics(defs=(), addresses=((0, "atomic"),), bytes=_by_vector),
    ("multimem", "ld_reduce"): OpSemantics(defs=(0,), addresses=((1, "load"),), bytes=_by_vector),
    ("tensormap", "replace"): OpSemantics(defs=(), addresses=((0, "store"),), no_bytes="a tensor map field is replaced in place"),
    ("tensormap", "cp_fenceproxy"): OpSemantics(defs=(), addresses=((0, "store"), (1, "load")), bytes=_bulk_bytes),
    ("applypriority",): OpSemantics(defs=(), addresses=((0, "prefetch"),)),
}
DEFAULT = OpSemantics(defs=(0,))
# The position of every tensor-core instruction class, for tools that count them (neutrino/tools/tensorop/probe.py).
TENSOR_CORE_POSITION = ":".join(".".join(key) for key, row in TABLE.items() if row.tensor_core)


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
    bytes: int | RuntimeBytes | None
    control: str | None

    @property
    def primary_memory(self) -> MemoryAccess | None:
        """The access a probe's ADDR names: the first one outside shared memory, else the first."""
        for m in self.memory:
            if m.space != "shared":
                return m
        return self.memory[0] if self.memory else None


def _space_of(opcode: ir.Opcode, index: int, row: OpSemantics) -> str | None:
    """State space of address operand `index`: for two-address copies the modifiers name dst then src."""
    spaces = [m.split("::")[0] for m in opcode.modifiers if m.split("::")[0] in ir.STATE_SPACES]
    if len(row.addresses) == 2 and len(spaces) >= 2:
        return spaces[0] if index == 0 else spaces[1]
    return spaces[0] if spaces else row.space


def access_spaces(opcode: ir.Opcode) -> tuple[tuple[int, str, str | None], ...]:
    """(address operand index, access, state space) of each memory access: the opcode alone decides them."""
    return _access_spaces_text(opcode.text)


@functools.lru_cache(maxsize=4096)  # a pure function of the opcode text
def _access_spaces_text(text: str) -> tuple[tuple[int, str, str | None], ...]:
    opcode = ir.opcode(text)
    row = lookup(opcode)
    return tuple((i, access, _space_of(opcode, i, row)) for i, access in row.addresses)


def defined_registers(insn: ir.Instruction) -> list[ir.Register]:
    """The registers `insn` writes: `effects(insn).defs`, without the rest."""
    ops = insn.operands
    return [
        reg
        for i in lookup(insn.opcode).defs
        if i < len(ops) and not isinstance(ops[i], ir.Address)
        for reg in ir.registers_in(ops[i])
    ]


def access_bytes(insn: ir.Instruction) -> int | RuntimeBytes | None:
    """`effects(insn).bytes` alone: most rules read only the opcode, so no operand is parsed."""
    rule = lookup(insn.opcode).bytes
    return rule(insn) if rule is not None else None


def missing_bytes_reason(insn: ir.Instruction) -> str:
    """Why `access_bytes(insn)` is None: the table's reason for the opcode, else that it moves no memory it knows."""
    return lookup(insn.opcode).no_bytes or "the semantics table gives no byte count for it"


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
    memory = tuple(MemoryAccess(ops[i], access, space) for i, access, space in access_spaces(insn.opcode) if i < len(ops))
    nbytes = row.bytes(insn) if row.bytes is not None else None
    return Effects(tuple(defs), tuple(uses), memory, nbytes, row.control)


# -- which opcodes and modifiers exist: what a probe's `position` may name (spec/probe-toml.md, "position")

# Every PTX instruction name (PTX ISA 9.0). The table above describes those that touch memory or
# control; the rest act on registers only (its DEFAULT row) but are just as much instructions.
OPCODES = frozenset("""
abs activemask add addc alloca and applypriority atom bar barrier bfe bfi bfind bmsk bra brev brkpt brx
call clusterlaunchcontrol clz cnot copysign cos cp createpolicy cvt cvta discard div dp2a dp4a elect ex2
exit fence fma fns getctarank griddepcontrol isspacep istypeof ld ldmatrix ldu lg2 lop3 mad mad24 madc
mapa match max mbarrier membar min mma mov movmatrix mul mul24 multimem nanosleep neg not or pmevent popc
prefetch prefetchu prmt rcp red redux rem ret rsqrt sad selp set setmaxnreg setp shf shfl shl shr sin slct
sqrt st stackrestore stacksave stmatrix sub subc suld suq sured sust szext tanh tcgen05 tensormap testp tex
tld4 trap txq vabsdiff vabsdiff2 vabsdiff4 vadd vadd2 vadd4 vavrg2 vavrg4 vmad vmax vmax2 vmax4 vmin vmin2
vmin4 vote vset vset2 vset4 vshl vshr vsub vsub2 vsub4 wgmma wmma xor
""".split())

# The modifiers that are plain words. Modifiers with a digit (types, shapes: u32, v4, m16n8k16, 2d)
# or a `::` (shared::cta, L2::cache_hint) are taken as written: they are too many to list.
MODIFIER_WORDS = frozenset(ir.STATE_SPACES) | frozenset("""
a abs acq_rel acquire add aligned all alloc and any approx arrive arrive_drop async b ballot bfly box_dim
bulk bulk_group c ca cas cc cg clamp col commit commit_group complete_tx cs cta cluster cv d dealloc dec
down element_stride elemtype eq equ exch expect_tx fence fractional ftz full gather ge geu global_address
global_dim global_stride gpu gt gtu hi hs idx im2col inc init inval kind l launch_dependents ld ld_reduce
le leu lo load ls lt ltu lu max mbarrier min mma mma_async mmio multicast nan nc ne neu noftz noinc not num
or parity pending_count pred prefetch proxy r rank read red reduce relaxed release relinquish_alloc_permit
relu replace rm rmi rn rna rni rp rpi rs row rz rzi sat satfinite sc scatter shiftamt sp st store sum
swizzle_mode sync sys tensor tensormap test_wait tile to trans try_wait uni up volatile wait wait_all
wait_group warp wb weak wide wrap wt xor xorsign alias cp_fenceproxy mbarrier_init pack unpack shift ws
collector fill use lastuse discard base dim cp evict_first evict_last evict_normal evict_unchanged no_allocate
try_cancel query_cancel is_canceled get_first_ctaid bulk_wait_read sem cond ordered sreg_mask uniform
f16 bf16 tf32 e4m3 e5m2 cta_group ignore
""".split()) | frozenset(component for key in TABLE for component in key[1:])


def unknown_position_part(components: tuple[str, ...]) -> str | None:
    """The first component of a position prefix (`ld.globl` → `globl`) that names no PTX opcode or modifier."""
    if components[0] not in OPCODES:
        return components[0]
    for modifier in components[1:]:
        if modifier not in MODIFIER_WORDS and "::" not in modifier and not any(c.isdigit() for c in modifier):
            return modifier
    return None


def closest_positions(components: tuple[str, ...], unknown: str, n: int = 3) -> list[str]:
    """The spellings of a position closest to the mistyped one: `unknown` replaced by its nearest known words."""
    import difflib

    words = OPCODES if unknown == components[0] else MODIFIER_WORDS
    index = components.index(unknown)
    return [".".join(components[:index] + (word,) + components[index + 1:])
            for word in difflib.get_close_matches(unknown, sorted(words), n=n, cutoff=0.6)]


# -- selectors: positions by class and property (spec/probe-toml.md, "Selectors")

# `#CLASS[.SPACE]`: every instruction the table gives an access of that kind in that state space
# (`generic`: an address written without one). `memory`: the loads, stores and atomics of instructions
# that are not async copies; `async_copy`: the copies a thread starts and does not wait for (cp.async,
# cp.async.bulk, cp.reduce.async.bulk and their tensor forms), by the spaces they read or write;
# `load`, `store`, `atomic`, `prefetch`: that access, by any instruction.
ACCESS_SELECTORS = {"memory": ("load", "store", "atomic"), "async_copy": ("load", "store", "atomic"),
                    "load": ("load",), "store": ("store",), "atomic": ("atomic",), "prefetch": ("prefetch",)}
# `#CLASS`: every instruction of that control class, or the tensor cores' matrix multiply-accumulates.
CONTROL_SELECTORS = ("barrier", "branch", "call", "return", "exit", "trap")
SELECTOR_SPACES = tuple(dict.fromkeys(ir.STATE_SPACES + ("generic",)))
SELECTORS = tuple(ACCESS_SELECTORS) + CONTROL_SELECTORS + ("tensor_core",)


def is_selector(components: tuple[str, ...]) -> bool:
    return components[0].startswith("#")


def selector_problem(components: tuple[str, ...]) -> tuple[str, list[str]] | None:
    """Why `#class.property` selects nothing the table knows, with the closest spellings; None if it is one."""
    import difflib

    name = components[0][1:]
    if name not in SELECTORS:
        close = difflib.get_close_matches(name, SELECTORS, n=3, cutoff=0.5)
        return f"no selector {components[0]!r}", ["#" + c + "".join("." + p for p in components[1:]) for c in close]
    properties = components[1:]
    if name not in ACCESS_SELECTORS and properties:
        return f"selector #{name} takes no property ({'.'.join(properties)!r})", ["#" + name]
    if len(properties) > 1:
        return f"selector #{name} takes one state space, not {len(properties)}", [f"#{name}.{properties[0]}"]
    if properties and properties[0] not in SELECTOR_SPACES:
        close = difflib.get_close_matches(properties[0], SELECTOR_SPACES, n=3, cutoff=0.5)
        return f"no state space {properties[0]!r} (#{name}.SPACE: {', '.join(SELECTOR_SPACES)})", \
            [f"#{name}.{c}" for c in close]
    return None


def _selects(components: tuple[str, ...], opcode: ir.Opcode) -> bool:
    name = components[0][1:]
    if name == "tensor_core":
        return lookup(opcode).tensor_core
    if name in CONTROL_SELECTORS:
        return lookup(opcode).control == name
    row = lookup(opcode)
    if name in ("memory", "async_copy") and row.async_copy != (name == "async_copy"):
        return False
    kinds, space = ACCESS_SELECTORS[name], components[1] if len(components) > 1 else None
    return any(access in kinds and (space is None or (found or "generic") == space)
               for _, access, found in access_spaces(opcode))


class PositionAnswers(dict):
    """Opcode text → whether a position names it: an opcode prefix (`ld.global`) or a selector
    (`#memory.global`). Filled on first ask: the answer depends on the text alone, kernels repeat
    few spellings, and a dict lookup per instruction is what matching every kernel costs."""

    def __init__(self, position: tuple[tuple[str, ...], ...]) -> None:
        super().__init__()
        self.prefixes = {p for p in position if not is_selector(p)}
        self.selectors = [p for p in position if is_selector(p)]
        self.lengths = sorted({len(p) for p in self.prefixes})  # a set lookup per prefix length, not per prefix

    def __missing__(self, text: str) -> bool:
        opcode = ir.opcode(text)
        components = opcode.components
        named = self[text] = any(components[:n] in self.prefixes for n in self.lengths) or \
            any(_selects(s, opcode) for s in self.selectors)
        return named


@functools.lru_cache(maxsize=256)  # a pure function of the position: one table of answers per position
def position_matcher(position: tuple[tuple[str, ...], ...]) -> PositionAnswers:
    """Which opcode texts `position` names (`position_matcher(p)[opcode.text]`), kept across kernels."""
    return PositionAnswers(position)


def position_problem(components: tuple[str, ...]) -> tuple[str, list[str]] | None:
    """Why one part of a position names nothing of PTX (`ld.globl`, `#memroy`), with the closest
    spellings for a "did you mean"; None when it names an opcode prefix or a selector."""
    if is_selector(components):
        return selector_problem(components)
    unknown = unknown_position_part(components)
    if unknown is None:
        return None
    what = "instruction" if unknown == components[0] else "modifier"
    return f"no PTX {what} {unknown!r}", closest_positions(components, unknown)
