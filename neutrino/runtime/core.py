"""The in-process runtime: module registry, probed launches, harvesting results.

The shim (shim/preload.c) calls `Runtime.on_*` through `neutrino.runtime.hooks`
for module loads, function lookups and launches of probed functions. All
driver work goes through `self.drv` (RealDriver, or a fake in tests).

Failure policy: every exception on our side before the probed kernel is
launched turns into `NOT_HANDLED`, which makes the shim run the original
launch with the original arguments; the event log gets one `fallback` line.
"""

from __future__ import annotations

import ctypes as C
import queue
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import attrs

from neutrino import trace as tracefmt
from neutrino.errors import NeutrinoError
from neutrino.runtime import attribution
from neutrino.runtime.codecache import CacheEntry, CodeCache, cache_key
from neutrino.runtime.driver import (
    COPIED_FUNC_ATTRS,
    CU_STREAM_LEGACY,
    CU_STREAM_PER_THREAD,
    DEV_ATTR_CC_MAJOR,
    DEV_ATTR_CC_MINOR,
    DEV_ATTR_L2_SIZE,
    LAUNCH_COOP_PTSZ,
    LAUNCH_EX_PTSZ,
    LAUNCH_KERNEL_PTSZ,
    DriverError,
)
from neutrino.runtime.options import RuntimeOptions
from neutrino.runtime.tracedir import TraceDir

NOT_HANDLED = -1  # tells the shim to run the original launch itself
MAX_PENDING = 64  # probed launches in flight before a launch waits for the harvester


class Fallback(NeutrinoError):
    """Something on our side failed; the original kernel must run instead."""

    def __init__(self, stage: str, reason: str, permanent: bool = False):
        self.stage, self.reason, self.permanent = stage, reason, permanent
        super().__init__(f"{stage}: {reason}")


@attrs.frozen
class LaunchRequest:
    kind: int
    func: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    stream: int
    params: int  # address of the void* array (0 if none)
    extra: int = 0
    config: int = 0  # CUlaunchConfig* for cuLaunchKernelEx
    index: int = 0  # launch number of this function (counted by the shim)

    @property
    def our_stream(self) -> int:
        """The stream handle for our own async work, with the default stream made explicit."""
        if self.stream:
            return self.stream
        return CU_STREAM_PER_THREAD if self.kind in (LAUNCH_KERNEL_PTSZ, LAUNCH_EX_PTSZ, LAUNCH_COOP_PTSZ) else CU_STREAM_LEGACY


@attrs.define(eq=False)
class ModuleRec:
    handle: int
    kind: str
    ptx: object | None  # PtxImage (.text, .arch, .source) or None
    path: str | None = None


@attrs.define(eq=False)
class FuncRec:
    name: str
    module: ModuleRec
    failed: str | None = None  # permanent failure: never probed again
    launches: int = 0


@attrs.frozen
class GlobalVar:
    """A module-scope variable (__constant__/__device__) mirrored between the
    program's module and ours: each loaded module has its own copy."""

    name: str
    original: int
    ours: int
    size: int
    writable: bool  # copied back after the launch


@attrs.define(eq=False)
class ProbedKernel:
    name: str
    func: int
    count_func: int | None
    info: dict
    kernel_dir: str
    baseline: int | None = None
    attrs_seen: dict = attrs.Factory(dict)
    globals: list = attrs.Factory(list)
    baseline_globals: list = attrs.Factory(list)


@attrs.define(eq=False)
class Buffer:
    map: dict
    units: int
    cap: int
    size: int
    ptr: int
    stream_ordered: bool
    host: tuple | None = None  # (addr, view) of the pinned copy


@attrs.define(eq=False)
class Pending:
    index: int
    kernel: str
    req: LaunchRequest
    bufs: list[Buffer]
    events: dict  # name -> event handle
    frame: str | None
    ctx: int


