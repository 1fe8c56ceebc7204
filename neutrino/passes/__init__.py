"""What we do to an assembly: composable passes, written once for every ISA (passes/pipeline.py).

Each pass asks the ISA (neutrino/isa/interface.py) for what depends on its
instructions; PTX's steps live in the other modules of this package, GCN's in
neutrino/isa/gcn/. The default pipeline, in order, and why each step comes
where it does:

1. match-tracepoints: find the sites first; later passes only add code, so the
   list of original instructions is fixed here (the verifier checks it at the end).
2. virtualize-registers: choose kernel-unique names (PTX) or free physical
   registers (GCN) before any probe code is copied in.
3. resolve-operands: each site's snippet with helpers materialised and guards
   folded in (PTX splices it here; GCN keeps it on the site); SAVE stays a
   pseudo-instruction.
4. counting-variant: copy kernels with `count` maps while SAVEs are still abstract,
   so both copies get identical probe code (PTX; GCN refuses `count` maps).
5. lower-save: SAVE → bounds-checked stores, cursor bumps, counts at exit.
6. verify: everything the probe contributed is checked as it will be printed.
7. buffer-addressing: parameters, unit indices and pointers the lowered code reads,
   and the register declarations (PTX) or counts (GCN) of all the above; last,
   because only now is the set of registers and maps known.
8. fit-target: raise `.target`/`.version` to what the inserted code needs (an
   sm_1x module's f32 code keeps its meaning), or refuse with a location; after
   the last pass that inserts code (PTX).
9. prune: when one kernel was asked for, drop what it does not use (PTX).
"""

from neutrino.passes.manager import Context, KernelState, Pass, PassManager, Site
from neutrino.passes.pipeline import (
    BufferAddressing, CountingVariant, OperandResolution, Pruning, RegisterVirtualization, SaveLowering, TargetFitting,
    TracepointMatching, Verifier, default_pipeline,
)

__all__ = [
    "BufferAddressing", "Context", "CountingVariant", "KernelState", "OperandResolution", "Pass", "PassManager",
    "Pruning", "RegisterVirtualization", "SaveLowering", "Site", "TargetFitting", "TracepointMatching", "Verifier",
    "default_pipeline",
]
