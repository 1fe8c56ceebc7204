"""benchmarks/probe_tail.py's variants of block_sched on vadd (issue 24): each is what its name says, ptxas takes
every one, and benchmarks/probe_cost.py's record check tells complete, consistent records from wrong ones."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from tests.helpers import HAVE_PTXAS, ptxas

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import probe_cost  # noqa: E402
import probe_tail  # noqa: E402


@pytest.fixture(scope="module")
def table():
    return probe_tail.variants()


def lines_of(ptx: str, needle: str) -> list[int]:
    return [i for i, line in enumerate(ptx.splitlines()) if needle in line]


def test_variants_differ_only_where_named(table):
    main, h1, h2 = (table[k][0] for k in ("main", "H1 one store", "H2 SM at entry"))
    sm_read, exit_clock = "%smid;", "mov.u64 \t%nt_p__d0, %clock64;"
    assert lines_of(main, sm_read)[0] > lines_of(main, exit_clock)[0]  # main: the SM read at exit
    assert lines_of(h2, sm_read)[0] < lines_of(h2, exit_clock)[0]  # H2: at entry
    assert main.count("st.global.b64") == 1 and "st.global.v4.b32 \t[%nt_ptr_block_sched]" not in main
    assert h1.count("@%nt_ok_block_sched st.global") == 1 and "st.global.v4.b32 \t[%nt_ptr_block_sched]" in h1
    body_store = lines_of(main, "st.global.v4.b32 [ %rd6")[0]
    counted = table["H2, H3 count at entry"][0]
    assert [i < body_store for i in lines_of(counted, "[%nt_cnt_block_sched]")] == [True]
    assert "[%nt_cnt_block_sched], 1;" in counted
    entry = table["H2, H4 start and SM stored at entry"][0]
    assert all(i < body_store for i in lines_of(entry, "[%nt_rec_block_sched"))
    assert "st.global.b64 \t[%nt_ptr_block_sched]" not in entry
    assert "[%nt_cnt_block_sched]" not in table["H1+H2 -counts"][0]
    gmem, ballot = table["gmem_bytes (main)"][0], table["gmem_bytes, H4 active by ballot"][0]
    assert gmem.count("redux.sync") == 6 and ballot.count("redux.sync") == 3 and "vote.sync.ballot.b32" in ballot
    assert ballot.count("red.global.add.u64 \t[%nt_buf_gmem_bytes+8]") == 1


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
def test_ptxas_takes_every_variant(table):
    for ptx, _, _ in table.values():
        ptxas(ptx)


class _Buffer:
    """What block_sched_check reads back from the device: a crafted buffer (its launch does nothing)."""

    def __init__(self, raw: bytes):
        self.raw = raw

    def check(self, *args):
        pass

    def launch(self, *args):
        pass

    def sync(self):
        pass

    def read(self, ptr, size):
        return self.raw[:size]


def records(grid: int, swap: bool = False, other_sm: int | None = None, count_of: int | None = None) -> bytes:
    warps = grid * probe_cost.THREADS // 32
    at = (4 * warps + 15) // 16 * 16
    raw = bytearray(at + 16 * warps)
    for w in range(warps):
        struct.pack_into("<I", raw, 4 * w, 0 if w == count_of else 1)
        start = 10**9 + 7 * w + 5000 * (w // 4)
        if swap:
            start = (start & 0xFFFFFFFF) << 32 | start >> 32
        struct.pack_into("<QII", raw, at + 16 * w, start, 3000 + w, 1 + (w == other_sm) + (w // 4) % 2)
    return bytes(raw)


@pytest.mark.parametrize("damage, good", [({}, 24), ({"swap": True}, 15), ({"other_sm": 5}, 23), ({"count_of": 3}, 23)])
def test_record_check_known_answers(damage, good):
    """3 blocks of 4 warps: 12 counts and 12 records when all is right; a u64's words swapped spoils all records but
    each block's median one, one warp on another SM than its block's is one record, a missing count is one."""
    row = probe_cost.block_sched_check(_Buffer(records(3, **damage)), None, None, 0, 3)
    assert (row["bytes"], row["bytes_expected"]) == (good, 24)
