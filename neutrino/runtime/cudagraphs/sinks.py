"""Where a probed graph node's replays go on the host: the sinks that drain the rings.

One job: read each node's ring (graph_ring.py) in order, copy each filled device slot out (on a
stream of ours), hand its frame to the trace, clear the slot's flag, tell the device how many
slots are consumed, and keep the node's counters when its memory goes. `NativeGraphSink` does it
in C (shim/graphs.c: a thread polling every ring, frames queued for shim/writer.c);
`PythonGraphSink` in Python, for the fake drivers of the tests. graphs.py decides what is captured
and when memory goes; it talks to a sink through new_record, drain, detach, set_active,
free_record, stats and close; chain_capture.py through new_chain, finish_chain, chain_counts and
free_chain (the chain: spec/runtime.md, "The chain").
"""

from __future__ import annotations

import ctypes as C
import os
import sys
import threading
from typing import TYPE_CHECKING

import attrs

from neutrino.runtime.cudagraphs import chain
from neutrino.runtime.cudagraphs import ring as graph_ring
from neutrino.runtime.driver import DriverError

if TYPE_CHECKING:
    from neutrino.runtime.cudagraphs.capture import GraphNode


@attrs.define(eq=False)
class PyRecord:
    node: GraphNode
    active: bool = True
    attached: bool = True  # its ring is ours to read (until the node's memory or context goes)
    next_read: int = 0  # the next slot to drain, counted from the first
    written: int = 0
    dropped_trace: int = 0
    errors: int = 0
    counters: tuple = (0, 0)  # (replays, dropped by the device) when detached


def _ring_u64(view, offset: int) -> int:
    return int.from_bytes(view[offset: offset + 8], "little")


