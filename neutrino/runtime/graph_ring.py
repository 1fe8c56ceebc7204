"""Where a probed graph node's results go on every replay: a ring in mapped host memory, filled
on the device by kernels of ours, drained by a host thread. No host node in the graph.

A host node (cuLaunchHostFunc) makes every replay wait for a round trip through the driver's
callback thread: on the H100 a graph of 4 probed kernels replayed 6.9x slower than unprobed with
one host node per kernel. Instead, when the capture ends, two nodes of ours are added to the
graph after every probed kernel node of the capture, as a leaf (nothing of the program's waits
for them):

* `DECIDE_KERNEL`, one block per probed node: counts the node's replay, applies `--launches` to
  the replay number, and for a selected replay looks at the flag of the next slot of the node's
  ring (the one read across PCIe). A free slot: the replay will be copied there. A full one (the
  writer is behind): the replay is dropped and counted; with `--when-full=wait` it first waits
  up to WAIT_NS for the host to drain it.
* `APPEND_KERNEL`, a grid of chunks x probed nodes: every block copies its chunk of the node's
  maps into the slot (when there is one) and zeroes it for the next replay; the last block of a
  node to finish sets the slot's flag to replay + 1 (a release at system scope). Large frames
  are copied by many SMs at once.

The host side (shim/graphs.c; PythonGraphSink with fake drivers) drains slots in order, clears
their flags and hands the frames to the writer. The host only clears flags and the device only
sets them, so a slot seen free stays free until the device fills it.

Ring layout (host memory; `RingLayout`):

    [0, 64)             counters, u64: replays, written (slots filled), dropped (ring full); a
                        mirror of the kernels' own, which live in device memory after the maps
    [64, 64 + 8 K)      flags, u64 per slot: 0 free, else replay + 1
    [slots, +K stride)  K slots of one frame each: the header (written at capture), then the
                        sections at the frame's offsets (written by the kernel)

The node's map buffers are one device allocation laid out like the frame's sections, so the
kernels copy one contiguous span (a multiple of 64 bytes) with 16-byte loads and stores.
"""

from __future__ import annotations

import ctypes as C

import attrs

APPEND_KERNEL = "__neutrino_graph_append"
DECIDE_KERNEL = "__neutrino_graph_decide"
COUNTERS_BYTES = 64
SLOT_ALIGN = 256
MAX_SLOTS = 64
RING_TARGET_BYTES = 8 << 20  # slots per node: as many frames as fit here, 2 to MAX_SLOTS
APPEND_THREADS = 256
DECIDE_THREADS = 32
CHUNK_BYTES = 32 << 10  # the append kernel's blocks per node: one per chunk of the largest node's maps
MAX_CHUNKS = 256
WAIT_NS = 10_000_000_000  # --when-full=wait: as long as the C launch path waits for room
REPLAYS, WRITTEN, DROPPED = 0, 8, 16  # counter offsets (in the device state and its mirror in the ring)
# the kernels' own state, in device memory after the maps (read without a PCIe round trip):
# counters as above, then [24] where this replay is copied (0: not copied), [32] the blocks of the
# append kernel done (u32), [40] the flag's value for this replay, [48] the flag's address
STATE_BYTES = 64

