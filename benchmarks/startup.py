"""What a profiled run costs beyond its kernels: start-up, first launches and exit (issue 29).

    python benchmarks/startup.py [--steps 50] [--repeat 2] [--tools block_sched,gmem_bytes] [--budget 600]
                                 [--program torch|light|tiny|many] [--rows plain,cold,warm,nomatch,launches,warm:TOOL]
                                 [--extra-tools A,B] [--tables FILE.json]
                                 [--json FILE] [--keep DIR] [--process-start [-n 15]]

Runs a torch.compile training program (benchmarks/startup_program.py: 5 warm-up + STEPS timed
steps) as whole processes, one after another, and prints the issue's table: process wall time
of the program plain, under each tool with the code cache cold (a fresh NEUTRINO_CACHE_DIR, the
shim copied in) and warm (the same directory again), with nothing probed (`-k nomatchxyz`, warm),
and with only each kernel's first launch probed (`--launches 0:1`, warm). A first plain run,
not in the table's baseline, fills Inductor's and Triton's caches: every timed run has them warm.
Each profiled run passes `--timings`; the table puts the phases' sum (spec/runtime.md,
"Start-up and exit phases") beside the measured difference, and checks the program printed the
same loss as the plain run. `--budget` stops starting runs after that many seconds.

`--rows` runs only those rows of the first tool (`warm:TOOL`: another tool warm, its first round's
run cold), `--repeat` rounds of them interleaved, then `--extra-tools` cold and warm while the budget
lasts, and adds a table of medians per row: median wall over the plain runs' median beside the median
`--timings` sum (their ratio: the acceptance's "phases add up to the measured difference within 10%"),
and the add-up on paired differences (`paired_rows`: each profiled run against its nearest plain run),
also with the program's pre-CUDA step (its `imported` mark: the imports, where the program's own
run-to-run variation is largest and none of our phases but `import_hooks` runs) taken off both walls.
`--program light` runs benchmarks/startup_light.py (CuPy, one PTX module, STEPS launches, about a
second) instead: enough rounds fit in a device call to resolve the fixed costs.

`--process-start` measures instead, with no GPU, what every profiled process pays at start when
it loads no CUDA module (the `wire` phase) against the same process unprofiled.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PROGRAM = Path(__file__).resolve().parent / "startup_program.py"
PROGRAMS = {"torch": PROGRAM, "light": Path(__file__).resolve().parent / "startup_light.py",
            "many": Path(__file__).resolve().parent / "startup_many.py",
            "tiny": Path(__file__).resolve().parent / "startup_tiny.py"}
BESIDE = re.compile(r"beside the program ([\d.]+) s")
TIMINGS = re.compile(r"neutrino: timings: ([\d.]+) s added(?: in \d+ processes)?: (.*); program ([\d.]+) s")
GROUP = re.compile(r"(launcher|start|modules|kernels|exit) ([\d.]+) s")
KERNELS = re.compile(r"(\d+) kernel\(s\) seen, (\d+) probed")
AFTER = re.compile(r"after our exit handler ([\d.]+) s")
STAMP = Path(__file__).resolve().parent / "startup_stamp.py"


def run_once(label: str, argv: list[str], env: dict, stamp: Path | None = None, trace: Path | None = None) -> dict:
    """One whole process: wall seconds, CPU seconds (user + system of it and its children), the program's
    JSON line, the timings line's groups, its teardown after the exit handlers (`teardown`: a profiled
    run's `exit_process`; a plain run's from `stamp`, written by startup_stamp.py), and its wall time
    split at the program's start and at the end of the exit handlers (`segments`)."""
    popen_at = time.time()
    started = time.perf_counter()
    r, usage = _run_with_usage(argv, env)
    wall = time.perf_counter() - started
    ended = time.time()
    row = {"run": label, "wall": wall, "rc": r.returncode, "cpu": usage.ru_utime + usage.ru_stime}
    try:
        handlers_end, program_start = (float(x) for x in stamp.read_text().split()) if stamp is not None else (None,) * 2
        row["teardown"] = ended - handlers_end if stamp is not None else None
    except (OSError, ValueError):
        row["teardown"], handlers_end, program_start = None, None, None
    if trace is not None:
        handlers_end, program_start, row["phases"], row["runtime_at"] = profiled_marks(trace)
    if handlers_end is not None and program_start is not None:
        row["segments"] = {"before": program_start - popen_at, "program": handlers_end - program_start,
                           "after": ended - handlers_end}
    after = AFTER.search(r.stderr)
    if after:
        row["teardown"] = float(after.group(1))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    row["program"] = json.loads(lines[-1]) if lines else None
    found = TIMINGS.search(r.stderr)
    if found:
        row["added"] = float(found.group(1))
        row["groups"] = {g: float(s) for g, s in GROUP.findall(found.group(2))}
        row["timings"] = found.group(0)
        beside = BESIDE.search(r.stderr)
        row["beside"] = float(beside.group(1)) if beside else 0.0
    kernels = KERNELS.findall(r.stderr)
    if kernels:
        row["kernels_seen"], row["kernels_probed"] = (int(x) for x in kernels[-1])
    if r.returncode != 0:
        row["stderr_tail"] = r.stderr[-2000:]
    return row


