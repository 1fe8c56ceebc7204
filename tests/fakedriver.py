"""A Python stand-in for the CUDA driver calls the runtime makes (neutrino.runtime.driver.RealDriver).

Device memory is host memory (ctypes buffers), so the runtime's memset/copy
code paths run for real; a "kernel launch" calls a Python function the test
supplies, which may write the map buffers like the probed kernel would.
"""

from __future__ import annotations

import ctypes as C
import itertools
import threading

from neutrino.runtime.driver import DriverError


CTX0 = 0xC0  # the context of device 0; device d's is ctx_of(d)


def ctx_of(device: int) -> int:
    return CTX0 + 0x100 * device


class FakeDriver:
    """`devices`: the compute capability of each device (default: one device of `cc`). The current
    context is per thread, as in CUDA, and starts as device 0's."""

    def __init__(self, *, cc=(9, 0), sm_count=132, devices=None):
        self.devices = list(devices) if devices else [cc]
        self.cc, self.sm_count = self.devices[0], sm_count
        self._tls = threading.local()
        self.made_in: dict[int, int] = {}  # handle or address -> context current when it was made
        self._ids = itertools.count(0x1000, 0x10)
        self._lock = threading.Lock()
        self.mem: dict[int, object] = {}
        self.functions: dict[int, tuple[int, str]] = {}  # handle -> (module, name)
        self.modules: dict[int, bytes] = {}
        self.attrs: dict[tuple[int, int], int] = {}
        self.globals: dict[tuple[int, str], object] = {}
        self.launches: list[tuple] = []  # (kind, func, grid, block, params addr)
        self.launch_ctx: list[int] = []  # the context current at each launch
        self.kernel_impl = {}  # name -> fn(driver, req, params_addr, func_name)
        self.calls: list[str] = []
        self.fail: dict[str, str] = {}  # method -> error name to raise
        self.capturing = False
        self.launch_rc = 0
        self.links = 0
        self.syncs = 0
        self.host_allocs = 0

    def _check(self, what):
        with self._lock:
            self.calls.append(what)
        if what in self.fail:
            raise DriverError(what, 2, self.fail[what])

    def _new(self):
        with self._lock:
            return next(self._ids)

    def error_name(self, rc):
        return {0: "CUDA_SUCCESS", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"}.get(rc, "CUresult")

    def ctx_get_current(self):
        return getattr(self._tls, "ctx", CTX0)

    def ctx_set_current(self, ctx):
        assert (ctx - CTX0) % 0x100 == 0 and 0 <= (ctx - CTX0) // 0x100 < len(self.devices), hex(ctx)
        self._tls.ctx = ctx

    def ctx_device(self):
        return (self.ctx_get_current() - CTX0) // 0x100

    def device_attribute(self, device, attr):
        cc = self.devices[device]
        return {75: cc[0], 76: cc[1], 16: self.sm_count, 38: 1 << 20}[attr]

    def device_attr(self, attr):
        return self.device_attribute(self.ctx_device(), attr)

    def device_pci_bus_id(self, device):
        return f"0000:{0x18 + device:02x}:00.0"

    def _made(self, handle):
        self.made_in[handle] = self.ctx_get_current()
        return handle

    def module_load_data(self, image):
        self._check("module_load_data")
        h = self._made(self._new())
        self.modules[h] = image
        return h

    def link_ptx(self, ptx):
        self._check("link_ptx")
        self.links += 1
        return b"FAKECUBIN\0" + ptx.encode()

    def module_get_function(self, module, name):
        self._check("module_get_function")
        h = self._made(self._new())
        self.functions[h] = (module, name)
        return h

    def module_get_global(self, module, name, library=False):
        self._check("module_get_global")
        key = (module, name)
        with self._lock:
            if key not in self.globals:
                buf = (C.c_ubyte * 16)()
                self.globals[key] = buf
            return C.addressof(self.globals[key]), 16

    def memcpy_dtod_async(self, dst, src, size, stream):
        C.memmove(dst, src, size)

    def kernel_get_function(self, kernel):
        return kernel

    def func_get_attribute(self, func, attr):
        return self.attrs.get((func, attr), 0)

    def func_set_attribute(self, func, attr, value):
        self.attrs[(func, attr)] = value

    def stream_is_capturing(self, stream):
        return self.capturing

    def stream_synchronize(self, stream):
        self.syncs += 1

    def mem_alloc(self, size, stream):
        self._check("mem_alloc")
        buf = (C.c_ubyte * max(size, 16))()
        C.memset(buf, 0xAB, len(buf))  # garbage, so a missing memset shows
        addr = self._made(C.addressof(buf))
        with self._lock:
            self.mem[addr] = buf
        return addr, True

    def mem_alloc_sync(self, size):
        addr, _ = self.mem_alloc(size, 0)
        return addr

    def stream_create_nonblocking(self):
        return self._made(self._new())

    def stream_wait_event(self, stream, event):
        pass

    def mem_free(self, ptr, stream):
        with self._lock:
            self.mem.pop(ptr)

    def mem_free_sync(self, ptr):
        self.mem_free(ptr, 0)

    def memset_async(self, ptr, size, stream):
        C.memset(ptr, 0, size)

    def memcpy_dtoh_async(self, host, ptr, size, stream):
        self._check("memcpy_dtoh_async")
        C.memmove(host, ptr, size)

    def host_alloc(self, size):
        self.host_allocs += 1
        buf = (C.c_ubyte * size)()
        with self._lock:
            self.mem[C.addressof(buf)] = buf
        return C.addressof(buf), memoryview(buf).cast("B")

    def host_free(self, addr):
        with self._lock:
            self.mem.pop(addr)

    def event_create(self, timing=True):
        return self._made(self._new())

    def event_record(self, ev, stream):
        pass

    def event_synchronize(self, ev):
        pass

    def event_elapsed_ms(self, a, b):
        return 0.005

    def event_destroy(self, ev):
        pass

    def launch(self, kind, func, req, params):
        self._check("launch")
        with self._lock:
            self.launches.append((kind, func, req.grid, req.block, params))
            self.launch_ctx.append(self.ctx_get_current())
        if self.launch_rc:
            return self.launch_rc
        module, name = self.functions.get(func, (None, None))
        impl = self.kernel_impl.get(name)
        if impl is not None and b"__nt_buf" in self.modules.get(module, b""):  # only probed code writes maps
            impl(self, req, params, name)
        return 0


def param_u64(params_addr: int, i: int) -> int:
    """The u64 value of parameter i of a launch's params array."""
    arr = (C.c_void_p * (i + 1)).from_address(params_addr)
    return C.c_uint64.from_address(arr[i]).value


def param_u32(params_addr: int, i: int) -> int:
    arr = (C.c_void_p * (i + 1)).from_address(params_addr)
    return C.c_uint32.from_address(arr[i]).value


class FakeShim:
    def __init__(self):
        self.probed: set[int] = set()
        self.removed: list[int] = []

    def probe_add(self, h):
        self.probed.add(h)

    def probe_remove(self, h):
        self.probed.discard(h)
        self.removed.append(h)
