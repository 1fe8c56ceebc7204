"""The chain, an append-free graph data path (spec/runtime.md, "The chain"; the default): the host's part
that does not touch the driver.

* `choose_advancers`: from a captured graph's edges (ordinary and programmatic), which probed node advances which (or None: the graph
  keeps the append node);
* the heads' words (`initial_head`, `pack`, `unpack`) and the host's own advance of a probed sink after the last
  replay (`host_advance`, the device's advance of passes/graph_chain.py in Python);
* the poller's pass over one node: which slots to copy out and zero (`slot_runs`).

The layout constants are the engine's (neutrino/passes/graph_chain.py): the kernel and the host read one table.
"""

from __future__ import annotations

import os
from typing import Hashable, Iterable

import attrs

from neutrino.chain_head import (  # noqa: F401 (re-exported for the runtime)
    ADV, CUR, DRAINED, DROPPED, GEOM, HEAD_BYTES, PRIMED, RING, TAG_BYTES, WRITTEN, slot_stride,
)

WORDS = 8  # the head's words the protocol uses (the rest of HEAD_BYTES is a reserved table, zero)
DROP_MASK = 0xFFFFFFFF
ENV = "NEUTRINO_GRAPH_CHAIN"  # "0": captured graphs keep the append node (the chain is the default)


def enabled(environ=os.environ) -> bool:
    return environ.get(ENV, "1") != "0"


@attrs.frozen
class Advancer:
    """Who advances a probed node: `node`, in the same replay (a descendant) or in the next one (`next_replay`: an
    ancestor; the advanced node is then a probed sink, which starts unprimed)."""

    node: Hashable
    next_replay: bool


def topological(nodes: list, edges: Iterable[tuple]) -> list:
    """`nodes` in an order every edge (a, b) goes forward in; ties kept in the given order. ValueError on a cycle."""
    succ: dict = {n: [] for n in nodes}
    indeg = {n: 0 for n in nodes}
    for a, b in edges:
        succ[a].append(b)
        indeg[b] += 1
    ready = [n for n in nodes if indeg[n] == 0]
    out = []
    while ready:
        n = ready.pop(0)
        out.append(n)
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    if len(out) != len(nodes):
        raise ValueError("the graph's edges make a cycle")
    return out


def _reach(order: list, edges: Iterable[tuple]) -> dict:
    """node → the nodes an edge path leads to from it."""
    succ: dict = {n: set() for n in order}
    for a, b in edges:
        succ[a].add(b)
    reach: dict = {}
    for n in reversed(order):
        r = set(succ[n])
        for m in succ[n]:
            r |= reach[m]
        reach[n] = r
    return reach


# CUgraphEdgeData as a u64 (the driver's `graph_edges_typed`): byte 0 its from_port, byte 2 its type
PORT_PROGRAMMATIC = 1  # CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC: all blocks triggered early or terminated
EDGE_PROGRAMMATIC = 1  # CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC


def _edge(e: tuple) -> tuple:
    """(from, to, data): an edge given as (from, to) is an ordinary one (data 0)."""
    return (e[0], e[1], e[2] if len(e) > 2 else 0)


def after_exit(data: int, src, triggers_early: frozenset) -> bool:
    """Whether the edge's target starts only once every block of `src` has ended: an ordinary edge (it waits
    for `src` to complete), or a programmatic one from `src`'s programmatic port (it waits for every block to
    trigger or terminate) when `src` never triggers early (griddepcontrol.launch_dependents). Not one from the
    launch-order port (its target may start once `src`'s blocks have begun)."""
    if data == 0:
        return True
    port, kind = data & 0xFF, (data >> 16) & 0xFF
    return kind == EDGE_PROGRAMMATIC and port == PORT_PROGRAMMATIC and src not in triggers_early


def candidates(nodes: list, edges: list[tuple], probed: set, triggers_early: Iterable = ()) -> dict:
    """Each probed node's possible advancers, best first: its probed descendants, nearest first (topological
    order); for a probed sink, its probed ancestors in topological order (they advance it in the next replay).
    A descendant counts only along a path whose first edge starts its target after every block of the probed
    node has ended (`after_exit`): any later edge starts its target no earlier than its source began, so the
    advancer then starts after the advanced node's blocks are gone (their head read, their records stored).
    `edges`: (from, to) ordinary edges, or (from, to, data) with CUgraphEdgeData (programmatic ones too)."""
    typed = [_edge(e) for e in edges]
    plain = [(a, b) for a, b, _ in typed]
    early = frozenset(triggers_early)
    order = topological(nodes, plain)
    pos = {n: i for i, n in enumerate(order)}
    reach = _reach(order, plain)
    first_hops: dict = {n: set() for n in order}
    for a, b, data in typed:
        if a in probed and after_exit(data, a, early):
            first_hops[a] |= {b} | reach[b]
    out = {}
    for p in (n for n in order if n in probed):
        below = sorted((d for d in first_hops[p] if d in probed), key=pos.__getitem__)
        if below:
            out[p] = [Advancer(d, False) for d in below]
        else:  # (the next replay starts once this one has completed: any ancestor)
            out[p] = [Advancer(a, True) for a in order if a in probed and p in reach[a]]
    return out