def _run_with_usage(argv: list[str], env: dict) -> tuple[subprocess.CompletedProcess, resource.struct_rusage]:
    """Run argv to its end: (its result, stdout and stderr as text; its own CPU usage, children included).
    os.wait4 reads the usage of this one child, so runs made at the same time (--lanes) do not mix theirs."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = (out.read().decode(errors="replace"), err.read().decode(errors="replace"))
    return subprocess.CompletedProcess(argv, child.returncode, *text), usage


# --hold-gpu: a process that keeps the driver's device state alive between the runs (what persistence mode
# does, without changing the GPU's settings), so no run pays the GPU's initialisation and its variation
HOLDER = """
import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    ok = cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(device), 0) == 0 and \\
        cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) == 0
    print("held" if ok else "not held: a driver call failed", flush=True)
except (OSError, AttributeError) as e:
    print(f"not held: {e}", flush=True)
sys.stdin.read()
"""


def hold_gpu(env: dict) -> subprocess.Popen | None:
    """Start the holder (the first visible GPU); None when it could not hold it (stated on stderr)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    said = holder.stdout.readline().strip()
    print(f"--hold-gpu: {said or 'the holder exited'}", file=sys.stderr)
    if said == "held":
        return holder
    holder.kill()
    return None


def profiled_marks(trace: Path) -> tuple[float | None, float | None, dict, float | None]:
    """(the end of the exit handlers: exit_close's `ended_at`, the program's start: the end of `wire`,
    the phases, the wall clock the runtime began to start: the first CUDA call that needed it) of the
    launcher's child (the run directory `trace`), as startup_stamp.py marks a plain run."""
    from neutrino.runtime.start.phases import read_phases

    phases = read_phases(trace / "event.log")
    wire, close, runtime = phases.get("wire", {}), phases.get("exit_close", {}), phases.get("runtime", {})
    start = wire["started_at"] + wire["seconds"] if "started_at" in wire else None
    # the start-up phases are logged together when the runtime is built: their event's time less their seconds
    runtime_at = (runtime["time"] - sum(phases.get(n, {}).get("seconds", 0.0) for n in ("imports", "tool", "runtime"))
                  if "time" in runtime else None)
    return (close.get("ended_at"), start, {n: f.get("seconds", 0.0) for n, f in phases.items() if n != "start"},
            runtime_at)


def profiled_argv(tool: str, steps: int, trace: Path, *extra: str, program: Path = PROGRAM) -> list[str]:
    return [sys.executable, "-m", "neutrino", "-p", tool, "--timings", "-o", str(trace), *extra, "--",
            sys.executable, str(program), str(steps)]


def fresh_cache(scratch: Path, name: str, shim_from: Path, probes_from: Path | None = None) -> Path:
    """A cold code cache with the shim already built (building it is an install cost, not a run's);
    with `probes_from`, that cache's checked probe texts too (`coldk`: new kernels, the tool known)."""
    cache = scratch / name
    cache.mkdir(parents=True, exist_ok=True)
    for shim in shim_from.glob("shim-*.so"):
        shutil.copy2(shim, cache / shim.name)
    if probes_from is not None and (probes_from / "probes").is_dir():
        shutil.copytree(probes_from / "probes", cache / "probes", dirs_exist_ok=True)
    return cache


def keep_event_logs(trace: Path, keep: str | None, number: int) -> None:
    """--keep DIR: each run's event logs (phase, module and no_ptx events) as DIR/run<N>[.<dir>].log."""
    if not keep:
        return
    Path(keep).mkdir(parents=True, exist_ok=True)
    for log in sorted(trace.rglob("event.log")):
        part = "" if log.parent == trace else "." + log.parent.name
        shutil.copy2(log, Path(keep) / f"run{number}{part}.log")


ROWS = ("plain", "cold", "warm", "nomatch", "launches", "bare", "coldk")
FILL = "-p {tool}, fills the code cache (not a row)"


def row_plan(rows: list[str], tool: str, rounds: int) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """--rows: `rounds` rounds, each running every row once in the order given (interleaved, so a
    slow spell of the machine touches every row alike). A cold row gets a fresh code cache each
    round; the others use the tool's cache (which the first cold row, or warm row, fills)."""
    profiled = [row for row in rows if row != "plain"]
    cold_first = bool(profiled) and profiled[0] == "cold"  # round 0's cold run fills the tool's cache
    runs = [] if cold_first or not profiled else [(FILL.format(tool=tool), tool, tool, ())]
    for r in range(rounds):
        for row in rows:
            if row.startswith("warm:"):  # another tool warm; its first round's run fills its cache (its cold row)
                other = row.split(":", 1)[1]
                runs.append((f"-p {other}, code cache {'cold' if r == 0 else 'warm'}", other, other, ()))
                continue
            runs.append({
                "plain": ("plain", "", "", ()),
                "cold": (f"-p {tool}, code cache cold", tool, tool if cold_first and r == 0 else f"{tool}-cold{r}", ()),
                "warm": (f"-p {tool}, code cache warm", tool, tool, ()),
                # every kernel built again, the probe's checked text cached (a user's changed kernels): the
                # cold row less the launcher's probe compile (name it after a row that fills the tool's cache)
                "coldk": (f"-p {tool}, code cache cold, probe checked", tool, f"{tool}-coldk{r}", ()),
                "nomatch": (f"-p {tool} -k nomatchxyz (nothing probed), warm", tool, tool, ("-k", "nomatchxyz")),
                "launches": (f"-p {tool} --launches 0:1, warm", tool, tool, ("--launches", "0:1")),
                # nothing probed and no CUPTI timeline: what the timeline costs the program, by difference
                "bare": (f"-p {tool} -k nomatchxyz --no-timeline, warm", tool, tool,
                         ("-k", "nomatchxyz", "--no-timeline")),
            }[row])
    return runs


