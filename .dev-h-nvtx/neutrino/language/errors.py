"""The error every DSL problem is reported as."""

from neutrino.errors import DiagnosticError


class DslError(DiagnosticError):
    """A probe file written in the DSL that does not compile; `str()` lists
    every problem as FILE:LINE:COL: error: message, the line and a caret."""
