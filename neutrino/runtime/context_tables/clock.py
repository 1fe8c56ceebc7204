"""Putting probes' %globaltimer on the timeline's clock.

CUPTI's kernel times are Unix-epoch nanoseconds (CLOCK_REALTIME, interpolated from the GPU's
clock). A probe's `%globaltimer` is the GPU's own nanosecond timer, which the driver keeps near
host time but not on it: on the H100 it was 5.99 ms behind (spec/runtime.md, "Clock"). So the
runtime launches one tiny kernel of its own when the timeline starts and again when it stops;
it reads %globaltimer, and CUPTI records the same kernel: the difference is the offset, written
as `timeline_clock` events. neutrino.timeline.globaltimer_to_ns() applies it.
"""

from __future__ import annotations

import ctypes as C
import struct
from types import SimpleNamespace

CLOCK_KERNEL = "__neutrino_globaltimer"

_PTX = f"""//
.version 6.0
.target sm_50
.address_size 64

.visible .entry {CLOCK_KERNEL}(.param .u64 out)
{{
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u64 %rd2, %globaltimer;
    mov.u64 %rd3, %globaltimer;
    st.volatile.global.v2.u64 [%rd1], {{%rd2, %rd3}};
    ret;
}}
"""


def read_globaltimer(drv, timeline=None) -> tuple[int, int] | None:
    """Two %globaltimer reads from one kernel launch on the current context (None without one).
    The launch goes to the driver directly (not through the shim's hooks), on a non-blocking
    stream of ours, in relaxed capture mode (a capture under way elsewhere is left alone), and
    waits for it: called at timeline start and stop only. With the timeline's launch hooks on
    (`timeline`, level `hooks`) it is entered in its stream's queue as the hooks would, so its
    record has its thread and host time too."""
    from neutrino.runtime.driver import LAUNCH_KERNEL
    from neutrino.runtime.cudagraphs.capture import relaxed_capture

    if not drv.ctx_get_current():
        return None
    with relaxed_capture(drv):
        module = drv.module_load_data(_PTX.encode() + b"\0")
        func = drv.module_get_function(module, CLOCK_KERNEL)
        stream = drv.stream_create_nonblocking()
        host, view, device = drv.host_alloc_mapped(16)
        try:
            arg = C.c_uint64(device)
            params = (C.c_void_p * 1)(C.addressof(arg))
            req = SimpleNamespace(grid=(1, 1, 1), block=(1, 1, 1), shared_bytes=0, stream=stream)
            entry = timeline.launch_enter(func, stream, (1, 1, 1, 1, 1, 1)) if timeline is not None else None
            rc = drv.launch(LAUNCH_KERNEL, func, req, C.addressof(params))
            if timeline is not None:
                timeline.launch_exit(entry, rc)
            if rc != 0:
                return None
            drv.stream_synchronize(stream)
            t0, t1 = struct.unpack("<QQ", bytes(view[:16]))
            return t0, t1
        finally:
            drv.host_free(host)


def calibrate(drv, trace, phase: str, timeline=None) -> None:
    """One `timeline_clock` event: the calibration kernel's %globaltimer reads (never raises)."""
    try:
        reads = read_globaltimer(drv, timeline)
    except Exception as e:  # noqa: BLE001 - no calibration: probe times stay on the GPU's clock
        trace.event("timeline_clock", phase=phase, error=f"{type(e).__name__}: {e}")
        return
    if reads is not None:
        trace.event("timeline_clock", phase=phase, kernel=CLOCK_KERNEL, globaltimer_ns=list(reads))
