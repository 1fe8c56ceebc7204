"""The ISA-neutral SAVE lowering and buffer addressing (passes/save_core.py) and the primitives each ISA supplies."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from neutrino.engine import instrument
from neutrino.isa.gcn import ir as gcn_ir
from neutrino.isa.gcn import parse_module as parse_gcn
from neutrino.isa.gcn.target import GCN
from neutrino.isa.interface import SavePrimitives
from neutrino.isa.rdna.target import RDNA
from neutrino.passes.buffers import _Prologue
from neutrino.passes.lower_save import _Lowerer
from neutrino.passes.neutral_ops import NeutralSteps
from neutrino.passes.save_core import address_maps, lower_exit_counts, lower_record, lower_sum, packed_offsets
from neutrino.probefile import parse_probes

DATA = Path(__file__).parent / "data"
SAVE_STEPS = {"saving_lanes", "end_saving", "below_cap", "record_address", "store_chunks", "store_fields", "end_below_cap",
              "bump_cursor", "counter_add", "store_count"}
ADDRESS_STEPS = {"map_base", "counters_address", "unit_index", "unit_slot"}
#: PTX's own steps: a sum's adds (warp aggregation); its array records and exit counts are NeutralSteps', translated
#: (isa/ptx/translate.py)
PTX_SAVE_STEPS = {"saving_lanes", "end_saving", "counter_add"}


def test_the_protocol_lists_every_step():
    declared = {n for n, v in vars(SavePrimitives).items() if inspect.isfunction(v) and not n.startswith("_")}
    assert declared == SAVE_STEPS | ADDRESS_STEPS


@pytest.mark.parametrize("cls, steps", [(_Lowerer, PTX_SAVE_STEPS), (NeutralSteps, SAVE_STEPS | ADDRESS_STEPS),
                                        (_Prologue, ADDRESS_STEPS)],
                         ids=lambda c: getattr(c, "__name__", ""))
def test_every_isa_supplies_the_steps(cls, steps):
    assert [s for s in sorted(steps) if not callable(getattr(cls, s, None))] == []


class Recorder:
    """Primitives that return their own name: what the neutral core asks for, in order."""

    def __getattr__(self, step):
        if step == "store_chunks":
            return lambda spec, count: [[0, 1], [2]][:count]
        if step == "unit_index":
            return lambda level: ((f"unit_{level}", "units"), [f"unit_index({level})"])
        return lambda *args, **kw: [step]


class Map:
    def __init__(self, name, type="array", level="thread", cap=4, record_bytes=16):
        self.name, self.type, self.level, self.cap, self.record_bytes = name, type, level, cap, record_bytes


def test_record_order_every_attempt_counted_after_the_stores():
    assert lower_record(Recorder(), Map("m"), ["a", "b", "c"], None) == [
        "saving_lanes", "below_cap", "record_address", "store_fields", "store_fields", "end_below_cap", "bump_cursor",
        "end_saving"]


def test_sum_exit_counts_and_entry_order():
    assert lower_sum(Recorder(), Map("s", "sum"), ["a", "b"], None) == ["saving_lanes", "counter_add", "counter_add", "end_saving"]
    maps = [Map("a"), Map("s", "sum"), Map("b", level="warp"), Map("c")]
    assert lower_exit_counts(Recorder(), maps) == ["saving_lanes", "store_count", "end_saving"] * 3
    # one unit index per level, computed before the first map of that level; sums get their counters
    assert address_maps(Recorder(), maps) == [
        "unit_index(thread)", "map_base", "unit_slot", "map_base", "counters_address", "unit_index(warp)", "map_base",
        "unit_slot", "map_base", "unit_slot"]


def test_packed_offsets():
    assert packed_offsets(("u32", "u64", "u32")) == [0, 4, 12]


RECORDS = """
[map.trace]
level = "{level}"
fields = ["a:u32", "b:u64"]
cap = 8

[probe.rec]
position = "global_load"
level = "{level}"
before = \"\"\"
.reg .s64 %t
s_mov_b64 %t, 7
SAVE [ trace ] {{BYTES, %t}}
\"\"\"
"""


def exec_writes(code: list) -> list[str]:
    return [f"{i.mnemonic} {', '.join(map(str, i.operands))}" for i in code
            if type(i) is gcn_ir.Instruction and i.operands and str(i.operands[0]).startswith("exec")]


@pytest.mark.parametrize("isa, path", [(GCN, DATA / "gcn" / "vadd.gfx90a.s"), (RDNA, DATA / "rdna" / "vadd.gfx1100.s")],
                         ids=["gcn", "rdna"])
@pytest.mark.parametrize("level", ["thread", "warp", "block"])
def test_gcn_record_leaves_exec_as_it_found_it(isa, path, level):
    """Each record narrows exec (leader, cap) and its last exec write restores the mask saved by its first."""
    probes = parse_probes(RECORDS.format(level=level), "r.toml", isa=isa.name)
    result = instrument(path.read_text(), probes, isa=isa)
    ours = [i for i in gcn_ir.instructions(parse_gcn(result.ptx).items) if i.mnemonic]
    saves = [k for k, i in enumerate(ours) if i.mnemonic.startswith("global_store") and "offset:8" in i.modifiers]
    assert saves, "the record's second field (u64) is stored at offset 8"
    start = max(k for k in range(saves[0]) if ours[k].mnemonic == "s_cselect_b32" and str(ours[k].operands[1]) == "1")
    scc = str(ours[start].operands[0])  # the site keeps SCC here and restores it at its end
    end = next(k for k in range(saves[0], len(ours)) if ours[k].mnemonic == "s_cmp_lg_u32" and str(ours[k].operands[0]) == scc)
    writes = exec_writes(ours[start:end])
    saving = next(i for i in ours[start:end]
                  if "saveexec" in i.mnemonic or (i.mnemonic.startswith("s_mov") and str(i.operands[1]).startswith("exec")))
    assert writes and writes[-1].endswith(str(saving.operands[0])), writes

