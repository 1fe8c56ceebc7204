"""Building and caching probed code: one `ProbedKernel` per (context, kernel).

One job: turn a kernel's PTX into loaded, launchable probed code (engine →
code cache → driver JIT/load), with its mirrored module globals, the
attributes carried over from the original function, and the buffer layouts
per launch shape. Everything here happens once per kernel, not per launch.
"""

from __future__ import annotations

import ctypes as C
import re
import threading
import time

import attrs

from neutrino import maps as tracefmt
from neutrino.maps import MapLayout, map_layouts  # noqa: F401 - re-exported: enqueue.py, tests
from neutrino.errors import NeutrinoError
from neutrino.runtime.instrument.codecache import CacheEntry, cache_key
from neutrino.runtime.driver import COPIED_FUNC_ATTRS, DriverError, function_of
from neutrino.runtime.start.phases import PhaseClock
from neutrino.runtime.instrument.prebuild import entry_only
from neutrino.runtime.instrument.probeload import loaded
from neutrino.runtime.launch_path.pool import size_class

MAX_LAYOUTS = 256  # launch shapes remembered per kernel; more are recomputed


class Fallback(NeutrinoError):
    """Something on our side failed; the original kernel must run instead."""

    def __init__(self, stage: str, reason: str, permanent: bool = False, repeat: bool = False):
        self.stage, self.reason, self.permanent = stage, reason, permanent
        self.repeat = repeat  # the same failure as an earlier launch's, already logged
        super().__init__(f"{stage}: {reason}")


@attrs.frozen
class GlobalVar:
    """A module-scope variable (__constant__/__device__) mirrored between the
    program's module and ours: each loaded module has its own copy."""

    name: str
    original: int
    ours: int
    size: int
    writable: bool  # copied back after the launch


@attrs.frozen(eq=False)
class LaunchShape:
    """Everything about a launch's buffers that depends only on its shape, computed once."""

    layouts: tuple[MapLayout, ...]
    classes: tuple[int, ...]  # pool size class of each map's buffer
    frame_bytes: int  # what the writer appends for this launch
    map_headers: tuple[int, ...]  # where each map's header lies in the frame (the C path patches them)


def launch_shape(maps: list[dict], grid, block, caps: dict[str, int], ring=None, ring_learned=None) -> LaunchShape:
    """The maps' layouts for one launch shape and the frame they make (one call down: the layout
    maths is the maps module's, neutrino.maps.launch_frame), with each buffer's pool size class.
    `ring`, `ring_learned`: how count-sized maps' device rings are sized."""
    layouts, frame = tracefmt.launch_frame(maps, grid, block, caps, ring, ring_learned)
    return LaunchShape(layouts, tuple(size_class(lay.size) for lay in layouts), frame.size, frame.map_headers)


