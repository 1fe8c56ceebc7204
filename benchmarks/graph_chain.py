"""An append-free data path for probed kernels in CUDA graphs, prototyped and timed (issue 24, session 10;
run on the GPU machine, no torch needed; `--ptx-only DIR` runs offline).

    python benchmarks/graph_chain.py [--rounds 7] [--replays 200] [--grid 256] [--json OUT.json]
    python benchmarks/graph_chain.py --ptx-only DIR     # write every kernel's PTX, compile it with ptxas
    python benchmarks/graph_chain.py --simulate         # the dry run on a model of the GPU (graph_chain_sim.py)

The graph is append_node_cost.py's: a chain of 8 of Triton's vector add (256 blocks of 4 warps) built node by
node, block_sched instrumented by the engine. No runtime code runs here: the scheme is built by hand.

**The chain scheme** (no append node, no tickets; the graph's own edges order everything). Probed node p has a head
(device memory: 8 words, then a table of the heads it advances, `HEAD`) and a ring of K slots. Its kernel parameter
is the head's address with bit 0 set (as today's gated pointer); every thread loads the head's first 16 bytes where
it loaded the gate: `cur`, the address of the slot this launch writes (0: write nowhere, the gate shut), and `adv`,
the head of the node this node advances (0: none). A node that completes before p's next launch and after p's
current one advances p: its block 0, thread 0 loads p's head at entry (no thread waits for it) and, before `ret`,
publishes the slot p just wrote (`written` += 1, or `dropped` += 1 when p wrote nowhere) and chooses the slot of
p's next launch: slot `written mod K`, or none when the ring is full (`written - drained >= K`, `drained` being the
host's count of slots it has copied out and zeroed). In the chain node i advances node i-1 (its predecessor: an
edge orders it after i-1's launch, and i-1's next launch comes after this replay, graph launches of one executable
being ordered); node 0 advances node 7, the sink, in the next replay (node 0 precedes node 7 there). A sink's first
advance is skipped (`primed` 0: it has not run yet); after the last replay the host advances it (`host_advance`).
The data of p needs no fence: p's kernel completed before its advancer started.

Where the host's drained count lives and whether a published count is stored into mapped host memory are the
variants (`ChainOpts`): `drained` in the head, written by the host with a copy (`full="device"`), read by the
advancer with the rest of the head; in mapped host memory and read across PCIe only when the head's cached copy
says full (`"host-cached"`) or on every advance (`"host-every"`, an ablation); no check (`"none"`: slots wrap,
correct only while the ring has room for every replay, as in the timed rounds). `mirror`: the published count
also stored into mapped host memory on every publication (`"every"`) or every 16th (`"batch"`), else the host
reads the heads with one copy. `table`: the advanced heads taken from the head's table, thread k of block 0
advancing the k-th (loaded beside `cur`: no extra round trip), in the chain and in a star (node 7 advancing
nodes 0-6, node 0 node 7), the form a graph with joins needs.

**The host variant**: the slot chosen per replay on the host, `cuGraphExecKernelNodeSetParams` on each probed
node before each `cuGraphLaunch` (the slot's address as the kernel's parameter, untagged: no gate load).

Measures, GPU alone (a spin kernel holds the GPU while the host enqueues the replays): per-replay CUDA-event
medians of `--replays` replays, every row once per round, rounds interleaved, the first round not counted; the
median over rounds and its spread; and the host's µs per replay enqueued (the loop's wall time / replays,
its CUDA event record included). Every probed row is checked exactly after every round (`check_*`).
Then `--drain-replays` replays of the candidate with a ring of `--drain-slots` slots and a host thread draining
(copy out, check, zero, count) while they run, and a ring of 8 slots nobody drains: written 8, dropped the rest.
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_cost import BLOCK_ELEMENTS, SPIN_PTX, THREADS, VADD  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neutrino.engine import instrument  # noqa: E402
from neutrino.toolbox import load_probe_argument  # noqa: E402

CHAIN = 8
WARMUP = 5
WORDS = 64  # a head's words: cur, adv, ring, mask|stride, written, dropped|primed, drained, mirror (u64 each)
TABLE, TARGETS = 64, 8  # then (ChainOpts.table) the heads its threads 0..7 of block 0 advance (0: none)
HEAD = TABLE + 8 * TARGETS
CUR, ADV, RING, GEOM, WRITTEN, DROPPED, DRAINED, MIRROR = range(0, 64, 8)
TAG = 16  # the last 16 bytes of a slot: the (1-based) replay number of the launch it was given to
PUBLISHED, HOST_DRAINED = 0, 8  # a node's mirror in mapped host memory (64 bytes each)
BATCH = 16  # mirror="batch": the published count stored when it is a multiple of this
SPIN_NS_PER_STEP = 100_000  # the spin holds the GPU this long per step enqueued (a slower host: flagged)

_GATE = """\tmov.u32 \t%nt_gate, 0;
\t@%nt_gated ld.global.u32 \t%nt_gate, [%nt_buf_block_sched+-8];
\tsetp.eq.u32 \t%nt_on, %nt_gate, 0;
"""


@attrs.frozen
class ChainOpts:
    """One chain-scheme kernel: the full check (`full`), the mirror of the published count (`mirror`: "none",
    "every", "batch"), where the advance runs (`where`: "exit", its loads at entry; "exit-late", its loads at
    exit too; "exit-smem", the head copied into shared memory at entry (cp.async, sm_80+) and read there at exit;
    "entry", all of it at entry, lane 0 diverging from its warp; "none", no advance: the head load alone, every
    launch writing the slot the host gave it), and a system-scope fence before the mirror's store (`fence`)."""

    full: str = "device"
    mirror: str = "none"
    where: str = "exit"
    fence: bool = False
    table: bool = False  # the advanced heads in the head's table, thread k of block 0 the k-th (else `adv`)
    star: bool = False  # (with table) node 7 advances nodes 0..6, node 0 node 7; else node i node i-1
    engine: bool = False  # the kernel is the engine's graph_chain variant (the runtime's), not built here by hand
    late: bool = False  # (with engine) its late_head option: the head's words consumed where the probe needs them


