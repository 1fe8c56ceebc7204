"""Where a probe's GPU time goes in a tiny kernel (run on the GPU machine; no torch needed).

    python benchmarks/probe_cost.py [--launches 200] [--replays 200] [--grid 256] [--json OUT.json]

The kernel is Triton's vector add from the corpus (tests/data/corpus/triton/vadd.sm90a.ptx:
4 warps per block, 1,024 fp32 elements per block; 256 blocks take ~2 µs on an H100, the
issue-24 workload). It is instrumented here with the engine and loaded with the driver API
(ctypes), so every variant runs the same kernel through the same launch path:

* plain, `+param` (an unused u64 parameter appended: what the extra parameter costs),
* block_sched, and block_sched without the probe's global stores (`-stores`; ptxas then drops
  the probe's arithmetic too) or without the count stores at exit (`-counts`),
* gmem_bytes, without its global atomics (`-atomics`: an upper bound of what aggregating
  beyond the warp can save; ptxas drops the reductions with them), with plain stores where the
  atomics were (`st-not-red`: the atomics' own cost), without the warp reductions (`-redux`), with all warps adding
  into one row of counters instead of 32 (`one-row`: what the striping buys) or into 128 (`128 rows`: what more
  rows would buy; the counters summed over all 128),
* block_sched and gmem_bytes with the gate's code removed (`no gate`: what it costs a launch
  outside graphs, whose pointer is untagged),
* block_sched and gmem_bytes with the probe gate off (`gated`: the pointer tagged, the gate
  set, as in a CUDA graph replay that `--launches` leaves out),
* gmem_bytes lowered as for older targets: a shuffle butterfly (sm_75) or one atomic per lane
  (sm_2x: what the warp reduction saves), and a hist map whose bucket differs across the warp
  (8 groups per warp access), grouped with match.any.sync or one atomic per lane (sm_6x).

`--before DIR` adds the same tools as an older engine instrumented vadd (`DIR/block_sched.ptx`,
`gmem_bytes.ptx`, `hist.ptx`, written by that engine: benchmarks/probe_cost_before/ holds main at 30a0ca5,
before session 9's smaller warp-level code), as variants `NAME (before)`, timed in the same process.
`--only A,B` keeps those variants (and plain, the baseline).

Measures, GPU alone (a spin kernel holds the GPU while the host enqueues everything, so the
times are the GPU's): per-launch CUDA-event medians of eager launches (an event between every
two launches), and per-replay medians of a captured graph of 8 launches. Also registers per
thread and resident blocks per SM of each variant, and checks the gmem_bytes totals (exact:
12 bytes per element) with the gate on and zero with it off, the hist's samples (6 per thread), and
block_sched's records (one per warp: every count 1, every record's start and SM set, elapsed above 0).
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neutrino.engine import instrument  # noqa: E402
from neutrino.toolbox import load_probe_argument  # noqa: E402
from neutrino.maps import SUM_STRIPES  # noqa: E402
from neutrino.trace import STRIPES  # noqa: E402

VADD = REPO / "tests" / "data" / "corpus" / "triton" / "vadd.sm90a.ptx"
if not VADD.is_file():  # a tree shipped without tests/data: the same kernel, kept beside the older engine's output
    VADD = REPO / "benchmarks" / "probe_cost_before" / "vadd.sm90a.ptx"
WIDE_ROWS = 128  # `gmem_bytes 128 rows`: a row per SM on a GPU of up to 128 SMs (4 per row on an H200 at 32)
BLOCK_ELEMENTS, THREADS = 1024, 128
HEAD = 256  # bytes before a gated buffer (runtime/graph_ring.HEAD_BYTES); the gate is its last u32 but one

SPIN_PTX = """.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 ns)
{
    .reg .b64 %rd<4>;
    .reg .pred %p1;
    ld.param.u64 %rd1, [ns];
    mov.u64 %rd2, %globaltimer;
    add.u64 %rd1, %rd1, %rd2;
SPIN:
    mov.u64 %rd3, %globaltimer;
    setp.lt.u64 %p1, %rd3, %rd1;
    @%p1 bra SPIN;
    ret;
}
"""


def _drop(ptx: str, pattern: str) -> str:
    """The probed PTX without the engine's lines matching `pattern` (an ablation, not a tool)."""
    rx = re.compile(pattern)
    return "\n".join(line for line in ptx.splitlines() if not (rx.search(line) and "%nt_" in line)) + "\n"


