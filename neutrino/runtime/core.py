"""The in-process runtime: the shim's entry points, wiring the launch path's stages.

The shim (shim/preload.c) calls `Runtime.on_*` through `neutrino.runtime.hooks`
for module loads, function lookups and launches of probed functions. Each
stage of a probed launch has its own folder (one module per job inside it):

    start/           the launcher, options, rank, run directory, phase clock
    modules/         where a module's PTX comes from; which modules and kernels exist
    instrument/      the probe, the code cache, probed code (once per kernel and context)
    launch_path/     device, buffers from the pool, enqueueing, the C fast path; a probed launch's steps
    cudagraphs/      probed kernels inside captured graphs, drained on every replay
    results/         the drain to the trace, analysis callbacks, the exit report
    context_tables/  ranges, launch arguments and tensors, the CUPTI timeline

Failure policy: every exception on our side before the probed kernel is
launched turns into `NOT_HANDLED`, which makes the shim run the original
launch with the original arguments; the event log gets one `fallback` line.
A launch whose buffers or trace bytes do not fit in the budgets also runs
unprobed and is counted as dropped (spec/runtime.md).
"""

from __future__ import annotations

import contextlib
import enum
import sys
import threading
import time
from collections import Counter

import attrs

from neutrino import maps as tracefmt
from neutrino.errors import NeutrinoError
from neutrino.runtime.launch_path.attribution import Attributor
from neutrino.runtime.driver import (
    CU_STREAM_LEGACY,
    CU_STREAM_PER_THREAD,
    LAUNCH_COOP_PTSZ,
    LAUNCH_EX_PTSZ,
    LAUNCH_KERNEL_PTSZ,
    DriverError,
)
from neutrino.runtime.launch_path.devices import Devices
from neutrino.runtime.results.drain import NativeWriter, ResultWriter
from neutrino.runtime.modules.compilers import CompiledIndex, unseen_xla_compile_reason
from neutrino.runtime.context_tables.tables import ContextTables
from neutrino.runtime.launch_path.fastpath import FastPath
from neutrino.runtime.cudagraphs import chain as graph_chain
from neutrino.runtime.cudagraphs import ring as graph_ring
from neutrino.runtime.cudagraphs.sinks import NativeGraphSink, PythonGraphSink
from neutrino.runtime.cudagraphs.capture import G_ADD_KERNEL_NODE, G_BEGIN_CAPTURE, GraphProbes, relaxed_capture
from neutrino.runtime.modules.frameworks import XLA, kernel_names, module_origin
from neutrino.runtime.modules.name_filter import pattern_literals
from neutrino.runtime.launch_path.enqueue import Enqueuer
from neutrino.runtime.start.options import RuntimeOptions
from neutrino.runtime.start.phases import PhaseClock
from neutrino.runtime.launch_path.launches import Dropped, ProbedLaunches
from neutrino.runtime.launch_path.pool import BufferPool, ByteBudget
from neutrino.runtime.launch_path.unprobed import UnprobedLaunches
from neutrino.runtime.instrument import probe_cost
from neutrino.runtime.instrument.probed import (  # noqa: F401
    Fallback, KernelBuilder, ProbedKernel, module_globals)
from neutrino.runtime.modules.registry import Forgotten, FuncRec, ModuleRec, Registry, SimplePtx
from neutrino.runtime.start.tracedir import TraceDir

NOT_HANDLED = -1  # tells the shim to run the original launch itself
CAPTURE_FLUSH_MS = 1000  # at most this long, before a capture opens, for the writer's queued copy-outs
_SimplePtx = SimplePtx  # the name tests and older callers use

__all__ = ["NOT_HANDLED", "LaunchRequest", "Runtime", "Fallback", "FuncRec", "ModuleRec"]


