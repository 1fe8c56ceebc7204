"""Runtime options: what the launcher parsed, handed to the profiled process as JSON."""

from __future__ import annotations

import json
from collections import namedtuple

from neutrino.errors import NeutrinoError

# Named tuples, neither attrs nor dataclasses: the launcher builds these before every profiled program
# starts, where attrs costs its import (20-50 ms on the CPU machine) and dataclasses theirs (~10 ms,
# inspect included); collections is loaded by then (spec/runtime.md, "Start-up and exit phases").

ENV_OPTIONS = "NEUTRINO_OPTIONS"
U64_MAX = 2**64 - 1


class OptionError(NeutrinoError):
    """A command-line option with a bad value."""


class LaunchFilter(namedtuple("LaunchFilterFields", ("start", "stop", "every"), defaults=(0, U64_MAX, 1))):
    """Which launches of each kernel are probed: indices start <= i < stop, every `every`-th."""

    __slots__ = ()

    def selects(self, index: int) -> bool:
        if index < self.start or index >= self.stop:
            return False
        return (index - self.start) % self.every == 0

    @classmethod
    def parse(cls, text: str | None) -> "LaunchFilter":
        """`A:B` (A..B-1), `A:` , `:B`, `N` (only launch N), `every:N`, or None/'' for all."""
        if not text:
            return cls()
        text = text.strip()
        try:
            if text.startswith("every:"):
                n = int(text[len("every:"):])
                if n < 1:
                    raise ValueError
                return cls(every=n)
            if ":" in text:
                a, b = text.split(":", 1)
                start = int(a) if a.strip() else 0
                stop = int(b) if b.strip() else U64_MAX
            else:
                start = int(text)
                stop = start + 1
        except ValueError:
            raise OptionError(f"--launches {text!r}: expected A:B, A:, :B, N or every:N (non-negative integers)") from None
        if start < 0 or stop <= start:
            raise OptionError(f"--launches {text!r}: the range is empty")
        return cls(start=start, stop=stop)


DEFAULT_BUFFER_BUDGET = 1 << 30  # device (and pinned host) bytes of map buffers held at once
DEFAULT_TRACE_BUDGET = 8 << 30  # bytes of result frames written per process
WHEN_FULL = ("drop", "wait")
# the kernel's own time (C path): 0, the default, times a launch by the timeline's record of it where the timeline
# flags probed launches, else by CUDA events on every 8th launch; N >= 1: by events on every N-th launch
DEFAULT_TIME_EVERY = 0
# cap = "count" maps: the caps counted for a kernel, grid and block serve this many launches of them
# before the counting kernel runs again (no counting launch or sync in between; a launch needing more
# records than its cap drops the rest and its counts say how many: the trace's `dropped`)
DEFAULT_RECOUNT_EVERY = 16  # only code built before the device ring still counts (passes/ring.py)
# slots per unit of a kernel's first ring (neutrino.maps.RING_RECORDS_PER_UNIT, which the launcher
# must not import: it loads numpy; tests/test_ring.py checks they agree)
RING_RECORDS_PER_UNIT = 1024
# the launch of a kernel whose probed code is still being built in the background (prebuild.py):
# waits for it (wait) or runs the original kernel (original)
WHILE_BUILDING = ("wait", "original")
# Off by default, by measurement (docs/startup.md): on a program that looks up 64 kernels and launches
# one, 4 threads cost 0.26-0.28 s more wall than none (the launched kernel queued behind the others,
# the lookups contending for the GIL); on the torch.compile program they saved 0.74 s of first launches.
DEFAULT_BUILD_THREADS = 0
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, option: str) -> int:
    """`4096`, `64K`, `512M`, `8G` (binary units; a trailing `B`/`iB` is allowed)."""
    t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    number = t[: len(t) - len(unit)]
    try:
        value = int(float(number) * _UNITS[unit])
    except ValueError:
        raise OptionError(f"{option} {text!r}: expected a size such as 512M or 4G") from None
    if value <= 0:
        raise OptionError(f"{option} {text!r}: must be positive")
    return value


def split_patterns(value) -> tuple[str, ...]:
    """-k / --filter values: repeatable, each a ':'-separated list of patterns."""
    if not value:
        return ()
    if isinstance(value, str):
        value = [value]
    return tuple(p for v in value for p in v.split(":") if p)


