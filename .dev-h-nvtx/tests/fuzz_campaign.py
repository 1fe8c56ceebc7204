"""An open-ended fuzz campaign: random mutations for a while, every outcome counted.

    python tests/fuzz_campaign.py --minutes 15 [--seed 1] [--out DIR] [--ptxas-every 1]

Uses the mutations and entry points of tests/fuzzing.py, but instead of
stopping at the first failure (as tests/test_fuzz.py does) it counts, per
target, the cases and their outcomes (ok, refused, traceback, unlocated,
hang), assembles the accepted probed modules with ptxas, and keeps one
example of each distinct failure in --out. The neutrino package imported is
the one first on sys.path (PYTHONPATH=/other/checkout compares two versions).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzzing as fz  # noqa: E402


def draw_mutations(rng: random.Random, ops, max_count: int) -> list[tuple]:
    out = []
    for _ in range(rng.randint(1, 4)):
        count = rng.randint(0, 8) if rng.random() < 0.7 else rng.randint(0, max_count)
        out.append((rng.choice(ops), rng.random(), rng.random(), count, rng.randint(0, 1000)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-count", type=int, default=20000, help="largest repetition or nesting a mutation uses")
    parser.add_argument("--trace-max-count", type=int, default=300,
                        help="the same for traces, where each repeated launch is read and analysed (linear, but slow)")
    parser.add_argument("--out", default="fuzz-campaign", help="where failing inputs are kept")
    parser.add_argument("--ptxas-every", type=int, default=1, help="assemble every Nth accepted module")
    args = parser.parse_args()
    argparse._ = lambda text: text  # as tests/test_fuzz.py: skip argparse's catalogue lookups
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="neutrino-fuzz-"))
    base = fz.write_base_trace(tmp / "base")
    toml = [t for _, t in fz.toml_seeds()]
    dsl = [t for _, t in fz.dsl_seeds()]
    ptx = [t for _, t in fz.ptx_seeds()]
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures: dict[str, str] = {}
    accepted: list[tuple[str, str]] = []
    deadline = time.monotonic() + 60 * args.minutes
    targets = ["toml"] * 4 + ["ptx"] * 4 + ["dsl"] + ["trace"] + ["eventlog"]

    def record(target: str, what: str, outcome: fz.Outcome, payload: str) -> None:
        counts[target][outcome.status] += 1
        if outcome.status in ("traceback", "unlocated", "hang"):
            key = f"{target}/{what}/{outcome.status}/" + (outcome.detail.strip().splitlines() or [""])[-1][:120]
            if key not in failures:
                failures[key] = payload
                (out / f"{len(failures):04d}.{target}.{outcome.status}.txt").write_text(
                    f"{key}\n\n{outcome.detail}\n\n--- input ---\n{payload}")

    cases = 0
    while time.monotonic() < deadline:
        target = rng.choice(targets)
        cases += 1
        if target in ("toml", "dsl", "ptx"):
            seeds = {"toml": toml, "dsl": dsl, "ptx": ptx}[target]
            ops = {"toml": fz.TOML_OPS, "dsl": fz.TEXT_OPS, "ptx": fz.TEXT_OPS}[target]
            text = rng.choice(seeds)
            for m in draw_mutations(rng, ops, args.max_count):
                text = fz.mutate_text(text, m, seeds)
            path = tmp / {"toml": "probe.toml", "dsl": "probe.py", "ptx": "kernel.ptx"}[target]
            path.write_bytes(text.encode("utf-8", "surrogatepass"))
            if target == "ptx":
                kernel, probe, original = path, rng.choice(fz.PTX_PROBES), text
            else:
                kernel = rng.choice(fz.TARGET_PTX)
                probe, original = path, kernel.read_text()
            outcome = fz.run_instrument(kernel, probe, fz.case_seconds(len(text)))
            record(target, "instrument", outcome, text)
            if outcome.status == "ok" and cases % args.ptxas_every == 0:
                accepted.append((outcome.stdout, original))
        else:
            if target == "trace":
                file = rng.choice(fz.TRACE_FILES[1:])
                muts = draw_mutations(rng, fz.BYTE_OPS + ("truncate", "dup_line", "flip"), args.trace_max_count)
            else:
                file, muts = "event.log", draw_mutations(rng, fz.JSON_OPS + fz.BYTE_OPS, args.trace_max_count)
            for what, outcome in fz.run_trace_case(base, tmp / "work", file, muts):
                record(target, what, outcome, f"{file}: {muts!r}")
    print(json.dumps({"cases": cases, "outcomes": {t: dict(c) for t, c in sorted(counts.items())}}), flush=True)
    started = time.monotonic()
    rejected = fz.ptxas_rejections(accepted)
    for i, text in enumerate(rejected):
        (out / f"ptxas-{i:04d}.txt").write_text(text)
    summary = {
        "cases": cases,
        "outcomes": {t: dict(c) for t, c in sorted(counts.items())},
        "tracebacks": sum(c["traceback"] for c in counts.values()),
        "unlocated": sum(c["unlocated"] for c in counts.values()),
        "hangs": sum(c["hang"] for c in counts.values()),
        "distinct_failures": len(failures),
        "ptxas_checked": len({p for p, _ in accepted}),
        "ptxas_rejections": len(rejected),
        "ptxas_seconds": round(time.monotonic() - started, 1),
        "case_seconds": fz.CASE_SECONDS,
    }
    print(json.dumps(summary, indent=2))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
