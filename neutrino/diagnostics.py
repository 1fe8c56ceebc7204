"""Located diagnostics: a place in a source file and a problem there, rendered compiler-style
(neutrino.errors re-exports both: `from neutrino.errors import Diagnostic, Location`).

A module of its own so that `neutrino.errors` (imported by the launcher, which runs before every
profiled program) loads attrs only when a diagnostic is made: spec/runtime.md, "Start-up and exit phases".
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Location:
    """A place in a source file; line and column are 1-based (0 = unknown)."""

    file: str = "<input>"
    line: int = 0
    column: int = 0
    text: str = ""  # the whole source line, for the caret display

    def __str__(self) -> str:
        if self.line <= 0:
            return self.file
        if self.column <= 0:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.column}"


SHOWN_LINE = 160  # characters of a source line a diagnostic shows, around its column
SHOWN_DIAGNOSTICS = 20  # an error lists this many problems, then counts the rest (clang's -ferror-limit)


def excerpt(text: str, column: int) -> tuple[str, int]:
    """The source line as shown and the caret's column in it: a long line (a generated or
    mutated one can be megabytes) is cut to SHOWN_LINE characters around the column, so that
    rendering stays linear in the input whatever the number of diagnostics on that line."""
    text = text.rstrip("\n")
    if len(text) <= SHOWN_LINE:
        return text.expandtabs(1), column
    start = max(0, min(column - 1 - SHOWN_LINE // 2, len(text) - SHOWN_LINE))
    shown = text[start:start + SHOWN_LINE].expandtabs(1)
    head, tail = ("..." if start else ""), ("..." if start + SHOWN_LINE < len(text) else "")
    return head + shown + tail, column - start + len(head) if column > 0 else 0


@attrs.frozen
class Diagnostic:
    location: Location
    message: str
    severity: str = "error"
    hint: str = ""

    def render(self) -> str:
        lines = [f"{self.location}: {self.severity}: {self.message}"]
        loc = self.location
        if loc.text:
            shown, column = excerpt(loc.text, loc.column)
            lines.append("    " + shown)
            if column > 0:
                lines.append("    " + " " * (column - 1) + "^")
        if self.hint:
            lines.append(f"    hint: {self.hint}")
        return "\n".join(lines)
