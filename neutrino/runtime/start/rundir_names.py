"""Names of run directories (spec/trace-format.md), with the standard library only: the launcher
needs them before the program starts, and importing the trace layout would cost it numpy."""

from __future__ import annotations

import time

ENV_JOB = "NEUTRINO_JOB"  # set by the launcher for its children: the job directory's name


def run_dir_name(start: float, pid: int) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(start))
    return f"{stamp}_{pid}"


def rank_dir_name(rank: int) -> str:
    return f"rank{rank}"
