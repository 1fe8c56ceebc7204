"""Analyses of traces: one module per built-in tool, plus the report and export.

Every tool module has the same small interface:

* `MAP_NAMES` and `matches(md)`: whether a map is the tool's (by name, else by
  its fields);
* `analyze_launch(launch, md, probe_text)`: a frozen result for one launch;
* `kernel_summary(results)`: the report columns of one kernel (`{name: text}`);
* `HAS_PLOTS` and `write_plots(results, out_dir)`: the pictures written, as paths.

The numeric work lives in pure functions over numpy arrays (tested on
hand-built data); the `analyze_launch` functions only read fields from the
trace. Definitions are in spec/analysis.md.
"""

from __future__ import annotations

from neutrino.analysis import block_sched, dmat, gmem_bytes, program_progress, tensorop
from neutrino.analysis._common import AnalysisError

# Order matters for matching by fields: dmat (clock, addr) before program_progress (clock, pc).
TOOLS = (block_sched, gmem_bytes, dmat, tensorop, program_progress)


def tool_for(md):
    """The tool module that analyses map `md`, or None."""
    for tool in TOOLS:
        if md.name in tool.MAP_NAMES:
            return tool
    for tool in TOOLS:
        if tool.matches(md):
            return tool
    return None


def tool_name(tool) -> str:
    return tool.__name__.rsplit(".", 1)[-1]


__all__ = ["AnalysisError", "TOOLS", "tool_for", "tool_name"]
