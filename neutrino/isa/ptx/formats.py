"""Instruction formats: the shape of every instruction a probe may write.

The semantics table (semantics.py) says what an instruction *does*; this table
says what a *well-formed* one looks like, as ptxas checks it: operand count and
kinds, instruction types, required and allowed modifiers, immediate ranges,
special registers (with their vector components and widths) and the PTX
version / target each form needs. The verifier admits a probe instruction only
if it fits a row here, so every admitted probe assembles; the rows were checked
against ptxas 13.0, and the property tests and the list of known-bad
instructions in tests/test_verifier.py keep them honest.

Extending the vocabulary means adding rows to `FORMATS`, nothing else. A rule
that depends on context outside one instruction (for instance "atomics only
into map memory the engine emits") belongs in the verifier, keyed by the
row's `memory` field: rows with `memory` set are the place to hang it.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

import attrs

from neutrino.isa.ptx import ir

# ---------------------------------------------------------------- types

SIGNED = ("s16", "s32", "s64")
UNSIGNED = ("u16", "u32", "u64")
INTEGER = SIGNED + UNSIGNED
BITS = ("b16", "b32", "b64")
FLOAT = ("f32", "f64")
SCALAR = INTEGER + BITS + FLOAT
ROUND = ("rn", "rz", "rm", "rp")
ROUND_INT = ("rni", "rzi", "rmi", "rpi")
INT_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
UNSIGNED_COMPARE = INT_COMPARE + ("lo", "ls", "hi", "hs")
FLOAT_COMPARE = INT_COMPARE + ("equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")


def bits_of(type_name: str) -> int:
    """Width of a type in bits; .pred counts as 1."""
    return 1 if type_name == "pred" else ir.TYPE_BYTES[type_name] * 8


def type_class(type_name: str) -> str:
    """'f', 'b', 'u', 's' or 'pred'."""
    return "pred" if type_name == "pred" else type_name[0]


def register_fits(register_type: str, wanted: str) -> bool:
    """May a register declared `register_type` stand where the format wants `wanted`?

    PTX: the sizes must agree; bit-size types fit anything of their size; signed
    and unsigned integers are interchangeable; floats only fit floats.
    """
    if register_type == "pred" or wanted == "pred":
        return register_type == wanted
    if bits_of(register_type) != bits_of(wanted):
        return False
    have, want = type_class(register_type), type_class(wanted)
    if "b" in (have, want):
        return True
    return (have == "f") == (want == "f")


# ---------------------------------------------------------------- versions


@functools.total_ordering
@attrs.frozen
class Requirement:
    """The lowest PTX ISA version and target architecture a form needs."""

    ptx: tuple[int, int] = (1, 0)
    sm: int = 10

    def __lt__(self, other: "Requirement") -> bool:
        return (self.ptx, self.sm) < (other.ptx, other.sm)

    def join(self, other: "Requirement") -> "Requirement":
        return Requirement(max(self.ptx, other.ptx), max(self.sm, other.sm))

    @property
    def version_text(self) -> str:
        return f"{self.ptx[0]}.{self.ptx[1]}"

    def __str__(self) -> str:
        return f"PTX {self.version_text} and sm_{self.sm}"


ANY = Requirement()
SM20 = Requirement((2, 0), 20)


def parse_version(text: str | None) -> tuple[int, int] | None:
    m = re.fullmatch(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_target(text: str | None) -> int | None:
    """`sm_90a` → 90; None for what is not an sm_/compute_ target."""
    m = re.fullmatch(r"(?:sm|compute)_(\d+)[a-z]?", text or "")
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------- special registers


@attrs.frozen
class SpecialFormat:
    bits: int  # 32 or 64
    components: str = ""  # "xyz" for the vector registers (%tid.x); "" for scalars
    since: Requirement = ANY


SPECIAL = {
    "%tid": SpecialFormat(32, "xyz"),
    "%ntid": SpecialFormat(32, "xyz"),
    "%ctaid": SpecialFormat(32, "xyz"),
    "%nctaid": SpecialFormat(32, "xyz"),
    "%laneid": SpecialFormat(32),
    "%warpid": SpecialFormat(32),
    "%smid": SpecialFormat(32),
    "%gridid": SpecialFormat(64),
    "%clock": SpecialFormat(32),
    "%clock_hi": SpecialFormat(32, since=Requirement((5, 0), 20)),
    "%clock64": SpecialFormat(64, since=SM20),
    "%nsmid": SpecialFormat(32, since=SM20),
    "%nwarpid": SpecialFormat(32, since=SM20),
    "%lanemask_eq": SpecialFormat(32, since=SM20),
    "%lanemask_le": SpecialFormat(32, since=SM20),
    "%lanemask_lt": SpecialFormat(32, since=SM20),
    "%lanemask_ge": SpecialFormat(32, since=SM20),
    "%lanemask_gt": SpecialFormat(32, since=SM20),
    "%globaltimer": SpecialFormat(64, since=Requirement((3, 1), 30)),
    "%globaltimer_lo": SpecialFormat(32, since=Requirement((3, 1), 30)),
    "%globaltimer_hi": SpecialFormat(32, since=Requirement((3, 1), 30)),
    "%dynamic_smem_size": SpecialFormat(32, since=Requirement((4, 1), 20)),
    "%total_smem_size": SpecialFormat(32, since=Requirement((4, 1), 20)),
}


def special_problem(name: str) -> str | None:
    """Why `name` is not a special register probes can read, or None."""
    base, _, component = name.partition(".")
    spec = SPECIAL.get(base)
    if spec is None:
        return f"special register {name} cannot be read by probes"
    if spec.components and not component:
        return f"special register {base} is a vector: name a component ({', '.join(f'{base}.{c}' for c in spec.components)})"
    if component and component not in spec.components:
        return f"special register {base} has no component .{component}"
    return None


def special_bits(name: str) -> int:
    spec = SPECIAL.get(name.split(".")[0])
    return spec.bits if spec else 32


# ---------------------------------------------------------------- formats


@attrs.frozen
class Slot:
    """One operand position.

    kind: 'd' a destination register; 's' a source (register, immediate,
    special register or helper); 'n' a source that may be negated (`!%p`);
    'i' an immediate only.
    type: 't' the instruction type (the last type modifier), 't0'/'t1' the first
    and second types of two-type opcodes (cvt.t0.t1), '2t' twice the width of
    't', or a fixed type name (u32, pred, b32).
    """

    kind: str
    type: str


def slots(text: str) -> tuple[Slot, ...]:
    """'d:t s:t s:u32' → slots."""
    return tuple(Slot(*item.split(":")) for item in text.split())


@attrs.frozen
class Format:
    """One form of an opcode.

    types: the allowed type tuples (one entry per type modifier, in order).
    groups: modifier groups in the order they are written; at most one modifier
    of each group; a group marked required must be present.
    immediates: (slot index, low, high) bounds tighter than the type's range.
    memory: the state space a memory form touches (None: registers only); the
    verifier's memory rules key on it.
    """

    types: frozenset[tuple[str, ...]]
    operands: tuple[Slot, ...]
    groups: tuple[tuple[frozenset[str], bool], ...] = ()
    since: Requirement = ANY
    immediates: tuple[tuple[int, int, int], ...] = ()
    memory: str | None = None

    def modifier_problem(self, modifiers: tuple[str, ...]) -> str | None:
        """Why the non-type modifiers do not fit this form, or None."""
        seen: list[int] = []
        for m in modifiers:
            group = next((i for i, (alternatives, _) in enumerate(self.groups) if m in alternatives), None)
            if group is None:
                return f"unknown modifier .{m}"
            if group in seen:
                return f"two modifiers of one kind (.{m})"
            seen.append(group)
        missing = [alternatives for i, (alternatives, required) in enumerate(self.groups) if required and i not in seen]
        if missing:
            return "needs " + " and ".join("one of " + ", ".join(f".{a}" for a in sorted(alts)) for alts in missing)
        return None


def _types(*sets: Iterable[str]) -> frozenset[tuple[str, ...]]:
    """The product of per-position type sets."""
    out: list[tuple[str, ...]] = [()]
    for s in sets:
        out = [prefix + (t,) for prefix in out for t in s]
    return frozenset(out)


def _group(names: str, required: bool = False) -> tuple[frozenset[str], bool]:
    return frozenset(names.split()), required


def _arith(operands: str, *, saturating: bool = True) -> list[Format]:
    """add/sub: integers (.sat on s32, .cc carries), f32 with rounding/ftz/sat, f64 with rounding."""
    ops = slots(operands)
    forms = [
        Format(_types(INTEGER), ops),
        Format(_types(("u32", "s32", "u64", "s64")), ops, (_group("cc", True),)),
        Format(_types(FLOAT[:1]), ops, (_group(" ".join(ROUND)), _group("ftz"), _group("sat"))),
        Format(_types(FLOAT[1:]), ops, (_group(" ".join(ROUND)),)),
    ]
    if saturating:
        forms.append(Format(_types(["s32"]), ops, (_group("sat", True),)))
    return forms


def _compare_forms(results: tuple[str, ...]) -> list[Format]:
    """setp (results = ()) and set (results = its destination types): the comparison fits the source type."""
    forms = []
    by_class = [(BITS, ("eq", "ne"), ""), (SIGNED, INT_COMPARE, ""), (UNSIGNED, UNSIGNED_COMPARE, ""),
                (("f32",), FLOAT_COMPARE, "ftz"), (("f64",), FLOAT_COMPARE, "")]
    source = "t1" if results else "t"
    destination = "d:t0" if results else "d:pred"
    for types, compares, extra in by_class:
        compare = _group(" ".join(compares), True)
        optional = (_group(extra),) if extra else ()
        typed = _types(results, types) if results else _types(types)
        forms.append(Format(typed, slots(f"{destination} s:{source} s:{source}"), (compare,) + optional))
        forms.append(Format(typed, slots(f"{destination} s:{source} s:{source} n:pred"),
                            (compare, _group("and or xor", True)) + optional))
    return forms


def _holds(dst: str, src: str) -> bool:
    """Does integer type `dst` represent every value of `src`? (cvt.sat is refused when it does.)"""
    if dst[0] == src[0]:
        return bits_of(dst) >= bits_of(src)
    return dst[0] == "s" and bits_of(dst) > bits_of(src)


def _cvt_groups(dst: str, src: str) -> tuple[tuple[frozenset[str], bool], ...]:
    """cvt's modifiers for one type pair: rounding where precision is lost, .ftz only next to an f32."""
    ftz = (_group("ftz"),) if "f32" in (dst, src) else ()
    sat = _group("sat")
    if dst in INTEGER and src in INTEGER:
        return () if _holds(dst, src) else (sat,)
    if dst in INTEGER:
        return (_group(" ".join(ROUND_INT), True),) + ftz + (sat,)
    if src in INTEGER:
        return (_group(" ".join(ROUND), True), sat)
    if (dst, src) == ("f32", "f64"):
        return (_group(" ".join(ROUND), True),) + ftz + (sat,)
    if dst == src:
        return (_group(" ".join(ROUND_INT)),) + ftz + (sat,)
    return ftz + (sat,)  # f64 <- f32: exact


