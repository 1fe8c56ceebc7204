"""Probed code built off the launch path: instrumentation and JIT in a pool of worker threads.

When the program looks a probed kernel up (cuModuleGetFunction, cuLibraryGetKernel...), its
probed code is built in the background: code cache lookup, instrumentation (the engine) and
compilation to a cubin (the driver's JIT, or ptxas in a test). A program that looks several
kernels up before launching them (Inductor loads a graph's kernels together; cudart registers a
module's kernels at once) has them built in parallel: the JIT and ptxas run outside the GIL.
The launching thread then only loads the cubin (probed.py, `KernelBuilder._build`).

A launch that comes before its kernel's probed code is ready (spec/runtime.md, "Probed code
built in the background"):
  * `wait` (the default): waits for it, up to `wait_seconds`; past that the original kernel
    runs this once, with a `fallback` event of stage `building`;
  * `original`: the original kernel runs at once, with one `fallback` event of stage `building`
    per kernel (counted at exit); later launches are probed once the code is ready.
"""

from __future__ import annotations

import os
import re
import threading
import time
import weakref

import attrs

from neutrino.errors import InstrumentError
from neutrino.runtime.instrument.codecache import CacheEntry, cache_key
from neutrino.runtime.driver import DriverError
from neutrino.runtime.start.options import DEFAULT_BUILD_THREADS, WHILE_BUILDING
from neutrino.runtime.instrument.probeload import loaded

DEFAULT_WAIT_SECONDS = 300.0  # longer than any one kernel's instrumentation and JIT we have seen


class NotReady(Exception):
    """The kernel's probed code is still being built (the caller runs the original kernel)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@attrs.frozen
class Built:
    """A job's product: the code cache entry (its cubin when the JIT could run on the worker),
    where it was found ('miss', 'disk' or 'memory') and the worker's seconds on it."""

    key: str
    entry: CacheEntry
    where: str
    seconds: float


class Prebuilder:
    """One job per (context, kernel record), queued when the program looks a probed kernel up.

    `arch(ctx)` names the device a job compiles for; `phases` gets the workers' seconds under the
    `background_*` phases (not added to the time the program waited: phases.py)."""

    def __init__(self, drv, engine, cache, probes, arch, phases, *, threads: int = DEFAULT_BUILD_THREADS,
                 while_building: str = "wait", wait_seconds: float = DEFAULT_WAIT_SECONDS):
        if while_building not in WHILE_BUILDING:
            raise ValueError(f"while_building: {while_building!r} is not one of {WHILE_BUILDING}")
        self.drv, self.engine, self.cache, self.probes, self.arch = drv, engine, cache, probes, arch
        self.phases = phases
        self.threads = min(threads, os.cpu_count() or 1) if threads > 0 else 0
        self.wait = while_building == "wait"
        self.wait_seconds = wait_seconds
        self._lock = threading.Lock()
        self._jobs: dict[tuple[int, object], object] = {}  # (ctx, FuncRec) -> concurrent.futures.Future
        self._pool = None  # ThreadPoolExecutor, made at the first job
        self._pool_pid = 0  # the process that made it
        self._spans = weakref.WeakKeyDictionary()  # ModuleRec -> entry_spans of its PTX, found once
        self._closed = False

    @property
    def enabled(self) -> bool:
        return self.threads > 0 and not self._closed

    def schedule(self, rec, ctx: int) -> bool:
        """Queue the build of `rec`'s probed code for context `ctx` (the program's thread: cheap).
        False where nothing was queued (off, closed, no context, already queued)."""
        if not self.enabled or not ctx or rec.module.ptx is None:
            return False
        with self._lock:
            if self._closed:
                return False
            if self._pool is None or self._pool_pid != os.getpid():  # a forked child has none of the threads
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="neutrino-build")
                self._pool_pid = os.getpid()
                self._jobs.clear()  # a parent's jobs never end here
            if (ctx, rec) in self._jobs:
                return False
            self._jobs[(ctx, rec)] = self._pool.submit(self._job, rec, ctx)
        return True

    def take(self, rec, ctx: int, *, wait: bool | None = None) -> Built | None:
        """The built code of `rec` in `ctx`, None where no job was queued for it, or where its job
        had not started yet and the launch waits: the job is dropped and the launching thread builds
        the kernel itself, as with no build threads, instead of waiting behind the builds of the
        kernels looked up before it (a program that looks many up and launches few).
        Raises the job's own exception (the caller's failure policy applies as if it had built it),
        or NotReady when the code is not ready and the launch is not to wait (longer)."""
        with self._lock:
            job = self._jobs.get((ctx, rec))
        if job is None:
            return None
        if not job.done():
            if not (self.wait if wait is None else wait):
                raise NotReady("its probed code is still being built (--while-building=original): "
                               "the original kernel ran")
            if job.cancel():  # still queued: no worker has it
                with self._lock:
                    self._jobs.pop((ctx, rec), None)
                return None
            from concurrent.futures import TimeoutError as NotYet  # the builtin's alias from Python 3.11 on

            started = time.perf_counter()
            try:
                job.result(timeout=self.wait_seconds)
            except NotYet:
                raise NotReady(f"its probed code was not built after {self.wait_seconds:.0f} s of waiting: "
                               "the original kernel ran") from None
            except Exception:  # noqa: BLE001 - raised again below, from the job itself
                pass
            finally:
                self.phases.add("build_wait", time.perf_counter() - started)
        with self._lock:
            self._jobs.pop((ctx, rec), None)  # taken once: a later build (another context...) starts afresh
        return job.result()

    def forget(self, rec) -> None:
        """The kernel's module was unloaded: drop its queued jobs (a running one finishes unused)."""
        with self._lock:
            for key in [k for k in self._jobs if k[1] is rec]:
                self._jobs.pop(key).cancel()

    def forget_contexts(self) -> None:
        with self._lock:
            for job in self._jobs.values():
                job.cancel()
            self._jobs.clear()

    def close(self) -> None:
        """At exit: drop queued jobs and let the running ones end on their own (never waits)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            self._jobs.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ on a worker thread
    def _job(self, rec, ctx: int) -> Built:
        started = time.perf_counter()
        ptx = rec.module.ptx
        arch = self.arch(ctx)
        with self.phases.phase("background_lookup"):
            key = cache_key(ptx.text, self.probes.text, arch, rec.name)
            entry, where = self.cache.get(key)
        if entry is None or entry.info is None:
            with self.phases.phase("background_instrument"):
                inst = self.engine.instrument(self._entry_text(rec), loaded(self.probes), kernel=rec.name,
                                              source=str(getattr(ptx, "source", "<ptx>")))
            if rec.name not in inst.kernels:  # the launch's permanent `instrument` fallback (core.py)
                raise InstrumentError(f"the engine did not instrument entry {rec.name}")
            entry = CacheEntry(inst.ptx, inst.kernels[rec.name])
        compiled = None
        if entry.cubin is None:
            compiled = self._compile(entry.ptx, arch)
            entry = CacheEntry(entry.ptx, entry.info, compiled) if compiled is not None else entry
        if where == "miss" or compiled is not None:
            self.cache.put(key, entry)  # the launch finds it in memory; a later run on disk
        return Built(key, entry, where, time.perf_counter() - started)

    def _entry_text(self, rec) -> str:
        """The kernel's module with its other entries blanked out; the entries found once per module."""
        with self._lock:
            spans = self._spans.get(rec.module)
        if spans is None:
            spans = entry_spans(rec.module.ptx.text)
            with self._lock:
                self._spans[rec.module] = spans
        return entry_only(rec.module.ptx.text, rec.name, spans)

    def _compile(self, ptx: str, arch: tuple[int, int]) -> bytes | None:
        """The PTX compiled to a cubin for `arch` (a whole program, by ptxas: RealDriver.compile_ptx;
        no context needed), or None where that failed: the launching thread then loads it its own
        way (probed.py, _load)."""
        with self.phases.phase("background_jit"):
            try:
                return self.drv.compile_ptx(ptx, arch)
            except DriverError:
                return None


