"""save_constants.constant_save_values reads only the probe code before each SAVE when the SAVE
lowering passes its SAVEs and their indices (a speed-up, issue 25); it must find what the whole-body scan finds.

Both readings are compared on every kernel of the corpus under the probes that save known values
(gmem_bytes: BYTES immediates; the tests' aggregation probes: constants, guards, registers).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from neutrino.engine import instrument
from neutrino.errors import NeutrinoError
from neutrino.isa.ptx import ir
from neutrino.passes import lower_save, save_constants
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probes

from test_uniform_saves import CONSTANT_PROBES

DATA = Path(__file__).parent / "data"
CORPUS = sorted((DATA / "corpus").glob("*/*.ptx")) + sorted((DATA / "lines").glob("*.ptx"))


def _probe_files():
    """(name, probe file, whether some of its SAVEs save known values on the corpus)."""
    yield "gmem_bytes", load_probes("gmem_bytes"), False
    yield "constants", parse_probes(CONSTANT_PROBES), True
    for name in ("agg_compact.toml", "agg_explicit.toml"):
        yield name, load_probes(str(DATA / "probes" / name)), True


@pytest.mark.parametrize("probe_name,probes,saves_known", list(_probe_files()), ids=[c[0] for c in _probe_files()])
def test_stretch_scan_finds_what_the_body_scan_finds(monkeypatch, probe_name, probes, saves_known):
    compared = {"saves": 0, "known": 0}
    differing: list[str] = []  # recorded, not asserted inside: the pass manager turns an exception into a refusal

    def both(body, types, saves_at=None):
        whole = save_constants.constant_save_values(body, types)
        flat = [(i, s) for i, s in enumerate(body) if type(s) is ir.Instruction and s.opcode.base == "SAVE"
                and (s.origin or "").startswith("probe ")]
        if any(type(s) is ir.Scope for s in body):
            if saves_at is not None:
                differing.append("SAVE indices passed for a body with nested scopes")
        elif saves_at != flat:
            differing.append("the SAVE lowering did not pass every probe SAVE with its index, in body order")
        elif save_constants.constant_save_values(body, types, saves_at) != whole:
            differing.append(f"{len(flat)} SAVEs: the stretch scan differs from the body scan")
        compared["saves"] += len(flat)
        compared["known"] += len(whole)
        return whole

    monkeypatch.setattr(lower_save, "constant_save_values", both)
    for path in CORPUS:
        try:
            instrument(path.read_text(), probes, source=str(path))
        except NeutrinoError:
            continue  # a refusal (e.g. a target too old for the probe) reads nothing
    assert differing == []
    assert compared["saves"] > 0, compared
    assert compared["known"] > 0 or not saves_known, compared  # the comparison saw known values


def test_stretch_rule_on_a_hand_made_body():
    """Stretches end at kernel instructions and at a change of origin; a later write or a write of the guard forgets."""
    def insn(text_opcode, *operands, origin="probe p#1", guard=None):
        return ir.Instruction(ir.opcode(text_opcode), tuple(operands), guard, 0, origin)

    reg, imm = ir.Register, ir.Immediate
    p = ir.Guard(reg("%p"))
    body = [
        insn("mov.u64", reg("%a"), imm("4")),
        insn("SAVE", ir.Vector((reg("%a"),))),                      # 4
        insn("SAVE", ir.Vector((reg("%a"), imm("2")))),             # 4, 2: the stretch goes on past a SAVE
        insn("add.u64", reg("%x"), reg("%x"), imm("1"), origin=None),  # the kernel's own: the stretch ends
        insn("SAVE", ir.Vector((reg("%a"),))),                      # unknown
        insn("mov.u64", reg("%b"), imm("7"), guard=p),
        insn("SAVE", ir.Vector((reg("%b"),)), guard=p),             # 7: written under the SAVE's own guard
        insn("SAVE", ir.Vector((reg("%b"),))),                      # unknown: the SAVE saves where %p is false too
        insn("setp.eq.u32", reg("%p"), reg("%x"), imm("0")),
        insn("SAVE", ir.Vector((reg("%b"),)), guard=p),             # unknown: its guard was written since
        insn("mov.u64", reg("%c"), imm("9"), origin="probe p#2"),
        insn("SAVE", ir.Vector((reg("%c"), reg("%b"))), origin="probe p#2"),  # 9, and %b of another site: unknown
        insn("mov.u64", reg("%c"), imm("0x10"), origin="probe p#2"),
        insn("SAVE", ir.Vector((reg("%c"), imm("3"))), origin="probe p#2"),   # 16, 3
    ]
    saves = [s for s in body if s.opcode.base == "SAVE" and s.origin]
    types = {"%a": "u64", "%b": "u64", "%c": "u64"}
    whole = save_constants.constant_save_values(body, types)
    saves_at = [(i, s) for i, s in enumerate(body) if s.opcode.base == "SAVE" and s.origin]
    assert save_constants.constant_save_values(body, types, saves_at) == whole
    assert [whole.get(id(s)) for s in saves] == [(4,), (4, 2), None, (7,), None, None, (9, None), (16, 3)]
