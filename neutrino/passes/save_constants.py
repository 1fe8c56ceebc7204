"""SAVE operands whose value is known when the kernel is instrumented, and the hist bucket of such a value.

A probe often records a per-site constant: `lines_blocks.record(nl.block)` resolves
to `cvt.u64.u32 %d, 7; SAVE [lines_blocks] {%d}` at the site of basic block 7, and
BYTES of a `ld.global.u32` is the immediate 4. The SAVE lowering
(passes/lower_save.py) then needs neither the bucket arithmetic nor the grouping of
a warp's lanes by bucket (`match.any.sync`): every lane that saves falls in the one
bucket this module computes (spec/pipeline.md, "SAVE lowering", constant values).

A register counts as constant at a SAVE only when the nearest write to it before the
SAVE is a `mov` or zero-extending `cvt` of an integer immediate in the same site's
straight-line code (no label, no scope boundary, no instruction of the kernel or of
another site, and nothing that names the register as a destination in between), and
that write is unguarded or has the SAVE's own guard (a site at a predicated instruction
predicates its code: where the guard is false the SAVE saves nothing), whose predicate
nothing in between writes. Anything else is left to the run-time code, as before.
"""

from __future__ import annotations

import functools
import re

from neutrino.isa.ptx import ir
from neutrino.maps import Buckets

_MOV = re.compile(r"mov\.[bus](16|32|64)")
_CVT = re.compile(r"cvt\.u(16|32|64)\.u(16|32|64)")
_INT_BITS = {"b16": 16, "u16": 16, "s16": 16, "b32": 32, "u32": 32, "s32": 32, "b64": 64, "u64": 64, "s64": 64}


def _mask(bits: int) -> int:
    return (1 << bits) - 1


def constant_bucket(buckets: Buckets, value: int) -> int:
    """The bucket the run-time code (lower_save.hist_store) computes for a u64 `value`, step by step.

    log2: 64 - clz.b64. linear: `scaled = value - MIN` (u64, wrapping), `>> log2(STEP)` or
    `/ STEP`, truncated to u32, plus 1; then 0 below MIN and the last bucket from MAX on.
    Written as that arithmetic, not as Buckets.index, so that tests comparing the two check
    the lowering's rule (tests/test_uniform_saves.py).
    """
    value &= _mask(64)
    if buckets.kind == "log2":
        return 64 - (64 - value.bit_length())  # clz.b64 counts the zero bits above the highest one
    scaled = (value - buckets.min) & _mask(64)
    step = buckets.step
    scaled = scaled >> (step.bit_length() - 1) if step & (step - 1) == 0 else scaled // step
    bucket = ((scaled & _mask(32)) + 1) & _mask(32)
    if buckets.min and value < buckets.min:
        bucket = 0
    if value >= buckets.max:
        bucket = buckets.count - 1
    return bucket


def _registers(operand) -> list[str]:
    """Register names an operand names (vectors, pairs and addresses included)."""
    if isinstance(operand, ir.Register):
        return [operand.name]
    if isinstance(operand, (ir.Vector, ir.ParenList)):
        return [name for item in operand.items for name in _registers(item)]
    if isinstance(operand, ir.Pair):
        return _registers(operand.first) + _registers(operand.second)
    if isinstance(operand, ir.Negated):
        return _registers(operand.operand)
    if isinstance(operand, ir.Address):
        return _registers(operand.base)
    if isinstance(operand, ir.VectorElement):
        return [operand.register.name]
    return []


def _defined_constant(insn: ir.Instruction, types: dict[str, str]) -> tuple[str, int] | None:
    """(register, its value) when `insn` is a mov / zero-extending cvt of an integer immediate (guard aside)."""
    widths = _immediate_widths(insn.opcode.text)  # first: most probe instructions are neither mov nor cvt
    if widths is None:
        return None
    operands = insn.operands
    if len(operands) != 2:
        return None
    dst, src = operands
    if not isinstance(dst, ir.Register) or not isinstance(src, ir.Immediate):
        return None
    value = _literal_value(src.text)
    if value is None:
        return None
    width, source_bits = widths
    value = value & _mask(source_bits) & _mask(width)
    declared = types.get(dst.name)
    if declared is not None and _INT_BITS.get(declared) != width:
        return None  # a predicate, a float or a register of another width: not folded
    return dst.name, value


@functools.lru_cache(maxsize=4096)
def _literal_value(text: str) -> int | None:
    """An immediate's integer value (ir.Immediate.value) by its spelling: probes repeat a few literals at every site."""
    return ir.Immediate(text).value


