"""The tools: a registry of name → Tool, used by `neutrino list`, `-p NAME`, `report` and export.

A tool is one folder (spec/tools.md, "A tool's folder"): `probe.py` (its probe,
in the DSL) or `probe.toml`, `<isa>.toml` for an assembly whose probe is written
by hand (gcn.toml), `analysis.py` (what `report` does with its maps, the
interface of neutrino/analysis/__init__.py) and an optional `tool.toml`
(`analysis = "OTHER"`: another tool's analysis reads its maps). The built-in
tools are the folders of neutrino/tools/; every folder of a directory in
NEUTRINO_TOOL_PATH (os.pathsep-separated) is one more, so a tool is added
without an edit anywhere else. Listing reads each tool's docstring without
compiling it; `-v` compiles the tools to show their maps and fields.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import os
import re
import sys
from collections import namedtuple
from pathlib import Path

TOOLS_DIR = Path(__file__).parent / "tools"
TOOL_PATH_ENV = "NEUTRINO_TOOL_PATH"
PROBE_FILES = ("probe.py", "probe.toml")
MANIFEST_KEYS = ("analysis",)


class ToolError(Exception):
    """A tool folder that cannot be used (a bad tool.toml, an analysis that does not import)."""


class Tool(namedtuple("ToolFields", ("name", "folder", "probe", "analysis_of", "builtin"))):
    """One tool: its folder and what the folder holds: `probe` is probe.py (DSL) or probe.toml;
    `analysis_of` the tool whose analysis.py reads this tool's maps (itself unless tool.toml says).
    A named tuple: the launcher resolves -p with it (neither attrs nor dataclasses there)."""

    __slots__ = ()

    def probe_for(self, isa: str = "ptx") -> Path:
        """The probe for assembly `isa`: its hand-written variant (`gcn.toml`) if the folder has one."""
        variant = self.folder / f"{isa}.toml"
        return variant if isa != "ptx" and variant.is_file() else self.probe

    @property
    def analysis_path(self) -> Path:
        return self.folder.parent / self.analysis_of / "analysis.py" if self.analysis_of != self.name else self.folder / "analysis.py"

    def summary(self) -> str:
        """The first line of the probe's docstring (or a TOML probe's first comment), without its `name:` prefix."""
        text = self.probe.read_text()
        if self.probe.suffix == ".py":
            doc = ast.get_docstring(ast.parse(text)) or ""
        else:
            doc = next((line.lstrip("# ") for line in text.splitlines() if line.startswith("#")), "")
        first = doc.strip().split("\n", 1)[0]
        return first.split(":", 1)[1].strip() if first.startswith(f"{self.name}:") else first


def search_path() -> list[Path]:
    """The built-in tools' directory, then NEUTRINO_TOOL_PATH's directories, in that order."""
    extra = [Path(p) for p in os.environ.get(TOOL_PATH_ENV, "").split(os.pathsep) if p]
    return [TOOLS_DIR, *extra]


def registry() -> dict[str, Tool]:
    """name → Tool over the search path; a name found twice is the first one's (built-ins first)."""
    return dict(_registry(tuple(search_path())))


@functools.lru_cache(maxsize=8)  # one directory scan per search path: report asks once per map of a launch
def _registry(directories: tuple[Path, ...]) -> dict[str, Tool]:
    tools: dict[str, Tool] = {}
    for directory in directories:
        if not directory.is_dir():
            continue
        for folder in sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
            probe = next((folder / f for f in PROBE_FILES if (folder / f).is_file()), None)
            if probe is None or folder.name in tools:
                continue
            tools[folder.name] = Tool(folder.name, folder, probe, _analysis_of(folder), directory == TOOLS_DIR)
    return tools


