"""Probe files: TOML (compact or explicit form) → `ProbeFile`.

The format is defined in spec/probe-toml.md. Loading checks the structure of
the file and then runs the verifier's snippet rules (neutrino/passes/verify.py),
so a bad probe is refused, with every problem located, before any kernel is
touched.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import tomlkit
from tomlkit.exceptions import ParseError as TomlParseError

from neutrino.errors import Diagnostic, Location, ProbeError
from neutrino.isa.ptx import ir, parse_statements
from neutrino.errors import ParseError

LEVELS = ("thread", "warp", "block")
FIELD_TYPES = {"u32": 4, "u64": 8}
BUILTIN_DIR = Path(__file__).parent / "probes"
TOOLS_DIR = Path(__file__).parent / "tools"
HELPERS = ("OUT", "IN1", "IN2", "IN3", "ADDR", "BYTES")
SAVE = "SAVE"


@attrs.frozen
class Field:
    name: str
    type: str  # u32 / u64
    offset: int


@attrs.define(eq=False)
class MapSpec:
    name: str
    level: str
    cap: int | str  # an int, or "count"
    fields: list[Field]
    record_bytes: int

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "level": self.level,
            "record_bytes": self.record_bytes,
            "cap": self.cap,
            "fields": [attrs.asdict(f) for f in self.fields],
        }


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

    @property
    def at_kernel(self) -> bool:
        return self.position == "kernel"

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

    def location(self, line: int, token: str | None = None) -> Location:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = text.find(token) + 1 if token and token in text else (len(text) - len(text.lstrip()) + 1 if text else 0)
        return Location(self.path, line, col, text)


# ---------------------------------------------------------------- loading


def resolve_probe_path(name_or_path: str) -> Path:
    """A path, or the name of a built-in probe (`block_sched`)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    for candidate in (BUILTIN_DIR / f"{name_or_path}.toml", TOOLS_DIR / f"{name_or_path}.py"):
        if candidate.exists():
            return candidate
    builtins = sorted({p.stem for d in (BUILTIN_DIR, TOOLS_DIR) if d.exists() for p in d.glob("*.[tp][oy]*") if not p.stem.startswith("_")})
    raise ProbeError(
        Diagnostic(Location(name_or_path), "no such probe file or built-in probe", hint="built-in probes: " + ", ".join(builtins))
    )


def load_probes(name_or_path: str) -> ProbeFile:
    path = resolve_probe_path(name_or_path)
    if path.suffix == ".py":
        from neutrino.language import compile_file

        return parse_probes(compile_file(str(path)), str(path))
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ProbeError(Diagnostic(Location(str(path)), f"cannot read probe file: {e}")) from None
    return parse_probes(text, str(path))


def parse_probes(text: str, path: str = "<probes>") -> ProbeFile:
    lines = text.splitlines()
    try:
        doc = tomlkit.parse(text).unwrap()
    except TomlParseError as e:
        line = getattr(e, "line", 0)
        col = getattr(e, "col", 0)
        loc = Location(path, line, col, lines[line - 1] if 0 < line <= len(lines) else "")
        raise ProbeError(Diagnostic(loc, f"invalid TOML: {str(e).split(' at line')[0]}")) from None
    loader = _Loader(path, text, lines)
    probe_file = loader.load(doc)
    from neutrino.passes.verify import verify_probe_file

    problems = loader.problems + verify_probe_file(probe_file)
    if problems:
        raise ProbeError(problems)
    probe_file.verified = True
    return probe_file


