"""The pass manager.

A pass is a frozen attrs class with a `name`, the names of the passes it
`requires` to have run before it, and `run(module, ctx)`. It edits the module
in place and hands typed results on through `ctx` (passes/state.py), never
through globals. The manager is the same for every ISA: it checks
`requires`, times the passes, runs the ISA's verifier after each one
(`verify_each`) and prints the IR after the named ones with the ISA's printer.
"""

from __future__ import annotations

import time
from typing import ClassVar, Protocol, runtime_checkable

import attrs

from neutrino.errors import NeutrinoError
from neutrino.passes.state import Context, KernelState, Site

__all__ = ["Context", "KernelState", "Pass", "PassFailed", "PassManager", "Site"]


@runtime_checkable
class Pass(Protocol):
    name: ClassVar[str]
    requires: ClassVar[tuple[str, ...]]

    def run(self, module, ctx: Context) -> None: ...


class PassFailed(NeutrinoError):
    pass


def default_isa():
    """A context made without an ISA is PTX's (every caller before GCN was)."""
    from neutrino.isa.ptx.target import PTX

    return PTX


@attrs.define
class PassManager:
    """Runs passes in order; checks `requires`, times them, can verify and print the IR after each."""

    passes: list = attrs.Factory(list)
    print_after: frozenset[str] = frozenset()
    verify_each: bool = False  # check the kernels' invariants after every pass, not only at `verify`
    dump: list[tuple[str, str]] = attrs.Factory(list)
    isa: object = None  # the ISA of contexts that name none; None: PTX

    def add(self, p) -> "PassManager":
        self.passes.append(p)
        return self

    def insert_after(self, name: str, p) -> "PassManager":
        return self._insert(name, p, 1)

    def insert_before(self, name: str, p) -> "PassManager":
        return self._insert(name, p, 0)

    def _insert(self, name: str, p, after: int) -> "PassManager":
        for i, existing in enumerate(self.passes):
            if existing.name == name:
                self.passes.insert(i + after, p)
                return self
        raise KeyError(f"no pass named {name!r} in the pipeline")

    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    def run(self, module, ctx: Context):
        if ctx.isa is None:
            ctx.isa = self.isa or default_isa()
        isa = ctx.isa
        done: set[str] = set()
        for p in self.passes:
            missing = [r for r in getattr(p, "requires", ()) if r not in done]
            if missing:
                raise PassFailed(f"pass {p.name!r} requires {', '.join(missing)} to run before it")
            start = time.perf_counter()
            try:
                p.run(module, ctx)
            except NeutrinoError:
                raise
            except Exception as e:  # a bug in a pass: name the pass, keep the cause
                raise PassFailed(f"pass {p.name!r} failed: {type(e).__name__}: {e}") from e
            ctx.timings[p.name] = ctx.timings.get(p.name, 0.0) + time.perf_counter() - start
            done.add(p.name)
            if self.verify_each:
                self.verify(module, ctx, p.name, lowered="lower-save" in done)
            if p.name in self.print_after:
                self.dump.append((p.name, isa.show(module, ctx)))
        return module

    @staticmethod
    def verify(module, ctx: Context, after: str, lowered: bool) -> None:
        """The ISA's kernel invariants; a broken one names the pass that broke it."""
        try:
            ctx.isa.check(module, ctx, lowered)
        except NeutrinoError as e:
            raise PassFailed(f"after pass {after!r}: {e}") from e
