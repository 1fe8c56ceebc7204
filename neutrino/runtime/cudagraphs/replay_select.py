"""Which replays of a probed graph run probed, chosen on the host at each cuGraphLaunch (issue 24).

One job: give shim/graphpick.c, for an executable graph instantiated from a captured graph of ours,
what it needs to switch the probed nodes between the probed kernel and the program's own, and the
append nodes on and off, as `--launches` selects each replay: the nodes' handles, both functions, the
arguments copied at capture, the append nodes' arguments. By default the shim also makes a twin
of the executable graph (the program's graph as it made it: a clone with the original kernels and no
append node) and launches it for every replay left out, so such a replay is the program's own replay;
where it cannot (graphs CUDA does not clone, a change the twin cannot take: a `graph_pick_switching`
event), the nodes are switched instead. What the host cannot choose keeps the device gate (ring.py,
"Sampling").

Only with the native shim (the fake drivers of the Python tests have no cuGraphLaunch hook): there
every replay runs probed and the device gate applies, as before.
"""

from __future__ import annotations

import ctypes as C
import os

ENV_OFF = "NEUTRINO_GRAPH_PICK"  # "0": the device gate alone (benchmarks compare the two)
ENV_TWIN = "NEUTRINO_GRAPH_TWIN"  # "0": no twin, the replays left out switch nodes (benchmarks compare the two)

# why a plan is given up (shim/shim.h NT_PICK_*; SHARED_GATE is Python's own: the shim drops a group's plans
# together, neutrino_graph_pick_drop)
UPDATE, SHARED_GATE = 3, 5
# after replays the host did not count (the device gate's), its count is stale: no plan again
UNCOUNTED = "replays of the captured graph ran on the device gate, which the host does not count"
FALLBACK_REASONS = {
    1: "the executable graph was launched into a capturing stream (it becomes a child graph node)",
    2: "switching the graph's nodes failed",
    3: "cuGraphExecUpdate on the executable graph",
    4: "the program set new parameters for one of the probed graph's nodes",
    SHARED_GATE: "another executable graph of the captured graph runs on the device gate (their replays are "
                 "numbered together)",
}


# the program changed its executable graph in a way its twin could not follow (shim/shim.h NT_PICK_TWIN_LOST; a
# code of the fallbacks' numbering, not of TWIN_REASONS', where 6 is the missing event)
TWIN_LOST = 6
TWIN_LOST_REASON = ("the program changed its executable graph in a way the twin could not follow, ordering the two "
                    "graphs' launches failed, or the driver refused to launch the twin")
# why a plan has no twin (shim/graphpick.c TWIN_*; 1: not asked for, NEUTRINO_GRAPH_TWIN=0, no event)
TWIN_REASONS = {
    2: "instantiation flags a second executable graph cannot take",
    3: "the captured graph cannot be cloned (memory alloc/free or conditional nodes)",
    4: "the clone's nodes could not be set to the program's kernels",
    5: "the clone could not be instantiated",
    6: "no event to order the two graphs' launches",
    7: "a driver without the graph calls the twin needs",
}


class PickKernelDesc(C.Structure):
    """`nt_pick_kernel_desc` of shim/shim.h."""

    _fields_ = [("node", C.c_void_p), ("probed", C.c_void_p), ("original", C.c_void_p), ("args", C.c_void_p),
                ("grid", C.c_uint32 * 3), ("block", C.c_uint32 * 3), ("shared_bytes", C.c_uint32),
                ("pad", C.c_uint32)]


class PickAppendDesc(C.Structure):
    """`nt_pick_append_desc` of shim/shim.h."""

    _fields_ = [("node", C.c_void_p), ("func", C.c_void_p), ("grid", C.c_uint32 * 3), ("block", C.c_uint32 * 3),
                ("args", C.c_uint64 * 7)]


def wants_picking(launch_filter) -> bool:
    """Whether `--launches` leaves replays out (selecting every replay, there is nothing to choose)."""
    f = launch_filter
    return not (f.start == 0 and f.every == 1 and f.stop >= 2**63)


