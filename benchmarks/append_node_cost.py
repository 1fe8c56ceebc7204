"""What the CUDA-graph append node costs, part by part (issue 24; run on the GPU machine, no torch needed).

    python benchmarks/append_node_cost.py [--rounds 5] [--replays 200] [--grid 256] [--json OUT.json]

The graph is a chain of 8 of Triton's vector add from the corpus (the issue-24 shape, as in
probe_cost.py), built with cuGraphAddKernelNode so that the extra node's dependencies are chosen
here. The probed kernels (block_sched) get their own device memory per node and the real append
kernel (runtime/cudagraphs/ring.py) gets real descriptors, laid out by the runtime's own functions
(`ring_layout`, `DeviceLayout`, `node_desc`, `append_params`, `append_chunks`): what
`GraphProbes.end_capture` builds, without the host thread that copies the slots out (GPU alone).
Variants, each one executable graph (`VARIANTS`):

* `plain`: the 8 kernels; `+ empty, after the last` / `after all 8`: an empty kernel (1 block of 32
  threads): what one more node costs, and its join of 8 dependencies;
* `block_sched`: the probed kernels, pointers tagged (they read the gate), no append node; and with an
  empty node after all 8 (a node, no append work);
* the append node after all 8 with session 8's kernel (`S8`: `append_ptx(lean=False)`, what main
  builds) and the lean one (ring.py), each with every replay probed and with the gate shut
  (`--launches` selecting no replay: the probe stores nothing, the append blocks neither copy nor
  zero), and each with its host ring in device memory instead of mapped host memory (an ablation: no
  store crosses PCIe; nothing reads that ring here);
* the lean kernel without its fences (an ablation: its results may be torn), and with
  `fence.acq_rel.gpu` where it has `membar.gl` (a sequentially consistent fence);
* the lean kernel with 10 and 20 blocks per node instead of the runtime's (5 here: what more width buys);
* the lean kernel whose blocks, on a replay whose gate was shut, all leave at once but the first of
  each node, which counts the replay without waiting for them (`append_ptx(shut_fast=True)`);
* every third replay selected (the gate opening and shutting: the counters checked against the
  filter), with session 8's, the lean and the programmatic-edge kernel;
* sm_90 and later: the kernel built for a programmatic edge (`append_ptx(pdl=True)`: everything but
  the copy before `griddepcontrol.wait`) after all 8, the edge from the last one a launch-order edge
  (it may start once every block of that kernel has started: what this runtime builds), a
  programmatic one (once they have all exited), or the launch-order edge alone; and with the ring
  in device memory.

Measures, GPU alone (a spin kernel holds the GPU while the host enqueues the replays, so the times
are the GPU's): per-replay CUDA-event medians of `--replays` replays, each variant once per round,
rounds interleaved (a first round not counted: it runs faster than the next ones); the table gives
the median over rounds of those medians, and the spread (lowest
and highest round). Every append variant is checked after each round: its replays counted by the
append kernel's state, slots written (all of them when the gate is open, none when shut), none
dropped (the state is reset before each round: the ring has room for a round's replays), the maps
zeroed, and the last slot holding the last replay's block_sched counts (one per warp).
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import statistics
import sys
import types
from pathlib import Path

import attrs

from probe_cost import BLOCK_ELEMENTS, SPIN_PTX, THREADS, VADD, Cuda, pointer_array, timed

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neutrino.engine import instrument  # noqa: E402
from neutrino.runtime.cudagraphs import ring as graph_ring  # noqa: E402
from neutrino.runtime.cudagraphs.capture import _encode_header  # noqa: E402
from neutrino.runtime.driver import DriverError, KernelNodeParamsV2, RealDriver  # noqa: E402
from neutrino.runtime.instrument.probed import launch_shape  # noqa: E402
from neutrino.toolbox import load_probe_argument  # noqa: E402

EMPTY_PTX = """.version 7.0
.target sm_70
.address_size 64
.visible .entry empty(.param .u64 unused)
{
    ret;
}
"""
CHAIN = 8
WARMUP = 5
EVERY = types.SimpleNamespace(start=0, stop=2**64 - 1, every=1)  # --launches selecting every replay
NONE = types.SimpleNamespace(start=2**62, stop=2**63, every=1)  # selecting none (the gate stays shut)
EVERY3 = types.SimpleNamespace(start=0, stop=2**64 - 1, every=3)  # every third (the gate opens and shuts)


class Graphs(Cuda):
    """Graphs built node by node (cuGraphAddKernelNode_v2, as the runtime adds its append node); `drv`: the
    runtime's own driver bindings on the same library (its way of adding the append node)."""

    def __init__(self):
        super().__init__()
        self.drv = RealDriver(self._address)

    def _address(self, name: str) -> int:
        try:
            return C.cast(getattr(self.lib, name), C.c_void_p).value or 0
        except AttributeError:
            return 0

    def new_graph(self) -> C.c_void_p:
        g = C.c_void_p()
        self.check("cuGraphCreate", C.byref(g), 0)
        return g

    def add(self, graph, deps: list, func, grid, block, params) -> C.c_void_p:
        p = KernelNodeParamsV2(func=func, gridDimX=grid[0], gridDimY=grid[1], gridDimZ=grid[2], blockDimX=block[0],
                               blockDimY=block[1], blockDimZ=block[2], sharedMemBytes=0,
                               kernelParams=C.cast(params, C.POINTER(C.c_void_p)))
        arr = (C.c_void_p * max(1, len(deps)))(*[d.value for d in deps])
        node = C.c_void_p()
        self.check("cuGraphAddKernelNode_v2", C.byref(node), graph, arr, C.c_size_t(len(deps)), C.byref(p))
        return node

    def depend(self, graph, frm, to, port: int) -> None:
        """A programmatic edge frm -> to from kernel-node port `port` (CUgraphEdgeData: from_port,
        to_port, type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC, 5 reserved bytes)."""
        data = (C.c_ubyte * 8)(port, 0, 1, 0, 0, 0, 0, 0)
        src, dst = (C.c_void_p * 1)(frm.value), (C.c_void_p * 1)(to.value)
        self.check("cuGraphAddDependencies_v2", graph, src, dst, data, C.c_size_t(1))

    def instantiate(self, graph) -> C.c_void_p:
        exe = C.c_void_p()
        self.check("cuGraphInstantiateWithFlags", C.byref(exe), graph, C.c_ulonglong(0))
        return exe

    def host_mapped(self, size: int) -> int:
        p, dev = C.c_void_p(), C.c_uint64()
        self.check("cuMemHostAlloc", C.byref(p), C.c_size_t(size), 3)  # PORTABLE | DEVICEMAP
        C.memset(p, 0, size)
        self.check("cuMemHostGetDevicePointer_v2", C.byref(dev), p, 0)
        return dev.value

    def write(self, ptr: int, data: bytes) -> None:
        self.check("cuMemcpyHtoD_v2", C.c_uint64(ptr), data, C.c_size_t(len(data)))


