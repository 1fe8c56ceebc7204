"""What block_sched's code at a warp's exit costs a tiny kernel, variant by variant (issue 24).

    python benchmarks/probe_tail.py --sass                      # this machine: ptxas + nvdisasm, no GPU
    python benchmarks/probe_tail.py [--grid 256] [--rounds 5]   # the GPU machine (benchmarks/probe_tail_gpu.sh)

In a tiny kernel the kernel ends when its last warp's stores are done, so what the probe adds to a
warp's exit path lengthens the kernel directly, while what it adds at entry overlaps the body's loads.
Triton's vadd (benchmarks/probe_cost.py's kernel) instrumented with block_sched as:

* `main`: main's engine and probe (the SM id read at exit; record: st.global.b64 + st.global.v2.b32);
* `H1 one store`: the engine's `mixed_stores` option: the 16-byte record in one st.global.v4.b32;
* `H2 SM at entry`: neutrino/tools/block_sched/probe.py now reads %smid with the start clock;
* `H1+H2`: both;
* `H4 start (and SM) stored at entry` (ablations on H2, text edits of the engine's output: the fields
  known at entry stored there, so the exit stores only elapsed (and SM) and the count; the engine does
  not do this: it would need to know which fields are final at entry);
* `H3 count at entry` (an ablation, not a candidate: the count 1 stored at entry, before the body; a
  warp that never reached its exit would then look complete) and `-counts` (no count store at all:
  the most any rework of the count can save), each on H1+H2;
* `H5 gate at exit`: the engine's `late_gate` option (the probe gate's predicate set again before the exit's
  probe code, so ptxas waits for the gate's load there instead of before the body's loads);
* `, tagged`: the buffer pointer tagged with the gate open (0), as a CUDA graph's probed replay passes it: the
  gate's load then runs (untagged, as eager launches pass it, it is predicated off);
* gmem_bytes as main instruments it, and with its active_threads (0 or 1 per thread) summed over the warp by
  vote.ballot + popc instead of three redux.sync (an ablation: that sum sits on the exit path); both checked
  exactly (12 bytes per element, every thread active).

Every block_sched variant's records are checked (benchmarks/probe_cost.py `block_sched_check`: each
warp's count is 1 and its record filled), `--sass` prints each variant's registers, SASS instructions
added and the instructions from the exit's clock read (gmem_bytes: from after the body's last store) to the end:
the exit path of a warp.
Timing: benchmarks/probe_cost.py's (GPU alone, CUDA-event medians per eager launch and per replay of a
graph of 8), all variants interleaved in each round, medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from neutrino.engine import instrument  # noqa: E402
from neutrino.toolbox import load_probe_argument  # noqa: E402

MAIN_PROBE = REPO / "benchmarks" / "probe_tail" / "block_sched_sm_at_exit.py"  # main's block_sched probe
COUNT_STORE = "\t@%nt_count_go st.global.u32 \t[%nt_cnt_block_sched], %nt_cur_block_sched;\n"
COUNT_PRED = "\tand.pred \t%nt_count_go, %nt_lead_warp, %nt_on;\n"
ENTRY_ANCHOR = re.compile(r"\tmad\.lo\.u64 \t%nt_cnt_block_sched, [^\n]*\n")


def count_at_entry(ptx: str) -> str:
    """The count store moved to entry, storing 1 (block_sched's cap = 1, its one SAVE on every path)."""
    if ptx.count(COUNT_STORE) != 1 or ptx.count(COUNT_PRED) != 1:
        raise SystemExit("probe_tail: block_sched's count store not found as expected")
    ptx = ptx.replace(COUNT_STORE, "").replace(COUNT_PRED, "")
    entry = COUNT_PRED + "\t@%nt_count_go st.global.u32 \t[%nt_cnt_block_sched], 1;\n"
    return ENTRY_ANCHOR.sub(lambda m: m.group(0) + entry, ptx, count=1)


START_STORE = "\t@%nt_ok_block_sched st.global.b64 \t[%nt_ptr_block_sched], %nt_f0_block_sched;\n"
TAIL_STORE = ("\t@%nt_ok_block_sched st.global.v2.b32 \t[%nt_ptr_block_sched+8], "
              "{%nt_f1_block_sched, %nt_f2_block_sched};\n")
SM_READ = "\tmov.u32 \t%nt_p_sm, %smid;\n"


def fields_at_entry(ptx: str, sm_too: bool) -> str:
    """The record's start (and, with `sm_too`, its SM) stored at entry, by the lanes that store it at exit (the
    leader, gate on; the cursor is 0 there): the exit stores only what it computes. The count, still stored at
    exit, keeps a warp that never gets there from looking complete (readers take min(count, cap) records)."""
    for part in (START_STORE, TAIL_STORE, SM_READ):
        if ptx.count(part) != 1:
            raise SystemExit(f"probe_tail: {part.strip()!r} not found once")
    entry = ("\tand.pred \t%nt_ok_block_sched, %nt_lead_warp, %nt_on;\n"
             "\t@%nt_ok_block_sched st.global.b64 \t[%nt_rec_block_sched], %nt_p_start;\n")
    tail = TAIL_STORE
    if sm_too:
        entry += "\t@%nt_ok_block_sched st.global.u32 \t[%nt_rec_block_sched+12], %nt_p_sm;\n"
        tail = "\t@%nt_ok_block_sched st.global.u32 \t[%nt_ptr_block_sched+8], %nt_f1_block_sched;\n"
    return ptx.replace(START_STORE, "").replace(TAIL_STORE, tail).replace(SM_READ, SM_READ + entry)


ACTIVE_SUM = re.compile(r"\tmov\.b64 \t\{%nt_agg_lo, %nt_agg_hi\}, %nt_f1_gmem_bytes;\n(?:.*\n)*?"
                        r"(?=\tsetp\.ne\.and\.u64 \t%nt_agg_go, %nt_agg_total, 0, %nt_on;\n\tand\.pred [^\n]*\n"
                        r"\t@%nt_agg_go red\.global\.add\.u64 \t\[%nt_buf_gmem_bytes\+8\])")
BALLOT = ("\tsetp.ne.u64 \t%nt_p__p0, %nt_f1_gmem_bytes, 0;\n\tvote.sync.ballot.b32 \t%nt_agg_a, %nt_p__p0, %nt_agg_mask;\n"
          "\tpopc.b32 \t%nt_agg_a, %nt_agg_a;\n\tcvt.u64.u32 \t%nt_agg_total, %nt_agg_a;\n")


def active_by_ballot(ptx: str) -> str:
    """gmem_bytes' active_threads (0 or 1 per thread) summed over the warp by a ballot and popc instead of three
    redux.sync of its 16 + 16 + 32 bits (an ablation: the engine does not know a value is 0 or 1)."""
    out, n = ACTIVE_SUM.subn(BALLOT, ptx, count=1)
    if n != 1:
        raise SystemExit("probe_tail: gmem_bytes' active_threads sum not found as expected")
    return out


def no_counts(ptx: str) -> str:
    if ptx.count(COUNT_STORE) != 1:
        raise SystemExit("probe_tail: block_sched's count store not found as expected")
    return ptx.replace(COUNT_STORE, "")


def variants() -> dict[str, tuple[str, str | None, bool]]:
    """name -> (PTX, buffer kind as benchmarks/probe_cost.py names it, whether its results are checked)."""
    from probe_cost import VADD  # noqa: PLC0415

    plain = VADD.read_text()
    old, new = load_probe_argument(str(MAIN_PROBE), None), load_probe_argument("block_sched", None)
    both = instrument(plain, new, mixed_stores=True).ptx
    h2 = instrument(plain, new).ptx
    h5 = instrument(plain, new, late_gate=True).ptx
    gmem_probes = load_probe_argument("gmem_bytes", None)
    gmem, gmem_h5 = instrument(plain, gmem_probes).ptx, instrument(plain, gmem_probes, late_gate=True).ptx
    main = instrument(plain, old).ptx
    return {
        "plain": (plain, None, False),
        "main": (main, "block_sched", True),
        "H1 one store": (instrument(plain, old, mixed_stores=True).ptx, "block_sched", True),
        "H2 SM at entry": (h2, "block_sched", True),
        "H2, H4 start stored at entry": (fields_at_entry(h2, False), "block_sched", True),
        "H2, H4 start and SM stored at entry": (fields_at_entry(h2, True), "block_sched", True),
        "H1+H2": (both, "block_sched", True),
        "H2, H3 count at entry": (count_at_entry(h2), "block_sched", True),
        "H1+H2, H3 count at entry": (count_at_entry(both), "block_sched", True),
        "H1+H2 -counts": (no_counts(both), "block_sched", False),
        "H2, H5 gate at exit": (h5, "block_sched", True),
        "main, tagged": (main, "block_sched tagged", True),
        "H2, tagged": (h2, "block_sched tagged", True),
        "H2, H5 gate at exit, tagged": (h5, "block_sched tagged", True),
        "gmem_bytes (main)": (gmem, "gmem_bytes", True),
        "gmem_bytes, H4 active by ballot": (active_by_ballot(gmem), "gmem_bytes", True),
        "gmem_bytes, H5 gate at exit": (gmem_h5, "gmem_bytes", True),
        "gmem_bytes (main), tagged": (gmem, "gmem_bytes tagged", True),
        "gmem_bytes, H5 gate at exit, tagged": (gmem_h5, "gmem_bytes tagged", True),
    }


def exit_path(ops: list[str]) -> int:
    """SASS instructions from the last clock read (block_sched's exit probe) to the end; without one (gmem_bytes),
    after vadd's last store of its own (the kernel's last 128-bit store)."""
    last = max((i for i, op in enumerate(ops) if op.startswith(("S2UR", "CS2R", "S2R")) and "CLOCK" in op), default=None)
    if last is None:
        last = max((i + 1 for i, op in enumerate(ops) if op.startswith("STG.E.128")), default=len(ops))
    return len(ops) - last


_GATE_LOAD = re.compile(r"LDG\.E (R\d+), [^;]*-0x8\]")


def gate_wait_first(lines: list[str]) -> bool:
    """Whether the first instruction reading the gate's load comes before the body's first 128-bit load: a tagged
    launch's warps then wait for the gate before they load their data."""
    load = next(((i, m.group(1)) for i, line in enumerate(lines) if (m := _GATE_LOAD.search(line))), None)
    body = next((i for i, line in enumerate(lines) if "LDG.E.128" in line), None)
    if load is None or body is None:
        return False
    reg = re.compile(rf"\b{load[1]}\b")
    use = next((i for i, line in enumerate(lines) if i > load[0] and reg.search(line.split(";")[0].split(",", 1)[-1])),
               None)
    return use is not None and use < body


def sass_table() -> None:
    import subprocess  # noqa: PLC0415

    from graph_probe_sass import _SASS_LINE, disassembler  # noqa: PLC0415

    print("| variant | registers | SASS (no NOPs) | added | exit path | global stores | gate waited before body loads |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    base = None
    with tempfile.TemporaryDirectory() as td:
        for name, (ptx, _, _) in variants().items():
            src, cubin = Path(td) / "k.ptx", Path(td) / "k.cubin"
            src.write_text(ptx)
            r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(src), "-o", str(cubin)], capture_output=True, text=True)
            if r.returncode:
                raise SystemExit(f"probe_tail: ptxas refused {name}: {r.stderr[-300:]}")
            regs = int(re.search(r"Used (\d+) registers", r.stderr).group(1))
            sass = subprocess.run([*disassembler(), str(cubin)], capture_output=True, text=True, check=True).stdout
            ops, listing = [], [line for line in sass.splitlines() if _SASS_LINE.search(line)]
            for line in sass.splitlines():
                m = _SASS_LINE.search(line)
                if m and m.group(1) != "NOP":
                    ops.append(m.group(1) + (" CLOCK" if "CLOCK" in line else ""))
            while ops and ops[-1] == "BRA":  # the self-branch after EXIT
                ops.pop()
            base = base if base is not None else len(ops)
            stores = sum(1 for op in ops if op.startswith(("STG", "RED")))
            wait = "yes" if gate_wait_first(listing) else "no"
            print(f"| {name} | {regs} | {len(ops)} | {len(ops) - base} | {exit_path(ops)} | {stores} | {wait} |")


