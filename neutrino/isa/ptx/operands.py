"""PTX operands: the values an instruction names (registers, immediates, addresses, vectors...) and
their text form both ways (`parse_operand`, and each value's `__str__`).

Below the instruction graph (neutrino.isa.ptx.ir, which re-exports these names and reads an
instruction's operands from its text lazily with `parse_lazy_operands`) and the parser.
"""

from __future__ import annotations

import functools
import re
from typing import Iterator, Union

import attrs

SPECIAL_REGISTERS = frozenset(
    """
    %tid %ntid %laneid %warpid %nwarpid %ctaid %nctaid %smid %nsmid %gridid
    %lanemask_eq %lanemask_le %lanemask_lt %lanemask_ge %lanemask_gt
    %clock %clock_hi %clock64 %globaltimer %globaltimer_lo %globaltimer_hi
    %total_smem_size %aggr_smem_size %dynamic_smem_size %current_graph_exec
    %is_explicit_cluster %clusterid %nclusterid %cluster_ctaid %cluster_nctaid
    %cluster_ctarank %cluster_nctarank %reserved_smem_offset_begin
    %reserved_smem_offset_end %reserved_smem_offset_cap %reserved_smem_offset_0
    %reserved_smem_offset_1
    """.split()
) | frozenset(f"%pm{i}" for i in range(8)) | frozenset(f"%pm{i}_64" for i in range(8)) | frozenset(
    f"%envreg{i}" for i in range(32)
)


@attrs.frozen
class Register:
    """A register: `%r1`, or a name without '%' (`temp_param_reg`, `p`, `__$1`) that a `.reg` in scope declares."""

    name: str  # as written, '%' included when there is one

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class SpecialRegister:
    name: str  # e.g. '%tid.x', '%clock64'

    @property
    def base(self) -> str:
        return self.name.split(".")[0]

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class Immediate:
    text: str  # kept verbatim: 0x10, 0f3F800000, -1, 16U

    @property
    def value(self) -> int | None:
        """Integer value, or None for floating-point literals."""
        t = self.text.rstrip("uU")
        neg = t.startswith("-")
        t = t.lstrip("-+")
        if not t.isascii():  # int() and isdigit() take any script's digits ('٣', '１２'); PTX takes 0-9
            return None
        try:
            if t[:2] in ("0x", "0X"):
                v = int(t[2:], 16)
            elif t[:2] in ("0b", "0B"):
                v = int(t[2:], 2)
            elif len(t) > 1 and t.startswith("0") and t.isdigit():
                v = int(t, 8)
            elif t.isdigit():
                v = int(t)
            else:
                return None
        except ValueError:
            return None
        return -v if neg else v

    def __str__(self) -> str:
        return self.text


@attrs.frozen
class Symbol:
    """A label, variable, function or parameter name (or a probe helper)."""

    name: str

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class Sink:
    """The `_` operand: a result that is thrown away."""

    def __str__(self) -> str:
        return "_"


@attrs.frozen
class Negated:
    operand: "Operand"

    def __str__(self) -> str:
        return f"!{self.operand}"


@attrs.frozen
class Pair:
    """`%r1|%p1`: two destinations of one instruction (setp, shfl)."""

    first: "Operand"
    second: "Operand"

    def __str__(self) -> str:
        return f"{self.first}|{self.second}"


@attrs.frozen
class Vector:
    items: tuple["Operand", ...]

    def __str__(self) -> str:
        return "{" + ", ".join(map(str, self.items)) + "}"


@attrs.frozen
class ParenList:
    """`(a, b)`: call arguments and return values."""

    items: tuple["Operand", ...]

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.items)) + ")"


@attrs.frozen
class Address:
    """`[base]`, `[base+off]`; base is a Register, Symbol or Immediate."""

    base: Union[Register, Symbol, Immediate]
    offset: Immediate | None = None

    @property
    def offset_value(self) -> int:
        return self.offset.value or 0 if self.offset is not None else 0

    def __str__(self) -> str:
        if self.offset is None:
            return f"[{self.base}]"
        # ptxas accepts `[%rd+-4]` but not `[%rd-4]`: always print the '+'.
        return f"[{self.base}+{self.offset.text}]"


