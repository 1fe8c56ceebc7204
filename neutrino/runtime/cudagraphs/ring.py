"""Where a probed graph node's results go on every replay: a ring of slots in device memory,
filled by a kernel of ours at the end of each replay, copied out by a host thread with the copy
engine. Nothing on the replay's path crosses PCIe.

A host node (cuLaunchHostFunc) makes every replay wait for a round trip through the driver's
callback thread: on the H100 a graph of 4 probed kernels replayed 6.9x slower than unprobed with
one host node per kernel. Copying each replay's maps across PCIe from a kernel node, or reading a
flag across PCIe to find a free slot, still put microseconds per replay on the path (1.73x on the
same graph). Instead, when the capture ends, one node of ours is added after every probed kernel
node of the capture, as a leaf (nothing of the program's waits for it):

* `APPEND_KERNEL`, a grid of chunks x probed nodes. Every block of node b reads the node's state
  (device memory): the replay number, applies `--launches` to it, and finds whether the next slot
  is free: slots written minus slots the host has consumed (a counter the host writes into device
  memory with the copy engine) below the ring's size. A free slot: the block copies its chunk of
  the maps into it. Either way it zeroes its chunk (the maps read zero at the next replay: no
  memset node). The last block of the node to finish counts the replay and, when every chunk was
  copied, publishes the slot: its flag in mapped host memory becomes replay + 1 (a posted store,
  no round trip). A full ring (the host is behind) drops the replay and counts it; with
  `--when-full=wait` the blocks first wait up to WAIT_NS for the host to consume a slot.

The host side (shim/graphs.c; PythonGraphSink with fake drivers) polls the flags, copies the
filled slots into the host ring's slots on a stream of ours (cuMemcpyDtoHAsync: the copy engine,
alongside the program's work), hands the frames to the writer, clears the flags and writes how
many slots it has consumed into the node's device state. The device fills a slot only after the
host consumed it, and the host clears a flag before it says so, so a flag seen set belongs to a
filled slot.

With `--when-full=wait` the ring's slots are the host ring's own, filled across PCIe, and the
consumed count is read from the host ring: a device waiting for the host must not depend on the
host's driver calls, which block while the program's thread waits in a launch for room in a
full queue (measured on the H100: a cuMemcpyDtoHAsync held 2.7 ms while 3,000 replays were
enqueued). Slower per replay, and never a deadlock.

Host ring layout (mapped pinned memory; `RingLayout`):

    [0, 64)             counters, u64: replays, written (slots filled), dropped (ring full): a
                        mirror of the device state's; then consumed (the host's own count, the
                        source of what it copies into the device state)
    [64, 64 + 8 K)      flags, u64 per ring slot: 0 free, else replay + 1
    [slots, +S stride)  S host slots of one frame each: the header (written at capture), then the
                        sections at the frame's offsets (copied in from device slot i into host
                        slot i % S)

Device memory of a node (one allocation, `DeviceLayout`): HEAD_BYTES whose last u32 is the
probe gate, the maps, laid out like the frame's sections (one contiguous span, a multiple of 64
bytes, copied with 16-byte loads and stores), then STATE_BYTES of state, then K device slots
holding a span each (none with --when-full=wait).

Sampling inside the graph (`--launches`): the probed kernel node gets its first map's buffer
pointer with bit 0 set, which tells the probed kernel to read the gate, the u32 GATE_OFFSET bytes
before its maps (passes/buffers.py): 0, the replay probes; else every store and atomic of the
probe is predicated off, so the maps stay zero. The append kernel's last block of a replay writes
the gate for the next replay (0 when `--launches` selects it; the runtime writes replay 0's at
capture). Every block reads the gate its replay ran with: when it
was set, the maps are still zero and the block neither copies nor zeroes.

Replays chosen on the host (shim/graphpick.c, replay_select.py): the append node runs only on the
selected replays, so its state counts its runs, not the replays; the argument `skip` (the replays
the host left out so far) makes the replay's number runs + skip, and `host` = 1 says the replay is
selected and ran ungated (the probed node's pointer untagged): the kernel neither applies the filter
nor reads or writes the gate. With `host` = 0 and `skip` the host's count at the moment it gave the
plan up, the device gate numbers the replays on where the host stopped.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import os

import attrs

from neutrino.runtime.driver import DriverError

APPEND_KERNEL = "__neutrino_graph_append"
COUNTERS_BYTES = 64
SLOT_ALIGN = 256
DEVICE_RING_BYTES = 16 << 20  # device slots per node: as many frames as fit here, 2 to MAX_DEVICE_SLOTS
MAX_DEVICE_SLOTS = 1024  # shim/graphs.c MAX_SLOTS
HOST_RING_BYTES = 4 << 20  # host slots per node (where frames are copied out to): 2 to MAX_HOST_SLOTS
MAX_HOST_SLOTS = 64
APPEND_THREADS = 256
# the append kernel's blocks per node: one per chunk of the largest node's maps, a chunk being what
# its threads copy in one step (16 bytes each): a step costs a memory latency, blocks run at once
CHUNK_BYTES = APPEND_THREADS * 16
MAX_CHUNKS = 512
WAIT_NS = 10_000_000_000  # --when-full=wait: as long as the C launch path waits for room
# counter offsets, in the device state and (the first three mirrored) in the host ring
REPLAYS, WRITTEN, DROPPED, CONSUMED = 0, 8, 16, 24
# the device state: the counters above, then [32] u64 blocks of this replay done (low half) and
# blocks that copied (high half): one atomic tells the last block both
DONE = 32
STATE_BYTES = 64
LEAN_KERNEL = True  # the runtime's append kernel: the lean one (append_ptx), timed against session 8's
PDL_ARCH = (9, 0)  # griddepcontrol (programmatic dependent launch): the append kernel may start early
LAUNCH_ORDER_EDGE = True  # the runtime's append node gets the launch-order edge where it can (capture.py)
PDL_PORT = 2  # CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER: the edge fires once the probed kernel's blocks have all started
HEAD_BYTES = 256  # before the maps: the gate (its last 8 bytes), keeping the maps 256-byte aligned
GATE_OFFSET = 8  # passes/lower_save.GATE_OFFSET: the gate is this many bytes before the maps

# Block (c, b): every thread loads its first 16 bytes of chunk c of node b's maps while thread 0
# decides for the block (state read at gpu scope, `consumed` written by the copy engine or the
# host) and shares the slot's address (0: no copy) through shared memory: the decision's latency
# hides behind the load's. The block copies the chunk there and zeroes it; after the barrier thread 0 fences at gpu scope
# (cumulative: the block's stores before the barrier are ordered too) and adds (copied << 32 | 1)
# to DONE. The block that completes the count fences (gpu scope for a ring on the device: the copy
# engine reads device memory through L2; system scope for a ring in host memory, whose slots were
# written across PCIe), then publishes the flag, the counters and their mirrors, and resets DONE.
# A block whose replay ran with the probe gate set (%r12 != 0: the probe wrote nothing) copies and
# zeroes nothing, and, having written nothing, skips the fences (%p12: the same in every block of a
# replay). The last block writes the next replay's gate (COUNTED).
_PTX = """\
.version {version}
.target {target}
.address_size 64

