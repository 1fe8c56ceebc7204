"""The PTX instruction graph.

Values (operands, opcodes, guards) are frozen attrs classes compared by value.
Statements (instructions, labels, declarations) are mutable and compared by
identity: two `add` instructions with the same text are still two
instructions. `structure()` gives a value-comparable picture of a whole module,
which is what the round-trip tests compare.

Trivia, as in LibCST: every parsed statement keeps its spelling, `written`,
the whitespace before it and the statement exactly as it stood in the source;
bodies keep the whitespace before their `}` (`closing`) and the module the
text after its last item (`trailing`). The printer writes `written` as is, so
an untouched module prints back byte for byte. Edits go through `edit` (or the
`operands` setter), which drops `written` and keeps only the whitespace before
the statement (`leading`): an edited or inserted statement prints in canonical
form.
"""

from __future__ import annotations

import functools
import re
from typing import Iterator, Union

import attrs

from neutrino.isa.ptx.operands import (  # noqa: F401 - the operand values, part of the graph's vocabulary
    SPECIAL_REGISTERS, Register, SpecialRegister, Immediate, Symbol, Sink, Negated, Pair, Vector, ParenList,
    Address, Offset, VectorElement, BracketList, Operand, registers_in, symbols_in, bind_registers,
    UNPARSED_SYMBOL_RE, parse_lazy_operands)

# ---------------------------------------------------------------- opcodes

TYPE_BYTES = {
    "b8": 1, "u8": 1, "s8": 1, "e4m3": 1, "e5m2": 1, "e4m3x2": 2, "e5m2x2": 2,
    "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
    "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "u64": 8, "s64": 8, "f64": 8,
    "b128": 16, "pred": 0,
}
STATE_SPACES = ("global", "shared", "local", "const", "param", "generic", "tex")


@attrs.frozen
class Opcode:
    """`ld.global.nc.v4.f32` → base `ld`, modifiers (global, nc, v4, f32)."""

    text: str
    components: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "components", tuple(self.text.split(".")))

    @property
    def base(self) -> str:
        return self.components[0]

    @property
    def modifiers(self) -> tuple[str, ...]:
        return self.components[1:]

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(m for m in self.modifiers if m in TYPE_BYTES)

    @property
    def vector(self) -> int:
        for m in self.modifiers:
            if m in ("v2", "v4", "v8"):
                return int(m[1:])
        return 1

    @property
    def space(self) -> str | None:
        for m in self.modifiers:
            head = m.split("::")[0]
            if head in STATE_SPACES:
                return head
        return None

    def has_prefix(self, prefix: tuple[str, ...]) -> bool:
        return self.components[: len(prefix)] == prefix

    def __str__(self) -> str:
        return self.text


@functools.lru_cache(maxsize=4096)
def opcode(text: str) -> Opcode:
    """The `Opcode` of a text; opcodes are values, so one object per text is shared."""
    return Opcode(text)


@attrs.frozen
class Guard:
    register: Register
    negated: bool = False

    def __str__(self) -> str:
        return f"@{'!' if self.negated else ''}{self.register}"


# ---------------------------------------------------------------- statements


@attrs.define(eq=False)
class Instruction:
    """One instruction. Its operands are parsed on first use.

    The parser checks operand text against a grammar it knows it can parse
    and keeps the text (`source_operands`); most instructions of a kernel are
    never looked at by a pass, so they are never split into operand objects
    and print back from their own text.
    """

    opcode: Opcode
    _operands: tuple[Operand, ...] | None = attrs.field(default=(), alias="operands")
    guard: Guard | None = None
    line: int = 0  # source line (1-based) where parsed; 0 when inserted
    origin: str | None = None  # who inserted it: "probe NAME" / pass name; None = original
    source_operands: str | None = attrs.field(default=None, repr=False)
    written: str | None = attrs.field(default=None, repr=False)  # whitespace before + the statement as written
    leading: str | None = attrs.field(default=None, repr=False)  # the whitespace before, once edited

    @property
    def operands(self) -> tuple[Operand, ...]:
        if self._operands is None:
            self._operands = parse_lazy_operands(self.source_operands or "")
        return self._operands

    @operands.setter
    def operands(self, value: tuple[Operand, ...]) -> None:
        self._operands = value
        self.source_operands = None  # the text no longer describes the operands
        if self.written is not None:
            drop_spelling(self)

    def symbol_names(self) -> Iterator[str]:
        """Names of the symbols (variables, functions, labels, params) the operands mention."""
        if self._operands is None:
            # Unparsed text passed the parser's fast grammar, where a name not after '%' or '.' is a symbol.
            yield from UNPARSED_SYMBOL_RE.findall(self.source_operands or "")
            return
        for operand in self._operands:
            yield from symbols_in(operand)

    def key(self) -> tuple:
        return ("insn", self.guard, self.opcode, self.operands)


