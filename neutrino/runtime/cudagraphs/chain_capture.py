"""The chain at a capture's end, the default (NEUTRINO_GRAPH_CHAIN=0: off; spec/runtime.md, "The chain").

When every probed node of a capture can be advanced by another (chain.choose_advancers over the captured graph's
ordinary edges), each probed kernel node is switched, before the program can instantiate the graph, to the
graph_chain variant of its kernel (KernelBuilder.chain_variant) with its head as the tagged first buffer parameter
and the other maps' offsets in its slot; the group gets one chain.ChainRings and no append node. Anything short of
that leaves the capture to the append path (capture.GraphProbes.end_capture), the nodes as captured.

This slice: both sinks (sinks.py: the shim's C poller drains the chain during the run and hands its frames to the
native writer; the fake drivers' Python sink drains it only when the graph probes drain), every replay probed or the
replays chosen by the host's picker (_pick; not the device gate alone), the heads shared by the executable graphs of the capture; the probed sinks' last launches published
by the host when the graph probes drain (exit, a context's teardown, a group's memory going) after the context's
synchronisation.
"""

from __future__ import annotations

import contextlib
import ctypes as C

from neutrino.runtime.cudagraphs import chain
from neutrino.runtime.driver import DriverError
from neutrino.runtime.instrument.probed import Fallback
from neutrino.runtime.start.options import LaunchFilter


def chain_nodes(group, nodes: list) -> list:
    """The nodes the chain would take: all of the capture's probed nodes (each with what its variant needs). Not a
    kernel with module globals: the capture copies them in and out of the probed module's copy, and the variant
    lives in a module of its own."""
    if group is None or group.chain is not None or len(nodes) < 2:
        return []
    return nodes if all(n.chain_src is not None and not n.chain_src[0].globals for n in nodes) else []


def _edges(drv, graph: int) -> list[tuple]:
    """The captured graph's edges (from, to, data), programmatic ones included; (from, to, 0) for the ordinary
    ones only where the driver cannot say more (tests' drivers)."""
    typed = getattr(drv, "graph_edges_typed", None)
    if typed is not None:
        return typed(graph)
    return [(a, b, 0) for a, b in drv.graph_edges(graph)]


def triggers_early(node) -> bool:
    """Whether the node's kernel may let its programmatic dependents start before its blocks end
    (griddepcontrol.launch_dependents, cudaTriggerProgrammaticLaunchCompletion): looked for in its module's PTX,
    so a module with any such kernel counts for all of them."""
    _, rec, _ = node.chain_src
    text = getattr(getattr(rec.module, "ptx", None), "text", None)
    return text is None or "griddepcontrol.launch_dependents" in text


def end_capture_chain(gp, graph: int, group, nodes: list, relaxed, stream: int) -> bool:
    """`gp`: capture.GraphProbes; `nodes`: the capture's probed nodes not yet served (end_capture's); `stream`: where
    the work after the capture goes (a stream of ours, as end_capture's). True when the chain took them; False leaves
    them to the append path, untouched (a failure part way is undone)."""
    nodes = chain_nodes(group, nodes)
    if not nodes or (gp.picker is None and gp.sink.filter != LaunchFilter()):
        return False  # (replays left out by the device gate alone: the chain has no gate)
    try:
        edges = _edges(gp.drv, graph)
    except DriverError:
        return False
    probed = [n.node for n in nodes]
    handles = list(dict.fromkeys([*probed, *(h for e in edges for h in e[:2])]))
    early = [n.node for n in nodes if triggers_early(n)]
    try:
        chosen = chain.choose_advancers(handles, edges, probed, early)
    except ValueError:  # (edges that make a cycle: not a graph CUDA makes)
        return False
    if chosen is None:
        programmatic = sum(1 for e in edges if e[2])
        gp.trace.event("graph_chain_refused", graph=group.id, graph_nodes=[n.id for n in nodes],
                       reason="no advancer for every probed node (each needs its own probed node ordered after its "
                              "end, or for a sink before it, by the graph's edges: "
                              f"{len(edges) - programmatic} ordinary, {programmatic} programmatic; "
                              f"{len(early)} probed kernel(s) trigger their dependents early)")
        return False
    at = {h: i for i, h in enumerate(probed)}
    advancers = {at[p]: chain.Advancer(at[a.node], a.next_replay) for p, a in chosen.items()}
    k = chain.ring_slots(n.ring_layout.nslots for n in nodes)
    held = chain.HEAD_BYTES * len(nodes) + sum(k * chain.slot_stride(n.span) for n in nodes)
    if not gp.budget.reserve(held):  # (the graphs' budget: the append path's memory is held as well)
        gp.trace.event("graph_chain_refused", graph=group.id, graph_nodes=[n.id for n in nodes],
                       reason=f"the graphs' buffer budget has no room for the chain's {held} bytes")
        return False
    rings = None
    switched: list = []
    try:
        with relaxed(gp.drv):  # (another thread may be capturing)
            funcs = [gp.chain_variant(pk, rec) for pk, rec, _ in (n.chain_src for n in nodes)]
            rings = chain.ChainRings(gp.drv, [n.span for n in nodes], advancers, k, stream)
            rings.held = held
            for i, (n, func) in enumerate(zip(nodes, funcs)):
                _set_buffers(n, [rings.head_param(i)] + [off - n.offsets[0] for off in n.offsets[1:]])
                switched.append(n)
                gp.drv.graph_kernel_node_set_params(n.node, func, n.grid, n.block, n.shared_bytes,
                                                    C.addressof(n.keep))
            rings.sink_handle = gp.sink.new_chain(rings, nodes)  # (the native sink: polled from now on)
            if gp.picker is not None:
                _pick(gp, rings, nodes, funcs)
    except (Fallback, DriverError, ValueError, MemoryError) as e:
        _undo(gp, switched, relaxed)
        if rings is not None:
            with contextlib.suppress(DriverError):
                rings.free()
        gp.budget.give_back(held)
        gp.trace.event("graph_chain_refused", graph=group.id, graph_nodes=[n.id for n in nodes],
                       reason=f"{type(e).__name__}: {e}")
        return False
    group.chain, group.chain_order = rings, list(nodes)
    for exe in group.execs:  # (executable graphs made before: a capture into a graph that had some)
        gp.sink.chain_exec(rings.sink_handle, exe, True)
    for n, func in zip(nodes, funcs):
        n.appended = True  # (served: no append node for it, now or at a later capture's end)
        n.chain_func = func
    programmatic = sum(1 for e in edges if e[2])
    gp.trace.event("graph_chain", graph=group.id, graph_nodes=[n.id for n in nodes], ring_slots=k,
                   advancers={nodes[p].id: nodes[a.node].id for p, a in advancers.items()},
                   edges={"ordinary": len(edges) - programmatic, "programmatic": programmatic})
    return True


