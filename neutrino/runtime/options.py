"""Runtime options: what the launcher parsed, handed to the profiled process as JSON."""

from __future__ import annotations

import json

import attrs

from neutrino.errors import NeutrinoError

ENV_OPTIONS = "NEUTRINO_OPTIONS"
U64_MAX = 2**64 - 1


class OptionError(NeutrinoError):
    """A command-line option with a bad value."""


@attrs.frozen
class LaunchFilter:
    """Which launches of each kernel are probed: indices start <= i < stop, every `every`-th."""

    start: int = 0
    stop: int = U64_MAX
    every: int = 1

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


def _split(value) -> tuple[str, ...]:
    if not value:
        return ()
    if isinstance(value, str):
        value = [value]
    return tuple(p for v in value for p in v.split(":") if p)


@attrs.frozen
class RuntimeOptions:
    probe: str  # resolved path of the probe file
    tracedir: str = "./trace"
    kernels: tuple[str, ...] = attrs.field(default=(), converter=_split)  # include substrings
    exclude: tuple[str, ...] = attrs.field(default=(), converter=_split)  # exclude substrings
    benchmark: bool = False
    memusage: bool = False
    launches: LaunchFilter = attrs.field(factory=LaunchFilter)
    callback: str | None = None

    def wants(self, kernel: str) -> bool:
        if self.kernels and not any(k in kernel for k in self.kernels):
            return False
        return not any(x in kernel for x in self.exclude)

    def to_json(self) -> str:
        d = attrs.asdict(self)
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "RuntimeOptions":
        d = json.loads(text)
        d["launches"] = LaunchFilter(**d.get("launches", {}))
        d["kernels"] = tuple(d.get("kernels", ()))
        d["exclude"] = tuple(d.get("exclude", ()))
        return cls(**d)
