"""The context tables of a run, on the runtime's side: where the shim writes ranges.bin and
launch_args.jsonl, and the tensor trace of probed launches (spec/runtime.md, "Ranges and
tensor trace").

* Ranges need nothing from Python while the program runs: the shim's NVTX injection and
  `neutrino.annotate` record them (shim/nvtx.c). The runtime names the run directory once the
  trace exists (`open_dir`) and writes the rest at exit (`close`).
* Arguments: the first probed launch of a kernel in a context (the Python path) registers the
  kernel's parameter sizes, read from its PTX, with the shim; every probed launch, in C or in
  Python, is then recorded by shim/argtrace.c, which calls `_resolve` on this thread for each new
  distinct (kernel, argument bytes): the argument set's line, with the tensors its pointers
  point into (tensors.py). Any failure there gives the set without tensors and one event.
  `NEUTRINO_ARGS=0` turns argument tracing off.
"""

from __future__ import annotations

import ctypes as C
import json
import os
import re
import threading
import time

from neutrino.runtime.context_tables.tensors import TensorResolver

CB_ARGSET = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_int64, C.c_void_p, C.c_uint32)
MAX_RESOLVED = 20000  # argument sets resolved to tensors per process; later ones keep raw values only
ENV_ARGS = "NEUTRINO_ARGS"
TYPE_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8}
_PARAM = re.compile(r"\.param\s+(?P<rest>.*?)(?P<name>[A-Za-z_$%][\w$]*)\s*(?:\[\s*(?P<count>\d+)\s*\])?\s*$", re.S)


