"""Command line: `neutrino -p PROBE [--] program args…` and the subcommands.

    neutrino -p PROBE | -e 'PROBE TEXT' [options] [--] program args…   profile a program
    neutrino list [-v]                  built-in tools (with -v: their maps and fields)
    neutrino demo                       instrument an embedded kernel (no GPU needed)
    neutrino print KERNEL.ptx
    neutrino instrument KERNEL.ptx -p PROBE | -e TEXT [-k PATTERN] [-o OUT.ptx] [--info INFO.json] [--check]
    neutrino report TRACE_DIR [--format text|csv|json]
    neutrino export TRACE_DIR --perfetto OUT.json
    neutrino export TRACE|JOB --parquet DIR
    neutrino query TRACE|JOB|DATASET "SQL" [--format table|csv|json]
    neutrino diff A B [--fail-above PCT] [--format text|csv|json]
    neutrino diff A1 A2 ... --vs B1 B2 ... [--min-effect PCT] [--warmup N]

Messages, their format and the exit statuses are in neutrino/console.py: every
error we can foresee is a message on stderr (`neutrino: FILE:LINE:COL: error: …`)
and a non-zero exit status; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from neutrino import console
from neutrino.console import EXAMPLES, SUBCOMMANDS  # in console.py: the launcher's parser shows them too


def _error(message: str):
    """A NeutrinoError (imported here: `neutrino --help` and `--version` need not load the error classes)."""
    from neutrino.errors import NeutrinoError

    return NeutrinoError(message)


def _file_error(path: str, message: str):
    """An error about a whole file, in the one format: `neutrino: FILE: error: MESSAGE`."""
    from neutrino.errors import Diagnostic, DiagnosticError, Location

    return DiagnosticError(Diagnostic(Location(path), message))


def _read_ptx(path: str) -> tuple[str, str]:
    """PTX text from a .ptx file, or from a fatbin/cubin/executable (the PTX inside it)."""
    from neutrino.errors import NeutrinoError
    from neutrino.runtime.modules.ptx_source import ImageKind, classify_image, ptx_from_file

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise _file_error(path, f"cannot read: {e.strerror}") from None
    missing = _missing_target(data, path)
    if missing is not None:
        raise missing
    try:
        kind = classify_image(data)
    except NeutrinoError as e:  # "empty image": say which file
        raise _file_error(path, str(e)) from None
    if kind is ImageKind.PTX:
        try:
            return data.rstrip(b"\0").decode(), path
        except UnicodeDecodeError:
            raise _file_error(path, "not a PTX text file (not UTF-8)") from None
    try:
        image = ptx_from_file(path)
    except NeutrinoError as e:
        raise _file_error(path, str(e).removeprefix(f"{path}: ")) from None
    if image is None:
        raise _file_error(path, "contains no PTX (only SASS?): nothing to instrument")
    return image.text, f"{path}[{image.source}]"


def cmd_print(args) -> int:
    from neutrino.isa.registry import isa_of_file

    isa = isa_of_file(args.ptx)
    text, source = _read_assembly(isa, args.ptx)
    sys.stdout.write(isa.print_module(isa.parse_module(text, source)))
    return 0


def _read_assembly(isa, path: str) -> tuple[str, str]:
    """The text of an assembly file and the name its messages use; PTX may also come out of a fatbin/cubin/executable."""
    if isa.name == "ptx":
        return _read_ptx(path)
    try:
        return Path(path).read_text(), path
    except (OSError, UnicodeDecodeError) as e:
        raise _file_error(path, f"cannot read: {e}") from None


def ptxas_check(ptx: str, original: str | None = None) -> str:
    """Assemble the probed PTX with ptxas; the line to print (neutrino/ptxas.py, check_assembles)."""
    from neutrino import ptxas

    return ptxas.check_assembles(ptx, original)


def _missing_target(data: bytes, path: str):
    """PTX text that lacks the `.target` every module needs: say so, rather than 'unrecognised image'."""
    text = data[:65536].decode("latin-1")
    body = re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    version = re.search(r"^\s*\.version\b", body, flags=re.M)
    if version is None or body[: version.start()].strip() or re.search(r"^\s*\.target\b", body, flags=re.M):
        return None
    line = body.count("\n", 0, version.end()) + 1
    return _error(
        f"{path}:{line}: error: PTX module without a .target directive\n"
        "    hint: every PTX module names its target after .version, e.g. `.target sm_80`"
    )


def cmd_instrument(args) -> int:
    """`neutrino instrument FILE`: PTX (text, or inside a binary) or AMD GCN assembly, told apart by the file's content."""
    from neutrino.engine import instrument
    from neutrino.isa.registry import isa_of_file
    from neutrino.passes import default_pipeline
    from neutrino.toolbox import load_probe_argument

    isa = isa_of_file(args.ptx)
    if getattr(args, "lines", None) and isa.name != "ptx":
        raise _error("--lines selects by PTX .loc debug lines; AMDGPU assembly has none we read")
    probes = load_probe_argument(args.probe, args.expr, isa=isa.name)
    if getattr(args, "lines", None):
        limit_to_lines(probes, args.lines)
    text, source = _read_assembly(isa, args.ptx)
    entries = [e.name for e in isa.entries(isa.parse_module(text, source))] if args.kernel else []
    kernel = select_entry(entries, source, args.kernel) if args.kernel else None
    pipeline = default_pipeline(isa)
    pipeline.print_after = frozenset(args.print_after or ())
    pipeline.verify_each = args.verify_each
    unknown = pipeline.print_after - set(pipeline.names())
    if unknown:
        raise _error(f"--print-after: no pass named {', '.join(sorted(unknown))} (passes: {', '.join(pipeline.names())})")
    result = instrument(text, probes, kernel=kernel, source=source, pipeline=pipeline, isa=isa)
    for name, dumped in pipeline.dump:
        print(f"{isa.comment} ----- IR after {name} -----\n{dumped}", file=sys.stderr)
    if args.time_passes:
        for name, seconds in result.timings.items():
            print(f"{name:24s} {seconds * 1e3:8.3f} ms", file=sys.stderr)
    if args.output:
        _write(args.output, result.ptx, "-o")
    else:
        sys.stdout.write(result.ptx)
    if args.info:
        _write(args.info, json.dumps(result.info_json(), indent=2) + "\n", "--info")
    checked = isa.check_assembles(result.ptx, text) if args.check else None
    if checked is not None and not check_skipped(checked):
        print(f"{checked} ({len(result.kernels)} kernel(s))", file=sys.stderr)
    for name, info in result.kernels.items():
        for skip in info["skipped"]:
            console.note(f"{source}:{skip['line']}: note: [probe {skip['probe']}] site in {name} skipped: {skip['reason']}")
    for line in unmatched_positions(probes, result.kernels):
        console.warning(f"{source}: warning: {line}")
    return refuse_skipped_check(checked)


