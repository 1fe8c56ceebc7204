"""Command line: `neutrino -p PROBE [--] program args…` and the offline subcommands.

    neutrino print KERNEL.ptx
    neutrino instrument KERNEL.ptx -p PROBE [-k NAME] [-o OUT.ptx] [--info INFO.json] [--check]
    neutrino report TRACE_DIR
    neutrino export TRACE_DIR --perfetto OUT.json
    neutrino demo                      # instrument an embedded kernel (no GPU needed)
    neutrino -p PROBE [options] [--] program args…

Every error we can foresee is printed as a message on stderr with a non-zero
exit status; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from neutrino.errors import NeutrinoError

SUBCOMMANDS = ("print", "instrument", "report", "export", "demo")


def _read_ptx(path: str) -> tuple[str, str]:
    """PTX text from a .ptx file, or from a fatbin/cubin/executable (the PTX inside it)."""
    from neutrino.runtime.ptx_source import ImageKind, classify_image, ptx_from_file

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise NeutrinoError(f"{path}: cannot read: {e.strerror}") from None
    missing = _missing_target(data, path)
    if missing is not None:
        raise missing
    try:
        kind = classify_image(data)
    except NeutrinoError as e:  # "empty image": say which file
        raise NeutrinoError(f"{path}: {e}") from None
    if kind is ImageKind.PTX:
        try:
            return data.rstrip(b"\0").decode(), path
        except UnicodeDecodeError:
            raise NeutrinoError(f"{path}: not a PTX text file (not UTF-8)") from None
    image = ptx_from_file(path)
    if image is None:
        raise NeutrinoError(f"{path}: contains no PTX (only SASS?): nothing to instrument")
    return image.text, f"{path}[{image.source}]"


def cmd_print(args) -> int:
    from neutrino.isa.ptx import parse_module, print_module

    text, source = _read_ptx(args.ptx)
    sys.stdout.write(print_module(parse_module(text, source)))
    return 0


def ptxas_check(ptx: str, original: str | None = None) -> str:
    """Assemble the probed PTX (neutrino/ptxas.py picks the arch and -c); the line to print.

    Raises when ptxas rejects what we produced; a check that cannot be made
    (no arch fits, or the unprobed `original` is refused too) is reported as skipped.
    """
    from neutrino import ptxas
    from neutrino.isa.ptx import parse_module

    result = ptxas.check(ptx, parse_module(ptx), original)
    if result.skipped:
        return f"ptxas: check skipped: {result.skipped}"
    how = f"{result.arch}{', relocatable (-c)' if result.relocatable else ''}"
    if not result.ok:
        raise NeutrinoError(f"ptxas ({how}) rejected the probed PTX:\n" + result.stderr.strip())
    return f"ptxas: ok for {how}"


def _missing_target(data: bytes, path: str) -> NeutrinoError | None:
    """PTX text that lacks the `.target` every module needs: say so, rather than 'unrecognised image'."""
    text = data[:65536].decode("latin-1")
    body = re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    version = re.search(r"^\s*\.version\b", body, flags=re.M)
    if version is None or body[: version.start()].strip() or re.search(r"^\s*\.target\b", body, flags=re.M):
        return None
    line = body.count("\n", 0, version.end()) + 1
    return NeutrinoError(
        f"{path}:{line}: error: PTX module without a .target directive\n"
        "    hint: every PTX module names its target after .version, e.g. `.target sm_80`"
    )


def cmd_instrument(args) -> int:
    from neutrino.engine import instrument
    from neutrino.passes import default_pipeline
    from neutrino.probefile import load_probes

    probes = load_probes(args.probe)
    text, source = _read_ptx(args.ptx)
    pipeline = default_pipeline()
    pipeline.print_after = frozenset(args.print_after or ())
    pipeline.verify_each = args.verify_each
    unknown = pipeline.print_after - set(pipeline.names())
    if unknown:
        raise NeutrinoError(f"--print-after: no pass named {', '.join(sorted(unknown))} (passes: {', '.join(pipeline.names())})")
    result = instrument(text, probes, kernel=args.kernel, source=source, pipeline=pipeline)
    for name, dumped in pipeline.dump:
        print(f"// ----- IR after {name} -----\n{dumped}", file=sys.stderr)
    if args.time_passes:
        for name, seconds in result.timings.items():
            print(f"{name:24s} {seconds * 1e3:8.3f} ms", file=sys.stderr)
    if args.output:
        _write(args.output, result.ptx, "-o")
    else:
        sys.stdout.write(result.ptx)
    if args.info:
        _write(args.info, json.dumps(result.info_json(), indent=2) + "\n", "--info")
    if args.check:
        print(f"{ptxas_check(result.ptx, text)} ({len(result.kernels)} kernel(s))", file=sys.stderr)
    for name, info in result.kernels.items():
        for skip in info["skipped"]:
            print(f"{source}:{skip['line']}: note: [probe {skip['probe']}] site in {name} skipped: {skip['reason']}", file=sys.stderr)
    return 0


def cmd_report(args) -> int:
    from neutrino.analysis.report import main as report_main

    return report_main(args.trace, args.out)


def cmd_export(args) -> int:
    from neutrino.analysis.perfetto import export

    if not args.perfetto:
        raise NeutrinoError("export needs --perfetto OUT.json")
    export(args.trace, args.perfetto, warps=args.warps, clock_ghz=args.clock_ghz)
    print(f"wrote {args.perfetto}", file=sys.stderr)
    return 0


DEMO_PTX = Path(__file__).parent / "probes" / "demo_vadd.ptx"


def cmd_demo(args) -> int:
    """What `neutrino` does to a kernel, shown without a GPU: instrument an embedded vector add."""
    from neutrino.engine import instrument
    from neutrino.probefile import load_probes

    probes = load_probes(args.probe)
    result = instrument(DEMO_PTX.read_text(), probes, source=str(DEMO_PTX))
    sys.stdout.write(result.ptx)
    print(json.dumps(result.info_json(), indent=2), file=sys.stderr)
    if shutil.which("ptxas"):
        print(ptxas_check(result.ptx, DEMO_PTX.read_text()), file=sys.stderr)
    return 0


def offline_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="neutrino", description="eBPF-style probes for GPU kernels")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("print", help="parse a PTX file and print it back")
    p.add_argument("ptx")
    p.set_defaults(func=cmd_print)
    p = sub.add_parser("instrument", help="instrument PTX (or a fatbin/cubin/executable) with a probe file")
    p.add_argument("ptx")
    p.add_argument("-p", "--probe", required=True, help="probe file (.toml/.py) or built-in name")
    p.add_argument("-k", "--kernel", help="instrument only this entry (and prune the others)")
    p.add_argument("-o", "--output", help="write the probed PTX here (default: stdout)")
    p.add_argument("--info", help="write the kernel description JSON here")
    p.add_argument("--check", action="store_true", help="assemble the result with ptxas")
    p.add_argument("--print-after", action="append", metavar="PASS", help="print the IR after this pass (repeatable)")
    p.add_argument("--time-passes", action="store_true", help="print the time each pass took")
    p.add_argument("--verify-each", action="store_true", help="check the kernels' invariants after every pass")
    p.set_defaults(func=cmd_instrument)
    p = sub.add_parser("report", help="summarise a trace directory and write plots")
    p.add_argument("trace")
    p.add_argument("--out", help="where to write plots (default: TRACE/report)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("export", help="export a trace")
    p.add_argument("trace")
    p.add_argument("--perfetto", help="Chrome trace-event JSON for Perfetto")
    p.add_argument("--warps", action="store_true", help="also one track per warp under its block")
    p.add_argument("--clock-ghz", type=float, help="SM clock rate to convert cycles (default: fitted or 1 GHz)")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("demo", help="instrument an embedded example kernel (no GPU needed)")
    p.add_argument("-p", "--probe", default="block_sched")
    p.set_defaults(func=cmd_demo)
    return parser


def _write(path: str, text: str, option: str) -> None:
    """Write an output file; a path that cannot be written is a clear error, not a traceback."""
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise NeutrinoError(f"{option} {path}: cannot write: {e.strerror or e}") from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in SUBCOMMANDS:
            args = offline_parser().parse_args(argv)
            return args.func(args)
        if not argv or argv[0] in ("-h", "--help"):
            offline_parser().print_help()
            print("\nprofile a program:  neutrino -p PROBE [--tracedir DIR] [options] [--] program args...")
            return 0 if argv else 2
        from neutrino.runtime.launcher import run_main

        return run_main(argv)
    except NeutrinoError as e:
        print(f"neutrino: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except (RecursionError, MemoryError) as e:  # a limit we did not foresee: still no traceback
        print(f"neutrino: input too large or nested too deeply to process ({type(e).__name__})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