def _cvt_forms() -> list[Format]:
    by_groups: dict[tuple, set[tuple[str, str]]] = {}
    for dst in INTEGER + FLOAT:
        for src in INTEGER + FLOAT:
            by_groups.setdefault(_cvt_groups(dst, src), set()).add((dst, src))
    return [Format(frozenset(pairs), slots("d:t0 s:t1"), groups) for groups, pairs in by_groups.items()]


def _build() -> dict[str, tuple[Format, ...]]:
    three, two = "d:t s:t s:t", "d:t s:t"
    numeric_unary = [
        Format(_types(SIGNED), slots(two)),
        Format(_types(["f32"]), slots(two), (_group("ftz"),)),
        Format(_types(["f64"]), slots(two)),
    ]
    logic = lambda ops, types=("pred",) + BITS: [Format(_types(types), slots(ops))]  # noqa: E731
    table: dict[str, list[Format]] = {
        "mov": [Format(_types(("pred",) + SCALAR), slots("d:t s:t"))],
        "add": _arith(three),
        "sub": _arith(three),
        "mul": [
            Format(_types(INTEGER), slots(three), (_group("lo hi", True),)),
            Format(_types(("u16", "u32", "s16", "s32")), slots("d:2t s:t s:t"), (_group("wide", True),)),
            Format(_types(["f32"]), slots(three), (_group(" ".join(ROUND)), _group("ftz"), _group("sat"))),
            Format(_types(["f64"]), slots(three), (_group(" ".join(ROUND)),)),
        ],
        "mad": [
            Format(_types(INTEGER), slots("d:t s:t s:t s:t"), (_group("lo hi", True),)),
            Format(_types(["s32"]), slots("d:t s:t s:t s:t"), (_group("hi", True), _group("sat", True))),
            Format(_types(("u16", "u32", "s16", "s32")), slots("d:2t s:t s:t s:2t"), (_group("wide", True),)),
            Format(_types(["f32"]), slots("d:t s:t s:t s:t"),
                   (_group(" ".join(ROUND), True), _group("ftz"), _group("sat")), since=SM20),
            Format(_types(["f64"]), slots("d:t s:t s:t s:t"), (_group(" ".join(ROUND), True),), since=Requirement((1, 4), 13)),
        ],
        "mul24": [Format(_types(("u32", "s32")), slots(three), (_group("lo hi", True),))],
        "mad24": [Format(_types(("u32", "s32")), slots("d:t s:t s:t s:t"), (_group("lo hi", True),))],
        "sad": [Format(_types(INTEGER), slots("d:t s:t s:t s:t"))],
        "div": [
            Format(_types(INTEGER), slots(three)),
            Format(_types(["f32"]), slots(three), (_group("approx full", True), _group("ftz"))),
            Format(_types(["f32"]), slots(three), (_group(" ".join(ROUND), True), _group("ftz")), since=SM20),
            Format(_types(["f64"]), slots(three), (_group(" ".join(ROUND), True),), since=Requirement((1, 4), 13)),
        ],
        "rem": [Format(_types(INTEGER), slots(three))],
        "abs": numeric_unary,
        "neg": numeric_unary,
        "min": [Format(_types(INTEGER), slots(three)), Format(_types(["f32"]), slots(three), (_group("ftz"),)),
                Format(_types(["f64"]), slots(three))],
        "max": [Format(_types(INTEGER), slots(three)), Format(_types(["f32"]), slots(three), (_group("ftz"),)),
                Format(_types(["f64"]), slots(three))],
        "and": logic(three),
        "or": logic(three),
        "xor": logic(three),
        "not": logic(two),
        "cnot": logic(two, BITS),
        "shl": [Format(_types(BITS), slots("d:t s:t s:u32"))],
        "shr": [Format(_types(BITS + INTEGER), slots("d:t s:t s:u32"))],
        "bfe": [Format(_types(("u32", "u64", "s32", "s64")), slots("d:t s:t s:u32 s:u32"), since=SM20,
                       immediates=((2, 0, 255), (3, 0, 255)))],
        "bfi": [Format(_types(("b32", "b64")), slots("d:t s:t s:t s:u32 s:u32"), since=SM20,
                       immediates=((3, 0, 255), (4, 0, 255)))],
        "brev": [Format(_types(("b32", "b64")), slots(two), since=SM20)],
        "popc": [Format(_types(("b32", "b64")), slots("d:u32 s:t"), since=SM20)],
        "clz": [Format(_types(("b32", "b64")), slots("d:u32 s:t"), since=SM20)],
        "prmt": [Format(_types(["b32"]), slots("d:t s:t s:t s:t"), since=SM20)],
        "lop3": [Format(_types(["b32"]), slots("d:t s:t s:t s:t i:u32"), since=Requirement((4, 3), 50),
                        immediates=((4, 0, 255),))],
        "cvt": _cvt_forms(),
        "setp": _compare_forms(()),
        "set": _compare_forms(("u32", "s32", "f32")),
        "selp": [Format(_types(INTEGER + BITS + FLOAT), slots("d:t s:t s:t s:pred"))],
        "slct": [Format(_types(INTEGER + BITS + FLOAT, ["s32"]), slots("d:t0 s:t0 s:t0 s:t1")),
                 Format(_types(INTEGER + BITS + FLOAT, ["f32"]), slots("d:t0 s:t0 s:t0 s:t1"), (_group("ftz"),))],
        "testp": [Format(_types(FLOAT), slots("d:pred s:t"),
                         (_group("finite infinite number notanumber normal subnormal", True),), since=SM20)],
        "copysign": [Format(_types(FLOAT), slots(three), since=SM20)],
    }
    return {name: tuple(forms) for name, forms in table.items()}


