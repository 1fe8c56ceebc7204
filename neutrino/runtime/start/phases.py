"""Where a profiled process's own seconds go: start-up, per-module and per-kernel work, exit.

One `PhaseClock` per profiled process (made by bootstrap.py at interpreter start)
adds up the wall time of each phase (spec/runtime.md, "Start-up and exit phases").
At exit the runtime writes one `phase` event per phase that ran (spec/trace-format.md);
with `--timings` the launcher reads them back and prints one line (`timings_line`).

Imports nothing beyond the standard library: it is loaded at interpreter start.
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager

# The phases, in the order the timings line names them, each with its group.
# `import_hooks`: our actions when the program first imports a package we watch (import_hooks.AfterImport:
# JAX's flags, the autotuners' hooks), in the program's own imports
START_PHASES = ("constructor", "wire", "imports", "tool", "runtime", "import_hooks")
MODULE_PHASES = ("module_ptx", "lookup")
BUILD_PHASES = ("verify", "cache_lookup", "instrument", "jit", "build_wait", "module_load", "kernel_write")
# `launch`: the probed launches' own host time in our launch callback, the builds above (which a first launch
# runs inside it) and `launch_args` taken off (hooks.make_callbacks); `fast_launch`: the later probed launches'
# host time in the shim's C fast path (shim/fastlaunch.c); `launch_args`: a probed launch's new argument set
# written to launch_args.jsonl, its pointers resolved to tensors (context_tables/tables.py: the shim calls
# into Python for it from either path)
# `api_hooks`: our Python callbacks for the program's graph, linker and unload calls (hooks.py), the builds and
# argument sets inside them taken off
KERNEL_PHASES = BUILD_PHASES + ("launch", "fast_launch", "launch_args", "api_hooks")
# Taken off a Python launch callback's time: the work inside it that is a phase of its own
INSIDE_LAUNCH = BUILD_PHASES + ("launch_args",)
EXIT_PHASES = ("exit_drain", "exit_timeline", "exit_tables", "exit_hooks", "exit_summary", "exit_close")
# Timed by the launcher after our exit handler: the process's teardown, the program's own (a plain run
# pays it: seconds for torch) with ours. Listed after the program's seconds, not added (as the build
# threads' work); benchmarks/startup.py takes the plain run's teardown from it to account for ours.
AFTER_PHASES = ("exit_process",)
# Work of the build threads (prebuild.py), beside the program: listed, not added to the time it waited
# (that is `build_wait`, the launches' wait for it). Summed over threads: it may exceed the wall time.
BACKGROUND_PHASES = ("background_lookup", "background_instrument", "background_jit")
# The driver's own time in the program's module loads, clocked by the shim around the real call
# (shim/preload.c): `module_jit` the loads of PTX text (the driver JIT-compiles it inside the call) and
# cuLinkComplete, `module_driver` every other load. Listed, not added: a plain run loading the same
# images pays them too; a profiled run pays more only where we made the program load PTX instead of
# cubins (CUPY_COMPILE_WITH_PTX, set by the launcher: spec/runtime.md).
DRIVER_PHASES = ("module_jit", "module_driver")
# The rest of the launcher's child, from the spawn to its exit, computed by the launcher (listed, not added:
# a plain run pays them): `exec` (fork, exec and the dynamic linker, up to the shim's constructor),
# `interpreter` (after the constructor up to sitecustomize: the interpreter's start and `site`) and
# `own_work` (what is left of the process's wall time once every phase is taken off: the program's own
# work, and whatever of ours no phase sees). With them the phases cover the process from spawn to exit.
PROCESS_PHASES = ("exec", "interpreter", "own_work")
PHASES = (START_PHASES + MODULE_PHASES + KERNEL_PHASES + EXIT_PHASES + AFTER_PHASES + BACKGROUND_PHASES +
          DRIVER_PHASES + PROCESS_PHASES)
ADDED_PHASES = START_PHASES + MODULE_PHASES + KERNEL_PHASES + EXIT_PHASES
LAUNCHER_PHASES = ("launcher_start", "launcher_check", "launcher_spawn", "launcher_close")


class PhaseClock:
    """Total seconds, count and longest single run per phase name. Thread-safe: module loads
    and kernel builds may come from several of the program's threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._totals: dict[str, list] = {}  # name -> [seconds, count, max_seconds]
        self._notes: dict[str, dict] = {}  # name -> extra fields of its event (the tool's cache state)
        self._open: dict[str, float] = {}  # phases begun and not yet ended (begin/end)
        self._emitted: set[str] = set()

    def add(self, name: str, seconds: float, *, runs: int = 1, longest: float | None = None, **note) -> None:
        """`runs` 0: more of a run already counted (a kernel's module load in two steps); `longest`:
        the longest single run when `seconds` sums several (default: `seconds`)."""
        with self._lock:
            total = self._totals.setdefault(name, [0.0, 0, 0.0])
            total[0] += seconds
            total[1] += runs
            total[2] = max(total[2], seconds if longest is None else longest)
            if note:
                self._notes.setdefault(name, {}).update(note)

    @contextmanager
    def phase(self, name: str, runs: int = 1):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started, runs=runs)

    def begin(self, name: str) -> None:
        """Start a phase that another function ends (end(name)), e.g. across modules."""
        self._open[name] = time.perf_counter()

    def end(self, name: str) -> None:
        started = self._open.pop(name, None)
        if started is not None:
            self.add(name, time.perf_counter() - started)

    def seconds(self, name: str) -> float:
        with self._lock:
            return self._totals.get(name, [0.0])[0]

    def sum_of(self, names) -> float:
        """The seconds of these phases together (the builds inside a launch: `launch` takes them off)."""
        with self._lock:
            return sum(self._totals[n][0] for n in names if n in self._totals)

    def totals(self) -> dict[str, dict]:
        """name -> {seconds, count, max_seconds, ...notes}, in PHASES order."""
        with self._lock:
            names = sorted(self._totals, key=lambda n: PHASES.index(n) if n in PHASES else len(PHASES))
            return {n: {"seconds": self._totals[n][0], "count": self._totals[n][1],
                        "max_seconds": self._totals[n][2], **self._notes.get(n, {})} for n in names}

    def emit(self, event, names=None) -> None:
        """One `phase` event per phase (of `names`, default all) not emitted yet; phases still
        open are ended first. `event` is TraceDir.event."""
        for name in list(self._open):
            if names is None or name in names:
                self.end(name)
        for name, fields in self.totals().items():
            if name in self._emitted or (names is not None and name not in names):
                continue
            self._emitted.add(name)
            event("phase", phase=name, seconds=round(fields.pop("seconds"), 6),
                  max_seconds=round(fields.pop("max_seconds"), 6), **fields)