class ProbedNode:
    """One probed kernel node's memory, as the runtime lays it out (capture._new_node, ring.py)."""

    def __init__(self, cuda: Graphs, maps: list, grid: int):
        shape = launch_shape(maps, (grid, 1, 1), (THREADS, 1, 1), {})
        _, offsets = _encode_header((grid, 1, 1), (THREADS, 1, 1), 0, shape.layouts)
        self.span = shape.frame_bytes - offsets[0]
        self.ring_layout = graph_ring.ring_layout(shape.frame_bytes, True)
        self.dev = graph_ring.DeviceLayout(self.span, self.ring_layout.nslots)
        self.device = cuda.alloc(self.dev.total)
        self.ring = cuda.host_mapped(self.ring_layout.total)
        self.buffer = self.device + self.dev.maps  # the first (only) map; bit 0 set: the kernel reads the gate

        self.ring_on_device = cuda.alloc(self.ring_layout.total)  # (the ablation without PCIe stores)

    def desc(self, ring_on_device: bool = False) -> graph_ring.NodeDesc:
        ring = self.ring_on_device if ring_on_device else self.ring
        return graph_ring.node_desc(self.device, self.dev, ring, self.ring_layout, 0)

    def reset(self, cuda: Graphs, gate: int) -> None:
        """Before a round: counters zero (the ring empty), the first replay's gate."""
        cuda.write(self.device + self.dev.state, bytes(graph_ring.STATE_BYTES))
        cuda.write(self.device + self.dev.gate, gate.to_bytes(4, "little"))

    def counters(self, cuda: Graphs) -> tuple[int, int, int]:
        raw = cuda.read(self.device + self.dev.state, 24)
        return tuple(int.from_bytes(raw[i:i + 8], "little") for i in (0, 8, 16))


