"""The names a PTX module declares, and fresh names that meet none of them.

PTX has one namespace per scope for registers, labels, parameters and
variables: a `.reg %x` in a function shadows a module's `.global %x`, a label
and a register of one name are a duplicate definition. So every name the
engine adds (registers, parameters, the counting entry) is chosen here, against
all of the module's symbol tables at once, the way LLVM uniques a symbol: take
the wanted name and append `_1`, `_2`, … until it is unused.

The tables are a superset of what is declared: every identifier in a
directive (variable declarations of any form, `.loc`, `.section` labels) is
taken, so an unusual declaration can only make us choose another name, never
one that collides.

Registers are chosen as a family: `fresh_prefix` gives a prefix (`%nt_`,
`%nt1_`, …) that no name in the function's scope or the module's starts with,
and every register the engine adds is that prefix plus a role name, so the
kernel's own names are never met; the prefix is then reserved in that scope.
"""

from __future__ import annotations

import re

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir

# A PTX identifier ([a-zA-Z][a-zA-Z0-9_$]* or [_$%][a-zA-Z0-9_$]+) not inside a
# longer word, a directive (`.u64`) or a number (0x10, 0f3F800000).
IDENTIFIER = re.compile(r"(?<![.\w$%])(?:[A-Za-z][\w$]*|[_$%][\w$]+)", re.ASCII)
REFERENCE_ONLY = (".loc", ".pragma", ".file")  # directives that name nothing new: one per line of -lineinfo code
# A `.section` (DWARF) declares only the labels at its line starts; the rest refers to names
# declared elsewhere. Its text can be most of a -G module, so only its labels are read.
SECTION_LABEL = re.compile(r"^[ \t]*((?:[A-Za-z][\w$]*|[_$%][\w$]+))[ \t]*:(?!:)", re.M | re.ASCII)
DIGITS = "0123456789"


@attrs.define(eq=False)
class NameSet:
    """The names one scope declares: exact names, register ranges, and reserved prefixes."""

    names: set[str] = attrs.Factory(set)
    ranges: dict[str, int] = attrs.Factory(dict)  # `%r<33>` → {`%r`: 33}: it declares %r0..%r32
    families: set[str] = attrs.Factory(set)  # prefixes of ours: every name starting so is taken

    def add_statement_names(self, body: list[ir.Statement]) -> None:
        """Registers, labels and every identifier of a directive, nested scopes included."""
        texts: list[str] = []
        stack = [body]
        while stack:
            for stmt in stack.pop():
                kind = type(stmt)
                if kind is ir.RegDecl:
                    if stmt.count is None:
                        self.names.update(stmt.names)
                    else:
                        self.ranges[stmt.names[0]] = max(stmt.count, self.ranges.get(stmt.names[0], 0))
                elif kind is ir.Label:
                    self.names.add(stmt.name)
                elif kind is ir.Directive:
                    if stmt.text.startswith(REFERENCE_ONLY):
                        continue
                    if not stmt.text.startswith(".section"):
                        texts.append(stmt.text)
                    elif ":" in stmt.text:
                        self.names.update(SECTION_LABEL.findall(stmt.text))
                elif kind is ir.Scope:
                    stack.append(stmt.body)
        self.names.update(IDENTIFIER.findall("\n".join(texts)))

    def taken(self, name: str) -> bool:
        if name in self.names or any(name.startswith(f) for f in self.families):
            return True
        # `%r1<3>` declares %r10..%r12: try every split inside the trailing digits.
        stem = name.rstrip(DIGITS)
        return any(int(name[split:]) < self.ranges.get(name[:split], 0) for split in range(len(stem), len(name)))

    def numbers_taken(self, pattern: re.Pattern) -> set[str]:
        """The `(\\d*)` group of every name or range that `pattern` matches at its start."""
        found = set()
        for name in (*self.names, *self.ranges, *self.families):
            m = pattern.match(name)
            if m:
                found.add(m.group(1))
        return found


def function_names(function: ir.Function) -> NameSet:
    scope = NameSet()
    for param in (*(function.params or ()), *(function.returns or ())):
        scope.names.add(param.name)
    scope.add_statement_names(function.body or [])
    return scope


def module_names(module: ir.Module) -> NameSet:
    """Functions (prototypes included) and every identifier of a module-level directive."""
    scope = NameSet()
    directives = []
    for item in module.items:
        if type(item) is ir.Function:
            scope.names.add(item.name)
        elif type(item) is ir.Directive:
            directives.append(item)
    scope.add_statement_names(directives)
    return scope


@attrs.define(eq=False)
class NameAllocator:
    """Fresh names for one module: built from its symbol tables, updated with every name it hands out.

    Function scopes are read when first asked for (a counting copy made later
    reads its own), keyed by the function object.
    """

    module: ir.Module
    module_scope: NameSet
    scopes: dict[int, NameSet] = attrs.Factory(dict)

    @classmethod
    def of(cls, module: ir.Module) -> "NameAllocator":
        return cls(module, module_names(module))

    def scope(self, function: ir.Function) -> NameSet:
        found = self.scopes.get(id(function))
        if found is None:
            found = self.scopes[id(function)] = function_names(function)
        return found

    def _taken_in(self, name: str, scopes: list[NameSet]) -> bool:
        return any(s.taken(name) for s in scopes)

    def _unique(self, wanted: str, scopes: list[NameSet]) -> str:
        family = next((f for s in scopes for f in s.families if wanted.startswith(f)), None)
        if family is not None:  # every suffixed form would be in the family too: a bug of ours, not a loop
            raise InstrumentError(f"internal: the name {wanted} lies in the register family {family}")
        name, n = wanted, 0
        while self._taken_in(name, scopes):
            n += 1
            name = f"{wanted}_{n}"
        return name

    def fresh_local(self, function: ir.Function, wanted: str) -> str:
        """A name for the function's scope (a parameter): unused there and at module level; now reserved."""
        scope = self.scope(function)
        name = self._unique(wanted, [scope, self.module_scope])
        scope.names.add(name)
        return name

    def fresh_global(self, wanted: str) -> str:
        """A module-level name (a function): unused in every scope of the module; now reserved."""
        scopes = [self.module_scope] + [self.scope(f) for f in self.module.functions()]
        name = self._unique(wanted, scopes)
        self.module_scope.names.add(name)
        return name

    def fresh_prefix(self, function: ir.Function, base: str = "%nt") -> str:
        """`base_`, or `base1_`, `base2_`, …: no name of the function's scope or the module's starts with it."""
        # One pass over the names (not one per candidate): which numbers are taken.
        pattern = re.compile(re.escape(base) + r"(\d*)_")
        scope = self.scope(function)
        taken = scope.numbers_taken(pattern) | self.module_scope.numbers_taken(pattern)
        n = 0
        while (str(n) if n else "") in taken:
            n += 1
        prefix = f"{base}{n if n else ''}_"
        scope.families.add(prefix)
        return prefix

    def copy_scope(self, original: ir.Function, copy: ir.Function) -> None:
        """A copy of a function (the counting variant) has its original's names and register family."""
        scope = self.scope(original)
        self.scopes[id(copy)] = NameSet(set(scope.names), dict(scope.ranges), set(scope.families))