# A hist map whose bucket differs across a warp: the low 12 bits of each access's address in
# buckets of 64 bytes, so 4 lanes (16 bytes each) share a bucket: 8 groups per warp access.
HIST_PROBE = """
[map.addr_hist]
type = "hist"
buckets = "linear:0:4096:64"

[probe.where]
position = "ld.global:st.global"
before = \"\"\".reg .b64 %low; and.b64 %low, ADDR, 4095; SAVE [ addr_hist ] {%low};\"\"\"
"""
HIST_ROW = 640  # 66 buckets x 8 bytes, rows 128-byte aligned
SAMPLES_PER_THREAD = 6  # vadd: 4 loads and 2 stores of 16 bytes per thread


def lowered_for(ptx: str, target: str, probes) -> str:
    """Instrumented as if the module targeted `target` (the lowering picks its warp operations by
    target), then put back on sm_90a: an older lowering's code, timed on this GPU."""
    out = instrument(ptx.replace(".target sm_90a", f".target {target}", 1), probes).ptx
    raised = re.search(r"\.target (\S+)", out).group(1)
    return out.replace(f".target {raised}", ".target sm_90a", 1)


def ungated(ptx: str) -> str:
    """The probed PTX with the probe gate constant (open): what the gate costs a launch outside graphs."""
    ptx = _drop(ptx, r"@%nt_gated ld\.global\.u32")
    return ptx.replace("setp.eq.u32 \t%nt_on, %nt_gate, 0;", "setp.eq.u32 \t%nt_on, 0, 0;")


BEFORE_FILES = {"block_sched": "block_sched", "gmem_bytes": "gmem_bytes", "hist": "hist"}  # file stem → buffer kind


def before_variants(folder: Path) -> dict[str, tuple[str, str | None]]:
    """`NAME (before)` for each PTX an older engine wrote into `folder` (see the module's text)."""
    return {f"{stem} (before)": ((folder / f"{stem}.ptx").read_text(), kind)
            for stem, kind in BEFORE_FILES.items() if (folder / f"{stem}.ptx").is_file()}


def variants() -> dict[str, tuple[str, str | None]]:
    """name -> (PTX, the map whose buffer is appended, or None)."""
    from neutrino.probefile import parse_probes

    plain = VADD.read_text()
    bs = instrument(plain, load_probe_argument("block_sched", None)).ptx
    gmem = load_probe_argument("gmem_bytes", None)
    gb = instrument(plain, gmem).ptx
    hist = parse_probes(HIST_PROBE, "hist.toml")
    extra = plain.replace("\t.param .u64 .ptr .global .align 1 vadd_param_5\n",
                          "\t.param .u64 .ptr .global .align 1 vadd_param_5,\n\t.param .u64 vadd_unused\n", 1)
    return {
        "plain": (plain, None),
        "+param": (extra, "none"),
        "block_sched": (bs, "block_sched"),
        "block_sched -stores": (_drop(bs, r"\bst\.global"), "block_sched"),
        "block_sched -counts": (_drop(bs, r"\bst\.global\.u32 \t\[%nt_cnt"), "block_sched"),
        "block_sched no gate": (ungated(bs), "block_sched"),
        "block_sched gated": (bs, "block_sched gated"),
        "gmem_bytes": (gb, "gmem_bytes"),
        "gmem_bytes -atomics": (_drop(gb, r"\bred\.global"), "gmem_bytes"),
        "gmem_bytes -redux": (_drop(gb, r"\bredux\.sync"), "gmem_bytes"),
        "gmem_bytes st-not-red": (gb.replace("red.global.add.u64", "st.global.u64"), "gmem_bytes"),
        "gmem_bytes one-row": (gb.replace(f"and.b32 \t%nt_stripe, %nt_stripe, {SUM_STRIPES - 1};", "and.b32 \t%nt_stripe, %nt_stripe, 0;"),
                               "gmem_bytes"),
        "gmem_bytes 128 rows": (gb.replace(f"and.b32 \t%nt_stripe, %nt_stripe, {SUM_STRIPES - 1};",
                                           f"and.b32 \t%nt_stripe, %nt_stripe, {WIDE_ROWS - 1};"), "gmem_bytes rows"),
        "gmem_bytes no gate": (ungated(gb), "gmem_bytes"),
        "gmem_bytes gated": (gb, "gmem_bytes gated"),
        "gmem_bytes shfl (sm_75 lowering)": (lowered_for(plain, "sm_75", gmem), "gmem_bytes"),
        "gmem_bytes per lane (sm_2x lowering)": (lowered_for(plain, "sm_20", gmem), "gmem_bytes"),
        "hist match.any": (instrument(plain, hist).ptx, "hist"),
        "hist per lane (sm_6x lowering)": (lowered_for(plain, "sm_60", hist), "hist"),
    }


