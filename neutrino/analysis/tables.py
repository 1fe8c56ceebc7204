"""Text the analyses print: tables padded to their columns, names cut short; and the trace they read."""

from __future__ import annotations

import os
from collections.abc import Sequence

from neutrino.analysis import _common as C
from neutrino.errors import NeutrinoError


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[int] = (0,)) -> str:
    """Columns padded to their widest cell; columns `left` left-aligned, others right."""
    cells = [list(map(str, headers))] + [list(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def short(name: str, limit: int = 48) -> str:
    return name if len(name) <= limit else name[:limit - 3] + "..."


def load_trace(trace_dir: str):
    """`neutrino.trace.load`, with every failure turned into an AnalysisError."""
    if not os.path.exists(trace_dir):
        raise C.AnalysisError(f"{trace_dir}: no such trace directory")
    try:
        from neutrino import trace as trace_mod

        trace = trace_mod.load(trace_dir)
        launches = list(trace.launches)
    except NeutrinoError as e:
        raise C.AnalysisError(f"{trace_dir}: cannot read trace: {e}") from e
    except Exception as e:  # noqa: BLE001 - a bad trace must never show a traceback
        raise C.AnalysisError(f"{trace_dir}: cannot read trace: {type(e).__name__}: {e}") from e
    return trace, launches