@attrs.frozen
class Offset:
    """`mt+4`, `%r2+4`: a symbol's address or a register's value plus a constant, outside brackets."""

    base: Union[Register, Symbol]
    offset: Immediate

    def __str__(self) -> str:
        # As in addresses, ptxas accepts `mt+-4` but not `mt-4`.
        return f"{self.base}+{self.offset.text}"


@attrs.frozen
class VectorElement:
    """`%mx.x`: one element of a vector register (`.reg .v2 .f32 %mx;`)."""

    register: Register
    element: str  # x y z w, or r g b a

    def __str__(self) -> str:
        return f"{self.register}.{self.element}"


@attrs.frozen
class BracketList:
    """`[tex, {a, b}]` and other bracketed operand lists."""

    items: tuple["Operand", ...]

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self.items)) + "]"


Operand = Union[
    Register, SpecialRegister, Immediate, Symbol, Sink, Negated, Pair, Vector, ParenList, Address, BracketList, Offset,
    VectorElement,
]


def registers_in(operand: Operand) -> Iterator[Register]:
    """Every general register named inside an operand, in order."""
    kind = type(operand)  # exact types, most frequent first: this runs for every operand the semantics reads
    if kind is Register:
        yield operand
    elif kind is Address or kind is Offset:
        if type(operand.base) is Register:
            yield operand.base
    elif kind is Vector or kind is ParenList or kind is BracketList:
        for item in operand.items:
            yield from registers_in(item)
    elif kind is Pair:
        yield from registers_in(operand.first)
        yield from registers_in(operand.second)
    elif kind is Negated:
        yield from registers_in(operand.operand)
    elif kind is VectorElement:
        yield operand.register


def symbols_in(operand: Operand) -> Iterator[str]:
    """Every symbol name inside an operand, in order."""
    kind = type(operand)
    if kind is Symbol:
        yield operand.name
    elif kind is Address or kind is Offset:
        if type(operand.base) is Symbol:
            yield operand.base.name
    elif kind is Vector or kind is ParenList or kind is BracketList:
        for item in operand.items:
            yield from symbols_in(item)
    elif kind is Pair:
        yield from symbols_in(operand.first)
        yield from symbols_in(operand.second)
    elif kind is Negated:
        yield from symbols_in(operand.operand)


def bind_registers(operand: Operand, names: frozenset[str] | set[str]) -> Operand:
    """`operand` with every symbol in `names` (registers declared without '%') made a `Register`.

    Out of context `p` may be a label, a variable or a register; the parser
    binds names to the `.reg` declarations in scope with this.
    """
    kind = type(operand)
    if kind is Symbol:
        return Register(operand.name) if operand.name in names else operand
    if kind is Register or kind is Immediate or kind is SpecialRegister or kind is Sink:
        return operand
    if kind is Negated:
        return Negated(bind_registers(operand.operand, names))
    if kind is Pair:
        return Pair(bind_registers(operand.first, names), bind_registers(operand.second, names))
    if kind is Vector or kind is ParenList or kind is BracketList:
        return kind(tuple(bind_registers(item, names) for item in operand.items))
    if kind is Address:
        return Address(bind_registers(operand.base, names), operand.offset)
    if kind is Offset:
        return Offset(bind_registers(operand.base, names), operand.offset)
    return operand


# A name not preceded by '%', '.' or a digit (0x10, 0f3F800000), and not the sink '_'.
UNPARSED_SYMBOL_RE = re.compile(r"(?<![%.A-Za-z0-9_$])(?!_(?![A-Za-z0-9_$]))[A-Za-z_$][A-Za-z0-9_$]*")


# ---------------------------------------------------------------- their text

# The PTX ISA's identifiers: followsym [a-zA-Z0-9_$]; [a-zA-Z]{followsym}* | {[_$%]}{followsym}+.
# Registers need no '%' (`.reg .pred p;`, `temp_param_reg`, `__$1`); `_`, `$` and `%` alone are not names.
PLAIN_NAME = r"(?:[A-Za-z][A-Za-z0-9_$]*|[_$][A-Za-z0-9_$]+)"


