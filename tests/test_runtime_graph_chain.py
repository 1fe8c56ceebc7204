"""The chain in the runtime, NEUTRINO_GRAPH_CHAIN=1 (spec/runtime.md, "The chain"; not yet the default), on the fake
driver: a capture of 3 probed launches in one stream (edges 0 → 1 → 2) gets no append node, its kernel nodes run the
graph_chain variant with their heads (tests/fakedriver.py emulates the variant's head load and advance), and the
frames reach the trace through the Python sink."""

from __future__ import annotations

from collections import Counter

from neutrino.runtime.core import NOT_HANDLED  # noqa: I001
from neutrino.runtime.cudagraphs import chain
from neutrino.runtime.cudagraphs.capture import (
    G_BEGIN_CAPTURE, G_END_CAPTURE, G_EXEC_DESTROY, G_GRAPH_DESTROY, G_INSTANTIATE,
)
from neutrino.runtime.cudagraphs.ring import APPEND_KERNEL

import ctypes as C

import neutrino.trace as nt
from test_runtime_core import VEC_PTX, events, fake_block_sched, finish, load_saxpy, make_runtime, req

STREAM = 0x5


class ChainProgram:
    def __init__(self, tmp_path, monkeypatch, slots: int | None = None, **opts):
        monkeypatch.setenv(chain.ENV, "1")
        if slots:
            monkeypatch.setenv("NEUTRINO_GRAPH_RING_SLOTS", str(slots))
        self.rt, self.drv, _ = make_runtime(tmp_path, **opts)
        load_saxpy(self.rt)
        self.drv.functions[0x200] = (0x100, "saxpy4")
        self.keep = []

    def capture(self, launches: int = 3, between_port: int | None = None) -> int:
        """`between_port`: a kernel of the program's captured with programmatic serialization after each probed
        launch but the last (its edge in from that port), as cuBLAS's kernels are on sm_90."""
        self.rt.on_graph(G_BEGIN_CAPTURE, STREAM, 0)
        self.drv.begin_capture(STREAM)
        for i in range(launches):
            if i and between_port is not None:
                self.drv.capture_programmatic(STREAM, between_port)
            r, params = req()
            r = type(r)(r.kind, r.func, r.grid, r.block, r.shared_bytes, STREAM, r.params, index=r.index)
            self.keep.append(params)
            assert self.rt.on_launch(r) != NOT_HANDLED
        graph = self.drv.end_capture(STREAM)
        self.rt.on_graph(G_END_CAPTURE, STREAM, graph)
        return graph

    def instantiate(self, graph: int) -> int:
        exe = self.drv.graph_instantiate(graph)
        self.rt.on_graph(G_INSTANTIATE, graph, exe)
        return exe

    def kernels_in(self, graph: int) -> list[str]:
        return [self.drv.functions.get(n.get("func"), (0, None))[1] for n in self.drv.graphs[graph].nodes]

    def frames(self) -> Counter:
        return Counter(e["graph_node"] for e in events(self.rt, "launch") if e.get("graph") is not None)


def test_three_probed_nodes_take_the_chain(tmp_path, monkeypatch):
    p = ChainProgram(tmp_path, monkeypatch)
    graph = p.capture()
    assert APPEND_KERNEL not in p.kernels_in(graph) and p.kernels_in(graph) == ["saxpy4"] * 3
    ev = events(p.rt, "graph_chain")
    assert len(ev) == 1
    a, b, c = ev[0]["graph_nodes"]
    assert ev[0]["advancers"] == {str(a): b, str(b): c, str(c): a}  # (node → its advancer; c, the sink, by a)
    chained = [n for n in p.drv.graphs[graph].nodes]
    modules = {p.drv.functions[n["func"]][0] for n in chained}
    assert len(modules) == 1 and b"%nt_ch_adv" in p.drv.modules[modules.pop()]  # the variant, loaded once
    finish(p.rt)


