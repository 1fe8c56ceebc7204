"""ctypes glue between the shim's C callbacks and `Runtime`.

Each callback turns raw pointers into Python values and calls the runtime.
No exception ever crosses back into C: a failure in a module or function
callback only means the module is not probed; a failure in the launch
callback returns NOT_HANDLED so the shim runs the original launch.
"""

from __future__ import annotations

import ctypes as C
import time

NOT_HANDLED = -1  # the shim's "run the original launch yourself" (core.NOT_HANDLED); core loads with the runtime

MODULE_KINDS = ("cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary",
                "cuLibraryLoadData", "cuLibraryLoadFromFile")
FUNCTION_KINDS = ("module_function", "library_kernel", "kernel_function", "library_module")
UNLOAD_KINDS = ("cuModuleUnload", "cuLibraryUnload")

CB_MODULE = C.CFUNCTYPE(None, C.c_int, C.c_void_p, C.c_void_p, C.c_char_p)
CB_FUNCTION = C.CFUNCTYPE(C.c_int, C.c_int, C.c_void_p, C.c_char_p, C.c_void_p)
CB_LAUNCH = C.CFUNCTYPE(C.c_int, C.c_int, C.c_void_p, *([C.c_uint] * 7), C.c_void_p, C.c_void_p, C.c_void_p,
                        C.c_void_p, C.c_uint64)
CB_LINK = C.CFUNCTYPE(None, C.c_int, C.c_void_p, C.c_int, C.c_void_p, C.c_size_t)
CB_EXIT = C.CFUNCTYPE(None)
CB_TEARDOWN = C.CFUNCTYPE(None)
CB_GRAPH = C.CFUNCTYPE(C.c_void_p, C.c_int, C.c_void_p, C.c_void_p, C.c_void_p, C.c_int)
CB_UNLOAD = C.CFUNCTYPE(None, C.c_int, C.c_void_p)

_MAGICS = {b"\x50\xed\x55\xba": "fatbin", b"\xb1\x43\x62\x46": "wrapper", b"\x7fELF": "elf"}
MAX_IMAGE = 1 << 31