def kernel_selected(name: str, patterns) -> bool:
    """The one meaning of a kernel pattern, for every command (`-k`, `--filter`):
    `=NAME` is the name exactly; any other pattern, a substring of the (mangled) name."""
    return any(name == p[1:] if p.startswith("=") else p in name for p in patterns)


# (name, default) of every option; `probe` (the resolved path of the probe file) has none
_OPTION_FIELDS = (
    ("tracedir", "./trace"),
    ("kernels", ()),  # include patterns (split_patterns: a string or a list of them is accepted)
    ("exclude", ()),  # exclude patterns (the same)
    ("benchmark", False),
    ("memusage", False),
    ("launches", LaunchFilter()),
    ("callback", None),
    ("buffer_budget", DEFAULT_BUFFER_BUDGET),
    ("trace_budget", DEFAULT_TRACE_BUDGET),
    ("when_full", "drop"),  # one of WHEN_FULL
    ("callback_seconds", 60.0),  # time the exit-time analysis callback may take in all
    ("time_every", DEFAULT_TIME_EVERY),  # >= 0
    ("recount_every", DEFAULT_RECOUNT_EVERY),  # >= 1
    # cap = "count" maps: slots of a launch's device ring per unit of the launch (at most a
    # RING_BUDGET_SHARE of the buffer budget); reservations past them are dropped and counted
    ("ring_records", RING_RECORDS_PER_UNIT),  # >= 1
    ("graphs", True),  # probe kernels captured into CUDA graphs, on every replay (--no-graphs: leave them)
    ("timeline", True),  # every kernel, copy and memset through CUPTI (timeline.bin); --no-timeline: off
    ("verbosity", 0),  # -q: -1 (errors only), -v: 1 (per-kernel lines at exit)
    # probed code built off the launch path by this many threads (0: at the first launch, on its thread)
    ("build_threads", DEFAULT_BUILD_THREADS),  # >= 0
    ("while_building", "wait"),  # one of WHILE_BUILDING
)


class RuntimeOptions(namedtuple("RuntimeOptionsFields", ("probe", *(name for name, _ in _OPTION_FIELDS)),
                                defaults=tuple(default for _, default in _OPTION_FIELDS))):
    """The options, immutable; built with keywords (RuntimeOptions(probe=..., kernels=...))."""

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        """The patterns split; a value out of range is a ValueError (as attrs' validators raised)."""
        self = super().__new__(cls, *args, **kwargs)
        self = self._replace(kernels=split_patterns(self.kernels), exclude=split_patterns(self.exclude))
        for name, allowed in (("when_full", WHEN_FULL), ("while_building", WHILE_BUILDING)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"'{name}' must be in {allowed!r} (got {getattr(self, name)!r})")
        for name, least in (("time_every", 0), ("recount_every", 1), ("ring_records", 1), ("build_threads", 0)):
            if getattr(self, name) < least:
                raise ValueError(f"'{name}' must be >= {least}: {getattr(self, name)}")
        return self

    def names(self, kernel: str) -> bool:
        """Whether a -k substring matches the kernel (asked for kernels probed only on request)."""
        return any(k in kernel for k in self.kernels)

    def wants(self, kernel: str) -> bool:
        if self.kernels and not kernel_selected(kernel, self.kernels):
            return False
        return not kernel_selected(kernel, self.exclude)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def to_dict(self) -> dict:
        """The options as a JSON object (event.log's `start` event stores this, not a string of it)."""
        out = self._asdict()
        out["kernels"], out["exclude"] = list(self.kernels), list(self.exclude)  # JSON's lists, as before
        out["launches"] = dict(self.launches._asdict())
        return out

    @classmethod
    def from_json(cls, text: "str | dict") -> "RuntimeOptions":
        d = logged_options(text)
        d["launches"] = LaunchFilter(**d.get("launches", {}))
        d["kernels"] = tuple(d.get("kernels", ()))
        d["exclude"] = tuple(d.get("exclude", ()))
        return cls(**d)


def logged_options(value: "str | dict") -> dict:
    """The `options` of an event.log `start` event as a dict: an object now, a JSON string in older logs."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError(f"options: expected a JSON object, not {type(value).__name__}")
    return dict(value)
