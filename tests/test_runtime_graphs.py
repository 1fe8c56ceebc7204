"""CUDA graphs: capture, replay, update and destroy, against the fake driver's graph model (no GPU).

The fake driver (tests/fakedriver.py) records work enqueued on a capturing
stream as graph nodes with their dependencies, refuses allocation where a
capture mode forbids it, and replays an executable graph's nodes in order.
The "program" here launches saxpy4 into a capture the way the shim would:
through `Runtime.on_launch`, and the original kernel itself when that returns
NOT_HANDLED. Its own result is a counter of kernel runs (`program_impl`).
"""

from __future__ import annotations

import ctypes as C
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import neutrino.trace as nt
from neutrino.analysis import report as analysis_report
from neutrino.runtime.core import NOT_HANDLED
from neutrino.runtime.driver import CAPTURE_MODE_GLOBAL, CAPTURE_MODE_RELAXED, CAPTURE_MODE_THREAD_LOCAL, DriverError
from neutrino.runtime.cudagraphs.capture import (
    G_ADD_KERNEL_NODE,
    G_BEGIN_CAPTURE,
    G_CLONE,
    G_END_CAPTURE,
    G_EXEC_DESTROY,
    G_GRAPH_DESTROY,
    G_INSTANTIATE,
    G_SET_PARAMS,
    KernelNodeParamsV2,
)
from neutrino.runtime.cudagraphs import ring as graph_ring
from neutrino.runtime.cudagraphs.ring import APPEND_KERNEL
from neutrino.runtime.start.options import LaunchFilter

from test_runtime_shim import FAKE, VEC_PTX, _run_under_fake, fakecuda, shim  # noqa: F401 - fixtures
from test_runtime_core import COUNT_PROBE, events, fake_block_sched, finish, load_saxpy, make_runtime, req

STREAM = 0x5
CYCLES = int(os.environ.get("NEUTRINO_GRAPH_CYCLES", "1000"))  # capture/replay/destroy cycles of the leak test


@pytest.fixture(autouse=True)
def _append_path(monkeypatch):
    """This module tests the append node: the chain (the default; tests/test_runtime_graph_chain.py and
    tests/test_graph_chain_*.py) is turned off."""
    monkeypatch.setenv("NEUTRINO_GRAPH_CHAIN", "0")


class Program:
    """A program that captures saxpy4 (probed) then `other` (never probed) into one graph."""

    def __init__(self, tmp_path, **opts):
        self.rt, self.drv, _ = make_runtime(tmp_path, **opts)
        self.runs = {"saxpy4": 0, "other": 0}
        for name in self.runs:
            self.drv.program_impl[name] = self._counter(name)
        load_saxpy(self.rt)
        self.drv.functions[0x200] = (0x100, "saxpy4")  # the program's own (unprobed) saxpy4, as the driver knows it
        self.other = self.drv.module_get_function(0x999, "other")
        self.keep = []

    def _counter(self, name):
        def run(drv, req_, params):
            self.runs[name] += 1
        return run

    def capture(self, mode=CAPTURE_MODE_GLOBAL, grid=(4, 1, 1)):
        """Capture one graph; returns (graph handle, what on_launch answered)."""
        self.rt.on_graph(G_BEGIN_CAPTURE, STREAM, 0)  # what the shim reports before cuStreamBeginCapture
        self.drv.begin_capture(STREAM, mode)
        r, params = req(grid=grid)
        r = type(r)(r.kind, r.func, r.grid, r.block, r.shared_bytes, STREAM, r.params, index=r.index)
        self.keep.append(params)
        rc = self.rt.on_launch(r)
        if rc == NOT_HANDLED:  # what the shim does: the original launch, captured
            assert self.drv.launch(r.kind, r.func, r, r.params) == 0
        self.drv.launch(r.kind, self.other, r, r.params)  # the program's next kernel
        graph = self.drv.end_capture(STREAM)
        self.rt.on_graph(G_END_CAPTURE, STREAM, graph)  # what the shim reports after cuStreamEndCapture
        return graph, rc

    def instantiate(self, graph):
        exe = self.drv.graph_instantiate(graph)
        self.rt.on_graph(G_INSTANTIATE, graph, exe)
        return exe

    def replay(self, exe, n):
        for _ in range(n):
            self.drv.graph_launch(exe)

    def destroy(self, graph, exe):
        self.drv.exec_destroy(exe)
        self.rt.on_graph(G_EXEC_DESTROY, exe, 0)
        self.drv.graph_destroy(graph)
        self.rt.on_graph(G_GRAPH_DESTROY, graph, 0)


@pytest.fixture
def program(tmp_path):
    p = Program(tmp_path)
    p.drv.kernel_impl["saxpy4"] = fake_block_sched
    return p


def node_kinds(drv, graph):
    return [(n["kind"], drv.functions.get(n.get("func"), (0, None))[1]) for n in drv.graphs[graph].nodes]


@pytest.mark.parametrize("mode", [CAPTURE_MODE_GLOBAL, CAPTURE_MODE_THREAD_LOCAL, CAPTURE_MODE_RELAXED],
                         ids=["global", "thread_local", "relaxed"])
def test_capture_and_replay_one_result_per_replay(program, mode):
    graph, rc = program.capture(mode)
    assert rc == 0
    drv = program.drv
    # no memset node: the maps are zeroed once at capture (on a stream of ours) and then by the append kernel;
    # the append node, added when the capture ended after the probed kernel, is a leaf (no host node)
    assert node_kinds(drv, graph) == [("kernel", "saxpy4"), ("kernel", "other"), ("kernel", APPEND_KERNEL)]
    kernel, other, append = drv.graphs[graph].nodes
    assert append["deps"] == [kernel["handle"]]
    assert not drv.graphs[graph].dependents(append["handle"])
    assert other["deps"] == [kernel["handle"]]  # the program's next kernel waits for the probed kernel only
    assert getattr(drv._mode, "mode", CAPTURE_MODE_GLOBAL) == CAPTURE_MODE_GLOBAL  # mode given back
    exe = program.instantiate(graph)
    program.replay(exe, 5)
    assert program.runs == {"saxpy4": 5, "other": 5}
    finish(program.rt)
    t = nt.load(program.rt.trace.path)
    (node_ev,) = events(program.rt, "graph_node")
    assert node_ev["kernel"] == "saxpy4" and node_ev["graph"] == 1 and node_ev["graph_node"] == 1
    assert [la.event["replay"] for la in t.launches] == list(range(5))
    assert {la.graph for la in t.launches} == {(1, 1)}
    for la in t.launches:
        v = la.maps["block_sched"].valid()
        assert len(v) == 8 and list(v["unit"]) == list(range(8)) and set(v["elapse"]) == {5}
    (ex,) = events(program.rt, "exit")
    assert ex["launches"] == 5