class Shim:
    """The loaded shim library (the one LD_PRELOAD put in this process)."""

    def __init__(self, path: str):
        self.lib = C.CDLL(path)
        self.lib.neutrino_real_sym.restype = C.c_void_p
        self.lib.neutrino_real_sym.argtypes = [C.c_char_p]
        self.lib.neutrino_probe_add.argtypes = [C.c_void_p]
        self.lib.neutrino_probe_remove.argtypes = [C.c_void_p]
        self.lib.neutrino_probe_contains.argtypes = [C.c_void_p]
        self._forget = getattr(self.lib, "neutrino_forget_function", None)  # None: a shim built before it
        if self._forget is not None:
            self._forget.argtypes = [C.c_void_p]
        self.lib.neutrino_set_launch_filter.argtypes = [C.c_uint64] * 3
        self.lib.neutrino_register_callbacks.argtypes = [CB_MODULE, CB_FUNCTION, CB_LAUNCH, CB_LINK, CB_EXIT,
                                                         CB_TEARDOWN]
        self._keep = None
        self._keep_compiler = None

    def real_sym(self, name: str) -> int:
        return self.lib.neutrino_real_sym(name.encode()) or 0

    def probe_add(self, handle: int) -> bool:
        return bool(self.lib.neutrino_probe_add(handle))

    def probe_remove(self, handle: int) -> None:
        self.lib.neutrino_probe_remove(handle)

    def forget(self, handle: int) -> None:
        """The handle no longer stands for the kernel it was probed as: its launches go straight to
        the driver and its launch count restarts (shim/preload.c, neutrino_forget_function)."""
        if self._forget is not None:
            self._forget(handle)
        else:
            self.probe_remove(handle)

    def contains(self, handle: int) -> bool:
        return bool(self.lib.neutrino_probe_contains(handle))

    def set_launch_filter(self, start: int, stop: int, every: int) -> None:
        self.lib.neutrino_set_launch_filter(start, min(stop, 2**64 - 1), every)

    def suspend_probing(self, open_window: bool) -> None:
        """Open or close a window in which launches of probed kernels run the original kernel
        (a framework compiling or autotuning: autotune_window.SuspendWindow). A shim built before
        it: nothing."""
        fn = getattr(self.lib, "neutrino_suspend_probing", None)
        if fn is not None:
            fn.argtypes = [C.c_int]
            fn(1 if open_window else 0)

    def suspended_launches(self) -> int:
        """Launches of probed kernels left unprobed inside such windows so far."""
        fn = getattr(self.lib, "neutrino_suspended_launches", None)
        if fn is None:
            return 0
        fn.restype = C.c_uint64
        return int(fn())

    def register(self, callbacks: tuple) -> None:
        self._keep = callbacks  # the CFUNCTYPE objects must outlive the process's use of them
        self.lib.neutrino_register_callbacks(*callbacks)

    def register_graph(self, callback) -> None:
        """The graph API callback of shim/graphs.c (make_graph_callback)."""
        self._keep_graph = callback
        self.lib.neutrino_graph_register_callback.argtypes = [CB_GRAPH]
        self.lib.neutrino_graph_register_callback(callback)

    def register_unload(self, callback) -> bool:
        """Module and library unloads (make_unload_callback); False with a shim built before them."""
        fn = getattr(self.lib, "neutrino_register_unload_callback", None)
        if fn is None:
            return False
        fn.argtypes = [CB_UNLOAD]
        self._keep_unload = callback
        fn(callback)
        return True

    def register_compiler(self, callback) -> bool:
        """shim/compilers.c's callback (nvJitLink taps); False with a shim built before it existed."""
        fn = getattr(self.lib, "neutrino_register_compiler_callback", None)
        if fn is None:
            return False
        self._keep_compiler = callback
        fn(callback)
        return True

    def unregister(self) -> None:
        if getattr(self, "_keep_graph", None) is not None:
            self.lib.neutrino_graph_register_callback(CB_GRAPH(0))
        if getattr(self, "_keep_unload", None) is not None:
            self.lib.neutrino_register_unload_callback(CB_UNLOAD(0))
        self.lib.neutrino_register_callbacks(CB_MODULE(0), CB_FUNCTION(0), CB_LAUNCH(0), CB_LINK(0), CB_EXIT(0),
                                             CB_TEARDOWN(0))
        if self._keep_compiler is not None:
            from neutrino.runtime.modules.compilers import CB_COMPILED

            self.lib.neutrino_register_compiler_callback(CB_COMPILED(0))


def read_image(addr: int) -> tuple[bytes, int]:
    """The bytes of an image given to the driver by address, and the address they start at.

    PTX is NUL-terminated; fatbins and ELF images are sized from their headers
    (neutrino.runtime.modules.ptx_source.image_size_hint); a fatbin wrapper points at
    its container.
    """
    from neutrino.runtime.modules import fatbin, ptx_source

    for _ in range(2):
        kind = _MAGICS.get(C.string_at(addr, 4))
        if kind is None:
            return C.string_at(addr), addr
        head = C.string_at(addr, 64)
        if kind == "wrapper":
            addr = fatbin.parse_fatbin_wrapper(head).fatbin_address
            continue
        size = ptx_source.image_size_hint(head) or 64
        for _ in range(8):  # ELF: grows once the section table is in view
            if size > MAX_IMAGE:
                raise ValueError(f"image claims {size} bytes")
            data = C.string_at(addr, size)
            new = ptx_source.image_size_hint(data) or size
            if new <= size:
                return data, addr
            size = new
        return data, addr
    raise ValueError("fatbin wrapper points at another wrapper")


