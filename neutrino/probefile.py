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
import tomllib

from neutrino.errors import Diagnostic, Location, ProbeError
from neutrino.isa.interface import HELPERS, SAVE  # the probe vocabulary every ISA shares; names kept here too
from neutrino.isa.ptx import ir, parse_statements
from neutrino.errors import ParseError
from neutrino.maps import Buckets
from neutrino.probe_model import (  # noqa: F401 - the model's names, re-exported for callers of neutrino.probefile
    FIELD_NAME_BYTES, FIELD_TYPES, HELPERS, LEVELS, MAP_NAME_BYTES, MAP_TYPES, NAME, SAVE, SHOWN_NAME, Field,
    FieldNames, MapSpec, Probe, ProbeFile, Snippet, _field_base, layout, name_problem)

#: snippet languages read as AMDGPU assembly (neutrino/isa/gcn/snippets.py): CDNA's gcn and RDNA's rdna
AMDGPU_SNIPPETS = ("gcn", "rdna")

# ---------------------------------------------------------------- loading


def load_probe_file(path: str | Path, isa: str = "ptx") -> ProbeFile:
    """The TOML probe file at `path` (a tool's name, or a DSL file: neutrino.toolbox.load_probes)."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ProbeError(Diagnostic(Location(str(path)), f"cannot read probe file: {e}")) from None
    return parse_probes(text, str(path), isa)


_TOML_ERROR_AT = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)$")


def _toml_error(e: tomllib.TOMLDecodeError, path: str, lines: list[str]) -> ProbeError:
    """tomllib's message, located: its `(at line L, column C)` becomes FILE:L:C and the line shown."""
    raw = str(e)
    at = _TOML_ERROR_AT.search(raw)
    message = raw[: at.start()] if at else raw
    line, column = (int(at.group(1)), int(at.group(2))) if at and at.group(1) else (len(lines), 0)
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    hint = ""
    key = _TOML_KEY_LINE_RE.match(text)
    if message == "Cannot overwrite a value" and key:  # a key written twice in one table (a copy-paste slip)
        message, column = f"key {_unquote(key.group(1))!r} appears twice in the same table", 1
        hint = "remove or rename one of them"
    elif message.startswith("Cannot declare"):
        message, hint = f"table {text.strip()} appears twice", "merge the two tables"
    return ProbeError(Diagnostic(Location(path, line, column, text), f"invalid TOML: {message}", hint=hint))


def _first_deep_line(lines: list[str], limit: int = 100) -> int:
    """The first line where `[`/`{` nest more than `limit` deep (strings not skipped: only to point at the line)."""
    depth = 0
    for number, line in enumerate(lines, 1):
        for c in line:
            depth += 1 if c in "[{" else -1 if c in "]}" else 0
            if depth > limit:
                return number
    return 0


# Probe files are a few kilobytes; the TOML reader's time on megabytes of mutated text is not ours to
# bound, so larger files are refused before reading (spec/probe-toml.md, "Errors").
MAX_PROBE_FILE_BYTES = 1 << 20


def parse_probes(text: str, path: str = "<probes>", isa: str = "ptx") -> ProbeFile:
    if len(text) > MAX_PROBE_FILE_BYTES:
        raise ProbeError(Diagnostic(Location(path), f"probe file of {len(text):,} characters: the limit is "
                                    f"{MAX_PROBE_FILE_BYTES:,} (1 MiB)"))
    # TOML lines end at "\n" only (splitlines would also split at \x0c, \x1c, \u2028, ...).
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    try:
        # tomllib, not tomlkit: ten times faster on large files, and we only read the document.
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _toml_error(e, path, lines) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        line = _first_deep_line(lines)
        raise ProbeError(Diagnostic(Location(path, line, 0, lines[line - 1] if 0 < line <= len(lines) else ""),
                                    "invalid TOML: arrays or inline tables nested too deeply")) from None
    if isa not in ("ptx", *AMDGPU_SNIPPETS):
        raise ProbeError(Diagnostic(Location(path), f"unknown assembly {isa!r} (known: gcn, ptx, rdna)"))
    loader = _Loader(path, text, lines, isa)
    probe_file = loader.load(doc)
    probe_file.isa = isa
    if isa in AMDGPU_SNIPPETS:
        from neutrino.isa.gcn.verify import verify_probe_file
    else:
        from neutrino.passes.verify import verify_probe_file

    problems = loader.problems + verify_probe_file(probe_file)
    if problems:
        raise ProbeError(problems)
    probe_file.verified = True
    return probe_file