class LaunchWay(enum.Enum):
    """What a launch handed to Python becomes, decided before any work (Runtime.on_launch)."""
    CAPTURE = "capture"  # into a stream being captured: the probed kernel goes into the graph
    MEMUSAGE = "memusage"  # --memusage: what its maps would take is recorded; the original runs
    PROBE = "probe"  # probed now: buffers, enqueue, results handed to the writer


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


class Runtime:
    def __init__(self, drv, shim, options: RuntimeOptions, probes, *, trace: TraceDir, cache,
                 engine=None, ptx_finder=None, native_writer: str | None = None, compiled: CompiledIndex | None = None,
                 phases: PhaseClock | None = None):
        """`native_writer`: path of the loaded shim, whose C thread then writes results (drain.py).
        `phases`: the process's start-up and exit timings (phases.py; bootstrap.py hands in its own)."""
        self.phases = phases if phases is not None else PhaseClock()
        self.drv = drv
        self.shim = shim  # .probe_add(handle), .probe_remove(handle)
        self.opt = options
        self.probes = probes
        self.trace = trace
        self.devices = Devices(drv, trace)
        # cubins the program compiled itself (XLA): content -> PTX; bootstrap.py hands in the one it fills from start
        self.compiled = compiled if compiled is not None else CompiledIndex()
        self.registry = Registry(ptx_finder or _default_ptx_finder(), self.devices.current_arch, options.wants,
                                 self.compiled, named=options.names,
                                 selected_literals=pattern_literals(getattr(options, "kernels", ())))
        self.kernels = KernelBuilder(drv, engine or _default_engine(), cache, trace, probes, self.devices.arch,
                                     benchmark=options.benchmark, phases=self.phases,
                                     ring=(options.ring_records, options.buffer_budget // tracefmt.RING_BUDGET_SHARE))
        self.kernels.prebuild = _prebuilder(drv, self.kernels, options)
        self.pool = BufferPool(drv, options.buffer_budget, host=not native_writer)
        self.trace_budget = ByteBudget(options.trace_budget)
        self.enqueuer = Enqueuer(drv, copy_back=not native_writer)
        self.fast: FastPath | None = None
        if native_writer:
            self.writer = NativeWriter(native_writer, trace, self.pool, self.enqueuer)
            self.fast = FastPath(native_writer, options.buffer_budget, options.trace_budget,
                                 options.time_every, options.when_full == "wait")
            if self.fast.enabled:
                self.trace_budget = SharedTraceBudget(self.fast, options.trace_budget)
        else:
            self.writer = ResultWriter(drv, trace, self.pool, self.enqueuer)
        self.attribution = Attributor()
        self.context = _context_tables(native_writer, trace, self.phases)
        self.graphs = self._graph_probes(native_writer)
        self.probing = ProbedLaunches(trace, options, self.registry, self.pool, self.writer, self.enqueuer,
                                      self.trace_budget, self.attribution, fast=self.fast, context=self.context)
        self.unprobed = UnprobedLaunches(trace, self.registry, shim)  # fallbacks, drops, --memusage
        self._lock = threading.Lock()
        self.no_ptx: Counter = Counter()  # frameworks.Origin -> modules loaded without PTX
        self.no_ptx_examples: dict[str, str] = {}
        self._exit_launches = 0  # launches the C path and the graph rings probed, counted at exit
        self.graph_summary: list[dict] = []
        self._callback = None
        self._closed = False
        self.timeline_summary: dict | None = None
        self._retired: list[tuple[int, ProbedKernel]] = []  # (writer mark, probed code of an unloaded module)
        self._fast_forgotten: list[tuple[str, object]] = []  # (kernel, C-path counters of a forgotten handle)

    def _graph_probes(self, native_writer: str | None) -> GraphProbes:
        """Kernels captured into CUDA graphs (cudagraphs/capture.py): their nodes' buffers are held against a
        budget of --buffer-budget bytes of their own (they live as long as their graphs)."""
        if native_writer:
            sink = NativeGraphSink(native_writer, self.writer, self.opt.launches, self.opt.buffer_budget)
        else:
            sink = PythonGraphSink(self.drv, self.trace, self.trace_budget, self.opt.launches)
        probes = GraphProbes(self.drv, self.trace, sink, ByteBudget(self.opt.buffer_budget), self.enqueuer,
                             self.attribution, arch_of=self.devices.arch,
                             wait_ns=graph_ring.WAIT_NS if self.opt.when_full == "wait" else 0)
        if graph_chain.enabled() and self.opt.when_full != "wait":  # (chain_capture.py: why)
            probes.chain_variant = self.kernels.chain_variant
        return probes

    # ------------------------------------------------------------ what exists
    @property
    def modules(self) -> dict[int, ModuleRec]:
        return self.registry.modules

    @property
    def functions(self) -> dict[int, FuncRec]:
        return self.registry.functions

    def on_module(self, kind: str, handle: int, image: bytes | None, path: str | None = None, image_addr: int = 0,
                  read_seconds: float = 0.0, examined: bool = True) -> None:
        """`read_seconds`: what copying the image out of the program took (hooks.read_image), or deciding
        from its headers that -k selects none of its kernels (`examined` False, `image` None: hooks.py)."""
        with self.phases.phase("module_ptx"):
            self._add_module(kind, handle, image, path, image_addr, examined)
        self.phases.add("module_ptx", read_seconds, runs=0)

    def _add_module(self, kind: str, handle: int, image: bytes | None, path: str | None, image_addr: int,
                    examined: bool = True) -> None:
        started = time.perf_counter()  # the events' `seconds`: our host work on the load (cross-rank own work)
        self._unload_retired()  # before forgetting more: what is retired now waits for the next call
        rec, reason, compiled, replaced = self.registry.add_module(kind, handle, image, path, image_addr, examined)
        if replaced is not None:  # the handle's old module was unloaded where we did not see it
            self._forget(replaced, "handle_reused")
        if not rec.examined:  # -k can select none of its kernels (name_filter.py): no PTX, no origin looked for
            self.trace.event("module", module=hex(handle), kind=kind, source=None, examined=False, reason=reason,
                             seconds=round(time.perf_counter() - started, 6))
        elif rec.ptx is None:
            origin = module_origin(image, path, xla_compiles_seen=self.compiled.sees_xla_compiles())
            if compiled is None and origin is XLA and not self.compiled.links_seen:
                compiled = unseen_xla_compile_reason()
            reason = compiled or reason
            with self._lock:
                self.no_ptx[origin] += 1
                if compiled:
                    self.no_ptx_examples.setdefault(origin.name, compiled)
            self.trace.event("no_ptx", module=hex(handle), kind=kind, path=path, reason=reason, origin=origin.name,
                             hint=origin.hint, kernels=kernel_names(image),
                             seconds=round(time.perf_counter() - started, 6))
        else:
            self.trace.event("module", module=hex(handle), kind=kind, source=getattr(rec.ptx, "source", None),
                             seconds=round(time.perf_counter() - started, 6))
        if self.context is not None:
            self.context.open_dir()  # the trace exists now: ranges and arguments are written there

    def on_link_add(self, state: int, ptx_text: str) -> None:
        self.registry.link_add(state, ptx_text)

    def on_link_complete(self, state: int, cubin_addr: int, cubin: bytes | None = None) -> None:
        self.registry.link_complete(state, cubin_addr, cubin)

    def on_function(self, kind: str, owner: int, name: str | None, out: int) -> bool:
        seen = len(self.registry.collectives)
        probed, forgotten = self.registry.add_function(kind, owner, name, out)
        if forgotten is not None:  # `out` stood for another kernel: nothing of it may stay keyed by `out`
            self._forget(forgotten, "handle_reused")
        if probed and self.kernels.prebuild is not None:
            self._prebuild(out)
        if not seen and self.registry.collectives:  # once per process; the exit event counts them all
            self.trace.event("collective", kernel=name, reason="collective kernels run untouched unless -k names them")
        return probed

    def _prebuild(self, handle: int) -> None:
        """Queue the build of a kernel just looked up (prebuild.py); never fails the lookup."""
        rec = self.registry.functions.get(handle)
        try:
            if rec is not None and not self._closed:
                self.kernels.prepare(rec, self.drv.ctx_get_current())
        except Exception as e:  # noqa: BLE001 - the launch builds it itself then
            self.trace.event("prebuild", kernel=rec.name, reason=f"{type(e).__name__}: {e}")

    # ------------------------------------------------------------ unloads
    def on_unload(self, kind: str, handle: int) -> None:
        """cuModuleUnload / cuLibraryUnload of `handle`, before the driver's: the driver gives the
        module's handles to the modules and kernels loaded next (XLA's autotuner loads, runs and
        unloads one candidate after another), so nothing of ours may stay keyed by them."""
        self._unload_retired()  # before forgetting more: what is retired now waits for the next call
        gone = self.registry.unload_module(handle)
        if gone is not None:
            self._forget(gone, kind)

    def _forget(self, gone: Forgotten, call: str) -> None:
        """Drop what the shim, the C launch path and the argument tables key by the forgotten
        handles; retire the probed code built for the module's kernels. One `unload` event when
        the module had probed kernels (spec/runtime.md, "Module unloads")."""
        for handle, rec in gone.handles:
            self.shim.forget(handle)
            if self.fast is not None:
                counts = self.fast.forget(handle)
                if counts.launches or counts.dropped_buffer or counts.dropped_trace:
                    with self._lock:
                        self._fast_forgotten.append((rec.name, counts))
            if self.context is not None:
                self.context.forget(handle)
        built = [pk for rec in gone.kernels for pk in self.kernels.forget(rec)]
        retire, kept = [], []
        for pk in built:
            (kept if self.graphs.uses(pk.func) else retire).append(pk)  # a captured graph may still launch it
        mark = self.writer.mark()  # every launch of the retired code was submitted before this
        with self._lock:
            self._retired.extend((mark, pk) for pk in retire)
        if (gone.handles or built) and not self._closed:  # after exit, forgetting still matters; logging not
            names = sorted({rec.name for _, rec in gone.handles} | {pk.name for pk in built})
            self.trace.event("unload", module=hex(gone.module.handle), call=call, kernels=names,
                             handles=len(gone.handles), probed_modules=len(retire), kept=len(kept),
                             **({"reason": "a captured CUDA graph still launches its probed code"} if kept else {}))

    def _unload_retired(self) -> None:
        """Unload our modules of forgotten kernels once no launch of them can be pending: every
        launch submitted before they were retired is written (its kernel has finished). Never waits.
        A module made in another context waits for a call made with some context current."""
        if not self._retired:
            return
        try:
            current = self.drv.ctx_get_current()
        except DriverError:
            return  # the next call tries again
        with self._lock:
            ready = [pk for mark, pk in self._retired if self.writer.passed(mark) and (current or not pk.ctx)]
            done = {id(pk) for pk in ready}
            self._retired = [(mark, pk) for mark, pk in self._retired if id(pk) not in done]
        for pk in ready:
            for module in pk.modules:
                try:
                    self._unload_ours(module, pk.ctx, current)
                except DriverError as e:
                    self.trace.event("unload_error", kernel=pk.name, module=hex(module), reason=str(e))

    def _unload_ours(self, module: int, ctx: int, current: int) -> None:
        """cuModuleUnload of one of our modules, in the context it was loaded in; the program's
        thread gets its current context back."""
        switch = bool(ctx) and ctx != current
        if switch:
            self.drv.ctx_set_current(ctx)
        try:
            self.drv.module_unload(module)
        finally:
            if switch:
                self.drv.ctx_set_current(current)

    def arch(self) -> tuple[int, int] | None:
        """The current context's device architecture (None without a current context)."""
        return self.devices.current_arch()

    # ------------------------------------------------------------ launches
    def on_launch(self, req: LaunchRequest) -> int:
        """A launch of a probed function, from the shim. It flows one way: what it becomes
        (`LaunchWay`) is decided first, then its probed code and its shape are found (or built),
        then the way's stage takes it. The answer is 0 (we launched it) or NOT_HANDLED (the shim
        runs the original). A failure of ours on the way is a fallback, a launch the budgets have
        no room for a drop; both run the original."""
        rec = self.registry.functions.get(req.func)
        if rec is None or rec.failed or self._closed:
            return NOT_HANDLED
        try:
            ctx = self.drv.ctx_get_current()
            way = self._way(req)
            capturing = way is LaunchWay.CAPTURE
            # building the probed code loads a module: a capture forbids it unless relaxed
            with relaxed_capture(self.drv) if capturing else contextlib.nullcontext():
                pk = self.kernels.get(rec, ctx, req.func, wait=True if capturing else None)  # a graph keeps what is captured
                self.kernels.check_attrs(pk, req.func, req.shared_bytes)
                shape = pk.shape(req.grid, req.block)  # count-sized maps: what their counting launch needs
                if not pk.cost_recorded:  # once per kernel and context: what probing added (probe_cost.py)
                    probe_cost.record(self.drv, self.trace, pk, req)
            if way is LaunchWay.PROBE:  # buffers, enqueue, results handed on (launch_path/launches.py)
                return self.probing.launch_probed(rec, pk, req, ctx, shape)
            if way is LaunchWay.CAPTURE:  # the probed kernel goes into the graph (cudagraphs/capture.py)
                return self.graphs.capture(rec, pk, req, ctx, req.our_stream, shape)
            self.unprobed.record_memusage(pk, req, shape)  # LaunchWay.MEMUSAGE: the original runs
        except Dropped as e:
            self.unprobed.drop(rec, req, e.reason, e.detail)
        except Fallback as e:
            self.unprobed.fallback(rec, req, e.stage, e.reason, e.permanent, quiet=e.repeat)
        except DriverError as e:
            self.unprobed.fallback(rec, req, "driver", str(e))
        except NeutrinoError as e:
            self.unprobed.fallback(rec, req, "instrument", str(e).splitlines()[0] if str(e) else type(e).__name__,
                                   True)
        except Exception as e:  # noqa: BLE001 - our bug must not break the program
            self.unprobed.fallback(rec, req, "internal", f"{type(e).__name__}: {e}")
        return NOT_HANDLED

    def _way(self, req: LaunchRequest) -> LaunchWay:
        """What the launch becomes: --memusage records sizes; a launch into a stream being captured
        goes into the graph (unless --no-graphs: then it is not probed); any other is probed now."""
        if self.opt.memusage:
            return LaunchWay.MEMUSAGE
        if not self.drv.stream_is_capturing(req.our_stream):
            return LaunchWay.PROBE
        if not self.opt.graphs:
            raise Fallback("capture", "the stream is being captured into a CUDA graph and --no-graphs "
                           "was given; launch not probed")
        return LaunchWay.CAPTURE

    def on_graph(self, kind: int, a: int, b: int, c: int = 0, version: int = 2) -> int:
        """A graph API call the shim saw (shim/graphs.c): lifetimes of captured graphs, kernel nodes
        added or changed with the graph API. Returns replacement kernel-node parameters or 0."""
        if kind == G_BEGIN_CAPTURE:
            if not self.opt.graphs:
                return 0  # nothing of ours goes into the program's graphs
            # the writer's copy-out of earlier launches, done before the capture opens (not inside it)
            finish = getattr(self.writer, "finish_queued", None)
            if finish is not None:
                finish(CAPTURE_FLUSH_MS)
        if kind == G_ADD_KERNEL_NODE:
            rec = self.registry.functions.get(b)
            if rec is not None and not rec.failed and not self._closed:
                self.graphs.unprobed_node(rec.name, "added with cuGraphAddKernelNode: kernel nodes built with the "
                                          "graph API run unprobed (capture them from a stream to probe them)",
                                          graph=hex(a), node=hex(c))
            return 0
        return self.graphs.on_graph_event(kind, a, b, c, version)

    def on_teardown(self) -> None:
        """A context is about to be destroyed: write what is in flight, forget plans made in it."""
        self.drain()
        self.graphs.forget_all()
        if self.fast is not None:
            self.fast.reset()
        self.forget_contexts()

    def forget_contexts(self) -> None:
        """Drop what is keyed by context handle: a context created later may reuse a destroyed
        one's handle, on another device (the shim does not say which context goes away)."""
        self.kernels.forget_contexts()
        with self._lock:
            self._retired.clear()  # our modules went with their contexts: their handles may be reused
        self.devices.forget()
        self.pool.close()
        self.enqueuer.forget_contexts()
        self.writer.forget_contexts()

    @property
    def fallbacks(self) -> Counter:
        """(kernel, stage) -> launches that fell back to the original (launch_path/unprobed.py)."""
        return self.unprobed.fallbacks

    @property
    def drops(self) -> Counter:
        """(kernel, reason) -> launches run unprobed for lack of budget, the C path's and the graphs' too."""
        return self.unprobed.drops

    @property
    def memusage(self) -> dict[str, dict]:
        """--memusage: kernel -> its launches' map bytes (launch_path/unprobed.py)."""
        return self.unprobed.memusage

    def _collect_fast_path_counts(self) -> None:
        """Launches the C path probed or dropped count in the summary like the others."""
        if self.fast is None:
            return
        counts = []
        for func, _, st in self.fast.stats():
            rec = self.registry.functions.get(func)
            counts.append((rec.name if rec is not None else hex(func), st))
        for name, st in counts + self._fast_forgotten:  # handles forgotten with their modules too
            self._exit_launches += st.launches
            for reason, n in (("buffer-budget", st.dropped_buffer), ("trace-budget", st.dropped_trace)):
                if n:
                    self.drops[(name, reason)] += n
                    self.trace.event("dropped", kernel=name, reason=reason, launches=n, path="c")

    def _collect_graph_counts(self) -> None:
        """Replays of probed graph nodes count as probed launches; their drops as drops."""
        self.graph_summary = self.graphs.summary()
        for node in self.graph_summary:
            self._exit_launches += node["written"]
            for reason, key in (("trace-budget", "dropped_trace"), ("writer-behind", "dropped_behind")):
                if node[key]:
                    self.drops[(node["kernel"], reason)] += node[key]
                    self.trace.event("dropped", kernel=node["kernel"], reason=reason, launches=node[key],
                                     graph=node["graph"], graph_node=node["graph_node"])

    @property
    def probed_launches(self) -> int:
        """Launches probed so far by the Python path, and (after exit) by the C path and the graph rings."""
        return self.probing.launches + self._exit_launches

    @property
    def bench(self) -> dict[str, list[tuple[list[float], list[float]]]]:
        """--benchmark: kernel -> (baseline ns, probed ns) per repetition, per timed launch."""
        return self.probing.bench

    @property
    def timeline(self):
        """neutrino.runtime.context_tables.cupti.Timeline, set by bootstrap when CUPTI runs (or None)."""
        return self.probing.timeline

    @timeline.setter
    def timeline(self, timeline) -> None:
        self.probing.timeline = timeline

    @property
    def result_bytes(self) -> int:
        """Bytes of result frames written so far."""
        native = getattr(self.writer, "result_bytes", None)
        return native if native is not None else self.trace.result_bytes

    def drain(self, timeout: float = 120.0) -> bool:
        """Wait until every probed launch so far is written; False if that took too long."""
        return self.writer.wait_idle(timeout)

    # ------------------------------------------------------------ analysis
    def set_callback(self, fn) -> None:
        """FUNC(result_path, launch_event), run at exit over every probed launch (never on the launch path)."""
        self._callback = fn

    # ------------------------------------------------------------ exit
    def finish(self, stream=sys.stderr) -> None:
        """Drain the writer, run the analysis callback, write the tables, print the summary. Idempotent.
        Each step is an exit phase (phases.py); report.finish writes the `phase` events."""
        if self._closed:
            return
        self._closed = True
        phase = self.phases.phase
        with phase("exit_drain"):
            if self.kernels.prebuild is not None:
                self.kernels.prebuild.close()  # queued builds are dropped; running ones end unused
            self.graphs.close()  # the graph rings' last frames go to the writer before it stops
            self.writer.stop(timeout=120)
        with phase("exit_timeline"):
            self._stop_timeline()
        with phase("exit_tables"):
            self.pool.close()
            if self.context is not None:
                self.context.close()
            self._collect_fast_path_counts()
            self._collect_graph_counts()
            self.compiled.close(self.trace.event)
        from neutrino.runtime.results import callback, report

        if self._callback is not None and self.trace.materialized and self.probed_launches:  # nothing to analyse
            with phase("exit_hooks"):
                callback.run_over_trace(self.trace, self._callback, self.opt.callback_seconds, stream)
        self.phases.begin("exit_summary")
        report.finish(self, stream)

    def _stop_timeline(self) -> None:
        """Flush CUPTI and close timeline.bin (after the writer: probed launches are numbered by then)."""
        if self.timeline is None:
            return
        from neutrino.runtime.context_tables.clock import calibrate

        calibrate(self.drv, self.trace, "stop", self.timeline)
        try:
            self.timeline_summary = self.timeline.stop(self.trace)
        except Exception as e:  # noqa: BLE001 - the results are written; the timeline is context
            self.trace.event("timeline_counts", error=f"{type(e).__name__}: {e}")


class SharedTraceBudget:
    """The trace budget kept by the shim, shared by the Python and the C launch paths."""

    def __init__(self, fast: FastPath, limit: int):
        self.fast, self.limit = fast, limit

    def reserve(self, n: int) -> bool:
        return bool(self.fast.reserve_trace(n))

    def give_back(self, n: int) -> None:
        self.fast.give_back_trace(n)


def _context_tables(native_writer: str | None, trace, phases=None) -> ContextTables | None:
    """Ranges and argument tables, written by the shim (context_tables/tables.py); None without one."""
    if not native_writer:
        return None
    try:
        return ContextTables(native_writer, trace, phases)
    except (OSError, AttributeError) as e:  # a shim built before the tables existed
        trace.event("context_tables", reason=f"not recorded: {e}")
        return None


def _prebuilder(drv, kernels: KernelBuilder, options: RuntimeOptions):
    """Probed code built off the launch path (--build-threads, --while-building), or None (0 threads)."""
    if options.build_threads <= 0:
        return None
    from neutrino.runtime.instrument.prebuild import Prebuilder

    return Prebuilder(drv, kernels.engine, kernels.cache, kernels.probes, kernels.arch, kernels.phases,
                      threads=options.build_threads, while_building=options.while_building)


def _default_engine():
    return _EngineOnFirstUse()


class _EngineOnFirstUse:
    """neutrino.engine, imported when the first kernel is instrumented: the PTX parser and the
    passes it loads cost a process that probes nothing (or finds every kernel in the code cache)
    a few hundred milliseconds (spec/runtime.md, "Start-up and exit phases")."""

    def __getattr__(self, name):
        import neutrino.engine as engine

        return getattr(engine, name)


def _default_ptx_finder():
    from neutrino.runtime.modules import ptx_source

    index = None

    def find(image: bytes, arch, *, path=None):
        nonlocal index
        if index is None:
            # Triton compiles and loads kernels seconds apart: look again on every miss.
            index = ptx_source.TritonCacheIndex(None, min_rescan_interval=0.0)
        return ptx_source.extract_ptx(image, arch, path=path, triton_index=index)

    return find