.visible .entry __neutrino_graph_append(
    .param .u64 p_desc, .param .u64 p_start, .param .u64 p_stop, .param .u64 p_every, .param .u64 p_wait_ns,
    .param .u64 p_skip, .param .u64 p_host)
{{
    .reg .pred %p<16>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<52>;
{decls}    .shared .align 8 .u64 s_slot;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p7, %r1, 0;
    ld.param.u64 %rd32, [p_desc];
    mov.u32 %r2, %ctaid.y;
    mul.wide.u32 %rd33, %r2, 64;
    add.u64 %rd32, %rd32, %rd33;
    ld.global.u64 %rd24, [%rd32];
    ld.global.u64 %rd25, [%rd32+8];
    ld.global.u64 %rd31, [%rd32+48];
{early}    mov.u32 %r8, %nctaid.x;
    cvt.u64.u32 %rd34, %r8;
    shl.b64 %rd35, %rd34, 4;
    add.u64 %rd36, %rd25, %rd35;
    sub.u64 %rd36, %rd36, 1;
{div_chunk}    shl.b64 %rd36, %rd36, 4;
    mov.u32 %r9, %ctaid.x;
    cvt.u64.u32 %rd37, %r9;
    mul.lo.u64 %rd38, %rd37, %rd36;
    add.u64 %rd39, %rd38, %rd36;
    min.u64 %rd39, %rd39, %rd25;
    cvt.u64.u32 %rd22, %r1;
    shl.b64 %rd22, %rd22, 4;
    add.u64 %rd22, %rd22, %rd38;
    mov.u32 %r3, %ntid.x;
    cvt.u64.u32 %rd23, %r3;
    shl.b64 %rd23, %rd23, 4;
    mov.u32 %r7, 0;
    ld.global.u32 %r12, [%rd24+-8];
    ld.param.u64 %rd48, [p_host];
    setp.ne.u64 %p13, %rd48, 0;
    @%p13 mov.u32 %r12, 0;
{shut_exit}    setp.lt.u64 %p10, %rd22, %rd39;
    add.u64 %rd26, %rd24, %rd22;
{preload}    @%p7 bra SHARED;
    ld.relaxed.gpu.global.u64 %rd2, [%rd31];
    ld.param.u64 %rd46, [p_skip];
    add.u64 %rd47, %rd2, %rd46;
    ld.relaxed.gpu.global.u64 %rd3, [%rd31+8];
{consumed_early}    mov.u64 %rd20, 0;
    ld.param.u64 %rd5, [p_start];
    ld.param.u64 %rd6, [p_stop];
    ld.param.u64 %rd7, [p_every];
    setp.lt.u64 %p1, %rd47, %rd5;
    setp.ge.u64 %p2, %rd47, %rd6;
    or.pred %p1, %p1, %p2;
    sub.u64 %rd8, %rd47, %rd5;
{rem_filter}    setp.ne.u64 %p3, %rd9, 0;
    or.pred %p1, %p1, %p3;
    not.pred %p14, %p13;
    and.pred %p1, %p1, %p14;
    @%p1 bra DECIDED;
{consumed_late}    sub.u64 %rd15, %rd3, %rd14;
    setp.lt.u64 %p4, %rd15, %rd10;
    @%p4 bra FREE;
    ld.param.u64 %rd29, [p_wait_ns];
    setp.eq.u64 %p8, %rd29, 0;
    @%p8 bra DECIDED;
    mov.u64 %rd30, %globaltimer;
    add.u64 %rd29, %rd29, %rd30;
SPIN:
    nanosleep.u32 2000;
    ld.relaxed.sys.global.u64 %rd14, [%rd28];
    sub.u64 %rd15, %rd3, %rd14;
    setp.lt.u64 %p4, %rd15, %rd10;
    @%p4 bra FREE;
    mov.u64 %rd30, %globaltimer;
    setp.lt.u64 %p9, %rd30, %rd29;
    @%p9 bra SPIN;
    bra DECIDED;
FREE:
{rem_slot}{free_loads}    mad.lo.u64 %rd20, %rd11, %rd17, %rd16;
DECIDED:
    st.shared.u64 [s_slot], %rd20;
SHARED:
{pdl_wait}    bar.sync 0;
    ld.shared.u64 %rd21, [s_slot];
    setp.ne.u64 %p5, %rd21, 0;
    setp.ne.u32 %p11, %r12, 0;
    not.pred %p12, %p5;
    and.pred %p12, %p12, %p11;
    @%p12 bra STEPPED;
STEP:
    setp.ge.u64 %p6, %rd22, %rd39;
    @%p6 bra STEPPED;
    add.u64 %rd26, %rd24, %rd22;
    @!%p5 bra ZERO;
    @!%p10 ld.global.v4.u32 {{%r4, %r5, %r6, %r10}}, [%rd26];
    add.u64 %rd27, %rd21, %rd22;
    st.global.v4.u32 [%rd27], {{%r4, %r5, %r6, %r10}};
ZERO:
    st.global.v4.u32 [%rd26], {{%r7, %r7, %r7, %r7}};
    setp.ne.u32 %p10, %r7, %r7;
    add.u64 %rd22, %rd22, %rd23;
    bra STEP;
STEPPED:
    bar.sync 0;
    @%p7 bra DONE;
{shut_tail}    @!%p12 membar.gl;
    selp.u64 %rd40, 4294967297, 1, %p5;
    atom.global.add.u64 %rd41, [%rd31+32], %rd40;
    add.u64 %rd41, %rd41, %rd40;
    cvt.u32.u64 %r11, %rd41;
    setp.ne.u32 %p4, %r11, %r8;
    @%p4 bra DONE;
{last_label}    @!%p12 {publish_fence};
{tail_ring}    add.u64 %rd4, %rd47, 1;
    add.u64 %rd49, %rd2, 1;
    shr.u64 %rd42, %rd41, 32;
    setp.ne.u64 %p6, %rd42, %rd34;
    @%p6 bra UNWRITTEN;
{tail_slot}    shl.b64 %rd12, %rd11, 3;
    add.u64 %rd13, %rd1, %rd12;
    st.relaxed.sys.global.u64 [%rd13+64], %rd4;
    add.u64 %rd3, %rd3, 1;
    st.relaxed.gpu.global.u64 [%rd31+8], %rd3;
    st.relaxed.sys.global.u64 [%rd1+8], %rd3;
    bra COUNTED;
UNWRITTEN:
    @%p1 bra COUNTED;
    ld.relaxed.gpu.global.u64 %rd19, [%rd31+16];
    add.u64 %rd19, %rd19, 1;
    st.relaxed.gpu.global.u64 [%rd31+16], %rd19;
    st.relaxed.sys.global.u64 [%rd1+16], %rd19;
COUNTED:
    @%p13 bra GATE_KEPT;
    setp.lt.u64 %p2, %rd4, %rd5;
    setp.ge.u64 %p3, %rd4, %rd6;
    or.pred %p2, %p2, %p3;
    sub.u64 %rd44, %rd4, %rd5;
{rem_gate}    setp.ne.u64 %p3, %rd45, 0;
    or.pred %p2, %p2, %p3;
    selp.u32 %r13, 1, 0, %p2;
    st.relaxed.gpu.global.u32 [%rd24+-8], %r13;
GATE_KEPT:
    mov.u64 %rd43, 0;
    st.relaxed.gpu.global.u64 [%rd31+32], %rd43;
    st.relaxed.gpu.global.u64 [%rd31], %rd49;
    st.relaxed.sys.global.u64 [%rd1], %rd4;
DONE:
    ret;
}}
"""


def append_ptx(arch: tuple[int, int] | None = None, on_device: bool = True, lean: bool = True,
               pdl: bool = False, shut_fast: bool = False) -> str:
    """The append kernel's module for a device of compute capability `arch` (sm_75 code JITs on any
    newer device; sm_70 gets its own target: .relaxed.sys and nanosleep need it), for rings on the
    device or (`on_device` false: --when-full=wait) in host memory. `lean` false: the kernel of
    session 8 (benchmarks/append_node_cost.py times both). `pdl` (sm_90 and later): the kernel may
    start while the probed kernel it depends on still runs (a programmatic edge): everything that
    does not read the maps (the descriptor, the state, the gate the replay ran with, the decision:
    all written before this replay) comes before `griddepcontrol.wait`, which waits for the probed
    kernels to complete and their writes to be visible. `shut_fast` (measured in the benchmark only): on a
    replay whose gate was shut, every block but the first of each node leaves at once, and that one counts
    the replay without waiting for the others (none copies or zeroes anything)."""
    fence = "membar.gl" if on_device else "membar.sys"
    ops = {**(_LEAN if lean else _SESSION8), "preload": _PRELOAD, "pdl_wait": "", **(_SHUT_FAST if shut_fast else _SHUT)}
    if lean and not on_device:  # the consumed count in host memory: read across PCIe only for a selected replay
        ops.update(consumed_early="", consumed_late=CONSUMED_LOAD)
    if pdl:
        ops.update(preload=_NO_PRELOAD, pdl_wait="    griddepcontrol.wait;\n")
        return _PTX.format(version="7.8", target="sm_90", publish_fence=fence, **ops)
    if arch is None or arch >= (7, 5):
        return _PTX.format(version="7.0", target="sm_75", publish_fence=fence, **ops)
    return _PTX.format(version="6.3", target=f"sm_{arch[0]}{arch[1]}", publish_fence=fence, **ops)


def _load(reg: str, off: int) -> str:
    return f"    ld.global.u64 {reg}, [%rd32+{off}];\n"


_SHUT = {"shut_exit": "", "shut_tail": "", "last_label": ""}
_SHUT_FAST = {
    "shut_exit": "    .reg .pred %g<2>;\n    setp.ne.u32 %g0, %r12, 0;\n    setp.ne.u32 %g1, %r9, 0;\n"
                 "    and.pred %g1, %g1, %g0;\n    @%g1 bra DONE;\n",
    "shut_tail": "    @%g0 mov.u64 %rd41, 1;\n    @%g0 bra LAST;\n",
    "last_label": "LAST:\n",
}
# each thread's first 16 bytes of the maps, loaded while thread 0 decides; with a programmatic edge
# the maps are read only after griddepcontrol.wait (the first step of the copy loop loads them then)
_PRELOAD = "    @%p10 ld.global.v4.u32 {%r4, %r5, %r6, %r10}, [%rd26];\n"
_NO_PRELOAD = "    setp.ne.u32 %p10, %r7, %r7;\n"
CONSUMED_LOAD = "    ld.relaxed.sys.global.u64 %rd14, [%rd28];\n"


def _divrem(op: str, dst: str, a: str, b: str, k: int) -> str:
    """`op` ("div" or "rem") of two u64 registers, in 32 bits when both fit: PTX's 64-bit division is
    a long software routine, and the append kernel's values (a replay or slot number, a span, a ring's
    size, --launches' step) fit in 32 bits in practice."""
    return (f"    or.b64 %t{k}, {a}, {b};\n    shr.u64 %t{k}, %t{k}, 32;\n    setp.eq.u64 %f{k}, %t{k}, 0;\n"
            f"    cvt.u32.u64 %q{2 * k}, {a};\n    cvt.u32.u64 %q{2 * k + 1}, {b};\n"
            f"    @%f{k} {op}.u32 %q{2 * k}, %q{2 * k}, %q{2 * k + 1};\n    @%f{k} cvt.u64.u32 {dst}, %q{2 * k};\n"
            f"    @!%f{k} {op}.u64 {dst}, {a}, {b};\n")