def choose_advancers(nodes: list, edges: list[tuple], probed: Iterable, triggers_early: Iterable = ()) -> dict | None:
    """advanced node → its Advancer, each probed node advanced by one other and each advancing at most one (the
    head's one `adv` word): a matching, by augmenting paths, probed nodes in topological order. None when there is
    none (a single probed node, joins that need an advancer of several: the graph keeps the append node)."""
    probed = set(probed)
    cands = candidates(nodes, edges, probed, triggers_early)
    if len(probed) < 2:
        return None
    advances: dict = {}  # advancer → the node it advances

    def assign(p, seen: set) -> bool:
        for c in cands[p]:
            if c.node in seen:
                continue
            seen.add(c.node)
            if c.node not in advances or assign(advances[c.node], seen):
                advances[c.node] = p
                return True
        return False

    for p in cands:
        if not assign(p, set()):
            return None
    # (same replay or next is the advanced node's: descendants, or for a sink ancestors)
    return {p: Advancer(a, cands[p][0].next_replay) for a, p in advances.items()}


# --- the heads -----------------------------------------------------------------------------------------------

def initial_head(ring: int, k: int, stride: int, adv: int, primed: bool) -> list[int]:
    """A head at instantiation: slot 0 for the first launch (its tag 1 is the caller's to store), nothing counted."""
    if k < 2 or k & (k - 1):
        raise ValueError(f"a chain ring's slots must be a power of 2, at least 2 (got {k})")
    return [ring, adv, ring, (k - 1) | stride << 32, 0, PRIMED if primed else 0, 0, 0]


def pack(words: list[int]) -> bytes:
    return b"".join(w.to_bytes(8, "little") for w in words)


def unpack(raw: bytes) -> list[int]:
    return [int.from_bytes(raw[i:i + 8], "little") for i in range(0, 8 * WORDS, 8)]