def param_sizes(ptx: str, entry: str) -> list[int] | None:
    """Bytes of each parameter of `.entry entry` in a PTX module, or None when it cannot be read."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(", ptx)
    if m is None:
        return [] if re.search(r"\.entry\s+" + re.escape(entry) + r"\s*(?:\.|\{)", ptx) else None
    end = ptx.find(")", m.end())
    if end < 0:
        return None
    sizes = []
    for decl in (d.strip() for d in ptx[m.end():end].split(",")):
        if not decl:
            continue
        p = _PARAM.match(decl)
        if p is None:
            return None
        kind = re.search(r"\.(?:b|u|s|f)(8|16|32|64)\b", p.group("rest"))
        if kind is None:
            if re.search(r"\.(?:texref|samplerref|surfref)\b", p.group("rest")):
                sizes.append(8)
                continue
            return None
        sizes.append(TYPE_BYTES[kind.group(1)] * int(p.group("count") or 1))
    return sizes


class ContextTables:
    def __init__(self, shim_path: str, trace, phases=None):
        self.trace = trace
        self.phases = phases  # PhaseClock (start/phases.py): `launch_args`, the argument sets' lines
        lib = C.PyDLL(shim_path)  # none of these waits: keep the GIL
        self._open = lib.neutrino_context_open
        self._open.argtypes = [C.c_char_p]
        self._close = lib.neutrino_context_close
        self._stats = lib.neutrino_context_stats
        self._stats.argtypes = [C.POINTER(C.c_uint64 * 3), C.POINTER(C.c_uint64 * 3)]
        self._ranges_stats = lib.neutrino_ranges_stats
        self._ranges_stats.argtypes = [C.POINTER(C.c_uint64), C.POINTER(C.c_uint64)]
        self._args_stats = lib.neutrino_args_stats
        self._args_stats.argtypes = [C.POINTER(C.c_uint64), C.POINTER(C.c_uint64)]
        self._enable = lib.neutrino_args_enable
        self._enable.argtypes = [C.c_int, CB_ARGSET]
        self._plan = lib.neutrino_args_plan
        self._plan.argtypes = [C.c_void_p, C.c_void_p, C.c_uint32, C.POINTER(C.c_uint16), C.c_char_p]
        self._record = lib.neutrino_args_record
        self._record.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p, C.c_uint64]
        self._record.restype = C.c_int64
        self._line = lib.neutrino_args_line
        self._line.argtypes = [C.c_char_p, C.c_size_t]
        self._forget = getattr(lib, "neutrino_args_forget", None)  # None: a shim built before it existed
        if self._forget is not None:
            self._forget.argtypes = [C.c_void_p]
        self.args_on = os.environ.get(ENV_ARGS, "1") != "0"
        self.tensors = TensorResolver(on_walk=lambda seconds, modules, source: self.trace.event(
            "tensor_walk", seconds=round(seconds, 6), modules=modules, source=source))
        self._lock = threading.Lock()
        self._plans: dict[tuple[int, int], tuple[str, list[int]] | None] = {}
        self._contexts_of: dict[int, set[int]] = {}  # function handle -> contexts it has a plan in
        self._resolved = 0
        self._failures = 0
        self._opened = False
        self._callback = CB_ARGSET(self._resolve)  # kept alive as long as the shim may call it
        if self.args_on:
            self._enable(1, self._callback)
            self.tensors.watch_torch()  # learn the program's modules as it builds them (tensors.py)

    def open_dir(self) -> None:
        """The trace directory exists: the shim writes the tables there from now on."""
        if not self._opened and self.trace.materialized:
            self._opened = self._open(str(self.trace.path).encode()) == 0

    # ------------------------------------------------------------ arguments
    def record_launch(self, rec, req, ctx: int, index: int) -> None:
        """A probed launch of the Python path (index: its place in result/index.bin)."""
        if not self.args_on or not req.params:
            return
        key = (req.func, ctx)
        if key not in self._plans:
            self._register(key, rec)
        if self._plans.get(key) is not None:
            self._record(req.func, ctx, req.params, index)

    def _register(self, key: tuple[int, int], rec) -> None:
        sizes = param_sizes(getattr(rec.module.ptx, "text", "") or "", rec.name)
        plan = None
        if sizes is not None and len(sizes) <= 256:
            arr = (C.c_uint16 * max(len(sizes), 1))(*sizes)
            if self._plan(key[0], key[1], len(sizes), arr, json.dumps(rec.name).encode()) == 0:
                plan = (rec.name, sizes)
        with self._lock:
            self._plans[key] = plan
            self._contexts_of.setdefault(key[0], set()).add(key[1])
        if plan is None:
            self.trace.event("launch_args", kernel=rec.name, reason="the kernel's parameters could not be read "
                             "from its PTX (or more than 256): its launches have no argument trace")

    def forget(self, func: int) -> None:
        """The handle no longer stands for the kernel it was planned for (core.py, module unloads):
        its next probed launch plans it again, with the new kernel's parameters and name."""
        with self._lock:
            for ctx in self._contexts_of.pop(func, ()):
                self._plans.pop((func, ctx), None)
        if self._forget is not None:
            self._forget(func)

    def _resolve(self, func, ctx, argset: int, data, length: int) -> int:
        """shim/argtrace.c: a new argument set. Writes its line; 0, or 1 to let the shim write it raw.
        Its time is the `launch_args` phase (a probed launch's, on either launch path)."""
        started = time.perf_counter()
        try:
            return self._resolve_timed(func, ctx, argset, data, length)
        finally:
            if self.phases is not None:
                try:
                    self.phases.add("launch_args", time.perf_counter() - started)
                except Exception:  # noqa: BLE001 - a clock never changes what the shim is told
                    pass

    def _resolve_timed(self, func, ctx, argset: int, data, length: int) -> int:
        try:
            plan = self._plans.get((func or 0, ctx or 0))
            if plan is None or self._resolved >= MAX_RESOLVED:
                return 1
            self._resolved += 1
            name, sizes = plan
            raw = C.string_at(data, length) if length else b""
            line = self._argset_line(argset, name, sizes, raw)
            self._line(line, len(line))
            return 0
        except Exception as e:  # noqa: BLE001 - never let the tensor trace touch the program
            self._failures += 1
            if self._failures == 1:
                self.trace.event("launch_args", argset=argset, reason=f"tensor resolution failed: "
                                 f"{type(e).__name__}: {e}")
            return 1

    def _argset_line(self, argset: int, kernel: str, sizes: list[int], raw: bytes) -> bytes:
        args, at = [], 0
        for i, size in enumerate(sizes):
            chunk = raw[at: at + size]
            at += size
            value = int.from_bytes(chunk, "little") if size in (1, 2, 4, 8) else None
            args.append({"index": i, "size": size, "value": value, "hex": chunk.hex(), "tensor": None})
        pointers = [a["value"] for a in args if a["size"] == 8]
        found = self.tensors.resolve(pointers) if pointers and self.tensors.available() else {}
        for a in args:
            if a["size"] == 8 and a["value"] in found:
                a["tensor"] = found[a["value"]]
        return (json.dumps({"argset": argset, "kernel": kernel, "args": args}, separators=(",", ":")) + "\n").encode()

    # ------------------------------------------------------------ exit
    def close(self) -> None:
        """Stop resolving (the interpreter is going away), write what is held, log the counts."""
        self._enable(int(self.args_on), CB_ARGSET())  # C writes later sets raw: no call into a dying interpreter
        self.open_dir()
        self._close()
        written, dropped = (C.c_uint64 * 3)(), (C.c_uint64 * 3)()
        self._stats(C.byref(written), C.byref(dropped))
        instances, closed = C.c_uint64(), C.c_uint64()
        self._ranges_stats(C.byref(instances), C.byref(closed))
        sets, overflow = C.c_uint64(), C.c_uint64()
        self._args_stats(C.byref(sets), C.byref(overflow))
        injection = os.environ.get("NVTX_INJECTION64_PATH")
        self.trace.event("context_tables", ranges=closed.value, nvtx_instances=instances.value,
                         nvtx_injection="neutrino" if injection and injection == os.environ.get("NEUTRINO_SHIM")
                         else injection, argsets=sets.value, argsets_resolved=self._resolved,
                         argsets_overflow=overflow.value, resolution_failures=self._failures,
                         dropped={"ranges_names": dropped[0], "ranges": dropped[1], "launch_args": dropped[2]})