# The session-8 kernel (what the lean one is timed against): 64-bit divisions, and each descriptor field
# and the host's consumed count loaded where first needed (the consumed count: a round trip after the
# state's, only once the replay is known to be selected).
_SESSION8 = {
    "decls": "", "early": "", "consumed_early": "",
    "consumed_late": _load("%rd10", 24) + _load("%rd28", 56) + CONSUMED_LOAD,
    "div_chunk": "    div.u64 %rd36, %rd36, %rd35;\n", "rem_filter": "    rem.u64 %rd9, %rd8, %rd7;\n",
    "rem_slot": "    rem.u64 %rd11, %rd3, %rd10;\n", "free_loads": _load("%rd16", 32) + _load("%rd17", 40),
    "tail_ring": _load("%rd1", 16), "tail_slot": _load("%rd10", 24) + "    rem.u64 %rd11, %rd3, %rd10;\n",
    "rem_gate": "    rem.u64 %rd45, %rd44, %rd7;\n",
}
# Lean: the whole descriptor loaded in the first round trip; the consumed count with the state (one
# round trip fewer for thread 0 of a selected replay: an earlier, smaller count only makes the ring look
# fuller; with --when-full=wait, where it is read across PCIe, still only once the replay is selected); divisions in 32 bits when they fit; the last block reuses the slot its thread 0 computed
# (a slot written means every block, this one too, found it free).
_LEAN = {
    "decls": "    .reg .b64 %t<4>;\n    .reg .b32 %q<8>;\n    .reg .pred %f<4>;\n",
    "early": "".join(_load(r, o) for r, o in (("%rd1", 16), ("%rd10", 24), ("%rd16", 32), ("%rd17", 40),
                                               ("%rd28", 56))),
    "consumed_early": CONSUMED_LOAD, "consumed_late": "",
    "div_chunk": _divrem("div", "%rd36", "%rd36", "%rd35", 0), "rem_filter": _divrem("rem", "%rd9", "%rd8", "%rd7", 1),
    "rem_slot": _divrem("rem", "%rd11", "%rd3", "%rd10", 2), "free_loads": "",
    "tail_ring": "", "tail_slot": "", "rem_gate": _divrem("rem", "%rd45", "%rd44", "%rd7", 3),
}


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@attrs.frozen
class RingLayout:
    """Where the counters, flags and slots of one node's host ring are (offsets from its start):
    a flag per ring slot (`nslots`, the device's or, with `--when-full=wait`, these), and `nstage`
    host slots that frames land in."""

    nslots: int
    nstage: int
    stride: int  # bytes per host slot (a frame, rounded up)
    frame_bytes: int
    on_device: bool = True  # the ring's slots are in device memory (else the host slots are the ring)

    @property
    def flags(self) -> int:
        return COUNTERS_BYTES

    @property
    def slots(self) -> int:
        return _align(COUNTERS_BYTES + 8 * self.nslots, SLOT_ALIGN)

    @property
    def total(self) -> int:
        return self.slots + self.nstage * self.stride

    def slot(self, i: int) -> int:
        return self.slots + (i % self.nstage) * self.stride


