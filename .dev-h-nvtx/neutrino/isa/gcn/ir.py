"""The AMDGPU (GCN/CDNA) assembly graph, as LLVM prints it for gfx90a/gfx942.

A module is a list of top-level items in source order: plain lines kept
verbatim (comments, directives outside kernels, blank lines), labels,
instructions, kernel descriptors (`.amdhsa_kernel ... .end_amdhsa_kernel`) and
the metadata block (`.amdgpu_metadata ... .end_amdgpu_metadata`, YAML kept as
its lines). Values (registers, operands) are frozen and compared by value;
statements are mutable and compared by identity, as in the PTX graph.
"""

from __future__ import annotations

import re
from typing import Iterator, Union

import attrs

# ---------------------------------------------------------------- operands

REGISTER_FILES = ("s", "v", "a")  # scalar, vector, accumulation (AGPR)


@attrs.frozen
class RegRange:
    """`s5`, `v[2:3]`, `a[0:15]`: `count` consecutive registers of one file from `first`."""

    file: str = attrs.field(validator=attrs.validators.in_(REGISTER_FILES))
    first: int = attrs.field(validator=attrs.validators.ge(0))
    count: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    bracketed: bool = False  # `v[4]` / `v[4:4]` rather than `v4`

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def __str__(self) -> str:
        if self.count == 1 and not self.bracketed:
            return f"{self.file}{self.first}"
        return f"{self.file}[{self.first}:{self.last}]"


@attrs.frozen
class Special:
    """A named register or operand word: vcc, exec_lo, m0, scc, off, src_shared_base, ..."""

    name: str

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class Imm:
    """An integer or floating-point literal, kept as written (`0x3ff`, `-1`, `1.0`)."""

    text: str

    @property
    def value(self) -> int | None:
        try:
            return int(self.text, 0)
        except ValueError:
            return None

    def __str__(self) -> str:
        return self.text


@attrs.frozen
class ProbeReg:
    """A probe's virtual register (`%t`, `%t.lo`) or helper (`ADDR`, `BYTES`, `OUT.hi`) in a snippet."""

    name: str  # as written, without the half
    half: str | None = None  # "lo" / "hi" / None

    def __str__(self) -> str:
        return self.name + (f".{self.half}" if self.half else "")


@attrs.frozen
class Text:
    """Anything else, kept verbatim: labels, `hwreg(HW_REG_HW_ID)`, `vmcnt(0) lgkmcnt(0)`, `-v1`, `|v2|`."""

    text: str

    def __str__(self) -> str:
        return self.text


Operand = Union[RegRange, Special, Imm, ProbeReg, Text]


def registers_in(operand: Operand) -> Iterator[RegRange]:
    """The registers named by an operand, including inside modifiers such as `-v1` or `|v[2:3]|`."""
    if type(operand) is RegRange:
        yield operand
    elif type(operand) is Text:
        for m in REGISTER_TOKEN.finditer(operand.text):
            yield register_of(m)


REGISTER_TOKEN = re.compile(r"(?<![\w.$@])([sva])(?:(\d+)|\[(\d+)(?::(\d+))?\])(?![\w@])")


def register_of(m: re.Match) -> RegRange:
    file, single, lo, hi = m.groups()
    if single is not None:
        return RegRange(file, int(single))
    first = int(lo)
    last = int(hi) if hi is not None else first
    return RegRange(file, first, last - first + 1, bracketed=True)


# ---------------------------------------------------------------- statements


@attrs.define(eq=False)
class Line:
    """A line kept verbatim: blank, comment, or a directive we need not understand."""

    text: str
    line: int = 0


@attrs.define(eq=False)
class Label:
    name: str
    trailer: str = ""  # whitespace + comment after the colon
    line: int = 0


@attrs.define(eq=False)
class Instruction:
    """`mnemonic operands modifiers ; comment`.

    `separators` are the exact texts between operands (`, `), and `gap` what
    lies between the mnemonic and the first operand, so that the printer gives
    the source back byte for byte; instructions built by passes leave them
    empty and print in LLVM's layout.
    """

    mnemonic: str
    operands: tuple[Operand, ...] = ()
    modifiers: tuple[str, ...] = ()  # `offset:48`, `glc`, `sc0`, `cbsz:1`, ...
    indent: str = "\t"
    trailer: str = ""  # whitespace + comment
    line: int = 0
    origin: str | None = None  # None: from the source; else the probe or pass that inserted it
    gap: str | None = None
    separators: tuple[str, ...] | None = None
    modifier_gaps: tuple[str, ...] | None = None


