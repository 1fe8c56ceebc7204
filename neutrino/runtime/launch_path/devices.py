"""Which device each context runs on: ordinal, architecture, PCI bus id.

One job: answer "what device is context C?" once per context, so that a
process driving several GPUs (one thread per device, or one thread switching
contexts) builds, caches and launches probed code for the right device. The
architecture is part of the code cache key (codecache.py): two devices of
different architectures never share probed code. The first time a context is
seen, one `context` event names its device in the event log.
"""

from __future__ import annotations

import threading

import attrs

from neutrino.runtime.driver import DEV_ATTR_CC_MAJOR, DEV_ATTR_CC_MINOR, DriverError


@attrs.frozen
class DeviceInfo:
    ordinal: int
    arch: tuple[int, int]  # compute capability (major, minor)
    pci_bus_id: str | None  # None when the driver would not say

    @property
    def sm(self) -> str:
        return f"sm_{self.arch[0]}{self.arch[1]}"


class Devices:
    """DeviceInfo per context handle, asked of the driver once per context. Thread-safe."""

    def __init__(self, drv, trace):
        self.drv, self.trace = drv, trace
        self._lock = threading.Lock()
        self._by_ctx: dict[int, DeviceInfo] = {}

    def of(self, ctx: int) -> DeviceInfo:
        """The device of `ctx`, which must be the current context (the driver answers for that one)."""
        info = self._by_ctx.get(ctx)
        if info is not None:
            return info
        info = self._ask()
        with self._lock:
            first = ctx not in self._by_ctx
            info = self._by_ctx.setdefault(ctx, info)
        if first:
            self.trace.event("context", ctx=hex(ctx), device=info.ordinal, arch=info.sm, pci_bus_id=info.pci_bus_id)
        return info

    def arch(self, ctx: int) -> tuple[int, int]:
        return self.of(ctx).arch

    def current_arch(self) -> tuple[int, int] | None:
        """The architecture of the current context's device; None when no context is current
        (a CUlibrary may be loaded before any context exists)."""
        try:
            ctx = self.drv.ctx_get_current()
            return self.of(ctx).arch if ctx else None
        except DriverError:
            return None

    def forget(self) -> None:
        """Contexts are being destroyed: a new context may reuse a handle on another device."""
        with self._lock:
            self._by_ctx.clear()

    def _ask(self) -> DeviceInfo:
        ordinal = self.drv.ctx_device()
        arch = (self.drv.device_attribute(ordinal, DEV_ATTR_CC_MAJOR), self.drv.device_attribute(ordinal, DEV_ATTR_CC_MINOR))
        try:
            bus = self.drv.device_pci_bus_id(ordinal)
        except DriverError:
            bus = None
        return DeviceInfo(ordinal, arch, bus)