def test_a_programmatic_edge_from_a_probed_kernels_end_keeps_the_chain(tmp_path, monkeypatch):
    """probed → the program's PDL kernel → probed …, as Inductor's kernels around cuBLAS's: the edges out of the
    probed kernels are programmatic from their programmatic port (the next kernel starts once their blocks have
    ended: they never trigger early), so each still ends before its advancer starts and the chain takes them."""
    p = ChainProgram(tmp_path, monkeypatch)
    graph = p.capture(between_port=1)
    assert APPEND_KERNEL not in p.kernels_in(graph)
    exe = p.instantiate(graph)
    (ev,) = events(p.rt, "graph_chain")
    a, b, c = ev["graph_nodes"]
    assert ev["advancers"] == {str(a): b, str(b): c, str(c): a}
    for _ in range(50):
        p.drv.graph_launch(exe)
    finish(p.rt)
    assert set(p.frames().values()) == {50} and len(p.frames()) == 3


def test_a_launch_order_edge_keeps_the_append_node_and_says_why(tmp_path, monkeypatch):
    """From the launch-order port the next kernel may start while the probed kernel's blocks still run: no
    advancer is ordered after its end, the append node stays, and a graph_chain_refused event says why."""
    p = ChainProgram(tmp_path, monkeypatch)
    graph = p.capture(between_port=2)
    assert APPEND_KERNEL in p.kernels_in(graph) and not events(p.rt, "graph_chain")
    (ev,) = events(p.rt, "graph_chain_refused")
    assert "2 programmatic" in ev["reason"] and "0 probed kernel(s) trigger" in ev["reason"]
    finish(p.rt)


def test_a_kernel_that_triggers_early_does_not_end_before_its_programmatic_dependents(tmp_path, monkeypatch):
    """A probed kernel whose code has griddepcontrol.launch_dependents lets its programmatic dependents start
    before its blocks end: that edge orders nothing after its end, so the capture keeps the append node."""
    p = ChainProgram(tmp_path, monkeypatch)
    p.rt.on_module("cuModuleLoadData", 0x300, VEC_PTX.replace("\tret;", "\tgriddepcontrol.launch_dependents;\n\tret;", 1)
                   .encode())
    p.rt.on_function("module_function", 0x300, "saxpy4", 0x400)
    p.drv.functions[0x400] = (0x300, "saxpy4")
    p.rt.on_graph(G_BEGIN_CAPTURE, STREAM, 0)
    p.drv.begin_capture(STREAM)
    for i, func in enumerate((0x400, 0x200)):
        if i:
            p.drv.capture_programmatic(STREAM, 1)
        r, params = req(func=func)
        p.keep.append(params)
        assert p.rt.on_launch(type(r)(r.kind, r.func, r.grid, r.block, r.shared_bytes, STREAM, r.params)) != NOT_HANDLED
    graph = p.drv.end_capture(STREAM)
    p.rt.on_graph(G_END_CAPTURE, STREAM, graph)
    assert APPEND_KERNEL in p.kernels_in(graph)
    (ev,) = events(p.rt, "graph_chain_refused")
    assert "1 probed kernel(s) trigger their dependents early" in ev["reason"]
    finish(p.rt)


def test_a_thousand_replays_give_a_thousand_frames_per_node(tmp_path, monkeypatch):
    p = ChainProgram(tmp_path, monkeypatch)
    exe = p.instantiate(p.capture())
    for _ in range(1000):
        p.drv.graph_launch(exe)
    finish(p.rt)
    frames = p.frames()
    assert len(frames) == 3 and set(frames.values()) == {1000}
    got = sorted(e["kernel_launch"] for e in events(p.rt, "launch") if e.get("graph_node") == min(frames))
    assert got == list(range(1000))  # each replay's frame once, numbered by its tag
    summary = [r for r in p.rt.graph_summary if r.get("graph") is not None]
    assert len(summary) == 3 and all(r["replays"] == 1000 and r["written"] == 1000 and r["dropped_behind"] == 0 for r in summary)


