"""Runs `python PROGRAM ARGS...` as itself would run, and writes to the file $STARTUP_STAMP the wall
clock (Unix seconds) when the interpreter is done with its exit handlers: benchmarks/startup.py's plain
runs, so the program's own teardown (what follows, to the process's exit) is known beside a profiled
run's `exit_process` (spec/runtime.md, "Start-up and exit phases").

usage: STARTUP_STAMP=FILE python startup_stamp.py PROGRAM [ARGS...]

The file also gets, after a space, the wall clock when this script began (the interpreter and `site`
done): benchmarks/startup.py splits a run into before the program, the program, and after it.

The handler is registered before the program runs, so it runs after the program's own handlers, as
the profiled process's exit handler (registered at interpreter start) does.
"""
import atexit
import os
import runpy
import sys
import time


STARTED = time.time()  # the program's start (after the interpreter and `site`): where a profiled run's wire ends


def _stamp() -> None:
    """Two wall clocks: the end of the exit handlers (read first) and the program's start."""
    with open(os.environ["STARTUP_STAMP"], "w", encoding="ascii") as f:
        f.write(f"{time.time()!r} {STARTED!r}")


if __name__ == "__main__":
    atexit.register(_stamp)
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    runpy.run_path(sys.argv[0], run_name="__main__")
