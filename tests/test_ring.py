"""The device ring of count-sized maps (passes/ring.py; spec/kernel-json.md, "Ring of a count-sized map";
spec/trace-format.md): its section layout read back as per-unit records, its sizing rules, and the
PTX that reserves and commits (assembled by ptxas)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import neutrino.trace as nt
from neutrino.engine import instrument
from neutrino.maps import MapSection
from neutrino.toolbox import load_probe_argument

from helpers import CORPUS, HAVE_PTXAS, ptxas

DMAT = {"name": "dmat", "type": "array", "level": "thread", "record_bytes": 16, "cap": "count", "layout": "ring",
        "fields": [{"name": "gtime", "type": "u64", "offset": 0}, {"name": "addr", "type": "u64", "offset": 8}]}


def ring_buffer(slots: int, reservations: list[int]) -> bytearray:
    """A ring as the device leaves it: each reservation (its unit) takes the next slot; past `slots`
    only the head moves. Record of the k-th reservation of unit u: (u, k)."""
    buf = bytearray(nt.ring_bytes(slots, 16))
    tags = np.frombuffer(buf, "<u4", count=slots, offset=nt.RING_HEADER)
    recs = np.frombuffer(buf, "<u8", count=2 * slots, offset=nt.ring_records_offset(slots)).reshape(slots, 2)
    seen: dict[int, int] = {}
    for slot, unit in enumerate(reservations):
        if slot < slots:
            tags[slot] = unit
            recs[slot] = (unit, seen.get(unit, 0))
        seen[unit] = seen.get(unit, 0) + 1
    np.frombuffer(buf, "<u8", count=1)[0] = len(reservations)
    return buf


def read_back(tmp_path, units: int, slots: int, data) -> nt.MapData:
    section = MapSection.of(DMAT, units, slots, data)
    path = nt.write_result(tmp_path / "r.ntr", grid=(1, 1, 1), block=(units, 1, 1), shared_bytes=0, maps=[section])
    return nt.read_result(path).maps["dmat"]


@pytest.mark.parametrize("slots", [64, 10, 0])
def test_a_ring_reads_back_as_each_units_records_in_order(tmp_path, slots):
    """Interleaved reservations come back grouped by unit, in each unit's order; a ring too small
    keeps the first `slots` reservations and counts the rest (head - slots) as dropped."""
    reservations = [0, 3, 3, 1, 0, 3, 2, 0, 3, 1, 3, 3]
    m = read_back(tmp_path, 4, slots, ring_buffer(slots, reservations))
    kept = reservations[:slots]
    assert m.dropped == len(reservations) - len(kept) and m.record_stats() == (len(kept), m.dropped)
    assert list(m.counts) == [kept.count(u) for u in range(4)]
    v = m.valid()
    assert list(v["unit"]) == sorted(kept)
    assert list(v["gtime"]) == list(v["unit"]) and list(v["addr"]) == [k for u in range(4) for k in range(kept.count(u))]
    assert m.cap == max((kept.count(u) for u in range(4)), default=0)


def test_a_ring_slot_naming_no_unit_of_the_launch_is_refused(tmp_path):
    data = ring_buffer(8, [0, 1, 5])
    with pytest.raises(nt.TraceError, match="names unit 5 of 4: corrupt file"):
        read_back(tmp_path, 4, 8, data)


def test_section_sizes_and_the_map_header_word():
    section = MapSection.of(DMAT, 4, 10, ring_buffer(10, [0, 1] * 8))
    assert section.size == nt.ring_bytes(10, 16) == nt.align(16 + 40, 16) + 160
    assert section.ring and section.header_cap_word == nt.RING_SECTION and section.dropped == 6
    assert nt.map_buffer_bytes(DMAT, (2, 1, 1), (32, 1, 1), 100) == (64, nt.ring_bytes(100, 16))


def test_ring_sizing_rules():
    assert nt.ring_slots(1000, 16, 8, 1 << 30) == 8000
    assert nt.ring_slots(1000, 16, 8, 4096) == nt.ring_slot_limit(16, 4096) == (4096 - 32) // 20
    assert nt.ring_slots(0, 16, 8, 1 << 30) == 1
    assert nt.learned_slots_per_unit(800, 100) == 8 + 2 + 1  # a quarter more, and one
    assert nt.learned_slots_per_unit(801, 100) == 9 + 2 + 1
    assert nt.learned_slots_per_unit(0, 100) == 1


VADD = next(p for p in CORPUS if p.name == "vadd.sm90a.ptx")


def test_dmat_reserves_once_per_warp_and_commits_under_the_gate():
    """One atomic on the head per SAVE, by the lowest saving lane, for the warp's saving lanes; the
    records and tags stored only where the slot is below cap and the gate and guard hold."""
    result = instrument(VADD.read_text(), load_probe_argument("dmat", None), source=str(VADD))
    ptx = result.ptx
    (info,) = result.kernels.values()
    assert info["maps"][0]["layout"] == "ring"
    saves = len(re.findall(r"vote\.sync\.ballot\.b32", ptx))
    assert saves >= 2
    assert len(re.findall(r"@%nt_ring_lead atom\.global\.add\.u64\s+%nt_ring_slot, \[%nt_buf_dmat\]", ptx)) == saves
    assert len(re.findall(r"@%nt_ok_dmat st\.global\.v2\.b64", ptx)) == saves
    assert len(re.findall(r"@%nt_ok_dmat st\.global\.u32\s+\[%nt_ring_tag_ptr\], %nt_runit_dmat", ptx)) == saves
    assert "[%nt_cnt_dmat]" not in ptx.split(".entry vadd__nt_count")[0]  # no per-unit counts in the real kernel
    if HAVE_PTXAS:
        ptxas(ptx)


def test_without_warp_operations_each_lane_reserves(monkeypatch):
    """A target without activemask/shfl (passes/lower_save.WARP_SM): one atomic per saving lane."""
    from neutrino.passes import lower_save

    monkeypatch.setattr(lower_save, "WARP_SM", 1000)
    lower_save._lowered_group.cache_clear()
    try:
        ptx = instrument(VADD.read_text(), load_probe_argument("dmat", None), source=str(VADD)).ptx
    finally:
        lower_save._lowered_group.cache_clear()
    assert "vote.sync" not in ptx.split(".entry vadd__nt_count")[0]
    assert re.search(r"@%nt_ring_go atom\.global\.add\.u64\s+%nt_ring_slot, \[%nt_buf_dmat\], 1;", ptx)
    if HAVE_PTXAS:
        ptxas(ptx)


def test_the_launchers_default_is_the_layouts():
    from neutrino.runtime.start import options

    assert options.RING_RECORDS_PER_UNIT == nt.RING_RECORDS_PER_UNIT
    assert options.RuntimeOptions(probe="p.toml").ring_records == nt.RING_RECORDS_PER_UNIT


def test_a_ring_whose_units_are_not_its_launchs_is_refused(tmp_path):
    """A ring's units are not bounded by its section's size: they must be the launch's (a corrupt
    header could otherwise make a reader allocate per-unit arrays of any size)."""
    section = MapSection.of(DMAT, 1 << 30, 4, ring_buffer(4, [0, 1]))
    path = nt.write_result(tmp_path / "r.ntr", grid=(1, 1, 1), block=(4, 1, 1), shared_bytes=0, maps=[section])
    with pytest.raises(nt.TraceError, match=r"a ring of 1073741824 units in a launch of 4: corrupt file"):
        nt.read_result(path)