class PythonGraphSink:
    """The rings drained in Python (the fake drivers of the tests), at exit and when a node's memory
    goes: each selected replay's frame is appended to its kernel's result file with a `launch` event
    carrying `graph` and `graph_node`."""

    def __init__(self, drv, trace, trace_budget, launch_filter):
        self.drv, self.trace, self.trace_budget, self.filter = drv, trace, trace_budget, launch_filter
        self._records: list[PyRecord] = []
        self._lock = threading.Lock()

    def new_record(self, node: GraphNode) -> PyRecord:
        rec = PyRecord(node)
        with self._lock:
            self._records.append(rec)
        return rec

    def drain(self) -> None:
        with self._lock:
            for rec in list(self._records):
                self._drain(rec)

    def _drain(self, rec: PyRecord) -> None:
        node, lay = rec.node, rec.node.ring_layout
        view = node.ring[1]
        marks = []  # the filled slots from next_read on, in order
        while len(marks) < lay.nslots:
            mark = _ring_u64(view, lay.flags + 8 * ((rec.next_read + len(marks)) % lay.nslots))
            if not mark:
                break
            marks.append(mark)
        if not marks:
            return
        if rec.active:
            self._copy_out(rec, marks)
        for k in range(len(marks)):
            flag = lay.flags + 8 * ((rec.next_read + k) % lay.nslots)
            view[flag: flag + 8] = bytes(8)
        rec.next_read += len(marks)
        self._consumed(rec)

    def _copy_out(self, rec: PyRecord, marks: list[int]) -> None:
        """Write the frames of the filled slots from next_read on (`marks`: their flags, replay + 1).
        A ring on the device is copied into the host slots first (slot i into host slot i % nstage,
        a round of nstage at a time); a ring in host memory was filled in place."""
        node, lay, dev = rec.node, rec.node.ring_layout, rec.node.device_layout
        for first in range(0, len(marks), lay.nstage):
            batch = range(first, min(len(marks), first + lay.nstage))
            if lay.on_device:
                try:
                    for k in batch:
                        self.drv.memcpy_dtoh_async(node.ring[0] + lay.slot(rec.next_read + k) + node.offsets[0],
                                                   node.device + dev.slot(rec.next_read + k), dev.span,
                                                   node.drain_stream)
                    self.drv.stream_synchronize(node.drain_stream)
                except DriverError:
                    rec.errors += len(batch)
                    continue
            for k in batch:
                start = lay.slot(rec.next_read + k)
                self._write(rec, marks[k] - 1, bytes(node.ring[1][start: start + node.frame_bytes]))

    def _consumed(self, rec: PyRecord) -> None:
        """The device may fill the slots drained: their count goes where it reads it (the host ring,
        and the device state when the ring is on the device)."""
        node = rec.node
        node.ring[1][graph_ring.CONSUMED: graph_ring.CONSUMED + 8] = rec.next_read.to_bytes(8, "little")
        if not node.ring_layout.on_device:
            return
        try:
            self.drv.memcpy_htod_async(node.device + node.device_layout.state + graph_ring.CONSUMED,
                                       node.ring[0] + graph_ring.CONSUMED, 8, node.drain_stream)
        except DriverError:
            rec.errors += 1

    def write_frame(self, rec: PyRecord, replay: int, frame: bytes) -> None:
        """One replay's frame of a node from elsewhere than its ring (the chain: chain_capture.py)."""
        with self._lock:
            self._write(rec, replay, frame)

    def _write(self, rec: PyRecord, replay: int, frame: bytes) -> None:
        node = rec.node
        if not self.trace_budget.reserve(node.frame_bytes):
            rec.dropped_trace += 1
            return
        datas = [frame[off: off + lay.size] for off, lay in zip(node.offsets, node.layouts)]
        index, rel, offset = self.trace.append_result(node.kernel_dir, node.header, node.offsets, datas)
        self.trace.event("launch", index=index, kernel=node.kernel, grid=list(node.grid), block=list(node.block),
                         shared_bytes=node.shared_bytes, stream=hex(node.stream), result=rel, result_offset=offset,
                         frame=node.frame, duration_ns=None, kernel_launch=replay, graph=node.group.id,
                         graph_node=node.id, replay=replay)
        rec.written += 1

    def detach(self, rec: PyRecord) -> None:
        """Drain the ring and keep its counters: its memory is about to go."""
        with self._lock:
            if not rec.attached:
                return
            self._drain(rec)
            rec.counters = self._counters(rec)
            rec.attached = False
            self._records.remove(rec)

    @staticmethod
    def _counters(rec: PyRecord) -> tuple[int, int]:
        view = rec.node.ring[1]
        return _ring_u64(view, graph_ring.REPLAYS), _ring_u64(view, graph_ring.DROPPED)

    def close(self) -> None:
        pass

    # --- the chain (chain_capture.py): its rings drained here only when the graph probes drain (no poller) ---
    def new_chain(self, rings, nodes: list) -> object:
        """What drains one executable graph's chain (`rings`: chain.ChainRings; `nodes`: its GraphNodes in order)."""
        rings.replay_map = chain.ReplayMap()
        return rings, nodes

    def chain_pick(self, handle, launch_filter) -> None:
        """The host chooses the chain's replays from now on (chain.ReplayMap.pick)."""
        handle[0].replay_map.pick(launch_filter)

    def chain_unpick(self, handle, next_replay: int) -> None:
        """The host stopped choosing at replay `next_replay` (chain.ReplayMap.unpick)."""
        handle[0].replay_map.unpick(next_replay)

    def finish_chain(self, handle, detach: bool) -> None:
        """The probed sinks' last launches published, every ring drained (the context synchronised, no launch of
        the chain's graphs in flight). `detach`: its memory goes next."""
        rings, nodes = handle

        def frame(i: int, launch: int, maps: bytes) -> None:
            n, replay = nodes[i], rings.replay_map.replay(launch)
            if n.active and n.record is not None and replay is not None:
                self.write_frame(n.record, replay, bytes(n.offsets[0]) + maps)

        rings.finish(frame)

    def chain_counts(self, handle, i: int) -> tuple[int, int]:
        """Node i's launches (written, dropped by a full ring) as the heads last said."""
        written, dropped, _ = handle[0].counts()[i]
        return written, dropped

    def chain_exec(self, handle, exe: int, add: bool) -> None:
        """An executable graph of the chain's made or gone (the native poller's idle rule counts its launches; no
        poller here)."""

    def free_chain(self, handle) -> None:
        pass

    def set_active(self, rec: PyRecord, active: bool) -> None:
        rec.active = active

    def free_record(self, rec: PyRecord) -> None:
        rec.active = False

    def stats(self, rec: PyRecord) -> dict:
        replays, dropped = self._counters(rec) if rec.attached else rec.counters
        return {"replays": replays, "written": rec.written, "dropped_trace": rec.dropped_trace,
                "dropped_behind": dropped, "errors": rec.errors}