def written(h: list[int]) -> int:
    return h[WRITTEN // 8]


def dropped(h: list[int]) -> int:
    return h[DROPPED // 8] & DROP_MASK


def device_advance(h: list[int]) -> tuple[list[int], tuple[int, int] | None]:
    """The advance passes/graph_chain.advance emits, on a head's words (what a fake driver runs for a chain kernel):
    an unprimed head is only primed; else the launch just finished is published (or counted dropped) and the next
    slot picked. Returns the new words and the tag to store ((address, launch number)) when a slot was picked."""
    h = list(h)
    if not h[DROPPED // 8] & PRIMED:
        h[DROPPED // 8] |= PRIMED
        return h, None
    h, tag = _publish(h)
    return h, tag


def host_advance(h: list[int]) -> tuple[list[int], tuple[int, int] | None]:
    """A probed sink's last launch published by the host (the context synchronised, no launch of its executable graph
    in flight or being made): the device's advance on the head's words, then `primed` cleared, so a later replay's
    device advance only primes it again. Returns the new words and the tag to store ((address, launch number)) when a
    slot was picked. An unprimed head (nothing ran since) is left as it is."""
    h = list(h)
    if not h[DROPPED // 8] & PRIMED:
        return h, None
    h, tag = _publish(h)
    h[DROPPED // 8] &= ~PRIMED
    return h, tag


def _publish(h: list[int]) -> tuple[list[int], tuple[int, int] | None]:
    """Steps 2-4 of the advance (spec/runtime.md, "The chain") on a primed head's words (a copy)."""
    if h[CUR // 8]:
        h[WRITTEN // 8] += 1
    else:
        h[DROPPED // 8] += 1
    n, mask, stride = h[WRITTEN // 8], h[GEOM // 8] & DROP_MASK, h[GEOM // 8] >> 32
    full = n - h[DRAINED // 8] >= mask + 1
    nxt = 0 if full else h[RING // 8] + (n & mask) * stride
    h[CUR // 8] = nxt
    tag = (nxt + stride - TAG_BYTES, n + dropped(h) + 1) if nxt else None
    return h, tag


class ReplayMap:
    """A chain node's launch number (its slot's tag, 1-based) to the replay it ran (spec/runtime.md, "The chain",
    "Sampling"; shim/graphs.c chain_replay is the same). Every launch a replay (launch − 1) until `pick`: the host
    chooses the replays (replay_select.py), the probed graph runs only those, launch k is replay start + (k − 1) ×
    every; after `unpick(next)` (the host stopped choosing at replay `next`), each launch is one replay again, numbered
    on, and those `--launches` leaves out are not asked for (None)."""

    def __init__(self):
        self.filter = None
        self.picked_upto = self.unpicked_from = 0

    def pick(self, launch_filter) -> None:
        self.filter, self.picked_upto = launch_filter, None

    def unpick(self, next_replay: int) -> None:
        f = self.filter
        if f is None or self.picked_upto is not None:
            return
        end = min(next_replay, f.stop)
        self.picked_upto = -(-(end - f.start) // max(1, f.every)) if end > f.start else 0
        self.unpicked_from = next_replay

    def replay(self, tag: int) -> int | None:
        f = self.filter
        if f is None:
            return tag - 1
        if self.picked_upto is None or tag <= self.picked_upto:
            return f.start + (tag - 1) * max(1, f.every)
        r = self.unpicked_from + tag - 1 - self.picked_upto
        return r if f.selects(r) else None


def ring_slots(append_slots: Iterable[int]) -> int:
    """K, one chain's slots per ring (one K for all its nodes): the smallest power of 2 (the advance masks) not below
    the fewest append path slots of its nodes, so that node's ring holds every replay its append node would while the
    host is behind, and no node's ring takes more than twice its append ring's bytes. (The largest power of 2 not
    above held up to half as many: issue 24's gmem_bytes, 1,008 append slots, a chain of 512.)"""
    fewest = max(2, min(append_slots))
    return 1 << (fewest - 1).bit_length()


def slot_runs(drained: int, written_: int, k: int) -> list[tuple[int, int]]:
    """The poller's slots of one node, published and not yet drained, as (first slot, count) runs that do not wrap
    the ring: one copy-out and one zeroing each."""
    if written_ - drained > k or written_ < drained:
        raise ValueError(f"a head says {written_} written, {drained} drained: more than the ring's {k} slots apart")
    runs, n = [], drained
    while n < written_:
        first = n % k
        count = min(written_ - n, k - first)
        runs.append((first, count))
        n += count
    return runs


# --- one executable graph's chain in device memory, and the poller's pass ---------------------------------------

class ChainRings:
    """The heads (one allocation, HEAD_BYTES each) and rings (one allocation per node, K slots of `slot_stride`)
    of one executable graph's probed nodes 0..n-1 (`spans`: each node's maps, bytes; `advancers`: choose_advancers'
    answer over those indices), made ready on `stream` (a stream of ours, outside any capture). Driver calls only
    through `drv` (neutrino.runtime.driver.Driver or a fake): allocation, copies, memsets, synchronisation.

    The kernel parameters of node i: `head_param(i)` for its first map's buffer, each other map's byte offset in
    the slot for the others. `poll` is the poller's pass; `finish` the host's last advance of the probed sinks,
    only with no launch of the executable graph in flight or being made (the context synchronised)."""

    def __init__(self, drv, spans: list[int], advancers: dict, k: int, stream: int):
        if sorted(advancers) != list(range(len(spans))):
            raise ValueError("every probed node needs its advancer")
        self.drv, self.stream, self.k = drv, stream, k
        self.spans = list(spans)
        self.strides = [slot_stride(s) for s in spans]
        self.sinks = [i for i, a in advancers.items() if a.next_replay]
        self.drained = [0] * len(spans)
        self.frames = [0] * len(spans)
        self.held = 0  # bytes its owner holds against a budget for it
        self.sink_handle = None  # what drains it (sinks.py, new_chain)
        n = len(spans)
        self.heads = drv.mem_alloc_sync(HEAD_BYTES * n)
        self.rings: list[int] = []
        self._host = None
        self.zeros = 0
        try:
            for stride in self.strides:
                self.rings.append(drv.mem_alloc_sync(k * stride))
            by = {a.node: p for p, a in advancers.items()}  # advancer → the node it advances
            heads = b"".join(pack(initial_head(self.rings[i], k, self.strides[i], self.head(by[i]) if i in by else 0,
                                               not advancers[i].next_replay)) + bytes(HEAD_BYTES - 8 * WORDS)
                             for i in range(n))
            # pinned staging: the heads' copy, then the largest ring (a pass copies one node's slots at a time)
            self._host, self._view = drv.host_alloc(len(heads) + 8 * n + max(k * s for s in self.strides))
            self._view[:len(heads)] = heads
            # pinned zeroes a whole ring long: slots are zeroed by copies, never by a memset (a memset of ours near a
            # capture made every later graph replay of the process ~9% slower: docs/overhead.md, "Session 11")
            self.zeros, zview = drv.host_alloc(self.staging_bytes)
            zview[:] = bytes(len(zview))
            drv.memcpy_htod_async(self.heads, self._host, len(heads), stream)
            for i, ring in enumerate(self.rings):
                drv.memcpy_htod_async(ring, self.zeros, k * self.strides[i], stream)
            drv.stream_synchronize(stream)  # (the rings zeroed before slot 0's tag lands)
            for i in range(n):
                self._tag(self.rings[i] + self.strides[i] - TAG_BYTES, 1, i)
            drv.stream_synchronize(stream)
        except BaseException:
            self.free()
            raise

    @property
    def host(self) -> int:
        """The pinned staging: the heads' copy (HEAD_BYTES each), a u64 per node, then `staging_bytes`."""
        return self._host

    @property
    def staging_bytes(self) -> int:
        return max(self.k * s for s in self.strides)

    def head(self, i: int) -> int:
        return self.heads + HEAD_BYTES * i

    def head_param(self, i: int) -> int:
        """Node i's first buffer parameter: its head, tagged (bit 0: the chain's head, not a buffer)."""
        return self.head(i) | 1

    def _word_at(self, i: int) -> int:
        """A pinned u64 of node i's own (staging for a word copied to the device: live until the next pass's wait)."""
        return self._host + HEAD_BYTES * len(self.spans) + 8 * i

    def _tag(self, address: int, launch: int, i: int) -> None:
        at = self._word_at(i) - self._host
        self._view[at:at + 8] = launch.to_bytes(8, "little")
        self.drv.memcpy_htod_async(address, self._word_at(i), 8, self.stream)

    def read_heads(self) -> list[list[int]]:
        n = len(self.spans)
        self.drv.memcpy_dtoh_async(self._host, self.heads, HEAD_BYTES * n, self.stream)
        self.drv.stream_synchronize(self.stream)
        raw = bytes(self._view[:HEAD_BYTES * n])
        return [unpack(raw[HEAD_BYTES * i:HEAD_BYTES * i + 8 * WORDS]) for i in range(n)]

    def poll(self, on_frame) -> int:
        """One pass: the heads read; per node, its published slots copied out and zeroed (two copies per run that does
        not wrap: out, and pinned zeroes in), a wait, each frame handed to `on_frame(node, launch number, maps bytes)`, and only
        then the node's `drained` written into its head (8 bytes: the advancer's words are left alone). Returns the
        frames handed over."""
        got = 0
        staging = self._host + HEAD_BYTES * len(self.spans) + 8 * len(self.spans)
        base = staging - self._host
        for i, h in enumerate(self.read_heads()):
            runs = slot_runs(self.drained[i], written(h), self.k)
            if not runs:
                continue
            stride, at = self.strides[i], 0
            for first, count in runs:
                size = count * stride
                self.drv.memcpy_dtoh_async(staging + at, self.rings[i] + first * stride, size, self.stream)
                self.drv.memcpy_htod_async(self.rings[i] + first * stride, self.zeros, size, self.stream)
                at += size
            self.drv.stream_synchronize(self.stream)  # copied, and zeroed before the device may have the slots back
            for s in range(at // stride):
                slot = bytes(self._view[base + s * stride:base + (s + 1) * stride])
                on_frame(i, int.from_bytes(slot[stride - TAG_BYTES:stride - TAG_BYTES + 8], "little"),
                         slot[:self.spans[i]])
            got += at // stride
            self.drained[i] += at // stride
            self.frames[i] += at // stride
            word = self._word_at(i) - self._host
            self._view[word:word + 8] = self.drained[i].to_bytes(8, "little")
            self.drv.memcpy_htod_async(self.head(i) + DRAINED, self._word_at(i), 8, self.stream)
        self.drv.stream_synchronize(self.stream)
        return got

    def finish(self, on_frame) -> int:
        """The probed sinks' last launches published by the host, then drained: the caller has synchronised the
        context (no launch of the executable graph in flight or being made). A later replay goes on as before."""
        heads = self.read_heads()
        for i in self.sinks:
            words, tag = host_advance(heads[i])
            if words == heads[i]:
                continue
            if tag is not None:
                self._tag(tag[0], tag[1], i)
                self.drv.stream_synchronize(self.stream)
            at = HEAD_BYTES * i
            self._view[at:at + 8 * WORDS] = pack(words)
            self.drv.memcpy_htod_async(self.head(i), self._host + at, 8 * WORDS, self.stream)
            self.drv.stream_synchronize(self.stream)
        return self.poll(on_frame)

    def counts(self) -> list[tuple[int, int, int]]:
        """Per node: (written, dropped, drained)."""
        return [(written(h), dropped(h), self.drained[i]) for i, h in enumerate(self.read_heads())]

    def free(self) -> None:
        for ring in self.rings:
            self.drv.mem_free_sync(ring)
        self.rings = []
        if self.heads:
            self.drv.mem_free_sync(self.heads)
            self.heads = 0
        if self._host is not None:
            self.drv.host_free(self._host)
            self._host = None
        if self.zeros:
            self.drv.host_free(self.zeros)
            self.zeros = 0
