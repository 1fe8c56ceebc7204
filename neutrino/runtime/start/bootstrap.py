"""Starting the runtime inside the profiled process (called by startup/sitecustomize.py,
or by the shim's embedded interpreter in a non-Python program)."""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
import time

ENV_SHIM = "NEUTRINO_SHIM"
ENV_OPTIONS = "NEUTRINO_OPTIONS"  # = options.ENV_OPTIONS (not imported: attrs loads with the runtime)

_state: dict = {}
_lock = threading.Lock()


def start(embedded: bool = False, started: float | None = None):
    """Register the shim callbacks; the runtime is built on the first of them (DeferredRuntime).
    Idempotent; returns the DeferredRuntime, or None when this process is not profiled.
    `started`: time.perf_counter() when sitecustomize began (the `wire` phase counts from there)."""
    with _lock:
        if "runtime" in _state:
            return _state["runtime"]
        _state["runtime"] = None
        rt = _create(embedded, time.perf_counter() if started is None else started)
        _state["runtime"] = rt
        return rt


def _create(embedded: bool, started: float):
    text = os.environ.get(ENV_OPTIONS)
    shim_path = os.environ.get(ENV_SHIM)
    if not text or not shim_path:
        return None
    from neutrino.runtime.start.phases import PhaseClock
    from neutrino.runtime.start.shared_imports import SharedImportClock

    phases = PhaseClock()
    shared = SharedImportClock()  # how much of wire went to modules outside neutrino (shared_imports.py)
    with shared.timing():
        rt = _wire(text, shim_path, embedded, phases)
    seconds = time.perf_counter() - started
    # `started_at`: the wall clock sitecustomize began (the launcher times the interpreter's start up to it)
    phases.add("wire", seconds, started_at=round(time.time() - seconds, 6), **shared.note())
    return rt


def _launch_filter(options_json: str) -> tuple[int, int, int]:
    """--launches from the options, read without the options class (attrs loads with the runtime)."""
    import json

    try:
        launches = json.loads(options_json).get("launches") or {}
        return int(launches.get("start", 0)), int(launches.get("stop", 2**64 - 1)), int(launches.get("every", 1))
    except (ValueError, AttributeError, TypeError):
        return 0, 2**64 - 1, 1  # the runtime reports the bad options when it starts


def _wire(options_json: str, shim_path: str, embedded: bool, phases):
    """Register the shim's callbacks now; build the Runtime when the first of them comes.

    Only what every profiled process needs runs at interpreter start: the shim's
    ctypes glue and its callbacks. The probe, the engine, the trace writer and
    numpy load with the first CUDA module (README, "Start-up"), so the many
    processes of a program that never load one (compilers, data loaders, pip)
    start almost as fast as without neutrino.
    """
    from neutrino.runtime import hooks
    from neutrino.runtime.modules.compilers import CompiledIndex

    shim = hooks.Shim(shim_path)
    compiled = CompiledIndex()
    rt = DeferredRuntime(lambda: _build_runtime(options_json, shim, shim_path, embedded, compiled, phases), compiled)
    shim.set_launch_filter(*_launch_filter(options_json))
    shim.register(hooks.make_callbacks(rt, shim, on_exit=rt.finish if embedded else None))
    shim.register_graph(hooks.make_graph_callback(rt))
    shim.register_unload(hooks.make_unload_callback(rt))
    _tap_compilers(rt, shim, embedded, phases)
    if not embedded:
        atexit.register(_at_exit, rt, shim)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: _disable_in_child(shim))
    return rt