class ReplayPicker:
    """The host's choice of replays, in shim/graphpick.c (the shim library at `shim_path`)."""

    def __init__(self, shim_path: str, launch_filter):
        lib = C.PyDLL(shim_path)  # none of these but the drop waits for the GPU: keep the GIL
        self.filter = launch_filter
        self._args = lib.neutrino_graph_pick_args
        self._args.argtypes = [C.c_void_p, C.c_void_p, C.c_int]
        self._args.restype = C.c_void_p
        self._args_chain = lib.neutrino_graph_pick_args_chain
        self._args_chain.argtypes = [C.c_void_p, C.c_void_p, C.c_int]
        self._args_chain.restype = C.c_void_p
        self._args_free = lib.neutrino_graph_pick_args_free
        self._args_free.argtypes = [C.c_void_p]
        self._group_new = lib.neutrino_graph_pick_group_new
        self._group_new.restype = C.c_void_p
        self._group_free = lib.neutrino_graph_pick_group_free
        self._group_free.argtypes = [C.c_void_p]
        self._group_replays = lib.neutrino_graph_pick_group_replays
        self._group_replays.argtypes = [C.c_void_p]
        self._group_replays.restype = C.c_uint64
        self._plan = lib.neutrino_graph_pick_plan
        self._plan.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p, C.c_uint64, C.c_uint64, C.c_uint64,
                               C.c_int, C.POINTER(PickKernelDesc), C.c_int, C.POINTER(PickAppendDesc), C.c_ulonglong,
                               C.c_int, C.POINTER(C.c_int)]
        self.twin = os.environ.get(ENV_TWIN, "1") != "0"
        # the drop waits for a twin's launch in flight (twin_settle): without the GIL, which the program's graph
        # may need to finish (a host function calling Python)
        self._drop = C.CDLL(shim_path).neutrino_graph_pick_drop
        self._drop.argtypes = [C.c_void_p, C.POINTER(C.c_uint64)]
        self._forget = lib.neutrino_graph_pick_forget
        self._forget.argtypes = [C.c_void_p]
        self._forget_all = lib.neutrino_graph_pick_forget_all
        self._counts = lib.neutrino_graph_pick_counts
        self._counts.argtypes = [C.c_uint64 * 5]

    def copy_args(self, probed_func: int, params_addr: int, buffer_param: int) -> int:
        """The arguments of a probed node's launch, copied while the program's values are alive (at
        capture); 0 when they cannot be (the node keeps the device gate)."""
        return self._args(probed_func, params_addr, buffer_param) or 0

    def copy_chain_args(self, chain_func: int, params_addr: int, buffer_param: int) -> int:
        """A chain node's arguments (its head tagged in the selected replays too: the plan never switches it off);
        0 when they cannot be copied."""
        return self._args_chain(chain_func, params_addr, buffer_param) or 0

    def free_args(self, handle: int) -> None:
        if handle:
            self._args_free(handle)

    def new_group(self) -> int:
        return self._group_new() or 0

    def free_group(self, handle: int) -> None:
        if handle:
            self._group_free(handle)

    def replays(self, group_handle: int) -> int:
        """Replays the host numbered across the group's executable graphs."""
        return int(self._group_replays(group_handle)) if group_handle else 0

    def plan(self, exe: int, graph: int, ctx: int, group_handle: int, kernels: list[dict], appends: list[dict],
             flags: int = 0, twin: bool | None = None) -> tuple[bool, str]:
        """Host-chosen replays for executable graph `exe` of captured graph `graph` in context `ctx`, instantiated
        with `flags`: `kernels` (node, probed, original, args, grid, block, shared_bytes) and `appends` (node,
        func, grid, block, args: the captured values). (planned, why the replays left out switch nodes instead
        of running the twin: "" when they run it or no twin was asked for). `twin`: ask for one (default:
        unless NEUTRINO_GRAPH_TWIN=0)."""
        ks = (PickKernelDesc * len(kernels))()
        for d, k in zip(ks, kernels):
            d.node, d.probed, d.original, d.args = k["node"], k["probed"], k["original"], k["args"]
            d.grid[:], d.block[:], d.shared_bytes = k["grid"], k["block"], k["shared_bytes"]
        aps = (PickAppendDesc * len(appends))()
        for d, a in zip(aps, appends):
            d.node, d.func = a["node"], a["func"]
            d.grid[:], d.block[:] = a["grid"], a["block"]
            d.args[: len(a["args"])] = a["args"]
        f = self.filter
        why = C.c_int(0)
        planned = bool(self._plan(exe, graph, ctx, group_handle, f.start, min(f.stop, 2**64 - 1), max(1, f.every),
                                  len(ks), ks, len(aps), aps, flags, int(self.twin if twin is None else twin),
                                  C.byref(why)))
        return planned, TWIN_REASONS.get(why.value, "") if planned else ""

    def drop(self, exe: int) -> tuple[int, int] | None:
        """Give the plan of `exe` up (nodes as captured). (next replay's number, 1 restored or -1 a driver
        call failed), or None when it had none."""
        nxt = C.c_uint64()
        rc = self._drop(exe, C.byref(nxt))
        return None if rc == 0 else (int(nxt.value), rc)

    def forget(self, exe: int) -> None:
        self._forget(exe)

    def forget_all(self) -> None:
        """A context is going away: every plan goes, no driver call."""
        self._forget_all()

    def counts(self) -> dict:
        out = (C.c_uint64 * 5)()
        self._counts(out)
        return {"switches": int(out[0]), "driver_calls": int(out[1]), "launches": int(out[2]),
                "twin_launches": int(out[3]), "twin_waits": int(out[4])}


def teardown_keeps_context(sink) -> bool:
    """Whether the context teardown in progress is a primary-context release that leaves the context alive
    (shim/preload.c counts the retains it sees): the graphs' plans and rings live as long as the context."""
    shim_path = getattr(sink, "shim_path", None)
    if not shim_path:
        return False
    try:
        return bool(C.CDLL(shim_path).neutrino_teardown_keeps_context())
    except (OSError, AttributeError):  # an older shim: every teardown destroys the context
        return False


def picker_for(sink) -> ReplayPicker | None:
    """The picker for a graph sink: with the native shim, when `--launches` leaves replays out."""
    shim_path = getattr(sink, "shim_path", None)
    if os.environ.get(ENV_OFF, "1") == "0":
        return None
    if not shim_path or not wants_picking(sink.filter):
        return None
    try:
        return ReplayPicker(shim_path, sink.filter)
    except (OSError, AttributeError):  # an older shim without graphpick.c: the device gate only
        return None