class Cuda:
    def __init__(self):
        self.lib = C.CDLL("libcuda.so.1")
        self.check("cuInit", 0)
        dev, ctx = C.c_int(), C.c_void_p()
        self.check("cuDeviceGet", C.byref(dev), 0)
        self.check("cuDevicePrimaryCtxRetain", C.byref(ctx), dev)
        self.check("cuCtxSetCurrent", ctx)
        name = C.create_string_buffer(256)
        self.check("cuDeviceGetName", name, 256, dev)
        self.name = name.value.decode()
        self.stream = C.c_void_p()
        self.check("cuStreamCreate", C.byref(self.stream), 1)

    def check(self, fn: str, *args) -> None:
        rc = getattr(self.lib, fn)(*args)
        if rc:
            raise RuntimeError(f"{fn} failed: CUresult {rc}")

    def function(self, ptx: str, name: str) -> C.c_void_p:
        mod, f = C.c_void_p(), C.c_void_p()
        self.check("cuModuleLoadData", C.byref(mod), C.c_char_p(ptx.encode() + b"\0"))
        self.check("cuModuleGetFunction", C.byref(f), mod, name.encode())
        return f

    def alloc(self, size: int) -> int:
        p = C.c_uint64()
        self.check("cuMemAlloc_v2", C.byref(p), C.c_size_t(size))
        self.check("cuMemsetD8_v2", p, C.c_ubyte(0), C.c_size_t(size))
        return p.value

    def attribute(self, f, attr: int) -> int:
        v = C.c_int()
        self.check("cuFuncGetAttribute", C.byref(v), attr, f)
        return v.value

    def occupancy(self, f, threads: int) -> int:
        v = C.c_int()
        self.check("cuOccupancyMaxActiveBlocksPerMultiprocessor", C.byref(v), f, threads, C.c_size_t(0))
        return v.value

    def launch(self, f, grid: int, block: int, params) -> None:
        self.check("cuLaunchKernel", f, grid, 1, 1, block, 1, 1, 0, self.stream, params, None)

    def event(self) -> C.c_void_p:
        e = C.c_void_p()
        self.check("cuEventCreate", C.byref(e), 0)
        return e

    def record(self, e) -> None:
        self.check("cuEventRecord", e, self.stream)

    def elapsed_us(self, a, b) -> float:
        ms = C.c_float()
        self.check("cuEventElapsedTime", C.byref(ms), a, b)
        return ms.value * 1e3

    def sync(self) -> None:
        self.check("cuStreamSynchronize", self.stream)

    def graph(self, enqueue) -> C.c_void_p:
        g, exe = C.c_void_p(), C.c_void_p()
        self.check("cuStreamBeginCapture_v2", self.stream, 0)
        enqueue()
        self.check("cuStreamEndCapture", self.stream, C.byref(g))
        self.check("cuGraphInstantiateWithFlags", C.byref(exe), g, C.c_ulonglong(0))
        return exe

    def replay(self, exe) -> None:
        self.check("cuGraphLaunch", exe, self.stream)

    def read(self, ptr: int, size: int) -> bytes:
        buf = C.create_string_buffer(size)
        self.check("cuMemcpyDtoH_v2", buf, C.c_uint64(ptr), C.c_size_t(size))
        return buf.raw


def pointer_array(values: list) -> C.Array:
    arr = (C.c_void_p * len(values))(*[C.addressof(v) for v in values])
    arr._keep = values  # noqa: SLF001 - the values live as long as the array
    return arr


def timed(cuda: Cuda, spin, step, n: int) -> list[float]:
    """GPU time of each of n steps, the GPU held by a spin kernel while the host enqueues them."""
    events = [cuda.event() for _ in range(n + 1)]
    ns = C.c_uint64(2_000_000 + n * 40_000)
    cuda.launch(spin, 1, 1, pointer_array([ns]))
    cuda.record(events[0])
    for i in range(n):
        step()
        cuda.record(events[i + 1])
    cuda.sync()
    return [cuda.elapsed_us(events[i], events[i + 1]) for i in range(n)]