@attrs.define(eq=False)
class ProbedKernel:
    name: str
    func: int
    count_func: int | None
    info: dict
    kernel_dir: str
    ctx: int = 0
    baseline: int | None = None
    globals: list = attrs.Factory(list)
    baseline_globals: list = attrs.Factory(list)
    attrs_seen: dict = attrs.Factory(dict)
    attrs_checked: bool = False  # the original's attributes were copied at least once
    cost_recorded: bool = False  # its `probe_cost` event was written (probe_cost.py)
    counted: dict = attrs.Factory(dict)  # (grid, block) -> (caps of its last counting launch, launches sized by them)
    ring: tuple[int, int] = (tracefmt.RING_RECORDS_PER_UNIT, 1 << 28)  # count-sized maps' rings: slots per unit, most bytes
    ring_learned: dict = attrs.Factory(dict)  # map name → slots per unit, from a launch's head (launches.py)
    ring_learning: int = 0  # launches whose ring heads were read back so far
    modules: tuple = ()  # the modules of ours it lives in (probed code, baseline): unloaded after the program's
    chain_func: int | None = None  # its graph_chain variant (KernelBuilder.chain_variant), loaded at first use
    _layouts: dict = attrs.Factory(dict)
    _param_plan: tuple | None = None

    @property
    def n_params(self) -> int:
        return int(self.info["original_params"])

    @property
    def count_sized(self) -> bool:
        return any(m["cap"] == "count" for m in self.info["maps"])

    @property
    def has_rings(self) -> bool:
        return any(tracefmt.is_ring(m) for m in self.info["maps"])

    @property
    def sizing_rings(self) -> bool:
        """Whether this launch's ring heads are read back to size the next launches: until a launch
        saved records, at most RING_LEARN_LAUNCHES launches (one synchronisation each)."""
        return self.has_rings and not self.ring_learned and self.ring_learning < tracefmt.RING_LEARN_LAUNCHES

    def learn_rings(self, heads: dict[str, int], layouts) -> None:
        """Size the next launches' rings from this one's heads (when it saved any record)."""
        self.ring_learning += 1
        if not any(heads.values()):
            return
        units = {lay.map["name"]: lay.units for lay in layouts}
        self.ring_learned = {name: tracefmt.learned_slots_per_unit(head, units[name]) for name, head in heads.items()}
        self._layouts.clear()

    @property
    def needs_counting(self) -> bool:
        """Whether a launch is sized by the counting kernel first: count-sized maps of code built
        before the device ring (kernel.json without `layout: "ring"`); rings need none."""
        return bool(self.count_func) and any(m["cap"] == "count" and not tracefmt.is_ring(m) for m in self.info["maps"])

    @property
    def original_params_type(self):
        return C.c_void_p * self.n_params

    def param_plan(self):
        """(ctypes array type of the full parameter list, [(map index, is_buffer)] per parameter of ours)."""
        if self._param_plan is None:
            index = {m["name"]: i for i, m in enumerate(self.info["maps"])}
            plan = [(index[p["map"]], p["role"] == "buffer") for p in self.info["params"]]
            self._param_plan = (C.c_void_p * (self.n_params + len(plan) + 1), plan)
        return self._param_plan

    def layouts(self, grid, block, caps: dict[str, int] | None = None) -> tuple[MapLayout, ...]:
        return self.shape(grid, block, caps).layouts

    def shape(self, grid, block, caps: dict[str, int] | None = None) -> LaunchShape:
        key = (grid, block)
        got = None if caps else self._layouts.get(key)  # sized by a counting run: not worth remembering
        if got is None:
            got = launch_shape(self.info["maps"], grid, block, caps or {}, self.ring, self.ring_learned)
            if not caps:
                if len(self._layouts) >= MAX_LAYOUTS:
                    self._layouts.clear()
                self._layouts[key] = got
        return got


