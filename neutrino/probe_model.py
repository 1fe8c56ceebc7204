"""What a probe file says, once read: its probes, their snippets and positions, its maps and their fields.

The data model the probe file (neutrino.probefile) builds and the verifier, the
passes and the DSL read; it imports none of them. spec/probe-toml.md defines it.
"""

from __future__ import annotations

import re

import attrs

from neutrino.errors import Location
from neutrino.isa.interface import HELPERS, SAVE  # noqa: F401 - the probe vocabulary every ISA shares, defined there
from neutrino.isa.ptx import ir
from neutrino.maps import Buckets, stripes

LEVELS = ("thread", "warp", "block")
MAP_TYPES = ("array", "sum", "hist")
FIELD_TYPES = {"u32": 4, "u64": 8}
# Map and field names become part of PTX names (`%nt_buf_<map>`) and of result-file headers
# (spec/trace-format.md: a map's name is 64 bytes, a field's 32, each NUL-padded).
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # ASCII letters, digits, '_'
MAP_NAME_BYTES = 63
FIELD_NAME_BYTES = 31
SHOWN_NAME = 40  # characters of a refused name a message shows


def name_problem(what: str, name: str, limit: int) -> str | None:
    """Why `name` cannot name a map (`what` = "map", limit 63) or a field (31); None if it can."""
    shown = repr(name if len(name) <= SHOWN_NAME else name[:SHOWN_NAME] + "...")
    if not NAME.fullmatch(name):
        return f"{what} name {shown} is not an identifier: ASCII letters, digits and '_', not starting with a digit"
    if len(name) > limit:
        return f"{what} name {shown} is {len(name)} bytes long: a result file holds at most {limit}"
    return None


@attrs.frozen
class Field:
    name: str
    type: str  # u32 / u64
    offset: int


@attrs.define(eq=False)
class MapSpec:
    """A map: per-unit records (`array`), or per-launch u64 counters (`sum`, `hist`).

    A `sum` map's fields are its counters (all u64); a `hist` map has one
    field, `value`, the sample a SAVE gives, and `record_bytes` = 8 per bucket.
    """

    name: str
    level: str
    cap: int | str  # an int, or "count"; 1 for sum and hist maps
    fields: list[Field]
    record_bytes: int
    type: str = "array"  # one of MAP_TYPES
    buckets: Buckets | None = None  # hist maps only
    stage: str | None = None  # sum/hist maps: "block" = summed per block in shared memory, one global row (passes/shared_agg.py)

    @classmethod
    def aggregate(cls, name: str, level: str, kind: str, fields: list[str], buckets: Buckets | None = None) -> "MapSpec":
        """A sum map with these counters, or a hist map (`fields` ignored) with these buckets."""
        if kind == "hist":
            return cls(name, level, 1, [Field("value", "u64", 0)], 8 * buckets.count, "hist", buckets)
        return cls(name, level, 1, [Field(f, "u64", 8 * i) for i, f in enumerate(fields)], 8 * len(fields), "sum")

    def to_json(self) -> dict:
        out = {
            "name": self.name,
            "type": self.type,
            "level": self.level,
            "record_bytes": self.record_bytes,
            "cap": self.cap,
            "fields": [attrs.asdict(f) for f in self.fields],
        }
        if self.type == "array" and self.cap == "count":
            out["layout"] = "ring"  # one device ring per launch, no counting launch (neutrino.maps.is_ring)
        if self.buckets is not None:
            out["buckets"] = str(self.buckets)
            out["bucket_count"] = self.buckets.count
        if self.stage is not None:
            out["stage"] = self.stage
            out["rows"] = 1
        elif self.type != "array":
            out["rows"] = stripes(self.type)  # what the code indexes: sizing and readers follow it
        return out


@attrs.define(eq=False)
class Snippet:
    where: str  # "before" / "after"
    statements: list[ir.Statement]
    first_line: int  # file line of the snippet's first line


@attrs.define(eq=False)
class Probe:
    name: str
    position: str | tuple[tuple[str, ...], ...]  # "kernel" or opcode prefixes
    level: str
    before: Snippet | None
    after: Snippet | None
    map: str | None  # name of the map its SAVEs write
    line: int = 0
    datamodel_reported: bool = False  # its missing or bad datamodel is reported already: SAVEs need not repeat it
    lines: tuple = ()  # source-line ranges its position is limited to (`POSITION @ FILE:A-B`; isa/ptx/lines.py)

    @property
    def at_kernel(self) -> bool:
        return self.position == "kernel"

    def position_text(self, limit: int = 4) -> str:
        """The position as written (`ld.global:st.global`), or how many forms it names past `limit`."""
        if self.at_kernel:
            return "kernel"
        forms = [".".join(prefix) for prefix in self.position]
        return ":".join(forms) if len(forms) <= limit else f"{len(forms)} instruction forms"

    def snippets(self) -> list[Snippet]:
        return [s for s in (self.before, self.after) if s is not None]


@attrs.define(eq=False)
class ProbeFile:
    path: str
    text: str
    probes: list[Probe]
    maps: dict[str, MapSpec]
    registers: dict[str, str]  # probe register name → type, shared by all probes
    analyze_hook: str | None = None
    lines: list[str] = attrs.Factory(list)
    verified: bool = False  # set once verify_probe_file found nothing: the pipeline need not check again
    isa: str = "ptx"  # the assembly of the snippets: ptx, or gcn (neutrino/isa/gcn/snippets.py)
    tool: str | None = None  # the registered tool it is (neutrino.toolbox), None for a user's own probe file
    # what passes derive from the probes alone, computed once per file rather than once per module
    # (passes/resolve.py: the registers' readers and scratch registers), keyed by the probes it was derived from
    derived: dict = attrs.field(factory=dict, init=False, repr=False)

    def location(self, line: int, token: str | None = None) -> Location:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = text.find(token) + 1 if token and token in text else (len(text) - len(text.lstrip()) + 1 if text else 0)
        return Location(self.path, line, col, text)


class FieldNames:
    """Names for a record's fields, unique within it: `r`, then `r1`, `r2`, … for repeats.

    Linear in the number of fields: each base remembers the suffix it reached,
    so a thousand saves of one register do not rescan the names given so far.
    """

    def __init__(self) -> None:
        self.taken: set[str] = set()
        self.next_suffix: dict[str, int] = {}

    def claim(self, base: str) -> str:
        name, n = base, self.next_suffix.get(base, 1)
        if name in self.taken:
            while f"{base}{n}" in self.taken:
                n += 1
            name, n = f"{base}{n}", n + 1
        self.next_suffix[base] = n
        self.taken.add(name)
        return name


def _field_base(operand: ir.Operand) -> str:
    if isinstance(operand, (ir.Register, ir.SpecialRegister)):
        return operand.name.lstrip("%").replace(".", "_")
    if isinstance(operand, ir.Symbol):
        return operand.name.lower()
    return "f"


def layout(fields: list[tuple[str, str]], packed: bool = False) -> tuple[list[Field], int]:
    """Offsets of a record's fields.

    Explicit maps align each field to its size; compact-form records are packed
    in SAVE order, as the seed probes expect (`SAVE.u64 {a}; SAVE.u32 {b, c}`).
    """
    out, offset, widest = [], 0, 4
    for name, ftype in fields:
        size = FIELD_TYPES[ftype]
        if not packed:
            offset = (offset + size - 1) // size * size
        out.append(Field(name, ftype, offset))
        offset += size
        widest = max(widest, size)
    align = widest if not packed else 4
    return out, (offset + align - 1) // align * align
