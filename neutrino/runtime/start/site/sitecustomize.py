"""Started by Python at interpreter start-up in a program run under `neutrino`.

The launcher puts this directory first on PYTHONPATH. We first run any other
sitecustomize the environment has (so we never hide one), then start the
runtime when the launcher asked for it.
"""


import time as _time

_STARTED = _time.perf_counter()  # the `wire` phase counts from here: looking for another sitecustomize is ours


def _chain() -> float:
    """Run the environment's own sitecustomize, if any; the seconds its code took (the program's own:
    a plain run pays them too, so `wire` leaves them out)."""
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_neutrino_chained_sitecustomize", candidate)
            mod = importlib.util.module_from_spec(spec)
            began = _time.perf_counter()
            try:
                spec.loader.exec_module(mod)
            except Exception as e:  # noqa: BLE001 - as Python itself would, report and go on
                sys.stderr.write(f"Error in sitecustomize ({candidate}): {e}\n")
            return _time.perf_counter() - began
    return 0.0


def _start(started: float):
    """`started`: where the `wire` phase counts from (runtime/start/phases.py), the environment's own
    sitecustomize taken off."""
    import os
    import sys

    if not os.environ.get("NEUTRINO_OPTIONS"):
        return
    extra = os.environ.get("NEUTRINO_SYSPATH", "")
    if os.environ.get("NEUTRINO_EMBEDDED") and extra:
        sys.path.extend(p for p in extra.split(os.pathsep) if p and p not in sys.path)
    try:
        from neutrino.runtime.start import bootstrap

        bootstrap.start(embedded=bool(os.environ.get("NEUTRINO_EMBEDDED")), started=started)
    except Exception as e:  # noqa: BLE001 - the program must run even if we cannot
        sys.stderr.write(f"neutrino: runtime not started ({type(e).__name__}: {e}); kernels run unprobed\n")


_start(_STARTED + _chain())