class DeferredRuntime:
    """The process's Runtime, built on first use by a shim callback; `finish` and
    `on_teardown` do nothing when it was never built (no CUDA module was loaded)."""

    def __init__(self, build, compiled):
        self._build = build
        self.compiled = compiled  # cubins compiled in this process, before and after the runtime is built
        self._runtime = None
        self._failed = False
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        return self._runtime is not None

    def runtime(self):
        if self._runtime is None and not self._failed:
            with self._lock:
                if self._runtime is None and not self._failed:
                    self._runtime = self._start_once()
        return self._runtime

    def _start_once(self):
        from neutrino.errors import NeutrinoError

        try:
            return self._build()
        except NeutrinoError as e:
            self._failed = True
            sys.stderr.write(f"neutrino: runtime not started: {e}\nneutrino: kernels run unprobed\n")
        except Exception as e:  # noqa: BLE001 - the program must run even if we cannot
            self._failed = True
            sys.stderr.write(f"neutrino: runtime not started ({type(e).__name__}: {e}); kernels run unprobed\n")
        return None

    def __getattr__(self, name):  # on_module, on_function, on_launch, on_link_*, trace: the callbacks' calls
        rt = self.runtime()
        if rt is None:
            raise AttributeError(f"neutrino runtime not started ({name})")
        return getattr(rt, name)

    def finish(self, *args, **kwargs) -> None:
        if self._runtime is not None:
            self._runtime.finish(*args, **kwargs)

    def on_teardown(self) -> None:
        if self._runtime is not None:
            self._runtime.on_teardown()

    def on_unload(self, kind: str, handle: int) -> None:  # no runtime yet: no module of ours to forget
        if self._runtime is not None:
            self._runtime.on_unload(kind, handle)

    def log_exit_close(self, seconds: float) -> None:
        """The last `phase` event (exit_close), after the trace is closed; `ended_at`: the wall time
        our exit handler ended, from which the launcher times the process's own teardown."""
        trace = getattr(self._runtime, "trace", None)
        if trace is not None and getattr(trace, "path", None) is not None:
            from neutrino.runtime.start.tracedir import append_closed_event

            append_closed_event(trace, "phase", phase="exit_close", seconds=round(seconds, 6), count=1,
                                max_seconds=round(seconds, 6), ended_at=round(time.time(), 6))


def _build_runtime(options_json: str, shim, shim_path: str, embedded: bool, compiled, phases):
    """The Runtime, at the first CUDA call that needs it; its start-up phases timed (phases.py)."""
    from neutrino.runtime.start.shared_imports import SharedImportClock

    shared = SharedImportClock()
    with phases.phase("imports"), shared.timing():
        from neutrino.errors import NeutrinoError
        from neutrino import toolbox
        from neutrino.runtime.instrument.probeload import DeferredProbes, probe_text
        from neutrino.runtime.start.options import RuntimeOptions
        from neutrino.runtime.instrument.codecache import CodeCache, default_cache_dir
        from neutrino.runtime.core import Runtime
        from neutrino.runtime.driver import RealDriver
        from neutrino.runtime.start import rank
        from neutrino.runtime.start.tracedir import TraceDir

        import neutrino
    phases.add("imports", 0.0, runs=0, **shared.note())

    opts = RuntimeOptions.from_json(options_json)
    started = time.perf_counter()
    path, text, compiled_from = probe_text(opts.probe)  # verified at the first kernel instrumented (probeload.py)
    probes = DeferredProbes(path, text, phases=phases)
    phases.add("tool", time.perf_counter() - started, cache=compiled_from)
    phases.begin("runtime")
    run_dir = _claim_run_dir()
    trace = TraceDir(run_dir) if run_dir is not None else _trace_dir(opts)
    trace.write_probe(probes.text)
    trace.event("start", pid=os.getpid(), argv=list(getattr(sys, "argv", []) or []), probe=opts.probe,
                **toolbox.tool_record(probes.path, probes.text),
                options=opts.to_dict(), version=neutrino.__version__, embedded=embedded,
                session=os.environ.get("NEUTRINO_SESSION"), **rank.start_fields())
    drv = RealDriver(shim.real_sym)
    drv.note_stream_work = getattr(shim.lib, "neutrino_note_stream_work", None)
    drv.zero_with = _zero_function(shim.lib)
    rt = Runtime(drv, shim, opts, probes, trace=trace, cache=CodeCache(default_cache_dir()),
                 native_writer=shim_path, compiled=compiled, phases=phases)
    _start_timeline(rt, shim, opts, trace)
    try:
        cb = _analysis_callback(opts, probes)
    except NeutrinoError as e:  # a missing or broken analysis hook never stops profiling
        cb = None
        trace.event("callback_error", result=None, reason=str(e))
        sys.stderr.write(f"neutrino: analysis callback disabled: {e}\n")
    if cb is not None:
        rt.set_callback(cb)
    phases.end("runtime")
    phases.emit(trace.event, names=("wire", "imports", "tool", "runtime"))
    return rt