@functools.lru_cache(maxsize=None)
def _immediate_widths(opcode: str) -> tuple[int, int] | None:
    """(destination bits, source bits) of a mov / zero-extending cvt opcode; None for any other opcode.
    Cached: a kernel has few distinct opcode spellings and this runs once per probe instruction."""
    mov, cvt = _MOV.fullmatch(opcode), _CVT.fullmatch(opcode)
    if mov:
        return int(mov.group(1)), int(mov.group(1))
    if cvt:
        return int(cvt.group(1)), int(cvt.group(2))
    return None


def constant_save_values(body: list[ir.Statement], types: dict[str, str],
                         saves_at: list[tuple[int, ir.Instruction]] | None = None) -> dict[int, tuple[int | None, ...]]:
    """id(SAVE) → the value of each of its operands (u64 bits), None where not known; SAVEs with none known are left out.

    `saves_at`, when the caller has them: (index in `body`, SAVE) of every probe SAVE of a body
    without nested scopes, in body order; then only the probe code before each SAVE is read
    (`_scan_before_saves`). Else one pass over the body. Linear in its size.
    """
    out: dict[int, tuple[int | None, ...]] = {}
    if saves_at is not None:
        _scan_before_saves(body, saves_at, types, out)
    else:
        _scan_container(body, types, out)
    return out


def _scan_before_saves(body: list[ir.Statement], saves_at: list[tuple[int, ir.Instruction]], types: dict[str, str],
                       out: dict) -> None:
    """constant_save_values of a body without nested scopes, reading only the stretch that ends at each SAVE.

    The same rule as _scan_container: a SAVE's stretch (the instructions of its origin just before
    it) is looked through backwards to its start, or to the previous SAVE of the same stretch, whose
    table carries on. Each statement of a stretch is looked at most twice; the kernel's own never.
    """
    known: dict[str, tuple[int, ir.Guard | None]] = {}
    previous, previous_origin = -1, None  # index and origin of the last SAVE read
    for index, save in saves_at:
        origin = save.origin
        start = index
        while start - 1 > previous and type(body[start - 1]) is ir.Instruction and body[start - 1].origin == origin:
            start -= 1
        if start != previous + 1 or previous_origin != origin:
            known.clear()  # a new stretch
        for stmt in body[start:index]:
            _read_probe_instruction(stmt, known, types)
        values = tuple(_operand_value(item, known, save.guard) for item in save.operands[-1].items)
        if any(v is not None for v in values):
            out[id(save)] = values
        previous, previous_origin = index, origin


def _scan_container(body: list[ir.Statement], types: dict[str, str], out: dict) -> None:
    """constant_save_values over one container, nested scopes recursively.

    A straight-line stretch is a run of consecutive instructions of this container with one
    probe origin; anything else (a label, a scope, the kernel's own instruction) ends it.
    A plain loop rather than ir.walk: this runs over every statement of every kernel.
    """
    known: dict[str, tuple[int, ir.Guard | None]] = {}  # register → (value, the guard of its write)
    stretch: str | None = None  # the origin of the stretch `known` is about
    for stmt in body:
        origin = stmt.origin if type(stmt) is ir.Instruction else None
        if origin is None or not origin.startswith("probe "):
            if known:
                known.clear()
            stretch = None
            if isinstance(stmt, ir.Scope):
                _scan_container(stmt.body, types, out)
            continue
        if origin != stretch:
            known.clear()
            stretch = origin
        if stmt.opcode.base == "SAVE":
            values = tuple(_operand_value(item, known, stmt.guard) for item in stmt.operands[-1].items)
            if any(v is not None for v in values):
                out[id(stmt)] = values
            continue
        _read_probe_instruction(stmt, known, types)


def _read_probe_instruction(stmt: ir.Instruction, known: dict, types: dict[str, str]) -> None:
    """`known` after `stmt` (a probe instruction, not a SAVE): what it writes is forgotten, a constant it sets noted."""
    if known and stmt.operands:
        first = stmt.operands[0]
        written = (first.name,) if type(first) is ir.Register else set(_registers(first))
        for name in [n for n, (_, guard) in known.items() if n in written or (guard and guard.register.name in written)]:
            del known[name]
    defined = _defined_constant(stmt, types)
    if defined is not None:
        known[defined[0]] = (defined[1], stmt.guard)


def _operand_value(operand, known: dict, guard: ir.Guard | None) -> int | None:
    if isinstance(operand, ir.Immediate):
        value = _literal_value(operand.text)
        return None if value is None else value & _mask(64)
    if isinstance(operand, ir.Register) and operand.name in known:
        value, written_under = known[operand.name]
        return value if written_under is None or written_under == guard else None
    return None
