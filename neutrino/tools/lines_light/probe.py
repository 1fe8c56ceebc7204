"""lines_light: instructions executed per source line (.loc debug lines), counts only: the cheap lines mode.

The `lines_blocks` map of the `lines` tool alone: at each basic block's first
unguarded instruction every thread records `BLOCK`; the analysis
(neutrino/tools/lines/analysis.py) multiplies by the instructions of each source
line in the block. No clock is read and no probe sits inside a block, so the
kernel's schedule within blocks is left as compiled.
"""

from neutrino import Map, probe
import neutrino.language as nl


# Not staged (unlike `lines`): its adds are few (blocks outside loops, and each register counter's
# flush at exit: passes/register_counters.py), so 32 global rows (64 KB per launch) cost less than the
# per-block staging's zeroing, barrier and copy-out (docs/lines.md, "Light mode").
@Map(type="hist", buckets="linear:0:254:1")
class lines_blocks:
    """threads that executed each basic block, by BLOCK"""


@probe(pos="block", level="thread", before=True)
def count_block():
    lines_blocks.record(nl.block)