class HostPool:
    """Pinned host buffers, reused by power-of-two size class."""

    def __init__(self, drv):
        self.drv = drv
        self._free: dict[int, list] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _cls(size: int) -> int:
        return max(256, 1 << (max(size, 1) - 1).bit_length())

    def take(self, size: int):
        c = self._cls(size)
        with self._lock:
            lst = self._free.get(c)
            if lst:
                return lst.pop()
        return self.drv.host_alloc(c)

    def give(self, buf) -> None:
        with self._lock:
            self._free.setdefault(self._cls(len(buf[1])), []).append(buf)


class Runtime:
    def __init__(self, drv, shim, options: RuntimeOptions, probes, *, trace: TraceDir, cache: CodeCache,
                 engine=None, ptx_finder=None):
        self.drv = drv
        self.shim = shim  # .probe_add(handle), .probe_remove(handle)
        self.opt = options
        self.probes = probes
        self.trace = trace
        self.cache = cache
        self.engine = engine or _default_engine()
        self.find_ptx = ptx_finder or _default_ptx_finder()
        self._lock = threading.RLock()
        self.modules: dict[int, ModuleRec] = {}
        self.functions: dict[int, FuncRec] = {}
        self._probed: dict[tuple[int, int], ProbedKernel] = {}
        self._linked: dict[int, str] = {}  # cubin address from cuLinkComplete -> PTX text
        self._link_ptx: dict[int, list[str]] = {}  # link state -> PTX added so far
        self._arch: tuple[int, int] | None = None
        self._flush: tuple[int, int] | None = None  # (ptr, size) of the L2 flush buffer
        self.pool = HostPool(drv)
        self._events: list[int] = []
        self._queue: queue.Queue = queue.Queue()
        self._slots = threading.BoundedSemaphore(MAX_PENDING)
        self._harvester: threading.Thread | None = None
        self.fallbacks: Counter = Counter()
        self.probed_launches = 0
        self.bench: dict[str, list[tuple[float, float]]] = {}
        self.memusage: dict[str, dict] = {}
        self._callback = None
        self._closed = False

    # ------------------------------------------------------------ modules
    def on_module(self, kind: str, handle: int, image: bytes | None, path: str | None = None, image_addr: int = 0) -> None:
        try:
            ptx = self._module_ptx(image, path, image_addr)
        except Exception as e:  # noqa: BLE001 - never break the program's load
            ptx = None
            reason = f"PTX extraction failed: {e}"
        else:
            reason = "no PTX in the image (SASS only)"
        rec = ModuleRec(handle, kind, ptx, path)
        with self._lock:
            self.modules[handle] = rec
        if ptx is None:
            self.trace.event("no_ptx", module=hex(handle), kind=kind, path=path, reason=reason)
        else:
            self.trace.event("module", module=hex(handle), kind=kind, source=getattr(ptx, "source", None))

    def _module_ptx(self, image, path, image_addr):
        linked = self._linked.get(image_addr) if image_addr else None
        if linked is not None:
            return _SimplePtx(linked, "cuLinkAddData")
        if image is None and path:
            image = Path(path).read_bytes()
        if image is None:
            return None
        return self.find_ptx(image, self.arch(), path=path)

    def on_link_add(self, state: int, ptx_text: str) -> None:
        with self._lock:
            self._link_ptx.setdefault(state, []).append(ptx_text)

    def on_link_complete(self, state: int, cubin_addr: int) -> None:
        with self._lock:
            parts = self._link_ptx.pop(state, None)
            if parts and len(parts) == 1 and cubin_addr:
                self._linked[cubin_addr] = parts[0]

    # ------------------------------------------------------------ functions
    def on_function(self, kind: str, owner: int, name: str | None, out: int) -> bool:
        """A handle was looked up. Returns True when launches of `out` should come to us."""
        with self._lock:
            if kind == "library_module":  # cuLibraryGetModule: the module shares the library's PTX
                lib = self.modules.get(owner)
                if lib is not None:
                    self.modules[out] = lib
                return False
            if kind == "kernel_function":  # cuKernelGetFunction: same kernel as its CUkernel
                rec = self.functions.get(owner)
            else:
                mod = self.modules.get(owner)
                if mod is None or mod.ptx is None or name is None:
                    return False
                rec = self._func_rec(mod, name)
            if rec is None or rec.failed or not self.opt.wants(rec.name):
                return False
            self.functions[out] = rec
            return True

    def _func_rec(self, mod: ModuleRec, name: str) -> FuncRec:
        for r in self.functions.values():
            if r.module is mod and r.name == name:
                return r
        return FuncRec(name, mod)

    # ------------------------------------------------------------ launches
    def on_launch(self, req: LaunchRequest) -> int:
        with self._lock:
            rec = self.functions.get(req.func)
        if rec is None or rec.failed or self._closed:
            return NOT_HANDLED
        frame = attribution.user_frame()
        try:
            pk = self._probed_kernel(rec, req)
            if self.opt.memusage:
                self._memusage(pk, req)
                return NOT_HANDLED
            return self._launch_probed(rec, pk, req, frame)
        except Fallback as e:
            self._fallback(rec, req, e.stage, e.reason, e.permanent)
        except DriverError as e:
            self._fallback(rec, req, "driver", str(e))
        except NeutrinoError as e:
            self._fallback(rec, req, "instrument", str(e).splitlines()[0] if str(e) else type(e).__name__, True)
        except Exception as e:  # noqa: BLE001 - our bug must not break the program
            self._fallback(rec, req, "internal", f"{type(e).__name__}: {e}")
        return NOT_HANDLED

    def _fallback(self, rec: FuncRec, req: LaunchRequest, stage: str, reason: str, permanent: bool = False) -> None:
        self.fallbacks[(rec.name, stage)] += 1
        self.trace.event("fallback", kernel=rec.name, stage=stage, reason=reason, kernel_launch=req.index,
                         permanent=permanent)
        if permanent:
            rec.failed = reason
            with self._lock:
                handles = [h for h, r in self.functions.items() if r is rec]
            for h in handles:
                self.shim.probe_remove(h)

    # ------------------------------------------------------------ instrumenting
    def arch(self) -> tuple[int, int]:
        if self._arch is None:
            self._arch = (self.drv.device_attr(DEV_ATTR_CC_MAJOR), self.drv.device_attr(DEV_ATTR_CC_MINOR))
        return self._arch

    def _probed_kernel(self, rec: FuncRec, req: LaunchRequest) -> ProbedKernel:
        ctx = self.drv.ctx_get_current()
        key = (ctx, id(rec))
        with self._lock:
            pk = self._probed.get(key)
            if pk is None:
                pk = self._build_probed(rec)
                self._probed[key] = pk
        self._copy_attrs(req.func, pk)
        return pk

    def _build_probed(self, rec: FuncRec) -> ProbedKernel:
        t0 = time.perf_counter()
        ptx = rec.module.ptx.text
        key = cache_key(ptx, self.probes.text, self.arch(), rec.name)
        entry, where = self.cache.get(key)
        if entry is None or entry.info is None:
            inst = self.engine.instrument(ptx, self.probes, kernel=rec.name, source=str(getattr(rec.module.ptx, "source", "<ptx>")))
            if rec.name not in inst.kernels:
                raise Fallback("instrument", f"the engine did not instrument entry {rec.name}", permanent=True)
            entry = CacheEntry(inst.ptx, inst.kernels[rec.name])
        module, fresh_cubin = self._load(entry)
        if fresh_cubin is not None:
            entry.cubin = fresh_cubin
        if where != "memory":
            self.cache.put(key, entry)
        info = entry.info
        func = self.drv.module_get_function(module, rec.name)
        gvars = self._mirror_globals(rec, module)
        count_func = self.drv.module_get_function(module, info["count_kernel"]) if info.get("count_kernel") else None
        kdir = self.trace.write_kernel(rec.name, ptx, entry.ptx, info)
        seconds = time.perf_counter() - t0
        self.trace.event("instrument", kernel=rec.name, kernel_dir=kdir, cache=where, seconds=round(seconds, 6),
                         sites=info.get("sites"), skipped=len(info.get("skipped", ())))
        pk = ProbedKernel(rec.name, func, count_func, info, kdir, globals=gvars)
        if self.opt.benchmark:
            pk.baseline, pk.baseline_globals = self._baseline(rec)
        return pk

    def _mirror_globals(self, rec: FuncRec, module: int) -> list[GlobalVar]:
        out = []
        library = rec.module.kind.startswith("cuLibrary")
        for name, writable in module_globals(rec.module.ptx.text):
            try:
                orig, size = self.drv.module_get_global(rec.module.handle, name, library=library)
                ours, size2 = self.drv.module_get_global(module, name)
            except DriverError:
                continue  # optimised away in one of the two modules
            if size == size2 and size:
                out.append(GlobalVar(name, orig, ours, size, writable))
        return out

    def _copy_globals_in(self, gvars: list[GlobalVar], stream: int) -> None:
        for g in gvars:
            self.drv.memcpy_dtod_async(g.ours, g.original, g.size, stream)

    def _copy_globals_out(self, gvars: list[GlobalVar], stream: int) -> None:
        for g in gvars:
            if g.writable:
                self.drv.memcpy_dtod_async(g.original, g.ours, g.size, stream)

    def _load(self, entry: CacheEntry) -> tuple[int, bytes | None]:
        """Load a cache entry's code: its cubin if it has one, else JIT the PTX (and return the cubin)."""
        if entry.cubin is not None:
            try:
                return self.drv.module_load_data(entry.cubin), None
            except DriverError:
                pass  # a cubin from another driver: JIT again
        try:
            cubin = self.drv.link_ptx(entry.ptx)
            return self.drv.module_load_data(cubin), cubin
        except DriverError as e:
            raise Fallback("jit", str(e), permanent=True) from None

    def _baseline(self, rec: FuncRec) -> tuple[int, list]:
        ptx = rec.module.ptx.text
        key = cache_key(ptx, "", self.arch(), rec.name, variant="pruned")
        entry, where = self.cache.get(key)
        if entry is None:
            entry = CacheEntry(self.engine.prune(ptx, rec.name), None)
        module, cubin = self._load(entry)
        if cubin is not None:
            entry.cubin = cubin
        if where != "memory":
            self.cache.put(key, entry)
        return self.drv.module_get_function(module, rec.name), self._mirror_globals(rec, module)

    def _copy_attrs(self, original: int, pk: ProbedKernel) -> None:
        """Carry the original's settable attributes (dynamic shared memory limit...) over."""
        targets = [f for f in (pk.func, pk.count_func, pk.baseline) if f]
        for attr in COPIED_FUNC_ATTRS:
            try:
                v = self.drv.func_get_attribute(original, attr)
            except DriverError:
                continue
            if pk.attrs_seen.get(attr) == v:
                continue
            for f in targets:
                try:
                    self.drv.func_set_attribute(f, attr, v)
                except DriverError:
                    if attr == COPIED_FUNC_ATTRS[0] and v > 48 * 1024:
                        raise
            pk.attrs_seen[attr] = v

    # ------------------------------------------------------------ launching
    def _map_plan(self, pk: ProbedKernel, req: LaunchRequest, caps: dict[str, int]) -> list[tuple[dict, int, int, int]]:
        plan = []
        for m in pk.info["maps"]:
            cap = caps.get(m["name"], m["cap"])
            if not isinstance(cap, int):
                cap = 1
            units, size = tracefmt.map_buffer_bytes(m, req.grid, req.block, cap)
            plan.append((m, units, cap, size))
        return plan

    def _alloc(self, plan, stream: int, counts_only: bool = False) -> list[Buffer]:
        bufs = []
        try:
            for m, units, cap, size in plan:
                if counts_only:
                    size = tracefmt.align(4 * units, 16)
                try:
                    ptr, ordered = self.drv.mem_alloc(size, stream)
                except DriverError as e:
                    raise Fallback("alloc", f"{size} bytes for map {m['name']}: {e}") from None
                bufs.append(Buffer(m, units, cap, size, ptr, ordered))
                self.drv.memset_async(ptr, size, stream)
        except BaseException:
            self._free_device(bufs, stream)
            raise
        return bufs

    def _free_device(self, bufs: list[Buffer], stream: int) -> None:
        for b in bufs:
            try:
                if b.stream_ordered:
                    self.drv.mem_free(b.ptr, stream)
                else:
                    self.drv.stream_synchronize(stream)
                    self.drv.mem_free_sync(b.ptr)
            except DriverError:
                pass
            b.ptr = 0

    def _params(self, pk: ProbedKernel, req: LaunchRequest, bufs: list[Buffer]):
        """The original parameter pointers followed by ours; the array keeps its values alive."""
        n = int(pk.info["original_params"])
        extra = pk.info["params"]
        if n and not req.params:
            raise Fallback("params", "kernel arguments passed through 'extra' are not supported", permanent=True)
        arr = (C.c_void_p * (n + len(extra) + 1))()
        if n:
            C.memmove(arr, req.params, n * C.sizeof(C.c_void_p))
        by_map = {b.map["name"]: b for b in bufs}
        values = []
        for i, p in enumerate(extra):
            b = by_map[p["map"]]
            v = C.c_uint64(b.ptr) if p["role"] == "buffer" else C.c_uint32(b.cap)
            values.append(v)
            arr[n + i] = C.addressof(v)
        arr._keep = values  # noqa: SLF001 - lifetime of the argument values
        return arr

    def _run_count_kernel(self, pk: ProbedKernel, req: LaunchRequest, stream: int) -> dict[str, int]:
        plan = self._map_plan(pk, req, {})
        bufs = self._alloc(plan, stream, counts_only=True)
        try:
            for b in bufs:
                b.cap = 0
            self._copy_globals_in(pk.globals, stream)
            params = self._params(pk, req, bufs)  # keep the array alive across the launch
            rc = self.drv.launch(req.kind, pk.count_func, req, C.addressof(params))
            if rc != 0:
                raise Fallback("count", f"counting kernel launch failed: {self.drv.error_name(rc)}")
            caps = {}
            for b in bufs:
                if b.map["cap"] != "count":
                    continue
                host = self.pool.take(b.size)
                try:
                    self.drv.memcpy_dtoh_async(host[0], b.ptr, b.size, stream)
                    self.drv.stream_synchronize(stream)  # the only sync: sizing needs the counts now
                    counts = tracefmt.np.frombuffer(host[1][: 4 * b.units], "<u4")
                    caps[b.map["name"]] = max(int(counts.max()) if b.units else 1, 1)
                finally:
                    self.pool.give(host)
            return caps
        finally:
            self._free_device(bufs, stream)

    def _event(self) -> int:
        with self._lock:
            if self._events:
                return self._events.pop()
        return self.drv.event_create()

    def _flush_l2(self, stream: int) -> None:
        if self._flush is None:
            size = max(2 * self.drv.device_attr(DEV_ATTR_L2_SIZE), 1 << 20)
            ptr, _ = self.drv.mem_alloc(size, stream)
            self._flush = (ptr, size)
        self.drv.memset_async(self._flush[0], self._flush[1], stream)

    def _launch_probed(self, rec: FuncRec, pk: ProbedKernel, req: LaunchRequest, frame: str | None) -> int:
        if req.extra and not req.params:
            raise Fallback("params", "kernel arguments passed through 'extra' are not supported", permanent=True)
        stream = req.our_stream
        if self.drv.stream_is_capturing(stream):
            raise Fallback("capture", "the stream is being captured into a CUDA graph; launch not probed")
        caps = self._run_count_kernel(pk, req, stream) if pk.count_func else {}
        self._slots.acquire()
        try:
            bufs = self._alloc(self._map_plan(pk, req, caps), stream)
        except BaseException:
            self._slots.release()
            raise
        events = {}
        try:
            params = self._params(pk, req, bufs)
            if self.opt.benchmark and pk.baseline:
                events.update(self._timed_baseline(pk, req, stream))
            self._copy_globals_in(pk.globals, stream)
            events["start"] = self._event()
            self.drv.event_record(events["start"], stream)
            rc = self.drv.launch(req.kind, pk.func, req, C.addressof(params))
            if rc != 0:
                raise Fallback("launch", f"probed launch failed: {self.drv.error_name(rc)}")
            self._copy_globals_out(pk.globals, stream)
        except BaseException:
            self._free_device(bufs, stream)
            self._recycle_events(events)
            self._slots.release()
            raise
        # From here on the probed kernel has run: never fall back (that would run it twice).
        index = self.trace.new_launch_index()
        try:
            self._submit_copies(bufs, events, stream)
        except Exception as e:  # noqa: BLE001
            self.trace.event("result_error", kernel=rec.name, index=index, reason=f"copy-back: {e}")
            self._slots.release()
            return 0
        with self._lock:
            self.probed_launches += 1
        self._ensure_harvester()
        self._queue.put(Pending(index, rec.name, req, bufs, events, frame, self.drv.ctx_get_current()))
        return 0

    def _timed_baseline(self, pk: ProbedKernel, req: LaunchRequest, stream: int) -> dict:
        ev = {"base_start": self._event(), "base_end": self._event()}
        self._copy_globals_in(pk.baseline_globals, stream)
        self._flush_l2(stream)
        self.drv.event_record(ev["base_start"], stream)
        rc = self.drv.launch(req.kind, pk.baseline, req, req.params)
        self.drv.event_record(ev["base_end"], stream)
        if rc != 0:
            raise Fallback("benchmark", f"baseline launch failed: {self.drv.error_name(rc)}")
        self._flush_l2(stream)
        return ev

    def _submit_copies(self, bufs: list[Buffer], events: dict, stream: int) -> None:
        events["end"] = self._event()
        self.drv.event_record(events["end"], stream)
        for b in bufs:
            b.host = self.pool.take(b.size)
            self.drv.memcpy_dtoh_async(b.host[0], b.ptr, b.size, stream)
            if b.stream_ordered:
                self.drv.mem_free(b.ptr, stream)
                b.ptr = 0
        events["done"] = self._event()
        self.drv.event_record(events["done"], stream)

    def _recycle_events(self, events: dict) -> None:
        with self._lock:
            self._events.extend(events.values())

    # ------------------------------------------------------------ harvesting
    def _ensure_harvester(self) -> None:
        if self._harvester is not None:
            return
        with self._lock:
            if self._harvester is None:
                self._harvester = threading.Thread(target=self._harvest_loop, name="neutrino-harvest", daemon=True)
                self._harvester.start()

    def _harvest_loop(self) -> None:
        ctx = None
        while True:
            p = self._queue.get()
            if p is None:
                self._queue.task_done()
                return
            try:
                if p.ctx != ctx:
                    self.drv.ctx_set_current(p.ctx)
                    ctx = p.ctx
                self._harvest(p)
            except Exception as e:  # noqa: BLE001
                self.trace.event("result_error", kernel=p.kernel, index=p.index, reason=f"{type(e).__name__}: {e}")
            finally:
                self._slots.release()
                self._queue.task_done()

    def drain(self, timeout: float = 120.0) -> bool:
        """Wait until every probed launch so far has been harvested; False if that took too long."""
        if self._harvester is None:
            return True
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def _harvest(self, p: Pending) -> None:
        ev = p.events
        self.drv.event_synchronize(ev["done"])
        duration = self.drv.event_elapsed_ms(ev["start"], ev["end"]) * 1e6
        baseline = None
        if "base_start" in ev:
            baseline = self.drv.event_elapsed_ms(ev["base_start"], ev["base_end"]) * 1e6
            self.bench.setdefault(p.kernel, []).append((baseline, duration))
        for b in p.bufs:
            if b.ptr and not b.stream_ordered:
                self.drv.mem_free_sync(b.ptr)
                b.ptr = 0
        sections = [
            tracefmt.MapSection.of(b.map, b.units, b.cap, b.host[1][: b.size])
            for b in p.bufs
        ]
        rel = self.trace.write_result(p.index, grid=p.req.grid, block=p.req.block, shared_bytes=p.req.shared_bytes,
                                      maps=sections)
        dropped = {s.name: _dropped(s) for s in sections}
        for b in p.bufs:
            self.pool.give(b.host)
        self._recycle_events(ev)
        event = dict(index=p.index, kernel=p.kernel, grid=list(p.req.grid), block=list(p.req.block),
                     shared_bytes=p.req.shared_bytes, stream=hex(p.req.stream), result=rel, frame=p.frame,
                     duration_ns=duration, baseline_ns=baseline, kernel_launch=p.req.index, dropped=dropped)
        self.trace.event("launch", **event)
        self._run_callback(rel, event)

    def _run_callback(self, rel: str, event: dict) -> None:
        if self._callback is None:
            return
        try:
            self._callback(str(self.trace.path / rel), event)
        except Exception as e:  # noqa: BLE001 - analysis failures are never fatal
            self.trace.event("callback_error", result=rel, reason=f"{type(e).__name__}: {e}")

    def set_callback(self, fn) -> None:
        self._callback = fn

    # ------------------------------------------------------------ memusage
    def _memusage(self, pk: ProbedKernel, req: LaunchRequest) -> None:
        plan = self._map_plan(pk, req, {})
        maps = {m["name"]: (size if m["cap"] != "count" else None) for m, _, _, size in plan}
        total = sum(v for v in maps.values() if v)
        self.trace.event("memusage", kernel=pk.name, grid=list(req.grid), block=list(req.block), bytes=total, maps=maps)
        with self._lock:
            cur = self.memusage.setdefault(pk.name, {"launches": 0, "max_bytes": 0, "total_bytes": 0,
                                                      "count_sized": any(v is None for v in maps.values())})
            cur["launches"] += 1
            cur["max_bytes"] = max(cur["max_bytes"], total)
            cur["total_bytes"] += total

    # ------------------------------------------------------------ exit
    def finish(self, stream=sys.stderr) -> None:
        """Drain the harvester, write the tables, print the summary. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._harvester is not None:
            self._queue.put(None)
            self._harvester.join(timeout=120)
        from neutrino.runtime import report

        report.finish(self, stream)


_GLOBAL_DECL = re.compile(
    r"^[ \t]*(?:\.visible[ \t]+|\.weak[ \t]+)?\.(global|const)[ \t]+(?:\.align[ \t]+\d+[ \t]+)?(?:\.v\d[ \t]+)?"
    r"\.[a-z]+\d*[ \t]+([A-Za-z_$%][\w$]*)[^;]*;", re.MULTILINE)


def module_globals(ptx: str) -> list[tuple[str, bool]]:
    """Module-scope .global/.const variables defined (not .extern) in a PTX module, with whether
    the kernel may write them (.global without initializer)."""
    out = []
    depth = 0
    pos = 0
    for m in _GLOBAL_DECL.finditer(ptx):
        depth += ptx.count("{", pos, m.start()) - ptx.count("}", pos, m.start())
        pos = m.start()
        if depth == 0:
            out.append((m.group(2), m.group(1) == "global" and "=" not in m.group(0)))
    return out


def _dropped(sec: tracefmt.MapSection) -> int:
    return sec.dropped


@attrs.frozen
class _SimplePtx:
    text: str
    source: str
    arch: str | None = None


def _default_engine():
    import neutrino.engine as engine

    return engine


def _default_ptx_finder():
    from neutrino.runtime import ptx_source

    index = None

    def find(image: bytes, arch, *, path=None):
        nonlocal index
        if index is None:
            # Triton compiles and loads kernels seconds apart: look again on every miss.
            index = ptx_source.TritonCacheIndex(None, min_rescan_interval=0.0)
        return ptx_source.extract_ptx(image, arch, path=path, triton_index=index)

    return find
