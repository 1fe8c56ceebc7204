"""Cost and honesty of the `lines` tools (issue 27): slowdown per kernel in full and light mode,
and agreement of the line rankings with an unperturbed reference.

    python benchmarks/lines_cost.py [--modes cuda,triton,matmul] [--out DIR] [--ncu cuda,triton]

For each kernel of tests/gpu/workloads/w_lines.py it runs the workload under `neutrino --benchmark`
with `lines_light` and with `lines` (the runtime times the pruned unprobed kernel and the probed one,
interleaved, after L2 flushes: spec/runtime.md), and prints per kernel:

* `light x`, `full x`: median over launches of probed / unprobed kernel time;
* `instr rho (full vs light)`: Spearman correlation of executed instructions per line between the
  two modes (both exact: 1.0 unless something is wrong);
* `time rho (full vs ncu)`, `instr rho (ncu)`: with --ncu and Nsight Compute reachable, Spearman
  correlation over the lines both know of our time and of ncu's per-line warp-stall samples (the
  top 10 lines by ncu samples) and of ncu's per-line instructions executed; `-` otherwise.

Spearman rho = Pearson correlation of the ranks (ties get their mean rank), scipy.stats.spearmanr.
Writes the table to stdout and, with --out, lines_cost.json there.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
W_LINES = REPO / "tests" / "gpu" / "workloads" / "w_lines.py"
KERNEL_OF = {"triton": "expensive_line", "cuda": "expensive_line", "matmul": "matmul", "loop": "loopk"}


def spearman(a, b) -> float | None:
    from scipy.stats import spearmanr

    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 3 or np.all(a == a[0]) or np.all(b == b[0]):
        return None
    return float(spearmanr(a, b).statistic)


def run_tool(tool: str, mode: str, work: Path, env: dict, timeout: int) -> Path:
    tracedir = work / f"{mode}_{tool}"
    cmd = [sys.executable, "-m", "neutrino.runtime.start.launcher", "-p", tool, "--benchmark", "--tracedir", str(tracedir),
           "--", sys.executable, str(W_LINES), mode]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} under {tool} failed:\n{done.stderr[-2000:]}")
    return tracedir


def kernel_result(tracedir: Path, kernel_part: str):
    """(slowdown median, KernelLines) of the kernel named like kernel_part in the trace."""
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    from gpuutil import main_trace

    from neutrino.tools.lines import analysis as la
    from neutrino.analysis import report

    trace = main_trace(tracedir)
    rep = report.analyze(trace, list(trace.launches))
    name = next(k for k in rep.kernels if kernel_part in k)
    return slowdown(trace.events, name), la.combine(rep.kernels[name].results["lines"])


def slowdown(events: list[dict], kernel: str) -> float | None:
    """Median over the kernel's launches of median(probed_ns) / median(baseline_ns) of its `benchmark`
    event (each holds the 5 interleaved timings of both: spec/runtime.md, --benchmark)."""
    ratios = []
    for ev in events:
        if ev.get("event") != "benchmark" or ev.get("kernel") != kernel:
            continue
        base, probed = np.atleast_1d(ev.get("baseline_ns") or []), np.atleast_1d(ev.get("probed_ns") or [])
        if len(base) and len(probed) and np.median(base) > 0:
            ratios.append(float(np.median(probed) / np.median(base)))
    return float(np.median(ratios)) if ratios else None


def ncu_lines(mode: str, kernel_part: str, env: dict, timeout: int) -> dict[int, tuple[float, float]] | None:
    """line → (warp-stall samples, instructions executed) from `ncu --page source`, or None."""
    cmd = ["ncu", "--set", "full", "--import-source", "yes", "-k", f"regex:{kernel_part}", "-c", "1",
           "--page", "source", "--print-source", "cuda", "--csv", sys.executable, str(W_LINES), mode]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"ncu: not usable here ({e})", file=sys.stderr)
        return None
    rows = [r for r in csv.reader(io.StringIO(done.stdout)) if r]
    header_at = next((i for i, r in enumerate(rows) if "Source" in r and any("Instructions Executed" in c for c in r)), None)
    if done.returncode != 0 or header_at is None:
        print(f"ncu: no source table (rc {done.returncode}): {done.stderr[-600:]}{done.stdout[-600:]}", file=sys.stderr)
        return None
    header = rows[header_at]
    line_col = header.index("#") if "#" in header else 0
    stall_col = next((i for i, c in enumerate(header) if c.startswith("Warp Stall Sampling (All")), None)
    instr_col = next(i for i, c in enumerate(header) if c.startswith("Instructions Executed"))
    out = {}
    for r in rows[header_at + 1:]:
        try:
            line = int(r[line_col])
            stall = float(r[stall_col].replace(",", "")) if stall_col is not None and r[stall_col] else 0.0
            instr = float(r[instr_col].replace(",", "")) if r[instr_col] else 0.0
        except (ValueError, IndexError):
            continue
        out[line] = (stall, instr)
    return out


def compare_with_ncu(k, ncu: dict[int, tuple[float, float]], own_file_suffix: str) -> tuple[float | None, float | None]:
    """Spearman of our per-line time (top 10 lines by ncu samples) and instructions with ncu's, lines of
    the kernel's own source file; inlined lines are folded into their call site, as ncu's cuda view does."""
    ours_t: dict[int, float] = {}
    ours_i: dict[int, float] = {}
    for i, info in enumerate(k.table.lines):
        if info.inlined_at:
            file, line = info.inlined_at.rsplit(":", 1)
            line = int(line)
        else:
            file, line = info.file or "", info.line
        if not file.endswith(own_file_suffix) or line <= 0:
            continue
        ours_t[line] = ours_t.get(line, 0.0) + float(k.ticks[i + 1]) if k.ticks is not None else 0.0
        ours_i[line] = ours_i.get(line, 0.0) + float(k.instructions[i])
    common = sorted(set(ours_t) & set(ncu))
    top = sorted(common, key=lambda line: -ncu[line][0])[:10]
    time_rho = spearman([ours_t[line] for line in top], [ncu[line][0] for line in top])
    instr_rho = spearman([ours_i[line] for line in common], [ncu[line][1] for line in common])
    return time_rho, instr_rho


def top_lines(k, values, n: int = 3) -> list[str]:
    order = np.argsort(-np.asarray(values, float), kind="stable")[:n]
    return [k.table.lines[i].label + (f" (in {k.table.lines[i].inlined_at})" if k.table.lines[i].inlined_at else "")
            for i in order]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="cuda,triton,matmul")
    ap.add_argument("--out")
    ap.add_argument("--ncu", default="", metavar="MODES",
                    help="kernels (e.g. cuda,triton) to compare with Nsight Compute's source view, when ncu runs")
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="lines_cost_"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               TRITON_CACHE_DIR=str(work / "tc"), NEUTRINO_CACHE_DIR=str(work / "nc"), W_LINES_DIR=str(work),
               PYTHONUNBUFFERED="1")
    rows = []
    for mode in args.modes.split(","):
        kernel = KERNEL_OF[mode]
        row = {"kernel": f"{mode}:{kernel}"}
        try:
            light, k_light = kernel_result(run_tool("lines_light", mode, work, env, args.timeout), kernel)
            full, k_full = kernel_result(run_tool("lines", mode, work, env, args.timeout), kernel)
        except (RuntimeError, subprocess.TimeoutExpired, StopIteration, KeyError, ValueError) as e:
            print(f"{mode}: {e}", file=sys.stderr)
            rows.append(row)
            continue
        row.update(light_x=light, full_x=full, lines=len(k_full.table.lines),
                   instr_rho_full_light=spearman(k_full.instructions, k_light.instructions),
                   exact_full_light=bool(np.array_equal(k_full.instructions, k_light.instructions)),
                   top_time=top_lines(k_full, k_full.ticks[1:]), top_instr=top_lines(k_full, k_full.instructions))
        print(json.dumps(row), flush=True)
        if mode in args.ncu.split(","):
            ncu = ncu_lines(mode, kernel, env, args.timeout)
            if ncu:
                row["ncu_top_stalls"] = [line for line, _ in sorted(ncu.items(), key=lambda kv: -kv[1][0])[:3]]
                suffix = "expensive_line.cu" if mode == "cuda" else "w_lines.py"
                row["time_rho_ncu_top10"], row["instr_rho_ncu"] = compare_with_ncu(k_full, ncu, suffix)
        rows.append(row)
        print(json.dumps(row), flush=True)
    fmt = lambda v: "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    cols = ["kernel", "light_x", "full_x", "lines", "instr_rho_full_light", "exact_full_light", "time_rho_ncu_top10",
            "instr_rho_ncu"]
    print("  ".join(cols))
    for row in rows:
        print("  ".join(fmt(row.get(c)) for c in cols))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "lines_cost.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
