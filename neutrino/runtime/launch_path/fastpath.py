"""Handing known kernels to the shim's C launch path (shim/fastlaunch.c).

One job: after a kernel's first probed launch in a context has gone through
Python (building its code, checking its attributes), describe it to the shim
as a *plan*, so its later launches are probed in C without entering Python:
a probed launch then costs the driver calls it needs and nothing else.

A kernel gets a plan only when its launches need nothing per launch that only
Python does: no counting kernel (`cap = "count"`), no module globals to mirror,
no `--benchmark`, arguments passed as a parameter array, and
`cuLaunchKernel` or `cuLaunchKernelEx` (not cooperative launches). Launches the plan cannot take (more dynamic shared
memory than the attributes copied, a capturing stream, an error) come back to
Python, which handles and logs them. Launches in C carry no Python frame.
"""

from __future__ import annotations

import ctypes as C

from neutrino import maps as tracefmt
from neutrino.runtime.driver import COPIED_FUNC_ATTRS, LAUNCH_EX, LAUNCH_EX_PTSZ, LAUNCH_KERNEL, LAUNCH_KERNEL_PTSZ

MAX_MAPS = 16  # NT_MAX_MAPS of shim/writer.h
MAX_HEADER = 65536
MAX_PARAMS = 256
UNITS_MODE = {"thread": 0, "warp": 1, "block": 2}
FIXED = 3
RING = 4  # + the level's mode: a count-sized map's ring, `cap` slots per unit, at most `fixed_units` slots


class NtPlan(C.Structure):
    """`nt_plan` of shim/fastlaunch.c."""

    _fields_ = [
        ("orig_func", C.c_void_p), ("ctx", C.c_void_p), ("probed_func", C.c_void_p),
        ("n_params", C.c_uint32), ("n_maps", C.c_uint32), ("n_extra", C.c_uint32), ("max_shared", C.c_uint32),
        ("units_mode", C.c_uint32 * MAX_MAPS), ("fixed_units", C.c_uint64 * MAX_MAPS),
        ("fixed_size", C.c_uint64 * MAX_MAPS),
        ("record_bytes", C.c_uint32 * MAX_MAPS), ("cap", C.c_uint32 * MAX_MAPS),
        ("map_header_pos", C.c_uint32 * MAX_MAPS),
        ("extra_map", C.c_uint32 * (2 * MAX_MAPS)), ("extra_is_buffer", C.c_uint32 * (2 * MAX_MAPS)),
        ("fd", C.c_int32), ("kernel_id", C.c_uint32), ("header_template", C.c_char_p), ("header_len", C.c_uint64),
    ]


class NtPlanStats(C.Structure):
    _fields_ = [("launches", C.c_uint64), ("dropped_buffer", C.c_uint64), ("dropped_trace", C.c_uint64),
                ("handed_back", C.c_uint64)]