def chain_ptx(probed: str, o: ChainOpts) -> str:
    """block_sched's vadd with the gate load replaced by the head load, and the advance added."""
    if probed.count(_GATE) != 1 or probed.count("\tret;") != 1:
        raise SystemExit("graph_chain.py: the instrumented vadd has not the expected gate load and single ret")
    regs = ("\t.reg .b64 %ch_cur, %ch_adv, %ch_t<8>, %ch_next, %ch_off, %ch_k, %ch_used, %ch_tag, %ch_low;\n"
            "\t.reg .b32 %ch_mask, %ch_stride, %ch_idx;\n\t.reg .pred %ch_go, %ch_not, %ch_had, %ch_full, %ch_has, "
            "%ch_pub;\n")
    head = "\t// chain: begin\n\tmov.u64 \t%ch_cur, 0;\n\tmov.u64 \t%ch_adv, 0;\n"
    if o.table:  # thread k < TARGETS of block 0 loads the k-th entry, in parallel with the slot's address
        head += ("\t@%nt_gated ld.global.u64 \t%ch_cur, [%nt_buf_block_sched];\n"
                 f"\tsetp.lt.and.u32 \t%ch_go, %nt_tlin, {TARGETS}, %nt_gated;\n"
                 "\tsetp.eq.and.u64 \t%ch_go, %nt_blin, 0, %ch_go;\n"
                 "\tmul.wide.u32 \t%ch_off, %nt_tlin, 8;\n\tadd.u64 \t%ch_off, %ch_off, %nt_buf_block_sched;\n"
                 f"\t@%ch_go ld.global.u64 \t%ch_adv, [%ch_off+{TABLE}];\n")
    else:  # thread 0 of block 0 advances the one head in `adv`
        head += ("\t@%nt_gated ld.global.v2.u64 \t{%ch_cur, %ch_adv}, [%nt_buf_block_sched];\n"
                 "\tsetp.eq.u32 \t%ch_go, %nt_tlin, 0;\n\tsetp.eq.and.u64 \t%ch_go, %nt_blin, 0, %ch_go;\n")
    head += ("\t@%nt_gated mov.u64 \t%nt_buf_block_sched, %ch_cur;\n"
             "\tsetp.ne.u64 \t%nt_on, %nt_buf_block_sched, 0;\n"
             "\tsetp.ne.and.u64 \t%ch_go, %ch_adv, 0, %ch_go;\n")
    if o.where == "exit-smem":  # the head copied into shared memory at entry, read at exit: no registers held
        regs += "\t.shared .align 16 .b8 ch_smem[64];\n"
        head += "".join(f"\t@%ch_go cp.async.cg.shared.global \t[ch_smem+{b}], [%ch_adv+{b}], 16;\n"
                        for b in range(0, WORDS, 16))
    elif o.where in ("exit", "entry"):
        head += _advance_loads(o, "global")
    late = {"exit-late": _advance_loads(o, "global"),
            "exit-smem": "\tcp.async.wait_all;\n" + _advance_loads(o, "shared")}.get(o.where, "")
    adv = "\t// chain: begin\n" + late + _advance(o) + "\t// chain: end\n" if o.where != "none" else ""
    head += "\t// chain: end\n"
    entry, exit_ = (adv, "") if o.where == "entry" else ("", adv)
    out = probed.replace(_GATE, head + entry, 1).replace("\tret;", exit_ + "\tret;", 1)
    return out.replace("\t.reg .pred \t%p<3>;", regs + "\t.reg .pred \t%p<3>;", 1)


def _advance_loads(o: ChainOpts, space: str) -> str:
    """The advanced head's words the advance uses (only those: loaded at entry, they stay live across the
    kernel's body, in registers), by its one thread, from the head (`space` "global") or its copy ("shared")."""
    words = [0, 2, 3, 4, 5] + ([6] if o.full != "none" else []) + ([7] if o.mirror != "none" or
                                                                    o.full.startswith("host") else [])
    out, i = [], 0
    while i < len(words):
        w = words[i]
        op, at = ("ld.relaxed.gpu.global", "%ch_adv") if space == "global" else ("ld.shared", "ch_smem")
        if i + 1 < len(words) and words[i + 1] == w + 1 and w % 2 == 0:
            out.append(f"\t@%ch_go {op}.v2.u64 \t{{%ch_t{w}, %ch_t{w + 1}}}, [{at}+{8 * w}];\n")
            i += 2
        else:
            out.append(f"\t@%ch_go {op}.u64 \t%ch_t{w}, [{at}+{8 * w}];\n")
            i += 1
    return "".join(out)