def test_no_graphs_option_leaves_captured_launches_unprobed(tmp_path):
    """With --no-graphs a captured launch is the program's own, logged as a fallback, and every
    replay runs the original kernel only."""
    p = Program(tmp_path, graphs=False)
    p.drv.kernel_impl["saxpy4"] = fake_block_sched
    graph, rc = p.capture()
    assert rc == NOT_HANDLED
    assert [k for k, _ in node_kinds(p.drv, graph)] == ["kernel", "kernel"]
    exe = p.instantiate(graph)
    p.replay(exe, 3)
    assert p.runs == {"saxpy4": 3, "other": 3}
    finish(p.rt)
    (fb,) = events(p.rt, "fallback")
    assert fb["stage"] == "capture" and "--no-graphs" in fb["reason"]
    assert not nt.load(p.rt.trace.path).launches


def test_replays_are_zeroed_between_runs(program):
    """The memset node runs every replay: counts a replay does not write read 0."""
    state = {"n": 0}

    def half_the_time(drv, r, params, name):
        fake_block_sched(drv, r, params, name)
        state["n"] += 1
        if state["n"] % 2 == 0:  # every other replay, only unit 0 saves
            from fakedriver import probe_buffer

            counts = (C.c_uint32 * 8).from_address(probe_buffer(params, 4))
            for u in range(1, 8):
                counts[u] = 0

    program.drv.kernel_impl["saxpy4"] = half_the_time
    graph, _ = program.capture()
    exe = program.instantiate(graph)
    program.replay(exe, 4)
    finish(program.rt)
    t = nt.load(program.rt.trace.path)
    assert [len(la.maps["block_sched"].valid()) for la in t.launches] == [8, 1, 8, 1]


def test_launch_filter_counts_replays(tmp_path):
    p = Program(tmp_path, launches=LaunchFilter(start=2, every=3))
    p.drv.kernel_impl["saxpy4"] = fake_block_sched
    graph, rc = p.capture()
    assert rc == 0
    exe = p.instantiate(graph)
    p.replay(exe, 10)
    finish(p.rt)
    t = nt.load(p.rt.trace.path)
    assert [la.event["replay"] for la in t.launches] == [2, 5, 8]
    assert p.runs["saxpy4"] == 10


def test_replays_left_out_by_launches_run_with_the_probe_gated_off(tmp_path):
    """Sampling inside a graph: the probed kernel of a replay that --launches leaves out finds its
    gate set (the append kernel writes it for the next replay; the capture for replay 0) and writes
    nothing; the append node neither copies nor zeroes it. Selected replays probe and are written."""
    from fakedriver import probe_buffer

    p = Program(tmp_path, launches=LaunchFilter(start=2, every=3))
    probed = []

    def kernel(drv, r, params, name):
        probed.append(probe_buffer(params, 4) is not None)
        fake_block_sched(drv, r, params, name)

    p.drv.kernel_impl["saxpy4"] = kernel
    graph, _ = p.capture()
    exe = p.instantiate(graph)
    probed.clear()  # the capture's own run
    p.replay(exe, 11)
    (gnode,) = [n for g in p.rt.graphs._by_graph.values() for n in g.nodes]  # noqa: SLF001
    assert [i for i, on in enumerate(probed) if on] == [2, 5, 8]
    assert C.c_uint32.from_address(gnode.device + gnode.device_layout.gate).value == 0  # replay 11 is selected
    finish(p.rt)
    t = nt.load(p.rt.trace.path)
    assert [la.event["replay"] for la in t.launches] == [2, 5, 8]
    assert all(len(la.maps["block_sched"].valid()) == 8 for la in t.launches)
    assert p.runs["saxpy4"] == 11


def test_ten_thousand_replays_every_100_write_100_results(tmp_path):
    """The acceptance shape on the fake driver: 10,000 replays with every:100, 100 results, in
    order; the probed kernel ran with its gate open only on those replays."""
    from fakedriver import probe_buffer

    p = Program(tmp_path, launches=LaunchFilter(every=100))
    opened = []

    def kernel(drv, r, params, name):
        if probe_buffer(params, 4) is not None:
            opened.append(1)
            fake_block_sched(drv, r, params, name)

    p.drv.kernel_impl["saxpy4"] = kernel
    graph, _ = p.capture()
    exe = p.instantiate(graph)
    opened.clear()
    for _ in range(10):
        p.replay(exe, 1000)
        p.rt.graphs.drain()
    finish(p.rt)
    t = nt.load(p.rt.trace.path)
    assert [la.event["replay"] for la in t.launches] == list(range(0, 10_000, 100))
    assert len(opened) == 100 and p.runs["saxpy4"] == 10_000


def capture_probed(p, branches):
    """Capture probed saxpy4 launches into one graph: `branches[i]` true starts launch i on a branch
    of its own (waiting for nothing), else it waits for the launch before. Returns the graph."""
    p.drv.begin_capture(STREAM, CAPTURE_MODE_GLOBAL)
    for new_branch in branches:
        if new_branch:
            p.drv.update_capture_dependencies(STREAM, [])
        r, params = req(grid=(4, 1, 1))
        r = type(r)(r.kind, r.func, r.grid, r.block, r.shared_bytes, STREAM, r.params, index=r.index)
        p.keep.append(params)
        assert p.rt.on_launch(r) == 0
    graph = p.drv.end_capture(STREAM)
    p.rt.on_graph(G_END_CAPTURE, STREAM, graph)
    return graph


LAUNCH_ORDER = 2 if graph_ring.LAUNCH_ORDER_EDGE else 0  # the port of the append node's edge from the last node
ONLY_WITH_LAUNCH_ORDER = pytest.mark.skipif(not graph_ring.LAUNCH_ORDER_EDGE, reason="launch-order edge off")


@pytest.mark.parametrize(("branches", "ports"), [([True, False, False], [0, 0, LAUNCH_ORDER]), ([True, True, True], [0, 0, 0]),
                                                 ([True, False, True], [0, 0, 0])],
                         ids=["chain", "three-branches", "chain-and-branch"])
def test_the_append_node_waits_for_every_probed_node(program, branches, ports):
    """The append node depends on every probed node; when one of them is the last (every other one
    completes before it starts: the graph's edges say so), its edge is a launch-order edge (sm_90:
    the append kernel starts with it and waits for it itself). The fake runs each node as soon as its
    dependencies allow. Every replay of every node is written, whole."""
    drv = program.drv
    graph = capture_probed(program, branches)
    kernels = [n for n in drv.graphs[graph].nodes if n["kind"] == "kernel"]
    assert [drv.functions[n["func"]][1] for n in kernels] == ["saxpy4"] * 3 + [APPEND_KERNEL]
    assert kernels[-1]["deps"] == [n["handle"] for n in kernels[:3]] and kernels[-1]["ports"] == ports
    (ev,) = events(program.rt, "graph_append")
    assert ev["graph_nodes"] == [1, 2, 3] and ev["launch_order"] == (3 if any(ports) else None)
    program.replay(program.instantiate(graph), 5)
    finish(program.rt)
    t = nt.load(program.rt.trace.path)
    for node in (1, 2, 3):
        mine = [la for la in t.launches if la.event["graph_node"] == node]
        assert [la.event["replay"] for la in mine] == list(range(5))
        assert all(len(la.maps["block_sched"].valid()) == 8 for la in mine)