@attrs.frozen
class Variant:
    """One executable graph: the chain (probed or not), then `extra` ("empty", "empty-grid", "append" or
    None) after the last node or after all of them (`after`), the append node's `kernel` ("s8", "lean",
    "pdl", "nofence"), the replays' selection (`launch_filter`: EVERY or NONE), the edge from the last node
    a programmatic one from `port` (1: programmatic, 2: launch order; 0: ordinary), the host ring in mapped
    host memory or, `ring` "device", in device memory (no store crosses PCIe)."""

    name: str
    probed: bool
    extra: str | None = None
    after: str = "all"
    kernel: str = "lean"
    launch_filter: object = EVERY
    port: int = 0
    ring: str = "host"
    runtime: bool = False  # added by the runtime's driver call (RealDriver.graph_add_kernel_node, cuGraphAddNode_v2)
    chunks: int = 0  # the append grid's blocks per node (0: the runtime's, append_chunks)

    @property
    def gate(self) -> int:
        return 1 if self.launch_filter is NONE else 0


def selected(launch_filter, runs: int) -> int:
    """How many of replays 0..runs-1 the filter selects."""
    f = launch_filter
    return sum(1 for r in range(runs) if f.start <= r < f.stop and (r - f.start) % f.every == 0)


def append_variants(name: str, kernel: str, **kw) -> list[Variant]:
    """The append node with `kernel`, every replay probed and the gate shut."""
    return [Variant(f"block_sched + {name}", True, "append", kernel=kernel, **kw),
            Variant(f"gate shut + {name}", True, "append", kernel=kernel, launch_filter=NONE, **kw)]


VARIANTS = [
    Variant("plain", False, after="last"),
    Variant("+ empty, after the last", False, "empty", after="last"),
    Variant("+ empty, after all 8", False, "empty"),
    Variant("block_sched (no append node)", True, after="last"),
    Variant("block_sched + empty, after all 8", True, "empty"),
    *append_variants("S8 append, after all 8 (main)", "s8"),
    *append_variants("S8 append, after all 8, ring in device memory", "s8", ring="device"),
    *append_variants("lean append, after all 8", "lean"),
    *append_variants("lean append, after all 8, ring in device memory", "lean", ring="device"),
    Variant("block_sched + lean append without its fences (ablation: not correct)", True, "append", kernel="nofence"),
    Variant("block_sched + lean append, fence.acq_rel.gpu for membar.gl (a candidate)", True, "append",
            kernel="acqrel"),
    Variant("block_sched + lean append, 10 blocks per node", True, "append", chunks=10),
    Variant("block_sched + lean append, 20 blocks per node", True, "append", chunks=20),
    Variant("every 3rd + S8 append, after all 8", True, "append", kernel="s8", launch_filter=EVERY3),
    Variant("every 3rd + lean append, after all 8", True, "append", launch_filter=EVERY3),
    Variant("every 3rd + PDL append, launch-order edge (this runtime)", True, "append", kernel="pdl", port=2,
            launch_filter=EVERY3, runtime=True),
    *append_variants("lean append, after all 8, a shut replay's blocks leaving early", "fast"),
    Variant("every 3rd + lean append, a shut replay's blocks leaving early", True, "append", kernel="fast",
            launch_filter=EVERY3),
    *append_variants("PDL append, after all 8, launch-order edge from the last (this runtime)", "pdl", port=2,
                     runtime=True),
    Variant("block_sched + PDL append, after all 8, programmatic edge from the last", True, "append", kernel="pdl",
            port=1),
    Variant("block_sched + PDL append, after the last only, launch-order edge", True, "append", after="last",
            kernel="pdl", port=2),
    *append_variants("PDL append, launch-order edge, ring in device memory", "pdl", port=2, ring="device"),
]


def without_fences(ptx: str) -> str:
    """The append kernel with its fences removed: what they cost (an ablation; results may be torn)."""
    return "\n".join(line for line in ptx.splitlines() if "membar" not in line) + "\n"


