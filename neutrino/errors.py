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
            lines.append("    " + loc.text.rstrip("\n").expandtabs(1))
            if loc.column > 0:
                lines.append("    " + " " * (loc.column - 1) + "^")
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
        return "\n".join(d.render() for d in self.diagnostics)


class ParseError(DiagnosticError):
    """PTX text that we cannot parse."""


class ProbeError(DiagnosticError):
    """A probe file that is malformed or refused by the verifier."""


class InstrumentError(NeutrinoError):
    """A kernel that cannot be instrumented (for a reason not in the probe)."""