def check_skipped(line: str) -> bool:
    return ": check skipped: " in line


def refuse_skipped_check(line: str | None) -> int:
    """--check asked for an assembled result: a check that could not be made is not a success (README, --check)."""
    if line is None or not check_skipped(line):
        return console.EXIT_OK
    console.error(f"--check: {line}\n    hint: the output was written but not checked; drop --check to accept it unchecked")
    return console.EXIT_BAD_INPUT


def unmatched_positions(probes, kernels: dict[str, dict]) -> list[str]:
    """One line per (probe, kernel) whose position matched no instruction: a probe that does nothing, said aloud."""
    positions = {p.name: p.position for p in probes.probes if not p.at_kernel}
    lines = []
    for kernel, info in kernels.items():
        for probe, count in info.get("matched", {}).items():
            if count == 0 and probe in positions:
                position = ":".join(".".join(prefix) for prefix in positions[probe])
                lines.append(f"probe {probe}: position '{position}' matched 0 instructions in kernel {kernel}")
    return lines


def select_entry(entries: list[str], source: str, patterns: list[str]) -> str:
    """The one entry of `entries` that -k selects (instrument keeps one entry and prunes the rest;
    for AMDGPU assembly, probes one and leaves the rest unprobed)."""
    from neutrino.errors import InstrumentError
    from neutrino.runtime.start.options import kernel_selected, split_patterns

    wanted = split_patterns(patterns)
    chosen = [name for name in entries if kernel_selected(name, wanted)]
    if len(chosen) == 1:
        return chosen[0]
    shown = ", ".join(wanted)
    if not chosen:
        hint = console.did_you_mean(wanted[0].lstrip("="), entries) if len(wanted) == 1 else ""
        raise InstrumentError(f"{source}: -k {shown}: no entry named {shown!r} or containing it{hint} "
                              f"(entries: {', '.join(entries) or 'none'})")
    raise InstrumentError(f"{source}: -k {shown} selects {len(chosen)} entries ({', '.join(chosen)}); "
                          "instrument keeps one: give more of the name, or =NAME for an exact name")