def extra_tool_runs(tools: list[str] | None) -> list:
    """--extra-tools A,B: after the rounds, each tool cold then warm (a cache of its own), while the budget lasts."""
    return [run for tool in tools or () for run in ((f"-p {tool}, code cache cold", tool, f"{tool}-extra", ()),
                                                    (f"-p {tool}, code cache warm", tool, f"{tool}-extra", ()))]


def per_thread_count(runs: list, counts: list[int] | None) -> list:
    """--build-threads A,B: each profiled run once per count, one after the other (`--build-threads N`
    in its label and options); a cold run's cache is fresh per count, a warm one shared per count."""
    if not counts:
        return runs
    out = []
    for label, tool, cache, extra in runs:
        if not tool:
            out.append((label, tool, cache, extra))
            continue
        for n in counts:
            out.append((f"{label}, --build-threads {n}", tool, f"{cache}-bt{n}", (*extra, "--build-threads", str(n))))
    return out


def plan(tools: list[str], repeat: int) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(label, tool or '' for plain, cache name, extra options), in the order they run."""
    runs = [("plain", "", "", ())] * repeat
    for tool in tools:
        runs.append((f"-p {tool}, code cache cold", tool, tool, ()))
        runs += [(f"-p {tool}, code cache warm", tool, tool, ())] * repeat
    first = tools[0]
    runs += [(f"-p {first} -k nomatchxyz (nothing probed), warm", first, first, ("-k", "nomatchxyz"))] * repeat
    runs.append((f"-p {first} --launches 0:1, warm", first, first, ("--launches", "0:1")))
    return runs


def table(rows: list[dict]) -> str:
    plain = [r["wall"] for r in rows if r["run"] == "plain" and r["rc"] == 0]
    base = statistics.median(plain) if plain else float("nan")
    loss = next((r["program"]["loss"] for r in rows if r["run"] == "plain" and r.get("program")), None)
    out = ["| run | wall s | over plain s | --timings added s | launcher | start | modules | kernels | exit "
           "| beside the program | kernels probed | same loss |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        g = r.get("groups", {})
        cells = [f"{g[k]:.2f}" if k in g else "" for k in ("launcher", "start", "modules", "kernels", "exit")]
        same = "" if not r.get("program") else ("yes" if r["program"]["loss"] == loss else f"no ({r['program']['loss']})")
        added = f"{r['added']:.2f}" if "added" in r else ""
        probed = f"{r.get('kernels_probed', '')}/{r.get('kernels_seen', '')}" if "kernels_seen" in r else ""
        note = "" if r["rc"] == 0 else f" (exit {r['rc']})"
        over = "" if r["run"].startswith("plain") else f"{r['wall'] - base:+.2f}"
        beside = f"{r['beside']:.2f}" if r.get("beside") else ""
        out.append(f"| {r['run']}{note} | {r['wall']:.2f} | {over} | {added} | " + " | ".join(cells) +
                   f" | {beside} | {probed} | {same} |")
    return "\n".join(out) + "\n"


def medians(rows: list[dict]) -> str:
    """Per configuration: runs, median wall, median wall minus the plain runs' median, median
    --timings sum; the teardown after the exit handlers (exit_process) and, with the plain runs'
    median teardown taken off, the part of it that is ours; the accounted seconds (sum + our
    teardown) over the measured difference (the acceptance asks 0.9-1.1)."""
    plain = [r["wall"] for r in rows if r["run"] == "plain" and r["rc"] == 0]
    base = statistics.median(plain) if plain else float("nan")
    spread = (max(plain) - min(plain)) if len(plain) > 1 else float("nan")
    plain_teardowns = [r["teardown"] for r in rows if r["run"] == "plain" and r.get("teardown") is not None]
    plain_teardown = statistics.median(plain_teardowns) if plain_teardowns else float("nan")
    out = [f"plain: median {base:.3f} s over {len(plain)} runs (max - min {spread:.3f} s); teardown after "
           f"the exit handlers: median {plain_teardown:.3f} s", "",
           "| run | runs | median wall s | over plain s | median --timings added s | added / over plain "
           "| median beside the program s | median teardown s | ours (− plain's) s | added + ours s "
           "| (added + ours) / over plain |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    fill = FILL.split(", ", 1)[1]
    for label in dict.fromkeys(r["run"] for r in rows if not r["run"].startswith(("plain", "warm-up"))):
        if fill in label:
            continue
        mine = [r for r in rows if r["run"] == label and r["rc"] == 0]
        if not mine:
            continue
        wall = statistics.median(r["wall"] for r in mine)
        added = [r["added"] for r in mine if "added" in r]
        beside = [r.get("beside", 0.0) for r in mine]
        added_s = f"{statistics.median(added):.3f}" if added else ""
        ratio = f"{statistics.median(added) / (wall - base):.2f}" if added and wall - base > 0 else ""
        teardowns = [r["teardown"] for r in mine if r.get("teardown") is not None]
        teardown = statistics.median(teardowns) if teardowns else float("nan")
        accounted = [r["added"] + r["teardown"] - plain_teardown for r in mine
                     if "added" in r and r.get("teardown") is not None]
        acc = statistics.median(accounted) if accounted else float("nan")
        acc_ratio = f"{acc / (wall - base):.2f}" if accounted and wall - base > 0 else ""
        out.append(f"| {label} | {len(mine)} | {wall:.3f} | {wall - base:+.3f} | {added_s} | {ratio} | "
                   f"{statistics.median(beside):.3f} | {teardown:.3f} | {teardown - plain_teardown:+.3f} | "
                   f"{acc:.3f} | {acc_ratio} |")
    return "\n".join(out) + "\n"


def nearest_plain(rows: list[dict], i: int) -> dict | None:
    """The plain run closest to row i in run order (the earlier one on a tie): its round's, as
    row_plan interleaves them, so a slow spell of the machine shifts both alike."""
    plain = [j for j, r in enumerate(rows) if r["run"] == "plain" and r["rc"] == 0]
    if "round" in rows[i]:  # --lanes: the plain run made at the same time, on another GPU
        plain = [j for j in plain if rows[j].get("round") == rows[i]["round"]]
    return rows[min(plain, key=lambda j: (abs(j - i), j))] if plain else None


def quartiles(values: list[float]) -> tuple[float, float]:
    """The 25th and 75th percentiles (statistics.quantiles, inclusive); one value: itself twice."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"),) * 2
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


