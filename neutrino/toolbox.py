"""The built-in tools: `neutrino list`, `-p NAME`, and "did you mean" for a mistyped name.

A tool is one file, `neutrino/tools/<name>.py` (its probe, in the DSL), and one
analysis, `neutrino/analysis/<name>.py` (spec/tools.md). Listing reads each
tool's docstring without compiling it; `-v` compiles the tools to show their
maps and fields.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TOOLS_DIR = Path(__file__).parent / "tools"


def tool_names() -> list[str]:
    return sorted(p.stem for p in TOOLS_DIR.glob("*.py") if not p.stem.startswith("_"))


def tool_path(name: str) -> Path | None:
    path = TOOLS_DIR / f"{name}.py"
    return path if name in tool_names() else None


def summary(name: str) -> str:
    """The first line of the tool's docstring, without its `name:` prefix."""
    doc = ast.get_docstring(ast.parse((TOOLS_DIR / f"{name}.py").read_text())) or ""
    first = doc.strip().split("\n", 1)[0]
    return first.split(":", 1)[1].strip() if first.startswith(f"{name}:") else first


def map_lines(name: str) -> list[str]:
    """`map NAME (type, level, cap): field:type, …` for every map of the tool, and its positions."""
    from neutrino.probefile import load_probes

    probes = load_probes(name)
    lines = []
    for spec in probes.maps.values():
        shape = spec.type if spec.type != "array" else f"array, {spec.level}, cap {spec.cap}, {spec.record_bytes} B"
        if spec.buckets is not None:
            shape += f", {spec.buckets}"
        lines.append(f"map {spec.name} ({shape}): " + ", ".join(f"{f.name}:{f.type}" for f in spec.fields))
    for probe in (p for p in probes.probes if not p.name.startswith("__")):  # not the compiler's own
        forms = [".".join(f) for f in probe.position] if not probe.at_kernel else []
        where = "kernel" if probe.at_kernel else ":".join(forms) if len(forms) <= 4 else f"{len(forms)} instruction forms"
        lines.append(f"probe {probe.name}: {where}, {probe.level} level")
    return lines


def listing(verbose: bool = False) -> str:
    names = tool_names()
    width = max(map(len, names))
    out = []
    for name in names:
        out.append(f"{name:{width}s}  {summary(name)}")
        if verbose:
            out += [f"{'':{width}s}    {line}" for line in map_lines(name)]
    return "\n".join(out) + "\n"


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
    from neutrino.probefile import load_probes, parse_probes

    if expression is not None:
        from neutrino.errors import ProbeError

        wrapped = inline_toml(expression)
        try:
            return parse_probes(wrapped, "<-e>", isa)
        except ProbeError as e:
            if wrapped == expression:
                raise
            raise ProbeError([_as_typed(d, expression, wrapped) for d in e.diagnostics]) from None
    return load_probes(probe, isa)


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