def limit_to_lines(probes, text: str) -> None:
    """`--lines [FILE:]A[-B],…`: every instruction-position probe matches only instructions of those
    source lines (their `.loc`; spec/probe-toml.md "Positions"), on top of its own `@` ranges."""
    from neutrino.isa.ptx.lines import parse_line_ranges

    try:
        ranges = parse_line_ranges(text)
    except ValueError as e:
        raise _error(f"--lines: {e}") from None
    for probe in probes.probes:
        if not probe.at_kernel:
            probe.lines = tuple(probe.lines) + ranges if not probe.lines else _intersect(probe.lines, ranges)


def _intersect(own: tuple, ranges: tuple) -> tuple:
    """Ranges in both lists (same file or no file named), so --lines narrows a probe's own `@` ranges."""
    from neutrino.isa.ptx.lines import LineRange

    out = []
    for a in own:
        for b in ranges:
            if a.file and b.file and a.file != b.file:
                continue
            first, last = max(a.first, b.first), min(a.last, b.last)
            if first <= last:
                out.append(LineRange(a.file or b.file, first, last))
    return tuple(out) or (LineRange(None, 1, 0),)  # nothing in common: an empty range matches nothing


def cmd_report(args) -> int:
    from neutrino.analysis.ranks import main as report_main  # one run, or the runs of a job

    return report_main(args.trace, args.out, output_format=args.format)


def cmd_list(args) -> int:
    from neutrino.toolbox import listing

    sys.stdout.write(listing(verbose=args.verbose))
    return 0


def cmd_export(args) -> int:
    if args.parquet:
        return cmd_export_parquet(args)
    if args.merge_into:
        return _export_merge(args)
    if not args.perfetto:
        raise _error("export needs --perfetto OUT, --parquet DIR or --merge-into KINETO.json")
    if args.format == "json" or (args.format is None and args.perfetto.endswith(".json")):
        from neutrino.analysis.ranks import export  # one run, or the runs of a job

        export(args.trace, args.perfetto, warps=args.warps, clock_ghz=args.clock_ghz)
        print(f"wrote {args.perfetto} (Chrome trace-event JSON: probed launches only)", file=sys.stderr)
        return 0
    from neutrino.analysis.export_timeline import export_protobuf

    print(export_protobuf(args.trace, args.perfetto), file=sys.stderr)
    return 0


def _export_merge(args) -> int:
    """`export TRACE --merge-into KINETO.json [-o OUT]`: our tracks added to a torch.profiler trace."""
    from neutrino.analysis.kineto import merge_into

    print(merge_into(args.trace, args.merge_into, args.o), file=sys.stderr)
    return 0


