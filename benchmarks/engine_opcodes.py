"""Python opcodes executed per corpus pass of the engine, per function: where a checkout spends more than another.

    PYTHONPATH=CHECKOUT python benchmarks/engine_opcodes.py PROBE OUT.json      count one later pass
    python benchmarks/engine_opcodes.py --compare A.json B.json [N]             the N functions that grew most

A pass parses, instruments (default pipeline) and prints every corpus file of
this checkout, as benchmarks/engine_ir.py counts it under callgrind; the probe
is loaded and one pass run before counting, so what is imported or memoised on
the first kernel is left out. Counts come from `sys.settrace` opcode events:
the same for every run of one checkout (unlike machine instructions, they do
not depend on addresses), but blind to work done in C (regular expressions,
dict and str methods). `--compare` keys functions by name alone, so code that
moved between modules is not counted as new.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

CORPUS = sorted((Path(__file__).resolve().parent.parent / "tests" / "data" / "corpus").glob("*/*.ptx"))


def count(probe_name: str) -> collections.Counter:
    """Opcodes per `file:function:line` of one corpus pass after a first, uncounted one."""
    from neutrino.engine import cycle_collection_paused, instrument_module
    from neutrino.isa.ptx import parse_module, print_module
    try:
        from neutrino.toolbox import load_probes
    except ImportError:  # a checkout from before the tool registry
        from neutrino.probefile import load_probes
    probes = load_probes(probe_name)
    texts = [path.read_text() for path in CORPUS]

    def one_pass() -> None:
        for text in texts:
            with cycle_collection_paused():
                module = parse_module(text)
                instrument_module(module, probes)
                print_module(module)

    one_pass()
    counts: collections.Counter = collections.Counter()

    def enter(frame, event, arg):
        frame.f_trace_opcodes, frame.f_trace_lines = True, False
        code = frame.f_code
        key = f"{code.co_filename.rsplit('/neutrino/', 1)[-1]}:{code.co_name}:{code.co_firstlineno}"

        def step(frame, event, arg):
            if event == "opcode":
                counts[key] += 1
            return step
        return step

    sys.settrace(enter)
    try:
        one_pass()
    finally:
        sys.settrace(None)
    return counts


def by_function(counts: dict[str, int]) -> collections.Counter:
    """Counts keyed by function name (comprehensions and lambdas by file too)."""
    out: collections.Counter = collections.Counter()
    for key, n in counts.items():
        path, name, _ = key.rsplit(":", 2)
        out[f"{path.rsplit('/', 1)[-1]}:{name}" if name.startswith("<") else name] += n
    return out


def compare(a_path: str, b_path: str, rows: int) -> None:
    a, b = (json.loads(Path(p).read_text()) for p in (a_path, b_path))
    print(f"total {sum(a.values())} vs {sum(b.values())}: {sum(a.values()) / sum(b.values()):.3f}x")
    fa, fb = by_function(a), by_function(b)
    for name in sorted(set(fa) | set(fb), key=lambda k: fb[k] - fa[k])[:rows]:
        print(f"{fa[name] - fb[name]:+10d} {fa[name]:10d} {fb[name]:10d}  {name}")


def main() -> None:
    if len(sys.argv) >= 4 and sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 30)
    elif len(sys.argv) == 3:
        counts = count(sys.argv[1])
        Path(sys.argv[2]).write_text(json.dumps(counts))
        print(f"{sys.argv[1]}: {sum(counts.values())} opcodes per pass")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
