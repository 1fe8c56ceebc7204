"""Neutrino IR: the target-independent form of a compiled DSL file.

An eBPF-like, flat list of three-address instructions per probe, with
predication instead of branches (see ``spec/ir.md``)::

    clock %_d0
    sub.u64 %elapsed, %_d0, %start
    setp.eq.u64 %_p0, %n, 0
    @%_p0 save block_sched, %start, %_r0, %_r1

Values (types, registers, immediates, fields) are frozen and compared by value;
instructions are mutable and compared by identity. Backends (``backend.py``)
turn a probe's instruction list into target assembly.
"""

from __future__ import annotations

from typing import Optional, Union

import attrs

from neutrino.errors import Location

U32 = "u32"
U64 = "u64"
PRED = "pred"
VALUE_TYPES = (U32, U64)
BITS = {U32: 32, U64: 64}

LEVELS = ("thread", "warp", "block")

#: fields a matched instruction offers (spec/probe-toml.md "Helpers"), with the IR type they are read as
FIELDS = ("ADDR", "BYTES", "OUT", "IN1", "IN2", "IN3", "LINE", "BLOCK")

BINARY_OPS = ("add", "sub", "mul", "div", "rem", "and", "or", "xor", "shl", "shr")
UNARY_OPS = ("neg", "not", "mov")
SPECIAL_OPS = {"clock": U64, "time": U64, "cuid": U32, "laneid": U32}  # op -> result type
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")  # unsigned
PRED_OPS = ("pand", "por", "pnot")
LOOP_OPS = ("loop", "endloop")


def _check_type(_inst, attribute, value):
    if value not in (U32, U64, PRED):
        raise ValueError(f"{attribute.name}: bad IR type {value!r}")


@attrs.frozen
class Reg:
    """A virtual register. `name` is already safe for every backend: user
    variables keep their Python name (see frontend.mangle), temporaries are
    `_d<N>` (u64), `_r<N>` (u32), `_p<N>` (pred)."""

    name: str
    type: str = attrs.field(validator=_check_type)
    temp: bool = False

    def __str__(self) -> str:
        return f"%{self.name}"


@attrs.frozen
class Imm:
    """An integer immediate, already reduced to its type's width."""

    value: int
    type: str = attrs.field(validator=_check_type)

    def __attrs_post_init__(self):
        if not 0 <= self.value < (1 << BITS[self.type]):
            raise ValueError(f"immediate {self.value} out of range for {self.type}")

    def __str__(self) -> str:
        return str(self.value)


@attrs.frozen
class Field:
    """A value of the matched instruction (ADDR, BYTES, OUT, IN1..IN3)."""

    name: str = attrs.field(validator=attrs.validators.in_(FIELDS))
    type: str = attrs.field(validator=_check_type)

    def __str__(self) -> str:
        return self.name


Operand = Union[Reg, Imm, Field]


@attrs.frozen
class Guard:
    reg: Reg
    negated: bool = False

    def __str__(self) -> str:
        return f"@{'!' if self.negated else ''}{self.reg}"


@attrs.define(eq=False)
class Instr:
    """One IR instruction.

    op: ``mov add sub mul div rem and or xor shl shr neg not`` (typed by
    `type`), ``cvt`` (`type` is the destination type, `src_type` the source),
    ``clock time cuid laneid`` (no sources), ``setp`` (`cmp` one of COMPARISONS,
    `type` the compared type, dst a pred), ``selp`` (srcs a, b, pred),
    ``pand por pnot`` (predicates), ``save`` (`map` named, srcs one per field),
    ``loop`` (dst the u32 trip counter, srcs (trips,)) and ``endloop`` (dst
    the same counter, srcs (a pred for the backward branch,)) around a bounded
    loop's body (neutrino/language/loops.py).
    """

    op: str
    type: Optional[str] = None
    dst: Optional[Reg] = None
    srcs: tuple = ()
    guard: Optional[Guard] = None
    cmp: Optional[str] = None
    src_type: Optional[str] = None
    map: Optional[str] = None
    loc: Optional[Location] = None

    def regs(self):
        """Every register the instruction names (guard, destination, sources)."""
        if self.guard is not None:
            yield self.guard.reg
        if self.dst is not None:
            yield self.dst
        for s in self.srcs:
            if isinstance(s, Reg):
                yield s

    def __str__(self) -> str:
        guard = f"{self.guard} " if self.guard else ""
        if self.op == "save":
            return f"{guard}save {self.map}" + "".join(f", {s}" for s in self.srcs)
        if self.op in SPECIAL_OPS:
            return f"{guard}{self.op} {self.dst}"
        if self.op == "cvt":
            name = f"cvt.{self.type}.{self.src_type}"
        elif self.op == "setp":
            name = f"setp.{self.cmp}.{self.type}"
        elif self.op in PRED_OPS:
            name = self.op
        else:
            name = f"{self.op}.{self.type}"
        return f"{guard}{name} " + ", ".join(str(x) for x in (self.dst, *self.srcs))


@attrs.define(eq=False)
class MapIR:
    name: str
    level: str
    cap: Union[int, str]  # int >= 1 or "count"; 1 for sum and hist maps
    fields: list  # [(name, type)]; a hist map's one field is the recorded value
    loc: Optional[Location] = None
    type: str = "array"  # array / sum / hist (spec/probe-toml.md)
    buckets: Optional[str] = None  # hist maps: "log2" or "linear:MIN:MAX:STEP"
    stage: Optional[str] = None  # sum and hist maps: "block" (spec/probe-toml.md, "Aggregation maps")

    @property
    def record_bytes(self) -> int:
        return record_bytes(self.fields)