@attrs.define(eq=False)
class Label:
    name: str
    line: int = 0
    written: str | None = attrs.field(default=None, repr=False)
    leading: str | None = attrs.field(default=None, repr=False)

    def key(self) -> tuple:
        return ("label", self.name)


@attrs.define(eq=False)
class RegDecl:
    """`.reg .b32 %r<33>;` (count=33) or `.reg .pred %p1, %p2;` (count None)."""

    type: str  # without dots: b32, pred, ...; a vector register's is two words: 'v4 b32'
    names: tuple[str, ...]
    count: int | None = None  # parameterized form %name<count>
    line: int = 0
    origin: str | None = None
    written: str | None = attrs.field(default=None, repr=False)
    leading: str | None = attrs.field(default=None, repr=False)

    def declared(self) -> Iterator[str]:
        if self.count is None:
            yield from self.names
        else:
            for i in range(self.count):
                yield f"{self.names[0]}{i}"

    def key(self) -> tuple:
        return ("reg", self.type, self.names, self.count)


@attrs.define(eq=False)
class Directive:
    """A directive or declaration we keep verbatim (`.loc`, `.pragma`, `.shared` vars)."""

    text: str  # words joined by one space: what passes read; `written` has the spelling
    line: int = 0
    written: str | None = attrs.field(default=None, repr=False)
    leading: str | None = attrs.field(default=None, repr=False)

    def key(self) -> tuple:
        return ("dir", self.text)


@attrs.define(eq=False)
class Comment:
    text: str  # with its // or /* */ markers
    line: int = 0
    written: str | None = attrs.field(default=None, repr=False)
    leading: str | None = attrs.field(default=None, repr=False)

    def key(self) -> tuple:
        return ("comment", self.text)


@attrs.define(eq=False)
class Scope:
    """A nested `{ ... }` block (inline asm); it may declare registers of its own."""

    body: list["Statement"] = attrs.Factory(list)
    line: int = 0
    leading: str | None = attrs.field(default=None, repr=False)  # the whitespace before '{'
    closing: str | None = attrs.field(default=None, repr=False)  # the whitespace before '}'
    written = None  # a scope has no spelling of its own: its braces print with its body

    def key(self) -> tuple:
        return ("scope", tuple(s.key() for s in self.body))


Statement = Union[Instruction, Label, RegDecl, Directive, Comment, Scope]


@attrs.define(eq=False)
class Param:
    text: str  # the declaration without trailing comma: `.param .u64 .ptr .global .align 1 vadd_param_0`

    @property
    def name(self) -> str:
        last = self.text.split()[-1]
        return re.sub(r"\[.*$", "", last)


@attrs.define(eq=False)
class Function:
    kind: str  # "entry" or "func"
    name: str
    linkage: tuple[str, ...] = ()  # tokens before .entry/.func: .visible, .extern, .weak
    returns: list[Param] | None = None
    params: list[Param] | None = None
    directives: list[str] = attrs.Factory(list)  # .reqntid 128, .maxnreg 32, ...
    body: list[Statement] | None = None  # None: a declaration (prototype)
    line: int = 0
    # The head as written, from the whitespace before it to its '{' (or ';'), and the
    # `head_key()` it was written for: passes change heads in place (a parameter
    # appended), so the printer compares keys rather than trusting every edit to say so.
    written_head: str | None = attrs.field(default=None, repr=False)
    written_key: tuple | None = attrs.field(default=None, repr=False)
    closing: str | None = attrs.field(default=None, repr=False)  # the whitespace before the body's '}'

    @property
    def is_entry(self) -> bool:
        return self.kind == "entry"

    def head_key(self) -> tuple:
        return (
            "function",
            self.kind,
            self.name,
            self.linkage,
            None if self.returns is None else tuple(p.text for p in self.returns),
            None if self.params is None else tuple(p.text for p in self.params),
            tuple(self.directives),
            self.body is None,
        )

    def key(self) -> tuple:
        return (*self.head_key()[:-1], None if self.body is None else tuple(s.key() for s in self.body))


TopLevel = Union[Function, Directive, Comment]