@ONLY_WITH_LAUNCH_ORDER
@pytest.mark.parametrize("refused", ["graph_edges", "graph_add_programmatic_node"])
def test_the_append_node_falls_back_to_ordinary_edges(program, refused):
    """Edges that cannot be read, or a programmatic edge refused: ordinary edges only."""
    program.drv.fail[refused] = "CUDA_ERROR_NOT_SUPPORTED"
    graph = capture_probed(program, [True, False])
    kernels = [n for n in program.drv.graphs[graph].nodes if n["kind"] == "kernel"]
    assert kernels[-1]["deps"] == [kernels[0]["handle"], kernels[1]["handle"]] and kernels[-1]["ports"] == [0, 0]
    program.replay(program.instantiate(graph), 3)
    finish(program.rt)
    assert sorted(la.event["graph_node"] for la in nt.load(program.rt.trace.path).launches) == [1, 1, 1, 2, 2, 2]


@ONLY_WITH_LAUNCH_ORDER
@pytest.mark.parametrize("refused", [False, True], ids=["made-ordinary", "remove-refused"])
def test_an_instantiation_refused_makes_the_launch_order_edge_ordinary(program, refused):
    """The shim reports an instantiation the driver refused: the append node's launch-order edge becomes an
    ordinary one (one event), and the answer 1 makes the shim try again; with nothing left to change, 0."""
    from neutrino.runtime.cudagraphs.capture import G_INSTANTIATE_REFUSED

    graph = capture_probed(program, [True, False])
    append = [n for n in program.drv.graphs[graph].nodes if n["kind"] == "kernel"][-1]
    assert append["ports"] == [0, 2]
    if refused:
        program.drv.fail["graph_make_edge_ordinary"] = "CUDA_ERROR_NOT_SUPPORTED"
    assert program.rt.on_graph(G_INSTANTIATE_REFUSED, graph, 0, 4) == (0 if refused else 1)
    assert append["ports"] == [0, 2 if refused else 0]
    program.drv.fail.clear()
    assert program.rt.on_graph(G_INSTANTIATE_REFUSED, graph, 0, 4) == (1 if refused else 0)
    (ev, *more) = events(program.rt, "graph_edge_ordinary")
    assert ev["flags"] == 4 and ("failed" in ev["reason"]) == refused and len(more) == int(refused)
    program.replay(program.instantiate(graph), 2)
    finish(program.rt)
    assert sorted(la.event["graph_node"] for la in nt.load(program.rt.trace.path).launches) == [1, 1, 2, 2]


def test_ten_thousand_replays_every_100_of_a_chain_write_100_results_per_node(tmp_path):
    """Two probed nodes in a chain, the edge from the second a launch-order edge: 100 results each, exact;
    the probe ran with its gate open on those replays only."""
    from fakedriver import probe_buffer

    p = Program(tmp_path, launches=LaunchFilter(every=100))
    opened = []

    def kernel(drv, r, params, name):
        if probe_buffer(params, 4) is not None:
            opened.append(1)
            fake_block_sched(drv, r, params, name)

    p.drv.kernel_impl["saxpy4"] = kernel
    graph = capture_probed(p, [True, False])
    exe = p.instantiate(graph)
    opened.clear()
    for _ in range(10):
        p.replay(exe, 1000)
        p.rt.graphs.drain()
    finish(p.rt)
    t = nt.load(p.rt.trace.path)
    assert len(opened) == 200
    for node in (1, 2):
        mine = [la for la in t.launches if la.event["graph_node"] == node]
        assert [la.event["replay"] for la in mine] == list(range(0, 10_000, 100))
        assert all(len(la.maps["block_sched"].valid()) == 8 for la in mine)
    assert p.runs["saxpy4"] == 20_000


@ONLY_WITH_LAUNCH_ORDER
def test_a_programmatic_edge_of_the_programs_leaves_the_append_node_ordinary(program):
    """The program's second probed kernel waits for the first by a programmatic edge of its own (it may start
    before the first completes): by ordinary edges neither is the last, so the append node waits for both by
    ordinary edges (a launch-order edge from the second could let it copy the first's maps unfinished)."""
    drv = program.drv
    end_capture = drv.end_capture

    def end_with_programs_edge(stream):
        graph = end_capture(stream)
        second = [n for n in drv.graphs[graph].nodes if n["kind"] == "kernel"][1]
        second["ports"] = [1]  # CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC, from the first
        return graph

    drv.end_capture = end_with_programs_edge
    graph = capture_probed(program, [True, False])
    kernels = [n for n in drv.graphs[graph].nodes if n["kind"] == "kernel"]
    assert kernels[-1]["deps"] == [kernels[0]["handle"], kernels[1]["handle"]] and kernels[-1]["ports"] == [0, 0]
    (ev,) = events(program.rt, "graph_append")
    assert ev["launch_order"] is None


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "before-12.3"])
def test_graph_edges_are_the_ordinary_ones(v2):
    """RealDriver.graph_edges: cuGraphGetEdges_v2's edges with default edge data only (a programmatic edge's
    target may start before its source completes); without _v2 (before CUDA 12.3), cuGraphGetEdges' edges."""
    from neutrino.runtime.driver import _SIGNATURES, PROGRAMMATIC_EDGE, RealDriver

    edges = [(0x10, 0x20, 0), (0x20, 0x30, PROGRAMMATIC_EDGE | 2), (0x10, 0x30, 0)]
    if not v2:
        edges = [e for e in edges if not e[2]]

    def get_edges(graph, frm, to, data, n):
        assert graph == 0x99
        count = C.cast(n, C.POINTER(C.c_size_t))
        if frm:
            for i, (a, b, d) in enumerate(edges[: count[0]]):
                C.cast(frm, C.POINTER(C.c_void_p))[i], C.cast(to, C.POINTER(C.c_void_p))[i] = a, b
                if data:
                    C.cast(data, C.POINTER(C.c_uint64))[i] = d
        count[0] = len(edges)
        return 0

    fns = {"cuGraphGetEdges_v2": C.CFUNCTYPE(C.c_int, *[C.c_void_p] * 5)(get_edges),
           "cuGraphGetEdges": C.CFUNCTYPE(C.c_int, *[C.c_void_p] * 4)(
               lambda g, frm, to, n: get_edges(g, frm, to, None, n))}
    assert len(_SIGNATURES["cuGraphGetEdges_v2"]) == 5 and len(_SIGNATURES["cuGraphGetEdges"]) == 4
    drv = RealDriver(lambda name: C.cast(fns[name], C.c_void_p).value if name in fns and (v2 or "_v2" not in name)
                     else 0)
    assert drv.graph_edges(0x99) == [(0x10, 0x20), (0x10, 0x30)]