class Bench:
    def __init__(self, args):
        self.args = args
        self.cuda = cuda = Graphs()
        plain = VADD.read_text()
        probed = instrument(plain, load_probe_argument("block_sched", None))
        self.maps = probed.kernels["vadd"]["maps"]
        self.vadd = cuda.function(plain, "vadd")
        self.vadd_bs = cuda.function(probed.ptx, "vadd")
        self.empty = cuda.function(EMPTY_PTX, "empty")
        self.spin = cuda.function(SPIN_PTX, "spin")
        arch = self._arch()
        texts = {"lean": graph_ring.append_ptx(arch, True), "s8": graph_ring.append_ptx(arch, True, lean=False)}
        texts["nofence"] = without_fences(texts["lean"])
        texts["acqrel"] = texts["lean"].replace("membar.gl;", "fence.acq_rel.gpu;")
        texts["fast"] = graph_ring.append_ptx(arch, True, shut_fast=True)
        if arch >= graph_ring.PDL_ARCH:
            texts["pdl"] = graph_ring.append_ptx(arch, True, pdl=True)
        self.kernels = {k: cuda.function(t, graph_ring.APPEND_KERNEL) for k, t in texts.items()}
        n = args.grid * BLOCK_ELEMENTS
        x, y, out = (cuda.alloc(4 * n) for _ in range(3))
        self.values = [C.c_uint64(x), C.c_uint64(y), C.c_uint64(out), C.c_uint32(n), C.c_uint64(0), C.c_uint64(0)]
        self.plain_params = pointer_array(list(self.values))
        self.empty_params = pointer_array([C.c_uint64(0)])
        self.nodes = [ProbedNode(cuda, self.maps, args.grid) for _ in range(CHAIN)]
        self.chunks = graph_ring.append_chunks([nd.span for nd in self.nodes])
        self.descs = {}
        for ring in ("host", "device"):
            descs = (graph_ring.NodeDesc * CHAIN)(*[nd.desc(ring == "device") for nd in self.nodes])
            self.descs[ring] = cuda.alloc(C.sizeof(descs))
            cuda.write(self.descs[ring], bytes(descs))
        self.keep: list = []  # parameter arrays the graphs were built with

    def _arch(self) -> tuple[int, int]:
        major, minor = C.c_int(), C.c_int()
        dev = C.c_int()
        self.cuda.check("cuCtxGetDevice", C.byref(dev))
        self.cuda.check("cuDeviceGetAttribute", C.byref(major), 75, dev)
        self.cuda.check("cuDeviceGetAttribute", C.byref(minor), 76, dev)
        return major.value, minor.value

    def chain(self, graph, probed: bool) -> list:
        nodes: list = []
        for nd in self.nodes:
            if probed:
                params = pointer_array([*self.values, C.c_uint64(nd.buffer | 1)])
                self.keep.append(params)
                nodes.append(self.cuda.add(graph, nodes[-1:], self.vadd_bs, (self.args.grid, 1, 1), (THREADS, 1, 1),
                                           params))
            else:
                nodes.append(self.cuda.add(graph, nodes[-1:], self.vadd, (self.args.grid, 1, 1), (THREADS, 1, 1),
                                           self.plain_params))
        return nodes

    def build(self, v: Variant) -> C.c_void_p:
        """The variant's executable graph."""
        graph = self.cuda.new_graph()
        nodes = self.chain(graph, v.probed)
        deps = nodes if v.after == "all" else nodes[-1:]
        if v.extra == "empty":
            self.cuda.add(graph, deps, self.empty, (1, 1, 1), (32, 1, 1), self.empty_params)
        elif v.extra == "empty-grid":
            self.cuda.add(graph, deps, self.empty, (self.chunks, CHAIN, 1), (graph_ring.APPEND_THREADS, 1, 1),
                          self.empty_params)
        elif v.extra == "append":
            args = graph_ring.append_params(self.descs[v.ring], v.launch_filter, 0).pointers()
            self.keep.append(args)
            grid, block = (v.chunks or self.chunks, CHAIN, 1), (graph_ring.APPEND_THREADS, 1, 1)
            func = self.kernels[v.kernel]
            if v.runtime:  # one call: every edge, the last one's data saying launch order
                ports = [0] * (len(deps) - 1) + [v.port]
                self.cuda.drv.graph_add_kernel_node(graph.value, [d.value for d in deps], func.value, grid, block,
                                                    C.addressof(args), ports=ports)
            else:
                node = self.cuda.add(graph, deps[:-1] if v.port else deps, func, grid, block, C.addressof(args))
                if v.port:
                    self.cuda.depend(graph, nodes[-1], node, v.port)
        return self.cuda.instantiate(graph)

    def variants(self) -> dict:
        """name -> (executable graph, the variant); a variant this device or driver cannot build is left out."""
        table = {}
        for v in VARIANTS:
            if v.kernel not in self.kernels:
                continue
            try:
                table[v.name] = (self.build(v), v)
            except (RuntimeError, DriverError) as e:  # (a driver without programmatic edges: the others stand)
                print(f"{v.name}: not built: {e}", flush=True)
        return table

    def run(self, exe, v: Variant) -> tuple[float, str]:
        cuda = self.cuda
        for nd in self.nodes:  # the probed variants without an append node run with the gate open
            nd.reset(cuda, v.gate)
        for _ in range(WARMUP):
            cuda.replay(exe)
        cuda.sync()
        times = timed(cuda, self.spin, lambda: cuda.replay(exe), self.args.replays)
        return statistics.median(times), self.check(v.launch_filter) if v.extra == "append" else ""

    def check(self, launch_filter) -> str:
        """After a round of an append variant: every node's counters (replays, written: those the filter
        selects, dropped), its maps zeroed by the append kernel, and its last slot written holding that
        replay's counts: one record per warp (block_sched's count words, the first 4 bytes per warp)."""
        cuda, runs = self.cuda, WARMUP + self.args.replays
        written = selected(launch_filter, runs)
        want = (runs, written, 0)
        wrong = []
        for i, nd in enumerate(self.nodes):
            got = nd.counters(cuda)
            if got != want:
                wrong.append(f"node {i}: replays/written/dropped {got}, want {want}")
            if any(cuda.read(nd.device + nd.dev.maps, nd.span)):
                wrong.append(f"node {i}: maps not zeroed")
            if written:
                warps = self.args.grid * THREADS // 32
                raw = cuda.read(nd.device + nd.dev.slot(written - 1), 4 * warps)
                if raw != (1).to_bytes(4, "little") * warps:
                    wrong.append(f"node {i}: the last slot's counts are not 1 per warp")
        more = f" (and {len(wrong) - 2} more)" if len(wrong) > 2 else ""
        return "ok" if not wrong else "WRONG: " + "; ".join(wrong[:2]) + more