class FastPath:
    def __init__(self, shim_path: str, buffer_budget: int, trace_budget: int, time_every: int = 1,
                 wait_when_full: bool = False):
        held = C.PyDLL(shim_path)  # none of these waits: keep the GIL
        self._plan = held.neutrino_fast_plan
        self._plan.argtypes = [C.POINTER(NtPlan)]
        self._stats = held.neutrino_fast_stats
        self._stats.argtypes = [C.c_uint, C.POINTER(C.c_void_p), C.POINTER(C.c_uint32), C.POINTER(NtPlanStats)]
        self._reset = held.neutrino_fast_reset
        self._forget = getattr(held, "neutrino_fast_forget", None)  # None: a shim built before it existed
        if self._forget is not None:
            self._forget.argtypes = [C.c_void_p, C.POINTER(NtPlanStats)]
        self.reserve_trace = held.neutrino_trace_reserve
        self.reserve_trace.argtypes = [C.c_uint64]
        self.give_back_trace = held.neutrino_trace_give_back
        self.give_back_trace.argtypes = [C.c_uint64]
        enable = held.neutrino_fast_enable
        enable.argtypes = [C.c_uint64, C.c_uint64, C.c_uint64, C.c_int]
        self.enabled = enable(buffer_budget, trace_budget, time_every, int(wait_when_full)) == 0
        self._registered: dict[int, dict[int, int]] = {}  # function handle -> ctx -> max shared bytes planned

    def wants_plan(self, func: int, ctx: int, max_shared: int) -> bool:
        return self.enabled and self._registered.get(func, {}).get(ctx) != max_shared

    def plan_later_launches(self, req, ctx: int, pk, shape, flight, writer) -> int | None:
        """After a probed launch of the Python path: let the shim probe the kernel's later launches in
        C. The dynamic shared memory limit the plan was made for, or None when none was made."""
        max_shared = max(pk.attrs_seen.get(COPIED_FUNC_ATTRS[0], 0), 48 * 1024)
        if not self.wants_plan(req.func, ctx, max_shared):
            return None
        kernel_id, fd, header = writer.plan_inputs(flight)
        return max_shared if self.register(req, ctx, pk, shape, kernel_id, fd, header, max_shared) else None

    def register(self, req, ctx: int, pk, shape, kernel_id: int, fd: int, header: bytes, max_shared: int) -> bool:
        """Describe `pk` to the shim; False when the kernel is not one the C path can launch."""
        reason = plan_refusal(req, pk, shape, header)
        if reason is not None:
            self._registered.setdefault(req.func, {})[ctx] = max_shared  # do not ask again
            return False
        plan = NtPlan(orig_func=req.func, ctx=ctx, probed_func=pk.func, n_params=pk.n_params,
                      n_maps=len(shape.layouts), max_shared=max_shared, fd=fd, kernel_id=kernel_id,
                      header_template=header, header_len=len(header))
        for i, lay in enumerate(shape.layouts):
            if tracefmt.is_ring(lay.map):  # the C path sizes the ring per launch as ring_slots does
                plan.units_mode[i] = RING + UNITS_MODE[lay.map["level"]]
                plan.fixed_units[i] = tracefmt.ring_slot_limit(lay.map["record_bytes"], pk.ring[1])
            elif lay.map.get("type", "array") == "array":
                plan.units_mode[i] = UNITS_MODE[lay.map["level"]]
            else:  # sum/hist: a fixed buffer whatever the grid
                plan.units_mode[i], plan.fixed_units[i], plan.fixed_size[i] = FIXED, lay.units, lay.size
            plan.record_bytes[i] = lay.map["record_bytes"]
            plan.cap[i] = pk.ring_learned.get(lay.map["name"], pk.ring[0]) if tracefmt.is_ring(lay.map) else lay.cap
            plan.map_header_pos[i] = shape.map_headers[i]
        _, extra = pk.param_plan()
        plan.n_extra = len(extra)
        for i, (which, is_buffer) in enumerate(extra):
            plan.extra_map[i], plan.extra_is_buffer[i] = which, int(is_buffer)
        ok = self._plan(C.byref(plan)) == 0
        self._registered.setdefault(req.func, {})[ctx] = max_shared
        return ok

    def stats(self) -> list[tuple[int, int, NtPlanStats]]:
        """(function handle, kernel id, counters) of every plan."""
        out = []
        for i in range(1024):
            f, k, st = C.c_void_p(), C.c_uint32(), NtPlanStats()
            if self._stats(i, C.byref(f), C.byref(k), C.byref(st)):
                out.append((f.value or 0, k.value, st))
        return out

    def forget(self, func: int) -> NtPlanStats:
        """The handle no longer stands for the kernel its plans were made for (core.py, module
        unloads): its later launches go through Python, which plans them anew. Returns the
        counters of the plans forgotten (zeroed in the shim)."""
        st = NtPlanStats()
        if self._forget is not None:
            self._forget(func, C.byref(st))
        self._registered.pop(func, None)
        return st

    def reset(self) -> None:
        """Forget every plan (a context is going away); later launches go through Python again."""
        self._reset()
        self._registered.clear()


def plan_refusal(req, pk, shape, header: bytes) -> str | None:
    """Why a kernel cannot take the C path, or None."""
    if req.kind not in (LAUNCH_KERNEL, LAUNCH_KERNEL_PTSZ, LAUNCH_EX, LAUNCH_EX_PTSZ):
        return "a cooperative launch"
    if pk.needs_counting or pk.globals or pk.baseline:
        return "needs a counting kernel, mirrored globals or a baseline"
    if pk.n_params > MAX_PARAMS or len(shape.layouts) > MAX_MAPS or len(header) > MAX_HEADER:
        return "too many parameters or maps"
    for lay in shape.layouts:
        if lay.map["level"] not in UNITS_MODE or not (isinstance(lay.map["cap"], int) or tracefmt.is_ring(lay.map)):
            return f"map {lay.map['name']} is not sized by the grid"
    return None
