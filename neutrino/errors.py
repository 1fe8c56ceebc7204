"""Errors and diagnostics shared by every layer.

Every error the user can cause is a `NeutrinoError`; its `str()` is the full,
human-readable report (no traceback needed). Errors that point into a source
file carry `Diagnostic`s rendered compiler-style::

    probe.toml:7:12: error: [probe block_sched] undeclared register %r1
        mov.u32 %x, %r1;
                    ^
"""

from __future__ import annotations

# Location, Diagnostic, excerpt and the SHOWN_* limits live in neutrino/diagnostics.py (attrs classes),
# loaded on first use through __getattr__: the launcher imports this module for NeutrinoError alone.
_DIAGNOSTIC_NAMES = ("Location", "Diagnostic", "excerpt", "SHOWN_LINE", "SHOWN_DIAGNOSTICS")


def __getattr__(name: str):
    if name in _DIAGNOSTIC_NAMES:
        from neutrino import diagnostics

        return getattr(diagnostics, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class NeutrinoError(Exception):
    """Base class of every error we report to users."""


class DiagnosticError(NeutrinoError):
    """One or more located problems; `str()` renders all of them."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        from neutrino.diagnostics import Diagnostic

        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics)
        super().__init__(self.render())

    def render(self) -> str:
        from neutrino.diagnostics import SHOWN_DIAGNOSTICS

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
