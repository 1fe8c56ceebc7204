"""The probe, loaded for a run: compiled once per content (the tool cache) and verified once.

The launcher checks the probe before the program starts (`load_checked`: compiled through
the tool cache of codecache.py, then parsed and verified). A profiled process then needs only
the probe's text until it instruments a kernel (`DeferredProbes`): the text names the code
cache's entries and goes to the trace, and a warm code cache never needs more. The verified
ProbeFile (and the parser, the verifier and the passes it imports) is built at the first
kernel instrumented, when that happens (spec/runtime.md, "Start-up and exit phases").
"""

from __future__ import annotations

import os
import threading
import time

from neutrino.runtime.codecache import compile_tool


def load_checked(name_or_path: str, isa: str = "ptx"):
    """(the verified ProbeFile, how it was compiled: 'hit' / 'miss' of the tool cache, 'toml')."""
    from neutrino.probefile import load_probes, parse_probes, resolve_probe_path

    path = resolve_probe_path(name_or_path, isa)
    if path.suffix != ".py":
        return load_probes(name_or_path, isa), "toml"
    text, state = compile_tool(path, isa)
    return parse_probes(text, str(path), isa), state


def probe_text(name_or_path: str, isa: str = "ptx") -> tuple[str, str, str]:
    """(path, the probe's TOML text, 'hit' / 'miss' / 'toml'), without parsing or verifying it.
    The launcher hands the profiled process a resolved path; a name is resolved as -p resolves it."""
    path = name_or_path
    if not os.path.isfile(path):
        from neutrino.probefile import resolve_probe_path

        path = str(resolve_probe_path(name_or_path, isa))
    if path.endswith(".py"):
        text, state = compile_tool(path, isa)
        return path, text, state
    from neutrino.errors import Diagnostic, Location, ProbeError

    try:
        with open(path, encoding="utf-8") as f:
            return path, f.read(), "toml"
    except (OSError, UnicodeDecodeError) as e:
        raise ProbeError(Diagnostic(Location(path), f"cannot read probe file: {e}")) from None


class DeferredProbes:
    """A probe's `path`, `text` and `analyze_hook` now; every other attribute of its ProbeFile
    from `load()`, which parses and verifies the text once (timed as the `tool` phase)."""

    def __init__(self, path: str, text: str, isa: str = "ptx", phases=None):
        self.path, self.text, self.isa = path, text, isa
        self.analyze_hook = _analyze_hook(text)
        self._phases = phases
        self._loaded = None
        self._lock = threading.Lock()

    def load(self):
        if self._loaded is None:
            with self._lock:
                if self._loaded is None:
                    started = time.perf_counter()
                    from neutrino.probefile import parse_probes

                    self._loaded = parse_probes(self.text, self.path, self.isa)
                    if self._phases is not None:
                        self._phases.add("tool", time.perf_counter() - started)
        return self._loaded

    def __getattr__(self, name):  # probes, maps, registers...: the verified file's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.load(), name)


def loaded(probes):
    """The ProbeFile itself (the engine takes nothing else), from a DeferredProbes or as it is."""
    return probes.load() if isinstance(probes, DeferredProbes) else probes


def _analyze_hook(text: str) -> str | None:
    """The top-level `analyze_hook` of a probe's TOML (None if absent or the text does not parse:
    the launcher verified the same text, so that does not happen in a profiled process)."""
    import tomllib

    try:
        hook = tomllib.loads(text).get("analyze_hook")
    except (tomllib.TOMLDecodeError, RecursionError):
        return None
    return hook if isinstance(hook, str) else None