PRE_CUDA_STEP = "imported"  # the programs' first step (their imports), before any CUDA call of theirs


def pre_cuda_seconds(row: dict) -> float | None:
    """The program's own first step, `imported` (from its `started` mark), before its first CUDA call:
    none of our phases runs there (wire ends before `started`; the runtime starts at the first CUDA
    call), only our import hooks' look-ups (microseconds). None: the program printed no such marks,
    or the run's runtime started before the step ended (`runtime_at`: then the step holds our work)."""
    marks = (row.get("program") or {}).get("marks") or {}
    if PRE_CUDA_STEP not in marks or "started" not in marks:
        return None
    runtime_at = row.get("runtime_at")
    if runtime_at is not None and runtime_at < marks[PRE_CUDA_STEP]:
        return None
    return marks[PRE_CUDA_STEP] - marks["started"]


def _verdict(ratio: float, accounted: float, low: float, high: float, pairs: int) -> str:
    return ("adds up" if 0.9 <= ratio <= 1.1 else "within noise" if low <= accounted <= high and pairs > 1
            else "off")


def paired_rows(rows: list[dict], leave_out: tuple[str, ...] = ()) -> dict[str, list[dict]]:
    """Per configuration, the add-up on paired differences, twice: on the whole wall, and with the
    pre-CUDA step taken off both runs (`pre_cuda_seconds`; only the pairs where both have it). Each:
    {pairs, diff (median wall difference), low, high (its 25-75% range), accounted (median of
    `--timings` added + the run's teardown after our exit handler - its plain run's teardown), ratio,
    verdict}. `leave_out`: phases not counted (a check that the add-up can fail without them)."""
    fill = FILL.split(", ", 1)[1]
    by_label: dict[str, list[tuple[float, float, float | None]]] = {}
    for i, r in enumerate(rows):
        if r["run"].startswith(("plain", "warm-up")) or fill in r["run"] or r["rc"] or "added" not in r:
            continue
        plain = nearest_plain(rows, i)
        if plain is None:
            continue
        ours = (r["teardown"] - plain["teardown"]) if None not in (r.get("teardown"), plain.get("teardown")) else 0.0
        ours -= sum((r.get("phases") or {}).get(n, 0.0) for n in leave_out)
        mine, theirs = pre_cuda_seconds(r), pre_cuda_seconds(plain)
        less = None if None in (mine, theirs) else r["wall"] - mine - (plain["wall"] - theirs)
        by_label.setdefault(r["run"], []).append((r["wall"] - plain["wall"], r["added"] + ours, less))
    out = {}
    for label, pairs in by_label.items():
        out[label] = []
        with_step = [(x, a) for _, a, x in pairs if x is not None]
        for diffs, accounted in (([d for d, _, _ in pairs], [a for _, a, _ in pairs]),
                                 ([x for x, _ in with_step], [a for _, a in with_step])):
            if not diffs:
                out[label].append({"pairs": 0})
                continue
            diff, acc = statistics.median(diffs), statistics.median(accounted)
            low, high = quartiles(diffs)
            ratio = acc / diff if diff > 0 else float("nan")
            out[label].append({"pairs": len(diffs), "diff": diff, "low": low, "high": high, "accounted": acc,
                               "ratio": ratio, "verdict": _verdict(ratio, acc, low, high, len(diffs))})
    return out