def _advance(o: ChainOpts) -> str:
    """PTX of one advance (the head of the advanced node T at %ch_adv, its 8 words in %ch_t0..7): what
    `host_advance` does on the host."""
    lines = ["\tnot.pred \t%ch_not, %ch_go;", "\t@%ch_not bra \t$CH_DONE;",
             "\tshr.u64 \t%ch_low, %ch_t5, 32;", "\tsetp.eq.u64 \t%ch_has, %ch_low, 0;", "\t@%ch_has bra \t$CH_PRIME;",
             "\tsetp.ne.u64 \t%ch_had, %ch_t0, 0;",
             "\t@%ch_had add.u64 \t%ch_t4, %ch_t4, 1;", "\tnot.pred \t%ch_not, %ch_had;",
             "\t@%ch_not add.u64 \t%ch_t5, %ch_t5, 1;"]
    if o.mirror != "none":
        if o.mirror == "batch":
            lines += [f"\tand.b64 \t%ch_low, %ch_t4, {BATCH - 1};",
                      "\tsetp.eq.and.u64 \t%ch_pub, %ch_low, 0, %ch_had;"]
        else:
            lines.append("\tmov.pred \t%ch_pub, %ch_had;")
        if o.fence:
            lines.append("\tfence.acq_rel.sys;")
        lines.append(f"\t@%ch_pub st.relaxed.sys.global.u64 \t[%ch_t7+{PUBLISHED}], %ch_t4;")
    lines += ["\tcvt.u32.u64 \t%ch_mask, %ch_t3;", "\tshr.u64 \t%ch_low, %ch_t3, 32;",
              "\tcvt.u32.u64 \t%ch_stride, %ch_low;", "\tcvt.u32.u64 \t%ch_idx, %ch_t4;",
              "\tand.b32 \t%ch_idx, %ch_idx, %ch_mask;", "\tmul.wide.u32 \t%ch_off, %ch_idx, %ch_stride;",
              "\tadd.u64 \t%ch_next, %ch_t2, %ch_off;"]
    if o.full != "none":
        lines += ["\tcvt.u64.u32 \t%ch_k, %ch_mask;", "\tadd.u64 \t%ch_k, %ch_k, 1;"]
        if o.full == "host-every":
            lines.append(f"\tld.acquire.sys.global.u64 \t%ch_t6, [%ch_t7+{HOST_DRAINED}];")
        lines += ["\tsub.u64 \t%ch_used, %ch_t4, %ch_t6;", "\tsetp.ge.u64 \t%ch_full, %ch_used, %ch_k;"]
        if o.full == "host-cached":  # the cached count says full: read the host's (rare), keep it in the head
            lines += [f"\t@%ch_full ld.acquire.sys.global.u64 \t%ch_t6, [%ch_t7+{HOST_DRAINED}];",
                      f"\t@%ch_full st.relaxed.gpu.global.u64 \t[%ch_adv+{DRAINED}], %ch_t6;",
                      "\tsub.u64 \t%ch_used, %ch_t4, %ch_t6;", "\tsetp.ge.u64 \t%ch_full, %ch_used, %ch_k;"]
        lines.append("\t@%ch_full mov.u64 \t%ch_next, 0;")
    lines += ["\tand.b64 \t%ch_low, %ch_t5, 4294967295;", "\tadd.u64 \t%ch_tag, %ch_t4, %ch_low;",
              "\tadd.u64 \t%ch_tag, %ch_tag, 1;", "\tsetp.ne.u64 \t%ch_has, %ch_next, 0;",
              "\tcvt.u64.u32 \t%ch_off, %ch_stride;", "\tadd.u64 \t%ch_off, %ch_off, %ch_next;",
              f"\t@%ch_has st.global.u64 \t[%ch_off+-{TAG}], %ch_tag;",
              f"\tst.relaxed.gpu.global.u64 \t[%ch_adv+{CUR}], %ch_next;",
              f"\tst.relaxed.gpu.global.v2.u64 \t[%ch_adv+{WRITTEN}], {{%ch_t4, %ch_t5}};",
              "\tbra \t$CH_DONE;", "$CH_PRIME:", "\tor.b64 \t%ch_t5, %ch_t5, 4294967296;",
              f"\tst.relaxed.gpu.global.u64 \t[%ch_adv+{DROPPED}], %ch_t5;", "$CH_DONE:"]
    return "\n".join(lines) + "\n"


@attrs.frozen
class Row:
    """One timed row: `kind` plain / probed (gated, gate open, no append) / untagged (no gate load) / append
    (main's: session 8's kernel after all 8) / chain (`opts`) / setparams."""

    name: str
    kind: str
    opts: ChainOpts | None = None


ROWS = [
    Row("plain", "plain"),
    Row("block_sched, probe code only (gated pointer, gate open; no append)", "probed"),
    Row("block_sched, untagged pointer (no gate load; no append)", "untagged"),
    Row("block_sched + main's append node (S8, after all 8)", "append"),
    Row("chain's head load only (no advance: every replay writes slot 0)", "chain", ChainOpts(where="none")),
    Row("chain, no full check (slots wrap)", "chain", ChainOpts(full="none")),
    Row("chain + full check, host's count in the head (candidate)", "chain", ChainOpts()),
    Row("chain + full check, host's count in mapped memory, read when the head's copy says full", "chain",
        ChainOpts(full="host-cached")),
    Row("chain + full check, host's count read across PCIe every advance (ablation)", "chain",
        ChainOpts(full="host-every")),
    Row("chain (candidate) + published count stored to mapped memory every advance", "chain",
        ChainOpts(mirror="every")),
    Row("chain (candidate) + that store after fence.acq_rel.sys", "chain", ChainOpts(mirror="every", fence=True)),
    Row(f"chain (candidate) + published count stored every {BATCH}th", "chain", ChainOpts(mirror="batch")),
    Row("chain (candidate), the advance at entry (lane 0 diverging)", "chain", ChainOpts(where="entry")),
    Row("chain (candidate), the head's words loaded at exit (fewer registers, a round trip on the tail)", "chain",
        ChainOpts(where="exit-late")),
    Row("chain (candidate), the head copied to shared memory at entry (cp.async), read at exit", "chain",
        ChainOpts(where="exit-smem")),
    Row("chain (candidate), the advanced heads in a table (thread k of block 0 the k-th)", "chain",
        ChainOpts(table=True)),
    Row("star (candidate, table): node 7 advances nodes 0-6 with threads 0-6, node 0 node 7", "chain",
        ChainOpts(table=True, star=True)),
    Row("chain from the engine: instrument(graph_chain=True, late_head=False), the head tested at entry", "chain",
        ChainOpts(engine=True)),
    Row("chain from the engine, late_head (the runtime's kernel): the head's words used at the exits", "chain",
        ChainOpts(engine=True, late=True)),
    Row("host SetParams: 8 x cuGraphExecKernelNodeSetParams + cuGraphLaunch per replay", "setparams"),
]
CANDIDATE = ChainOpts()
ENGINE = ChainOpts(engine=True)
ENGINE_LATE = ChainOpts(engine=True, late=True)


