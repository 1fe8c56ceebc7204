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