PERCENT_NAME = r"%[A-Za-z0-9_$]+"


IDENT = rf"(?:{PERCENT_NAME}|{PLAIN_NAME})"


REG_RE = re.compile(rf"({PERCENT_NAME})(?:\.([A-Za-z]+))?$")


VECTOR_ELEMENTS = frozenset("xyzwrgba")


SPECIAL_ELEMENTS = frozenset("xyz")


PLAIN_ELEMENT_RE = re.compile(rf"({PLAIN_NAME})\.([xyzwrgba])$")


OFFSET_OPERAND_RE = re.compile(rf"({IDENT})\s*([-+])\s*([-+]?(?:0[xX][0-9a-fA-F]+|[0-9]+)[uU]?)$")


IMM_RE = re.compile(
    r"[-+]?(0[xX][0-9a-fA-F]+|0[bB][01]+|0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|\d+\.\d*(e[-+]?\d+)?|\d+)[uU]?$"
)


SYMBOL_RE = re.compile(rf"{PLAIN_NAME}$")


_FLAT = r"(?:[^,{}\[\]()]|\{[^{}\[\]()]*\}|\[[^{}\[\]()]*\]|\([^{}\[\]()]*\))"


FLAT_OPERAND_RE = re.compile(rf"({_FLAT}+)(?:,|$)")


FLAT_OPERANDS_RE = re.compile(rf"{_FLAT}+(?:,{_FLAT}+)*")


def parse_operand_list(text: str) -> tuple[Operand, ...]:
    """`%r1, [%rd2+4], {%f1, %f2}` → operands; raises ValueError on malformed text."""
    return tuple(cached_operand(o.strip()) for o in split_top(text, ","))


# One operand of a list that matched LAZY_OPERANDS_RE, whose shapes need no general parser.
LAZY_OPERAND_RE = re.compile(
    r"\s*(?:\{(?P<vector>[^}]*)\}|\[\s*(?P<base>[^\s\]+-]+)\s*(?:(?P<sign>\+\s*-?|-)\s*(?P<offset>\w+)\s*)?\]|(?P<word>[^\s,]+))\s*(?:,|$)"
)


def parse_lazy_operands(text: str) -> tuple[Operand, ...]:
    """Operands of text the parser kept (it matched LAZY_OPERANDS_RE): the same as `parse_operand_list`, faster."""
    out: list[Operand] = []
    for vector, base, sign, offset, word in LAZY_OPERAND_RE.findall(text):
        if word:
            out.append(cached_operand(word))
        elif base:
            # `[%rd1+-8]`, `[%rd1 - 8]` and `[%rd1+ -8]` all mean offset -8.
            displacement = Immediate("-" + offset if "-" in sign else offset) if offset else None
            out.append(Address(cached_operand(base), displacement))
        else:
            out.append(Vector(tuple(cached_operand(item.strip()) for item in vector.split(","))))
    return tuple(out)


@functools.lru_cache(maxsize=8192)  # operands are values: one object per text, shared by every module
def cached_operand(text: str) -> Operand:
    return parse_operand(text)


def split_top(text: str, sep: str) -> list[str]:
    """Split at `sep` outside brackets; raises ValueError on unbalanced brackets."""
    if not any(c in text for c in "{}[]()"):
        parts = text.split(sep)
        if any(not p.strip() for p in parts):
            raise ValueError("empty operand")
        return parts
    if sep == "," and FLAT_OPERANDS_RE.fullmatch(text):  # one level of brackets: a regex does it
        parts = [m.group(1) for m in FLAT_OPERAND_RE.finditer(text)]
        if all(p.strip() for p in parts):
            return parts
    parts, depth, cur = [], 0, []
    pairs = {"{": "}", "[": "]", "(": ")"}
    stack: list[str] = []
    for c in text:
        if c in pairs:
            stack.append(pairs[c])
        elif c in pairs.values():
            if not stack or stack.pop() != c:
                raise ValueError(f"unbalanced {c!r} in operands")
        if c == sep and not stack:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if stack:
        raise ValueError(f"unclosed bracket in operands (expected {stack[-1]!r})")
    parts.append("".join(cur))
    if any(not p.strip() for p in parts):
        raise ValueError("empty operand")
    return parts


