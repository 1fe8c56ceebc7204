"""The probe engine's front door: assembly text (PTX by default, or GCN) + probes → probed assembly + kernel descriptions."""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir, parse_module, print_module
from neutrino.isa.ptx.target import PTX
from neutrino.passes import Context, PassManager, default_pipeline
from neutrino.passes.prune import prune_module
from neutrino.probefile import ProbeFile


@attrs.frozen
class Instrumented:
    ptx: str
    kernels: dict[str, dict]  # entry name → description (spec/kernel-json.md)
    timings: dict[str, float]

    def info_json(self) -> dict:
        return {"version": 1, "kernels": self.kernels}


@contextlib.contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Pause Python's cycle collector while we build and drop IR.

    The IR holds no reference cycles, so reference counting frees all of it;
    but its many small allocations trigger collections, and in a large program
    (a training job holds millions of objects) each full collection walks them
    all. Measured: 30-50% of pipeline time with a thousand modules alive.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _chain_on_ptx(isa, graph_chain: bool) -> None:
    if graph_chain and isa is not PTX:
        raise InstrumentError(f"graph_chain: only PTX kernels have the chain variant, not {isa.name.upper()}")


def instrument_module(module, probes: ProbeFile, kernel: str | None = None, pipeline: PassManager | None = None,
                      isa=PTX, graph_chain: bool = False, mixed_stores: bool = False, late_gate: bool = False,
                      late_head: bool = True) -> Context:
    _chain_on_ptx(isa, graph_chain)
    ctx = Context(probes, kernel, isa=isa, graph_chain=graph_chain, mixed_stores=mixed_stores, late_gate=late_gate,
                  late_head=late_head)
    (pipeline or default_pipeline(isa)).run(module, ctx)
    return ctx


def instrument(text: str, probes: ProbeFile, kernel: str | None = None, source: str | None = None,
               pipeline: PassManager | None = None, isa=PTX, graph_chain: bool = False,
               mixed_stores: bool = False, late_gate: bool = False, late_head: bool = True) -> Instrumented:
    """`text` in `isa` (neutrino/isa/interface.py; PTX unless named) instrumented with `probes`, loaded for that ISA.
    `graph_chain`: the variant a CUDA graph's chain node runs (PTX; spec/kernel-json.md, "The chain head").
    `mixed_stores` (PTX; not yet the default, issue 24): a record's u64 and u32 fields that fill an aligned 16-byte
    span are written by one `st.global.v4.b32` (block_sched's record: one store instead of two); bytes identical.
    `late_gate` (PTX; not yet the default, issue 24): the probe gate's predicate set again before each exit's probe
    code, so that ptxas waits for the gate's load at the warp's end rather than before the body's loads.
    `late_head` (with graph_chain; the default since 2026-11-28, issue 24): the chain head's words consumed where
    the probe needs them (thread 0 of block 0's loads of the advanced head behind a branch; the pointers moved to the
    slot before each exit's probe code), so a tagged launch's warps do not wait for the head's load before the
    body's (graph8 on an H200: 17.82 against 18.43 µs per replay; docs/overhead.md). False: the head's words
    tested at entry, before the body's loads."""
    _chain_on_ptx(isa, graph_chain)
    if probes.isa != isa.name:
        raise InstrumentError(f"{probes.path}: its snippets are {probes.isa.upper()}; "
                              f"load it with isa={isa.name!r} for a {isa.name.upper()} module")
    with cycle_collection_paused():
        module = isa.parse_module(text, source or f"<{isa.name}>")
        ctx = instrument_module(module, probes, kernel, pipeline, isa, graph_chain, mixed_stores, late_gate,
                                late_head)
        return Instrumented(isa.print_module(module), ctx.info(), dict(ctx.timings))


def prune(ptx: str, kernel: str, source: str = "<ptx>") -> str:
    """The module with only `kernel` and what it uses, unprobed (the benchmark baseline)."""
    with cycle_collection_paused():
        module = parse_module(ptx, source)
    if module.function(kernel) is None or not module.function(kernel).is_entry:
        names = ", ".join(f.name for f in module.entries())
        raise InstrumentError(f"{source}: no entry named {kernel!r} (entries: {names})")
    prune_module(module, {kernel})
    return print_module(module)


def list_entries(ptx: str, source: str = "<ptx>") -> list[str]:
    return [f.name for f in parse_module(ptx, source).entries()]