_TOML_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_TOML_HEADER_RE = re.compile(rf"\s*\[\[?\s*({_TOML_KEY}(?:\s*\.\s*{_TOML_KEY})*)\s*\]")
_TOML_KEY_LINE_RE = re.compile(rf"\s*({_TOML_KEY})\s*=")


class _TomlLines:
    """Where each table header and each key of a TOML text is, found in one pass over its lines.

    Only for pointing diagnostics at a line: tomllib has parsed the document
    already. Lines inside multi-line strings (snippets) are skipped.
    """

    def __init__(self, lines: list[str]):
        self.headers: dict[tuple[str, ...], int] = {}  # key path → line of its first [header]
        self.header_names: dict[int, tuple[str, ...]] = {}  # header line → its key path
        self.keys: dict[tuple[int, str], int] = {}  # (header line, 0 at the top; key) → line
        table, quote = 0, None
        for number, line in enumerate(lines, 1):
            if quote is not None:
                if line.count(quote) % 2:
                    quote = None
                continue
            header = _TOML_HEADER_RE.match(line)
            if header:
                table = number
                names = tuple(_unquote(k) for k in re.findall(_TOML_KEY, header.group(1)))
                self.headers.setdefault(names, number)
                self.header_names[number] = names
            else:
                key = _TOML_KEY_LINE_RE.match(line)
                if key:
                    self.keys.setdefault((table, _unquote(key.group(1))), number)
            quote = _opens_multiline_string(line)

    def table_line(self, names: tuple[str, ...]) -> int:
        """The line of table `names` ([a.b]), or of its key in the parent table (a = {...}); 0 if not found."""
        line = self.headers.get(names)
        if line is None and names:
            parent = self.headers.get(names[:-1], 0) if len(names) > 1 else 0
            line = self.keys.get((parent, names[-1]), 0)
        return line

    def key_line(self, table_line: int, key: str) -> int:
        """The line of `key` in the table whose header is on `table_line` (or of its [sub.table]); else that line."""
        line = self.keys.get((table_line, key))
        if line is None:
            line = self.headers.get(self.header_names.get(table_line, ()) + (key,), table_line)
        return line


def _unquote(key: str) -> str:
    if key[:1] == '"' and "\\" in key:  # a basic string with escapes ("m\u0000x"): as TOML reads it
        try:
            return tomllib.loads(f"k = {key}")["k"]
        except (tomllib.TOMLDecodeError, KeyError):
            pass
    return key[1:-1] if key[:1] in "\"'" and len(key) >= 2 else key


def _opens_multiline_string(line: str) -> str | None:
    """The delimiter of a multi-line string this line opens and leaves open, if any."""
    found = [(line.find(q), q) for q in ('"""', "'''") if q in line]
    if not found:
        return None
    _, quote = min(found)
    return quote if line.count(quote) % 2 else None


