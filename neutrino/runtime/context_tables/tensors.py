"""Naming the tensors a probed launch's pointer arguments point into (the tensor trace).

One job: given the 8-byte argument values of a new argument set, find the PyTorch tensors they
point into, on the launching thread, while those tensors are alive. Called once per distinct
(kernel, argument bytes) by the shim (shim/argtrace.c, through `neutrino.runtime.context_tables.tables`),
never per launch. Candidates, best first:

1. parameters and buffers of the `nn.Module`s alive, named as in their root module's
   `state_dict` (`weight`, `0.bias`, `layers.3.attn.q_proj.weight`): found by one walk of the
   garbage collector's objects, kept as a map from data pointer to name, walked again only when
   a pointer is not found and at most every REWALK_SECONDS (a walk costs milliseconds per 100k
   objects);
2. tensors held by local variables of the launching thread's Python frames: in Inductor's
   generated code (`buf0`, `primals_1`, `arg3_1`) and, from Python 3.13, in the program's own
   frames, named by their variable; tensors in library frames (Triton's launcher, torch) count
   without a name. Before 3.13 reading a frame's `f_locals` leaves a snapshot on the frame that
   holds its values until the frame ends or is read again: the program's own frames (a training
   loop's, which live long) are not read there, so that no tensor of theirs outlives its use.

A pointer matches a tensor whose storage range holds it (data_ptr ≤ p < data_ptr + bytes), an
exact data_ptr first. Nothing here imports torch: a process without it gets no tensors.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import weakref

from neutrino.runtime.launch_path.attribution import _package_dirs, is_library_file

REWALK_SECONDS = 2.0
MAX_WALK_SECONDS = 10.0  # total time spent walking the garbage collector's objects, per process
MAX_FRAMES = 48
MIN_POINTER = 1 << 16  # smaller values are sizes, strides, flags: not device addresses
READ_USER_FRAMES = sys.version_info >= (3, 13)  # f_locals is a view (PEP 667), not a snapshot kept on the frame


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


class TensorResolver:
    def __init__(self, on_walk=None):
        """`on_walk(seconds, modules)`: told after each walk (the event log's `tensor_walk`: our host time)."""
        self._on_walk = on_walk
        self._lock = threading.Lock()
        self._params: dict[int, tuple[str, weakref.ref]] = {}  # data_ptr -> (name, tensor): never kept alive
        self._walked_at = float("-inf")
        self._walk_seconds = 0.0

    def available(self) -> bool:
        return "torch" in sys.modules

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
            if unnamed and self._may_walk():
                self._walk_modules(torch)
                found = self._match(wanted, candidates)
        return found

    def _match(self, pointers: list[int], candidates: list[tuple[str | None, object]]) -> dict[int, dict]:
        params = [(name, t) for name, ref in self._params.values() if (t := ref()) is not None]
        ordered = params + candidates  # a module's name wins over a local variable's
        spans = [(name, t, _span(t)) for name, t in ordered]
        out = {}
        for p in pointers:
            exact = next(((n, t) for n, t, s in spans if s and s[0] == p), None)
            inside = exact or next(((n, t) for n, t, s in spans if s and s[0] <= p < s[1]), None)
            if inside is not None:
                name, t = inside
                if name is None:  # an unnamed match: a named tensor of the same storage names it
                    name = next((n for n, t2, s in spans if n and s and s[0] == t.data_ptr()), None)
                out[p] = tensor_info(t, p, name)
        return out

    def _frame_tensors(self, tensor_type) -> list[tuple[str | None, object]]:
        """(variable name or None, tensor) from the calling thread's frames, innermost first."""
        dirs = _package_dirs()
        generated_dirs = _inductor_dirs()
        out: list[tuple[str | None, object]] = []
        f = sys._getframe(1)
        for _ in range(MAX_FRAMES):
            if f is None:
                break
            fname = f.f_code.co_filename
            generated = "torchinductor_" in fname or fname.startswith(generated_dirs)
            library = not generated and is_library_file(fname, dirs)
            named = generated or (not library and READ_USER_FRAMES)
            try:
                items = list(f.f_locals.items()) if named or library else []
            except Exception:  # noqa: BLE001
                items = []
            for var, value in items:  # type(), not isinstance(): a dead weak proxy raises on __class__
                kind = type(value)
                if issubclass(kind, tensor_type):
                    out.append((var if named else None, value))
                elif (kind is list or kind is tuple) and len(value) <= 64:
                    out.extend((f"{var}[{i}]" if named else None, v) for i, v in enumerate(value)
                               if issubclass(type(v), tensor_type))
            f = f.f_back
        return out

    def _may_walk(self) -> bool:
        now = time.monotonic()
        return now - self._walked_at >= REWALK_SECONDS and self._walk_seconds < MAX_WALK_SECONDS

    def _walk_modules(self, torch) -> None:
        """Parameters and buffers of every root nn.Module alive, by data pointer."""
        t0 = time.monotonic()
        module_type = torch.nn.Module
        # type(), not isinstance(): some objects' __class__ warns (torch.distributed.reduce_op) or raises
        modules = [o for o in gc.get_objects() if issubclass(type(o), module_type)]
        children: set[int] = set()
        for m in modules:
            try:
                children.update(id(c) for c in m.children())
            except Exception:  # noqa: BLE001 - a module half-built (inside its __init__)
                continue
        params: dict[int, tuple[str, weakref.ref]] = {}
        for root in modules:
            if id(root) in children:
                continue
            try:
                named = [*root.named_parameters(remove_duplicate=False), *root.named_buffers(remove_duplicate=False)]
            except Exception:  # noqa: BLE001 - a module in a broken state
                continue
            for name, t in named:
                if t is None:
                    continue
                try:
                    params.setdefault(t.data_ptr(), (name, weakref.ref(t)))
                except Exception:  # noqa: BLE001 - no storage, or not weak-referenceable
                    continue
        self._params = params
        self._walked_at = time.monotonic()
        self._walk_seconds += self._walked_at - t0
        if self._on_walk is not None:
            self._on_walk(self._walked_at - t0, len(modules))


def _inductor_dirs() -> tuple[str, ...]:
    """Where Inductor writes its generated code when not in the default `torchinductor_<user>` folder."""
    d = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return (os.path.abspath(d) + os.sep,) if d else ()
