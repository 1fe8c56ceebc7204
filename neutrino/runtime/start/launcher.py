"""`neutrino -p PROBE [options] [--] program args...`: run a program with probing.

The launcher checks the probe and options, builds the shim, and runs the
program with LD_PRELOAD=shim and our startup directory on PYTHONPATH; the
profiled process writes the trace itself. The exit status is the program's.

Afterwards the launcher makes sure the run left a trace directory and said what
happened: when no process of the program loaded a CUDA module (no GPU, no CUDA
call), it writes the run directory's event log itself and prints why it is empty.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from neutrino import console
from neutrino.errors import NeutrinoError
from neutrino.runtime.start.options import (
    DEFAULT_BUFFER_BUDGET,
    DEFAULT_BUILD_THREADS,
    DEFAULT_TRACE_BUDGET,
    DEFAULT_RECOUNT_EVERY,
    DEFAULT_TIME_EVERY,
    RING_RECORDS_PER_UNIT,
    ENV_OPTIONS,
    WHEN_FULL,
    WHILE_BUILDING,
    LaunchFilter,
    RuntimeOptions,
    parse_size,
)
from neutrino.runtime.start.rank import set_collective_defaults
from neutrino.runtime.start.rundir_names import ENV_JOB, run_dir_name

STARTUP_DIR = Path(__file__).resolve().parent / "site"
PACKAGE_PARENT = Path(__file__).resolve().parents[3]
PROFILE_USAGE = console.PROFILE_USAGE
ENV_RUN_DIR = "NEUTRINO_RUN_DIR"  # -o DIR: the first profiled process writes DIR itself (bootstrap.py)
ENV_SESSION = "NEUTRINO_SESSION"  # marks the run directories of one `neutrino` command


def build_parser() -> argparse.ArgumentParser:
    p = console.ArgumentParser(
        prog="neutrino",
        description="Run a program and probe its GPU kernels.",
        usage=PROFILE_USAGE,
        epilog=console.EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    console.add_probe_arguments(p, required=False)
    p.add_argument("-o", "--output", metavar="DIR",
                   help="the trace directory of this run (default: TRACEDIR/<time>_<pid>); an earlier trace "
                        "there is replaced")
    p.add_argument("--tracedir", default="./trace", help="where run directories are written (default ./trace)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="say what is run and where the trace goes, and name the probed kernels at exit")
    p.add_argument("-k", "--kernel", action="append", default=[], metavar="PATTERN",
                   help="probe only kernels whose name contains PATTERN (=NAME: exactly NAME); "
                        "repeatable, or PATTERN:PATTERN")
    p.add_argument("--filter", action="append", default=[], metavar="PATTERN",
                   help="do not probe kernels whose name contains PATTERN (=NAME: exactly NAME)")
    p.add_argument("--benchmark", action="store_true",
                   help="time each probed launch against the unprobed kernel (L2 flushed); re-runs kernels")
    p.add_argument("--memusage", action="store_true", help="report the buffer memory probing needs; probe nothing")
    p.add_argument("--launches", default=None, metavar="A:B|every:N",
                   help="which launches of each kernel to probe (default: all)")
    p.add_argument("--callback", default=None, metavar="FILE[:FUNC]",
                   help="after the program ends, run FUNC(result_path, launch) of a Python file on every probed "
                        "launch (default FUNC: analyze)")
    p.add_argument("--buffer-budget", default=None, metavar="SIZE",
                   help="device (and pinned host) memory for map buffers in flight (default 1G)")
    p.add_argument("--trace-budget", default=None, metavar="SIZE",
                   help="bytes of results written per process (default 8G); later launches run unprobed")
    p.add_argument("--when-full", choices=WHEN_FULL, default="drop",
                   help="when the buffer budget is in use: run the launch unprobed and count it (drop, default) "
                        "or wait for earlier results to drain (wait)")
    p.add_argument("--time-every", type=_non_negative, default=DEFAULT_TIME_EVERY, metavar="N",
                   help="measure a probed kernel's own time with two CUDA events on its first launch and then every "
                        "N-th (1: every launch). Default: 0, the timeline's record of each launch times it (no "
                        "events: they cost tiny kernels GPU time), and every 8th launch is timed by events where "
                        "the timeline does not record it (--no-timeline). Readers prefer a launch's timeline record "
                        "to its events wherever both exist")
    p.add_argument("--recount-every", type=_positive, default=DEFAULT_RECOUNT_EVERY, metavar="N",
                   help='cap = "count" maps: run the counting kernel for a kernel, grid and block once per N of its '
                        f'launches and reuse its caps in between (default {DEFAULT_RECOUNT_EVERY}; 1: count every '
                        "launch). A launch needing more records than the cap drops them, counted. Only code "
                        "built before the device ring counts (see --ring-records)")
    p.add_argument("--ring-records", type=_positive, default=RING_RECORDS_PER_UNIT, metavar="N",
                   help='cap = "count" maps: slots of a launch\'s device ring per unit of the launch (default '
                        f'{RING_RECORDS_PER_UNIT}; at most a quarter of the buffer budget). Records past them '
                        "are dropped and counted (the map's dropped)")
    p.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=True,
                   help="probe kernels launched into streams being captured into CUDA graphs, on every replay "
                        "(the default; --no-graphs: such launches run unprobed and are logged)")
    p.add_argument("--timeline", action=argparse.BooleanOptionalAction, default=True,
                   help="record every kernel, copy and memset of the program, probed or not, through CUPTI "
                        "(timeline.bin; the default; --no-timeline: off)")
    p.add_argument("--build-threads", type=_non_negative, default=DEFAULT_BUILD_THREADS, metavar="N",
                   help="threads that instrument and JIT-compile probed kernels when the program looks them up, "
                        f"in parallel and off the launch path (default {DEFAULT_BUILD_THREADS}; 0: at each kernel's "
                        "first launch, on its thread)")
    p.add_argument("--while-building", choices=WHILE_BUILDING, default="wait",
                   help="a launch whose probed code is still being built: wait for it (wait, default) or run the "
                        "original kernel, logged, and probe later launches (original)")
    p.add_argument("--timings", action="store_true",
                   help="at exit, print one line of the seconds neutrino added: launcher, start-up, modules, "
                        "kernels, exit (the `phase` events of spec/runtime.md)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program to run and its arguments")
    return p


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Options and the program's command line; `--` is optional before the program.

    Without `--`, a program named like one of our commands (`neutrino -p P report
    trace`) is a usage error: the command was meant, in the wrong place.
    """
    argv = list(argv)
    explicit = "--" in argv
    if explicit:
        i = argv.index("--")
        ns = build_parser().parse_args(argv[:i])
        command = argv[i + 1:] + list(ns.command)
    else:
        ns = build_parser().parse_args(argv)
        command = list(ns.command)
    if command and command[0] == "--":
        command, explicit = command[1:], True
    if command and not explicit and command[0] in console.SUBCOMMANDS:
        raise UsageError(f"'{command[0]}' is a neutrino command: commands come first "
                         f"(neutrino {' '.join(command)}), and take no -p\n"
                         f"    hint: to run a program named {command[0]}: neutrino ... -- {' '.join(command)}")
    if ns.probe is None and ns.expr is None:
        raise UsageError("no probe: give -p PROBE (a probe file or a built-in tool: neutrino list) "
                         "or -e 'PROBE TEXT'")
    if not command:
        raise UsageError(f"no program to run\n    usage: {PROFILE_USAGE}")
    return ns, command


