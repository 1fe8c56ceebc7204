"""What an instruction set provides to the one instrumentation core (spec/architecture.md, "ISAs").

The passes of `neutrino/passes/` are written once, against this interface:
each pass does what is common to every ISA (which kernels, which sites, the
order of the steps, the checks between them) and asks the ISA for the steps
that depend on its instructions and registers. PTX (`neutrino/isa/ptx/target.py`)
and AMD GCN (`neutrino/isa/gcn/target.py`) implement it; a third ISA is a new
`neutrino/isa/<name>/` with a `target.py`, registered in `neutrino/isa/registry.py`.

Also here, because every ISA's snippets use them: the names a probe may read
(helpers) and the pseudo-instruction that leaves a record (SAVE).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

#: values a snippet may read at a site, whatever the ISA (spec/probe-toml.md, "Helpers")
HELPERS = ("OUT", "IN1", "IN2", "IN3", "ADDR", "BYTES", "LINE", "BLOCK")  # LINE, BLOCK: PTX only, neutrino/isa/ptx/lines.py
#: the pseudo-instruction that stores a record; SAVE lowering replaces it by the ISA's stores
SAVE = "SAVE"

#: one ISA-specific step of a pass: edits the module, hands results on through the context
Step = Callable[[Any, Any], None]


class SavePrimitives(Protocol):
    """The steps of the ISA-neutral SAVE lowering and buffer addressing (passes/save_core.py), per kernel.

    Each returns the ISA's code for its step (a list of the ISA's instructions);
    `spec` is a map (probefile.MapSpec or a value with its name, type, level,
    cap and record_bytes), `guard` the ISA's predicate or lane mask, or None.
    PTX supplies them as PTX (passes/lower_save.py `_Lowerer`, passes/buffers.py `_Prologue`), but an array map's
    record and the exit's counts: NeutralSteps with PTX's hooks, translated (isa/ptx/translate.py);
    GCN and RDNA take them written in the neutral operations (passes/neutral_ops.py `NeutralSteps`,
    spec/pipeline.md "The neutral operations") and translate those (isa/gcn/translate.py): a new
    ISA can do the same and write no SAVE lowering of its own.
    """

    # SAVE lowering: the lanes that save, a record of an array map, a sum map's counters, a unit's count at exit
    def saving_lanes(self, level: str, guard: Any, at_exit: bool = False) -> list: ...  # unit leader ∧ guard (∧ gate)
    def end_saving(self, level: str) -> list: ...
    def below_cap(self, spec: Any, guard: Any) -> list: ...  # of those, the lanes whose unit cursor is below cap
    def record_address(self, spec: Any) -> list: ...  # this thread's record address: the unit's slot + cursor * size
    def store_chunks(self, spec: Any, count: int) -> list[list[int]]: ...  # field indices stored together
    def store_fields(self, spec: Any, values: list, first: int) -> list: ...  # N bytes at the record address + offset
    def end_below_cap(self, spec: Any) -> list: ...
    def bump_cursor(self, spec: Any, guard: Any) -> list: ...  # every attempt counts, stored or not
    def counter_add(self, spec: Any, index: int, value: Any, guard: Any) -> list: ...  # atomic add to counter `index`
    def store_count(self, spec: Any) -> list: ...  # the unit's cursor into its count

    # buffer addressing, at kernel entry
    def map_base(self, spec: Any, first: bool) -> list: ...  # the map's buffer pointer (PTX: and the probe gate)
    def counters_address(self, spec: Any) -> list: ...  # a sum/hist map's counters for this thread
    def unit_index(self, level: str) -> tuple[Any, list]: ...  # ((unit, units) of the level, code): special registers read
    def unit_slot(self, spec: Any, unit_and_units: Any) -> list: ...  # counts address, first record, cursor = 0


class Isa(Protocol):
    """One instruction set, as the passes see it. `module` is the ISA's own IR module; `ctx` a passes.state.Context."""

    name: str  # "ptx", "gcn": the snippet language a probe file is loaded for (ProbeFile.isa)
    entry_words: tuple[str, str]  # what messages call a kernel: ("entry", "entries"), ("kernel", "kernels")
    comment: str  # line comment, for the banners of --print-after

    # the IR: text → module → text; the printer is the parser's inverse
    def parse_module(self, text: str, source: str) -> Any: ...
    def print_module(self, module: Any) -> str: ...
    def show(self, module: Any, ctx: Any) -> str: ...  # --print-after: the module with the code built so far
    def entries(self, module: Any) -> list: ...  # the kernels, each with a `.name`

    # match-tracepoints: a KernelState per kernel (its original instructions and exits), and what a position names
    def kernel_state(self, module: Any, entry: Any) -> Any: ...
    def matcher(self, module: Any, state: Any) -> Callable[[Any], list]: ...  # per kernel: probe → the originals its position names

    # virtualize-registers (the register model): a home for every probe register, none the kernel uses
    def virtualize(self, module: Any, ctx: Any, state: Any) -> None: ...

    # the steps that build code: snippets made concrete, SAVE lowered to stores, map buffers addressed and spliced
    # (lower_save and buffer_addressing run passes/save_core.py on the ISA's SavePrimitives)
    resolve_operands: Step
    lower_save: Step
    buffer_addressing: Step
    # steps an ISA may lack (None): the default pipeline leaves their passes out
    counting_variant: Step | None
    fit_target: Step | None
    prune: Step | None

    # the verifier: phase 1 on the probe file (diagnostics), phase 2 on every kernel of ctx after any pass (raises);
    # `lowered`: SAVE lowering has run, so no SAVE may be left
    def verify_probe_file(self, probe_file: Any) -> list: ...
    def check(self, module: Any, ctx: Any, lowered: bool) -> None: ...

    # the kernel descriptions of spec/kernel-json.md
    def kernel_info(self, ctx: Any) -> dict[str, dict]: ...

    # the ISA's assembler as the oracle (`instrument --check`): the line to print; raises when it rejects the text
    def check_assembles(self, text: str, original: str | None) -> str: ...