def rows_of(buffer: str) -> int:
    """Rows of counters a gmem_bytes variant's buffer holds."""
    return WIDE_ROWS if buffer.endswith(" rows") else SUM_STRIPES  # (a sum map's rows: maps.stripes("sum"))


BLOCK_START_SPREAD = 1 << 20  # cycles: a block's warps start together (its SM starts them at once)
ELAPSED_MAX = 1 << 24  # cycles: a warp of vadd runs for microseconds, far below this


def block_sched_check(cuda: Cuda, f, params, head: int, grid: int) -> dict:
    """One launch into a zeroed buffer: each warp's count is 1 and its record (start u64, elapsed u32, SM u32 at
    align16(4 * warps) + 16 * warp: spec/kernel-json.md) is filled and consistent: start above 0, elapsed in
    (0, 2^24), an SM id below 1024, and each warp on its block's SM (the most common among the block's consecutive records) and
    started within 2^20 cycles of the block's median start (a field misplaced or a u64's words swapped fails these)."""
    warps = grid * THREADS // 32
    per_block = THREADS // 32
    records = (4 * warps + 15) // 16 * 16
    size = records + 16 * warps
    cuda.check("cuMemsetD8_v2", C.c_uint64(head), C.c_ubyte(0), C.c_size_t(size))
    cuda.launch(f, grid, THREADS, params)
    cuda.sync()
    raw = cuda.read(head, size)
    counts = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(warps)]
    rec = [(int.from_bytes(raw[at:at + 8], "little"), int.from_bytes(raw[at + 8:at + 12], "little"),
            int.from_bytes(raw[at + 12:at + 16], "little")) for at in range(records, records + 16 * warps, 16)]
    filled = 0
    for b in range(grid):
        block = rec[b * per_block:(b + 1) * per_block]
        block_sm = statistics.mode(r[2] for r in block)
        middle = statistics.median_low(r[0] for r in block)
        filled += sum(1 for start, elapsed, sm in block if start > 0 and 0 < elapsed < ELAPSED_MAX and sm < 1024
                      and sm == block_sm and abs(start - middle) < BLOCK_START_SPREAD)
    return {"label": "counts+records", "bytes": sum(1 for c in counts if c == 1) + filled, "bytes_expected": 2 * warps,
            "active_threads": 0}