@attrs.define(eq=False)
class DescriptorEntry:
    """One `.amdhsa_<key> <value>` line of a kernel descriptor."""

    key: str  # without the `.amdhsa_` prefix
    value: str
    indent: str = "\t\t"
    trailer: str = ""
    gap: str = " "


@attrs.define(eq=False)
class Descriptor:
    """`.amdhsa_kernel NAME` ... `.end_amdhsa_kernel`: the kernel's resource descriptor."""

    kernel: str
    entries: list[DescriptorEntry]
    head: str  # the opening line, verbatim
    tail: str  # the closing line, verbatim
    line: int = 0

    def get(self, key: str) -> str | None:
        for entry in self.entries:
            if entry.key == key:
                return entry.value
        return None

    def get_int(self, key: str, default: int = 0) -> int:
        value = self.get(key)
        return default if value is None else int(value, 0)

    def set(self, key: str, value: int | str) -> None:
        """Changes a key in place, or adds it after the last entry."""
        for entry in self.entries:
            if entry.key == key:
                entry.value = str(value)
                return
        indent = self.entries[-1].indent if self.entries else "\t\t"
        self.entries.append(DescriptorEntry(key, str(value), indent))


@attrs.define(eq=False)
class Metadata:
    """`.amdgpu_metadata` ... `.end_amdgpu_metadata`: the YAML kept as lines (edited by `neutrino.isa.gcn.metadata`)."""

    head: str
    lines: list[str]
    tail: str
    line: int = 0


Statement = Union[Line, Label, Instruction, Descriptor, Metadata]


@attrs.define(eq=False)
class Kernel:
    """A view of one kernel: where its code lies in `Module.items` and its descriptor."""

    name: str
    start: int  # index of the kernel's label in Module.items
    end: int  # index one past its last instruction (the `.Lfunc_end` label or next section)
    descriptor: Descriptor | None


@attrs.define(eq=False)
class Module:
    items: list[Statement]
    source: str = "<gcn>"
    trailing_newline: bool = True

    @property
    def target(self) -> str | None:
        """`gfx90a`, `gfx942`, ... from `.amdgcn_target`, features stripped."""
        for item in self.items:
            if type(item) is Line:
                m = re.match(r'\s*\.amdgcn_target\s+"([^"]+)"', item.text)
                if m:
                    return m.group(1).rsplit("-", 1)[-1].split(":")[0]
        return None

    def descriptors(self) -> dict[str, Descriptor]:
        return {d.kernel: d for d in self.items if type(d) is Descriptor}

    def metadata(self) -> Metadata | None:
        for item in self.items:
            if type(item) is Metadata:
                return item
        return None

    def kernels(self) -> list[Kernel]:
        """Every kernel that has a descriptor: its code runs from `NAME:` to `.Lfunc_endN:` (or the next label of a kernel)."""
        descriptors = self.descriptors()
        labels = {item.name: i for i, item in enumerate(self.items) if type(item) is Label}
        out = []
        for name, desc in descriptors.items():
            start = labels.get(name)
            if start is None:
                continue
            end = start + 1
            while end < len(self.items) and not _ends_code(self.items[end], descriptors):
                end += 1
            out.append(Kernel(name, start, end, desc))
        return out

    def kernel(self, name: str) -> Kernel | None:
        for k in self.kernels():
            if k.name == name:
                return k
        return None


def _ends_code(item: Statement, descriptors: dict) -> bool:
    if type(item) is Label:
        return item.name.startswith(".Lfunc_end") or item.name in descriptors
    if type(item) is Line:
        return bool(re.match(r"\s*\.(section|end_amdhsa_kernel|size)\b", item.text))
    return type(item) is Descriptor or type(item) is Metadata


def instructions(items: list[Statement]) -> Iterator[Instruction]:
    return (i for i in items if type(i) is Instruction)