def test_graph_node_params_is_cudas_layout():
    """CUgraphNodeParams (cuda.h, CUDA 12.3+): 256 bytes, the kernel's parameters (the v2/v3 layout) at 16."""
    from neutrino.runtime.driver import PROGRAMMATIC_EDGE, GraphNodeParams, KernelNodeParamsV2

    assert C.sizeof(GraphNodeParams) == 256 and GraphNodeParams.kernel.offset == 16
    assert C.sizeof(KernelNodeParamsV2) == 72 and KernelNodeParamsV2.kernelParams.offset == 40
    assert (PROGRAMMATIC_EDGE | 2).to_bytes(8, "little") == bytes([2, 0, 1, 0, 0, 0, 0, 0])  # from_port, to_port, type


def test_last_of_walks_up_through_any_node():
    from neutrino.runtime.cudagraphs.capture import last_of

    edges = [(1, 5), (5, 2), (2, 3), (1, 4), (6, 4)]  # 1 -> 5 -> 2 -> 3, 1 -> 4 <- 6
    assert last_of([1, 2, 4], edges) == [2, 4]
    assert last_of([4, 6, 1], edges) == [4]
    assert last_of([3, 6], edges) == [3, 6]
    assert last_of([1, 2], []) == [1, 2]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize(("lean", "pdl", "shut_fast"), [(True, False, False), (False, False, False), (True, True, False),
                                                        (True, False, True), (True, True, True)],
                         ids=["lean", "session8", "programmatic", "shut-fast", "programmatic-shut-fast"])
def test_the_append_kernel_assembles(tmp_path, lean, pdl, shut_fast):
    """The append kernels (benchmarks/append_node_cost.py times them against each other), for every
    target append_ptx writes and both ring placements."""
    from neutrino.runtime.cudagraphs.ring import append_ptx

    src = tmp_path / "append.ptx"
    archs = (((9, 0), "sm_90"), ((10, 0), "sm_100")) if pdl else (((9, 0), "sm_90"), ((7, 5), "sm_75"), ((7, 0), "sm_75"))
    for arch, gpu in archs:
        for on_device in (True, False):
            src.write_text(append_ptx(arch, on_device, lean=lean, pdl=pdl, shut_fast=shut_fast))
            done = subprocess.run(["ptxas", f"-arch={gpu}", str(src), "-o", str(tmp_path / "append.cubin")],
                                  capture_output=True, text=True)
            assert done.returncode == 0, (arch, on_device, done.stderr)


def test_trace_budget_drops_replays_and_counts_them(tmp_path):
    frame = 512  # one saxpy4 block_sched frame
    p = Program(tmp_path, trace_budget=3 * frame)
    p.drv.kernel_impl["saxpy4"] = fake_block_sched
    graph, _ = p.capture()
    p.replay(p.instantiate(graph), 7)
    err = finish(p.rt)
    assert len(nt.load(p.rt.trace.path).launches) == 3
    (ex,) = events(p.rt, "exit")
    assert ex["dropped"] == 4 and ex["launches"] == 3
    assert "trace-budget" in err


def test_a_full_ring_drops_replays_on_the_device_and_counts_them(program):
    """The host drains a node's ring later than the device fills it: once every slot holds an
    undrained replay, the append kernel drops further replays (counted, never overwriting one),
    and the slots drained free take the next replays, in order."""
    drv, rt = program.drv, program.rt
    graph, _ = program.capture()
    exe = program.instantiate(graph)
    (gnode,) = [n for g in rt.graphs._by_graph.values() for n in g.nodes]  # noqa: SLF001
    slots = gnode.ring_layout.nslots
    program.replay(exe, slots + 3)  # nobody drains meanwhile: 3 find the ring full
    assert rt.graphs.sink.stats(gnode.record) == {"replays": slots + 3, "written": 0, "dropped_trace": 0,
                                                  "dropped_behind": 3, "errors": 0}
    rt.graphs.drain()
    program.replay(exe, 2)
    assert program.runs == {"saxpy4": slots + 5, "other": slots + 5}
    finish(rt)
    t = nt.load(rt.trace.path)
    assert [la.event["replay"] for la in t.launches] == [*range(slots), slots + 3, slots + 4]
    (ex,) = events(rt, "exit")
    assert ex["launches"] == slots + 2 and ex["dropped"] == 3


@pytest.mark.parametrize("when_full", ["drop", "wait"])
def test_ring_on_the_device_or_with_wait_in_host_memory(tmp_path, when_full):
    """By default the append kernel fills device slots the host copies out on a stream of ours
    (more of them than host slots); with --when-full=wait it fills the host ring's slots itself
    and reads the host's consumed count there (the device must not wait on the host's driver
    calls). Both write every replay, in order, and reuse the slots drained."""
    from neutrino.runtime.cudagraphs import ring as graph_ring

    p = Program(tmp_path, when_full=when_full)
    p.drv.kernel_impl["saxpy4"] = fake_block_sched
    graph, _ = p.capture()
    exe = p.instantiate(graph)
    (gnode,) = [n for g in p.rt.graphs._by_graph.values() for n in g.nodes]  # noqa: SLF001
    lay, dev = gnode.ring_layout, gnode.device_layout
    (desc,) = p.drv.graphs[graph].nodes[-1:]  # the append node
    d = graph_ring.NodeDesc.from_address(graph_ring.AppendParams.from_address(
        (C.c_void_p * 1).from_address(C.addressof(p.rt.graphs._by_graph[graph].append_args[0]))[0]).desc)  # noqa: SLF001
    assert desc["kind"] == "kernel"
    if when_full == "drop":
        assert lay.on_device and dev.nslots == lay.nslots > lay.nstage
        assert d.slots == gnode.device + dev.slots and d.consumed == gnode.device + dev.state + graph_ring.CONSUMED
    else:
        assert not lay.on_device and dev.nslots == 0 and lay.nslots == lay.nstage
        assert d.slots == gnode.ring[2] + lay.slots + gnode.offsets[0] and d.consumed == gnode.ring[2] + graph_ring.CONSUMED
    n = min(lay.nslots, lay.nstage + 5)  # on the device: more than one round of host slots
    p.replay(exe, n)
    p.rt.graphs.drain()
    p.replay(exe, 3)  # into slots drained free
    p.rt.graphs.drain()
    n += 3
    assert int.from_bytes(gnode.ring[1][graph_ring.CONSUMED: graph_ring.CONSUMED + 8], "little") == n
    if lay.on_device:  # the device reads the consumed count from its own state
        assert C.c_uint64.from_address(gnode.device + dev.state + graph_ring.CONSUMED).value == n
    finish(p.rt)
    t = nt.load(p.rt.trace.path)
    assert [la.event["replay"] for la in t.launches] == list(range(n))
    for la in t.launches:
        assert len(la.maps["block_sched"].valid()) == 8