def _clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


def ring_slots_limit() -> int:
    """At most this many slots per ring, device and host: `NEUTRINO_GRAPH_RING_SLOTS=N` (at least 2; unset or
    not a number: no limit). benchmarks/graph_residual.py --isolate asks whether the rings' memory (16 MiB of
    device memory and 4 MiB of mapped pinned memory per node by default) slows the process's other graphs."""
    value = os.environ.get("NEUTRINO_GRAPH_RING_SLOTS", "")
    return max(2, int(value)) if value.isascii() and value.isdigit() else MAX_DEVICE_SLOTS


def ring_layout(frame_bytes: int, on_device: bool = True, minimal: bool = False) -> RingLayout:
    """A node's ring for frames of `frame_bytes`. On the device (the default) it holds up to
    DEVICE_RING_BYTES of frames, copied out through fewer host slots; with `--when-full=wait` the
    device fills the host slots itself (a device that waits on the host must not need the host to
    make driver calls: those can block behind a launch waiting for room in a full queue).
    `minimal`: two slots, when the buffer budget holds no more."""
    stride = _align(frame_bytes, SLOT_ALIGN)
    most = ring_slots_limit()
    nstage = 2 if minimal else _clamp(HOST_RING_BYTES // stride, 2, min(MAX_HOST_SLOTS, most))
    if not on_device:
        return RingLayout(nstage, nstage, stride, frame_bytes, on_device=False)
    nslots = 2 if minimal else _clamp(DEVICE_RING_BYTES // stride, 2, min(MAX_DEVICE_SLOTS, most))
    return RingLayout(nslots, min(nstage, nslots), stride, frame_bytes)


@attrs.frozen
class DeviceLayout:
    """One node's device allocation: the head (the gate), the maps (`span` bytes), the state, the
    device slots (none when the ring is in host memory)."""

    span: int
    nslots: int

    @property
    def maps(self) -> int:
        """Where the maps start (the gate is the u32 GATE_OFFSET bytes before)."""
        return HEAD_BYTES

    @property
    def gate(self) -> int:
        return HEAD_BYTES - GATE_OFFSET

    @property
    def state(self) -> int:
        return HEAD_BYTES + self.span

    @property
    def stride(self) -> int:
        return _align(self.span, SLOT_ALIGN)

    @property
    def slots(self) -> int:
        return _align(HEAD_BYTES + self.span + STATE_BYTES, SLOT_ALIGN)

    @property
    def total(self) -> int:
        return self.slots + self.nslots * self.stride

    def slot(self, i: int) -> int:
        return self.slots + (i % self.nslots) * self.stride


def allocate_node_memory(drv, dev: DeviceLayout, lay: RingLayout, header: bytes) -> tuple[int, tuple]:
    """One node's memory: (its device allocation laid out as `dev`, its mapped host ring laid out as
    `lay`). The host ring's counters and flags are zeroed and every host slot gets the frame `header`
    (pinned memory comes uninitialised); the device part is zeroed later by `zero_node_memory`, once
    the capture has ended (no stream work of ours while the program captures: issue 24). The caller
    has the thread's capture mode relaxed. A failure frees what was taken and raises."""
    device = drv.mem_alloc_sync(dev.total)
    try:
        ring = drv.host_alloc_mapped(lay.total)
    except BaseException:
        with contextlib.suppress(DriverError):
            drv.mem_free_sync(device)
        raise
    init_host_ring(ring[1], lay, header)
    return device, ring


def init_host_ring(view, lay: RingLayout, header: bytes) -> None:
    """The host ring's counters and flags zeroed, the frame `header` in every host slot."""
    view[: lay.total] = bytes(lay.total)
    for i in range(lay.nstage):
        start = lay.slot(i)
        view[start: start + len(header)] = header


class EarlyPool:
    """NEUTRINO_MEASURE_CAPTURE=pool (a benchmark's switch, capture.py): one device allocation and one mapped host
    allocation made before the first capture of a context begins, outside it; each probed node's memory is
    carved from them instead of allocated inside the program's capture, and never given back. A node that
    does not fit is allocated as usual."""

    NODES = 16  # graph8 and graph_residual_child.py's graph A have 8 probed nodes
    DEVICE_BYTES = NODES * (DEVICE_RING_BYTES + (1 << 20))
    HOST_BYTES = NODES * (HOST_RING_BYTES + (64 << 10))

    def __init__(self, drv):
        self.device = drv.mem_alloc_sync(self.DEVICE_BYTES)
        try:
            self.host = drv.host_alloc_mapped(self.HOST_BYTES)
        except BaseException:
            with contextlib.suppress(DriverError):
                drv.mem_free_sync(self.device)
            raise
        self.device_used = self.host_used = 0

    def take(self, dev: "DeviceLayout", lay: RingLayout, header: bytes) -> tuple[int, tuple] | None:
        """(device address, (host address, memoryview, device address)) as allocate_node_memory's, or None."""
        d, h = _align(self.device_used, SLOT_ALIGN), _align(self.host_used, 4096)
        if d + dev.total > self.DEVICE_BYTES or h + lay.total > self.HOST_BYTES:
            return None
        self.device_used, self.host_used = d + dev.total, h + lay.total
        addr, view, device = self.host
        ring = (addr + h, view[h: h + lay.total], device + h)
        init_host_ring(ring[1], lay, header)
        return self.device + d, ring


def zero_node_memory(drv, dev: DeviceLayout, device: int, stream: int, gate_closed: bool) -> None:
    """Ready a node's device memory for its graph's first replay: the head, the maps and the state
    zeroed on `stream` (a stream of ours: no memset node in the graph), the probe gate closed if
    `gate_closed` (the first replay then runs with it set; later replays' gates are the append
    kernel's). Not waited for: the caller synchronises `stream` before the graph can be launched."""
    drv.memset_async(device, dev.slots, stream)
    if gate_closed:
        drv.memcpy_htod_async(device + dev.gate, C.addressof(_GATE_CLOSED), 4, stream)


_GATE_CLOSED = C.c_uint32(1)  # the closed gate's word: alive (and unchanged) until the copies are waited for


def free_node_memory(drv, device: int, ring: tuple | None) -> None:
    """Give back what `allocate_node_memory` took (a failure to free is ignored: the context may
    be gone). The caller has the thread's capture mode relaxed."""
    with contextlib.suppress(DriverError):
        if device:
            drv.mem_free_sync(device)
        if ring is not None:
            drv.host_free(ring[0])


class NodeDesc(C.Structure):
    """What the append kernel's blocks (c, b) know of probed node b (64 bytes, in device memory):
    the maps, the host ring (counters, flags), the ring's slots (device or mapped host memory), the
    state, and where the host's consumed count is read (the device state, or the host ring)."""

    _fields_ = [(name, C.c_uint64) for name in ("src", "bytes", "ring", "nslots", "slots", "stride", "state",
                                                "consumed")]


DESC_BYTES = C.sizeof(NodeDesc)


def node_desc(device: int, dev: DeviceLayout, ring_device: int, lay: RingLayout, data_off: int) -> NodeDesc:
    """`device`: the node's allocation laid out as `dev`; `ring_device`: its host ring (`lay`),
    mapped; `data_off`: where the maps start in a frame."""
    if lay.on_device:
        return NodeDesc(src=device + dev.maps, bytes=dev.span, ring=ring_device, nslots=lay.nslots, slots=device + dev.slots,
                        stride=dev.stride, state=device + dev.state, consumed=device + dev.state + CONSUMED)
    return NodeDesc(src=device + dev.maps, bytes=dev.span, ring=ring_device, nslots=lay.nslots,
                    slots=ring_device + lay.slots + data_off, stride=lay.stride, state=device + dev.state,
                    consumed=ring_device + CONSUMED)


class AppendParams(C.Structure):
    """The append kernel's arguments, and the pointer array a launch takes (`pointers`)."""

    _fields_ = [(name, C.c_uint64) for name in ("desc", "start", "stop", "every", "wait_ns", "skip", "host")]

    def pointers(self):
        base = C.addressof(self)
        arr = (C.c_void_p * len(self._fields_))(*[base + 8 * i for i in range(len(self._fields_))])
        arr._owner = self  # noqa: SLF001 - the values live as long as the array
        return arr


def append_params(desc_device: int, launch_filter, wait_ns: int = 0) -> AppendParams:
    """`desc_device`: the nodes' descriptors (grid row b: node b). `wait_ns`: how long a full ring
    is waited on before the replay is dropped (0: never)."""
    f = launch_filter
    return AppendParams(desc=desc_device, start=f.start, stop=min(f.stop, 2**64 - 1), every=max(1, f.every),
                        wait_ns=wait_ns)


def append_chunks(spans) -> int:
    """The append kernel's blocks per node: enough that each copies at most CHUNK_BYTES of the
    largest node's maps, at most MAX_CHUNKS."""
    return max(1, min(MAX_CHUNKS, -(-max(spans) // CHUNK_BYTES)))