def measure(cuda: Cuda, name: str, ptx: str, buffer: str | None, args, exact: bool | None = None) -> dict:
    """One variant's row; `exact` (None: decided by the variant's name) checks its records or byte totals exactly."""
    f = cuda.function(ptx, "vadd")
    n = args.grid * BLOCK_ELEMENTS
    x, y, out = (cuda.alloc(4 * n) for _ in range(3))
    values = [C.c_uint64(x), C.c_uint64(y), C.c_uint64(out), C.c_uint32(n), C.c_uint64(0), C.c_uint64(0)]
    head = None
    if buffer is not None:
        size = {"gmem": rows_of(buffer) * 128, "hist": STRIPES * HIST_ROW}.get(buffer.split()[0].split("_")[0],
                                                                      16 * args.grid * 4 * 2 + 16 * args.grid * 4)
        base = cuda.alloc(HEAD + size)
        head = base + HEAD
        pointer = head
        if buffer.endswith(" tagged"):  # a graph replay probed: tagged pointer, gate open (the word before is 0)
            pointer |= 1
        if buffer.endswith("gated"):  # a graph replay left out: tagged pointer, gate set
            one = C.c_uint32(1)
            cuda.check("cuMemcpyHtoD_v2", C.c_uint64(head - 8), C.byref(one), C.c_size_t(4))
            pointer |= 1
        values.append(C.c_uint64(pointer))
    params = pointer_array(values)
    spin = cuda.function(SPIN_PTX, "spin")
    for _ in range(20):
        cuda.launch(f, args.grid, THREADS, params)
    cuda.sync()
    row = {"variant": name, "registers": cuda.attribute(f, 4), "static_shared": cuda.attribute(f, 1),
           "local_bytes": cuda.attribute(f, 3), "blocks_per_sm": cuda.occupancy(f, THREADS)}
    if buffer is not None and buffer.startswith("gmem") and head is not None:
        rows = rows_of(buffer)
        cuda.check("cuMemsetD8_v2", C.c_uint64(head), C.c_ubyte(0), C.c_size_t(rows * 128))
        cuda.launch(f, args.grid, THREADS, params)
        cuda.sync()
        raw = cuda.read(head, rows * 128)
        words = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]
        row["bytes"] = sum(words[r * 16] for r in range(rows))
        row["active_threads"] = sum(words[r * 16 + 1] for r in range(rows))
        if exact is None:
            exact = name in ("gmem_bytes", "gmem_bytes one-row", "gmem_bytes (before)", "gmem_bytes 128 rows") \
                or "lowering" in name
        row["bytes_expected"] = 0 if buffer.endswith("gated") else (12 * n if exact else None)
    if buffer in ("block_sched", "block_sched tagged") and (name in ("block_sched", "block_sched (before)") if exact is None else exact):
        row.update(block_sched_check(cuda, f, params, head, args.grid))
    if buffer == "hist":
        cuda.check("cuMemsetD8_v2", C.c_uint64(head), C.c_ubyte(0), C.c_size_t(STRIPES * HIST_ROW))
        cuda.launch(f, args.grid, THREADS, params)
        cuda.sync()
        raw = cuda.read(head, STRIPES * HIST_ROW)
        row["bytes"] = sum(int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8))  # samples
        row["active_threads"] = 0
        row["label"] = "samples"
        row["bytes_expected"] = SAMPLES_PER_THREAD * args.grid * THREADS
    eager = timed(cuda, spin, lambda: cuda.launch(f, args.grid, THREADS, params), args.launches)
    exe = cuda.graph(lambda: [cuda.launch(f, args.grid, THREADS, params) for _ in range(8)])
    for _ in range(5):
        cuda.replay(exe)
    cuda.sync()
    graph = timed(cuda, spin, lambda: cuda.replay(exe), args.replays)
    row["eager_us"] = statistics.median(eager)
    row["graph8_us"] = statistics.median(graph)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--grid", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2, help="all variants, interleaved, this many times (medians)")
    ap.add_argument("--json")
    ap.add_argument("--before", type=Path, help="a folder of PTX an older engine wrote (see the module's text)")
    ap.add_argument("--only", help="comma-separated variants to run (plain is always run)")
    args = ap.parse_args()
    cuda = Cuda()
    table = variants()
    if args.before:
        table.update(before_variants(args.before))
    if args.only:
        keep = {"plain", *args.only.split(",")}
        unknown = keep - set(table)
        if unknown:
            raise SystemExit(f"probe_cost: no variant {', '.join(sorted(unknown))} (variants: {', '.join(table)})")
        table = {name: v for name, v in table.items() if name in keep}
    rows: dict[str, list[dict]] = {name: [] for name in table}
    for _ in range(args.rounds):
        for name, (ptx, buffer) in table.items():
            try:
                rows[name].append(measure(cuda, name, ptx, buffer, args))
            except Exception as e:  # noqa: BLE001 - one variant failing leaves the others
                print(f"{name}: {type(e).__name__}: {e}", flush=True)
    out = []
    base = None
    print(f"device: {cuda.name}; grid {args.grid} x {THREADS} threads; medians of {args.rounds} rounds")
    print("| variant | regs | blocks/SM | eager µs/launch | graph of 8, µs/replay | check |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, rs in rows.items():
        if not rs:
            continue
        r = dict(rs[0])
        r["eager_us"] = statistics.median(x["eager_us"] for x in rs)
        r["graph8_us"] = statistics.median(x["graph8_us"] for x in rs)
        base = base or r
        check = ""
        if "bytes" in r:
            check = (f"{r.get('label', 'bytes')}={r['bytes']}"
                     + (f" active={r['active_threads']}" if "label" not in r else ""))
            if r.get("bytes_expected") is not None:
                check += " ok" if r["bytes"] == r["bytes_expected"] else f" WRONG (want {r['bytes_expected']})"
        print(f"| {name} | {r['registers']} | {r['blocks_per_sm']} | {r['eager_us']:.2f} "
              f"({r['eager_us'] / base['eager_us']:.2f}x) | {r['graph8_us']:.2f} ({r['graph8_us'] / base['graph8_us']:.2f}x) "
              f"| {check} |", flush=True)
        out.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": cuda.name, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