def test_a_failed_copy_out_loses_those_replays_only(program):
    """The host's copy of device slots fails (the driver refuses): those replays are counted as
    errors, their slots still go back to the device, and later replays are written."""
    drv, rt = program.drv, program.rt
    graph, _ = program.capture()
    exe = program.instantiate(graph)
    (gnode,) = [n for g in rt.graphs._by_graph.values() for n in g.nodes]  # noqa: SLF001
    program.replay(exe, 3)
    drv.fail["memcpy_dtoh_async"] = "CUDA_ERROR_UNKNOWN"
    rt.graphs.drain()
    drv.fail.clear()
    assert rt.graphs.sink.stats(gnode.record)["errors"] == 3
    program.replay(exe, 2)
    finish(rt)
    assert [la.event["replay"] for la in nt.load(rt.trace.path).launches] == [3, 4]
    assert program.runs == {"saxpy4": 5, "other": 5}


def test_a_node_the_budget_cannot_hold_whole_gets_the_smallest_ring(tmp_path):
    from neutrino.runtime.cudagraphs import ring as graph_ring

    full = graph_ring.ring_layout(512)
    small = graph_ring.ring_layout(512, minimal=True)
    assert (small.nslots, small.nstage) == (2, 2)
    span_state = 4096  # more than the maps and state of saxpy4's node take
    p = Program(tmp_path, buffer_budget=small.total + graph_ring.DeviceLayout(512, 2).total + span_state)
    p.drv.kernel_impl["saxpy4"] = fake_block_sched
    graph, rc = p.capture()
    assert rc == 0
    (gnode,) = [n for g in p.rt.graphs._by_graph.values() for n in g.nodes]  # noqa: SLF001
    assert gnode.ring_layout.nslots == 2 < full.nslots
    p.replay(p.instantiate(graph), 5)  # nobody drains meanwhile: 3 find the ring full
    finish(p.rt)
    assert [la.event["replay"] for la in nt.load(p.rt.trace.path).launches] == [0, 1]


def test_ring_slots_env_caps_every_ring(monkeypatch):
    """NEUTRINO_GRAPH_RING_SLOTS=N (benchmarks/graph_residual.py --isolate: do the rings' memory slow the process's
    other graphs?): at most N slots per ring, device and host, never below 2; not a number: no cap."""
    from neutrino.runtime.cudagraphs import ring as graph_ring

    monkeypatch.setenv("NEUTRINO_GRAPH_RING_SLOTS", "2")
    assert (graph_ring.ring_layout(1000).nslots, graph_ring.ring_layout(1000).nstage) == (2, 2)
    assert graph_ring.ring_layout(1000, on_device=False).nslots == 2
    monkeypatch.setenv("NEUTRINO_GRAPH_RING_SLOTS", "1")
    assert graph_ring.ring_layout(1000).nslots == 2
    monkeypatch.setenv("NEUTRINO_GRAPH_RING_SLOTS", "8")
    assert (graph_ring.ring_layout(1000).nslots, graph_ring.ring_layout(1000).nstage) == (8, 8)
    monkeypatch.setenv("NEUTRINO_GRAPH_RING_SLOTS", "many")
    assert graph_ring.ring_layout(1000).nslots == graph_ring.MAX_DEVICE_SLOTS


def test_ring_layout_holds_a_frame_per_slot_aligned():
    from neutrino.runtime.cudagraphs import ring as graph_ring

    lay = graph_ring.ring_layout(1000)
    assert lay.on_device and lay.stride == 1024 and lay.slots % graph_ring.SLOT_ALIGN == 0
    assert lay.slots >= 64 + 8 * lay.nslots  # a flag per device slot before the host slots
    assert lay.nslots == graph_ring.MAX_DEVICE_SLOTS and lay.nstage == graph_ring.MAX_HOST_SLOTS
    assert lay.total == lay.slots + lay.nstage * 1024 and lay.slot(lay.nstage + 1) == lay.slot(1)
    big = graph_ring.ring_layout(64 << 20)  # a huge frame still gets two slots of each kind
    assert (big.nslots, big.nstage) == (2, 2)
    mid = graph_ring.ring_layout(1 << 20)
    assert mid.nslots == graph_ring.DEVICE_RING_BYTES >> 20 and mid.nstage == graph_ring.HOST_RING_BYTES >> 20
    # --when-full=wait: the host slots are the ring (the device fills them across PCIe)
    host = graph_ring.ring_layout(1000, on_device=False)
    assert not host.on_device and host.nslots == host.nstage == graph_ring.MAX_HOST_SLOTS
    assert (graph_ring.ring_layout(1000, minimal=True).nslots, graph_ring.ring_layout(1000, minimal=True).nstage) == (2, 2)
    dev = graph_ring.DeviceLayout(1000, 4)
    assert dev.maps == graph_ring.HEAD_BYTES and dev.gate == dev.maps - graph_ring.GATE_OFFSET
    assert dev.state == dev.maps + 1000 and dev.slots % graph_ring.SLOT_ALIGN == 0
    assert dev.slots >= dev.state + graph_ring.STATE_BYTES
    assert dev.total == dev.slots + 4 * 1024 and dev.slot(5) == dev.slot(1)
    # the append kernel's blocks per node: a chunk of at most CHUNK_BYTES of the largest node's maps each
    assert graph_ring.append_chunks([1000]) == 1
    assert graph_ring.append_chunks([1000, 1 << 20]) == (1 << 20) // graph_ring.CHUNK_BYTES
    assert graph_ring.append_chunks([1 << 40]) == graph_ring.MAX_CHUNKS