def cmd_export_parquet(args) -> int:
    from neutrino.analysis.columnar import export

    summary = export(args.trace, args.parquet)
    for problem in summary.problems:
        console.warning(problem)
    rows = ", ".join(f"{table} {n}" for table, n in sorted(summary.tables.items()))
    print(f"wrote {summary.out}: {summary.launches} launch(es), {summary.map_bytes / 1e6:.1f} MB of map records in "
          f"{summary.seconds:.1f} s; rows: {rows or 'none'}", file=sys.stderr)
    return 0


def cmd_query(args) -> int:
    from neutrino.analysis.query import main as query_main

    return query_main(args.trace, args.sql, output_format=args.format, refresh=args.refresh)


def cmd_diff(args) -> int:
    from neutrino.analysis.diff import main as diff_main

    if args.vs is None and len(args.a) != 2:
        print("neutrino diff: give A B, or A1 A2 ... --vs B1 B2 ... (several runs per side)", file=sys.stderr)
        return 2
    side_a, side_b = (args.a, args.vs) if args.vs is not None else ([args.a[0]], [args.a[1]])
    return diff_main(side_a, side_b, output_format=args.format, fail_above=args.fail_above, alpha=args.alpha,
                     show_all=args.all, test=args.test, min_effect=args.min_effect, warmup=args.warmup)


DEMO_PTX = Path(__file__).parent / "probes" / "demo_vadd.ptx"


def cmd_demo(args) -> int:
    """What `neutrino` does to a kernel, shown without a GPU: instrument an embedded vector add.

    Says in a few lines what it did and where the files are; the probed PTX and
    the kernel description go to files in --dir (default: a new temporary directory,
    so that running the demo in a checkout leaves nothing in it).
    """
    from neutrino.engine import instrument
    from neutrino.toolbox import load_probe_argument

    if args.probe is None and args.expr is None:
        args.probe = "block_sched"
    probes = load_probe_argument(args.probe, args.expr)
    original = DEMO_PTX.read_text()
    result = instrument(original, probes, source=str(DEMO_PTX))
    try:
        out = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="neutrino-demo-"))
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _error(f"--dir {args.dir or tempfile.gettempdir()}: cannot create: {e.strerror or e}") from None
    _write(str(out / "original.ptx"), original, "--dir")
    _write(str(out / "probed.ptx"), result.ptx, "--dir")
    _write(str(out / "kernel.json"), json.dumps(result.info_json(), indent=2) + "\n", "--dir")
    name = args.probe or "the -e probe"
    print(f"neutrino demo: instrumented the example kernel vadd with {name} (no GPU needed)")
    for kernel, info in result.kernels.items():
        added = len(result.ptx.splitlines()) - len(original.splitlines())
        for m in info["maps"]:
            fields = ", ".join(f"{f['name']}:{f['type']}" for f in m["fields"])
            print(f"  {kernel}: {info['sites']} probe site(s), +{added} PTX lines; map {m['name']} "
                  f"({m['type']}, {m['level']} level): {fields}")
        for skip in info["skipped"]:
            print(f"  {kernel}: site at line {skip['line']} skipped: {skip['reason']}")
    for line in unmatched_positions(probes, result.kernels):
        console.warning(line)
    if shutil.which("ptxas"):
        print(f"  {ptxas_check(result.ptx, original)}")
    else:
        print("  (ptxas not on PATH: the probed PTX was not assembled)")
    print(f"  files: {out / 'original.ptx'}, {out / 'probed.ptx'}, {out / 'kernel.json'}")
    print(f"next: diff {out / 'original.ptx'} {out / 'probed.ptx'}; on a GPU: neutrino -p {args.probe or 'block_sched'} "
          "-- python your_program.py")
    return 0