class NtGraphDesc(C.Structure):
    """`nt_graph_desc` of shim/graphs.c."""

    _fields_ = [("graph_id", C.c_uint32), ("node_id", C.c_uint32), ("kernel_id", C.c_uint32), ("fd", C.c_int32),
                ("ring", C.c_void_p), ("frame_size", C.c_uint64), ("stream", C.c_uint64),
                ("grid", C.c_uint32 * 3), ("block", C.c_uint32 * 3), ("shared_bytes", C.c_uint32),
                ("frame_id", C.c_uint32), ("nslots", C.c_uint64), ("stride", C.c_uint64), ("slots", C.c_uint64),
                ("ctx", C.c_void_p), ("copy_stream", C.c_void_p), ("device_slots", C.c_uint64),
                ("device_stride", C.c_uint64), ("device_state", C.c_uint64), ("data_off", C.c_uint64),
                ("span", C.c_uint64), ("nstage", C.c_uint64)]


class NtChainDesc(C.Structure):
    """`nt_chain_desc` of shim/shim.h."""

    _fields_ = [("ctx", C.c_void_p), ("copy_stream", C.c_void_p), ("heads", C.c_uint64), ("host", C.c_void_p),
                ("staging_bytes", C.c_uint64), ("n", C.c_uint32), ("k", C.c_uint32),
                ("rings", C.POINTER(C.c_uint64)), ("strides", C.POINTER(C.c_uint64)),
                ("sinks", C.POINTER(C.c_uint64)), ("records", C.POINTER(C.c_void_p)), ("zeros", C.c_void_p)]