class KernelBuilder:
    """Probed code per (context, kernel), built on first use, from the code cache when it can.

    Keyed by context: a kernel launched on two devices (a CUkernel handle is valid in
    every context) is built, loaded and planned once per context, for that device's
    architecture (`arch(ctx)`, part of the code cache key). Keyed by the kernel's record
    itself, not its id(): a record forgotten with its module (registry.py) must never
    hand its probed code to a later record that got the same id."""

    def __init__(self, drv, engine, cache, trace, probes, arch, *, benchmark: bool = False, phases=None,
                 ring: tuple[int, int] = (tracefmt.RING_RECORDS_PER_UNIT, 1 << 28)):
        self.drv, self.engine, self.cache, self.trace, self.probes = drv, engine, cache, trace, probes
        self.phases = phases if phases is not None else PhaseClock()  # cache_lookup, instrument, jit... (phases.py)
        self.arch = arch  # ctx -> (major, minor) of its device
        self.benchmark = benchmark
        self.ring = ring  # count-sized maps' rings: (slots per unit of a launch, most bytes of one)
        self._lock = threading.RLock()
        self._built: dict[tuple[int, object], ProbedKernel] = {}  # (ctx, FuncRec) -> its probed code
        self._refused: dict[tuple[int, object], str] = {}  # (ctx, kernel) whose PTX this device cannot run
        self._contexts: dict[object, set[int]] = {}  # FuncRec -> contexts it was built or refused in
        self.prebuild = None  # prebuild.Prebuilder: probed code built off the launch path (Runtime sets it)
        self._not_ready_said: set = set()  # kernels whose launch ran the original while their code was built

    def forget_contexts(self) -> None:
        """Contexts are going away: their modules with them (a new context may reuse a handle)."""
        with self._lock:
            self._built.clear()
            self._refused.clear()
            self._contexts.clear()
        if self.prebuild is not None:
            self.prebuild.forget_contexts()

    def forget(self, rec) -> list[ProbedKernel]:
        """The kernel's module was unloaded: drop its probed code in every context and return it
        (the caller unloads our modules once no launch of them is pending)."""
        if self.prebuild is not None:
            self.prebuild.forget(rec)
        self._not_ready_said.discard(rec)
        with self._lock:
            out = []
            for ctx in self._contexts.pop(rec, ()):
                self._refused.pop((ctx, rec), None)
                pk = self._built.pop((ctx, rec), None)
                if pk is not None:
                    out.append(pk)
            return out

    def prepare(self, rec, ctx: int) -> bool:
        """The program looked a probed kernel up: have its probed code built in the background
        (prebuild.py) unless it is built, or its device cannot run its PTX. Whether a job was queued."""
        if self.prebuild is None or not ctx or (ctx, rec) in self._built or rec.module.ptx is None:
            return False
        if ptx_refuses_arch(rec.module.ptx, self.arch(ctx)) is not None:
            return False
        return self.prebuild.schedule(rec, ctx)

    def get(self, rec, ctx: int, original_func: int, *, wait: bool | None = None) -> ProbedKernel:
        """`wait`: whether to wait for code being built in the background (None: as --while-building says)."""
        key = (ctx, rec)
        pk = self._built.get(key)
        if pk is None:
            with self._lock:
                pk = self._built.get(key)
                if pk is None:
                    pk = self._build_in(key, rec, ctx, wait)
        return pk

    def _build_in(self, key, rec, ctx: int, wait: bool | None = None) -> ProbedKernel:
        self._contexts.setdefault(rec, set()).add(ctx)
        if key in self._refused:  # not permanent: the kernel may still be probed on another device
            raise Fallback("arch", self._refused[key], repeat=True)
        try:
            pk = self._build(rec, ctx, wait)
        except Fallback as e:
            if e.stage == "arch":
                self._refused[key] = e.reason
            raise
        self._built[key] = pk
        return pk

    def check_attrs(self, pk: ProbedKernel, original_func: int, shared_bytes: int) -> None:
        """Copy the original's attributes at the first launch, after a refused launch, and when a
        launch asks for more dynamic shared memory than the limit last copied (the program raised it)."""
        if not pk.attrs_checked or shared_bytes > pk.attrs_seen.get(COPIED_FUNC_ATTRS[0], 0):
            self.copy_attrs(original_func, pk)

    def _build(self, rec, ctx: int, wait: bool | None = None) -> ProbedKernel:
        t0 = time.perf_counter()
        phase = self.phases.phase
        ptx = rec.module.ptx.text
        arch = self.arch(ctx)
        refusal = ptx_refuses_arch(rec.module.ptx, arch)
        if refusal is not None:
            raise Fallback("arch", refusal)
        built = self._prebuilt(rec, ctx, wait)
        if built is not None:  # built off the launch path (prebuild.py): already in the code cache
            key, entry, where = built.key, built.entry, "prebuilt"
        else:
            with phase("cache_lookup"):
                key = cache_key(ptx, self.probes.text, arch, rec.name)
                entry, where = self.cache.get(key)
        if entry is None or entry.info is None:
            source = str(getattr(rec.module.ptx, "source", "<ptx>"))
            with phase("instrument"):
                inst = self.engine.instrument(entry_only(ptx, rec.name), loaded(self.probes), kernel=rec.name,
                                              source=source)
            if rec.name not in inst.kernels:
                raise Fallback("instrument", f"the engine did not instrument entry {rec.name}", permanent=True)
            entry = CacheEntry(inst.ptx, inst.kernels[rec.name])
        module, fresh_cubin = self._load(entry, arch)
        with phase("module_load", runs=0):  # the same load as _load's: one run per kernel
            info = entry.info
            func = self.drv.module_get_function(module, rec.name)
            gvars = self._mirror_globals(rec, module)
            count_func = self.drv.module_get_function(module, info["count_kernel"]) if info.get("count_kernel") else None
        with phase("kernel_write"):
            if fresh_cubin is not None:
                entry.cubin = fresh_cubin
            if where not in ("memory", "prebuilt") or (built is not None and fresh_cubin is not None):
                self.cache.put(key, entry)
            kdir = self.trace.write_kernel(rec.name, ptx, entry.ptx, info)
        seconds = time.perf_counter() - t0
        background = {} if built is None else {"built_in_background": round(built.seconds, 6)}
        self.trace.event("instrument", kernel=rec.name, kernel_dir=kdir, cache=built.where if built else where,
                         seconds=round(seconds, 6), sites=info.get("sites"), skipped=len(info.get("skipped", ())),
                         **background)
        pk = ProbedKernel(rec.name, func, count_func, info, kdir, ctx=ctx, globals=gvars, modules=(module,),
                          ring=self.ring)
        if self.benchmark:
            pk.baseline, pk.baseline_globals, baseline_module = self._baseline(rec, arch)
            pk.modules = (module, baseline_module)
        return pk

    def chain_variant(self, pk: ProbedKernel, rec) -> int:
        """The graph_chain variant of `pk` (spec/runtime.md, "The chain"; the same parameters, a head behind the
        tagged pointer), built and cached (variant "graph_chain") and loaded into pk's context at its first use; its
        module joins pk's (unloaded with them). Fallback when the engine refuses it (the node keeps the append path)."""
        with self._lock:
            if pk.chain_func is not None:
                return pk.chain_func
            ptx, arch = rec.module.ptx.text, self.arch(pk.ctx)
            key = cache_key(ptx, self.probes.text, arch, rec.name, variant="graph_chain")
            entry, where = self.cache.get(key)
            if entry is None or entry.info is None:
                source = str(getattr(rec.module.ptx, "source", "<ptx>"))
                try:
                    inst = self.engine.instrument(entry_only(ptx, rec.name), loaded(self.probes), kernel=rec.name,
                                                  source=source, graph_chain=True)
                except NeutrinoError as e:
                    raise Fallback("instrument", f"graph_chain variant: {e}", permanent=True) from None
                entry = CacheEntry(inst.ptx, inst.kernels[rec.name])
            module, fresh_cubin = self._load(entry, arch)
            func = self.drv.module_get_function(module, rec.name)
            if fresh_cubin is not None:
                entry.cubin = fresh_cubin
            if where != "memory" or fresh_cubin is not None:
                self.cache.put(key, entry)
            pk.modules = (*pk.modules, module)
            pk.chain_func = func
            return func

    def _prebuilt(self, rec, ctx: int, wait: bool | None):
        """The kernel's code built in the background (prebuild.py), None where none was queued;
        a launch that may not wait (longer) for it gets Fallback("building"), once logged per kernel.
        `wait`: None for --while-building, True for a launch that must be probed (a graph capture)."""
        if self.prebuild is None:
            return None
        from neutrino.runtime.instrument.prebuild import NotReady

        try:
            return self.prebuild.take(rec, ctx, wait=wait)
        except NotReady as e:
            first = rec not in self._not_ready_said
            self._not_ready_said.add(rec)
            raise Fallback("building", e.reason, repeat=not first) from None

    def _mirror_globals(self, rec, module: int) -> list[GlobalVar]:
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

    def _load(self, entry: CacheEntry, arch: tuple[int, int]) -> tuple[int, bytes | None]:
        """Load a cache entry's code: its cubin if it has one, else compile the PTX as a whole program
        (ptxas; returns the cubin), else hand the PTX to the driver's JIT (no cubin to keep)."""
        if entry.cubin is not None:
            try:
                with self.phases.phase("module_load"):
                    return self.drv.module_load_data(entry.cubin), None
            except DriverError:
                pass  # a cubin this driver does not take: compile again
        try:
            with self.phases.phase("jit"):
                cubin = self.drv.compile_ptx(entry.ptx, arch)
            with self.phases.phase("module_load"):
                return self.drv.module_load_data(cubin), cubin
        except DriverError as e:
            # Its text only: the exception's traceback holds this frame, and this frame holding the exception
            # would make a cycle that keeps every caller's frame (the program's tensors in their locals) alive
            # until a cycle collection (PyTorch's CUDA-graph trees then fail their memory-pool check).
            compile_error = str(e)  # no ptxas, it refused the PTX (a newer PTX ISA), or the driver the cubin
        # The driver's JIT also resolves what a standalone ptxas cannot (vprintf and other builtins).
        try:
            with self.phases.phase("jit"):
                return self.drv.module_load_data(entry.ptx.encode() + b"\0"), None
        except DriverError as e:
            raise Fallback("jit", f"{compile_error}; loading the PTX: {e}", permanent=True) from None

    def _baseline(self, rec, arch: tuple[int, int]) -> tuple[int, list, int]:
        ptx = rec.module.ptx.text
        key = cache_key(ptx, "", arch, rec.name, variant="pruned")
        entry, where = self.cache.get(key)
        if entry is None:
            entry = CacheEntry(self.engine.prune(ptx, rec.name), None)
        module, cubin = self._load(entry, arch)
        if cubin is not None:
            entry.cubin = cubin
        if where != "memory":
            self.cache.put(key, entry)
        return self.drv.module_get_function(module, rec.name), self._mirror_globals(rec, module), module

    def copy_attrs(self, original: int, pk: ProbedKernel) -> None:
        """Carry the original's settable attributes (dynamic shared memory limit...) over.

        Done at the first launch and again after a probed launch is refused
        (the program may have raised a limit since): not per launch, since each
        query is a driver call on the launch path."""
        targets = [f for f in (pk.func, pk.count_func, pk.baseline) if f]
        try:
            original = function_of(self.drv, original)
        except DriverError:
            pass  # neither a function nor a kernel it knows: each query below fails alike
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
        pk.attrs_checked = True


def ptx_refuses_arch(ptx, arch: tuple[int, int]) -> str | None:
    """Why a module's PTX cannot be JIT-compiled for a device of compute capability `arch`, or None.

    The PTX was picked when the module was loaded, for the device current then; a CUlibrary
    is context-independent and may be launched on a device of another architecture."""
    target = getattr(ptx, "arch", None)
    if not isinstance(target, int):
        return None  # unknown: let the JIT decide
    device = arch[0] * 10 + arch[1]
    variant = getattr(ptx, "arch_variant", "") or ""
    fits = (target == device if variant == "a" else
            target // 10 == device // 10 and target <= device if variant == "f" else target <= device)
    if fits:
        return None
    return f"the module's PTX targets sm_{target}{variant}, which this device (sm_{device}) cannot run"


def copy_globals_in(drv, gvars: list[GlobalVar], stream: int) -> None:
    for g in gvars:
        drv.memcpy_dtod_async(g.ours, g.original, g.size, stream)


def copy_globals_out(drv, gvars: list[GlobalVar], stream: int) -> None:
    for g in gvars:
        if g.writable:
            drv.memcpy_dtod_async(g.original, g.ours, g.size, stream)


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