def kernels(plain: str) -> dict[str, str]:
    """name -> PTX of every kernel the rows run (vadd's entry is `vadd` in each)."""
    probed = instrument(plain, load_probe_argument("block_sched", None)).ptx
    out = {"plain": plain, "block_sched": probed}
    for r in ROWS:
        if r.opts is not None:
            out[chain_name(r.opts)] = engine_chain_ptx(plain, r.opts.late) if r.opts.engine else chain_ptx(probed, r.opts)
    return out


def engine_chain_ptx(plain: str, late: bool = False) -> str:
    """block_sched's vadd as the engine's graph_chain variant makes it (neutrino/passes/graph_chain.py; the head's
    layout is this file's), its head load and advance marked as chain_ptx marks them (for the dry run's model).
    `late`: the late_head option; its rebase before the exit's probe code is marked as run before the probe."""
    text = instrument(plain, load_probe_argument("block_sched", None), graph_chain=True, late_head=late).ptx
    marks = [("\tmov.u64 \t%nt_ch_cur, 0;\n", True),
             ("%nt_L_chain_head:\n" if late else "%nt_ch_t6, [%nt_ch_adv+48];\n", False),
             ("\t@!%nt_ch_go bra \t%nt_L_chain_done0;\n", True), ("%nt_L_chain_done0:\n", False)]
    if late:
        marks[1:1] = [("\tmov.u64 \t%nt_ch_d, 0;\n", "rebase"), ("\tsetp.ne.u64 \t%nt_on, %nt_buf_block_sched, 0;\n", False)]
    for line, before in marks:
        if text.count(line) != 1:
            raise SystemExit(f"graph_chain.py: the engine's chain variant has not one {line.strip()!r}")
        at = text.index(line) + (0 if before else len(line))
        mark = {True: "\t// chain: begin\n", "rebase": "\t// chain: begin\n\t// chain: before the probe\n"}
        text = text[:at] + mark.get(before, "\t// chain: end\n") + text[at:]
    return text


def chain_name(o: ChainOpts) -> str:
    if o.engine:
        return "chain_engine_late" if o.late else "chain_engine"
    return f"chain_{o.full}_{o.mirror}_{o.where}{'_fence' if o.fence else ''}{'_table' if o.table else ''}"


def ptx_only(folder: Path) -> int:
    """Offline: write every kernel and compile it for sm_90a with ptxas (registers, spills)."""
    if shutil.which("ptxas") is None:
        print("graph_chain.py --ptx-only: ptxas is not on PATH (the CUDA toolkit's bin is needed)")
        return 2
    folder.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, text in kernels(VADD.read_text()).items():
        path = folder / f"{name}.ptx"
        path.write_text(text)
        r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(path), "-o", str(path.with_suffix(".cubin"))],
                           capture_output=True, text=True)
        info = " ".join(line.split("info    : ")[-1] for line in r.stderr.splitlines()
                        if "Used" in line or "spill" in line)
        print(f"{name}: {'ok' if r.returncode == 0 else 'FAILED'} {info if r.returncode == 0 else r.stderr.strip()}")
        failed += r.returncode != 0
    return 1 if failed else 0


# --- the protocol on the host: what the advancer does (the sink's last advance), and the checks ---------------

def unpack_head(raw: bytes) -> list[int]:
    return [int.from_bytes(raw[i:i + 8], "little") for i in range(0, WORDS, 8)]


def pack_head(words: list[int]) -> bytes:
    return b"".join(w.to_bytes(8, "little") for w in words)