def test_append_kernel_ptx_is_accepted_by_ptxas(tmp_path):
    """The append kernel as the driver will JIT it, for the GPU machine's architecture and the oldest
    target we emit (ptxas is our oracle for every PTX we produce)."""
    import itertools
    import shutil
    import subprocess

    from neutrino.runtime.cudagraphs import ring as graph_ring

    if shutil.which("ptxas") is None:
        pytest.skip("needs ptxas")
    for (arch, cc), on_device in itertools.product((("sm_75", (7, 5)), ("sm_90", (9, 0))), (True, False)):
        # CUDA 13 ptxas has no sm_70 to check that target
        src = tmp_path / "append.ptx"
        src.write_text(graph_ring.append_ptx(cc, on_device))
        r = subprocess.run(["ptxas", f"-arch={arch}", str(src), "-o", str(tmp_path / "a.cubin")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr


BEFORE_KERNEL = ["stream_capture_info", "exchange_capture_mode", "mem_alloc", "host_alloc", "append_module", "launch"]
# at the capture's end: the nodes' memory zeroed on our stream (memcpy_htod_async of pinned zeroes), the append node
AFTER_KERNEL = ["memcpy_htod_async", "graph_add_kernel_node"]


def test_node_memory_is_ready_for_the_first_replay_and_undone_on_failure():
    """ring.py's node memory: the host ring's counters and flags zero with the frame header in every
    host slot once allocated; the head, maps and state zeroed (the fake's allocations start as garbage)
    and the gate as asked once zero_node_memory's copies are waited for; an allocation failing part way
    gives back what was taken before raising."""
    from fakedriver import FakeDriver
    from neutrino.runtime.cudagraphs import ring as graph_ring

    drv = FakeDriver()
    stream = drv.stream_create_nonblocking()
    dev, lay = graph_ring.DeviceLayout(span=512, nslots=4), graph_ring.ring_layout(1024)
    header = bytes(range(1, 97))
    before = len(drv.mem)
    for gate_closed in (False, True):
        device, ring = graph_ring.allocate_node_memory(drv, dev, lay, header)
        graph_ring.zero_node_memory(drv, dev, device, stream, gate_closed)
        drv.stream_synchronize(stream)
        head = bytearray((C.c_ubyte * dev.slots).from_address(device))
        assert C.c_uint32.from_buffer(head, dev.gate).value == int(gate_closed)
        head[dev.gate: dev.gate + 4] = bytes(4)
        assert head == bytes(dev.slots)
        view = ring[1]
        assert bytes(view[: lay.slots]) == bytes(lay.slots)
        assert all(bytes(view[lay.slot(i): lay.slot(i) + len(header)]) == header for i in range(lay.nstage))
        graph_ring.free_node_memory(drv, device, ring)
        assert len(drv.mem) == before
    drv.fail = {"host_alloc": "CUDA_ERROR_OUT_OF_MEMORY"}
    with pytest.raises(DriverError):
        graph_ring.allocate_node_memory(drv, dev, lay, header)
    assert len(drv.mem) == before  # the device allocation given back


@pytest.mark.parametrize("step", BEFORE_KERNEL + AFTER_KERNEL)
def test_failure_at_each_capture_step_never_changes_results(program, step):
    """Before the probed kernel node exists: the original is captured instead (a `fallback` event).
    After: the probed kernel stays, its results are lost (a `result_error` event). Either way the
    program's kernels run exactly once per replay."""
    drv = program.drv
    real_launch, real_load = drv.launch, drv.module_load_data
    if step == "launch":  # the probed kernel's launch is refused; the program's own are not
        drv.launch = lambda kind, f, r, params: (real_launch(kind, f, r, params) if f in (0x200, program.other)
                                                 else 719)
    elif step == "append_module":  # the append kernel's module does not load (the probed one does)
        def load(image):
            if APPEND_KERNEL.encode() in image:
                raise DriverError("cuModuleLoadDataEx", 218, "CUDA_ERROR_INVALID_PTX")
            return real_load(image)
        drv.module_load_data = load
    else:
        drv.fail[step] = "CUDA_ERROR_UNKNOWN"
    graph, rc = program.capture()
    drv.launch, drv.module_load_data = real_launch, real_load
    drv.fail.clear()
    kernels = [name for kind, name in node_kinds(drv, graph) if kind == "kernel" and name != APPEND_KERNEL]
    assert kernels == ["saxpy4", "other"]  # once each: never the probed and the original
    exe = program.instantiate(graph)
    program.replay(exe, 3)
    assert program.runs == {"saxpy4": 3, "other": 3}
    program.destroy(graph, exe)
    finish(program.rt)
    if step in BEFORE_KERNEL:
        assert rc == NOT_HANDLED
        (fb,) = events(program.rt, "fallback")
        assert fb["stage"] in ("graph", "graph-alloc", "driver") and fb["kernel"] == "saxpy4"
    else:
        assert rc == 0 and events(program.rt, "result_error")
    assert program.rt.graphs.budget.used == 0  # whatever was allocated is given back


def test_count_maps_refused_inside_graphs(tmp_path):
    p = Program(tmp_path, probe=COUNT_PROBE)
    graph, rc = p.capture()
    assert rc == NOT_HANDLED
    finish(p.rt)
    (fb,) = events(p.rt, "fallback")
    assert fb["stage"] == "graph" and 'cap = "count"' in fb["reason"]


def test_destroy_frees_everything_over_many_cycles(program):
    """Many capture/replay/destroy cycles (1000; NEUTRINO_GRAPH_CYCLES for more) leave no allocation behind."""
    drv = program.drv
    graph, _ = program.capture()  # the first capture builds the probed code (allocations of its own)
    exe = program.instantiate(graph)
    program.replay(exe, 1)
    program.destroy(graph, exe)
    base = (len(drv.mem), drv.allocations - drv.frees)
    for _ in range(CYCLES):
        graph, rc = program.capture()
        assert rc == 0
        exe = program.instantiate(graph)
        program.replay(exe, 2)
        program.destroy(graph, exe)
    assert (len(drv.mem), drv.allocations - drv.frees) == base
    assert program.rt.graphs.budget.used == 0 and program.rt.graphs.freed_groups == CYCLES + 1
    assert program.runs["saxpy4"] == 2 * CYCLES + 1
    finish(program.rt)


def test_memory_lives_until_the_last_graph_or_exec_is_destroyed(program):
    drv, rt = program.drv, program.rt
    graph, _ = program.capture()
    held = len(drv.mem)
    clone = drv._new()
    rt.on_graph(G_CLONE, graph, clone)
    exe = program.instantiate(graph)
    rt.on_graph(G_GRAPH_DESTROY, graph, 0)
    rt.on_graph(G_GRAPH_DESTROY, clone, 0)
    assert len(drv.mem) == held  # the executable graph still replays into our buffers
    program.replay(exe, 2)
    rt.on_graph(G_EXEC_DESTROY, exe, 0)
    zeros = int(rt.graphs._zero_host is not None)  # (the pinned zeroes the nodes' memory is zeroed from: kept)
    assert held == 3 + zeros and len(drv.mem) == zeros  # the maps, the ring and the nodes' descriptors, freed
    finish(rt)


def test_free_deferred_while_the_device_cannot_be_synchronised(program):
    drv, rt = program.drv, program.rt
    graph, _ = program.capture()
    exe = program.instantiate(graph)
    drv.fail["ctx_synchronize"] = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
    before = len(drv.mem)
    program.destroy(graph, exe)
    assert len(drv.mem) == before and events(rt, "graph_free_deferred")
    drv.fail.clear()
    graph2, _ = program.capture()
    exe2 = program.instantiate(graph2)
    program.destroy(graph2, exe2)  # frees both
    assert len(drv.mem) < before and rt.graphs.budget.used == 0
    finish(rt)


def test_replays_of_a_graph_whose_free_was_deferred_still_count(program):
    """A retired group not yet freed (the device could not be synchronised) is in no handle map:
    its nodes' replays still count at exit."""
    graph, _ = program.capture()
    exe = program.instantiate(graph)
    program.replay(exe, 3)
    program.drv.fail["ctx_synchronize"] = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
    program.destroy(graph, exe)
    finish(program.rt)
    assert [(n["graph_node"], n["replays"], n["written"]) for n in program.rt.graph_summary] == [(1, 3, 3)]
    (ex,) = events(program.rt, "exit")
    assert ex["launches"] == 3


def test_exec_kernel_node_set_params(program):
    """Same kernel and shape: the node stays probed (our buffers appended again). Another shape:
    the node runs as the program set it, unprobed, with one `graph_unprobed` event."""
    drv, rt = program.drv, program.rt
    graph, _ = program.capture()
    exe = program.instantiate(graph)
    (gnode,) = [n for g in rt.graphs._by_capture.values() for n in g.nodes]
    vals = [C.c_uint64(7) for _ in range(4)]
    user = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    p = KernelNodeParamsV2(func=0x200, gridDimX=4, gridDimY=1, gridDimZ=1, blockDimX=64, blockDimY=1, blockDimZ=1,
                           kernelParams=C.cast(user, C.POINTER(C.c_void_p)))
    ours = rt.on_graph(G_SET_PARAMS, exe, gnode.node, C.addressof(p), 2)
    assert ours
    new = KernelNodeParamsV2.from_address(ours)
    assert new.func == gnode.probed_func
    assert C.c_uint64.from_address(new.kernelParams[0]).value == 7  # the program's new argument
    assert C.c_uint64.from_address(new.kernelParams[4]).value == gnode.buffers[0] | 1  # and our buffer, tagged: read the gate
    r, _ = req()
    drv.exec_kernel_node_set_params(exe, gnode.node, new.func, r, C.addressof(gnode.keep))
    program.replay(exe, 2)
    p.gridDimX = 8
    assert rt.on_graph(G_SET_PARAMS, exe, gnode.node, C.addressof(p), 2) == 0
    r8, _ = req(grid=(8, 1, 1))
    drv.exec_kernel_node_set_params(exe, gnode.node, 0x200, r8, C.addressof(user))
    program.replay(exe, 2)
    assert program.runs["saxpy4"] == 4
    finish(rt)
    assert len(nt.load(rt.trace.path).launches) == 2  # the replays after the shape change are not probed
    (ev,) = events(rt, "graph_unprobed")
    assert ev["graph_node"] == gnode.id and "shape" in ev["reason"]


def test_kernel_node_added_with_the_graph_api_is_reported(program):
    rt = program.rt
    assert rt.on_graph(G_ADD_KERNEL_NODE, 0x77, 0x200, 0x78) == 0
    assert rt.on_graph(G_ADD_KERNEL_NODE, 0x77, 0x12345, 0x79) == 0  # not a probed kernel: nothing to say
    finish(rt)
    (ev,) = events(rt, "graph_unprobed")
    assert ev["kernel"] == "saxpy4" and "cuGraphAddKernelNode" in ev["reason"] and ev["node"] == "0x78"


def test_report_groups_graph_replays(program, capsys):
    graph, _ = program.capture()
    program.replay(program.instantiate(graph), 3)
    finish(program.rt)
    trace, launches = analysis_report.load_trace(str(program.rt.trace.path))
    text = analysis_report.render(analysis_report.analyze(trace, launches))
    assert "[CUDA graphs] 3 of 3 launches were graph replays" in text
    assert any(line.split()[:4] == ["1", "1", "saxpy4", "3"] for line in text.splitlines())


def test_index_records_carry_graph_and_node(tmp_path):
    """The native writer's index: the graph word (was `reserved`) gives graph, node and replay."""
    run = tmp_path / "run"
    (run / "result").mkdir(parents=True)
    (run / "kernel" / "0_abc").mkdir(parents=True)
    (run / "event.log").write_text('{"event":"instrument","kernel":"k","kernel_dir":"kernel/0_abc"}\n')
    recs = np.zeros(2, nt.INDEX_RECORD)
    recs["seq"] = [1, 2]
    recs["kernel_launch"] = [0, 41]
    recs["graph"] = [0, (3 << 32) | 9]
    (run / "result" / "index.bin").write_bytes(nt.INDEX_MAGIC + nt.INDEX_HEADER_TAIL + recs.tobytes())
    plain, replay = nt.read_index(run, nt.read_events(run / "event.log"))
    assert "graph" not in plain
    assert (replay["graph"], replay["graph_node"], replay["replay"]) == (3, 9, 41)


@pytest.mark.parametrize("launches", [None, "1:3"], ids=["every replay", "replays 1:3"])
def test_native_rings_and_writer(tmp_path, fakecuda, shim, monkeypatch, launches):
    """The whole C path against the fake libcuda: capture through the shim (global mode), the
    rings drained by shim/graphs.c, frames written by shim/writer.c with the graph word in the index;
    graph destruction (hooked through dlsym) frees every allocation of ours."""
    out = tmp_path / "app.out"
    monkeypatch.setenv("GRAPH_APP_OUT", str(out))
    cycles, replays = 8, 4
    extra = ["--graphs"] + (["--launches", launches] if launches else [])
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4",
                                                   str(cycles), str(replays)], *extra)
    said = out.read_text().splitlines()
    assert rc == 0 and said[-1] == "app done", said
    # every selected replay runs the probed kernel, a replay --launches leaves out the program's own (the
    # host picks: shim/graphpick.c); the eager launch 0 only when --launches selects it (with 1:3 the
    # probed code is first built inside a capture, in relaxed mode)
    eager = "saxpy4 probed=0 grid=4" if launches else "saxpy4 probed=1 grid=4"
    picked = [f"saxpy4 probed={int(not launches or 1 <= r < 3)} grid=4" for r in range(replays)]
    assert log == [eager] + picked * cycles
    # Allocations alive at the end: at most the eager launch's pool slot, the writer's staging buffer
    # (made by the writer thread, whenever it gets there), the pinned zeroes the graph nodes' memory is
    # zeroed from (one, kept: capture.py _zeros) and the shim's pinned zeroes for everything else (kept for the
    # process: spec/runtime.md, "No driver memset"); each cycle's node allocates 2 and frees them.
    end = said[1].split()
    assert end[:3] == ["live", "at", "end"] and int(end[3]) <= 4 and end[4:] == ["graphs", "0"], said
    t = nt.load(tmp_path / "trace")
    graph_launches = [la for la in t.launches if la.graph is not None]
    wanted = [1, 2] if launches else list(range(replays))
    assert len({la.graph for la in graph_launches}) == cycles
    assert [la.event["replay"] for la in graph_launches] == wanted * cycles
    for la in graph_launches:
        v = la.maps["block_sched"].valid()
        assert len(v) == 8 and list(v["unit"]) == list(range(8)) and set(v["elapse"]) == {7}
    assert len(t.launches) == (0 if launches else 1) + len(graph_launches)  # and the eager launch
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["launches"] == len(t.launches) and ex["dropped"] == 0
    assert not [e for e in t.events if e["event"] in ("fallback", "result_error")]