class NativeGraphSink:
    """The rings drained in C (shim/graphs.c, a thread polling every ring): a selected replay's frame
    is copied out of its device slot on a stream of ours and queued for shim/writer.c, which records
    it in result/index.bin with its graph and node."""

    STATS = ("replays", "written", "dropped_trace", "dropped_behind", "errors")

    def __init__(self, shim_path: str, writer, launch_filter, pending_limit: int):
        lib = C.PyDLL(shim_path)  # none of these waits for the GPU: keep the GIL
        self.shim_path = shim_path  # replay_select.py: the host's choice of replays is in the same library
        self._new = lib.neutrino_graph_node_new
        self._new.argtypes = [C.POINTER(NtGraphDesc)]
        self._new.restype = C.c_void_p
        self._free = lib.neutrino_graph_node_free
        self._free.argtypes = [C.c_void_p]
        self._detach = lib.neutrino_graph_node_detach
        self._detach.argtypes = [C.c_void_p]
        self._drain = lib.neutrino_graph_drain_all
        self._stop = lib.neutrino_graph_stop_polling
        self._active = lib.neutrino_graph_node_set_active
        self._active.argtypes = [C.c_void_p, C.c_int]
        self._stats = lib.neutrino_graph_node_stats
        self._stats.argtypes = [C.c_void_p, C.c_uint64 * 5]
        self._counts = lib.neutrino_graph_poller_counts
        self._counts.argtypes = [C.c_uint64 * 2]
        self._chain_polls = lib.neutrino_graph_chain_poll_counts
        self._chain_polls.argtypes = [C.c_uint64 * 3]
        waits = C.CDLL(shim_path)  # the chain's calls wait for the GPU (and the poller's lock): the GIL goes
        self._chain_new = lib.neutrino_graph_chain_new
        self._chain_new.argtypes = [C.POINTER(NtChainDesc)]
        self._chain_new.restype = C.c_void_p
        self._chain_finish = waits.neutrino_graph_chain_finish
        self._chain_finish.argtypes = [C.c_void_p, C.c_int]
        self._chain_counts = waits.neutrino_graph_chain_counts
        self._chain_counts.argtypes = [C.c_void_p, C.c_uint32, C.c_uint64 * 3]
        self._chain_free = waits.neutrino_graph_chain_free
        self._chain_free.argtypes = [C.c_void_p]
        self._chain_pick = waits.neutrino_graph_chain_pick  # (both take the poller's lock)
        self._chain_pick.argtypes = [C.c_void_p, C.c_uint64, C.c_uint64, C.c_uint64]
        self._chain_unpick = waits.neutrino_graph_chain_unpick
        self._chain_unpick.argtypes = [C.c_void_p, C.c_uint64]
        self._chain_exec = waits.neutrino_graph_chain_exec  # (the poller's lock)
        self._chain_exec.argtypes = [C.c_void_p, C.c_void_p, C.c_int]
        lib.neutrino_graph_set_pending_limit.argtypes = [C.c_uint64]
        lib.neutrino_graph_set_pending_limit(pending_limit)
        self.filter = launch_filter
        self.writer = writer

    def new_record(self, node: GraphNode):
        kernel_id, fd = self.writer.kernel_file(node.kernel_dir)
        lay, dev = node.ring_layout, node.device_layout
        desc = NtGraphDesc(graph_id=node.group.id, node_id=node.id, kernel_id=kernel_id, fd=fd,
                           ring=node.ring[0], frame_size=node.frame_bytes, stream=node.stream,
                           shared_bytes=node.shared_bytes, frame_id=self.writer.frame_id(node.frame),
                           nslots=lay.nslots, stride=lay.stride, slots=lay.slots, ctx=node.group.ctx,
                           copy_stream=node.drain_stream,
                           device_slots=node.device + dev.slots if lay.on_device else 0,
                           device_stride=dev.stride, device_state=node.device + dev.state,
                           data_off=node.offsets[0], span=dev.span, nstage=lay.nstage)
        desc.grid[:] = node.grid
        desc.block[:] = node.block
        rec = self._new(C.byref(desc))
        if not rec:
            raise MemoryError("no memory for a graph node record")
        return rec

    def drain(self) -> None:
        self._drain()

    # --- the chain: drained by the C poller (shim/graphs.c, "the chain's rings"), frames to the native writer ---
    def new_chain(self, rings, nodes: list) -> int:
        """Register one executable graph's chain with the poller (ChainRings' memory: the poller uses its pinned
        staging from now on; nothing in Python reads the heads while it is registered)."""
        n = len(nodes)
        desc = NtChainDesc(ctx=nodes[0].group.ctx, copy_stream=rings.stream, heads=rings.heads, host=rings.host,
                           staging_bytes=rings.staging_bytes, n=n, k=rings.k,
                           rings=(C.c_uint64 * n)(*rings.rings), strides=(C.c_uint64 * n)(*rings.strides),
                           sinks=(C.c_uint64 * n)(*(int(i in rings.sinks) for i in range(n))),
                           records=(C.c_void_p * n)(*(node.record for node in nodes)), zeros=rings.zeros)
        handle = self._chain_new(C.byref(desc))
        if not handle:
            raise MemoryError("no memory for a graph chain record")
        return handle

    def chain_pick(self, handle: int, launch_filter) -> None:
        f = launch_filter
        self._chain_pick(handle, f.start, min(f.stop, 2**64 - 1), max(1, f.every))

    def chain_unpick(self, handle: int, next_replay: int) -> None:
        self._chain_unpick(handle, next_replay)

    def finish_chain(self, handle: int, detach: bool) -> None:
        self._chain_finish(handle, int(detach))

    def chain_counts(self, handle: int, i: int) -> tuple[int, int]:
        out = (C.c_uint64 * 3)()
        self._chain_counts(handle, i, out)
        return int(out[0]), int(out[1])

    def chain_exec(self, handle: int, exe: int, add: bool) -> None:
        """Executable graph `exe` of the chain's captured graph made (`add`) or gone: the poller counts its launches
        (a chain is idle only once its heads say every launch ran: shim/graphs.c, neutrino_graph_chain_exec)."""
        self._chain_exec(handle, exe, int(add))

    def free_chain(self, handle: int) -> None:
        self._chain_free(handle)

    def close(self) -> None:
        self._stop()
        self._drain()
        if os.environ.get("NEUTRINO_FAST_PROFILE", "0") not in ("", "0"):
            calls, frames = self.poller_counts()
            print(f"neutrino: graph rings copied out with {calls} driver calls for {frames} frames "
                  f"({calls / max(frames, 1):.2f} per frame)", file=sys.stderr)
            polls = (C.c_uint64 * 3)()
            self._chain_polls(polls)
            if polls[0]:
                print(f"neutrino: graph chains: {polls[0]} passes, {polls[1]} polls passed over as idle, at most "
                      f"{polls[2]} slots taken from one ring in one pass", file=sys.stderr)

    def poller_counts(self) -> tuple[int, int]:
        """The copy-out's driver calls so far, and the frames it handed to the writer."""
        out = (C.c_uint64 * 2)()
        self._counts(out)
        return int(out[0]), int(out[1])

    def detach(self, rec: int) -> None:
        self._detach(rec)

    def set_active(self, rec: int, active: bool) -> None:
        self._active(rec, int(active))

    def free_record(self, rec: int) -> None:
        self._free(rec)

    def stats(self, rec: int) -> dict:
        out = (C.c_uint64 * 5)()
        self._stats(rec, out)
        return dict(zip(self.STATS, (int(v) for v in out)))
