"""Runs `python PROGRAM ARGS...` as itself would run, and writes to the file $STARTUP_STAMP the wall
clock (Unix seconds) when the interpreter is done with its exit handlers: benchmarks/startup.py's plain
runs, so the program's own teardown (what follows, to the process's exit) is known beside a profiled
run's `exit_process` (spec/runtime.md, "Start-up and exit phases").

usage: STARTUP_STAMP=FILE python startup_stamp.py PROGRAM [ARGS...]

The handler is registered before the program runs, so it runs after the program's own handlers, as
the profiled process's exit handler (registered at interpreter start) does.
"""
import atexit
import os
import runpy
import sys
import time


def _stamp() -> None:
    with open(os.environ["STARTUP_STAMP"], "w", encoding="ascii") as f:
        f.write(repr(time.time()))


if __name__ == "__main__":
    atexit.register(_stamp)
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    runpy.run_path(sys.argv[0], run_name="__main__")