@attrs.define(eq=False)
class Module:
    items: list[TopLevel] = attrs.Factory(list)
    source: str = "<ptx>"
    trailing: str | None = attrs.field(default=None, repr=False)  # the text after the last item

    def functions(self) -> list[Function]:
        return [i for i in self.items if isinstance(i, Function)]

    def entries(self) -> list[Function]:
        return [f for f in self.functions() if f.is_entry and f.body is not None]

    def function(self, name: str) -> Function | None:
        for f in self.functions():
            if f.name == name and f.body is not None:
                return f
        return None

    def _header(self, directive: str) -> str | None:
        for item in self.items:
            if isinstance(item, Directive) and item.text.split()[:1] == [directive]:
                return item.text.split()[1] if len(item.text.split()) > 1 else ""
        return None

    @property
    def version(self) -> str | None:
        return self._header(".version")

    @property
    def target(self) -> str | None:
        t = self._header(".target")
        return t.split(",")[0] if t else t

    @property
    def address_size(self) -> int:
        a = self._header(".address_size")
        return int(a) if a else 64

    def structure(self) -> tuple:
        return tuple(item.key() for item in self.items)


# ---------------------------------------------------------------- editing

_LEADING_SPACE = re.compile(r"\s*")


def leading_space(written: str) -> str:
    """The whitespace a spelling starts with: what stood between the statement and the one before."""
    return _LEADING_SPACE.match(written).group(0)


def drop_spelling(stmt: Statement) -> None:
    """The statement no longer prints as written; it keeps the whitespace before it."""
    written = stmt.written
    if written is not None:
        stmt.leading = leading_space(written)
        stmt.written = None


def edit(stmt: Statement, **changes) -> Statement:
    """Change fields of a parsed statement (`edit(directive, text=...)`): the rewriter's one way in.

    The statement then prints in canonical form, where the whitespace before it
    is kept; the rest of the module still prints as written. Assigning fields
    directly would leave the old spelling in place.
    """
    for name, value in changes.items():
        setattr(stmt, name, value)
    drop_spelling(stmt)
    return stmt


# ---------------------------------------------------------------- walking


def walk(body: list[Statement]) -> Iterator[tuple[list[Statement], int, Statement]]:
    """Every statement of a body, nested scopes included, with its container and index.

    The container/index pair is what rewriters need to insert next to a statement.
    Iterates over a snapshot, so inserting while walking is safe for the caller
    as long as it accounts for the shifted indices itself.
    """
    for index, stmt in enumerate(list(body)):
        yield body, index, stmt
        if isinstance(stmt, Scope):
            yield from walk(stmt.body)


def instructions(body: list[Statement]) -> list[Instruction]:
    """Every instruction of a body, nested scopes included, in order."""
    if Scope not in map(type, body):  # the common case, at the speed of a comprehension
        return [stmt for stmt in body if type(stmt) is Instruction]
    out: list[Instruction] = []
    for stmt in body:
        if type(stmt) is Instruction:
            out.append(stmt)
        elif type(stmt) is Scope:
            out.extend(instructions(stmt.body))
    return out


def register_types(function: Function) -> "RegisterTypes":
    types = RegisterTypes()
    for _, _, stmt in walk(function.body or []):
        if isinstance(stmt, RegDecl):
            types.add(stmt)
    return types


@attrs.define
class RegisterTypes:
    """Name → declared type, understanding `%r<33>` ranges without expanding them.

    A name declared with different types in different scopes (inline asm blocks
    reuse `c`, `tmp`, `p`) has no one type here: `type_of` says None for it."""

    exact: dict[str, str] = attrs.Factory(dict)
    ranges: dict[str, tuple[str, int]] = attrs.Factory(dict)
    ambiguous: set[str] = attrs.Factory(set)

    def add(self, decl: RegDecl) -> None:
        if decl.count is None:
            for n in decl.names:
                if self.exact.get(n, decl.type) != decl.type:
                    self.ambiguous.add(n)
                self.exact[n] = decl.type
        else:
            prefix = decl.names[0]
            old = self.ranges.get(prefix)
            if old is not None and old[0] != decl.type:
                self.ambiguous.add(prefix)
            self.ranges[prefix] = (decl.type, max(decl.count, old[1] if old else 0))

    def type_of(self, name: str) -> str | None:
        if name in self.ambiguous:
            return None
        if name in self.exact:
            return self.exact[name]
        # `%r<33>` declares %r0..%r32; a prefix may itself end in digits (`%r1<3>`: %r10..%r12).
        digits = len(name) - len(name.rstrip("0123456789"))
        for split in range(len(name) - digits, len(name)):
            prefix, index = name[:split], name[split:]
            if prefix in self.ranges and (index == "0" or index[0] != "0"):
                if prefix in self.ambiguous:
                    return None
                t, count = self.ranges[prefix]
                if int(index) < count:
                    return t
        return None

    def names_with_prefix(self, prefix: str) -> bool:
        return any(n.startswith(prefix) for n in self.exact) or any(p.startswith(prefix) for p in self.ranges)
