"""Every column of every report table: known answers on synthetic traces, and each one defined in
spec/tools.md ("Report columns")."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from neutrino.analysis import (block_sched, dmat, generic, gmem_bytes, program_progress, ranks, report, tensorop,
                               tool_for, tool_name, writer_tool)
from tests.test_analysis import U32, U64, block_sched_map, make_launch, make_map

SPEC = Path(__file__).resolve().parents[1] / "spec" / "tools.md"


def spec_columns() -> dict[str, tuple[set, set]]:
    """table -> (text columns, csv keys) of spec/tools.md's "Report columns"."""
    text = SPEC.read_text().split("## Report columns", 1)[1]
    out: dict[str, tuple[set, set]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("table", "---"):
            continue
        cols, keys = out.setdefault(cells[0], (set(), set()))
        cols.add(cells[1].strip("`"))
        keys.update(re.findall(r"`([a-z_]+)`", cells[2]))
    return out


def sum_map(name, totals: dict):
    md = make_map(name, "thread", [(f, U64) for f in totals], [[tuple(totals.values())]])
    md.type = "sum"
    md.totals = lambda: dict(totals)
    return md


def kernel_numbers(tool, launches):
    trace = SimpleNamespace(path="", probe_text="", events=[], launches=launches)
    rep = report.analyze(trace, launches)
    (entry,) = rep.kernels.values()
    name = tool_name(tool)
    results = entry.results[name]
    return tool.kernel_numbers(results), tool.kernel_summary(results), rep


def test_block_sched_columns():
    numbers, text, _ = kernel_numbers(block_sched, [make_launch(i, "k", [block_sched_map()], duration_ns=160.0)
                                                    for i in range(2)])
    assert numbers == {"blocks": 8, "sms": 2, "span": 320, "span_unit": "cycles", "busy_imbalance": 1.5,
                       "blocks_per_sm_cv": 0.5, "tail_fraction": 0.6875, "idle_gaps": 4, "idle_gap_max": 10,
                       "refill_mean": 10.0, "split_blocks": 0}
    assert text == {"blocks": "8", "SMs": "2", "span": "320 cycles", "busy max/mean": "1.5", "blocks/SM cv": "0.5",
                    "tail": "68.8%", "idle gaps": "4 (max 10 cycles)", "refill mean": "10 cycles"}


def test_gmem_bytes_columns_mix_both_forms():
    per_thread = make_map("gmem_bytes_thread", "thread", [("bytes", U64)], [[(10,)], [(0,)], [(30,)]])
    summed = sum_map("gmem_bytes", {"bytes": 100, "active_threads": 2})
    numbers, text, _ = kernel_numbers(gmem_bytes, [make_launch(0, "k", [per_thread], duration_ns=20.0),
                                                   make_launch(1, "k", [summed])])
    assert numbers == {"bytes": 140, "bytes_per_launch": 70.0, "active_threads": 4, "max_per_thread": 30,
                       "gb_per_s": 2.0}  # 40 bytes of the only timed launch in 20 ns
    assert text == {"bytes": "140", "bytes/launch": "70", "active threads": "4", "max/thread": "30", "GB/s": "2"}


def test_dmat_columns():
    md = make_map("dmat", "thread", [("clock", U64), ("addr", U64)],
                  [[(100, 0x1000), (104, 0x1004)], [(109, 0x9000)]])
    numbers, text, _ = kernel_numbers(dmat, [make_launch(0, "k", [md])])
    assert numbers == {"accesses": 3, "lines": 2, "regions": 2, "clock_span": 10, "span_ns": None}
    assert text == {"accesses": "3", "lines": "2", "regions": "2", "clock span": "10", "span (ns)": "-"}
    # a %globaltimer time field: the span is in ns (one clock for all SMs), not in the cycle column
    timed = make_map("dmat", "thread", [("gtime", U64), ("addr", U64)],
                     [[(5_000, 0x1000), (5_040, 0x1004)], [(5_900, 0x9000)]])
    numbers, text, _ = kernel_numbers(dmat, [make_launch(0, "k", [timed])])
    assert numbers["clock_span"] is None and numbers["span_ns"] == 901 and text["span (ns)"] == "901"


def test_tensorop_columns():
    counts = [[(3,)]] * 32 + [[(0,)]] * 8 + [[(1,)]] + [[(0,)]] * 23  # warp 0: 3 each; warp 1: one thread 1
    md = make_map("tensorop_thread", "thread", [("count", U64)], counts)
    numbers, text, _ = kernel_numbers(tensorop, [make_launch(0, "k", [md], duration_ns=4.0)])
    assert numbers == {"mma_threads": 97, "mma_warps": 4, "active_warps": 2, "warp_mma_per_us": 1000.0}
    assert text == {"mma (threads)": "97", "mma (warps)": "4", "active warps": "2", "warp mma/us": "1k"}


def test_program_progress_columns():
    warps = [[(100 + 10 * k, 16 * (k + 1)) for k in range(4)], [(500 + 20 * k, 16 * (k + 1)) for k in range(4)]]
    md = make_map("program_progress", "warp", [("clock", U64), ("branch", U32), ("cuid", U32)],
                  [[(c, b, 0) for c, b in w] for w in warps])
    numbers, text, _ = kernel_numbers(program_progress, [make_launch(0, "k", [md])])
    assert numbers == {"warps": 2, "samples": 8, "samples_per_warp_min": 4, "samples_per_warp_max": 4,
                       "progress_min": 64, "progress_max": 64, "median_span": 45.0, "max_span": 60,
                       "straggler": pytest.approx(60 / 45)}
    assert text["median span (cycles)"] == "45" and text["straggler"] == "1.33" and text["progress"] == "64..64"


def test_launch_table_and_generic_table_of_a_users_probe():
    traffic = sum_map("traffic", {"bytes": 7, "hits": 2})  # a field named bytes: not gmem_bytes
    samples = make_map("samples", "thread", [("value", U32), ("when", U64)], [[(5, 10), (9, 3)], [(1, 50), (2, 20), (3, 30)]],
                       cap=3, counts=[2, 4])
    launches = [make_launch(0, "k", [traffic, samples], duration_ns=1500.0),
                make_launch(1, "k", [sum_map("traffic", {"bytes": 3, "hits": 1})])]
    trace = SimpleNamespace(path="", probe_text="[probe.x]\n", events=[], launches=launches)
    rep = report.analyze(trace, launches)
    k = rep.kernels["k"]
    assert (k.launches, k.records, k.dropped, k.duration_ns, k.timed_launches) == (2, 1 + 5 + 1, 1, 1500.0, 1)  # a sum map is one record
    assert k.results == {}  # nothing guessed from field names
    row = report.kernel_rows(rep)[0]
    assert row["time_us"] == 1.5 and row["traffic.bytes"] == 10 and row["traffic.hits"] == 3
    assert (row["samples.records"], row["samples.value_min"], row["samples.value_max"]) == (5, 1, 9)
    assert (row["samples.when_min"], row["samples.when_max"]) == (3, 50)
    text = report.render(rep)
    assert "[map traffic (sum; the probe's own map: no built-in analysis)]" in text and "GB/s" not in text
    assert "[gmem_bytes]" not in text
    lines = text.splitlines()
    samples_row = lines[lines.index("[map samples (array; the probe's own map: no built-in analysis)]") + 3].split()
    assert samples_row == ["k", "1", "5", "1..9", "3..50"]  # one launch wrote it


def test_the_writer_tool_decides_the_analysis():
    builtin = SimpleNamespace(probe_text="# generated by neutrino.language from /x/neutrino/tools/gmem_bytes.py; "
                                         "do not edit\n", events=[])
    assert writer_tool(builtin) == "gmem_bytes"
    assert writer_tool(SimpleNamespace(probe_text="", events=[{"event": "start", "probe": "tensorop_thread"}])) \
        == "tensorop_thread"
    user = SimpleNamespace(probe_text="# generated by neutrino.language from /home/me/tools/gmem_bytes.py; do not "
                                      "edit\n", events=[{"event": "start", "probe": "/home/me/tools/gmem_bytes.py"}])
    assert writer_tool(user) is None  # not the built-in file
    bs = block_sched_map()
    assert tool_for(bs, "gmem_bytes") is None and tool_for(bs, "block_sched") is block_sched
    assert tool_for(bs, None) is block_sched  # a user's probe names its map after the tool
    assert tool_for(sum_map("traffic", {"bytes": 1}), None) is None


def test_ranks_combined_table():
    def rep(times):
        r = report.Report(trace_path="")
        for name, ns in times.items():
            r.kernels[name] = report.KernelEntry(name, launches=2, duration_ns=ns or 0.0, timed_launches=int(bool(ns)))
        return r

    text = ranks.combined_table([(0, rep({"a": 1000.0, "b": 500.0})), (1, rep({"a": 3000.0, "b": None}))])
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:]}
    assert text.splitlines()[0].split() == ["kernel", "launches", "rank", "0", "(us)", "rank", "1", "(us)", "max/min"]
    assert rows == {"a": ["4", "1.0", "3.0", "3.00"], "b": ["4", "0.5", "-", "-"]}