def test_capture_of_the_per_thread_default_stream_native(tmp_path, fakecuda, shim, monkeypatch):
    """The capture of the per-thread default stream through the _ptsz entry points' NULL stream (a program
    built with --default-stream per-thread capturing stream 0): its end is seen as a capture's end (the
    shim asks the per-thread stream, not the legacy one): every replay runs and records the probed kernel, and
    once the captures are over launches cost no more capture queries than before the first (with one left
    counted as under way the shim asked at every launch)."""
    out = tmp_path / "app.out"
    monkeypatch.setenv("GRAPH_APP_OUT", str(out))
    monkeypatch.setenv("GRAPH_APP_PTSZ", "1")
    cycles, replays = 2, 3
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4",
                                                   str(cycles), str(replays)], "--graphs")
    said = out.read_text().splitlines()
    assert rc == 0 and said[-1] == "app done", said
    before, after = (int(line.split()[-1]) for line in said if line.startswith("capture queries"))
    assert after == before, said
    assert log == ["saxpy4 probed=1 grid=4"] * (1 + 3 + replays * cycles + 3)
    t = nt.load(tmp_path / "trace")
    graph_launches = [la for la in t.launches if la.graph is not None]
    assert len(graph_launches) == replays * cycles
    for la in graph_launches:
        v = la.maps["block_sched"].valid()
        assert len(v) == 8 and set(v["elapse"]) == {7}
    assert not [e for e in t.events if e["event"] in ("fallback", "result_error")]