def paired_table(rows: list[dict]) -> str:
    """The add-up per configuration on paired differences (paired_rows): each profiled run's wall minus the
    wall of its nearest plain run (nearest_plain). Columns: pairs; the median difference and its 25-75%
    range; the median accounted seconds, `--timings` added + the run's teardown after our exit
    handler - its plain run's teardown; their ratio (the acceptance: 0.9-1.1); and the verdict:
    `adds up` (ratio within 0.9-1.1), `within noise` (the accounted seconds fall inside the 25-75%
    range of the differences: the runs cannot tell them apart), else `off`. Then the same with each
    run's pre-CUDA step (`pre_cuda_seconds`: the program's imports, where its own run-to-run variation
    is largest and no phase of ours runs) taken off both runs' walls: the difference less noise the
    program makes before we start (pairs: those where both runs printed the step)."""
    out = ["| run | pairs | median wall − its plain s | 25–75% s | median accounted s | accounted / difference "
           "| verdict | pre-CUDA step off: pairs | median difference s | 25–75% s | median accounted s "
           "| accounted / difference | verdict |",
           "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for label, estimates in paired_rows(rows).items():
        cells = [f"{e['pairs']} | {e['diff']:+.3f} | {e['low']:+.3f} to {e['high']:+.3f} | {e['accounted']:.3f} | "
                 f"{e['ratio']:.2f} | {e['verdict']}" if e["pairs"] else "0 | | | | |" for e in estimates]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def fixed_effects_table(rows: list[dict]) -> str:
    """--lanes: each configuration's effect on the wall from a least-squares fit of wall ~ configuration + round +
    GPU over the rounds' runs (plain the reference; each round and each GPU its own offset), with its standard error,
    beside the median `--timings` sum. The residual standard deviation is the runs' own variation, what no pairing
    removes. Empty without rounds."""
    import numpy as np

    runs = [r for r in rows if "round" in r and r["rc"] == 0 and "cold" not in r["run"]]
    configs = ["plain"] + sorted({r["run"] for r in runs} - {"plain"})
    rounds, lanes = sorted({r["round"] for r in runs}), sorted({r["lane"] for r in runs})
    columns = len(configs) + len(rounds) + len(lanes) - 2
    if len(configs) < 2 or len(runs) <= columns:
        return ""
    x = np.array([[1.0] + [float(r["run"] == c) for c in configs[1:]] + [float(r["round"] == k) for k in rounds[1:]]
                  + [float(r["lane"] == g) for g in lanes[1:]] for r in runs])
    y = np.array([r["wall"] for r in runs])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ beta
    variance = float(residual @ residual) / (len(y) - columns)
    se = np.sqrt(np.diag(variance * np.linalg.pinv(x.T @ x)))
    out = [f"fixed effects (wall ~ configuration + round + GPU, {len(runs)} runs): residual sd "
           f"{variance ** 0.5:.3f} s", "", "| run | effect s | SE s | median --timings added s |",
           "| --- | ---: | ---: | ---: |"]
    for i, label in enumerate(configs[1:], 1):
        added = [r["added"] for r in runs if r["run"] == label and "added" in r]
        out.append(f"| {label} | {beta[i]:+.3f} | {se[i]:.3f} | {statistics.median(added) if added else float('nan'):.3f} |")
    return "\n".join(out) + "\n"


def segment_phases() -> dict[str, tuple[str, ...]]:
    from neutrino.runtime.start.phases import ADDED_PHASES

    before = ("launcher_start", "launcher_check", "launcher_spawn", "constructor", "wire")
    return {"before": before, "program": tuple(n for n in ADDED_PHASES if n not in before),
            "after": ("launcher_close",)}
LAUNCHER_GROUP = re.compile(r"launcher [\d.]+ s \(([^)]*)\)")


def launcher_phases(row: dict) -> dict[str, float]:
    found = LAUNCHER_GROUP.search(row.get("timings", ""))
    return {f"launcher_{k}": float(v) for k, v in (p.split() for p in found.group(1).split(", "))} if found else {}


def segments_table(rows: list[dict]) -> str:
    """Per configuration, medians over its runs: each segment's wall time minus the plain runs' median of
    the same segment, beside the phases that fall in it (segment_phases(); `after`: our share of the
    teardown, exit_process minus the plain runs' teardown, and launcher_close); the rest (`unseen`) is
    what no phase covers. Also the CPU seconds over plain, and the fastest run's wall over the fastest
    plain run beside that run's phases (a slow spell of the machine adds time to a run; it never removes it)."""
    plain = [r for r in rows if r["run"] == "plain" and r["rc"] == 0 and "segments" in r]
    if not plain:
        return ""
    segment_names = segment_phases()
    base = {k: statistics.median(r["segments"][k] for r in plain) for k in segment_names}
    cpu_base = statistics.median(r["cpu"] for r in plain)
    fastest_plain = min(r["wall"] for r in plain)
    base_teardown = statistics.median(r["teardown"] for r in plain if r.get("teardown") is not None)
    out = [f"segments (plain medians: before the program {base['before']:.3f} s, the program "
           f"{base['program']:.3f} s, after it {base['after']:.3f} s; CPU {cpu_base:.3f} s); each cell: "
           "median over plain / median phases in it",
           "", "| run | runs | before: over plain / phases | program: over plain / phases | after: over plain / "
           "phases | total over plain / phases / ratio | unseen s | CPU over plain s | fastest: over fastest plain "
           "/ its phases / ratio |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label in dict.fromkeys(r["run"] for r in rows if "phases" in r):
        mine = [r for r in rows if r["run"] == label and r["rc"] == 0 and "segments" in r]
        if not mine:
            continue
        cells, over_sum, phase_sum = [], 0.0, 0.0
        for seg, names in segment_names.items():
            per_run = []
            for r in mine:
                phases = {**r["phases"], **launcher_phases(r), "exit_process": r.get("teardown") or 0.0}
                seconds = sum(phases.get(n, 0.0) for n in names)
                if seg == "after":  # our share of the teardown: exit_process minus the plain runs'
                    seconds += phases.get("exit_process", 0.0) - base_teardown
                per_run.append((r["segments"][seg] - base[seg], seconds))
            over = statistics.median(o for o, _ in per_run)
            accounted = statistics.median(s for _, s in per_run)
            over_sum, phase_sum = over_sum + over, phase_sum + accounted
            cells.append(f"{over:+.3f} / {accounted:.3f}")
        fastest = min(mine, key=lambda r: r["wall"])
        fast_phases = fastest.get("added", 0.0) + (fastest.get("teardown") or 0.0) - base_teardown
        fast_over = fastest["wall"] - fastest_plain
        ratio = f"{phase_sum / over_sum:.2f}" if over_sum > 0 else ""
        fast_ratio = f"{fast_phases / fast_over:.2f}" if fast_over > 0 else ""
        cpu = statistics.median(r["cpu"] for r in mine) - cpu_base
        out.append(f"| {label} | {len(mine)} | " + " | ".join(cells) + f" | {over_sum:+.3f} / {phase_sum:.3f} / {ratio} "
                   f"| {over_sum - phase_sum:+.3f} | {cpu:+.3f} | {fast_over:+.3f} / {fast_phases:.3f} / {fast_ratio} |")
    return "\n".join(out) + "\n"


def marks_table(rows: list[dict]) -> str:
    """Programs that print `marks` (name -> wall clock of a step, startup_light.py): per configuration,
    the median of each step's seconds (from the mark before it) minus the plain runs' median of it. Where a profiled run's extra time falls inside the program."""
    def steps(r):
        marks = (r.get("program") or {}).get("marks")
        if not marks:
            return None
        names = list(marks)
        return {b: marks[b] - marks[a] for a, b in zip(names, names[1:])}
    plain = [s for s in (steps(r) for r in rows if r["run"] == "plain" and r["rc"] == 0) if s]
    if not plain:
        return ""
    names = list(plain[0])
    base = {n: statistics.median(s[n] for s in plain) for n in names}
    out = ["program steps (seconds from the mark before; plain medians: " +
           ", ".join(f"{n} {base[n]:.3f}" for n in names) + "); each cell: median over plain (min over plain)", "",
           "| run | runs | " + " | ".join(names) + " |", "| --- | ---: |" + " ---: |" * len(names)]
    for label in dict.fromkeys(r["run"] for r in rows if "phases" in r):
        mine = [s for s in (steps(r) for r in rows if r["run"] == label and r["rc"] == 0) if s]
        if mine:
            cells = [f"{statistics.median(s[n] for s in mine) - base[n]:+.3f} ({min(s[n] for s in mine) - base[n]:+.3f})"
                     for n in names]
            out.append(f"| {label} | {len(mine)} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def tables_from_json(path: str) -> None:
    """--tables FILE: the tables again from a --json file of an earlier run (no program run)."""
    rows = json.loads(Path(path).read_text())
    print(table(rows))
    print(medians(rows))
    print(paired_table(rows))
    print(fixed_effects_table(rows))
    print(segments_table(rows))
    print(marks_table(rows))


def lane_setups(env: dict, lanes: int) -> list[tuple[dict, list[str]]]:
    """--lanes N: per lane, its environment (one GPU: CUDA_VISIBLE_DEVICES) and the command prefix that pins
    it to its share of this process's CPUs (taskset), so runs made at the same time do not take each other's."""
    cpus = sorted(os.sched_getaffinity(0))
    share = max(1, len(cpus) // lanes)
    setups = []
    for lane in range(lanes):
        mine = cpus[lane * share:(lane + 1) * share] or cpus
        setups.append((dict(env, CUDA_VISIBLE_DEVICES=str(lane)), ["taskset", "-c", ",".join(map(str, mine))]))
    return setups


def in_rounds(runs: list, rows: list[str], rounds: int) -> tuple[list, list[list]]:
    """row_plan's runs split into the fill runs before the rounds and the rounds (each `len(rows)` runs)."""
    width = len(rows)
    head = len(runs) - width * rounds
    return runs[:head], [runs[head + r * width:head + (r + 1) * width] for r in range(rounds)]


class Runner:
    """Makes one planned run (plain or profiled) on a lane: caches, stamps and traces named per run."""

    def __init__(self, args, env: dict, scratch: Path, program: Path):
        from neutrino.runtime.start.build import build_shim

        self.args, self.env, self.scratch, self.program = args, env, scratch, program
        self.shim_dir = build_shim().parent
        self.caches: dict[str, Path] = {}
        self.count = 0

    def cache(self, tool: str, name: str) -> Path:
        if name not in self.caches:  # made before any run of a round starts: no two threads create one
            probes_from = self.caches.get(tool) if "-coldk" in name else None
            self.caches[name] = fresh_cache(self.scratch, name, self.shim_dir, probes_from)
        return self.caches[name]

    def run(self, planned: tuple, lane: tuple[dict, list[str]] | None = None, number: int = 0) -> dict:
        label, tool, cache_name, extra = planned
        env, prefix = lane if lane is not None else (self.env, [])
        steps = str(self.args.steps)
        if not tool:
            stamp = self.scratch / f"stamp{number}"
            return run_once(label, [*prefix, sys.executable, str(STAMP), str(self.program), steps],
                            dict(env, STARTUP_STAMP=str(stamp)), stamp)
        trace = self.scratch / f"trace{number}"
        row = run_once(label, [*prefix, *profiled_argv(tool, self.args.steps, trace, *extra, program=self.program)],
                       dict(env, NEUTRINO_CACHE_DIR=str(self.cache(tool, cache_name))), trace=trace)
        keep_event_logs(trace, self.args.keep, number)
        return row


def _said(row: dict) -> None:
    lane = f" [round {row['round']}, GPU {row['lane']}]" if "lane" in row else ""
    print(f"{row['run']}{lane}: {row['wall']:.2f} s" + (f"; {row['timings']}" if "timings" in row else "") +
          (f"\n{row.get('stderr_tail', '')}" if row["rc"] else ""), file=sys.stderr, flush=True)


def program_table(args) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p))
    env.pop("NEUTRINO_OPTIONS", None)
    scratch = Path(tempfile.mkdtemp(prefix="neutrino-startup-"))
    deadline = time.monotonic() + args.budget
    program = PROGRAMS[args.program]
    lanes = lane_setups(env, args.lanes) if args.lanes > 1 else None
    holders = [hold_gpu(lane_env) for lane_env, _ in (lanes or [(env, [])])] if args.hold_gpu else []
    runner = Runner(args, env, scratch, program)
    warm_up = [sys.executable, str(program), str(args.steps)]
    label = "warm-up (fills Inductor/Triton caches; not in the baseline)"
    rows = [run_once(label, warm_up, env)]
    if lanes:  # every GPU's first process paid before the rounds, on its own CPUs
        with ThreadPoolExecutor(len(lanes)) as pool:
            rows += pool.map(lambda lane: run_once(label, [*lane[1], *warm_up], lane[0]), lanes)
    runs = row_plan(args.rows, args.tools[0], args.repeat) if args.rows else plan(args.tools, args.repeat)
    if lanes:
        fills, rounds = in_rounds(runs, args.rows, args.repeat)
        sequential = fills
    else:
        runs += extra_tool_runs(args.extra_tools)
        sequential, rounds = per_thread_count(runs, args.build_threads), []

    def save(new_rows: list[dict]) -> None:
        rows.extend(new_rows)
        for row in new_rows:
            _said(row)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))

    for planned in sequential:
        if time.monotonic() > deadline:
            print(f"budget of {args.budget:.0f} s spent: later runs not made", file=sys.stderr)
            break
        save([runner.run(planned, number=len(rows))])
    for r, group in enumerate(rounds):
        if time.monotonic() > deadline:
            print(f"budget of {args.budget:.0f} s spent: rounds {r} to {len(rounds) - 1} not made", file=sys.stderr)
            break
        # row k on GPU (k + r) mod lanes: every row meets every GPU and CPU share in turn
        placed = [(planned, (k + r) % len(lanes)) for k, planned in enumerate(group)]
        for (_, tool, cache_name, _), _ in placed:
            if tool:
                runner.cache(tool, cache_name)
        base = len(rows)
        with ThreadPoolExecutor(len(placed)) as pool:
            made = list(pool.map(lambda item: runner.run(item[1][0], lanes[item[1][1]], base + item[0]),
                                 enumerate(placed)))
        for row, (_, lane) in zip(made, placed):
            row.update({"round": r, "lane": lane})
        save(made)
    for holder in holders:
        if holder is not None:
            holder.stdin.close()
            holder.wait()
    held = "; the GPU held by a process of ours between runs (--hold-gpu)" if any(holders) else ""
    how = (f"each round's rows at the same time, one per GPU ({len(lanes)} lanes, rotated), each profiled run "
           "paired with its round's plain run" if lanes else "one after another")
    print(f"python {sys.version.split()[0]}, {args.steps} timed steps; wall = whole process, {how}{held}\n")
    print(table(rows))
    print(medians(rows))
    print(paired_table(rows))
    print(fixed_effects_table(rows))
    print(segments_table(rows))
    print(marks_table(rows))
    shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------- --process-start (no GPU)