# ---------------------------------------------------------------- one entry's text
#
# A job instruments one kernel; the engine parses the whole module and prunes the other entries
# afterwards. In a module of N kernels that is N parses of it: cut the other entries out of the
# text first (a linear scan at string speed), so that each job parses about one kernel.

_ENTRY = re.compile(r"^[ \t]*(?:\.(?:visible|weak)[ \t]+)?\.entry[ \t]+([A-Za-z_$%][\w$]*)", re.MULTILINE)
_IDENTIFIER = re.compile(r"[A-Za-z_$%][\w$]*")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def entry_only(ptx: str, kernel: str, spans: "list[tuple[int, int, str]] | None" = None) -> str:
    """The module's text with its other `.entry` definitions blanked out (their lines left empty),
    or the text as it is where that cannot be done safely: no entry named `kernel`, debug sections
    (they name every function's labels), an entry whose body does not close, or a removed entry's
    name used in what is left. `spans`: entry_spans(ptx), when the caller keeps them per module."""
    spans = entry_spans(ptx) if spans is None else spans
    cuts = [span for span in spans if span[2] != kernel]
    if not cuts or len(cuts) == len(spans):
        return ptx
    parts, pos = [], 0
    for start, end, _ in cuts:  # each cut leaves its newlines: line numbers (skipped sites, line maps) stay
        parts += (ptx[pos:start], "\n" * ptx.count("\n", start, end))
        pos = end
    parts.append(ptx[pos:])
    out = "".join(parts)
    used = set(_IDENTIFIER.findall(_COMMENT.sub("", out)))  # nvcc names every entry in a `// .globl` comment
    if any(name in used for _, _, name in cuts):
        return ptx  # what is left takes a removed entry's address (dynamic parallelism...)
    return out


def entry_spans(ptx: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each `.entry` definition of the module; none where the module has
    debug sections or an entry whose body does not close (entry_only then keeps the text)."""
    if ".section" in ptx:
        return []
    spans = []
    for m in _ENTRY.finditer(ptx):
        end = _body_end(ptx, m.end())
        if end is None:
            return []
        spans.append((m.start(), end, m.group(1)))
    return spans


def _body_end(ptx: str, pos: int) -> int | None:
    """The index after the `}` closing the body that starts at the first `{` after `pos` (None where
    it does not close): the PTX parser's own scan, comment- and string-aware. Imported here, not at
    start-up: the engine that instruments the entry next loads the parser anyway."""
    from neutrino.errors import ParseError
    from neutrino.isa.ptx.parser import BALANCE_RE, Scanner

    brace = next((m for m in BALANCE_RE.finditer(ptx, pos) if m.group(0) in "{}"), None)  # past comments
    if brace is None or brace.group(0) != "{":
        return None
    scanner = Scanner(ptx, "<ptx>")
    scanner.pos = brace.start()
    try:
        scanner.read_balanced()
    except ParseError:
        return None
    return scanner.pos