class UsageError(Exception):
    """A command line we do not understand (exit status 2)."""


def make_options(ns: argparse.Namespace) -> RuntimeOptions:
    """Validate the options (loading the probe file) and resolve paths for the child."""
    from neutrino.runtime.results.callback import load_callback
    from neutrino.runtime.instrument import probeload

    # raises ProbeError with every problem; compiled and verified once per content (probeload.py)
    probe_path, _ = probeload.check(ns.probe)
    if ns.callback:
        load_callback(ns.callback)  # fail now, not silently in the program
    return RuntimeOptions(
        verbosity=-1 if ns.quiet else int(ns.verbose),
        probe=str(Path(probe_path).resolve()),
        tracedir=str(Path(ns.tracedir).expanduser().resolve()),
        kernels=ns.kernel,
        exclude=ns.filter,
        benchmark=ns.benchmark,
        memusage=ns.memusage,
        launches=LaunchFilter.parse(ns.launches),
        callback=_abs_callback(ns.callback),
        buffer_budget=parse_size(ns.buffer_budget, "--buffer-budget") if ns.buffer_budget else DEFAULT_BUFFER_BUDGET,
        trace_budget=parse_size(ns.trace_budget, "--trace-budget") if ns.trace_budget else DEFAULT_TRACE_BUDGET,
        when_full=ns.when_full,
        time_every=ns.time_every,
        recount_every=ns.recount_every,
        ring_records=ns.ring_records,
        graphs=ns.graphs,
        timeline=ns.timeline,
        build_threads=max(ns.build_threads, 0),
        while_building=ns.while_building,
    )