FORMATS: dict[str, tuple[Format, ...]] = _build()


@attrs.frozen
class Match:
    """The outcome of fitting an opcode to its rows: a form, or why none fits."""

    format: Format | None
    problem: str | None


@functools.lru_cache(maxsize=4096)  # a pure function of the opcode value: memoised, not state
def match_opcode(opcode: ir.Opcode) -> Match:
    """The form of `opcode` (types and modifiers only; operands are checked separately)."""
    forms = FORMATS.get(opcode.base)
    if forms is None:
        return Match(None, f"instruction {opcode.base} is not allowed in probes")
    modifiers = opcode.modifiers
    n_types = len(opcode.types)
    arity = len(next(iter(forms[0].types)))
    if n_types != arity:
        example = ".".join(sorted(forms[0].types)[0])
        if n_types == 0:
            return Match(None, f"{opcode} needs a type, e.g. {opcode.base}.{example}")
        return Match(None, f"{opcode} has {n_types} type{'s' * (n_types > 1)}, {opcode.base} takes {arity} (e.g. {opcode.base}.{example})")
    # Types come last: `mul.lo.u32`, `cvt.rn.f32.u32`, `setp.eq.and.f32`.
    if modifiers[len(modifiers) - n_types :] != opcode.types:
        return Match(None, f"{opcode}: the type must come last (.{'.'.join(opcode.types)})")
    types, others = opcode.types, modifiers[: len(modifiers) - n_types]
    typed = [f for f in forms if types in f.types]
    if not typed:
        allowed = sorted({".".join(t) for f in forms for t in f.types})
        listed = ", ".join("." + a for a in allowed) if len(allowed) <= 16 else f"{len(allowed)} combinations"
        return Match(None, f"{opcode.base} does not take type .{'.'.join(types)} (allowed: {listed})")
    problems = []
    for form in typed:
        problem = form.modifier_problem(others)
        if problem is None:
            return Match(form, None)
        problems.append(problem)
    typed_modifiers = {a for f in typed for alts, _ in f.groups for a in alts}
    foreign = [m for m in others if m not in typed_modifiers and any(m in alts for f in forms for alts, _ in f.groups)]
    if foreign:
        return Match(None, f"{opcode}: modifier .{foreign[0]} does not apply to .{'.'.join(types)}")
    needs = sorted({a for f in typed for alts, req in f.groups if req for a in alts if not set(others) & set(alts)})
    if all(p.startswith("needs") for p in problems) and needs:
        return Match(None, f"{opcode} needs one of {', '.join('.' + n for n in needs)}")
    return Match(None, f"{opcode}: {next(p for p in problems if not p.startswith('needs'))}")