def offline_parser() -> argparse.ArgumentParser:
    parser = console.ArgumentParser(prog="neutrino",
                                    description="eBPF-style probes for GPU kernels. The options of a profiled run "
                                                "(-o, -k, --launches, budgets, ...): neutrino -p PROBE --help",
                                    usage=f"{console.PROFILE_USAGE}\n       neutrino COMMAND ...",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    # prog: each command's usage reads `neutrino instrument ...`, not the top-level usage followed by the command
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=console.ArgumentParser, prog="neutrino")
    p = sub.add_parser("list", help="list the built-in tools (-v: their maps, fields and positions)")
    p.add_argument("-v", "--verbose", action="store_true", help="also each tool's maps, fields and probes")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("demo", help="instrument an embedded example kernel, say what was done (no GPU needed)")
    console.add_probe_arguments(p, required=False)
    p.add_argument("--dir", help="where to write the PTX and kernel description "
                                 "(default: a new directory under the system's temporary directory, printed)")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("print", help="parse a PTX file and print it back")
    p.add_argument("ptx", metavar="FILE", help="PTX text, or AMDGPU assembly (.s); fatbins, cubins and executables: "
                                               "the PTX inside them")
    p.set_defaults(func=cmd_print)
    p = sub.add_parser("instrument", help="instrument PTX (or a fatbin/cubin/executable) with a probe")
    p.add_argument("ptx", metavar="FILE", help="PTX text, a fatbin, cubin or executable with embedded PTX, "
                                               "or AMDGPU (GCN) assembly (.s with .amdgcn_target)")
    console.add_probe_arguments(p)
    p.add_argument("-k", "--kernel", action="append", metavar="PATTERN",
                   help="instrument only the entry whose name contains PATTERN (=NAME: exactly NAME); "
                        "the others are pruned (AMDGPU assembly: left unprobed)")
    p.add_argument("-o", "--output", help="write the probed PTX here (default: stdout)")
    p.add_argument("--info", help="write the kernel description JSON here")
    p.add_argument("--check", action="store_true", help="assemble the result with ptxas")
    p.add_argument("--print-after", action="append", metavar="PASS", help="print the IR after this pass (repeatable)")
    p.add_argument("--time-passes", action="store_true", help="print the time each pass took")
    p.add_argument("--verify-each", action="store_true", help="check the kernels' invariants after every pass")
    p.add_argument("--lines", metavar="[FILE:]A[-B],...",
                   help="probe only instructions of these source lines (.loc debug lines: Triton, nvcc -lineinfo)")
    p.set_defaults(func=cmd_instrument)
    p = sub.add_parser("report", help="summarise a trace directory and write plots")
    p.add_argument("trace")
    p.add_argument("--out", help="where to write plots (default: TRACE/report)")
    p.add_argument("--format", choices=("text", "csv", "json"), default="text",
                   help="text (tables and plots, default), or csv / json on stdout for scripts (no plots)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("export", help="export a trace")
    p.add_argument("trace")
    p.add_argument("--perfetto", metavar="OUT", help="Perfetto protobuf trace: host threads and ranges, GPU streams "
                   "with every kernel and copy, probed launches' blocks and warps (JSON when OUT ends in .json)")
    p.add_argument("--format", choices=("protobuf", "json"), help="--perfetto's format (default: protobuf, json for "
                   "an OUT ending in .json: the Chrome trace-event JSON of the probed launches)")
    p.add_argument("--merge-into", metavar="KINETO.json", help="add our tracks to a torch.profiler (Kineto) JSON trace")
    p.add_argument("-o", metavar="OUT.json", help="with --merge-into: where to write (default: KINETO.neutrino.json)")
    p.add_argument("--warps", action="store_true", help="JSON: also one track per warp under its block")
    p.add_argument("--clock-ghz", type=float, help="JSON: SM clock rate to convert cycles (default: fitted or 1 GHz)")
    p.add_argument("--parquet", metavar="DIR", help="a Parquet dataset (tables partitioned by rank and kernel)")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("query", help="SQL over a trace, job or Parquet dataset (DuckDB)")
    p.add_argument("trace", metavar="TRACE|JOB|DATASET")
    p.add_argument("sql", metavar="SQL", help="tables: launches, events, map_<name> (or <name>), timeline, ranges, "
                                             "launch_args")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--refresh", action="store_true", help="export the trace again even when the cached dataset is current")
    p.set_defaults(func=cmd_query)
    p = sub.add_parser("diff", help="compare two traces or jobs kernel by kernel, with statistics")
    p.add_argument("a", metavar="A", nargs="+", help="A B, or the runs of A when --vs gives those of B")
    p.add_argument("--vs", metavar="B", nargs="+", help="the runs of B (each side: several runs of one program)")
    p.add_argument("--min-effect", type=float, metavar="PCT",
                   help="smallest change (%% or pp) called significant; default 0, but 20 where a side has one run "
                        "and fewer than 8 kernels show the runs' common shift")
    p.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="launches of each kernel shape left out at the start of each run (default 1)")
    p.add_argument("--format", choices=("text", "csv", "json"), default="text")
    p.add_argument("--fail-above", type=float, metavar="PCT",
                   help="exit 1 when a significant regression is larger than PCT percent (a CI gate)")
    p.add_argument("--alpha", type=float, default=0.05, help="false discovery rate (Benjamini-Hochberg), default 0.05")
    p.add_argument("--all", action="store_true", help="text: also the comparisons that are not significant")
    p.add_argument("--test", choices=("mwu", "welch-log"), default="mwu",
                   help="p-values: Mann-Whitney U (default, robust to outliers) or Welch's t on log values "
                        "(stronger under lognormal noise)")
    p.set_defaults(func=cmd_diff)
    return parser


