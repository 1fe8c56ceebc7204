"""`neutrino print` and `neutrino instrument` for AMDGPU assembly (a `.s` file with `.amdgcn_target`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from neutrino.errors import NeutrinoError


def is_gcn_file(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    return b".amdgcn_target" in head


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise NeutrinoError(f"{path}: cannot read: {e}") from None


def cmd_print(args) -> int:
    from neutrino.isa.gcn import parse_module, print_module

    sys.stdout.write(print_module(parse_module(_read(args.ptx), args.ptx)))
    return 0


def llvm_mc_check(text: str) -> str:
    """Assemble the probed module with llvm-mc-19 for its own target; the line to print, or raise."""
    from neutrino import llvm_mc
    from neutrino.isa.gcn import parse_module

    if llvm_mc.find_llvm_mc() is None:
        return "llvm-mc: check skipped: llvm-mc-19 not installed (Debian: apt-get install llvm-19)"
    gfx = parse_module(text).target or "gfx90a"
    ok, err = llvm_mc.assemble(text, gfx)
    if not ok:
        raise NeutrinoError(f"llvm-mc ({gfx}) rejected the probed assembly:\n" + err.strip())
    return f"llvm-mc: ok for {gfx}"


def cmd_instrument(args) -> int:
    """`neutrino instrument FILE.s`: -p/-e and -k as for PTX (the same loader and kernel matcher)."""
    from neutrino.cli import _write, select_entry
    from neutrino.engine_gcn import instrument_gcn
    from neutrino.isa.gcn import parse_module
    from neutrino.passes.gcn import gcn_pipeline
    from neutrino.toolbox import load_probe_argument

    probes = load_probe_argument(args.probe, args.expr, isa="gcn")
    text = _read(args.ptx)
    kernel = None
    if args.kernel:
        kernels = [k.name for k in parse_module(text, args.ptx).kernels()]
        kernel = select_entry(kernels, args.ptx, args.kernel)
    pipeline = gcn_pipeline()
    pipeline.print_after = frozenset(args.print_after or ())
    unknown = pipeline.print_after - set(pipeline.names())
    if unknown:
        raise NeutrinoError(f"--print-after: no pass named {', '.join(sorted(unknown))} (passes: {', '.join(pipeline.names())})")
    result = instrument_gcn(text, probes, kernel=kernel, source=args.ptx, pipeline=pipeline)
    for name, dumped in pipeline.dump:
        print(f"; ----- IR after {name} -----\n{dumped}", file=sys.stderr)
    if args.time_passes:
        for name, seconds in result.timings.items():
            print(f"{name:24s} {seconds * 1e3:8.3f} ms", file=sys.stderr)
    if args.output:
        _write(args.output, result.ptx, "-o")
    else:
        sys.stdout.write(result.ptx)
    if args.info:
        _write(args.info, json.dumps(result.info_json(), indent=2) + "\n", "--info")
    from neutrino.cli import check_skipped, refuse_skipped_check

    checked = llvm_mc_check(result.ptx) if args.check else None
    if checked is not None and not check_skipped(checked):
        print(f"{checked} ({len(result.kernels)} kernel(s))", file=sys.stderr)
    for name, info in result.kernels.items():
        for skip in info["skipped"]:
            print(f"{args.ptx}:{skip['line']}: note: [probe {skip['probe']}] site in {name} skipped: {skip['reason']}", file=sys.stderr)
    return refuse_skipped_check(checked)