def unselectable_fatbin(addr: int, literals: tuple[bytes, ...]) -> bool:
    """Whether the image at `addr` is a fatbin (or a wrapper of one) of which -k can select no kernel,
    decided from its entries' headers and uncompressed payloads read in place
    (name_filter.fatbin_may_hold_selected): a SASS-only library image (ATen, cuBLAS: megabytes of
    compressed SASS) is then neither copied nor walked again (issue 29, nothing probed). Any other
    image, or one that does not read as a fatbin: False (copied and examined as before)."""
    try:
        return _unselectable_fatbin(addr, literals)
    except Exception:  # noqa: BLE001 - unreadable headers: read_image and the registry report it
        return False


def _unselectable_fatbin(addr: int, literals: tuple[bytes, ...]) -> bool:
    from neutrino.runtime.modules import fatbin
    from neutrino.runtime.modules.name_filter import fatbin_may_hold_selected

    kind = _MAGICS.get(C.string_at(addr, 4))
    if kind == "wrapper":
        addr = fatbin.parse_fatbin_wrapper(C.string_at(addr, fatbin.FATBIN_WRAPPER_SIZE)).fatbin_address
        kind = _MAGICS.get(C.string_at(addr, 4)) if addr else None
    if kind != "fatbin":
        return False
    size = fatbin.fatbin_size(C.string_at(addr, 16))
    if size > MAX_IMAGE:
        return False
    return not fatbin_may_hold_selected(lambda at, count: C.string_at(addr + at, count), size, literals)


def _selected_literals(rt) -> tuple[bytes, ...]:
    """The -k patterns' bytes (registry.selected_literals); () when the runtime has none or did not start."""
    try:
        return tuple(rt.registry.selected_literals)
    except Exception:  # noqa: BLE001 - no runtime (not started), or one without the filter
        return ()


def make_callbacks(rt, shim: Shim, on_exit=None) -> tuple:
    def module_cb(kind, handle, image, path):
        try:
            p = path.decode(errors="replace") if path else None
            literals = _selected_literals(rt) if image else ()  # builds the runtime on the first load
            started = time.perf_counter()
            if literals and unselectable_fatbin(image, literals):  # -k selects none of it: not copied
                rt.on_module(MODULE_KINDS[kind], handle or 0, None, p, image_addr=image,
                             read_seconds=time.perf_counter() - started, examined=False)
                return
            data, addr = (read_image(image) if image else (None, 0))
            read = time.perf_counter() - started
            rt.on_module(MODULE_KINDS[kind], handle or 0, data, p, image_addr=image or 0, read_seconds=read)
        except Exception as e:  # noqa: BLE001
            _safe_event(rt, "no_ptx", module=hex(handle or 0), kind=MODULE_KINDS[kind], reason=f"image unreadable: {e}")

    def function_cb(kind, owner, name, out):
        try:
            n = name.decode(errors="replace") if name else None
            return 1 if rt.on_function(FUNCTION_KINDS[kind], owner or 0, n, out or 0) else 0
        except Exception as e:  # noqa: BLE001
            _safe_event(rt, "fallback", kernel=str(name), stage="lookup", reason=f"{type(e).__name__}: {e}")
            return 0

    def launch_cb(kind, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra, config, index):
        phases = None
        try:
            from neutrino.runtime.core import LaunchRequest  # loaded by then (with the runtime): a dict lookup
            from neutrino.runtime.start.phases import INSIDE_LAUNCH

            phases = getattr(rt, "phases", None)
            started = time.perf_counter()
            building = phases.sum_of(INSIDE_LAUNCH) if phases is not None else 0.0
            req = LaunchRequest(kind, f or 0, (gx, gy, gz), (bx, by, bz), shmem, stream or 0, params or 0,
                                extra or 0, config or 0, index)
            return rt.on_launch(req)
        except BaseException:  # noqa: BLE001 - run the original, whatever happened
            return NOT_HANDLED
        finally:
            if phases is not None:  # the `launch` phase: this launch's host time, its kernel's build taken off
                built = phases.sum_of(INSIDE_LAUNCH) - building
                phases.add("launch", max(time.perf_counter() - started - built, 0.0))

    def link_cb(kind, state, type_, data, size):
        clock = _ApiHookClock(rt)
        try:
            if kind == 0 and type_ == 1 and data:  # CU_JIT_INPUT_PTX
                text = C.string_at(data, size).split(b"\0", 1)[0].decode(errors="replace")
                rt.on_link_add(state or 0, text)
            elif kind == 1:
                rt.on_link_complete(state or 0, data or 0, C.string_at(data, size) if data and size else None)
        except Exception:  # noqa: BLE001
            pass
        finally:
            clock.stop()

    def exit_cb():
        try:
            if on_exit is not None:
                on_exit()
        except BaseException:  # noqa: BLE001
            pass

    def teardown_cb():
        try:
            rt.on_teardown()  # a context is about to be destroyed: write what is in flight first
        except BaseException:  # noqa: BLE001
            pass

    # No exit callback in a Python process: Python's atexit finishes there, before C's exit handlers.
    exit_fn = CB_EXIT(exit_cb) if on_exit is not None else CB_EXIT(0)
    return (CB_MODULE(module_cb), CB_FUNCTION(function_cb), CB_LAUNCH(launch_cb), CB_LINK(link_cb), exit_fn,
            CB_TEARDOWN(teardown_cb))


