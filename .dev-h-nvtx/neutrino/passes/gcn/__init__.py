"""The pipeline on GCN (AMD CDNA: gfx90a, gfx942), run by the same PassManager as PTX.

In order, and why:

1. match-tracepoints: kernels (label + descriptor), their original instructions, the sites.
2. virtualize-registers: free SGPRs/VGPRs for the probe registers, before any code is built.
3. resolve-operands: each site's snippet made physical, helpers computed, SCC kept; SAVE abstract.
4. lower-save: SAVE → leader-predicated global stores / atomics, on registers of ours.
5. verify: what will be printed writes only our registers; after lowering, so it sees all of it.
6. buffer-addressing: map arguments, entry code, register counts, splicing; last, because only
   now is every register and map known.
"""

from neutrino.passes.gcn.buffers import GcnBufferAddressing
from neutrino.passes.gcn.lower_save import GcnSaveLowering
from neutrino.passes.gcn.match import GcnTracepointMatching
from neutrino.passes.gcn.resolve import GcnOperandResolution
from neutrino.passes.gcn.verify import GcnVerifier
from neutrino.passes.gcn.virtualize import GcnRegisterVirtualization
from neutrino.passes.manager import PassManager


def gcn_pipeline() -> PassManager:
    from neutrino.isa.gcn import print_module

    return PassManager(
        [
            GcnTracepointMatching(),
            GcnRegisterVirtualization(),
            GcnOperandResolution(),
            GcnSaveLowering(),
            GcnVerifier(),
            GcnBufferAddressing(),
        ],
        printer=print_module,
    )


__all__ = ["GcnBufferAddressing", "GcnOperandResolution", "GcnRegisterVirtualization", "GcnSaveLowering",
           "GcnTracepointMatching", "GcnVerifier", "gcn_pipeline"]