def _shim_stats(shim_lib, symbol: str, count: int):
    """The `count` u64 counters the shim's `symbol(uint64_t *out)` fills, or None (an older shim without it)."""
    import ctypes

    read = getattr(shim_lib, symbol, None)
    if read is None:
        return None
    stats = (ctypes.c_uint64 * count)()
    read.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    read.restype = None
    read(stats)
    return list(stats)


def add_driver_loads(phases: PhaseClock, shim_lib) -> None:
    """`module_jit` and `module_driver` from the shim's clocks of the program's module loads (each
    only when such a load ran). `shim_lib`: the loaded shim (ctypes.CDLL); one without the clocks (an
    older build) adds nothing."""
    stats = _shim_stats(shim_lib, "neutrino_module_load_stats", 6)
    if stats is None:
        return
    for index, name in enumerate(DRIVER_PHASES):
        ns, count, longest = stats[3 * index:3 * index + 3]
        if count:
            phases.add(name, ns / 1e9, runs=count, longest=longest / 1e9)


def add_process_stats(phases: PhaseClock, shim_lib) -> None:
    """`constructor` (the shim's constructor: its duration, `started_at` its wall-clock start, the
    first moment of the process our code sees), `lookup` (the program's kernel lookups in our
    callback) and `fast_launch` (probed launches on the C fast path), from the shim's clocks
    (neutrino_process_stats, neutrino_fast_launch_stats); an older shim adds nothing."""
    stats = _shim_stats(shim_lib, "neutrino_process_stats", 5)
    if stats is None:
        return
    started_at, ctor_ns, lookup_ns, lookups, longest = stats
    if started_at:
        phases.add("constructor", ctor_ns / 1e9, started_at=round(started_at / 1e9, 6))
    if lookups:
        phases.add("lookup", lookup_ns / 1e9, runs=lookups, longest=longest / 1e9)
    fast = _shim_stats(shim_lib, "neutrino_fast_launch_stats", 3)  # `fast_launch` (a shim without it: none)
    if fast is not None and fast[1]:
        phases.add("fast_launch", fast[0] / 1e9, runs=fast[1], longest=fast[2] / 1e9)


