"""The probe, loaded for a run: compiled and verified once per content (codecache.checked_probe_text).

The launcher checks the probe before the program starts (`check`: on a cache miss the file is
compiled, parsed and verified, and the verified text cached). A profiled process then needs only
the probe's text until it instruments a kernel (`DeferredProbes`): the text names the code
cache's entries and goes to the trace, and a warm code cache never needs more. The verified
ProbeFile (and the parser, the verifier and the passes it imports) is built at the first
kernel instrumented, when that happens (spec/runtime.md, "Start-up and exit phases").
"""

from __future__ import annotations

import os
import threading
import time

from neutrino.runtime.instrument.codecache import checked_probe_text


def resolve(name_or_path: str, isa: str = "ptx") -> str:
    """The absolute path of `-p`'s argument: a file, or a registered tool's probe for `isa`
    (neutrino.toolbox, which says what is wrong with anything else)."""
    from neutrino.toolbox import resolve_probe_path

    return os.path.abspath(resolve_probe_path(name_or_path, isa))


def check(name_or_path: str, isa: str = "ptx") -> tuple[str, str]:
    """The launcher's check: (the probe's path, 'hit' / 'miss'). Compiled and verified on a miss
    (raises ProbeError with every problem); a hit is a text verified by an earlier run."""
    path = resolve(name_or_path, isa)

    def verify(text: str) -> None:
        from neutrino.probefile import parse_probes

        parse_probes(text, path, isa)

    _, state = checked_probe_text(path, isa, verify)
    return path, state


def probe_text(name_or_path: str, isa: str = "ptx") -> tuple[str, str, str]:
    """(path, the probe's TOML text, 'hit' / 'miss'), without parsing or verifying it: the profiled
    process's start (the launcher checked the same file; DeferredProbes verifies when needed)."""
    path = resolve(name_or_path, isa)
    text, state = checked_probe_text(path, isa)
    return path, text, state


class DeferredProbes:
    """A probe's `path`, `text` and `analyze_hook` now; every other attribute of its ProbeFile
    from `load()`, which parses and verifies the text once (timed as the `verify` phase)."""

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
                        self._phases.add("verify", time.perf_counter() - started)
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
