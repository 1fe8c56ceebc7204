"""`neutrino -p PROBE [options] [--] program args...`: run a program with probing.

The launcher checks the probe and options, builds the shim, and runs the
program with LD_PRELOAD=shim and our startup directory on PYTHONPATH; the
profiled process writes the trace itself. The exit status is the program's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from neutrino.errors import NeutrinoError
from neutrino.runtime.options import (
    DEFAULT_BUFFER_BUDGET,
    DEFAULT_TRACE_BUDGET,
    DEFAULT_TIME_EVERY,
    ENV_OPTIONS,
    WHEN_FULL,
    LaunchFilter,
    RuntimeOptions,
    parse_size,
)
from neutrino.runtime.rank import set_collective_defaults
from neutrino.runtime.tracedir import ENV_JOB, run_dir_name

STARTUP_DIR = Path(__file__).resolve().parent / "startup"
PACKAGE_PARENT = Path(__file__).resolve().parent.parent.parent


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="neutrino",
        description="Run a program and probe its GPU kernels.",
        usage="neutrino -p PROBE [options] [--] program [args...]",
    )
    p.add_argument("-p", "--probe", required=True, help="probe file (TOML) or built-in probe name")
    p.add_argument("--tracedir", default="./trace", help="where run directories are written (default ./trace)")
    p.add_argument("-k", "--kernel", action="append", default=[],
                   help="probe only kernels whose name contains one of these ':'-separated substrings")
    p.add_argument("--filter", action="append", default=[],
                   help="do not probe kernels whose name contains one of these ':'-separated substrings")
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
    p.add_argument("--time-every", type=int, default=DEFAULT_TIME_EVERY, metavar="N",
                   help="measure a probed kernel's own time (two CUDA events) on its first launch and then every "
                        f"N-th (default {DEFAULT_TIME_EVERY}; 1: every launch). The other launches record one event")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program to run and its arguments")
    return p


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Options and the program's command line; `--` is optional before the program."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        ns = build_parser().parse_args(argv[:i])
        command = argv[i + 1:] + list(ns.command)
    else:
        ns = build_parser().parse_args(argv)
        command = list(ns.command)
    if command and command[0] == "--":
        command = command[1:]
    return ns, command


def make_options(ns: argparse.Namespace) -> RuntimeOptions:
    """Validate the options (loading the probe file) and resolve paths for the child."""
    from neutrino.probefile import load_probes
    from neutrino.runtime.callback import load_callback

    probes = load_probes(ns.probe)  # raises ProbeError with every problem
    if ns.callback:
        load_callback(ns.callback)  # fail now, not silently in the program
    return RuntimeOptions(
        probe=str(Path(probes.path).resolve()) if probes.path and Path(probes.path).exists() else ns.probe,
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
    )


def _abs_callback(spec: str | None) -> str | None:
    if not spec:
        return None
    from neutrino.runtime.callback import split_spec

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
    """Entry point for `neutrino -p PROBE ... [--] program args`; returns the program's exit status."""
    try:
        ns, command = parse_args(argv)
    except SystemExit as e:  # argparse already printed the usage/error
        return int(e.code or 0)
    if not command:
        sys.stderr.write("neutrino: no program to run (usage: neutrino -p PROBE [options] [--] program [args...])\n")
        return 2
    try:
        opts = make_options(ns)
        from neutrino.runtime.build import build_shim

        shim = build_shim()
    except NeutrinoError as e:
        sys.stderr.write(f"neutrino: {e}\n")
        return 2
    return run_program(command, child_env(opts, shim))


def run_program(command: list[str], env: dict[str, str]) -> int:
    try:
        proc = subprocess.Popen(command, env=env)
    except OSError as e:
        sys.stderr.write(f"neutrino: cannot run {command[0]!r}: {e.strerror or e}\n")
        return 127 if isinstance(e, FileNotFoundError) else 126
    while True:
        try:
            rc = proc.wait()
            break
        except KeyboardInterrupt:  # the child got the same SIGINT; wait for it to finish its exit
            continue
    if rc < 0:
        return 128 + (-rc)
    return rc


def main() -> None:  # for `python -m neutrino.runtime.launcher`
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(run_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
