"""Naming the tensors a probed launch's pointer arguments point into (the tensor trace).

One job: given the 8-byte argument values of a new argument set, find the PyTorch tensors they
point into, on the launching thread, while those tensors are alive. Called once per distinct
(kernel, argument bytes) by the shim (shim/argtrace.c, through `neutrino.runtime.context_tables.tables`),
never per launch. Candidates, best first:

1. parameters and buffers of the `nn.Module`s alive, named as in their root module's
   `state_dict` (`weight`, `0.bias`, `layers.3.attn.q_proj.weight`). The modules are learnt as
   the program builds them, from torch's global registration hooks
   (`torch.nn.modules.module.register_module_{parameter,buffer,module}_registration_hook`),
   installed right after the program imports torch (`watch_torch`): no walk of the garbage
   collector's objects. Where torch came first (usual under neutrino: the runtime is built at
   the program's first CUDA call), the first build installs the hooks and one walk of
   `gc.get_objects()` finds the modules built before; the hooks take over from there (a torch
   without the hooks gets a walk at every build). The names are
   kept as a table of storage spans sorted by start (a lookup is a bisection), rebuilt from the
   known modules when a pointer is not found and either a module registered something since the
   last build or REBUILD_SECONDS have passed (a parameter's storage can move: `.cuda()`,
   `load_state_dict(assign=True)`). Every build is timed (`on_walk`); all but the one walk that
   seeds the registry are held to a budget: BUDGET_FLOOR_SECONDS, plus BUDGET_FRACTION of the
   wall time since the resolver started, and never more than MAX_WALK_SECONDS in all;
2. tensors held by local variables of the launching thread's Python frames: in Inductor's
   generated code (`buf0`, `primals_1`, `arg3_1`) and, from Python 3.13, in the program's own
   frames, named by their variable; tensors in library frames (Triton's launcher, torch) count
   without a name. Before 3.13 reading a running frame's `f_locals` leaves a snapshot on the
   frame that holds its values until the frame ends, so a tensor the program dropped would
   outlive its use until then. That changes programs whose frames outlive the launch: PyTorch's
   CUDA-graph trees, for one, check that the outputs they free hold no memory any more. So
   before 3.13 only the frames that end with the launch are read: the launch
   machinery's innermost frames (Triton's package, Inductor's launch helpers, code compiled from a
   string) up to and including Inductor's generated code, never a frame beyond them.

A pointer matches a tensor whose storage range holds it (data_ptr ≤ p < data_ptr + bytes), an
exact data_ptr first. Nothing here imports torch: a process without it gets no tensors.
"""

from __future__ import annotations

import bisect
import gc
import os
import sys
import threading
import time
import weakref

from neutrino.runtime.launch_path.attribution import _package_dirs, is_library_file
from neutrino.runtime.modules.import_hooks import AfterImport

REBUILD_SECONDS = 2.0  # a name table built from unchanged modules is rebuilt at most this often
BUDGET_FLOOR_SECONDS = 0.05  # building the name table may always take this much in all ...
BUDGET_FRACTION = 0.01  # ... plus this share of the wall time since the resolver started
MAX_WALK_SECONDS = 10.0  # and never more than this, per process
MAX_FRAMES = 48
MIN_POINTER = 1 << 16  # smaller values are sizes, strides, flags: not device addresses
READ_USER_FRAMES = sys.version_info >= (3, 13)  # f_locals is a view (PEP 667), not a snapshot kept on the frame
# Before 3.13, the frames read: those of the launch itself (their snapshots end with the launch)
_LAUNCH_SIDE_PARTS = ("/triton/", "/_inductor/runtime/")
_OUR_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep  # neutrino/
HOOKS = ("register_module_parameter_registration_hook", "register_module_buffer_registration_hook",
         "register_module_module_registration_hook")


def tensor_info(t, pointer: int, name: str | None) -> dict:
    return {"name": name, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
            "strides": list(t.stride()), "offset_bytes": pointer - t.data_ptr(),
            "device": t.device.index if t.device.index is not None else -1}


def _span(t) -> tuple[int, int] | None:
    """[start, end) of the bytes a CUDA tensor can reach, or None (not CUDA, no storage)."""
    try:
        if not t.is_cuda:
            return None
        start = t.data_ptr()
        if not start:
            return None
        reach = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()) if n > 0) if t.numel() else 0
        return start, start + max(reach, 1) * t.element_size()
    except Exception:  # noqa: BLE001 - fake, meta or freed tensors
        return None