def reference(name: str) -> str:
    """The main-engine row a variant is compared with: its tool's, with the same pointer (tagged or not)."""
    base = "gmem_bytes (main)" if name.startswith("gmem_bytes") else "main"
    return base + (", tagged" if name.endswith(", tagged") else "")


def timed(args) -> None:
    import probe_cost  # noqa: PLC0415

    cuda = probe_cost.Cuda()
    table = variants()
    rows: dict[str, list[dict]] = {name: [] for name in table}
    for _ in range(args.rounds):
        for name, (ptx, buffer, exact) in table.items():
            rows[name].append(probe_cost.measure(cuda, name, ptx, buffer, args, exact=exact if buffer else None))
    print(f"device: {cuda.name}; vadd, grid {args.grid} x {probe_cost.THREADS} threads; medians of {args.rounds} "
          f"interleaved rounds ({args.launches} launches, {args.replays} replays of a graph of 8 each)")
    print("| variant | regs | eager µs/launch | vs plain | vs its main | graph of 8, µs/replay | vs plain | vs its main "
          "| round spread (graph) | check |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    out, bad = [], 0
    med = {name: (statistics.median(r["eager_us"] for r in rs), statistics.median(r["graph8_us"] for r in rs))
           for name, rs in rows.items()}
    for name, rs in rows.items():
        eager, graph = med[name]
        main_e, main_g = med[reference(name)]
        plain_e, plain_g = med["plain"]
        check = ""
        r = rs[0]
        if r.get("bytes_expected") is not None:
            active = args.grid * probe_cost.THREADS if "label" not in r else 0  # gmem_bytes: every thread moves bytes
            ok = all(x["bytes"] == x["bytes_expected"] and x["active_threads"] == active for x in rs)
            bad += not ok
            check = f"{r.get('label', 'bytes')}={r['bytes']} " + ("ok" if ok else f"WRONG (want {r['bytes_expected']})")
        spread = f"{min(x['graph8_us'] for x in rs):.2f}–{max(x['graph8_us'] for x in rs):.2f}"
        print(f"| {name} | {r['registers']} | {eager:.2f} | {eager - plain_e:+.2f} | {eager - main_e:+.2f} | {graph:.2f} "
              f"| {graph / plain_g:.3f}x | {graph - main_g:+.2f} | {spread} | {check} |", flush=True)
        out.append({"variant": name, "eager_us": eager, "graph8_us": graph, "rounds": rs})
    if args.json:
        Path(args.json).write_text(json.dumps({"device": cuda.name, "grid": args.grid, "rows": out}, indent=1))
    if bad:
        raise SystemExit(f"probe_tail: {bad} variant(s) with wrong results")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sass", action="store_true", help="SASS counts on this machine (ptxas, nvdisasm); no GPU")
    ap.add_argument("--grid", type=int, default=256)
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.sass:
        sass_table()
    else:
        timed(args)


if __name__ == "__main__":
    main()
