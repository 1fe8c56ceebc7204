"""dmat: densified memory access timeline (%globaltimer ns and address of every global access).

Every thread records, before each global load, store, atomic or reduction it
executes (the selector #memory.global: every spelling, not the async copies),
the GPU's %globaltimer (ns, one clock for every SM) and the address it
accesses, so the picture's time axis is in ns and exact across SMs. Traces of
the earlier version (field `clock`, SM cycles of %clock64) are still read, on
a cycle axis. The map has a dynamic cap: its records go into one device ring
per launch, sized from the kernel's first launch (passes/ring.py; a full ring
drops and counts the rest, nothing waits). Analysis: neutrino/tools/dmat/analysis.py (time x address density
picture).

For long kernels, sample: copy this file, count accesses in a register and
save under `if n % 64 == 0:`. For SM cycles instead of ns (finer than the
timer's tick, but not aligned across SMs): a field `clock` saved from nl.clock().
"""

from neutrino import Map, probe
import neutrino.language as nl


@Map(level="thread", type="array", size=16, cap="dynamic")
class dmat:
    gtime: nl.u64
    addr: nl.u64


@probe(pos="#memory.global", level="thread", before=True)
def access():
    dmat.save(nl.time(), nl.addr)