class ModuleRegistry:
    """The `nn.Module`s alive that registered a parameter, a buffer or a child module, held weakly,
    as torch's global registration hooks tell them (the hooks run on the thread building the
    module: a dictionary lookup, at most one weak reference, nothing else)."""

    def __init__(self):
        self._modules: dict[int, weakref.ref] = {}
        self.changes = 0  # registrations seen: a name table built at another count may miss names
        self.hooked = False

    def install(self, torch) -> bool:
        """Register our hook with torch; False where this torch has no global registration hooks."""
        if self.hooked:
            return True
        try:
            module_api = torch.nn.modules.module
            registers = [getattr(module_api, name) for name in HOOKS]
            for register in registers:
                register(self._registered)
        except Exception:  # noqa: BLE001 - an old torch, or a stand-in without the hooks
            return False
        self.hooked = True
        return True

    def _registered(self, module, name, value):
        self.add(module)
        return None  # never replaces what the program registers

    def add(self, module) -> None:
        key = id(module)
        ref = self._modules.get(key)
        if ref is None or ref() is not module:
            def forget(dead, key=key):
                if self._modules.get(key) is dead:
                    del self._modules[key]
            try:
                self._modules[key] = weakref.ref(module, forget)
            except TypeError:  # not weak-referenceable: never kept alive by us, so not kept at all
                return
        self.changes += 1

    def modules(self) -> list:
        return [m for ref in list(self._modules.values()) if (m := ref()) is not None]


class NameTable:
    """Storage spans of named parameters and buffers, sorted by start. An entry whose tensor died
    or moved (data_ptr no longer its start) is stale: skipped, and `stale` is set."""

    def __init__(self, entries: list[tuple[int, int, str, weakref.ref]]):
        entries.sort(key=lambda e: e[0])
        self._entries = entries
        self._starts = [e[0] for e in entries]
        self._exact = {}
        for e in entries:
            self._exact.setdefault(e[0], e)
        self._longest = max((e[1] - e[0] for e in entries), default=0)
        self.stale = False

    def __len__(self) -> int:
        return len(self._entries)

    def exact(self, pointer: int) -> tuple[str, object] | None:
        entry = self._exact.get(pointer)
        return self._live(entry) if entry is not None else None

    def inside(self, pointer: int) -> tuple[str, object] | None:
        i = bisect.bisect_right(self._starts, pointer) - 1
        while i >= 0 and self._starts[i] > pointer - self._longest:  # spans may overlap (views, flat parameters)
            start, end, _, _ = entry = self._entries[i]
            if start <= pointer < end and (hit := self._live(entry)) is not None:
                return hit
            i -= 1
        return None

    def _live(self, entry) -> tuple[str, object] | None:
        start, _, name, ref = entry
        t = ref()
        try:
            if t is not None and t.data_ptr() == start:
                return name, t
        except Exception:  # noqa: BLE001 - a freed or fake tensor
            pass
        self.stale = True
        return None


def name_table(modules: list) -> NameTable:
    """Parameters and buffers of the root modules among `modules`, named as in their state_dict."""
    children: set[int] = set()
    for m in modules:
        try:
            children.update(id(c) for c in m.children())
        except Exception:  # noqa: BLE001 - a module half-built (inside its __init__)
            continue
    entries, seen = [], set()
    for root in modules:
        if id(root) in children:
            continue
        try:
            named = [*root.named_parameters(remove_duplicate=False), *root.named_buffers(remove_duplicate=False)]
        except Exception:  # noqa: BLE001 - a module in a broken state
            continue
        for name, t in named:
            span = _span(t) if t is not None else None
            if span is None or span[0] in seen:
                continue
            try:
                entries.append((span[0], span[1], name, weakref.ref(t)))
            except TypeError:  # not weak-referenceable
                continue
            seen.add(span[0])
    return NameTable(entries)


def gc_modules(module_type) -> list:
    """Every nn.Module alive, from the garbage collector's objects (milliseconds per 100k objects)."""
    # type(), not isinstance(): some objects' __class__ warns (torch.distributed.reduce_op) or raises
    return [o for o in gc.get_objects() if issubclass(type(o), module_type)]