def _start_timeline(rt, shim, opts, trace) -> None:
    """Every kernel of the process on the timeline (shim/cupti.c): started with the runtime, that is
    at the first CUDA module load, before any kernel of it ran; never stops the program."""
    from neutrino.runtime.context_tables import cupti

    try:
        rt.timeline = cupti.start(shim.lib, trace, getattr(opts, "timeline", True))
        if rt.timeline is not None:
            from neutrino.runtime.context_tables.clock import calibrate

            calibrate(rt.drv, trace, "start", rt.timeline)
    except Exception as e:  # noqa: BLE001 - the timeline is context, never a reason to fail
        trace.event("timeline", enabled=False, reason=f"{type(e).__name__}: {e}")


def _claim_run_dir():
    """`neutrino -o DIR`: the first profiled process to start writes DIR itself; any
    other process of the program writes its own run directory inside it, DIR/<time>_<pid>."""
    from pathlib import Path

    run_dir = os.environ.get("NEUTRINO_RUN_DIR")
    if not run_dir:
        return None
    try:
        os.close(os.open(os.path.join(run_dir, ".owner"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        from neutrino.runtime.start.tracedir import run_dir_name
        import time

        return Path(run_dir) / run_dir_name(time.time(), os.getpid())
    except OSError:
        return None
    return Path(run_dir)


def _trace_dir(opts):
    """This process's run directory: per rank under the job's directory when a launcher set a rank."""
    from neutrino.runtime.start import rank
    from neutrino.runtime.start.tracedir import ENV_JOB, TraceDir

    me = rank.rank_from_env()
    return TraceDir.create(opts.tracedir, lazy=True, rank=None if me is None else me.rank, job=os.environ.get(ENV_JOB))


def _tap_compilers(rt, shim, embedded: bool, phases=None) -> None:
    """PTX compiled in the process (XLA's nvJitLink) becomes visible to module loads (compilers.py);
    a JAX program gets the XLA flags that keep its launches where we can probe them (frameworks.py);
    XLA's compiles and Triton's/TorchInductor's autotuning run unprobed (autotune.py).
    Both are set up at start (compilations come before the first module load); the index of
    compiled cubins is handed to the runtime when it is built."""
    from neutrino.runtime.modules import compilers, frameworks
    from neutrino.runtime import hooks

    shim.register_compiler(compilers.make_compiler_callback(rt.compiled, hooks.read_image))
    if not embedded:
        from pathlib import Path

        def adopt(index_dir: str) -> None:  # ours to summarise and remove at exit
            rt.compiled.wrapper_dir = Path(index_dir)

        from neutrino.runtime.modules import autotune

        event = lambda *args, **fields: rt.trace.event(*args, **fields)  # noqa: E731
        window = frameworks.CompileWindow(shim.suspend_probing, shim.suspended_launches)
        watchers = (frameworks.watch_for_jax(event, on_wrappers=adopt, compile_window=window),
                    autotune.watch_for_autotuners(window.window, event))  # Triton's, TorchInductor's: the same window
        for watcher in watchers:  # our actions in the program's imports: the `import_hooks` phase
            if watcher is not None:
                watcher.phases = phases


def _at_exit(rt, shim) -> None:
    """Harvest and summarise, then stop the callbacks: launches made while the
    interpreter shuts down go straight to the driver. What follows the summary is the phase
    `exit_close`, logged last with the wall time it ended (the launcher times the rest: phases.py)."""
    try:
        rt.finish()
    finally:
        started = time.perf_counter()
        shim.unregister()
        rt.compiled.close()  # the wrappers' index, where no runtime was built to summarise it
        rt.log_exit_close(time.perf_counter() - started)


def _disable_in_child(shim) -> None:
    """A forked child shares our trace directory and has no harvester thread: it runs unprobed."""
    try:
        shim.unregister()
    except Exception:  # noqa: BLE001
        pass


def _analysis_callback(opts, probes):
    """--callback FILE[:FUNC] or the probe's analyze_hook: FUNC(result_path, launch_event)."""
    from neutrino.runtime.results.callback import load_callback

    spec = opts.callback
    base = None
    if not spec and getattr(probes, "analyze_hook", None):
        spec = probes.analyze_hook
        base = os.path.dirname(os.path.abspath(probes.path))
    return load_callback(spec, base) if spec else None


def _zero_function(lib):
    """The shim's neutrino_zero_async (shim/writer.c) as a ctypes function, or None (an older shim)."""
    fn = getattr(lib, "neutrino_zero_async", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
        fn.restype = ctypes.c_int
    return fn