def add_process_start(phases: dict[str, dict], spawned_at: float, process_seconds: float) -> None:
    """`exec`, `interpreter` and `own_work` of the launcher's own child (PROCESS_PHASES), from the wall
    clock of its spawn (`spawned_at`), the constructor's and wire's `started_at`, and the process's
    wall time from the spawn to its exit as the launcher saw it (`process_seconds`)."""
    ctor = phases.get("constructor", {})
    wire = phases.get("wire", {})
    ctor_at, wire_at = ctor.get("started_at"), wire.get("started_at")
    if not isinstance(ctor_at, (int, float)) or not isinstance(wire_at, (int, float)):
        return
    exec_s = max(ctor_at - spawned_at, 0.0)
    interpreter = max(wire_at - ctor_at - float(ctor.get("seconds", 0.0)), 0.0)
    if phases.get("start", {}).get("embedded"):  # no sitecustomize: wire began at the first CUDA call
        interpreter = 0.0  # what came before it is the program's own work
    ours = sum(float(phases[n].get("seconds", 0.0)) for n in ADDED_PHASES if n in phases)
    after = float(phases.get("exit_process", {}).get("seconds", 0.0))
    phases["exec"] = {"phase": "exec", "seconds": exec_s, "count": 1}
    phases["interpreter"] = {"phase": "interpreter", "seconds": interpreter, "count": 1}
    phases["own_work"] = {"phase": "own_work", "seconds": max(process_seconds - exec_s - interpreter - ours - after,
                                                              0.0), "count": 1}


