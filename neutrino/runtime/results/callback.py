"""Analysis callbacks: a Python file's function run on every probed launch, after the program ends.

FUNC(result_path, launch) gets the launch's result file and its `launch` event;
the launch's frame starts at `launch["result_offset"]` of that file
(`neutrino.trace.read_result(result_path, launch.get("result_offset", 0))`).
A module-level `finish(stream)` is called once after the last launch.
"""

from __future__ import annotations

import importlib.util
import os

from neutrino.errors import NeutrinoError

DEFAULT_FUNCTION = "analyze"


class CallbackError(NeutrinoError):
    """A --callback / analyze_hook that cannot be loaded."""


def split_spec(spec: str) -> tuple[str, str]:
    """`file.py` or `file.py:function`."""
    path, sep, func = spec.rpartition(":")
    if sep and path and path.endswith(".py"):
        return path, func
    return spec, DEFAULT_FUNCTION


def load_callback(spec: str, base: str | None = None):
    """The function to call as FUNC(result_path: str, launch: dict)."""
    path, func = split_spec(spec)
    if base and not os.path.isabs(path):
        path = os.path.join(base, path)
    if not os.path.isfile(path):
        raise CallbackError(f"callback file {path} does not exist")
    mod_spec = importlib.util.spec_from_file_location(f"neutrino_callback_{abs(hash(path))}", path)
    mod = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001
        raise CallbackError(f"callback file {path} failed to load: {type(e).__name__}: {e}") from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise CallbackError(f"callback file {path} has no function {func}(result_path, launch)")
    finish = getattr(mod, "finish", None)
    if callable(finish):
        return _WithFinish(fn, finish)
    return fn


class _WithFinish:
    """FUNC plus the module's finish(stream), called once after the last launch."""

    def __init__(self, fn, finish):
        self.fn, self.neutrino_finish = fn, finish

    def __call__(self, result_path, launch):
        return self.fn(result_path, launch)


def run_over_trace(trace, fn, seconds: float, stream) -> None:
    """Run FUNC(result_path, launch) over every probed launch of this run, after the
    program's last launch; then the callback module's `finish()`, if it has one.

    Never on the launch path: analysis cannot slow the program or reorder its
    output. `seconds` bounds the whole pass; launches left over are counted in a
    `callback_skipped` event and the summary (`neutrino report` reads them all).
    """
    import time

    from neutrino import trace as tracefmt

    deadline = time.monotonic() + seconds
    events = tracefmt.read_events(trace.path / "event.log")
    launches = [e for e in tracefmt.launch_events(trace.path, events) if e.get("result")]
    done = 0
    for ev in launches:
        if time.monotonic() > deadline:
            break
        done += 1
        try:
            fn(str(trace.path / ev["result"]), ev)
        except Exception as e:  # noqa: BLE001 - analysis failures are never fatal
            trace.event("callback_error", result=ev["result"], result_offset=ev.get("result_offset", 0),
                        reason=f"{type(e).__name__}: {e}")
    if done < len(launches):
        trace.event("callback_skipped", launches=len(launches) - done, seconds=seconds)
        stream.write(f"neutrino: analysis callback stopped after {seconds:.0f} s; {len(launches) - done} launch(es) "
                     f"not analysed (neutrino report {trace.path})\n")
    finish = getattr(fn, "neutrino_finish", None)
    if finish is not None:
        try:
            finish(stream)
        except Exception as e:  # noqa: BLE001
            trace.event("callback_error", result=None, reason=f"finish: {type(e).__name__}: {e}")