class TensorResolver:
    def __init__(self, on_walk=None, clock=time.monotonic):
        """`on_walk(seconds, modules, source)`: told after each build of the name table (the event
        log's `tensor_walk`: our host time inside the program); source "hooks" (the modules the
        registration hooks told) or "gc" (a walk of the garbage collector's objects)."""
        self._on_walk = on_walk
        self._clock = clock
        self._lock = threading.Lock()
        self.registry = ModuleRegistry()
        self._complete = False  # the registry knows every module alive (hooked before any was built, or seeded)
        self._table = NameTable([])
        self._built_changes = -1
        self._built_at = float("-inf")
        self._started = clock()
        self._walk_seconds = 0.0
        self._watcher: AfterImport | None = None
        self._kinds_for, self._kinds, self._dirs = -1, {}, ()  # _frame_kind's memory

    def available(self) -> bool:
        return "torch" in sys.modules

    def watch_torch(self) -> None:
        """Hook module registration right after the program imports torch, before it builds any
        module. If torch is imported already, the first build walks the garbage collector once."""
        if "torch" in sys.modules or self._watcher is not None:
            return
        self._watcher = AfterImport({"torch": self._torch_imported})
        sys.meta_path.insert(0, self._watcher)

    def _torch_imported(self, torch) -> None:
        self._complete = self.registry.install(torch)

    def resolve(self, pointers: list[int]) -> dict[int, dict]:
        """pointer -> tensor info (tensor_info) for the pointers found."""
        torch = sys.modules.get("torch")
        wanted = sorted({p for p in pointers if p >= MIN_POINTER})
        if torch is None or not wanted:
            return {}
        candidates = self._frame_tensors(torch.Tensor)
        with self._lock:
            found = self._match(wanted, candidates)
            unnamed = [p for p in wanted if p not in found or found[p]["name"] is None]
            if unnamed and self._may_build():
                self._build(torch)
                found = self._match(wanted, candidates)
        return found

    def _match(self, pointers: list[int], candidates: list[tuple[str | None, object]]) -> dict[int, dict]:
        """An exact data_ptr before a span holding the pointer; a module's name before a local variable's."""
        spans = [(name, t, s) for name, t in candidates if (s := _span(t)) is not None]
        table = self._table
        out = {}
        for p in pointers:
            hit = (table.exact(p) or next(((n, t) for n, t, s in spans if s[0] == p), None)
                   or table.inside(p) or next(((n, t) for n, t, s in spans if s[0] <= p < s[1]), None))
            if hit is None:
                continue
            name, t = hit
            if name is None:  # an unnamed match: a named tensor of the same storage names it
                start = t.data_ptr()
                named = table.exact(start)
                name = named[0] if named else next((n for n, _, s in spans if n and s[0] == start), None)
            out[p] = tensor_info(t, p, name)
        return out

    def _may_build(self) -> bool:
        """Something may have changed since the last build, and the budget allows another."""
        now = self._clock()
        changed = self._complete and self.registry.changes != self._built_changes
        due = changed or self._table.stale or now - self._built_at >= REBUILD_SECONDS
        budget = min(MAX_WALK_SECONDS, BUDGET_FLOOR_SECONDS + BUDGET_FRACTION * (now - self._started))
        return due and self._walk_seconds < budget

    def _build(self, torch) -> None:
        """The name table, from the registry's modules; from a garbage-collector walk (seeding the
        registry, whose hooks are installed first) while the registry may not know every module."""
        t0 = self._clock()
        seeding = False
        if self._complete:
            modules, source = self.registry.modules(), "hooks"
        else:
            hooked = self.registry.install(torch)  # first: a module built during the walk is not missed
            modules, source = gc_modules(torch.nn.Module), "gc"
            if hooked:
                for m in modules:
                    self.registry.add(m)
                self._complete = seeding = True
        self._built_changes = self.registry.changes
        self._table = name_table(modules)
        self._built_at = self._clock()
        seconds = self._built_at - t0
        if not seeding:  # the one walk that seeds the registry happens once: the budget is for what repeats
            self._walk_seconds += seconds
        if self._on_walk is not None:
            self._on_walk(seconds, len(modules), source)

    def _frame_tensors(self, tensor_type) -> list[tuple[str | None, object]]:
        """(variable name or None, tensor) from the calling thread's frames, innermost first."""
        out: list[tuple[str | None, object]] = []
        f = sys._getframe(1)
        for _ in range(MAX_FRAMES):
            if f is None:
                break
            named, read = self._frame_kind(f.f_code.co_filename)
            if not READ_USER_FRAMES and not named and not _launch_side(f.f_code.co_filename):
                break  # before 3.13 this frame and its callers outlive the launch: never read (docstring)
            try:
                items = list(f.f_locals.items()) if read else []
            except Exception:  # noqa: BLE001
                items = []
            for var, value in items:  # type(), not isinstance(): a dead weak proxy raises on __class__
                kind = type(value)
                if issubclass(kind, tensor_type):
                    out.append((var if named else None, value))
                elif (kind is list or kind is tuple) and len(value) <= 64:
                    out.extend((f"{var}[{i}]" if named else None, v) for i, v in enumerate(value)
                               if issubclass(type(v), tensor_type))
            if named and not READ_USER_FRAMES:
                break  # the generated code's callers (CUDA-graph trees, AOTAutograd) outlive the launch
            f = f.f_back
        return out

    def _frame_kind(self, filename: str) -> tuple[bool, bool]:
        """(its variables name tensors, its locals are read) for a frame of this file. Remembered per
        file while the set of imported modules (which decides the library folders) stays the same."""
        if len(sys.modules) != self._kinds_for:
            self._kinds_for, self._kinds = len(sys.modules), {}
            self._dirs = _package_dirs()
        kind = self._kinds.get(filename)
        if kind is None:
            generated = "torchinductor_" in filename or filename.startswith(_inductor_dirs())
            library = not generated and is_library_file(filename, self._dirs)
            named = generated or (not library and READ_USER_FRAMES)
            kind = (named, named or library)
            if len(self._kinds) < 4096:
                self._kinds[filename] = kind
        return kind


def _launch_side(filename: str) -> bool:
    """A frame of the launch machinery (ours, Triton, Inductor's launch helpers, code compiled from a string)."""
    return (filename.startswith(("<", _OUR_DIR)) or any(part in filename for part in _LAUNCH_SIDE_PARTS))


def _inductor_dirs() -> tuple[str, ...]:
    """Where Inductor writes its generated code when not in the default `torchinductor_<user>` folder."""
    d = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return (os.path.abspath(d) + os.sep,) if d else ()
