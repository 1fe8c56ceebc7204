"""Errors and diagnostics shared by every layer.

Every error the user can cause is a `NeutrinoError`; its `str()` is the full,
human-readable report (no traceback needed). Errors that point into a source
file carry `Diagnostic`s rendered compiler-style::

    probe.toml:7:12: error: [probe block_sched] undeclared register %r1
        mov.u32 %x, %r1;
                    ^
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


class NeutrinoError(Exception):
    """Base class of every error we report to users."""


class DiagnosticError(NeutrinoError):
    """One or more located problems; `str()` renders all of them."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics)
        super().__init__(self.render())

    def render(self) -> str:
        shown = [d.render() for d in self.diagnostics[:SHOWN_DIAGNOSTICS]]
        more = len(self.diagnostics) - len(shown)
        if more > 0:
            shown.append(f"... and {more} more error(s) not shown (the first {SHOWN_DIAGNOSTICS} are)")
        return "\n".join(shown)


class ParseError(DiagnosticError):
    """PTX text that we cannot parse."""


class ProbeError(DiagnosticError):
    """A probe file that is malformed or refused by the verifier."""


class InstrumentError(NeutrinoError):
    """A kernel that cannot be instrumented (for a reason not in the probe)."""
