"""What the passes share: the sites, the state of each kernel and the context of one run.

ISA-neutral: a KernelState's `function` is the ISA's kernel (a PTX entry, a
GCN kernel view); an ISA that needs more per kernel subclasses KernelState
(isa/gcn/registers.py). The context carries the ISA (neutrino/isa/interface.py)
that the passes ask for every ISA-specific step.
"""

from __future__ import annotations

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx.symbols import NameAllocator


@attrs.define(eq=False)
class Site:
    """One place where one probe snippet runs."""

    probe: str
    where: str  # before / after
    kind: str  # entry / exit / instruction
    anchor: object | None  # the matched instruction, or the ret/exit; None at kernel entry
    function: str
    code: list | tuple = ()  # ISAs that splice late (GCN) keep the site's built code here until buffer addressing


@attrs.define(eq=False)
class KernelState:
    """What the passes learn and decide about one entry function."""

    function: object  # the ISA's kernel: a PTX ir.Function, a GCN ir.Kernel; has `.name`
    sites: list[Site] = attrs.Factory(list)
    skipped: list[dict] = attrs.Factory(list)
    prefix: str = ""  # PTX: register prefix chosen by virtualization, e.g. %nt_
    renames: dict = attrs.Factory(dict)  # probe register → its home: a kernel-unique name (PTX), registers (GCN)
    temps: dict[str, str] = attrs.Factory(dict)  # PTX: our own registers, name → type
    maps: list[str] = attrs.Factory(list)  # maps written by this kernel's probes
    params: list[dict] = attrs.Factory(list)
    count_kernel: str | None = None
    counting: bool = False  # this is the counting variant of another entry
    originals: list = attrs.Factory(list)  # the kernel's own instructions, in order: what positions match
    original_ids: list[int] = attrs.Factory(list)  # identities of the original instructions, in order
    exits: list = attrs.Factory(list)  # the original ret/exit instructions
    levels: set[str] = attrs.Factory(set)  # levels whose leader predicate / unit index the code needs
    matched: dict[str, int] = attrs.Factory(dict)  # instruction-position probe → instructions it matched

    @property
    def name(self) -> str:
        return self.function.name

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
    probes: "ProbeFile"  # noqa: F821 (neutrino.probefile; not imported: it imports the verifier, which reads this)
    kernel: str | None = None  # instrument only this entry (and prune the others)
    kernels: dict[str, KernelState] = attrs.Factory(dict)
    timings: dict[str, float] = attrs.Factory(dict)
    allocator: NameAllocator | None = None  # every name a pass adds comes from here (spec/ir.md "Names")
    isa: object = None  # neutrino.isa.interface.Isa; the pass manager sets PTX when none was given
    graph_chain: bool = False  # PTX: the variant a CUDA graph's chain node runs (passes/graph_chain.py)
    mixed_stores: bool = False  # PTX: one 16-byte store for a record's mixed u64/u32 fields (passes/lower_save.py)
    late_gate: bool = False  # PTX: the probe gate's predicate set again before each exit's probe code (passes/buffers.py)
    late_head: bool = True  # PTX, graph_chain (the default, issue 24): the head's words consumed where the probe needs them (passes/graph_chain.py)

    def names(self, module) -> NameAllocator:
        """The module's name allocator, read from its symbol tables when first asked for (PTX)."""
        if self.allocator is None or self.allocator.module is not module:
            self.allocator = NameAllocator.of(module)
        return self.allocator

    def info(self) -> dict[str, dict]:
        """The kernel descriptions of spec/kernel-json.md, as the ISA writes them."""
        return self.isa.kernel_info(self)

    def describe(self, state: KernelState, **own) -> dict:
        """What every ISA's description of a kernel holds (spec/kernel-json.md), then the ISA's own fields (`own`,
        which may also replace one: GCN's maps carry their wave width)."""
        return {"name": state.name, "params": state.params, "maps": [self.probes.maps[m].to_json() for m in state.maps],
                "sites": len(state.sites), "skipped": state.skipped, "matched": dict(state.matched), **own}