def make_graph_callback(rt):
    """Graph API calls (shim/graphs.c) → Runtime.on_graph; never raises into C."""

    def graph_cb(kind, a, b, c, version):
        clock = _ApiHookClock(rt)
        try:
            return rt.on_graph(kind, a or 0, b or 0, c or 0, version) or None
        except BaseException as e:  # noqa: BLE001 - the program's graph call goes on as it was made
            _safe_event(rt, "graph_error", kind=kind, reason=f"{type(e).__name__}: {e}")
            return None
        finally:
            clock.stop()

    return CB_GRAPH(graph_cb)


def make_unload_callback(rt):
    """cuModuleUnload / cuLibraryUnload (shim/preload.c), before the driver's → Runtime.on_unload;
    never raises into C: the program's unload goes on as it was made."""

    def unload_cb(kind, handle):
        clock = _ApiHookClock(rt)
        try:
            rt.on_unload(UNLOAD_KINDS[kind], handle or 0)
        except BaseException as e:  # noqa: BLE001
            _safe_event(rt, "unload_error", module=hex(handle or 0), reason=f"{type(e).__name__}: {e}")
        finally:
            clock.stop()

    return CB_UNLOAD(unload_cb)


class _ApiHookClock:
    """The `api_hooks` phase (start/phases.py): one graph, linker or unload callback's host time, the builds
    and argument sets inside it (phases of their own) taken off. Only once the runtime is built: a callback
    that builds it is in the start-up phases (and an unload before it does nothing). Never raises."""

    def __init__(self, rt):
        self.phases = None
        try:
            from neutrino.runtime.start.phases import INSIDE_LAUNCH

            inner = getattr(rt, "_runtime", rt)  # a DeferredRuntime's Runtime, None before it is built
            self.phases = getattr(inner, "phases", None) if inner is not None else None
            if self.phases is not None:
                self.inside, self.names = self.phases.sum_of(INSIDE_LAUNCH), INSIDE_LAUNCH
                self.started = time.perf_counter()
        except Exception:  # noqa: BLE001 - a clock never stops the program's call
            self.phases = None

    def stop(self) -> None:
        if self.phases is None:
            return
        try:
            inside = self.phases.sum_of(self.names) - self.inside
            self.phases.add("api_hooks", max(time.perf_counter() - self.started - inside, 0.0))
        except Exception:  # noqa: BLE001
            pass


def _safe_event(rt, event_name, **fields):  # not `kind`: the no_ptx event has a `kind` field
    try:
        rt.trace.event(event_name, **fields)
    except Exception:  # noqa: BLE001
        pass