def process_age(now: float | None = None) -> float | None:
    """Seconds since this process started (Linux: /proc/self/stat), or None where unknown:
    the interpreter's own start, before any of our code runs."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started_ticks = int(fields[19])  # field 22 of proc(5), counted from the state, field 3
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        age = uptime - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return max(age, 0.0)


def read_phases(event_log) -> dict[str, dict]:
    """The `phase` events of one event.log: name -> its fields (plain JSON: no numpy in the launcher);
    also "start": the fields of its first line (the `start` event: pid), which is no phase."""
    out: dict[str, dict] = {}
    try:
        with open(event_log, encoding="utf-8") as f:
            for number, line in enumerate(f):
                if number == 0 and '"start"' in line:
                    try:
                        first = json.loads(line)
                        out["start"] = {"pid": first.get("pid"), "embedded": bool(first.get("embedded"))}
                    except (ValueError, AttributeError):
                        pass
                if '"phase"' not in line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a truncated last line
                if isinstance(rec, dict) and rec.get("event") == "phase" and isinstance(rec.get("phase"), str):
                    out[rec["phase"]] = rec
    except OSError:
        pass
    return out


def add_process_exit(phases: dict[str, dict], exited_at: float) -> None:
    """`exit_process`: from the end of our exit handler (`exit_close`'s `ended_at`, wall clock) to
    the process's exit as the launcher saw it (`exited_at`): the interpreter's and the driver's
    teardown after our handler (our modules, threads and CUPTI included; so is the program's own
    teardown after its last exit handler, which a plain run pays too). Only for the launcher's
    own child, and only when that process logged `exit_close`."""
    ended = phases.get("exit_close", {}).get("ended_at")
    if isinstance(ended, (int, float)) and exited_at >= ended:
        phases["exit_process"] = {"phase": "exit_process", "seconds": exited_at - ended, "count": 1}


def _group(phases: dict[str, dict], names, label: str, short) -> tuple[float, str]:
    present = [n for n in names if n in phases]
    total = sum(float(phases[n].get("seconds", 0.0)) for n in present)
    parts = ", ".join(f"{short(n)} {float(phases[n].get('seconds', 0.0)):.3f}" for n in present)
    return total, (f"{label} {total:.3f} s ({parts})" if present else "")


def timings_line(launcher: dict[str, float], processes: list[dict[str, dict]], program_seconds: float) -> str:
    """`neutrino: timings: X s added: launcher ..., start ..., modules ..., kernels ..., exit ...; program Y s`.

    X is the sum of every phase below (launcher and every process that wrote a trace);
    a group lists its phases' seconds. Per-module and per-kernel groups say how many ran.
    The build threads' work follows the program's seconds (`beside the program B s (...)`): it
    ran beside the program, so it is not in X (the launches' wait for it is `build_wait`). So do the
    driver's module loads (`in the driver's module loads D s (jit xN, other xM)`: the program's loads,
    which a plain run pays too) and `exit_process` (`after our exit handler T s`): the program's own
    teardown is most of it."""
    merged: dict[str, dict] = {}
    for phases in processes:
        for name, fields in phases.items():
            cur = merged.setdefault(name, {"seconds": 0.0, "count": 0})
            cur["seconds"] += float(fields.get("seconds", 0.0))
            cur["count"] += int(fields.get("count", 1))
            if "cache" in fields:
                cur["cache"] = fields["cache"]
            cur["shared_seconds"] = cur.get("shared_seconds", 0.0) + float(fields.get("shared_seconds", 0.0))
    merged.update({n: {"seconds": s, "count": 1} for n, s in launcher.items()})
    groups = []
    total = 0.0
    for names, label, short in (
        (LAUNCHER_PHASES, "launcher", lambda n: n.removeprefix("launcher_")),
        (START_PHASES, "start", lambda n: n + (f" [{merged[n]['cache']}]" if "cache" in merged.get(n, {}) else "")),
        (MODULE_PHASES, "modules", lambda n: f"{'ptx' if n == 'module_ptx' else n} x{merged[n]['count']}"),
        (KERNEL_PHASES, "kernels", lambda n: f"{n} x{merged[n]['count']}"),
        (EXIT_PHASES, "exit", lambda n: n.removeprefix("exit_")),
    ):
        seconds, text = _group(merged, names, label, short)
        total += seconds
        if text:
            groups.append(text)
    extra = f" in {len(processes)} processes" if len(processes) > 1 else ""
    _, background = _group(merged, BACKGROUND_PHASES, "beside the program",
                           lambda n: f"{n.removeprefix('background_')} x{merged[n]['count']}")
    _, driver = _group(merged, DRIVER_PHASES, "in the driver's module loads",
                       lambda n: f"{'jit' if n == 'module_jit' else 'other'} x{merged[n]['count']}")
    _, process = _group(merged, PROCESS_PHASES, "not added: its process",
                        lambda n: n.replace("_", " "))
    after = merged.get("exit_process")
    teardown = (f"; after our exit handler {after['seconds']:.3f} s (the process's teardown, the program's own "
                "included)") if after else ""
    return (f"neutrino: timings: {total:.3f} s added{extra}: " + "; ".join(groups) +
            f"; program {program_seconds:.3f} s" + (f"; {background}" if background else "") +
            (f"; {driver}" if driver else "") + teardown + (f"; {process}" if process else "") +
            _shared_imports(merged) + "\n")


def _shared_imports(merged: dict[str, dict]) -> str:
    """`; of wire and imports, modules outside neutrino S s (...)`: the part of those added phases that
    loaded modules a program importing them itself would have paid for in a plain run too."""
    shared = sum(merged.get(n, {}).get("shared_seconds", 0.0) for n in ("wire", "imports"))
    if not shared:
        return ""
    return (f"; of wire and imports, modules outside neutrino {shared:.3f} s (loaded first by us: a program that "
            "imports them too pays them unprofiled)")