def _write(path: str, text: str, option: str) -> None:
    """Write an output file; a path that cannot be written is a clear error, not a traceback."""
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise _error(f"{option} {path}: cannot write: {e.strerror or e}") from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _printable_output()
    try:
        return dispatch(argv)
    except BrokenPipeError:
        return console.EXIT_OK
    except KeyboardInterrupt:
        return console.EXIT_INTERRUPTED
    except (RecursionError, MemoryError) as e:  # a limit we did not foresee: still no traceback
        console.error(f"input too large or nested too deeply to process ({type(e).__name__})")
        return console.EXIT_BAD_INPUT
    except Exception as e:
        from neutrino.errors import NeutrinoError

        if not isinstance(e, NeutrinoError):
            raise
        console.error(str(e))
        return console.EXIT_BAD_INPUT


def _printable_output() -> None:
    """Names read from files (a trace's directory names, kernel names) may hold what UTF-8 cannot
    encode (bytes that were not UTF-8): printed escaped, never a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):  # not a text file, or already written to
            pass


def dispatch(argv: list[str]) -> int:
    """A subcommand, `--help`/`--version`, or a program to profile (anything starting with an option)."""
    if not argv:
        sys.stderr.write(offline_parser().format_usage() + "neutrino: try 'neutrino --help'\n")
        return console.EXIT_USAGE
    first = argv[0]
    if first in ("-V", "--version"):
        from neutrino import __version__

        print(f"neutrino {__version__}")
        return console.EXIT_OK
    if first in ("-h", "--help"):
        offline_parser().print_help()
        return console.EXIT_OK
    if first in SUBCOMMANDS:
        args = offline_parser().parse_args(argv)
        return args.func(args)
    if not first.startswith("-"):
        console.error(f"unknown command '{first}'{console.did_you_mean(first, SUBCOMMANDS)}\n"
                      f"    hint: commands: {', '.join(SUBCOMMANDS)}; to profile a program: "
                      f"neutrino -p PROBE -- {first} ...")
        return console.EXIT_USAGE
    from neutrino.runtime.start.launcher import run_main

    return run_main(argv)


if __name__ == "__main__":
    sys.exit(main())
