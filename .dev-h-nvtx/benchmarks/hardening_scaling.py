"""How the engine's time grows with the size of hostile inputs (issue 11): it must be linear (or n log n).

    python benchmarks/hardening_scaling.py [--sizes 1000,4000,16000] [--repeat 3]

For each shape of input (the super-linear cases the fuzzing run found, and
their neighbours) and each size n, the best of --repeat runs, and the time per
unit (µs / n). Linear growth keeps the last column flat as n grows 16 times;
a quadratic one multiplies it by 16. Inputs past a documented limit are
refused quickly; those rows show the refusal's time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from neutrino.errors import NeutrinoError  # noqa: E402
from neutrino.isa.ptx import parse_module  # noqa: E402
from neutrino.language import compile_source  # noqa: E402
from neutrino.probefile import parse_probes  # noqa: E402

VEC = (ROOT / "tests/data/corpus/nvcc/vec.sm90.ptx").read_text()
DSL_HEAD = "from neutrino import probe\nimport neutrino.language as nl\n\n@probe(pos='kernel', level='thread')\ndef p():\n"


def ptx_plus_terms(n: int) -> None:
    """One truncated line of n `+1` terms (no ';'): was 17 s for 16,000."""
    parse_module(VEC.replace("ret;", "add.u32 %r1, 1" + "+1" * n))


def ptx_plus_terms_in_a_snippet(n: int) -> None:
    parse_probes('[p]\nposition = "kernel"\nafter = ".reg .u32 %r; add.u32 %r, 1' + "+1" * n + '"\n', "p.toml")


def save_operands(n: int) -> None:
    """`SAVE.u64 {%r, %r, …}` with n operands (field names deduplicated): was 38 s for 3,000."""
    parse_probes('[p]\nposition = "kernel"\ndatamodel = "warp:256"\nafter = ".reg .u64 %r; SAVE.u64 {'
                 + ", ".join(["%r"] * n) + '};"\n', "p.toml")


def probe_tables(n: int) -> None:
    """n probe tables in one file: was over 100 s for 20,000."""
    parse_probes("".join(f'[p{i}]\nposition = "kernel"\nafter = ".reg .u32 %r; mov.u32 %r, {i};"\n' for i in range(n)), "p.toml")


def explicit_probe_tables(n: int) -> None:
    parse_probes("".join(f'[probe.p{i}]\nposition = "kernel"\nafter = ".reg .u32 %r; mov.u32 %r, {i};"\n'
                         for i in range(n)), "p.toml")


def map_fields(n: int) -> None:
    fields = ", ".join(f'"f{i}:u32"' for i in range(n))
    parse_probes(f'[map.m]\nlevel = "warp"\nfields = [{fields}]\n[probe.p]\nposition = "kernel"\nlevel = "warp"\n'
                 'after = "SAVE [ m ] {%smid};"\n', "p.toml")


def dsl_statements(n: int) -> None:
    compile_source(DSL_HEAD + "    x = nl.clock()\n" + "    x = x + 1\n" * n, "p.py")


def dsl_save_arguments(n: int) -> None:
    """`nl.save((x, x, …))`: n fields of one name (the DSL's own deduplication)."""
    compile_source(DSL_HEAD.replace("level='thread')", "level='thread', size=8)") + "    x = nl.clock()\n    nl.save(("
                   + ", ".join(["x"] * n) + "))\n", "p.py")


def dsl_nested_expression(n: int) -> None:
    """An expression nested n deep: refused past MAX_NESTING (100), located, whatever n."""
    compile_source(DSL_HEAD + "    x = " + "-" * n + "nl.clock()\n", "p.py")


def ptx_nested_braces(n: int) -> None:
    """n nested scopes: refused past 256, in one linear scan."""
    parse_module(VEC.replace("ret;", "{" * n + "}" * n + "\n\tret;"))


def ptx_many_instructions(n: int) -> None:
    body = "".join(f"\tadd.u32 %r1, %r1, {i};\n" for i in range(n))
    parse_module(VEC.replace("ret;", body + "\tret;"))


def trace_launches(n: int) -> None:
    """n launch events of one trace, every map of every launch read."""
    import neutrino.trace as nt

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        (run / "result").mkdir()
        import numpy as np

        buf = np.zeros(nt.buffer_bytes(2, 1, 8), np.uint8)
        nt.write_result(run / "result/0.bin", grid=(2, 1, 1), block=(32, 1, 1), shared_bytes=0,
                        maps=[nt.MapSection("m", "block", 8, 1, 2, [("v", "u64", 0)], buf.tobytes())])
        events = [{"event": "launch", "index": i, "kernel": "k", "grid": [2, 1, 1], "block": [32, 1, 1],
                   "result": "result/0.bin"} for i in range(n)]
        (run / "event.log").write_text("".join(json.dumps(e) + "\n" for e in events))
        for launch in nt.load(run).launches:
            launch.maps["m"].valid()


SHAPES = [ptx_plus_terms, ptx_plus_terms_in_a_snippet, save_operands, probe_tables, explicit_probe_tables, map_fields,
          dsl_statements, dsl_save_arguments, dsl_nested_expression, ptx_nested_braces, ptx_many_instructions, trace_launches]


def best_of(shape, n: int, repeat: int) -> tuple[float, str]:
    best, outcome = float("inf"), ""
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            shape(n)
            outcome = "accepted"
        except NeutrinoError as e:
            outcome = "refused: " + str(e).splitlines()[0].split("error: ", 1)[-1][:60]
        best = min(best, time.perf_counter() - start)
    return best, outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,4000,16000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="run the shapes whose name contains this")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'shape':30s} {'n':>7s} {'seconds':>9s} {'µs / n':>8s}  outcome")
    for shape in SHAPES:
        if args.only and args.only not in shape.__name__:
            continue
        for n in sizes:
            seconds, outcome = best_of(shape, n, args.repeat)
            print(f"{shape.__name__:30s} {n:7d} {seconds:9.3f} {1e6 * seconds / n:8.1f}  {outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