def record_bytes(fields) -> int:
    """Layout rule of spec/probe-toml.md: each field aligned to its own size,
    the end rounded up to 8 when any field is u64, else to 4."""
    end = 0
    for _, ty in fields:
        size = BITS[ty] // 8
        end = (end + size - 1) // size * size + size
    align = 8 if any(ty == U64 for _, ty in fields) else 4
    return (end + align - 1) // align * align


@attrs.define(eq=False)
class ProbeIR:
    name: str
    position: str  # "kernel" or "ld.global:st.global"
    level: str
    when: str  # "before" | "after"
    body: list  # [Instr]
    loc: Optional[Location] = None


@attrs.define(eq=False)
class ModuleIR:
    maps: list  # [MapIR]
    probes: list  # [ProbeIR], the register-initialising probe first when there is one
    registers: dict  # name -> Reg, the module-level registers
    description: Optional[str] = None
    analyze_hook: Optional[str] = None
    filename: str = "<input>"

    def map(self, name: str) -> Optional[MapIR]:
        return next((m for m in self.maps if m.name == name), None)

    def __str__(self) -> str:
        out = []
        for m in self.maps:
            fields = ", ".join(f"{n}:{t}" for n, t in m.fields)
            kind = "" if m.type == "array" else f" type={m.type}" + (f" buckets={m.buckets}" if m.buckets else "")
            out.append(f"map {m.name} level={m.level} cap={m.cap}{kind} {{{fields}}}")
        for p in self.probes:
            out.append(f"probe {p.name} {p.when} {p.position} level={p.level}:")
            out.extend(f"    {i}" for i in p.body)
        return "\n".join(out) + "\n"


class IRVerifyError(Exception):
    """The frontend produced inconsistent IR (a compiler bug, not a user error)."""


def _optype(op) -> str:
    return op.type


def verify(module: ModuleIR) -> None:
    """Check the typing rules of spec/ir.md; raises IRVerifyError."""
    maps = {m.name: m for m in module.maps}
    for probe in module.probes:
        open_loops = []
        for ins in probe.body:
            _verify_instr(ins, maps, probe)
            if ins.op == "loop":
                open_loops.append(ins.dst)
            elif ins.op == "endloop" and (not open_loops or open_loops.pop() != ins.dst):
                raise IRVerifyError(f"[probe {probe.name}] {ins}: endloop without its loop")
        if open_loops:
            raise IRVerifyError(f"[probe {probe.name}] loop {open_loops[-1]} is not closed")


def _verify_instr(ins: Instr, maps, probe: ProbeIR) -> None:
    def fail(msg):
        raise IRVerifyError(f"[probe {probe.name}] {ins}: {msg}")

    if ins.guard is not None and ins.guard.reg.type != PRED:
        fail("guard is not a predicate")
    op = ins.op
    if op == "save":
        m = maps.get(ins.map)
        if m is None:
            fail("unknown map")
        if m.level != probe.level:
            fail("level mismatch")
        if len(ins.srcs) != len(m.fields):
            fail("operand count")
        for s, (_, ty) in zip(ins.srcs, m.fields):
            if _optype(s) != ty:
                fail(f"operand {s} is not {ty}")
        return
    if ins.dst is None:
        fail("no destination")
    if op in LOOP_OPS:
        if ins.guard is not None or ins.dst.type != U32 or len(ins.srcs) != 1:
            fail("bad loop marker")
        if op == "loop" and not (isinstance(ins.srcs[0], Imm) and ins.srcs[0].value > 0):
            fail("a loop's trip count is a positive constant")
        if op == "endloop" and _optype(ins.srcs[0]) != PRED:
            fail("endloop takes a predicate")
        return
    if op in SPECIAL_OPS:
        if ins.srcs or ins.dst.type != SPECIAL_OPS[op]:
            fail("bad special read")
        return
    if op in PRED_OPS:
        n = 1 if op == "pnot" else 2
        if len(ins.srcs) != n or any(_optype(s) != PRED for s in (ins.dst, *ins.srcs)):
            fail("bad predicate operation")
        return
    if op == "setp":
        if ins.cmp not in COMPARISONS or ins.dst.type != PRED or len(ins.srcs) != 2:
            fail("bad setp")
        if any(_optype(s) != ins.type for s in ins.srcs):
            fail("setp operand types")
        return
    if op == "cvt":
        if len(ins.srcs) != 1 or ins.dst.type != ins.type or _optype(ins.srcs[0]) != ins.src_type:
            fail("bad cvt")
        return
    if op == "selp":
        a, b, p = ins.srcs
        if _optype(p) != PRED or _optype(a) != ins.type or _optype(b) != ins.type or ins.dst.type != ins.type:
            fail("bad selp")
        return
    if ins.type not in VALUE_TYPES or ins.dst.type != ins.type:
        fail("destination type")
    if op in UNARY_OPS:
        if len(ins.srcs) != 1 or _optype(ins.srcs[0]) != ins.type:
            fail("bad unary operation")
        return
    if op not in BINARY_OPS or len(ins.srcs) != 2:
        fail("unknown operation")
    if _optype(ins.srcs[0]) != ins.type:
        fail("first operand type")
    want = U32 if op in ("shl", "shr") else ins.type
    if _optype(ins.srcs[1]) != want:
        fail("second operand type")