def _at_least(least: int):
    """argparse type: an integer of at least `least` (a bad value exits 2 with the message)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"expected an integer of at least {least}, got {text!r}")
        return value
    return parse


_positive = _at_least(1)
_non_negative = _at_least(0)


def _abs_callback(spec: str | None) -> str | None:
    if not spec:
        return None
    from neutrino.runtime.results.callback import split_spec

    path, func = split_spec(spec)
    return f"{Path(path).resolve()}:{func}"


def libpython() -> str | None:
    """The shared libpython of this interpreter, for the shim to embed in non-Python programs."""
    names = [sysconfig.get_config_var(v) for v in ("INSTSONAME", "LDLIBRARY")]
    dirs = [sysconfig.get_config_var("LIBDIR"), os.path.join(sys.base_prefix, "lib")]
    for name in names:
        if not name or ".so" not in name:
            continue
        for d in dirs:
            if d and os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
    return None


def child_env(opts: RuntimeOptions, shim: Path, base: dict | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = " ".join(p for p in (str(shim), env.get("LD_PRELOAD", "")) if p)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(STARTUP_DIR), str(PACKAGE_PARENT), env.get("PYTHONPATH", "")) if p)
    env[ENV_OPTIONS] = opts.to_json()
    env["NEUTRINO_SHIM"] = str(shim)
    env.setdefault("NVTX_INJECTION64_PATH", str(shim))  # NVTX ranges (shim/nvtx.c); a tool's own injection is kept
    lib = libpython()
    if lib:
        env["NEUTRINO_LIBPYTHON"] = lib
        env["NEUTRINO_SYSPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env.pop("NEUTRINO_EMBEDDED", None)
    env[ENV_JOB] = run_dir_name(time.time(), os.getpid())  # ranks of a job share <tracedir>/<job>/
    set_collective_defaults(env)
    # CuPy compiles RawModule/RawKernel code to SASS-only cubins unless told to keep PTX;
    # with PTX the driver JITs it (cached by the driver) and its kernels can be probed.
    env.setdefault("CUPY_COMPILE_WITH_PTX", "1")
    return env


def run_main(argv: list[str]) -> int:
    """Entry point for `neutrino -p PROBE ... [--] program args`; returns the program's exit status.

    Before the program runs: 2 for a command line we do not understand, 1 for a
    probe (or other input) we cannot use; then the program's own status.
    """
    from neutrino.runtime.start.phases import process_age

    entered = time.perf_counter()
    launcher = {"launcher_start": process_age() or 0.0}  # the interpreter and our imports, before run_main
    try:
        ns, command = parse_args(argv)
    except SystemExit as e:  # argparse already printed the usage/error (or --help)
        return int(e.code or 0)
    except UsageError as e:
        console.error(str(e))
        return console.EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="neutrino-") as scratch:
        try:
            if ns.expr is not None:
                ns.probe = _inline_probe_file(ns.expr, Path(scratch))
            opts = make_options(ns)
            run_dir = _prepare_output(ns.output) if ns.output else None
            from neutrino.runtime.start.build import build_shim

            shim = build_shim()
        except NeutrinoError as e:
            console.error(str(e))
            from neutrino.runtime.start.options import OptionError

            # a bad option value (--launches every:0, --buffer-budget 1X) is a command line we do not understand
            return console.EXIT_USAGE if isinstance(e, OptionError) else console.EXIT_BAD_INPUT
        session = f"{os.getpid()}-{time.time_ns()}"
        env = child_env(opts, shim)
        env[ENV_SESSION] = session
        if run_dir is not None:
            env[ENV_RUN_DIR] = str(run_dir)
        if opts.verbosity > 0:
            sys.stderr.write(f"neutrino: running {' '.join(command)} with probe {opts.probe}; "
                             f"trace in {run_dir or opts.tracedir}\n")
        started = time.time()  # also the wall clock of the spawn: the child's `exec` counts from it
        launcher["launcher_check"] = time.perf_counter() - entered
        program_started = time.perf_counter()
        rc, pid = run_program(command, env, launcher)
        program_seconds = time.perf_counter() - program_started - launcher.get("launcher_spawn", 0.0)
        program_ended = time.time()  # the child's exit, on the clock its `ended_at` uses
        close_run(session, Path(opts.tracedir), run_dir, command, opts, rc, pid, started)
        if ns.timings:
            print_timings(session, Path(opts.tracedir), run_dir, launcher, program_seconds, program_started,
                          (pid, program_ended, started), since=started)
    return rc


def print_timings(session: str, tracedir: Path, run_dir: Path | None, launcher: dict, program_seconds: float,
                  program_started: float, child_exit: tuple = (None, 0.0, None),
                  since: float | None = None) -> None:
    """--timings: one line summing the launcher's phases and those every process of the program logged.
    `child_exit`: (pid, wall time of the program's exit as seen here, wall time of its spawn): its
    `exit_process` phase, and `exec`, `interpreter`, `own_work` (phases.add_process_start)."""
    from neutrino.runtime.start.phases import add_process_exit, add_process_start, read_phases, timings_line

    pid, exited_at, spawned_at = (tuple(child_exit) + (None,))[:3]
    processes = []
    for path in run_directories(session, tracedir, run_dir, since):
        phases = read_phases(path / "event.log")
        if phases.get("start", {}).get("pid") == pid:
            add_process_exit(phases, exited_at)
            if spawned_at is not None:
                add_process_start(phases, spawned_at, program_seconds + launcher.get("launcher_spawn", 0.0))
        phases.pop("start", None)
        processes.append(phases)
    launcher["launcher_close"] = (time.perf_counter() - program_started - program_seconds -
                                  launcher.get("launcher_spawn", 0.0))
    sys.stderr.write(timings_line(launcher, [p for p in processes if p], program_seconds))


def _inline_probe_file(text: str, scratch: Path) -> str:
    """-e TEXT: checked now (errors point into `<-e>`), and written as a probe file for the program."""
    from neutrino.toolbox import load_probe_argument

    probes = load_probe_argument(None, text)
    path = scratch / "inline.toml"
    path.write_text(probes.text)
    return str(path)


def _prepare_output(output: str) -> Path:
    """-o DIR: an empty or missing directory, or an earlier trace (replaced); anything else is refused."""
    path = Path(output).expanduser().resolve()
    if path.exists():
        if not path.is_dir():
            raise NeutrinoError(f"-o {output}: exists and is not a directory")
        if any(path.iterdir()):
            if not ((path / "event.log").exists() or (path / ".owner").exists()):
                raise NeutrinoError(f"-o {output}: a directory that is not a neutrino trace (no event.log); "
                                    "name another one")
            shutil.rmtree(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NeutrinoError(f"-o {output}: cannot create: {e.strerror or e}") from None
    return path


# A directory made during the run has an mtime at or after the run's start; the file system's clock
# may lag time.time() by a tick, hence the margin.
MTIME_MARGIN = 1.0


def run_directories(session: str, tracedir: Path, run_dir: Path | None, since: float | None = None) -> list[Path]:
    """The run directories the program's processes wrote for this command (their start event names it).
    `since`: the wall time the program started; the entries of `tracedir` last changed before it
    (earlier runs: a user's ./trace holds hundreds) are not opened, so closing a run does not cost
    a read per earlier run."""
    candidates = [run_dir, *sorted(run_dir.iterdir())] if run_dir is not None else []
    if tracedir.is_dir():
        candidates += sorted(p for p in tracedir.iterdir() if since is None or _changed_since(p, since))
    # a job's ranks write <job>/rank<R> (spec/trace-format.md): one level further down
    candidates += [sub for path in list(candidates) if path.is_dir() and not (path / "event.log").exists()
                   for sub in sorted(path.iterdir()) if sub.is_dir()]
    found = []
    for path in candidates:
        try:
            with open(path / "event.log", encoding="utf-8") as log:
                first = json.loads(log.readline() or "{}")
        except (OSError, ValueError):
            continue
        if isinstance(first, dict) and first.get("session") == session and path not in found:
            found.append(path)
    return found


def _changed_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since - MTIME_MARGIN
    except OSError:
        return False


def close_run(session: str, tracedir: Path, run_dir: Path | None, command: list[str], opts: RuntimeOptions,
              rc: int, pid: int | None, started: float) -> None:
    """Every run leaves a trace directory and a closing line: when no process wrote one (no CUDA
    module was loaded: no GPU, or no CUDA call), write the run directory's event log here."""
    written = run_directories(session, tracedir, run_dir, started)
    if len(written) > 1 and opts.verbosity >= 0:
        sys.stderr.write(f"neutrino: {len(written)} processes wrote traces: " + ", ".join(map(str, written)) + "\n")
    if written:
        return
    from neutrino import __version__
    from neutrino.runtime.start.tracedir import TraceDir

    trace = TraceDir(run_dir) if run_dir is not None else TraceDir.create(tracedir, start=started, pid=pid or os.getpid())
    trace.event("start", pid=pid, argv=command, probe=opts.probe, options=opts.to_dict(), version=__version__,
                session=session, by="launcher")
    reason = "the program could not be run" if pid is None else "no process of the program loaded a CUDA module"
    trace.event("exit", launches=0, kernels_seen=0, kernels_probed=0, fallbacks=0, dropped=0, exit_status=rc,
                reason=reason)
    trace.close()
    if opts.verbosity >= 0:
        hint = "" if pid is None else " (no GPU or CUDA driver, or the program made no CUDA call)"
        sys.stderr.write(f"neutrino: no kernel seen: {reason}{hint}; trace in {trace.path}\n")


def run_program(command: list[str], env: dict[str, str], phases: dict | None = None) -> tuple[int, int | None]:
    """The program's exit status (128+N when killed by signal N) and its pid (None: it could not be run).
    `phases["launcher_spawn"]`: starting the child (fork and exec: Popen returns once exec succeeded),
    a process a plain run does not start."""
    try:
        started = time.perf_counter()
        proc = subprocess.Popen(command, env=env)
        if phases is not None:
            phases["launcher_spawn"] = time.perf_counter() - started
    except OSError as e:
        console.error(f"cannot run {command[0]!r}: {e.strerror or e}")
        return (127 if isinstance(e, FileNotFoundError) else 126), None
    while True:
        try:
            rc = proc.wait()
            break
        except KeyboardInterrupt:  # the child got the same SIGINT; wait for it to finish its exit
            continue
    if rc < 0:
        return 128 + (-rc), proc.pid
    return rc, proc.pid


def main() -> None:  # for `python -m neutrino.runtime.start.launcher`
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(run_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