def test_a_full_ring_counts_drops_and_never_hangs(tmp_path, monkeypatch):
    p = ChainProgram(tmp_path, monkeypatch, slots=8)
    exe = p.instantiate(p.capture())
    for _ in range(40):  # nobody drains while they run: launches 9-40 of each node write nowhere
        p.drv.graph_launch(exe)
    finish(p.rt)
    assert set(p.frames().values()) == {8} and len(p.frames()) == 3
    summary = [r for r in p.rt.graph_summary if r.get("graph") is not None]
    assert summary and all((r["replays"], r["written"], r["dropped_behind"]) == (40, 8, 32) for r in summary)


def test_the_ring_holds_what_the_append_nodes_ring_would(tmp_path, monkeypatch):
    """12 append slots a node (gmem_bytes' 16 KiB frames give 1,008): the chain's K is 16, the power of 2 not below
    them, not 8. 12 replays nobody drains while they run (an append node keeps them all): every one written."""
    p = ChainProgram(tmp_path, monkeypatch, slots=12)
    exe = p.instantiate(p.capture())
    for _ in range(12):
        p.drv.graph_launch(exe)
    finish(p.rt)
    assert events(p.rt, "graph_chain")[0]["ring_slots"] == 16
    assert set(p.frames().values()) == {12} and len(p.frames()) == 3
    summary = [r for r in p.rt.graph_summary if r.get("graph") is not None]
    assert summary and all((r["replays"], r["written"], r["dropped_behind"]) == (12, 12, 0) for r in summary)


def test_ring_slots_a_power_of_2_not_below_the_fewest_append_slots():
    assert [chain.ring_slots(s) for s in ([1008], [1008, 600], [512], [12, 40], [2], [1])] == [1024, 1024, 512, 16, 2, 2]


def test_the_chain_is_the_default(tmp_path, monkeypatch):
    monkeypatch.delenv(chain.ENV, raising=False)
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    p = ChainProgram.__new__(ChainProgram)
    p.rt, p.drv, p.keep = rt, drv, []
    graph = p.capture()
    assert APPEND_KERNEL not in p.kernels_in(graph) and events(rt, "graph_chain")
    finish(rt)


def test_chain_off_keeps_the_append_node(tmp_path, monkeypatch):
    monkeypatch.setenv(chain.ENV, "0")
    rt, drv, _ = make_runtime(tmp_path)
    load_saxpy(rt)
    p = ChainProgram.__new__(ChainProgram)
    p.rt, p.drv, p.keep = rt, drv, []
    graph = p.capture()
    assert p.kernels_in(graph)[-1] == APPEND_KERNEL and not events(rt, "graph_chain")
    finish(rt)


def test_a_single_probed_node_keeps_the_append_node(tmp_path, monkeypatch):
    p = ChainProgram(tmp_path, monkeypatch)
    graph = p.capture(launches=1)
    assert p.kernels_in(graph) == ["saxpy4", APPEND_KERNEL] and not events(p.rt, "graph_chain")
    exe = p.instantiate(graph)
    for _ in range(5):
        p.drv.graph_launch(exe)
    finish(p.rt)
    assert set(p.frames().values()) == {5}


def test_a_refused_variant_leaves_the_append_path(tmp_path, monkeypatch):
    from neutrino.errors import InstrumentError

    p = ChainProgram(tmp_path, monkeypatch)
    real = p.rt.kernels.engine.instrument

    def refuse_chain(*a, **k):
        if k.get("graph_chain"):
            raise InstrumentError("graph_chain: .func quit has an exit")
        return real(*a, **k)

    p.rt.kernels.engine.instrument = refuse_chain
    exe_graph = p.capture()
    assert p.kernels_in(exe_graph)[-1] == APPEND_KERNEL
    assert "quit" in events(p.rt, "graph_chain_refused")[0]["reason"]
    exe = p.instantiate(exe_graph)
    for _ in range(4):
        p.drv.graph_launch(exe)
    finish(p.rt)
    assert set(p.frames().values()) == {4} and len(p.frames()) == 3