def slot_type(slot: Slot, opcode: ir.Opcode) -> str:
    """The concrete type an operand slot wants for this opcode."""
    types = opcode.types
    if slot.type == "t":
        return types[-1]
    if slot.type == "t0":
        return types[0]
    if slot.type == "t1":
        return types[1]
    if slot.type == "2t":
        t = types[-1]
        return f"{t[0]}{2 * bits_of(t)}"
    return slot.type


def immediate_problem(imm: ir.Immediate, wanted: str) -> str | None:
    """Why the literal cannot stand for a `wanted`-typed operand, or None."""
    text = imm.text
    hex_float = text[:2] in ("0f", "0F", "0d", "0D")
    decimal_float = bool(re.fullmatch(r"[-+]?[0-9]+\.[0-9]*", text))
    cls = type_class(wanted)
    if hex_float or decimal_float:
        if cls == "f":
            return None
        # A bit-size operand takes the float literal of its own width: 0f (32 bits) or 0d (64 bits).
        if cls == "b" and hex_float and bits_of(wanted) == (32 if text[1] in "fF" else 64):
            return None
        return f"floating-point constant {text} where .{wanted} wants an integer"
    value = imm.value
    if value is None:
        return f"constant {text} is not a number"
    if cls == "f":
        return f"integer constant {text} where .{wanted} wants a floating-point one (write 0f.../0d... or 1.0)"
    if cls == "pred":
        return None if value in (0, 1) else f"predicate constant {text} must be 0 or 1"
    width = bits_of(wanted)
    if not -(1 << (width - 1)) <= value < (1 << width):
        return f"constant {text} does not fit {width} bits"
    return None