def host_advance(h: list[int], host_drained: int | None = None) -> list[int]:
    """The advance of a head's words `h` (the PTX of `_advance`, full check against the head's `drained`, or
    `host_drained` when given), on the host: a sink's last launch, after the stream was synchronised. The sink
    is left unprimed: its next advance (on the device, in the next replay) is skipped."""
    h = list(h)
    dropped, primed = h[DROPPED // 8] & 0xFFFFFFFF, h[DROPPED // 8] >> 32
    if not primed:
        return h
    if h[CUR // 8]:
        h[WRITTEN // 8] += 1
    else:
        dropped += 1
    written, mask, stride = h[WRITTEN // 8], h[GEOM // 8] & 0xFFFFFFFF, h[GEOM // 8] >> 32
    drained = h[DRAINED // 8] if host_drained is None else host_drained
    nxt = h[RING // 8] + (written & mask) * stride if written - drained < mask + 1 else 0
    h[CUR // 8], h[DROPPED // 8] = nxt, dropped
    return h


def slot_ok(raw: bytes, warps: int) -> bool:
    """A slot holds one complete block_sched result: every warp's count 1 and its record filled (start and
    elapsed above 0, an SM id below 1024: probe_cost.block_sched_check's test)."""
    import numpy as np

    counts = np.frombuffer(raw, dtype="<u4", count=warps)
    records_at = (4 * warps + 15) // 16 * 16
    rec = np.frombuffer(raw, dtype=[("start", "<u8"), ("elapsed", "<u4"), ("sm", "<u4")], count=warps,
                        offset=records_at)
    return bool((counts == 1).all() and (rec["start"] > 0).all() and (rec["elapsed"] > 0).all()
                and (rec["sm"] < 1024).all())


def span_bytes(grid: int) -> int:
    warps = grid * THREADS // 32
    return (4 * warps + 15) // 16 * 16 + 16 * warps


# --- on the GPU --------------------------------------------------------------------------------------------------

class Bench:
    """The rows' graphs and memory. `cuda`: a model of the GPU (graph_chain_sim.SimCuda: the offline dry run,
    no append node) instead of the real one (append_node_cost's driver and its append node)."""

    def __init__(self, args, cuda=None):
        self.args = args
        if cuda is None:
            from append_node_cost import Bench as AppendBench  # (its driver, the vadd's memory, main's append node)

            self.ab = AppendBench(args)
            cuda, self.values = self.ab.cuda, self.ab.values
        else:
            self.ab = None
            n = args.grid * BLOCK_ELEMENTS
            self.values = [*(C.c_uint64(cuda.alloc(4 * n)) for _ in range(3)), C.c_uint32(n), C.c_uint64(0),
                           C.c_uint64(0)]
        self.cuda = cuda
        self.texts = kernels(VADD.read_text())
        self.funcs: dict = {}  # name -> the loaded kernel (loaded when a row needs it)
        self.spin = cuda.function(SPIN_PTX, "spin")
        self.warps = args.grid * THREADS // 32
        self.span = span_bytes(args.grid)
        self.stride = (self.span + TAG + 255) // 256 * 256
        self.k = args.slots
        self.heads = cuda.alloc(CHAIN * HEAD)
        self.rings = [cuda.alloc(self.k * self.stride) for _ in range(CHAIN)]
        host = C.c_void_p()
        cuda.check("cuMemHostAlloc", C.byref(host), C.c_size_t(CHAIN * 64), 3)
        C.memset(host, 0, CHAIN * 64)
        self.mirror_host = host.value
        dev = C.c_uint64()
        cuda.check("cuMemHostGetDevicePointer_v2", C.byref(dev), host, 0)
        self.mirror = dev.value
        self.untagged_buf = cuda.alloc(self.span)
        self.ctx = C.c_void_p()  # (the drainer thread makes it current)
        cuda.check("cuCtxGetCurrent", C.byref(self.ctx))
        self.drain_stream = C.c_void_p()
        cuda.check("cuStreamCreate", C.byref(self.drain_stream), 1)
        self.keep: list = []
        self.setparams_nodes: list = []

    # memory ------------------------------------------------------------------------------------------------
    def head(self, i: int) -> int:
        return self.heads + HEAD * i

    def mirror_word(self, i: int, off: int) -> C.c_uint64:
        return C.c_uint64.from_address(self.mirror_host + 64 * i + off)

    def reset_chain(self, k: int, star: bool = False) -> None:
        """Before a round: rings and mirrors zero; each head's launch 0 given slot 0 (its tag 1); node 0
        advances node 7 (the sink: unprimed), node i node i-1 (`star`: node 7 nodes 0..6; in `adv` and in the
        table's first entry, or the table's first 7 for node 7)."""
        for ring in self.rings:
            self.cuda.check("cuMemsetD8_v2", C.c_uint64(ring), C.c_ubyte(0), C.c_size_t(self.k * self.stride))
        C.memset(self.mirror_host, 0, CHAIN * 64)
        heads = b""
        for i in range(CHAIN):
            primed = 0 if i == CHAIN - 1 else 1
            adv = self.head((i - 1) % CHAIN)
            targets = [adv]
            if star:
                targets = [self.head(j) for j in range(CHAIN - 1)] if i == CHAIN - 1 else [adv] if i == 0 else []
                adv = targets[0] if targets else 0
            heads += pack_head([self.rings[i], adv, self.rings[i], (k - 1) | self.stride << 32, 0, primed << 32, 0,
                                self.mirror + 64 * i])
            heads += pack_head(targets + [0] * (TARGETS - len(targets)))
            self.cuda.write(self.rings[i] + self.stride - TAG, (1).to_bytes(8, "little"))
        self.cuda.write(self.heads, heads)
        self.cuda.check("cuCtxSynchronize")  # (the null stream's memsets and copies done before our stream's replays)

    def read_heads(self) -> list[list[int]]:
        raw = self.cuda.read(self.heads, CHAIN * HEAD)
        return [unpack_head(raw[HEAD * i:HEAD * i + WORDS]) for i in range(CHAIN)]

    def finish_sink(self, o: ChainOpts) -> None:
        """After the stream's sync: the host advances the sink (its last launch's slot published)."""
        h = self.read_heads()[CHAIN - 1]
        host_drained = self.mirror_word(CHAIN - 1, HOST_DRAINED).value if o.full.startswith("host") else None
        new = host_advance(h, host_drained)
        if o.mirror != "none" and new[WRITTEN // 8] != h[WRITTEN // 8]:
            self.mirror_word(CHAIN - 1, PUBLISHED).value = new[WRITTEN // 8]
        nxt = new[CUR // 8]
        if nxt:
            tag = new[WRITTEN // 8] + (new[DROPPED // 8] & 0xFFFFFFFF) + 1
            self.cuda.write(nxt + self.stride - TAG, tag.to_bytes(8, "little"))
        self.cuda.write(self.head(CHAIN - 1), pack_head(new))
        self.cuda.check("cuCtxSynchronize")

    # graphs ------------------------------------------------------------------------------------------------
    def build(self, row: Row):
        ab = self.ab
        if row.kind in ("plain", "probed", "append"):
            from append_node_cost import Variant

            v = {"plain": Variant("plain", False, after="last"),
                 "probed": Variant("probed", True, after="last"),
                 "append": Variant("append", True, "append", kernel="s8")}[row.kind]
            return ab.build(v), v
        graph = self.cuda.new_graph()
        nodes: list = []
        func = self.func(chain_name(row.opts) if row.kind == "chain" else "block_sched")
        values = []
        for i in range(CHAIN):
            ptr = {"chain": self.head(i) | 1, "untagged": self.untagged_buf, "setparams": self.rings[i]}[row.kind]
            value = C.c_uint64(ptr)
            params = _pointer_array([*self.values, value])
            self.keep.append(params)
            values.append((value, params))
            nodes.append(self.cuda.add(graph, nodes[-1:], func, (self.args.grid, 1, 1), (THREADS, 1, 1), params))
        exe = self.cuda.instantiate(graph)
        if row.kind == "setparams":
            self.setparams_nodes = [(node, value, self._node_params(func, params))
                                    for node, (value, params) in zip(nodes, values)]
        return exe, None

    def func(self, name: str):
        if name not in self.funcs:
            self.funcs[name] = self.cuda.function(self.texts[name], "vadd")
        return self.funcs[name]

    def _node_params(self, func, params):
        from neutrino.runtime.driver import KernelNodeParamsV2

        grid = self.args.grid
        p = KernelNodeParamsV2(func=func, gridDimX=grid, gridDimY=1, gridDimZ=1, blockDimX=THREADS, blockDimY=1,
                               blockDimZ=1, sharedMemBytes=0, kernelParams=C.cast(params, C.POINTER(C.c_void_p)))
        self.keep.append(p)
        return p

    def setparams_launch(self, exe, replay: int) -> None:
        """The host's slot for this replay: replay mod K of each node's ring, set on every probed node."""
        cuda = self.cuda
        for i, (node, value, p) in enumerate(self.setparams_nodes):
            value.value = self.rings[i] + (replay % self.k) * self.stride
            cuda.check("cuGraphExecKernelNodeSetParams_v2", exe, node, C.byref(p))
        cuda.replay(exe)

    def host_costs(self, n: int = 2000) -> str:
        """The host's µs per cuGraphExecKernelNodeSetParams_v2 (on an executable graph that is not running),
        beside a ctypes call of the driver that does nothing (cuCtxGetCurrent): the part of it that is Python's."""
        exe, _ = self.build(Row("setparams (host)", "setparams"))
        cuda, (node, value, p) = self.cuda, self.setparams_nodes[0]
        t0 = time.perf_counter()
        for i in range(n):
            value.value = self.rings[0] + (i % self.k) * self.stride
            cuda.check("cuGraphExecKernelNodeSetParams_v2", exe, node, C.byref(p))
        per = (time.perf_counter() - t0) * 1e6 / n
        ctx = C.c_void_p()
        t0 = time.perf_counter()
        for _ in range(n):
            cuda.check("cuCtxGetCurrent", C.byref(ctx))
        floor = (time.perf_counter() - t0) * 1e6 / n
        return (f"host: cuGraphExecKernelNodeSetParams_v2 {per:.2f} µs per call, a no-op driver call through "
                f"ctypes (cuCtxGetCurrent) {floor:.2f} µs: ~{per - floor:.2f} µs per probed node per replay")

    # one round of a row ------------------------------------------------------------------------------------
    def run(self, exe, row: Row, v) -> tuple[float, float, str]:
        cuda, ab = self.cuda, self.ab
        if v is not None:
            for nd in ab.nodes:
                nd.reset(cuda, v.gate)
        if row.kind == "chain":
            self.reset_chain(self.k, row.opts.star)
        elif row.kind in ("setparams", "untagged"):  # (no result of an earlier row may pass for this one's)
            for buf, size in [(r, self.k * self.stride) for r in self.rings] + [(self.untagged_buf, self.span)]:
                cuda.check("cuMemsetD8_v2", C.c_uint64(buf), C.c_ubyte(0), C.c_size_t(size))
            cuda.check("cuCtxSynchronize")
        counter = [0]

        def step():
            if row.kind == "setparams":
                self.setparams_launch(exe, counter[0])
                counter[0] += 1
            else:
                cuda.replay(exe)

        for _ in range(WARMUP):
            step()
        cuda.sync()
        gpu, host = timed_host(cuda, self.spin, step, self.args.replays)
        check = "HOST-BOUND (the GPU waited for the host) " if host * 1000 > SPIN_NS_PER_STEP else ""
        runs = WARMUP + self.args.replays
        if row.kind == "append":
            check += ab.check(v.launch_filter)
        elif row.kind == "chain":
            self.finish_sink(row.opts)
            check += self.check_chain(row.opts, runs)
        elif row.kind == "setparams":
            check += self.check_rings(runs)
        elif row.kind == "untagged":  # (all 8 nodes write the one buffer: complete after every replay)
            check += "ok" if slot_ok(cuda.read(self.untagged_buf, self.span), self.warps) else "WRONG: incomplete"
        return statistics.median(gpu), host, check

    def check_rings(self, runs: int, tags: bool = False) -> str:
        """Slots 0..runs-1 of every ring hold one complete result (and, `tags`, the tag of their launch);
        the slots after them are untouched (zero)."""
        wrong = []
        for i, ring in enumerate(self.rings):
            raw = self.cuda.read(ring, self.k * self.stride)
            for s in range(self.k):
                slot = raw[s * self.stride:(s + 1) * self.stride]
                if s < runs:
                    if not slot_ok(slot, self.warps):
                        wrong.append(f"node {i} slot {s}: incomplete")
                    if tags and int.from_bytes(slot[-TAG:-TAG + 8], "little") != s + 1:
                        wrong.append(f"node {i} slot {s}: tag {int.from_bytes(slot[-TAG:-TAG + 8], 'little')}")
                elif _nonzero(slot[:-TAG]) or (s > runs and _nonzero(slot)):
                    wrong.append(f"node {i} slot {s}: written, no launch had it")
        return _verdict(wrong)

    def check_chain(self, o: ChainOpts, runs: int) -> str:
        """Every node: `runs` launches advanced, all written (the ring has room), the mirror's count (when
        stored) and every slot's result and tag exact."""
        wrong = []
        if o.where == "none":
            return self.check_unadvanced(runs)
        for i, h in enumerate(self.read_heads()):
            written, dropped = h[WRITTEN // 8], h[DROPPED // 8] & 0xFFFFFFFF
            if (written, dropped) != (runs, 0):
                wrong.append(f"node {i}: written/dropped {written}/{dropped}, want {runs}/0")
            pub = self.mirror_word(i, PUBLISHED).value
            want = {"none": 0, "every": runs, "batch": runs // BATCH * BATCH}[o.mirror]
            if o.mirror == "batch" and i == CHAIN - 1:
                want = runs  # (the host's own advance stores the count whatever it is)
            if pub != want:
                wrong.append(f"node {i}: mirror {pub}, want {want}")
        return _verdict(wrong) if wrong else self.check_rings(runs, tags=True)

    def check_unadvanced(self, runs: int) -> str:
        """No advance: the heads as the host left them (the sink never primed, so the host does not advance it
        either), slot 0 of every node complete, slot 1 untouched."""
        wrong = []
        for i, h in enumerate(self.read_heads()):
            if h[WRITTEN // 8] or h[DROPPED // 8] & 0xFFFFFFFF:
                wrong.append(f"node {i}: written/dropped {h[WRITTEN // 8]}/{h[DROPPED // 8] & 0xFFFFFFFF}")
            raw = self.cuda.read(self.rings[i], 2 * self.stride)
            if not slot_ok(raw[:self.stride], self.warps) or _nonzero(raw[self.stride:]):
                wrong.append(f"node {i}: slot 0 incomplete or slot 1 written")
        return _verdict(wrong)

    # the drained run -------------------------------------------------------------------------------------
    def drained_run(self, o: ChainOpts, replays: int, k: int, drain: bool) -> str:
        """`replays` replays of the chain with a ring of `k` slots, a host thread draining while they run
        (`drain`): every slot it finds published is copied out, checked (complete, its tag above the last one
        of that node), zeroed, then counted into the host's drained count (the head's, by a copy, or the mirror's).
        After the sync and the sink's last advance: per node written + dropped = replays, drained = written."""
        cuda = self.cuda
        row = Row("drained", "chain", o)
        exe, _ = self.build(row)
        self.reset_chain(k)
        stop = threading.Event()
        state = {"drained": [0] * CHAIN, "last_tag": [0] * CHAIN, "wrong": [], "passes": 0}
        lock = threading.Lock()

        def drain_pass():
            with lock:
                heads = self.read_heads()
                for i, h in enumerate(heads):
                    d = state["drained"][i]
                    while d < h[WRITTEN // 8]:
                        addr = self.rings[i] + (d % k) * self.stride
                        raw = cuda.read(addr, self.stride)
                        tag = int.from_bytes(raw[-TAG:-TAG + 8], "little")
                        if not slot_ok(raw, self.warps) or not state["last_tag"][i] < tag <= replays:
                            state["wrong"].append(f"node {i} slot {d % k}: tag {tag} after "
                                                  f"{state['last_tag'][i]}, complete {slot_ok(raw, self.warps)}")
                        state["last_tag"][i] = tag
                        cuda.check("cuMemsetD8Async", C.c_uint64(addr), C.c_ubyte(0), C.c_size_t(self.stride),
                                   self.drain_stream)
                        d += 1
                    if d != state["drained"][i]:
                        # the zeroing done before the device may hand the slots out again
                        cuda.check("cuStreamSynchronize", self.drain_stream)
                        state["drained"][i] = d
                        if o.full == "device":
                            cuda.write(self.head(i) + DRAINED, d.to_bytes(8, "little"))
                        else:
                            self.mirror_word(i, HOST_DRAINED).value = d
                state["passes"] += 1

        def drainer():
            try:
                cuda.check("cuCtxSetCurrent", self.ctx)
                while not stop.is_set():
                    drain_pass()
                    time.sleep(0.00005)
            except RuntimeError as e:  # (told in the verdict: the counts then disagree too)
                state["wrong"].append(f"the drainer failed: {e}")

        thread = threading.Thread(target=drainer, daemon=True)
        if drain:
            thread.start()
        for n in range(replays):
            cuda.replay(exe)
            if n % 10 == 9:
                time.sleep(0.004)  # (the host's pace: some replays find the ring full, some a free slot)
        cuda.sync()
        stop.set()
        if drain:
            thread.join()
        self.finish_sink(o)
        if drain:
            drain_pass()
        wrong = list(state["wrong"])
        written_all, dropped_all = [], []
        for i, h in enumerate(self.read_heads()):
            written, dropped = h[WRITTEN // 8], h[DROPPED // 8] & 0xFFFFFFFF
            written_all.append(written)
            dropped_all.append(dropped)
            if written + dropped != replays:
                wrong.append(f"node {i}: written {written} + dropped {dropped} != {replays}")
            if drain and state["drained"][i] != written:
                wrong.append(f"node {i}: drained {state['drained'][i]} != written {written}")
            if not drain and (written, dropped) != (k, replays - k):
                wrong.append(f"node {i}: written/dropped {written}/{dropped}, want {k}/{replays - k}")
        summary = (f"{replays} replays, ring {k}, {'drained by a host thread' if drain else 'not drained'}: "
                   f"written {written_all}, dropped {dropped_all}"
                   + (f", {state['passes']} drain passes" if drain else ""))
        return summary + ": " + _verdict(wrong)


def _nonzero(b: bytes) -> bool:
    return b != bytes(len(b))


def _verdict(wrong: list[str]) -> str:
    more = f" (and {len(wrong) - 2} more)" if len(wrong) > 2 else ""
    return "ok" if not wrong else "WRONG: " + "; ".join(wrong[:2]) + more


def _pointer_array(values: list) -> C.Array:
    arr = (C.c_void_p * len(values))(*[C.addressof(v) for v in values])
    arr._keep = values  # noqa: SLF001 - the values live as long as the array
    return arr


def timed_host(cuda, spin, step, n: int) -> tuple[list[float], float]:
    """probe_cost.timed, and the host's µs per step (enqueue and event record) while the spin holds the GPU."""
    events = [cuda.event() for _ in range(n + 1)]
    ns = C.c_uint64(2_000_000 + n * SPIN_NS_PER_STEP)
    cuda.launch(spin, 1, 1, _pointer_array([ns]))
    cuda.record(events[0])
    t0 = time.perf_counter()
    for i in range(n):
        step()
        cuda.record(events[i + 1])
    host = (time.perf_counter() - t0) * 1e6 / n
    cuda.sync()
    return [cuda.elapsed_us(events[i], events[i + 1]) for i in range(n)], host


def smoke(bench: Bench, table: dict) -> None:
    """Every row's graph replayed once before any timing: a row whose kernel faults (the context is then lost
    for every row) is named (`FAULT-ROW:`, exit 3) so that graph_chain_gpu.sh can run again without it."""
    for name, (row, exe, v) in table.items():
        try:
            if row.kind == "chain":
                bench.reset_chain(bench.k, row.opts.star)
            if row.kind == "setparams":
                bench.setparams_launch(exe, 0)
            else:
                bench.cuda.replay(exe)
            bench.cuda.sync()
        except RuntimeError as e:
            print(f"FAULT-ROW: {name}\n{e}", flush=True)
            sys.exit(3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--grid", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=7, help="all rows, interleaved, this many times")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="rounds run first and not counted")
    ap.add_argument("--slots", type=int, default=256, help="ring slots per node (a power of 2, >= replays + 5)")
    ap.add_argument("--drain-replays", type=int, default=1000)
    ap.add_argument("--drain-slots", type=int, default=16)
    ap.add_argument("--only", help="comma-separated substrings: rows whose name has one (plain always)")
    ap.add_argument("--skip", default="", help="|-separated row names left out (a row that faulted the context)")
    ap.add_argument("--json")
    ap.add_argument("--ptx-only", type=Path, help="write every kernel's PTX here and compile it (no GPU)")
    ap.add_argument("--simulate", action="store_true",
                    help="offline dry run on a model of the GPU (graph_chain_sim.py): checks, no timing")
    ap.add_argument("--fault", default="", help="--simulate: a fault the checks must catch (no-tag, no-full)")
    args = ap.parse_args()
    if not VADD.is_file():
        sys.exit(f"graph_chain.py: the corpus kernel {VADD} is missing (tests/data is needed)")
    if args.ptx_only:
        sys.exit(ptx_only(args.ptx_only))
    if args.slots & (args.slots - 1) or args.slots < WARMUP + args.replays:
        sys.exit(f"graph_chain.py: --slots {args.slots}: a power of 2 of at least --replays + {WARMUP} is needed")
    if args.drain_slots & (args.drain_slots - 1) or not 8 <= args.drain_slots <= args.slots:
        sys.exit(f"graph_chain.py: --drain-slots {args.drain_slots}: a power of 2 from 8 to --slots is needed")
    rows = ROWS
    if args.only:
        keys = args.only.split(",")
        rows = [r for r in ROWS if r.kind == "plain" or any(k in r.name for k in keys)]
    rows = [r for r in rows if r.name not in args.skip.split("|")]
    model = None
    if args.simulate:  # (the rows of main's append node and the gated probe need the real driver)
        from graph_chain_sim import SimCuda

        model = SimCuda(args.grid * THREADS // 32, args.fault)
        rows = [r for r in rows if r.kind in ("untagged", "chain", "setparams")]
    bench = Bench(args, model)
    table = {}
    for r in rows:
        try:
            table[r.name] = (r, *bench.build(r))
        except RuntimeError as e:  # (a driver refusing one row: the others stand)
            print(f"{r.name}: not built: {e}", flush=True)
    rows = [r for r in rows if r.name in table]
    smoke(bench, table)
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in table}
    checks: dict[str, set] = {name: set() for name in table}
    for rnd in range(args.warmup_rounds + args.rounds):
        for name, (row, exe, v) in table.items():
            try:
                us, host, check = bench.run(exe, row, v)
            except RuntimeError as e:
                print(f"{name}: round {rnd} failed: {e}", flush=True)
                checks[name].add(f"FAILED: {e}")
                continue
            if rnd >= args.warmup_rounds:
                got[name].append((us, host))
            checks[name].add(check)
    print(f"device: {bench.cuda.name}; chain of {CHAIN} vadd, grid {args.grid} x {THREADS}; block_sched span "
          f"{bench.span} B per node, slot stride {bench.stride} B, {bench.k} slots; {args.replays} replays per "
          f"round, medians of {args.rounds} rounds (after {args.warmup_rounds} not counted)")
    print("| row | GPU µs/replay | round spread | vs plain | host µs/replay | check |")
    print("| --- | ---: | --- | ---: | ---: | --- |")
    if not any(got.values()):
        sys.exit("graph_chain.py: no row was timed (above: why)")
    base = next(statistics.median(x for x, _ in xs) for xs in got.values() if xs)  # plain (the first row)
    out = []
    for name, xs in got.items():
        if not xs:
            print(f"| {name} | | | | | {' '.join(sorted(checks[name]))} |")
            continue
        us = [x for x, _ in xs]
        med, host = statistics.median(us), statistics.median(h for _, h in xs)
        check = " ".join(sorted(c for c in checks[name] if c))
        print(f"| {name} | {med:.2f} | {min(us):.2f}–{max(us):.2f} | {med - base:+.2f} ({med / base:.2f}x) | "
              f"{host:.1f} | {check} |", flush=True)
        out.append({"row": name, "gpu_us": med, "rounds": us, "host_us": host, "check": check})
    try:
        host_line = bench.host_costs() if any(r.kind == "setparams" for r in rows) else ""
    except RuntimeError as e:
        host_line = f"host: SetParams not measured: {e}"
    if host_line:
        print(host_line, flush=True)
    runs = {}
    for o in (CANDIDATE, ChainOpts(full="host-cached"), ENGINE, ENGINE_LATE):
        for drain, k in ((True, args.drain_slots), (False, 8)):
            n = args.drain_replays if drain else 40
            try:
                line = bench.drained_run(o, n, k, drain)
            except RuntimeError as e:
                line = f"FAILED: {e}"
            print(f"drained run, {chain_name(o)}: {line}", flush=True)
            runs[f"{chain_name(o)} {'drain' if drain else 'full'}"] = line
    if args.json:
        Path(args.json).write_text(json.dumps({"device": bench.cuda.name, "rows": out, "host": host_line,
                                               "drained": runs}, indent=1))


if __name__ == "__main__":
    main()