# DECIDE: thread 0 of block b decides for node b. The flag is read at system scope (the host writes
# it back to 0); the counters are the kernels' own, mirrored into the ring with posted stores.
# APPEND: block (c, b) copies chunk c of node b's maps into the slot decided, then zeroes it (the
# maps must read zero at the next replay: no memset node on the program's path). Each copying
# block fences its stores at system scope and counts itself done; the last one fences again and
# publishes the flag, then the written counter.
_PTX = """\
.version {version}
.target {target}
.address_size 64

.visible .entry __neutrino_graph_decide(
    .param .u64 p_desc, .param .u64 p_start, .param .u64 p_stop, .param .u64 p_every, .param .u64 p_wait_ns)
{{
    .reg .pred %p<10>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<40>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p7, %r1, 0;
    @%p7 bra DONE;
    ld.param.u64 %rd32, [p_desc];
    mov.u32 %r2, %ctaid.x;
    mul.wide.u32 %rd33, %r2, 64;
    add.u64 %rd32, %rd32, %rd33;
    ld.global.u64 %rd1, [%rd32+16];
    ld.global.u64 %rd31, [%rd32+56];
    ld.global.u64 %rd2, [%rd31];
    ld.global.u64 %rd3, [%rd31+8];
    add.u64 %rd4, %rd2, 1;
    st.global.u64 [%rd31], %rd4;
    st.relaxed.sys.global.u64 [%rd1], %rd4;
    mov.u64 %rd20, 0;
    ld.param.u64 %rd5, [p_start];
    ld.param.u64 %rd6, [p_stop];
    ld.param.u64 %rd7, [p_every];
    setp.lt.u64 %p1, %rd2, %rd5;
    setp.ge.u64 %p2, %rd2, %rd6;
    or.pred %p1, %p1, %p2;
    sub.u64 %rd8, %rd2, %rd5;
    rem.u64 %rd9, %rd8, %rd7;
    setp.ne.u64 %p3, %rd9, 0;
    or.pred %p1, %p1, %p3;
    @%p1 bra DECIDED;
    ld.global.u64 %rd10, [%rd32+24];
    rem.u64 %rd11, %rd3, %rd10;
    shl.b64 %rd12, %rd11, 3;
    add.u64 %rd13, %rd1, %rd12;
    add.u64 %rd13, %rd13, 64;
    ld.relaxed.sys.global.u64 %rd14, [%rd13];
    setp.eq.u64 %p4, %rd14, 0;
    @%p4 bra FREE;
    ld.param.u64 %rd29, [p_wait_ns];
    setp.eq.u64 %p8, %rd29, 0;
    @%p8 bra FULL;
    mov.u64 %rd30, %globaltimer;
    add.u64 %rd29, %rd29, %rd30;
SPIN:
    nanosleep.u32 2000;
    ld.relaxed.sys.global.u64 %rd14, [%rd13];
    setp.eq.u64 %p4, %rd14, 0;
    @%p4 bra FREE;
    mov.u64 %rd30, %globaltimer;
    setp.lt.u64 %p9, %rd30, %rd29;
    @%p9 bra SPIN;
    bra FULL;
FREE:
    ld.global.u64 %rd15, [%rd32+32];
    ld.global.u64 %rd16, [%rd32+40];
    ld.global.u64 %rd17, [%rd32+48];
    mad.lo.u64 %rd18, %rd11, %rd16, %rd15;
    add.u64 %rd20, %rd18, %rd17;
    st.global.u64 [%rd31+40], %rd4;
    st.global.u64 [%rd31+48], %rd13;
    bra DECIDED;
FULL:
    ld.global.u64 %rd19, [%rd31+16];
    add.u64 %rd19, %rd19, 1;
    st.global.u64 [%rd31+16], %rd19;
    st.relaxed.sys.global.u64 [%rd1+16], %rd19;
DECIDED:
    st.global.u64 [%rd31+24], %rd20;
DONE:
    ret;
}}

.visible .entry __neutrino_graph_append(.param .u64 p_desc)
{{
    .reg .pred %p<8>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<40>;
    ld.param.u64 %rd32, [p_desc];
    mov.u32 %r2, %ctaid.y;
    mul.wide.u32 %rd33, %r2, 64;
    add.u64 %rd32, %rd32, %rd33;
    ld.global.u64 %rd24, [%rd32];
    ld.global.u64 %rd25, [%rd32+8];
    ld.global.u64 %rd31, [%rd32+56];
    ld.global.u64 %rd21, [%rd31+24];
    setp.ne.u64 %p5, %rd21, 0;
    mov.u32 %r8, %nctaid.x;
    cvt.u64.u32 %rd34, %r8;
    shl.b64 %rd35, %rd34, 4;
    add.u64 %rd36, %rd25, %rd35;
    sub.u64 %rd36, %rd36, 1;
    div.u64 %rd36, %rd36, %rd35;
    shl.b64 %rd36, %rd36, 4;
    mov.u32 %r9, %ctaid.x;
    cvt.u64.u32 %rd37, %r9;
    mul.lo.u64 %rd38, %rd37, %rd36;
    add.u64 %rd39, %rd38, %rd36;
    min.u64 %rd39, %rd39, %rd25;
    mov.u32 %r1, %tid.x;
    cvt.u64.u32 %rd22, %r1;
    shl.b64 %rd22, %rd22, 4;
    add.u64 %rd22, %rd22, %rd38;
    mov.u32 %r3, %ntid.x;
    cvt.u64.u32 %rd23, %r3;
    shl.b64 %rd23, %rd23, 4;
    mov.u32 %r7, 0;
STEP:
    setp.ge.u64 %p6, %rd22, %rd39;
    @%p6 bra STEPPED;
    add.u64 %rd26, %rd24, %rd22;
    @!%p5 bra ZERO;
    ld.global.v4.u32 {{%r4, %r5, %r6, %r10}}, [%rd26];
    add.u64 %rd27, %rd21, %rd22;
    st.global.v4.u32 [%rd27], {{%r4, %r5, %r6, %r10}};
ZERO:
    st.global.v4.u32 [%rd26], {{%r7, %r7, %r7, %r7}};
    add.u64 %rd22, %rd22, %rd23;
    bra STEP;
STEPPED:
    @!%p5 bra DONE;
    membar.sys;
    bar.sync 0;
    setp.ne.u32 %p7, %r1, 0;
    @%p7 bra DONE;
    atom.global.add.u32 %r11, [%rd31+32], 1;
    rem.u32 %r11, %r11, %r8;
    sub.u32 %r10, %r8, 1;
    setp.ne.u32 %p4, %r11, %r10;
    @%p4 bra DONE;
    membar.sys;
    ld.global.u64 %rd13, [%rd31+48];
    ld.global.u64 %rd4, [%rd31+40];
    st.relaxed.sys.global.u64 [%rd13], %rd4;
    ld.global.u64 %rd3, [%rd31+8];
    add.u64 %rd3, %rd3, 1;
    st.global.u64 [%rd31+8], %rd3;
    ld.global.u64 %rd1, [%rd32+16];
    st.relaxed.sys.global.u64 [%rd1+8], %rd3;
DONE:
    ret;
}}
"""


