"""dmat: densified memory access timeline (clock and address of every global access).

Every thread records, before each global load, store, atomic or reduction it
executes (the selector #memory.global: every spelling, not the async copies),
the SM clock and the address it accesses. The map has a dynamic cap:
the runtime first counts the records of every thread and sizes the buffer for
the largest count. Analysis: neutrino/tools/dmat/analysis.py (time x address density
picture).

For long kernels, sample: copy this file, count accesses in a register and
save under `if n % 64 == 0:`.
"""

from neutrino import Map, probe
import neutrino.language as nl


@Map(level="thread", type="array", size=16, cap="dynamic")
class dmat:
    clock: nl.u64
    addr: nl.u64


@probe(pos="#memory.global", level="thread", before=True)
def access():
    dmat.save(nl.clock(), nl.addr)
