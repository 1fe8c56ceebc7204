"""benchmarks/probe_cost.py's checks, on the CPU: block_sched's record check against synthetic buffers (the
layout of spec/kernel-json.md: u32 counts per warp, records from align16(4 * warps), 16 bytes each), and its
`--before` variants."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import probe_cost  # noqa: E402


class FakeCuda:
    """What block_sched_check calls: the buffer a launch leaves is `image`."""

    def __init__(self, image: bytes):
        self.image, self.calls = image, []

    def check(self, fn, *args):
        self.calls.append(fn)

    def launch(self, *args):
        self.calls.append("launch")

    def sync(self):
        pass

    def read(self, ptr, size):
        assert size == len(self.image)
        return self.image


def image(warps: int, counts=None, records=None) -> bytes:
    counts = counts if counts is not None else [1] * warps
    records = records if records is not None else [(1000 + i, 50, i // 4 % 132) for i in range(warps)]  # a block's 4 warps: one SM
    head = struct.pack(f"<{warps}I", *counts)
    head += bytes((-len(head)) % 16)
    return head + b"".join(struct.pack("<QII", *r) for r in records)


@pytest.mark.parametrize("grid", [1, 3, 256])
def test_complete_records_check(grid):
    warps = grid * probe_cost.THREADS // 32
    row = probe_cost.block_sched_check(FakeCuda(image(warps)), None, None, 0, grid)
    assert row["bytes"] == row["bytes_expected"] == 2 * warps


def test_a_missing_count_or_record_fails_the_check():
    warps = 8
    counts = [1] * warps
    counts[3] = 0
    assert probe_cost.block_sched_check(FakeCuda(image(warps, counts)), None, None, 0, 2)["bytes"] == 2 * warps - 1
    records = [(1000, 50, 1)] * warps
    records[5] = (0, 0, 0)  # a warp that never stored
    row = probe_cost.block_sched_check(FakeCuda(image(warps, records=records)), None, None, 0, 2)
    assert row["bytes"] == 2 * warps - 1 != row["bytes_expected"]


def test_the_before_variants_are_the_committed_ptx():
    folder = ROOT / "benchmarks" / "probe_cost_before"
    found = probe_cost.before_variants(folder)
    assert set(found) == {"block_sched (before)", "gmem_bytes (before)", "hist (before)"}
    ptx, kind = found["block_sched (before)"]
    assert kind == "block_sched" and ".entry vadd(" in ptx and "vadd__nt_buf_block_sched" in ptx


def test_the_wide_rows_variant_spreads_warps_over_128_rows_and_is_summed_over_them():
    ptx, buffer = probe_cost.variants()["gmem_bytes 128 rows"]
    assert f"and.b32 \t%nt_stripe, %nt_stripe, {probe_cost.WIDE_ROWS - 1};" in ptx
    assert probe_cost.rows_of(buffer) == probe_cost.WIDE_ROWS == 128
    # the tool's own sum map: as many rows as its stripe mask says (maps.SUM_STRIPES), all of them read and summed
    tool_ptx, tool_buffer = probe_cost.variants()["gmem_bytes"]
    rows = probe_cost.rows_of(tool_buffer)
    assert f"and.b32 \t%nt_stripe, %nt_stripe, {rows - 1};" in tool_ptx
    assert probe_cost.rows_of("gmem_bytes") == probe_cost.rows_of("gmem_bytes gated") == probe_cost.SUM_STRIPES
    one_row, _ = probe_cost.variants()["gmem_bytes one-row"]
    assert "and.b32 \t%nt_stripe, %nt_stripe, 0;" in one_row