def main() -> None:
    if not VADD.is_file():
        sys.exit(f"append_node_cost.py: the corpus kernel {VADD} is missing (tests/data is needed)")
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--grid", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5, help="all variants, interleaved, this many times")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="rounds run first and not counted")
    ap.add_argument("--json")
    args = ap.parse_args()
    bench = Bench(args)
    table = bench.variants()
    got: dict[str, list[float]] = {name: [] for name in table}
    checks: dict[str, set] = {name: set() for name in table}
    for r in range(args.warmup_rounds + args.rounds):
        for name, (exe, v) in table.items():
            us, check = bench.run(exe, v)
            if r >= args.warmup_rounds:  # (the first round runs faster than the next ones: not counted)
                got[name].append(us)
            checks[name].add(check)
    nd = bench.nodes[0]
    print(f"device: {bench.cuda.name}; chain of {CHAIN} vadd, grid {args.grid} x {THREADS}; block_sched span "
          f"{nd.span} B per node, {nd.ring_layout.nslots} device slots; append grid {bench.chunks} x {CHAIN} x "
          f"{graph_ring.APPEND_THREADS}; {args.replays} replays per round, medians of {args.rounds} rounds")
    print("| variant | µs/replay (median of rounds) | round spread | vs plain | check |")
    print("| --- | ---: | --- | ---: | --- |")
    base = statistics.median(got["plain"])
    rows = []
    for name, xs in got.items():
        med = statistics.median(xs)
        check = " ".join(sorted(c for c in checks[name] if c))
        print(f"| {name} | {med:.2f} | {min(xs):.2f}–{max(xs):.2f} | {med - base:+.2f} | {check} |", flush=True)
        rows.append({"variant": name, "us": med, "rounds": xs, "check": check})
    if args.json:
        Path(args.json).write_text(json.dumps({"device": bench.cuda.name, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
