"""The `neutrino` command's exit after a profiled program: the interpreter's own teardown skipped.

Once the launcher has printed its last line, what is left of its process is the interpreter's
finalisation (modules freed, garbage collected): 12 ms on the CPU machine, 13-45 ms measured on the
GPU machine (docs/startup.md), paid after the program on every run and timed by no phase. The
launcher holds no open file, thread or child by then, so `exit_now` runs the exit handlers that were
registered (coverage's data file among them), flushes the standard streams and leaves at once. Other
commands (report, export, ...) exit as usual.
"""

from __future__ import annotations

import atexit
import os
import sys

# The first arguments that are no profiled run (cli.dispatch): everything else starting with an option is one.
NOT_A_RUN = ("-V", "--version", "-h", "--help")


def runs_a_program(argv: list[str]) -> bool:
    """Whether `neutrino ARGV` is a profiled run (cli.dispatch: anything starting with an option)."""
    return bool(argv) and argv[0].startswith("-") and argv[0] not in NOT_A_RUN


def exit_now(status) -> None:
    """Leave the process with `status` (sys.exit's meaning) after the exit handlers and a flush,
    without the interpreter's finalisation."""
    code = status if isinstance(status, int) else (0 if status is None else 1)
    try:
        atexit._run_exitfuncs()  # what registered an exit handler (coverage) still gets it
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def console_main() -> None:
    """The `neutrino` command (pyproject's script, `python -m neutrino`)."""
    from neutrino.cli import main

    argv = sys.argv[1:]
    status = main(argv)
    if runs_a_program(argv):
        exit_now(status)
    sys.exit(status)
