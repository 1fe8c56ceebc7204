"""The runtime's own GPU operations per probed eager launch, added one at a time (issue 24; GPU machine).

    python benchmarks/eager_split.py [--grids 16384,256] [--tools block_sched,gmem_bytes] [--gaps 100,0]
                                     [--launches 200] [--rounds 2] [--batch 6] [--only V1,V2] [--json OUT]

What neutrino's C fast path (shim/fastlaunch.c) and result writer (shim/writer.c) put on the GPU around one
probed eager launch, rebuilt here with the driver API (ctypes, no neutrino runtime) around Triton's vadd
(tests/data/corpus/triton/vadd.sm90a.ptx, 4 warps a block; 16,384 blocks is the stream workload's shape of
benchmarks/overhead.py, 256 a tiny ~3 µs kernel), instrumented by this tree's engine as probe_cost.py does:

  program's stream:  [start event, every 8th launch] -> probed kernel (map buffer = this launch's ring
                     region) -> end event (the writer waits for it)
  writer's stream:   (non-blocking) waits for a launch's end event, copies regions back to pinned staging
                     (cuMemcpyDtoHAsync) and zeroes them (cuMemsetD8Async): one copy and one memset per
                     batch of consecutive regions (the writer's batch: --batch launches here)
  CUPTI:             CONCURRENT_KERNEL records (the timeline), and MEMCPY/MEMSET records (its `copies` level)

Each variant adds one of them (the rows; `+ end event on every 8th launch only` is no runtime's: what ending only
some launches on an event, the writer taking the others' completion from a later event, would leave), timed like overhead.py's OVERHEAD_GPU_ONLY loop: per iteration a
spin kernel of --gaps µs (the GPU busy while the host enqueues; 100 µs is overhead.py's `torch.cuda._sleep`,
0 puts the launches back to back so the writer's work lands on the next launch), then events a and b of the
program's stream around the launch and what the variant adds to it; the time is b - a (CUDA events), the
median (and mean) over --launches iterations, the median of that over --rounds interleaved rounds. All
iterations are enqueued behind a long spin (the host stays ahead of the GPU; `host behind` marks a run
whose enqueueing outlasted it). One process, every variant of a shape interleaved.

Columns: `median µs` per launch; `Δ plain` = median - plain's; `Δ ring` = median - `probed, ring regions`'s
(what the row's own operations add to the probed kernel); `mean µs` (the writer's batches overlap only some
launches: the mean shows them where the median may not); `check`: for the rows that copy back and zero, the last
copied region holds exactly one launch's results (block_sched: every warp's count is 1; gmem_bytes: the
rows' bytes sum to 12 per element): the copy waited for its kernel and the region was zeroed before reuse.

CUPTI rows need libcupti (neutrino.runtime.context_tables.cupti.find_cupti) and a C compiler
(benchmarks/cupti_floor.c); without them they are left out with a note. Reading the output: the row whose
`Δ ring` jumps is the operation that costs the GPU time; `runtime (main)` should come near the runtime's
own excess over probe_cost.py (docs/overhead.md, "The runtime's own GPU time per eager launch").
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from probe_cost import BLOCK_ELEMENTS, SPIN_PTX, THREADS, VADD, Cuda, pointer_array  # noqa: E402

REGION_ALIGN = 256          # shim/fastlaunch.c
RING_START = 8 << 20        # shim/fastlaunch.c: a ring holds at least 8 launches
TIME_EVERY = 8              # the launcher's --time-every default
WARMUP = 10                 # iterations of each run before the timed ones
K_KERNEL, K_COPIES = 1, 4   # cupti_floor_set's kind bits: CONCURRENT_KERNEL; MEMCPY + MEMSET

# name -> what the variant puts on the GPU per launch (see the module's text)
VARIANTS = {
    "plain": dict(probed=False),
    "probed, one buffer": dict(ring=False),
    "probed, ring regions": dict(),
    "+ end event": dict(end="timing"),
    "+ end event, untimed (CU_EVENT_DISABLE_TIMING)": dict(end="untimed"),
    "+ start and end events (every launch)": dict(end="timing", start=1),
    "+ end event on every 8th launch only": dict(end="timing", end_every=8),
    "+ end marker: cuStreamWriteValue32 to mapped host memory": dict(marker=True),
    "+ end, copy-out per launch (stream 2)": dict(end="timing", copy="each"),
    "+ end, memset per launch (stream 2)": dict(end="timing", zero="each"),
    "+ end, copy + memset per launch": dict(end="timing", copy="each", zero="each"),
    "+ end, copy + zero by copy engine per launch": dict(end="timing", copy="each", zero="each", by_copy=True),
    "+ end, writer batches (copy + memset)": dict(end="timing", copy="batch", zero="batch"),
    "+ end, writer batches, memset only": dict(end="timing", zero="batch"),
    "+ end, writer batches, zero by copy engine": dict(end="timing", copy="batch", zero="batch", by_copy=True),
    "+ CUPTI kernel records": dict(cupti=K_KERNEL),
    "+ end, CUPTI kernel records": dict(end="timing", cupti=K_KERNEL),
    "runtime (main): timed end, start every 8th, batches, CUPTI kernel+copy records":
        dict(end="timing", start=TIME_EVERY, copy="batch", zero="batch", cupti=K_KERNEL | K_COPIES),
    "runtime (h-eager): untimed end, start every 8th, batches, CUPTI kernel+copy records":
        dict(end="untimed", start=TIME_EVERY, copy="batch", zero="batch", cupti=K_KERNEL | K_COPIES),
    "runtime (main) without CUPTI": dict(end="timing", start=TIME_EVERY, copy="batch", zero="batch"),
}


def align(v: int, a: int) -> int:
    return (v + a - 1) // a * a


class Driver(Cuda):
    """probe_cost's Cuda plus what the runtime's operations need: a second stream, events with flags,
    stream waits, async copies and memsets, pinned memory."""

    def __init__(self):
        super().__init__()
        self.stream2 = C.c_void_p()
        self.check("cuStreamCreate", C.byref(self.stream2), 1)  # non-blocking, as the writer's

    def event_flags(self, flags: int) -> C.c_void_p:
        e = C.c_void_p()
        self.check("cuEventCreate", C.byref(e), flags)
        return e

    def wait(self, stream, e) -> None:
        self.check("cuStreamWaitEvent", stream, e, 0)

    def pinned(self, size: int) -> int:
        p = C.c_void_p()
        self.check("cuMemHostAlloc", C.byref(p), C.c_size_t(size), 1)
        C.memset(p.value, 0, size)
        return p.value

    def d2h(self, host: int, dev: int, size: int, stream) -> None:
        self.check("cuMemcpyDtoHAsync_v2", C.c_void_p(host), C.c_uint64(dev), C.c_size_t(size), stream)

    def h2d(self, dev: int, host: int, size: int, stream) -> None:
        self.check("cuMemcpyHtoDAsync_v2", C.c_uint64(dev), C.c_void_p(host), C.c_size_t(size), stream)

    def memset(self, dev: int, size: int, stream) -> None:
        self.check("cuMemsetD8Async", C.c_uint64(dev), C.c_ubyte(0), C.c_size_t(size), stream)

    def mapped_word(self) -> int:
        """The device address of a pinned, device-mapped host word (cuStreamWriteValue32's target)."""
        p, d = C.c_void_p(), C.c_uint64()
        self.check("cuMemHostAlloc", C.byref(p), C.c_size_t(64), 1 | 2)  # portable, device-mapped
        self.check("cuMemHostGetDevicePointer_v2", C.byref(d), p, 0)
        return d.value

    def write_value(self, dev: int, value: int) -> None:
        fn = "cuStreamWriteValue32_v2" if hasattr(self.lib, "cuStreamWriteValue32_v2") else "cuStreamWriteValue32"
        self.check(fn, self.stream, C.c_uint64(dev), C.c_uint32(value), 0)

    def ctx_sync(self) -> None:
        self.check("cuCtxSynchronize")


def start_cupti():
    """(cupti_floor library, None) with CUPTI started, or (None, why not)."""
    try:
        from neutrino.runtime.context_tables.cupti import find_cupti

        path, origin = find_cupti()
        if not path:
            return None, origin
        lib_path = Path(tempfile.mkdtemp()) / "cupti_floor.so"
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", f"-I{HERE.parent / 'shim'}", "-o", str(lib_path),
                        str(HERE / "cupti_floor.c"), "-ldl"], check=True, capture_output=True)
        lib = C.CDLL(str(lib_path))
        rc = lib.cupti_floor_init(str(path).encode())
        return (lib, None) if rc == 0 else (None, f"cupti_floor_init failed at step {rc}")
    except Exception as e:  # noqa: BLE001 - the CUPTI rows are left out, the others run
        return None, f"{type(e).__name__}: {e}"