PROFILED_ENV = """
import json, sys
sys.path.insert(0, {repo!r})
from neutrino.runtime.start.build import build_shim
from neutrino.runtime.start.launcher import child_env
from neutrino.runtime.start.options import RuntimeOptions
print(json.dumps(child_env(RuntimeOptions(probe={probe!r}, tracedir={trace!r}), build_shim())))
"""


def median_times(command: list[str], env: dict, n: int) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system) of the child, in seconds (CPU time
    is what to compare on a shared machine: it does not grow when other processes take the cores)."""
    walls, cpus = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def process_start(args) -> None:
    plain = dict(os.environ, PYTHONPATH=str(HERE))
    plain.pop("NEUTRINO_OPTIONS", None)
    code = PROFILED_ENV.format(repo=str(HERE), probe=args.tools[0], trace=str(Path(tempfile.gettempdir()) / "nst"))
    profiled = json.loads(subprocess.run([sys.executable, "-c", code], env=plain, capture_output=True, text=True,
                                         check=True).stdout)
    rows = [("python -c pass (unprofiled)", median_times([sys.executable, "-c", "pass"], plain, args.n)),
            ("python -c pass (profiled, no CUDA module)", median_times([sys.executable, "-c", "pass"], profiled, args.n))]
    loaded = subprocess.run([sys.executable, "-c", "import sys; print(sorted({'numpy', 'attrs'} & set(sys.modules)))"],
                            env=profiled, capture_output=True, text=True, check=True).stdout.strip()
    print(f"Python {sys.version.split()[0]}, median of {args.n}")
    for name, (wall, cpu) in rows:
        print(f"{name:45s} {wall * 1e3:8.1f} ms wall {cpu * 1e3:8.1f} ms cpu")
    print(f"{'added per profiled process':45s} {(rows[1][1][0] - rows[0][1][0]) * 1e3:8.1f} ms wall "
          f"{(rows[1][1][1] - rows[0][1][1]) * 1e3:8.1f} ms cpu")
    print(f"modules loaded at start: {loaded}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2, help="runs of plain and of each warm configuration")
    parser.add_argument("--tools", default="block_sched,gmem_bytes,program_progress",
                        type=lambda s: [t for t in s.split(",") if t], help="built-in tools, the first for -k/--launches")
    parser.add_argument("--budget", type=float, default=1800.0, help="seconds after which no run is started")
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="torch",
                        help="torch: the torch.compile script (STEPS timed steps); light: startup_light.py, "
                             "a CuPy PTX program of about a second (STEPS launches); many: startup_many.py, "
                             "64 kernels looked up, STEPS of them launched; tiny: startup_tiny.py, the driver "
                             "through ctypes (STEPS launches), no framework")
    parser.add_argument("--rows", default=None, type=lambda s: [r for r in s.split(",") if r],
                        help=f"instead of the full table: these rows of the first tool ({', '.join(ROWS)}; "
                             "warm:TOOL: another tool warm, its first round's run cold), "
                             "--repeat rounds of them interleaved")
    parser.add_argument("--extra-tools", default=None, type=lambda s: [t for t in s.split(",") if t], metavar="A,B",
                        help="after the rounds, each of these tools cold then warm, as long as the budget lasts")
    parser.add_argument("--build-threads", default=None, type=lambda s: [int(n) for n in s.split(",") if n],
                        metavar="A,B", help="run each profiled row once per build-thread count (labels say which)")
    parser.add_argument("--hold-gpu", action="store_true",
                        help="keep the GPU initialised by a process of ours while the runs are made (as persistence "
                             "mode would): the runs then do not pay, nor vary with, the GPU's initialisation")
    parser.add_argument("--lanes", type=int, default=1,
                        help="with --rows: each round's rows run at the same time, one per GPU (as many GPUs as "
                             "rows), pinned to a share of the CPUs, rotated round by round; each profiled run is "
                             "paired with its round's plain run, so what slows the whole host slows both alike")
    parser.add_argument("--json", default=None, help="also write every run (timings line included) to this file")
    parser.add_argument("--keep", default=None, metavar="DIR", help="copy each profiled run's event logs here")
    parser.add_argument("--process-start", action="store_true", help="no GPU: the start of a process without CUDA")
    parser.add_argument("--tables", default=None, metavar="FILE", help="print the tables of a --json FILE, run nothing")
    parser.add_argument("-n", type=int, default=15, help="--process-start: runs per median")
    args = parser.parse_args()
    if args.lanes > 1 and (not args.rows or len(args.rows) > args.lanes or args.extra_tools or args.build_threads):
        parser.error("--lanes N needs --rows with at most N rows, and no --extra-tools or --build-threads")
    if args.tables:
        tables_from_json(args.tables)
    else:
        process_start(args) if args.process_start else program_table(args)


if __name__ == "__main__":
    main()