def test_every_printed_column_is_defined_in_the_spec():
    spec = spec_columns()
    samples = {
        block_sched: [make_launch(0, "k", [block_sched_map()], duration_ns=160.0)],
        gmem_bytes: [make_launch(0, "k", [make_map("gmem_bytes_thread", "thread", [("bytes", U64)], [[(1,)]])],
                                 duration_ns=1.0)],
        dmat: [make_launch(0, "k", [make_map("dmat", "thread", [("clock", U64), ("addr", U64)], [[(1, 2)]])])],
        tensorop: [make_launch(0, "k", [make_map("tensorop_thread", "thread", [("count", U64)], [[(1,)]])],
                               duration_ns=1.0)],
        program_progress: [make_launch(0, "k", [make_map("program_progress", "warp", [("clock", U64), ("branch", U32)],
                                                         [[(1, 16), (5, 32)]])])],
    }
    for tool, launches in samples.items():
        numbers, text, _ = kernel_numbers(tool, launches)
        name = tool_name(tool)
        cols, keys = spec[name]
        assert set(text) <= cols, (name, set(text) - cols)
        assert set(numbers) <= keys, (name, set(numbers) - keys)
    cols, keys = spec["launches"]
    assert {"launches", "maps", "records", "dropped", "time (us)"} <= cols
    assert {"launches", "maps", "records", "dropped", "time_us"} <= keys
    assert {"launches", "rank R (us)", "max/min"} <= spec["all ranks"][0]
    assert "split blocks" in spec["block_sched"][0]  # shown only when > 0
    assert generic.MapSummary("sum").columns() == {}
