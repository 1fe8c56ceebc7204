"""What the command line prints: one error format, colour on a terminal, exit codes, "did you mean".

Every message of ours on stderr starts with `neutrino: `; an error reads
`neutrino: FILE:LINE:COL: error: MESSAGE` when it points into a file, else
`neutrino: error: MESSAGE`. Colour is used when stderr is a terminal, `NO_COLOR`
is unset or empty (https://no-color.org) and `TERM` is not `dumb`;
`FORCE_COLOR` (non-empty) turns it on anywhere.

This module imports nothing heavy: `neutrino --help` and `--version` load only it
and argparse.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

# The exit statuses of every command (README, "Exit status").
EXIT_OK = 0
EXIT_BAD_INPUT = 1  # a probe, PTX, trace or other file we cannot use; a failure of ours
EXIT_USAGE = 2  # a command line we do not understand
EXIT_INTERRUPTED = 130

PROFILE_USAGE = "neutrino -p PROBE | -e 'PROBE TEXT' [options] [--] program [args...]"

_LOCATED = re.compile(r"^(?P<loc>\S[^:\n]*(?::\d+(?::\d+)?)?): (?P<sev>error|warning|note): ")
_SEVERITY_COLOUR = {"error": "1;31", "warning": "1;35", "note": "1;36"}


def use_colour(stream=None) -> bool:
    stream = stream or sys.stderr
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _paint(text: str, code: str, colour: bool) -> str:
    return f"\033[{code}m{text}\033[0m" if colour else text


def format_message(message: str, severity: str = "error", colour: bool = False) -> str:
    """Our one format for a message, each located line (`FILE:LINE:COL: error: …`) prefixed with `neutrino: `."""
    lines = message.rstrip("\n").split("\n")
    if not _LOCATED.match(lines[0]):
        lines[0] = f"{severity}: {lines[0]}"
    out = []
    for line in lines:
        m = _LOCATED.match(line) or re.match(r"^(?P<loc>)(?P<sev>error|warning|note): ", line)
        if m is None:
            out.append(_paint(line, "32", colour) if line.lstrip().startswith("hint:") else line)
            continue
        loc = _paint(m.group("loc") + ":", "1", colour) + " " if m.group("loc") else ""
        sev = _paint(m.group("sev") + ":", _SEVERITY_COLOUR[m.group("sev")], colour)
        out.append(f"neutrino: {loc}{sev} {line[m.end():]}")
    return "\n".join(out)


def error(message: str, stream=None) -> None:
    stream = stream or sys.stderr
    stream.write(format_message(str(message), "error", use_colour(stream)) + "\n")


def warning(message: str, stream=None) -> None:
    stream = stream or sys.stderr
    stream.write(format_message(str(message), "warning", use_colour(stream)) + "\n")


def note(message: str, stream=None) -> None:
    stream = stream or sys.stderr
    stream.write(format_message(str(message), "note", use_colour(stream)) + "\n")


def did_you_mean(word: str, choices) -> str:
    """` (did you mean 'x'?)` for the closest of `choices`, or an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with our message format and exit status 2 for a command line we do not understand."""

    def error(self, message):
        usage = self.format_usage().strip().removeprefix("usage: ")
        self.exit(EXIT_USAGE, format_message(f"{message}\n    usage: {usage}", colour=use_colour()) + "\n")


def add_probe_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """-p PROBE and -e TEXT, one of them: the same for instrument and for profiling."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("-p", "--probe", help="probe file (.toml or .py) or built-in tool name (neutrino list)")
    group.add_argument("-e", "--expr", metavar="TEXT",
                       help="a one-off probe: probe TOML, or the keys of one probe on one line "
                            "(position = \"...\", before = \"...\", ...)")


# The command line's words, shared by `neutrino --help` (cli.py) and the profiling launcher's parser.
SUBCOMMANDS = ("list", "demo", "print", "instrument", "report", "export", "query", "diff")

EXAMPLES = """\
examples:
  neutrino demo                                   what a probe does to a kernel (no GPU needed)
  neutrino list -v                                built-in tools, their maps and fields
  neutrino -p block_sched -- python train.py      probe every kernel launch; trace in ./trace/<time>_<pid>/
  neutrino -p gmem_bytes -k gemm -o gemm.trace -- ./app
                                                  only kernels whose name contains 'gemm'; trace in gemm.trace/
  neutrino -e 'position = "kernel", datamodel = "warp:8", after = "SAVE.u32 {%smid, %laneid};"' -- ./app
                                                  a one-off probe (TOML keys of one probe, on one line)
  neutrino report trace/<time>_<pid>              summary per kernel, plots
  neutrino report TRACE --format csv              the same numbers for scripts
  neutrino instrument kernel.ptx -p block_sched -o out.ptx --check

kernel names (-k, --filter): PATTERN selects the kernels whose (mangled) name contains it;
  =NAME selects the kernel named exactly NAME; PATTERN:PATTERN… or -k repeated: any of them.

exit status: 0 ok; 1 bad input (probe, PTX, trace) or a failure of ours; 2 usage error;
  when profiling, the program's own status (126/127: it could not be run; 128+N: killed by signal N).
  NO_COLOR set: no colour in messages (FORCE_COLOR: colour even when not on a terminal).
"""