def test_slots_are_zeroed_before_their_reuse(tmp_path, monkeypatch):
    """An 8-slot ring drained while 20 replays run: every other launch saves for unit 0 only, and its frame shows
    exactly that (a slot written 8 replays before was zeroed by the poller before the device had it again)."""
    from fakedriver import probe_buffer

    p = ChainProgram(tmp_path, monkeypatch, slots=8)
    state = {"n": 0}

    def half_the_time(drv, r, params, name):
        fake_block_sched(drv, r, params, name)
        state["n"] += 1
        if (state["n"] - 1) // 3 % 2:  # (3 nodes per replay) odd replays: only unit 0 saves
            counts = (C.c_uint32 * 8).from_address(probe_buffer(params, 4))
            for u in range(1, 8):
                counts[u] = 0

    p.drv.kernel_impl["saxpy4"] = half_the_time
    exe = p.instantiate(p.capture())
    for r in range(20):
        p.drv.graph_launch(exe)
        if r % 4 == 3:
            p.rt.graphs.drain()  # (the fake has nothing in flight: as at a synchronisation)
    finish(p.rt)
    t = nt.load(p.rt.trace.path)
    by_node = {}
    for la in t.launches:
        by_node.setdefault(la.graph, []).append((la.event["replay"], len(la.maps["block_sched"].valid())))
    assert len(by_node) == 3
    for got in by_node.values():
        assert sorted(got) == [(r, 1 if r % 2 else 8) for r in range(20)]


def test_replays_left_out_keep_the_append_path(tmp_path, monkeypatch):
    from neutrino.runtime.start.options import LaunchFilter

    p = ChainProgram(tmp_path, monkeypatch, launches=LaunchFilter(every=2))
    graph = p.capture()
    assert p.kernels_in(graph)[-1] == APPEND_KERNEL and not events(p.rt, "graph_chain")
    finish(p.rt)


def test_new_arguments_for_a_chain_node_keep_its_variant_and_head(tmp_path, monkeypatch):
    """The program's cuGraphExecKernelNodeSetParams on a chain node, same kernel and shape: our parameters go back
    with the variant (its first buffer the head, tagged), not the ordinary probed kernel (which would take the head
    for a buffer)."""
    from neutrino.runtime.cudagraphs.capture import G_SET_PARAMS, KernelNodeParamsV2

    p = ChainProgram(tmp_path, monkeypatch)
    exe = p.instantiate(p.capture())
    group = next(iter(p.rt.graphs._by_capture.values()))
    gnode = group.chain_order[1]
    vals = [C.c_uint64(7) for _ in range(4)]
    user = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    params = KernelNodeParamsV2(func=0x200, gridDimX=4, gridDimY=1, gridDimZ=1, blockDimX=64, blockDimY=1,
                                blockDimZ=1, kernelParams=C.cast(user, C.POINTER(C.c_void_p)))
    ours = p.rt.on_graph(G_SET_PARAMS, exe, gnode.node, C.addressof(params), 2)
    new = KernelNodeParamsV2.from_address(ours)
    assert new.func == gnode.chain_func != gnode.probed_func
    assert C.c_uint64.from_address(new.kernelParams[4]).value == group.chain.head_param(1)
    r, _ = req()
    p.drv.exec_kernel_node_set_params(exe, gnode.node, new.func, r, C.addressof(gnode.keep))
    for _ in range(5):
        p.drv.graph_launch(exe)
    finish(p.rt)
    assert set(p.frames().values()) == {5} and len(p.frames()) == 3