# ---------------------------------------------------------------- version requirements

# Opcode prefixes the engine itself emits (not probe vocabulary) that an old target lacks.
# SAVE lowering's warp reductions (a sum or hist map) are among them: found by tests/test_fuzz.py,
# whose ptxas oracle refused `activemask` in a `.version 5.0` module the engine had accepted.
ENGINE_REQUIREMENTS: dict[tuple[str, ...], Requirement] = {
    ("cvta",): SM20,
    ("activemask",): Requirement((6, 2), 30),
    ("shfl", "sync"): Requirement((6, 0), 30),
    ("vote", "sync"): Requirement((6, 0), 30),
    ("match", "any", "sync"): Requirement((6, 0), 70),
    ("redux", "sync"): Requirement((7, 0), 80),
    # the graph_chain variant's head loads and stores (passes/graph_chain.py): memory-model qualifiers
    ("ld", "relaxed"): Requirement((6, 0), 70),
    ("st", "relaxed"): Requirement((6, 0), 70),
}


@functools.lru_cache(maxsize=4096)  # a pure function of the opcode value
def _opcode_requirement(opcode: ir.Opcode) -> Requirement:
    need = ANY
    if opcode.base in FORMATS:
        m = match_opcode(opcode)
        if m.format is not None:
            need = m.format.since
    for prefix, req in ENGINE_REQUIREMENTS.items():
        if opcode.has_prefix(prefix):
            need = need.join(req)
    return need