class _Loader:
    """Reads the TOML document, collecting every structural problem."""

    def __init__(self, path: str, text: str, lines: list[str], isa: str = "ptx"):
        self.path, self.text, self.lines, self.isa = path, text, lines, isa
        self.problems: list[Diagnostic] = []
        self.registers: dict[str, str] = {}
        self.register_lines: dict[str, int] = {}
        self._datamodel: dict[str, _Datamodel] = {}  # probe name → its datamodel, compact form
        self.line_ranges: dict[str, tuple] = {}  # probe name → its `@ lines` ranges, until its Probe exists
        self.index = _TomlLines(lines)

    # -- locations in the TOML text (an index built in one pass: lookups stay linear in the file)
    def table_line(self, *names: str) -> int:
        return self.index.table_line(names)

    def key_line(self, table_line: int, key: str) -> int:
        return self.index.key_line(table_line, key)

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
        problem = name_problem("map", name, MAP_NAME_BYTES)
        if problem:
            self.error(line, problem, token=name)
            return None
        if not isinstance(table, dict):
            self.error(line, f"map {name} must be a table")
            return None
        kind = table.get("type", "array")
        if kind not in MAP_TYPES:
            self.error(self.key_line(line, "type"), f"[map {name}] type must be one of {', '.join(MAP_TYPES)}, not {kind!r}")
            return None
        if kind != "array":
            return self.load_aggregate_map(name, table, line, kind)
        unknown = set(table) - {"level", "fields", "cap", "type"}
        for key in sorted(unknown):
            from neutrino.console import did_you_mean

            self.error(self.key_line(line, key), f"[map {name}] unknown key {key!r}"
                       f"{did_you_mean(key, ('level', 'fields', 'cap', 'type'))}", token=key)
        level = table.get("level")
        if level not in LEVELS:
            self.error(self.key_line(line, "level"), f"[map {name}] level must be one of {', '.join(LEVELS)}, not {level!r}")
        cap = self.parse_cap(table.get("cap", 1), self.key_line(line, "cap"), f"map {name}")
        fields = self.parse_fields(name, table.get("fields"), line)
        if level not in LEVELS or cap is None or not fields:
            return None
        laid, size = layout(fields)
        return MapSpec(name, level, cap, laid, size)

    def parse_fields(self, name: str, fields_raw, line: int) -> list[tuple[str, str]]:
        fields: list[tuple[str, str]] = []
        if not isinstance(fields_raw, list) or not fields_raw:
            self.error(self.key_line(line, "fields"), f"[map {name}] fields must be a non-empty array of \"name:type\"")
            return fields
        seen: set[str] = set()
        for f in fields_raw:
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*):(u32|u64)", str(f))
            if not m:
                self.error(self.key_line(line, "fields"), f"[map {name}] malformed field {f!r}", hint='write "name:u32" or "name:u64"')
                continue
            problem = name_problem("field", m.group(1), FIELD_NAME_BYTES)
            if problem:
                self.error(self.key_line(line, "fields"), f"[map {name}] {problem}", token=m.group(1))
                continue
            if m.group(1) in seen:
                self.error(self.key_line(line, "fields"), f"[map {name}] duplicate field {m.group(1)!r}")
            seen.add(m.group(1))
            fields.append((m.group(1), m.group(2)))
        return fields

    def load_aggregate_map(self, name: str, table: dict, line: int, kind: str) -> MapSpec | None:
        """`type = "sum"` (u64 `fields`) or `type = "hist"` (`buckets`): counters per launch, no cap."""
        allowed = {"type", "level", "stage"} | ({"fields"} if kind == "sum" else {"buckets"})
        from neutrino.console import did_you_mean

        for key in sorted(set(table) - allowed):
            hint = "sum and hist maps have no cap: they hold one set of counters per launch" if key == "cap" else ""
            self.error(self.key_line(line, key), f"[map {name}] unknown key {key!r} for a {kind} map"
                       + (did_you_mean(key, allowed) if key != "cap" else ""), hint=hint, token=key)
        level = table.get("level", "thread")
        if level not in LEVELS:
            self.error(self.key_line(line, "level"), f"[map {name}] level must be one of {', '.join(LEVELS)}, not {level!r}")
            return None
        stage = table.get("stage")
        if stage is not None and stage != "block":
            self.error(self.key_line(line, "stage"), f"[map {name}] stage must be \"block\" (counters summed per block in "
                       f"shared memory), not {stage!r}", token="stage")
            return None
        spec = self.aggregate_spec(name, table, line, kind, level)
        if spec is not None:
            spec.stage = stage
        return spec

    def aggregate_spec(self, name: str, table: dict, line: int, kind: str, level: str) -> MapSpec | None:
        if kind == "hist":
            buckets = self.parse_buckets(table.get("buckets"), self.key_line(line, "buckets"), f"map {name}")
            return MapSpec.aggregate(name, level, "hist", [], buckets) if buckets else None
        fields = self.parse_fields(name, table.get("fields"), line)
        for field, ftype in fields:
            if ftype != "u64":
                self.error(self.key_line(line, "fields"), f"[map {name}] field {field!r} of a sum map must be u64", token=field)
        if not fields or len(fields) != len({f for f, _ in fields}) or any(t != "u64" for _, t in fields):
            return None
        return MapSpec.aggregate(name, level, "sum", [f for f, _ in fields])

    def parse_buckets(self, text, line: int, what: str) -> Buckets | None:
        if text is None:
            self.error(line, f"[{what}] a hist map needs buckets = \"log2\" or \"linear:MIN:MAX:STEP\"")
            return None
        try:
            buckets = Buckets.parse(text)
        except ValueError as e:
            self.error(line, f"[{what}] {e}")
            return None
        return buckets

    def parse_cap(self, cap, line: int, what: str) -> int | str | None:
        if cap in ("count", "dynamic"):
            return "count"
        if isinstance(cap, int) and not isinstance(cap, bool) and 1 <= cap <= 1 << 24:
            return cap
        if isinstance(cap, str) and cap.isascii() and cap.isdigit() and 1 <= int(cap) <= 1 << 24:
            return int(cap)
        self.error(line, f"[{what}] cap must be a positive integer or \"count\", not {cap!r}")
        return None

    def load_probe(self, name: str, table, line: int, explicit: bool) -> Probe | None:
        if not isinstance(table, dict):
            self.error(line, "a probe must be a table", probe=name, hint=f"write [probe.{name}] with position and before/after")
            return None
        allowed = {"position", "level", "before", "after"} | (set() if explicit else {"datamodel"})
        from neutrino.console import did_you_mean

        unknown = sorted(set(table) - allowed)
        for key in unknown:
            self.error(self.key_line(line, key), f"unknown key {key!r}{did_you_mean(key, allowed)}", probe=name,
                       token=key, hint="keys: " + ", ".join(sorted(allowed)))
        position = self.parse_position(table.get("position"), self.key_line(line, "position"), name)
        level = table.get("level")
        datamodel = None
        if not explicit and "datamodel" in table:
            datamodel = self.parse_datamodel(table["datamodel"], self.key_line(line, "datamodel"), name)
            if datamodel and datamodel.level is not None:
                if level is not None and level != datamodel.level:
                    self.error(self.key_line(line, "level"), f"level {level!r} disagrees with the datamodel's {datamodel.level!r}", probe=name)
                level = datamodel.level
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
        probe.lines = self.line_ranges.pop(name, ())
        saves = [s for sn in probe.snippets() for s in ir.instructions(sn.statements) if s.opcode.base == SAVE]
        if not explicit:
            if saves and datamodel is None:
                # One error per cause: a malformed or misspelled datamodel was reported above already.
                misspelled = any(did_you_mean(key, ["datamodel"]) for key in unknown)
                if "datamodel" not in table and not misspelled:
                    self.error(line, "SAVE needs a datamodel", probe=name, hint='add datamodel = "LEVEL:BYTES[:CAP]", "sum" or "hist:log2"')
                probe.datamodel_reported = True
            if datamodel is not None:
                probe.map = name
                self._datamodel[name] = datamodel
        return probe

    def parse_position(self, position, line: int, probe: str):
        if not isinstance(position, str) or not position.strip():
            self.error(line, "position is required: \"kernel\", or instruction prefixes and #selectors joined by ':'",
                       probe=probe)
            return None
        if "@" in position:
            position, ranges = self.parse_line_selection(position, line, probe)
            if ranges is None:
                return None
        if position == "kernel":
            return "kernel"
        prefixes = []
        # ':' separates prefixes; '::' belongs to a modifier (shared::cluster)
        for part in re.split(r"(?<!:):(?!:)", position):
            if not re.fullmatch(r"#?[a-z][a-z0-9_]*(\.[a-z0-9_]+(::[a-z0-9_]+)*)*", part):
                self.error(line, f"malformed position {part!r}", probe=probe, token=part or None,
                           hint="e.g. ld.global:st.global, or #memory.global")
                return None
            prefixes.append(tuple(part.split(".")))
        if self.isa == "ptx" and not self.known_position(prefixes, line, probe):
            return None
        if self.isa in AMDGPU_SNIPPETS and not self.known_amdgpu_position(prefixes, line, probe):
            return None
        return tuple(prefixes)

    def parse_line_selection(self, position: str, line: int, probe: str):
        """`POSITION @ [FILE:]A[-B],…`: the position's instructions whose source line is in a range."""
        from neutrino.isa.ptx.lines import parse_line_ranges

        head, _, text = position.partition("@")
        head = head.strip()
        if head == "kernel":
            self.error(line, "a line range selects instructions: not with position \"kernel\"", probe=probe, token=text.strip())
            return head, None
        try:
            self.line_ranges[probe] = parse_line_ranges(text.strip())
        except ValueError as e:
            self.error(line, str(e), probe=probe, token=text.strip() or None)
            return head, None
        return head, self.line_ranges[probe]

    def known_position(self, prefixes: list[tuple[str, ...]], line: int, probe: str) -> bool:
        """Each part names a PTX opcode and modifiers that exist, or a selector of the semantics table:
        a typo (`ld.globl`, `#memroy`) would match nothing, silently."""
        from neutrino.isa.ptx.semantics import SELECTORS, position_problem

        from neutrino.isa.ptx.lines import LINE_POSITIONS

        known = True
        for components in prefixes:
            if len(components) == 1 and components[0] in LINE_POSITIONS:
                continue
            found = position_problem(components)
            if found is None:
                continue
            known = False
            message, close = found
            hint = ("did you mean " + " or ".join(f"'{c}'" for c in close) + "?") if close else \
                "e.g. ld.global, st.shared, mma, kernel, or a selector: " + ", ".join("#" + s for s in SELECTORS)
            self.error(line, f"position {'.'.join(components)!r}: {message}", probe=probe,
                       token=".".join(components), hint=hint)
        return known

    def known_amdgpu_position(self, prefixes: list[tuple[str, ...]], line: int, probe: str) -> bool:
        """Each part starts a mnemonic of the generation or is a portable PTX position (isa/gcn/positions.py)."""
        from neutrino.isa.gcn.positions import DIALECTS, position_problem

        problems = [(c, found) for c in prefixes if (found := position_problem(c, DIALECTS[self.isa])) is not None]
        for components, (message, close) in problems:
            hint = ("did you mean " + " or ".join(f"'{c}'" for c in close) + "?") if close else \
                "e.g. global_load_, ds_write, v_mfma_, s_cbranch_, kernel, or a portable ld.global, #memory.global"
            self.error(line, f"position {'.'.join(components)!r}: {message}", probe=probe,
                       token=".".join(components), hint=hint)
        return not problems

    def parse_datamodel(self, text, line: int, probe: str) -> "_Datamodel | None":
        text = str(text).strip()
        if text == "sum":
            return _Datamodel("sum", None, 0, 1)
        if text.startswith("hist:"):
            buckets = self.parse_buckets(text[len("hist:"):], line, f"probe {probe}")
            return _Datamodel("hist", None, 0, 1, buckets) if buckets else None
        m = re.fullmatch(r"(thread|warp|block):([0-9]+)(?::([0-9]+|count))?", text)  # ASCII digits only
        if not m:
            digits = "; numbers take the ASCII digits 0-9" if any(c.isdigit() and not c.isascii() for c in text) else ""
            self.error(line, f"malformed datamodel {text!r}{digits}", probe=probe, token=text or None,
                       hint="LEVEL:BYTES[:CAP] (LEVEL thread|warp|block), sum, hist:log2 or hist:linear:MIN:MAX:STEP")
            return None
        nbytes = int(m.group(2))
        if nbytes <= 0 or nbytes % 4 or nbytes > 256:
            self.error(line, f"record size {nbytes} must be a positive multiple of 4, at most 256", probe=probe)
            return None
        cap = self.parse_cap(m.group(3) or 1, line, f"probe {probe}")
        return _Datamodel("array", m.group(1), nbytes, cap) if cap is not None else None

    def parse_snippet(self, probe: str, where: str, text, key_line: int) -> Snippet | None:
        if not isinstance(text, str):
            self.error(key_line, f"{where} must be a string of {self.isa.upper()}", probe=probe)
            return None
        first_line = key_line
        raw = self.lines[key_line - 1] if 0 < key_line <= len(self.lines) else ""
        if re.search(r"=\s*(\"\"\"|''')\s*$", raw):
            first_line = key_line + 1  # TOML drops the newline right after an opening """
        try:
            if self.isa in AMDGPU_SNIPPETS:
                from neutrino.isa.gcn.snippets import parse_snippet

                statements = parse_snippet(text, self.path, first_line)
            else:
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
        datamodel = self._datamodel.pop(probe.name)
        problem = name_problem("map", probe.name, MAP_NAME_BYTES)
        if problem:
            self.error(probe.line, f"{problem} (a probe with a datamodel names its map)", probe=probe.name, token=probe.name)
            return None
        saving = [sn for sn in probe.snippets() if any(i.opcode.base == SAVE for i in ir.instructions(sn.statements))]
        if len(saving) > 1:
            self.error(probe.line, "SAVE may appear in `before` or in `after`, not in both", probe=probe.name)
            return None
        fields: list[tuple[str, str]] = []
        names = FieldNames()
        for insn in ir.instructions(saving[0].statements) if saving else []:
            if insn.opcode.base != SAVE:
                continue
            width = insn.opcode.modifiers[-1] if insn.opcode.modifiers else None
            if width not in FIELD_TYPES or len(insn.operands) != 1 or not isinstance(insn.operands[0], ir.Vector):
                continue  # the verifier reports malformed SAVEs
            if datamodel.kind != "array" and width != "u64":
                self.error(insn.line, f"a {datamodel.kind} datamodel takes SAVE.u64: it adds u64 values", probe=probe.name, token="SAVE")
            for operand in insn.operands[0].items:
                field = names.claim(_field_base(operand))
                problem = name_problem("field", field, FIELD_NAME_BYTES)
                if problem:  # named after the register saved: the hint says what to rename
                    self.error(insn.line, problem, probe=probe.name, token=str(operand), hint="the field is named after the saved register: rename the register")
                fields.append((field, width))
        if datamodel.kind == "hist":
            if len(fields) != 1:
                self.error(probe.line, f"a hist datamodel records one value per SAVE, not {len(fields)}", probe=probe.name)
            return MapSpec.aggregate(probe.name, probe.level, "hist", [], datamodel.buckets)
        if datamodel.kind == "sum":
            return MapSpec.aggregate(probe.name, probe.level, "sum", [n for n, _ in fields]) if fields else None
        laid, size = layout(fields, packed=True)
        if size > datamodel.nbytes:
            self.error(
                self.key_line(probe.line, "datamodel"),
                f"SAVE writes {size} bytes per record but the datamodel's record is {datamodel.nbytes} bytes",
                probe=probe.name,
            )
        return MapSpec(probe.name, datamodel.level, datamodel.cap, laid, datamodel.nbytes)


@attrs.frozen
class _Datamodel:
    """A compact-form datamodel: `LEVEL:BYTES[:CAP]`, `sum` or `hist:BUCKETS` (level from the probe)."""

    kind: str
    level: str | None
    nbytes: int
    cap: int | str
    buckets: Buckets | None = None