def test_real_driver_sets_a_graph_kernel_nodes_parameters():
    """RealDriver.graph_kernel_node_set_params: cuGraphKernelNodeSetParams_v2 with the node and CUDA's
    CUDA_KERNEL_NODE_PARAMS_v2 (function, launch shape, shared bytes, the parameter array)."""
    from neutrino.runtime.driver import _SIGNATURES, KernelNodeParamsV2, RealDriver

    seen = []

    def set_params(node, p):
        k = KernelNodeParamsV2.from_address(p)
        seen.append((node, k.func, (k.gridDimX, k.gridDimY, k.gridDimZ), (k.blockDimX, k.blockDimY, k.blockDimZ),
                     k.sharedMemBytes, C.cast(k.kernelParams, C.c_void_p).value))
        return 0

    fn = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p)(set_params)
    assert len(_SIGNATURES["cuGraphKernelNodeSetParams_v2"]) == 2
    drv = RealDriver(lambda name: C.cast(fn, C.c_void_p).value if name == "cuGraphKernelNodeSetParams_v2" else 0)
    drv.graph_kernel_node_set_params(0x77, 0x1234, (4, 2, 1), (64, 1, 1), 96, 0x5000)
    assert seen == [(0x77, 0x1234, (4, 2, 1), (64, 1, 1), 96, 0x5000)]


def test_kernels_with_module_globals_keep_the_append_path():
    from types import SimpleNamespace

    from neutrino.runtime.cudagraphs.chain_capture import chain_nodes

    group = SimpleNamespace(chain=None)

    def node(globals_):
        return SimpleNamespace(chain_src=(SimpleNamespace(globals=globals_), None, ()))

    plain = [node([]), node([])]
    assert chain_nodes(group, plain) == plain
    assert chain_nodes(group, [node([]), node(["a global"])]) == []
    assert chain_nodes(group, plain[:1]) == []  # one probed node: nobody to advance it
    assert chain_nodes(SimpleNamespace(chain=object()), plain) == []  # (a later capture into a chained graph)


def test_a_destroyed_graph_drains_and_frees_its_chain(tmp_path, monkeypatch):
    p = ChainProgram(tmp_path, monkeypatch)
    graph = p.capture()
    exe = p.instantiate(graph)
    for _ in range(7):
        p.drv.graph_launch(exe)
    group = next(iter(p.rt.graphs._by_capture.values()))
    rings = group.chain
    heads, ring0 = rings.heads, rings.rings[0]
    p.drv.exec_destroy(exe)
    p.rt.on_graph(G_EXEC_DESTROY, exe, 0)
    p.drv.graph_destroy(graph)
    p.rt.on_graph(G_GRAPH_DESTROY, graph, 0)
    assert group.chain is None and heads not in p.drv.mem and ring0 not in p.drv.mem  # freed
    assert p.rt.graphs.budget.used == 0  # (the chain's bytes given back with the nodes')
    assert set(p.frames().values()) == {7} and len(p.frames()) == 3  # drained first
    finish(p.rt)
    rows = [r for r in p.rt.graph_summary if r.get("graph") is not None]
    assert len(rows) == 3 and all((r["replays"], r["written"], r["dropped_behind"]) == (7, 7, 0) for r in rows)


def test_a_chain_the_budget_has_no_room_for_keeps_the_append_path(tmp_path, monkeypatch):
    p = ChainProgram(tmp_path, monkeypatch)
    budget, calls = p.rt.graphs.budget, []
    real = budget.reserve

    def reserve(n):  # the 3 nodes' memory at capture fits; the chain's at the capture's end does not
        calls.append(n)
        return real(n) if len(calls) <= 3 else False

    budget.reserve = reserve
    graph = p.capture()
    assert len(calls) == 4 and p.kernels_in(graph)[-1] == APPEND_KERNEL
    assert "budget" in events(p.rt, "graph_chain_refused")[0]["reason"]
    exe = p.instantiate(graph)
    for _ in range(3):
        p.drv.graph_launch(exe)
    finish(p.rt)
    assert set(p.frames().values()) == {3} and len(p.frames()) == 3
