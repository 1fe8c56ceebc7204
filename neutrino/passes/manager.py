"""Passes, the context they share, and the pass manager.

A pass is a frozen attrs class with a `name`, the names of the passes it
`requires` to have run before it, and `run(module, ctx)`. It edits the module
in place and hands typed results on through `ctx`, never through globals.
"""

from __future__ import annotations

import time
from typing import ClassVar, Protocol, runtime_checkable

import attrs

from neutrino.errors import InstrumentError, NeutrinoError
from neutrino.isa.ptx import ir, print_module
from neutrino.isa.ptx.symbols import NameAllocator
from neutrino.probe_model import ProbeFile


@attrs.define(eq=False)
class Site:
    """One place where one probe snippet runs."""

    probe: str
    where: str  # before / after
    kind: str  # entry / exit / instruction
    anchor: ir.Instruction | None  # the matched instruction, or the ret/exit; None at kernel entry
    function: str


@attrs.define(eq=False)
class KernelState:
    """What the passes learn and decide about one entry function."""

    function: ir.Function
    sites: list[Site] = attrs.Factory(list)
    skipped: list[dict] = attrs.Factory(list)
    prefix: str = ""  # register prefix chosen by virtualization, e.g. %nt_
    renames: dict[str, str] = attrs.Factory(dict)  # probe register → kernel-unique name
    temps: dict[str, str] = attrs.Factory(dict)  # our own registers: name → type
    maps: list[str] = attrs.Factory(list)  # maps written by this kernel's probes
    params: list[dict] = attrs.Factory(list)
    count_kernel: str | None = None
    counting: bool = False  # this is the counting variant of another entry
    original_ids: list[int] = attrs.Factory(list)  # identities of the original instructions, in order
    exits: list[ir.Instruction] = attrs.Factory(list)  # the original ret/exit instructions
    levels: set[str] = attrs.Factory(set)  # levels whose leader predicate / unit index the code needs
    matched: dict[str, int] = attrs.Factory(dict)  # instruction-position probe → instructions it matched

    def temp(self, role: str, rtype: str) -> str:
        """A register of ours, declared once per kernel by name and type."""
        return self.temp_named(f"{self.prefix}{role}", rtype)

    def temp_named(self, name: str, rtype: str) -> str:
        old = self.temps.setdefault(name, rtype)
        if old != rtype:
            raise InstrumentError(f"internal: register {name} requested as .{rtype} and .{old}")
        return name


@attrs.define(eq=False)
class Context:
    probes: ProbeFile
    kernel: str | None = None  # instrument only this entry (and prune the others)
    kernels: dict[str, KernelState] = attrs.Factory(dict)
    timings: dict[str, float] = attrs.Factory(dict)
    allocator: NameAllocator | None = None  # every name a pass adds comes from here (spec/ir.md "Names")

    def names(self, module: ir.Module) -> NameAllocator:
        """The module's name allocator, read from its symbol tables when first asked for."""
        if self.allocator is None or self.allocator.module is not module:
            self.allocator = NameAllocator.of(module)
        return self.allocator

    def info(self) -> dict[str, dict]:
        """The kernel descriptions of spec/kernel-json.md."""
        out = {}
        for name, state in self.kernels.items():
            if state.counting:
                continue
            out[name] = {
                "name": name,
                "original_params": len(state.function.params or []) - len(state.params),
                "params": state.params,
                "count_kernel": state.count_kernel,
                "maps": [self.probes.maps[m].to_json() for m in state.maps],
                "sites": len(state.sites),
                "skipped": state.skipped,
                "matched": dict(state.matched),
            }
        return out


@runtime_checkable
class Pass(Protocol):
    name: ClassVar[str]
    requires: ClassVar[tuple[str, ...]]

    def run(self, module: ir.Module, ctx: Context) -> None: ...


class PassFailed(NeutrinoError):
    pass


@attrs.define
class PassManager:
    """Runs passes in order; checks `requires`, times them, can print the IR after one."""

    passes: list = attrs.Factory(list)
    print_after: frozenset[str] = frozenset()
    verify_each: bool = False  # check the kernels' invariants after every pass, not only at `verify`
    dump: list[tuple[str, str]] = attrs.Factory(list)
    printer: object = None  # module → text for --print-after; None: the PTX printer

    def add(self, p) -> "PassManager":
        self.passes.append(p)
        return self

    def insert_after(self, name: str, p) -> "PassManager":
        for i, existing in enumerate(self.passes):
            if existing.name == name:
                self.passes.insert(i + 1, p)
                return self
        raise KeyError(f"no pass named {name!r} in the pipeline")

    def insert_before(self, name: str, p) -> "PassManager":
        for i, existing in enumerate(self.passes):
            if existing.name == name:
                self.passes.insert(i, p)
                return self
        raise KeyError(f"no pass named {name!r} in the pipeline")

    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    def run(self, module: ir.Module, ctx: Context) -> ir.Module:
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
            if self.verify_each and self.printer is None:  # the PTX invariants; GCN checks at its `verify`
                from neutrino.passes.verify import Verifier

                for name, state in ctx.kernels.items():
                    Verifier.check_kernel(name, state, lowered="lower-save" in done)
            if p.name in self.print_after:
                self.dump.append((p.name, (self.printer or print_module)(module)))
        return module