def _analysis_of(folder: Path) -> str:
    manifest = folder / "tool.toml"
    if not manifest.is_file():
        return folder.name
    import tomllib

    try:
        doc = tomllib.loads(manifest.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ToolError(f"{manifest}: {e}") from None
    unknown = sorted(set(doc) - set(MANIFEST_KEYS))
    if unknown:
        raise ToolError(f"{manifest}: unknown key {unknown[0]!r} (keys: {', '.join(MANIFEST_KEYS)})")
    other = doc.get("analysis", folder.name)
    if not isinstance(other, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", other):
        raise ToolError(f"{manifest}: analysis must name a tool, not {other!r}")
    return other


def tool_names() -> list[str]:
    return sorted(registry())


def get(name: str) -> Tool | None:
    """The tool `name` as the registry has it (the first folder of that name on the search path),
    found by looking at that folder in each directory, not by scanning every tool: `-p NAME` runs
    before every profiled program, and only this tool's manifest is read (tomllib imported only
    for a tool that has one)."""
    if not name or name.startswith(("_", ".")) or "/" in name or os.sep in name:
        return None
    for directory in search_path():
        folder = directory / name
        if folder.is_dir():
            probe = next((folder / f for f in PROBE_FILES if (folder / f).is_file()), None)
            if probe is not None:
                return Tool(name, folder, probe, _analysis_of(folder), directory == TOOLS_DIR)
    return None


def tool_path(name: str, isa: str = "ptx") -> Path | None:
    tool = get(name)
    return tool.probe_for(isa) if tool is not None else None


def tool_of_path(path: str | os.PathLike) -> Tool | None:
    """The tool whose probe (or an ISA variant of it) is the file at `path`, or None for a user's own file."""
    try:
        resolved = Path(path).resolve()
    except OSError:
        return None
    folder = resolved.parent
    tool = get(folder.name)
    if tool is None or tool.folder.resolve() != folder:
        return None
    return tool if resolved.name in PROBE_FILES or resolved.suffix == ".toml" and resolved.name != "tool.toml" else None


def analysis(tool: Tool):
    """The analysis module that reads `tool`'s maps, or None if it has none.

    Built-in tools' analyses import as neutrino.tools.<name>.analysis; another
    folder's is loaded from its file once (sys.modules keeps it, as any import)."""
    path = tool.analysis_path
    if not path.is_file():
        return None
    if tool.builtin:
        return importlib.import_module(f"neutrino.tools.{tool.analysis_of}.analysis")
    module_name = f"neutrino_tool_{tool.analysis_of}_analysis"
    module = sys.modules.get(module_name)
    if module is not None and getattr(module, "__file__", None) == str(path):
        return module
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - a user's analysis must fail as one line, not a traceback
        del sys.modules[module_name]
        raise ToolError(f"{path}: cannot load the analysis of tool {tool.name}: {type(e).__name__}: {e}") from None
    return module


def summary(name: str) -> str:
    return registry()[name].summary()


def map_lines(name: str) -> list[str]:
    """`map NAME (type, level, cap): field:type, …` for every map of the tool, and its positions."""
    probes = load_tool(name)
    lines = []
    for spec in probes.maps.values():
        shape = spec.type if spec.type != "array" else f"array, {spec.level}, cap {spec.cap}, {spec.record_bytes} B"
        if spec.buckets is not None:
            shape += f", {spec.buckets}"
        lines.append(f"map {spec.name} ({shape}): " + ", ".join(f"{f.name}:{f.type}" for f in spec.fields))
    for probe in (p for p in probes.probes if not p.name.startswith("__")):  # not the compiler's own
        where = "kernel" if probe.at_kernel else probe.position_text()
        lines.append(f"probe {probe.name}: {where}, {probe.level} level")
    return lines


def listing(verbose: bool = False) -> str:
    tools = registry()
    width = max(map(len, tools))
    out = []
    for name in sorted(tools):
        out.append(f"{name:{width}s}  {tools[name].summary()}")
        if verbose:
            out += [f"{'':{width}s}    {line}" for line in map_lines(name)]
    return "\n".join(out) + "\n"


def load_tool(name_or_path: str, isa: str = "ptx"):
    """The ProbeFile of a tool's name or of a probe file's path, compiled for `isa`; it names its tool.

    The probe file (neutrino.probefile) knows nothing of tools or of the DSL:
    this is the one place where a name becomes a file and a DSL file becomes TOML."""
    from neutrino.probefile import load_probe_file, parse_probes

    path = resolve_probe_path(name_or_path, isa)
    tool = tool_of_path(path)
    if path.suffix == ".py":
        from neutrino.language import compile_file

        probes = parse_probes(compile_file(str(path), backend=isa), str(path), isa)
    else:
        probes = load_probe_file(path, isa)
    probes.tool = tool.name if tool is not None else None
    return probes


def resolve_probe_path(name_or_path: str, isa: str = "ptx") -> Path:
    """The file `-p NAME|FILE` stands for: the file itself, else the tool's probe for `isa`."""
    path = Path(name_or_path)
    if path.exists():
        return path
    tool = get(name_or_path)
    if tool is None:
        _no_such_tool(name_or_path)
    return tool.probe_for(isa)


def tool_record(path: str | os.PathLike, text: str) -> dict:
    """The `start` event's `tool` and `tool_maps` (spec/trace-format.md) for the probe file at `path`
    whose TOML is `text`: read without the probe parser, so a run that defers parsing can say it."""
    tool = tool_of_path(path) if path else None
    if tool is None:
        return {"tool": None, "tool_maps": []}
    import tomllib

    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        doc = {}
    maps = doc.get("map") if isinstance(doc.get("map"), dict) else {
        name: table for name, table in doc.items() if isinstance(table, dict) and "datamodel" in table}
    return {"tool": tool.name, "tool_maps": sorted(maps)}


def _no_such_tool(name: str):
    from neutrino.console import did_you_mean
    from neutrino.errors import Diagnostic, Location, ProbeError

    names = tool_names()
    raise ProbeError(Diagnostic(Location(name), "no such probe file or built-in tool" + did_you_mean(name, names),
                                hint="built-in tools (neutrino list): " + ", ".join(names)))


INLINE_NAME = "inline"


def inline_toml(text: str) -> str:
    """The probe file an `-e TEXT` stands for (README, "One-off probes").

    TEXT is probe TOML (spec/probe-toml.md). When it is only the keys of one
    probe (`position = "…", before = "…"`, comma-separated on one line), it is the
    probe `inline`: the text becomes the inline table `inline = { TEXT }`.
    """
    if re.search(r"^\s*\[", text, re.M) or re.match(r"\s*[A-Za-z_][\w-]*\s*=\s*\{", text):
        return text
    return f"{INLINE_NAME} = {{ {text.strip()} }}"


def load_probe_argument(probe: str | None, expression: str | None, isa: str = "ptx"):
    """The ProbeFile of `-p PROBE` (a file or a built-in tool) or of `-e TEXT`, for `isa` (ptx or gcn)."""
    from neutrino.probefile import parse_probes

    if expression is not None:
        from neutrino.errors import ProbeError

        wrapped = inline_toml(expression)
        try:
            return parse_probes(wrapped, "<-e>", isa)
        except ProbeError as e:
            if wrapped == expression:
                raise
            raise ProbeError([_as_typed(d, expression, wrapped) for d in e.diagnostics]) from None
    return load_tool(probe, isa)


def _as_typed(diagnostic, expression: str, wrapped: str):
    """A diagnostic on the first line of `inline = { TEXT }` pointed at TEXT as the user typed it:
    the line shown is theirs and the column counts in it (README, "One-off probes")."""
    import attrs

    location = diagnostic.location
    if location.line != 1:
        return diagnostic
    shift = wrapped.index(expression.strip()) - (len(expression) - len(expression.lstrip()))
    column = max(1, location.column - shift) if location.column > 0 else 0
    typed = expression.split("\n", 1)[0]
    return attrs.evolve(diagnostic, location=attrs.evolve(location, column=column, text=typed))


# The probe of `-p NAME|FILE` and of every caller that names a tool or a file.
load_probes = load_tool
