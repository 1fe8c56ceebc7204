"""Starting the runtime inside the profiled process (called by startup/sitecustomize.py,
or by the shim's embedded interpreter in a non-Python program)."""

from __future__ import annotations

import atexit
import os
import sys
import threading

ENV_SHIM = "NEUTRINO_SHIM"

_state: dict = {}
_lock = threading.Lock()


def start(embedded: bool = False):
    """Create the runtime and register the shim callbacks. Idempotent; returns the Runtime or None."""
    with _lock:
        if "runtime" in _state:
            return _state["runtime"]
        _state["runtime"] = None
        rt = _create(embedded)
        _state["runtime"] = rt
        return rt


def _create(embedded: bool):
    from neutrino.errors import NeutrinoError
    from neutrino.runtime.options import ENV_OPTIONS, RuntimeOptions

    text = os.environ.get(ENV_OPTIONS)
    shim_path = os.environ.get(ENV_SHIM)
    if not text or not shim_path:
        return None
    try:
        opts = RuntimeOptions.from_json(text)
        return _wire(opts, shim_path, embedded)
    except NeutrinoError as e:
        sys.stderr.write(f"neutrino: runtime not started: {e}\nneutrino: kernels run unprobed\n")
    return None


def _wire(opts, shim_path: str, embedded: bool):
    from neutrino.errors import NeutrinoError
    from neutrino.probefile import load_probes
    from neutrino.runtime import hooks, rank
    from neutrino.runtime.codecache import CodeCache, default_cache_dir
    from neutrino.runtime.core import Runtime
    from neutrino.runtime.driver import RealDriver

    import neutrino

    probes = load_probes(opts.probe)
    shim = hooks.Shim(shim_path)
    trace = _trace_dir(opts)
    trace.write_probe(probes.text)
    trace.event("start", pid=os.getpid(), argv=list(getattr(sys, "argv", []) or []), probe=opts.probe,
                options=opts.to_json(), version=neutrino.__version__, embedded=embedded, **rank.start_fields())
    rt = Runtime(RealDriver(shim.real_sym), shim, opts, probes, trace=trace, cache=CodeCache(default_cache_dir()),
                 native_writer=shim_path)
    try:
        cb = _analysis_callback(opts, probes)
    except NeutrinoError as e:  # a missing or broken analysis hook never stops profiling
        cb = None
        trace.event("callback_error", result=None, reason=str(e))
        sys.stderr.write(f"neutrino: analysis callback disabled: {e}\n")
    if cb is not None:
        rt.set_callback(cb)
    f = opts.launches
    shim.set_launch_filter(f.start, f.stop, f.every)
    shim.register(hooks.make_callbacks(rt, shim, on_exit=rt.finish if embedded else None))
    _tap_compilers(rt, shim, embedded)
    if not embedded:
        atexit.register(_at_exit, rt, shim)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: _disable_in_child(shim))
    return rt


def _trace_dir(opts):
    """This process's run directory: per rank under the job's directory when a launcher set a rank."""
    from neutrino.runtime import rank
    from neutrino.runtime.tracedir import ENV_JOB, TraceDir

    me = rank.rank_from_env()
    return TraceDir.create(opts.tracedir, lazy=True, rank=None if me is None else me.rank, job=os.environ.get(ENV_JOB))


def _tap_compilers(rt, shim, embedded: bool) -> None:
    """PTX compiled in the process (XLA's nvJitLink) becomes visible to module loads (compilers.py);
    a JAX program gets the XLA flags that keep its launches where we can probe them (frameworks.py)."""
    from neutrino.runtime import compilers, frameworks, hooks

    shim.register_compiler(compilers.make_compiler_callback(rt.compiled, hooks.read_image))
    if not embedded:
        frameworks.watch_for_jax(rt.trace.event)


def _at_exit(rt, shim) -> None:
    """Harvest and summarise, then stop the callbacks: launches made while the
    interpreter shuts down go straight to the driver."""
    try:
        rt.finish()
    finally:
        shim.unregister()


def _disable_in_child(shim) -> None:
    """A forked child shares our trace directory and has no harvester thread: it runs unprobed."""
    try:
        shim.unregister()
    except Exception:  # noqa: BLE001
        pass


def _analysis_callback(opts, probes):
    """--callback FILE[:FUNC] or the probe's analyze_hook: FUNC(result_path, launch_event)."""
    from neutrino.runtime.callback import load_callback

    spec = opts.callback
    base = None
    if not spec and getattr(probes, "analyze_hook", None):
        spec = probes.analyze_hook
        base = os.path.dirname(os.path.abspath(probes.path))
    return load_callback(spec, base) if spec else None
