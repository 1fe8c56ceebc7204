"""The chain, an append-free graph data path (spec/runtime.md, "The chain"; not yet the default): the host's part
that does not touch the driver.

* `choose_advancers`: from a captured graph's ordinary edges, which probed node advances which (or None: the graph
  keeps the append node);
* the heads' words (`initial_head`, `pack`, `unpack`) and the host's own advance of a probed sink after the last
  replay (`host_advance`, the device's advance of passes/graph_chain.py in Python);
* the poller's pass over one node: which slots to copy out and zero (`slot_runs`).

The layout constants are the engine's (neutrino/passes/graph_chain.py): the kernel and the host read one table.
"""

from __future__ import annotations

from typing import Hashable, Iterable

import attrs

from neutrino.passes.graph_chain import (  # noqa: F401 (re-exported for the runtime)
    ADV, CUR, DRAINED, DROPPED, GEOM, HEAD_BYTES, PRIMED, RING, TAG_BYTES, WRITTEN, slot_stride,
)

WORDS = 8  # the head's words the protocol uses (the rest of HEAD_BYTES is a reserved table, zero)
DROP_MASK = 0xFFFFFFFF


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


def candidates(nodes: list, edges: list[tuple], probed: set) -> dict:
    """Each probed node's possible advancers, best first: its probed descendants, nearest first (topological
    order); for a probed sink, its probed ancestors in topological order (they advance it in the next replay).
    `edges`: the ordinary edges only (a programmatic one lets the next kernel start before this one completes)."""
    order = topological(nodes, edges)
    pos = {n: i for i, n in enumerate(order)}
    reach = _reach(order, edges)
    out = {}
    for p in (n for n in order if n in probed):
        below = sorted((d for d in reach[p] if d in probed), key=pos.__getitem__)
        if below:
            out[p] = [Advancer(d, False) for d in below]
        else:
            out[p] = [Advancer(a, True) for a in order if a in probed and p in reach[a]]
    return out


def choose_advancers(nodes: list, edges: list[tuple], probed: Iterable) -> dict | None:
    """advanced node → its Advancer, each probed node advanced by one other and each advancing at most one (the
    head's one `adv` word): a matching, by augmenting paths, probed nodes in topological order. None when there is
    none (a single probed node, joins that need an advancer of several: the graph keeps the append node)."""
    probed = set(probed)
    cands = candidates(nodes, edges, probed)
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


def host_advance(h: list[int]) -> tuple[list[int], tuple[int, int] | None]:
    """A probed sink's last launch published by the host (the context synchronised, no launch of its executable graph
    in flight or being made): the device's advance (passes/graph_chain.advance) on the head's words, then `primed`
    cleared, so a later replay's device advance only primes it again. Returns the new words and the tag to store
    ((address, launch number)) when a slot was picked. An unprimed head (nothing ran since) is left as it is."""
    h = list(h)
    if not h[DROPPED // 8] & PRIMED:
        return h, None
    if h[CUR // 8]:
        h[WRITTEN // 8] += 1
    else:
        h[DROPPED // 8] += 1
    n, mask, stride = h[WRITTEN // 8], h[GEOM // 8] & DROP_MASK, h[GEOM // 8] >> 32
    full = n - h[DRAINED // 8] >= mask + 1
    nxt = 0 if full else h[RING // 8] + (n & mask) * stride
    h[CUR // 8] = nxt
    h[DROPPED // 8] &= ~PRIMED
    tag = (nxt + stride - TAG_BYTES, n + dropped(h) + 1) if nxt else None
    return h, tag


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