def _pick(gp, rings, nodes: list, funcs: list) -> None:
    """`--launches` chosen by the host (replay_select.py, spec/runtime.md "The chain", "Sampling"): the plans switch
    the chain nodes to their parameters as the chain set them (head and offsets), copied here; the sink numbers the
    k-th launch start + (k − 1) × every. A node whose arguments cannot be copied gets no plan (capture._plan_replays
    then unpicks: every replay runs the chain, the host keeps the selected ones)."""
    for n, func in zip(nodes, funcs):
        gp.picker.free_args(n.pick_args)
        j = next(j for j, (_, is_buffer) in enumerate(n.chain_src[2]) if is_buffer)
        n.pick_args = gp.picker.copy_chain_args(func, C.addressof(n.keep), n.n_params + j)
    gp.sink.chain_pick(rings.sink_handle, gp.sink.filter)


def _set_buffers(node, values: list[int]) -> None:
    """The node's map buffer arguments (behind its parameter array `keep`) set to `values`, map by map (the maps in
    the order of the kernel's buffer parameters: the first is map 0, the one the head stands for)."""
    plan = node.chain_src[2]
    buffers = [(which, j) for j, (which, is_buffer) in enumerate(plan) if is_buffer]
    if not buffers or buffers[0][0] != 0:
        raise ValueError("the first buffer parameter is not map 0's")
    for which, j in buffers:
        C.c_uint64.from_address(node.keep[node.n_params + j]).value = values[which]


def _undo(gp, switched: list, relaxed) -> None:
    """Nodes already switched go back to their probed kernel and buffers (the append path takes them)."""
    for n in switched:
        _set_buffers(n, [n.buffers[0] | 1] + list(n.buffers[1:]))
        try:
            with relaxed(gp.drv):
                gp.drv.graph_kernel_node_set_params(n.node, n.probed_func, n.grid, n.block, n.shared_bytes,
                                                    C.addressof(n.keep))
        except DriverError:
            gp._lose_results(n, "graph chain: a node could not be set back to its probed kernel")  # noqa: SLF001


def drain_chains(gp, groups, relaxed, detach: bool = False) -> None:
    """Every chain's frames to the sink: the probed sinks' last launches published by the host, then the rings
    drained (sinks.py, finish_chain: under the native poller's lock). Only after the context's synchronisation,
    with no launch being made (exit, teardown, memory going). `detach`: the chains' memory or context goes next;
    the poller lets them go (their counts stay readable until free_chain)."""
    for group in groups:
        rings = group.chain
        if rings is None:
            continue
        try:
            with relaxed(gp.drv):  # (the drains and frees go on a stream of ours: the program's may be gone)
                rings.stream = gp._our_stream(group.ctx)  # noqa: SLF001
            gp.sink.finish_chain(rings.sink_handle, detach)
        except DriverError as e:
            gp.trace.event("result_error", graph=group.id, reason=f"graph chain: draining: {e}")


def chain_stats(gp, group, node, row: dict) -> dict:
    """The summary's counts of a chain node: replays it ran (written + dropped) and drops, a full ring's added to
    the host's (`row`: the sink's counts of its record: the writer behind, the trace budget)."""
    i = group.chain_order.index(node)
    try:
        written, dropped = gp.sink.chain_counts(group.chain.sink_handle, i)
    except DriverError:
        return {}
    return {"replays": written + dropped, "dropped_behind": dropped + row.get("dropped_behind", 0)}


def free_chain(gp, group) -> None:
    """The group's heads and rings freed (drained and detached first by the caller), their bytes given back to the
    budget."""
    if group.chain is not None:
        gp.sink.free_chain(group.chain.sink_handle)
        with contextlib.suppress(DriverError):
            group.chain.free()
        gp.budget.give_back(group.chain.held)
        group.chain = None
