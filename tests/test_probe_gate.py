"""The probe gate (spec/kernel-json.md, "The probe gate"): every store and atomic the engine
inserts for a SAVE is predicated on `%nt_on`, which the prologue sets from the first map's
buffer pointer (bit 0 set: the u32 eight bytes before the buffer must read 0).

Checked on the text: for each inserted global write, the predicate guarding it is `%nt_on`
or was last defined (the lowering's code is straight-line) as an AND of a gated predicate. ptxas assembles the results, the sm_52 lowering retargeted to sm_75 (ptxas 13
knows no older target; the instructions are the same).
"""

from __future__ import annotations

import re

import pytest

from neutrino.engine import instrument
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probe_argument

from helpers import CORPUS, HAVE_PTXAS, ptxas
from test_aggregation import HIST_PROBE, KERNEL, SUM_PROBE, with_target

VADD = next(p for p in CORPUS if p.name == "vadd.sm90a.ptx")
WRITE = re.compile(r"^\s*(@!?(%[\w$]+)\s+)?(st|red|atom)\.global\S*\s+(.*);")
DEFINES = re.compile(r"^\s*(@!?%[\w$]+\s+)?((setp|and|or|not|mov|xor|selp)\.\S+)\s+(%[\w$]+)\s*,(.*);")


def gated_writes(ptx: str) -> list[str]:
    """The engine's global writes (they name %nt_ registers) whose guard the gate does not reach.

    A predicate is gated when an unguarded AND (`and.pred`, `setp.*.and`) that defines it reads
    `%nt_on` or a gated predicate; any other definition makes it ungated (straight-line code)."""
    gated = {"%nt_on"}
    bad = []
    for line in ptx.splitlines():
        m = WRITE.match(line)
        if m and "%nt_" in m.group(4):
            if m.group(2) not in gated or (m.group(1) or "").startswith("@!"):
                bad.append(line.strip())
        d = DEFINES.match(line)
        if d:
            opcode, dest, sources = d.group(2), d.group(4), re.findall(r"%[\w$]+", d.group(5))
            is_and = opcode == "and.pred" or ".and." in opcode
            if is_and and not d.group(1) and any(s in gated for s in sources):
                gated.add(dest)
            elif dest != "%nt_on":
                gated.discard(dest)
    return bad


@pytest.mark.parametrize("tool", ["block_sched", "gmem_bytes", "dmat", "tensorop", "program_progress"])
def test_every_inserted_write_of_a_tool_is_gated(tool):
    result = instrument(VADD.read_text(), load_probe_argument(tool, None), source=str(VADD))
    ptx = result.ptx
    assert re.search(r"(st|red)\.global", ptx)
    assert gated_writes(ptx) == []
    # the gate comes from the first buffer parameter only, once per entry (counting variant included)
    (info, *_) = result.kernels.values()
    first = next(p["name"] for p in info["params"] if p["role"] == "buffer")
    entries = len(re.findall(r"\.entry ", ptx))
    assert ptx.count("@%nt_gated ld.global.u32 \t%nt_gate, [") == entries
    assert ptx.count(f"ld.param.u64 \t%nt_buf_") >= entries and first in ptx
    if HAVE_PTXAS:
        ptxas(ptx, "sm_90a")


@pytest.mark.parametrize("target", ["sm_52", "sm_75", "sm_80", "sm_90"])
def test_aggregation_lowerings_are_gated_on_every_target(target):
    result = instrument(with_target(KERNEL, target), parse_probes(SUM_PROBE + HIST_PROBE, "p.toml"), source="k.ptx")
    assert result.ptx.count("red.global.add.u64") >= 4
    assert gated_writes(result.ptx) == []
    if HAVE_PTXAS:
        ptxas(result.ptx if target >= "sm_75" else with_target(result.ptx, "sm_75"), max(target, "sm_75"))


def test_an_ungated_write_is_caught():
    """The check itself: a write guarded by a predicate the gate does not reach is reported."""
    text = "\tsetp.ne.u64 \t%nt_agg_go, %nt_x, 0;\n\t@%nt_agg_go red.global.add.u64 \t[%nt_buf_m], %nt_x;\n"
    assert gated_writes(text) == ["@%nt_agg_go red.global.add.u64 \t[%nt_buf_m], %nt_x;"]
    text = "\tsetp.ne.and.u64 \t%nt_agg_go, %nt_x, 0, %nt_on;\n\t@%nt_agg_go red.global.add.u64 \t[%nt_buf_m], %nt_x;\n"
    assert gated_writes(text) == []
    assert gated_writes("\tst.global.u32 \t[%nt_cnt_m], %nt_cur_m;\n") == ["st.global.u32 \t[%nt_cnt_m], %nt_cur_m;"]