def test_context_teardown_forgets_graphs_but_keeps_their_counts(program):
    drv, rt = program.drv, program.rt
    graph, _ = program.capture()
    exe = program.instantiate(graph)
    program.replay(exe, 2)
    held = len(drv.mem)
    rt.on_teardown()  # the context's memory goes with it: nothing is freed later under a stale address
    program.destroy(graph, exe)
    assert len(drv.mem) == held
    finish(rt)
    (ex,) = events(rt, "exit")
    assert ex["launches"] == 2


def test_two_kernel_nodes_in_one_graph_native(tmp_path, fakecuda, shim, monkeypatch, capfd):
    """Two probed launches captured into ONE graph (torch.cuda.graphs around two kernels), replayed
    N times through the shim and shim/graphs.c: N results per node in the trace, two `graph_node`
    events, the report's table one row per node, and the exit summary counting both nodes
    (it once counted the first node of the destroyed graph only: 1 node, N of N)."""
    out = tmp_path / "app.out"
    monkeypatch.setenv("GRAPH_APP_OUT", str(out))
    monkeypatch.setenv("GRAPH_APP_KERNELS", "2")
    replays = 6
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4",
                                                   "1", str(replays)], "--graphs")
    err = capfd.readouterr().err
    said = out.read_text().splitlines()
    assert rc == 0 and said[-1] == "app done", said
    assert log == ["saxpy4 probed=1 grid=4"] * (1 + 2 * replays)
    # both nodes' maps and rings are freed with the graph (the second one once leaked); alive: as above
    end = said[1].split()
    assert end[:3] == ["live", "at", "end"] and int(end[3]) <= 4 and end[4:] == ["graphs", "0"], said
    t = nt.load(tmp_path / "trace")
    graph_launches = [la for la in t.launches if la.graph is not None]
    assert sorted({la.graph for la in graph_launches}) == [(1, 1), (1, 2)]
    for where in [(1, 1), (1, 2)]:
        assert [la.event["replay"] for la in graph_launches if la.graph == where] == list(range(replays))
    nodes = [e for e in t.events if e["event"] == "graph_node"]
    assert [(e["graph"], e["graph_node"], e["kernel"]) for e in nodes] == [(1, 1, "saxpy4"), (1, 2, "saxpy4")]
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    assert ex["launches"] == 1 + 2 * replays and ex["dropped"] == 0
    assert f"neutrino: 2 probed CUDA graph node(s): {2 * replays} of {2 * replays} replay result(s) written" in err
    trace, launches = analysis_report.load_trace(str(tmp_path / "trace"))
    text = analysis_report.render(analysis_report.analyze(trace, launches))
    assert f"[CUDA graphs] {2 * replays} of {1 + 2 * replays} launches were graph replays" in text
    rows = [line.split()[:4] for line in text.splitlines()]
    assert ["1", "1", "saxpy4", str(replays)] in rows and ["1", "2", "saxpy4", str(replays)] in rows


@pytest.mark.parametrize("policy", ["drop", "wait"])
def test_native_rings_under_pressure(tmp_path, fakecuda, shim, monkeypatch, capfd, policy):
    """Replays far faster than the writer (the fake device replays in microseconds): with the default
    policy every replay is written or counted as dropped, never lost or doubled; with
    --when-full=wait the append kernel waits for the host to drain a slot, and every replay is written."""
    out = tmp_path / "app.out"
    monkeypatch.setenv("GRAPH_APP_OUT", str(out))
    monkeypatch.setenv("GRAPH_APP_KERNELS", "2")
    replays = 2000
    rc, _ = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4",
                                                 "1", str(replays)], "--graphs", "--when-full", policy)
    err = capfd.readouterr().err
    assert rc == 0 and out.read_text().splitlines()[-1] == "app done"
    t = nt.load(tmp_path / "trace")
    (ex,) = [e for e in t.events if e["event"] == "exit"]
    for node in [(1, 1), (1, 2)]:
        got = [la.event["replay"] for la in t.launches if la.graph == node]
        assert got == sorted(set(got))  # in order, none twice
        if policy == "wait":
            assert got == list(range(replays))
    for la in t.launches:  # every frame whole: slots copied out in runs, one 2D copy per run (shim/graphs.c)
        v = la.maps["block_sched"].valid()
        assert len(v) == 8 and list(v["unit"]) == list(range(8)) and set(v["elapse"]) == {7}
    written = sum(la.graph is not None for la in t.launches)
    assert written + ex["dropped"] == 2 * replays
    assert f"{written} of {2 * replays} replay result(s) written" in err
    if policy == "wait":
        assert ex["dropped"] == 0


def test_graphs_are_probed_by_default_and_no_graphs_turns_it_off():
    from neutrino.runtime.start.launcher import build_parser

    assert build_parser().parse_args(["-p", "p.toml", "--", "x"]).graphs is True
    assert build_parser().parse_args(["-p", "p.toml", "--no-graphs", "--", "x"]).graphs is False
    assert build_parser().parse_args(["-p", "p.toml", "--graphs", "--", "x"]).graphs is True