def append_ptx(arch: tuple[int, int] | None = None) -> str:
    """The module of both kernels for a device of compute capability `arch` (sm_75 code JITs on any
    newer device; sm_70 gets its own target: .relaxed.sys and nanosleep need it)."""
    if arch is None or arch >= (7, 5):
        return _PTX.format(version="7.0", target="sm_75")
    return _PTX.format(version="6.3", target=f"sm_{arch[0]}{arch[1]}")


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@attrs.frozen
class RingLayout:
    """Where the counters, flags and slots of one node's ring are (offsets from its start)."""

    nslots: int
    stride: int  # bytes per slot (a frame, rounded up)
    frame_bytes: int

    @property
    def flags(self) -> int:
        return COUNTERS_BYTES

    @property
    def slots(self) -> int:
        return _align(COUNTERS_BYTES + 8 * self.nslots, SLOT_ALIGN)

    @property
    def total(self) -> int:
        return self.slots + self.nslots * self.stride

    def slot(self, i: int) -> int:
        return self.slots + (i % self.nslots) * self.stride


def ring_layout(frame_bytes: int, nslots: int | None = None) -> RingLayout:
    stride = _align(frame_bytes, SLOT_ALIGN)
    if nslots is None:
        nslots = max(2, min(MAX_SLOTS, RING_TARGET_BYTES // stride))
    return RingLayout(nslots, stride, frame_bytes)


def init_ring(view, layout: RingLayout, header: bytes) -> None:
    """Counters and flags zero, every slot's header written (pinned memory comes uninitialised)."""
    view[: layout.total] = bytes(layout.total)
    for i in range(layout.nslots):
        start = layout.slot(i)
        view[start: start + len(header)] = header


class NodeDesc(C.Structure):
    """What the append kernel's block b knows of probed node b (64 bytes, in device memory)."""

    _fields_ = [(name, C.c_uint64) for name in ("src", "bytes", "ring", "nslots", "slots", "stride", "data_off",
                                                "state")]


DESC_BYTES = C.sizeof(NodeDesc)


def node_desc(src: int, span: int, ring_device: int, layout: RingLayout, data_off: int) -> NodeDesc:
    """`src`: the node's maps (device), `span` bytes of them, then STATE_BYTES of the kernel's counters."""
    return NodeDesc(src=src, bytes=span, ring=ring_device, nslots=layout.nslots, slots=ring_device + layout.slots,
                    stride=layout.stride, data_off=data_off, state=src + span)


class _U64Args(C.Structure):
    """Kernel arguments of one u64 each (the subclass lists them), and the pointer array a launch takes."""

    def pointers(self):
        base = C.addressof(self)
        arr = (C.c_void_p * len(self._fields_))(*[base + 8 * i for i in range(len(self._fields_))])
        arr._owner = self  # noqa: SLF001 - the values live as long as the array
        return arr


class DecideParams(_U64Args):
    _fields_ = [(name, C.c_uint64) for name in ("desc", "start", "stop", "every", "wait_ns")]


class AppendParams(_U64Args):
    _fields_ = [("desc", C.c_uint64)]


def decide_params(desc_device: int, launch_filter, wait_ns: int = 0) -> DecideParams:
    """`desc_device`: the nodes' descriptors (one block each). `wait_ns`: how long a full slot is
    waited for before the replay is dropped (0: never)."""
    f = launch_filter
    return DecideParams(desc=desc_device, start=f.start, stop=min(f.stop, 2**64 - 1), every=max(1, f.every),
                        wait_ns=wait_ns)


def append_chunks(spans) -> int:
    """The append kernel's blocks per node: enough that each copies at most CHUNK_BYTES of the
    largest node's maps, at most MAX_CHUNKS."""
    return max(1, min(MAX_CHUNKS, -(-max(spans) // CHUNK_BYTES)))
