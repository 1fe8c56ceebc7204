"""What we do to an assembly: composable passes over the PTX graph.

The default pipeline, in order, and why each step comes where it does:

1. match-tracepoints: find the sites first; later passes only add code, so the
   list of original instructions is fixed here (the verifier checks it at the end).
2. virtualize-registers: choose kernel-unique names before any probe code is copied in.
3. resolve-operands: splice each site's snippet in, with helpers materialised and
   guards folded in; SAVE stays a pseudo-instruction.
4. counting-variant: copy kernels with `count` maps while SAVEs are still abstract,
   so both copies get identical probe code.
5. lower-save: SAVE → bounds-checked vector stores, cursor bumps, counts at exit.
6. verify: everything the probe contributed is checked as it will be printed.
7. buffer-addressing: parameters, unit indices and pointers the lowered code reads,
   and the register declarations of all the above; last, because only now is the
   set of registers and maps known.
8. fit-target: raise `.target`/`.version` to what the inserted code needs (an
   sm_1x module's f32 code keeps its meaning), or refuse with a location; after
   the last pass that inserts code.
9. prune: when one kernel was asked for, drop what it does not use.
"""

from neutrino.passes.buffers import BufferAddressing
from neutrino.passes.counting import CountingVariant
from neutrino.passes.lower_save import SaveLowering
from neutrino.passes.manager import Context, KernelState, Pass, PassManager, Site
from neutrino.passes.match import TracepointMatching
from neutrino.passes.prune import Pruning
from neutrino.passes.resolve import OperandResolution
from neutrino.passes.target import TargetFitting
from neutrino.passes.verify import Verifier
from neutrino.passes.virtualize import RegisterVirtualization


def default_pipeline() -> PassManager:
    return PassManager(
        [
            TracepointMatching(),
            RegisterVirtualization(),
            OperandResolution(),
            CountingVariant(),
            SaveLowering(),
            Verifier(),
            BufferAddressing(),
            TargetFitting(),
            Pruning(),
        ]
    )


__all__ = [
    "BufferAddressing", "Context", "CountingVariant", "KernelState", "OperandResolution", "Pass", "PassManager",
    "Pruning", "RegisterVirtualization", "SaveLowering", "Site", "TargetFitting", "TracepointMatching", "Verifier",
    "default_pipeline",
]