def requirement(insn: ir.Instruction) -> Requirement:
    """The lowest PTX version and target that assemble `insn` (ANY if nothing is known)."""
    need = _opcode_requirement(insn.opcode)
    for operand in insn.operands:
        if type(operand) is ir.Vector:  # SAVE {%globaltimer, ...}
            for item in operand.items:
                if type(item) is ir.SpecialRegister and item.base in SPECIAL:
                    need = need.join(SPECIAL[item.base].since)
        elif type(operand) is ir.SpecialRegister:
            spec = SPECIAL.get(operand.base)
            if spec is not None:
                need = need.join(spec.since)
    return need


def _newest_requirement() -> Requirement:
    need = ANY
    for forms in FORMATS.values():
        for form in forms:
            need = need.join(form.since)
    for spec in SPECIAL.values():
        need = need.join(spec.since)
    for req in ENGINE_REQUIREMENTS.values():
        need = need.join(req)
    return need


# Nothing in the tables needs more: a module at least this new needs no fitting.
NEWEST = _newest_requirement()


# ---------------------------------------------------------------- retired forms

@attrs.frozen
class Retirement:
    """A form original code may use that newer PTX versions refuse on some targets.

    An instruction has the form when its opcode starts with `prefix`, has one of
    `types` (any, if empty) and none of `lacking`; it is refused from PTX
    version `since` on targets from `sm` up. Checked against ptxas 13.0.
    """

    prefix: tuple[str, ...]
    lacking: frozenset[str]
    since: tuple[int, int]
    sm: int
    description: str
    types: frozenset[str] = frozenset()


RETIRED = (
    Retirement(("shfl",), frozenset({"sync"}), (6, 4), 70, "shfl without .sync is refused from PTX 6.4 on sm_70 and later"),
    Retirement(("vote",), frozenset({"sync"}), (6, 4), 70, "vote without .sync is refused from PTX 6.4 on sm_70 and later"),
    Retirement(("mad",), frozenset(ROUND), (3, 2), 20, "mad.f32 without a rounding modifier is refused from PTX 3.2",
               frozenset({"f32"})),
)


def retired_form(insn: ir.Instruction, target: int, version: tuple[int, int]) -> str | None:
    """Why `insn` would not assemble under `.version` `version`, or None."""
    for r in RETIRED:
        if version < r.since or target < r.sm or not insn.opcode.has_prefix(r.prefix):
            continue
        modifiers = set(insn.opcode.modifiers)
        if modifiers & r.lacking or (r.types and not modifiers & r.types):
            continue
        return f"{insn.opcode} ({r.description})"
    return None