class _Loader:
    """Reads the TOML document, collecting every structural problem."""

    def __init__(self, path: str, text: str, lines: list[str]):
        self.path, self.text, self.lines = path, text, lines
        self.problems: list[Diagnostic] = []
        self.registers: dict[str, str] = {}
        self.register_lines: dict[str, int] = {}
        self._datamodel: dict[str, tuple] = {}  # probe name → (level, bytes, cap), compact form

    # -- locations in the TOML text
    def table_line(self, *names: str) -> int:
        header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(re.escape(n) for n in names) + r"\s*\]")
        for i, line in enumerate(self.lines, 1):
            if header.match(line):
                return i
        return 0

    def key_line(self, table_line: int, key: str) -> int:
        for i in range(max(table_line, 1), len(self.lines) + 1):
            if i > table_line and self.lines[i - 1].lstrip().startswith("["):
                break
            if re.match(rf"^\s*{re.escape(key)}\s*=", self.lines[i - 1]):
                return i
        return table_line

    def error(self, line: int, message: str, probe: str | None = None, token: str | None = None, hint: str = "") -> None:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = text.find(token) + 1 if token and token in text else (len(text) - len(text.lstrip()) + 1 if text else 0)
        prefix = f"[probe {probe}] " if probe else ""
        self.problems.append(Diagnostic(Location(self.path, line, col, text), prefix + message, hint=hint))

    # -- the document
    def load(self, doc: dict) -> ProbeFile:
        explicit = "probe" in doc or "map" in doc
        analyze_hook = doc.get("analyze_hook")
        if analyze_hook is not None and not isinstance(analyze_hook, str):
            self.error(self.key_line(0, "analyze_hook"), "analyze_hook must be a string")
            analyze_hook = None
        maps: dict[str, MapSpec] = {}
        probes: list[Probe] = []
        for key, value in doc.items():
            if key in ("analyze_hook", "description"):
                continue
            if not isinstance(value, dict):
                self.error(self.key_line(0, key), f"unknown top-level key {key!r}", hint="probes are tables: [name]")
                continue
            if explicit and key == "map":
                for name, table in value.items():
                    spec = self.load_map(name, table)
                    if spec:
                        maps[name] = spec
            elif explicit and key == "probe":
                for name, table in value.items():
                    probe = self.load_probe(name, table, self.table_line("probe", name), explicit=True)
                    if probe:
                        probes.append(probe)
            elif explicit:
                self.error(self.table_line(key), f"table [{key}] in an explicit-form file", hint="use [probe.NAME] and [map.NAME]")
            else:
                probe = self.load_probe(key, value, self.table_line(key), explicit=False)
                if probe:
                    probes.append(probe)
                    if probe.map:
                        spec = self.compact_map(probe, value)
                        if spec:
                            maps[probe.map] = spec
        if not probes and not self.problems:
            self.error(1, "the file defines no probe")
        return ProbeFile(self.path, self.text, probes, maps, dict(self.registers), analyze_hook, self.lines)

    def load_map(self, name: str, table) -> MapSpec | None:
        line = self.table_line("map", name)
        if not isinstance(table, dict):
            self.error(line, f"map {name} must be a table")
            return None
        unknown = set(table) - {"level", "fields", "cap"}
        for key in sorted(unknown):
            self.error(self.key_line(line, key), f"[map {name}] unknown key {key!r}")
        level = table.get("level")
        if level not in LEVELS:
            self.error(self.key_line(line, "level"), f"[map {name}] level must be one of {', '.join(LEVELS)}, not {level!r}")
        cap = self.parse_cap(table.get("cap", 1), self.key_line(line, "cap"), f"map {name}")
        fields_raw = table.get("fields")
        fields: list[tuple[str, str]] = []
        if not isinstance(fields_raw, list) or not fields_raw:
            self.error(self.key_line(line, "fields"), f"[map {name}] fields must be a non-empty array of \"name:type\"")
        else:
            for f in fields_raw:
                m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*):(u32|u64)", str(f))
                if not m:
                    self.error(self.key_line(line, "fields"), f"[map {name}] malformed field {f!r}", hint='write "name:u32" or "name:u64"')
                    continue
                if m.group(1) in [n for n, _ in fields]:
                    self.error(self.key_line(line, "fields"), f"[map {name}] duplicate field {m.group(1)!r}")
                fields.append((m.group(1), m.group(2)))
        if level not in LEVELS or cap is None or not fields:
            return None
        laid, size = layout(fields)
        return MapSpec(name, level, cap, laid, size)

    def parse_cap(self, cap, line: int, what: str) -> int | str | None:
        if cap in ("count", "dynamic"):
            return "count"
        if isinstance(cap, int) and not isinstance(cap, bool) and 1 <= cap <= 1 << 24:
            return cap
        if isinstance(cap, str) and cap.isdigit() and 1 <= int(cap) <= 1 << 24:
            return int(cap)
        self.error(line, f"[{what}] cap must be a positive integer or \"count\", not {cap!r}")
        return None

    def load_probe(self, name: str, table: dict, line: int, explicit: bool) -> Probe | None:
        allowed = {"position", "level", "before", "after"} | (set() if explicit else {"datamodel"})
        for key in sorted(set(table) - allowed):
            self.error(self.key_line(line, key), f"unknown key {key!r}", probe=name, hint="keys: " + ", ".join(sorted(allowed)))
        position = self.parse_position(table.get("position"), self.key_line(line, "position"), name)
        level = table.get("level")
        datamodel = None
        if not explicit and "datamodel" in table:
            datamodel = self.parse_datamodel(table["datamodel"], self.key_line(line, "datamodel"), name)
            if datamodel and level is not None and level != datamodel[0]:
                self.error(self.key_line(line, "level"), f"level {level!r} disagrees with the datamodel's {datamodel[0]!r}", probe=name)
            if datamodel:
                level = datamodel[0]
        if level is None:
            level = "thread"
        if level not in LEVELS:
            self.error(self.key_line(line, "level"), f"level must be one of {', '.join(LEVELS)}, not {level!r}", probe=name)
        snippets = {}
        for where in ("before", "after"):
            if where in table:
                snippets[where] = self.parse_snippet(name, where, table[where], self.key_line(line, where))
        if not snippets:
            self.error(line, "a probe needs a `before` or an `after` snippet", probe=name)
        # A probe with a bad position is kept (matching nothing) so that its snippets are still verified.
        probe = Probe(name, position if position is not None else (), level, snippets.get("before"), snippets.get("after"), None, line)
        saves = [s for sn in probe.snippets() for s in ir.instructions(sn.statements) if s.opcode.base == SAVE]
        if not explicit:
            if saves and datamodel is None:
                self.error(line, "SAVE needs a datamodel", probe=name, hint='add datamodel = "LEVEL:BYTES[:CAP]"')
            if datamodel is not None:
                probe.map = name
                self._datamodel[name] = datamodel
        return probe

    def parse_position(self, position, line: int, probe: str):
        if not isinstance(position, str) or not position.strip():
            self.error(line, "position is required: \"kernel\" or instruction prefixes joined by ':'", probe=probe)
            return None
        if position == "kernel":
            return "kernel"
        prefixes = []
        # ':' separates prefixes; '::' belongs to a modifier (shared::cluster)
        for part in re.split(r"(?<!:):(?!:)", position):
            if not re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+(::[a-z0-9_]+)*)*", part):
                self.error(line, f"malformed position {part!r}", probe=probe, token=part or None, hint="e.g. ld.global:st.global")
                return None
            prefixes.append(tuple(part.split(".")))
        return tuple(prefixes)

    def parse_datamodel(self, text, line: int, probe: str):
        m = re.fullmatch(r"(thread|warp|block):(\d+)(?::(\d+|count))?", str(text).strip())
        if not m:
            self.error(line, f"malformed datamodel {text!r}", probe=probe, hint="LEVEL:BYTES[:CAP], LEVEL thread|warp|block")
            return None
        nbytes = int(m.group(2))
        if nbytes <= 0 or nbytes % 4 or nbytes > 256:
            self.error(line, f"record size {nbytes} must be a positive multiple of 4, at most 256", probe=probe)
            return None
        cap = self.parse_cap(m.group(3) or 1, line, f"probe {probe}")
        return (m.group(1), nbytes, cap) if cap is not None else None

    def parse_snippet(self, probe: str, where: str, text, key_line: int) -> Snippet | None:
        if not isinstance(text, str):
            self.error(key_line, f"{where} must be a string of PTX", probe=probe)
            return None
        first_line = key_line
        raw = self.lines[key_line - 1] if 0 < key_line <= len(self.lines) else ""
        if re.search(r"=\s*(\"\"\"|''')\s*$", raw):
            first_line = key_line + 1  # TOML drops the newline right after an opening """
        try:
            statements = parse_statements(text, self.path, first_line)
        except ParseError as e:
            for d in e.diagnostics:
                loc = self.location_of(d.location.line, d.location.text.strip()[:20] or None)
                self.problems.append(attrs.evolve(d, location=loc, message=f"[probe {probe}] {d.message}"))
            return None
        for stmt in ir.walk(statements):
            decl = stmt[2]
            if isinstance(decl, ir.RegDecl):
                self.declare(decl, probe)
        return Snippet(where, statements, first_line)

    def location_of(self, line: int, token: str | None) -> Location:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = text.find(token) + 1 if token and token in text else 0
        return Location(self.path, line, col, text)

    def declare(self, decl: ir.RegDecl, probe: str) -> None:
        for name in decl.declared():
            old = self.registers.get(name)
            if old is not None and old != decl.type:
                self.error(decl.line, f"register {name} declared as .{decl.type} here but as .{old} on line {self.register_lines[name]}", probe=probe, token=name)
                continue
            self.registers[name] = decl.type
            self.register_lines.setdefault(name, decl.line)

    def compact_map(self, probe: Probe, table) -> MapSpec | None:
        level, nbytes, cap = self._datamodel.pop(probe.name)
        saving = [sn for sn in probe.snippets() if any(i.opcode.base == SAVE for i in ir.instructions(sn.statements))]
        if len(saving) > 1:
            self.error(probe.line, "SAVE may appear in `before` or in `after`, not in both", probe=probe.name)
            return None
        fields: list[tuple[str, str]] = []
        for insn in ir.instructions(saving[0].statements) if saving else []:
            if insn.opcode.base != SAVE:
                continue
            width = insn.opcode.modifiers[-1] if insn.opcode.modifiers else None
            if width not in FIELD_TYPES or len(insn.operands) != 1 or not isinstance(insn.operands[0], ir.Vector):
                continue  # the verifier reports malformed SAVEs
            for operand in insn.operands[0].items:
                fields.append((_field_name(operand, [n for n, _ in fields]), width))
        laid, size = layout(fields, packed=True)
        if size > nbytes:
            self.error(
                self.key_line(probe.line, "datamodel"),
                f"SAVE writes {size} bytes per record but the datamodel's record is {nbytes} bytes",
                probe=probe.name,
            )
        return MapSpec(probe.name, level, cap, laid, nbytes)


def _field_name(operand: ir.Operand, taken: list[str]) -> str:
    if isinstance(operand, (ir.Register, ir.SpecialRegister)):
        base = operand.name.lstrip("%").replace(".", "_")
    elif isinstance(operand, ir.Symbol):
        base = operand.name.lower()
    else:
        base = "f"
    name, n = base, 1
    while name in taken:
        name, n = f"{base}{n}", n + 1
    return name


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