class Shape:
    """One probed kernel at one grid: its functions, arrays, a runtime-sized ring of regions with each
    region's parameter array, pinned staging and zeros, and the events of a run."""

    def __init__(self, cuda: Driver, tool: str, ptx: str, plain_ptx: str, grid: int, batch: int, n_events: int):
        self.cuda, self.tool, self.grid = cuda, tool, grid
        self.f_plain = cuda.function(plain_ptx, "vadd")
        self.f_probed = cuda.function(ptx, "vadd")
        n = grid * BLOCK_ELEMENTS
        self.elements = n
        x, y, out = (cuda.alloc(4 * n) for _ in range(3))
        warps = grid * THREADS // 32
        if tool == "block_sched":
            self.counts_bytes = align(4 * warps, 16)
            size = self.counts_bytes + 16 * warps  # one 16-byte record per warp (spec/kernel-json.md)
        else:  # gmem_bytes: a sum map of `rows` rows of 128 bytes, the row the SM id masked
            rows = int(re.search(r"and\.b32 \t%nt_stripe, %nt_stripe, (\d+);", ptx).group(1)) + 1
            self.rows = rows
            size = rows * 128
        self.size = size
        self.region = align(size, REGION_ALIGN)
        ring = RING_START
        while ring < 8 * self.region:
            ring *= 2
        slots = ring // self.region
        self.batch = max(1, min(batch, slots // 2))
        self.slots = slots - slots % self.batch  # a batch's regions never wrap: one copy, one memset
        self.ring = cuda.alloc(self.slots * self.region)  # zeroed
        self.fixed = cuda.alloc(self.region)
        self.staging = cuda.pinned(self.batch * self.region)
        self.zeros = cuda.pinned(self.batch * self.region)
        base = [C.c_uint64(x), C.c_uint64(y), C.c_uint64(out), C.c_uint32(n), C.c_uint64(0), C.c_uint64(0)]
        self.plain_params = pointer_array(base)
        self.fixed_params = pointer_array([*base, C.c_uint64(self.fixed)])
        self.ring_params = [pointer_array([*base, C.c_uint64(self.ring + s * self.region)]) for s in range(self.slots)]
        self.spin = cuda.function(SPIN_PTX, "spin")
        self.marker = cuda.mapped_word()
        self.a = [cuda.event_flags(0) for _ in range(n_events)]
        self.b = [cuda.event_flags(0) for _ in range(n_events)]
        self.starts = [cuda.event_flags(0) for _ in range(n_events)]
        self.ends = {"timing": [cuda.event_flags(0) for _ in range(n_events)],
                     "untimed": [cuda.event_flags(2) for _ in range(n_events)]}

    def spin_for(self, ns: int) -> None:
        self.cuda.launch(self.spin, 1, 1, pointer_array([C.c_uint64(ns)]))

    def region_at(self, slot: int) -> int:
        return self.ring + slot * self.region

    def writer_ops(self, v: dict, i: int, end) -> None:
        """What the writer enqueues on its stream after launch i (per launch, or per batch at its last)."""
        cuda, s2 = self.cuda, self.cuda.stream2
        each = v.get("copy") == "each" or v.get("zero") == "each"
        if each:
            first, count = i % self.slots, 1
        elif (v.get("copy") == "batch" or v.get("zero") == "batch") and (i + 1) % self.batch == 0:
            first, count = (i + 1 - self.batch) % self.slots, self.batch
        else:
            return
        cuda.wait(s2, end)
        dev, span = self.region_at(first), count * self.region
        if v.get("copy"):
            cuda.d2h(self.staging, dev, span, s2)
        if v.get("zero"):
            if v.get("by_copy"):
                cuda.h2d(dev, self.zeros, span, s2)
            else:
                cuda.memset(dev, span, s2)

    def run(self, v: dict, n: int, gap_us: float) -> dict:
        cuda = self.cuda
        total = n + WARMUP
        ring = v.get("ring", True)
        probed = v.get("probed", True)
        f = self.f_probed if probed else self.f_plain
        front_ns = 3_000_000 + (80_000 * total if gap_us == 0 else 2_000 * total)
        C.memset(self.staging, 0xFF, self.batch * self.region)
        cuda.check("cuMemsetD8_v2", C.c_uint64(self.ring), C.c_ubyte(0), C.c_size_t(self.slots * self.region))
        t0 = time.perf_counter()
        self.spin_for(front_ns)
        for i in range(total):
            if gap_us:
                self.spin_for(int(gap_us * 1000))
            cuda.record(self.a[i])
            if v.get("start") and i % v["start"] == 0:
                cuda.record(self.starts[i])
            params = self.plain_params if not probed else self.ring_params[i % self.slots] if ring else self.fixed_params
            cuda.launch(f, self.grid, THREADS, params)
            end = None
            if v.get("end") and i % v.get("end_every", 1) == 0:
                end = self.ends[v["end"]][i]
                cuda.record(end)
            if v.get("marker"):
                cuda.write_value(self.marker, i + 1)
            cuda.record(self.b[i])
            if end is not None:
                self.writer_ops(v, i, end)
        enqueue_s = time.perf_counter() - t0
        cuda.ctx_sync()
        times = [cuda.elapsed_us(self.a[i], self.b[i]) for i in range(WARMUP, total)]
        out = {"median": statistics.median(times), "mean": statistics.mean(times),
               "host_behind": enqueue_s * 1e9 > front_ns + total * gap_us * 1000}
        if v.get("copy") and v.get("zero"):
            out["check"] = self.check_staging()
        return out

    def check_staging(self) -> str:
        """The first region in staging (the last one copied back) holds exactly one launch's results."""
        raw = C.string_at(self.staging, self.size)
        if self.tool == "block_sched":
            warps = self.grid * THREADS // 32
            counts = [int.from_bytes(raw[4 * w:4 * w + 4], "little") for w in range(warps)]
            ok = all(c == 1 for c in counts)
            return f"counts {'all 1 ok' if ok else f'WRONG (max {max(counts)}, min {min(counts)})'}"
        words = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]
        total = sum(words[r * 16] for r in range(self.rows))
        want = 12 * self.elements
        return f"bytes={total} " + ("ok" if total == want else f"WRONG (want {want})")


def tools(plain: str) -> dict[str, str]:
    from neutrino.engine import instrument
    from neutrino.toolbox import load_probe_argument

    return {name: instrument(plain, load_probe_argument(name, None)).ptx for name in ("block_sched", "gmem_bytes")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--grids", default="16384,256")
    ap.add_argument("--tools", default="block_sched,gmem_bytes")
    ap.add_argument("--gaps", default="100,0", help="µs of GPU spin before each iteration (0: back to back)")
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=6, help="launches per writer batch (at most half the ring)")
    ap.add_argument("--only", help="comma-separated variants (plain and `probed, ring regions` always run)")
    ap.add_argument("--budget", type=float, default=35.0,
                    help="seconds: no further round is started when the rounds so far say it would end later")
    ap.add_argument("--json")
    args = ap.parse_args()
    began = time.perf_counter()
    variants = dict(VARIANTS)
    if args.only:
        keep = {"plain", "probed, ring regions", *args.only.split(",")}
        unknown = keep - set(variants)
        if unknown:
            raise SystemExit(f"eager_split: no variant {', '.join(sorted(unknown))} (variants: {', '.join(variants)})")
        variants = {k: v for k, v in variants.items() if k in keep}
    cupti, why = start_cupti() if any(v.get("cupti") for v in variants.values()) else (None, "not asked")
    if cupti is None:
        variants = {k: v for k, v in variants.items() if not v.get("cupti")}
    cuda = Driver()
    plain = VADD.read_text()
    ptxs = tools(plain)
    gaps = [float(g) for g in args.gaps.split(",")]
    shapes = {(t, g): Shape(cuda, t, ptxs[t], plain, g, args.batch, args.launches + WARMUP)
              for t in args.tools.split(",") for g in (int(x) for x in args.grids.split(","))}
    results: dict = {}
    rounds = 0
    for _ in range(args.rounds):
        spent = time.perf_counter() - began
        if rounds and spent * (rounds + 1) / rounds > args.budget:
            break
        rounds += 1
        for key, shape in shapes.items():
            for gap in gaps:
                for name, v in variants.items():
                    if time.perf_counter() - began > args.budget * 1.25:  # print what there is
                        break
                    if v.get("cupti"):
                        cupti.cupti_floor_set(v["cupti"], 0, 0)
                    try:
                        r = shape.run(v, args.launches, gap)
                    except RuntimeError as e:  # one variant failing (a driver call refused) leaves the others
                        print(f"{name}: {e}", flush=True)
                        cuda.ctx_sync()
                        continue
                    finally:
                        if v.get("cupti"):
                            cupti.cupti_floor_set(0, 0, 0)
                    results.setdefault((*key, gap), {}).setdefault(name, []).append(r)
    print(f"device: {cuda.name}; {args.launches} launches per run, medians of {rounds} rounds; "
          f"CUPTI: {'on for the CUPTI rows' if cupti else 'rows left out (' + str(why) + ')'}")
    dump = []
    for (tool, grid, gap), rows in results.items():
        shape = shapes[(tool, grid)]
        print(f"\n{tool}, grid {grid} x {THREADS} threads, gap {gap:g} µs (region {shape.region} B, ring "
              f"{shape.slots} regions, writer batch {shape.batch})")
        print("| variant | median µs | Δ plain | Δ ring | mean µs | check |")
        print("| --- | ---: | ---: | ---: | ---: | --- |")
        med = {name: statistics.median(r["median"] for r in rs) for name, rs in rows.items()}
        if "plain" not in med or "probed, ring regions" not in med:
            continue
        for name, rs in rows.items():
            mean = statistics.median(r["mean"] for r in rs)
            check = rs[-1].get("check", "") + (" host behind" if any(r["host_behind"] for r in rs) else "")
            print(f"| {name} | {med[name]:.2f} | {med[name] - med['plain']:+.2f} | "
                  f"{med[name] - med['probed, ring regions']:+.2f} | {mean:.2f} | {check} |", flush=True)
            dump.append({"tool": tool, "grid": grid, "gap_us": gap, "variant": name, "median_us": med[name],
                         "mean_us": mean, "check": check})
    if args.json:
        Path(args.json).write_text(json.dumps({"device": cuda.name, "rows": dump}, indent=1))


if __name__ == "__main__":
    main()
