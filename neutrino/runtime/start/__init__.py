"""Process start: the `neutrino -p` launcher and the shim it builds, then, inside the profiled process,
the options, rank, run directory and phase clock the runtime starts with (site/ holds the sitecustomize
the launcher puts on PYTHONPATH)."""
