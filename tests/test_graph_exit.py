"""The graph variant of a probed kernel (passes/graph_exit.py; spec/kernel-json.md "The graph variant").

Checked on the PTX: the eager code is unchanged by the option's existence (byte for byte, same
call), the variant's probe writes are all gated and go through the moved buffers, every exit
takes a ticket, the appender is reachable only through a completed count, its control-block
offsets are the runtime's, what it cannot count is refused, and ptxas assembles it for
sm_52 to sm_90 (the older targets retargeted to sm_75: ptxas 13 knows none older).
"""

from __future__ import annotations

import re

import pytest

from neutrino.engine import instrument
from neutrino.errors import InstrumentError
from neutrino.passes import graph_exit
from neutrino.probefile import parse_probes
from neutrino.runtime.cudagraphs import ring as graph_ring
from neutrino.toolbox import load_probe_argument

from helpers import CORPUS, HAVE_PTXAS, ptxas
from test_aggregation import HIST_PROBE, KERNEL, SUM_PROBE, with_target
from test_probe_gate import gated_writes

VADD = next(p for p in CORPUS if p.name == "vadd.sm90a.ptx")
TARGETS = ["sm_52", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]
PROTOCOL = re.compile(r"%nt_g[xa]_")  # the ticket's and the appender's registers


def probe_writes(ptx: str) -> str:
    """The PTX without the protocol's own lines (the ticket, the appender), which run on every replay."""
    return "\n".join(line for line in ptx.splitlines() if not (re.search(r"(st|red|atom)\.", line) and PROTOCOL.search(line)))


def test_control_block_offsets_are_the_runtimes():
    assert graph_exit.CONTROL == graph_ring.CONTROL
    assert (graph_exit.REPLAYS, graph_exit.WRITTEN) == (graph_ring.REPLAYS, graph_ring.WRITTEN)
    assert graph_exit.DROPPED == graph_ring.DROPPED and graph_exit.FLAGS == graph_ring.COUNTERS_BYTES
    assert graph_exit.CONSUMED == graph_ring.CONSUMED and graph_exit.STATE_OFFSET == graph_ring.GRAPH_STATE_OFFSET


@pytest.mark.parametrize("tool", ["block_sched", "gmem_bytes", "tensorop"])
def test_eager_code_unchanged_and_variant_gated(tool):
    probes = load_probe_argument(tool, None)
    text = VADD.read_text()
    eager = instrument(text, probes).ptx
    variant = instrument(text, probes, graph_exit=True).ptx
    assert instrument(text, probes).ptx == eager and "$nt_graph_append" not in eager
    assert variant != eager and variant.count("$nt_graph_append:") == 1
    assert gated_writes(probe_writes(variant)) == []
    # the gate: this replay's slot word, read once from the first buffer's head; no eager gate word
    assert variant.count(f"[%nt_buf_") >= 1 and "+-16];" in variant and "%nt_gate" not in variant
    exits = len(re.findall(r"^\s*(@!?%\S+\s+)?(ret|exit);", text, re.M))
    assert variant.count("atom.global.add.u64 \t%nt_gx_old, [%nt_gx_p+-24]") == exits
    assert variant.count("bra \t$nt_graph_append;") == exits
    if HAVE_PTXAS:
        ptxas(variant, "sm_90a")


@pytest.mark.parametrize("target", TARGETS)
def test_variant_assembles_on_every_target(target):
    probes = parse_probes(SUM_PROBE + HIST_PROBE, "p.toml")
    for text, probe in ((with_target(KERNEL, target), probes),
                        (VADD.read_text().replace(".target sm_90a", f".target {target}", 1),
                         load_probe_argument("block_sched", None))):
        ptx = instrument(text, probe, graph_exit=True).ptx
        assert gated_writes(probe_writes(ptx)) == []
        warp = target >= "sm_30"
        assert ("activemask.b32 \t%nt_gx_m" in ptx) == warp
        if HAVE_PTXAS:
            ptxas(ptx if target >= "sm_75" else with_target(ptx, "sm_75"), max(target, "sm_75"))


def test_guarded_exit_counts_only_the_leaving_threads():
    text = VADD.read_text().replace("\tret;", "\tsetp.eq.u32 \t%p1, %r1, 0;\n\t@%p1 ret;\n\tret;", 1)
    ptx = instrument(text, load_probe_argument("block_sched", None), graph_exit=True).ptx
    assert "vote.sync.ballot.b32 \t%nt_gx_m, %nt_gx_g, %nt_gx_m;" in ptx
    assert ptx.count("bra \t$nt_graph_append;") == 2
    if HAVE_PTXAS:
        ptxas(ptx, "sm_90a")


def test_exit_in_a_called_function_is_refused():
    text = VADD.read_text()
    callee = ".func nt_test_bail()\n{\n\texit;\n}\n"
    text = text.replace(".visible .entry", callee + ".visible .entry", 1)
    instrument(text, load_probe_argument("block_sched", None))  # eager code does not count exits
    with pytest.raises(InstrumentError, match="exit"):
        instrument(text, load_probe_argument("block_sched", None), graph_exit=True)


def test_count_maps_have_no_variant():
    probe = load_probe_argument("dmat", None)  # its maps are sized by a counting launch
    assert any(m.cap == "count" for m in probe.maps.values())
    with pytest.raises(InstrumentError, match="count"):
        instrument(VADD.read_text(), probe, graph_exit=True)