def parse_operand(text: str) -> Operand:
    t = text.strip()
    if not t:
        raise ValueError("empty operand")
    if t[0] == "{" and t[-1] == "}":
        inner = t[1:-1]
        return Vector(tuple(parse_operand(x) for x in split_top(inner, ","))) if inner.strip() else Vector(())
    if t[0] == "(" and t[-1] == ")":
        inner = t[1:-1]
        return ParenList(tuple(parse_operand(x) for x in split_top(inner, ","))) if inner.strip() else ParenList(())
    if t[0] == "[" and t[-1] == "]":
        return parse_address(t[1:-1])
    if t[0] == "!":
        return Negated(parse_operand(t[1:]))
    if "|" in t:
        first, _, second = t.partition("|")
        return Pair(parse_operand(first), parse_operand(second))
    if t == "_":
        return Sink()
    if t[0] == "%":
        m = REG_RE.match(t)
        if m is None:
            return _offset_operand(t)
        name, element = m.groups()
        if name in SPECIAL_REGISTERS:
            if element is not None and element not in SPECIAL_ELEMENTS:
                raise ValueError(f"malformed special register {t!r}")
            return SpecialRegister(t)
        if element is None:
            return Register(t)
        if element not in VECTOR_ELEMENTS:
            raise ValueError(f"malformed register {t!r}: a vector register's element is .x .y .z .w or .r .g .b .a")
        return VectorElement(Register(name), element)
    if IMM_RE.match(t):
        return Immediate(t)
    if SYMBOL_RE.match(t):
        return Symbol(t)
    element = PLAIN_ELEMENT_RE.match(t)
    if element:  # only a vector register has elements, so no declaration is needed to tell
        return VectorElement(Register(element.group(1)), element.group(2))
    return _offset_operand(t)


def _offset_operand(text: str) -> Offset:
    """`mt+4`, `%r2 + 4`: a name plus a constant outside brackets."""
    m = OFFSET_OPERAND_RE.match(text)
    if m is None:
        shown = text if len(text) <= 80 else f"{text[:60]}…({len(text)} characters)"
        raise ValueError(f"cannot parse operand {shown!r}")
    base, sign, offset = m.groups()
    if sign == "-":
        offset = offset[1:] if offset.startswith("-") else "-" + offset.lstrip("+")
    base_operand = parse_operand(base)
    if not isinstance(base_operand, (Register, Symbol)):
        raise ValueError(f"cannot add a constant to {base!r}")
    return Offset(base_operand, Immediate(offset.lstrip("+")))


ADDRESS_RE = re.compile(rf"({PERCENT_NAME}(?:\.[A-Za-z]+)?|{PLAIN_NAME}|[-+]?[0-9][0-9a-fA-FxX]*)(?:(\+|-)([-+]?[0-9][0-9a-fA-FxXuU]*))?")


def parse_address(inner: str) -> Operand:
    items = split_top(inner, ",") if inner.strip() else []
    if len(items) != 1:
        return BracketList(tuple(parse_operand(x) for x in items))
    expr = "".join(inner.split())
    m = ADDRESS_RE.fullmatch(expr)
    if not m:
        raise ValueError(f"cannot parse address [{inner.strip()}]")
    base = parse_operand(m.group(1))
    if not isinstance(base, (Register, Symbol, Immediate)):
        raise ValueError(f"address base must be a register, symbol or constant, not {m.group(1)!r}")
    offset = None
    if m.group(2):
        off = m.group(3)
        if m.group(2) == "-":
            off = off[1:] if off.startswith("-") else "-" + off.lstrip("+")
        offset = Immediate(off.lstrip("+") if not off.startswith("-") else off)
        if offset.value is None:
            raise ValueError(f"address offset {m.group(3)!r} is not an integer")
    return Address(base, offset)
