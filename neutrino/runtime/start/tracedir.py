"""Writing a trace directory (layout in spec/trace-format.md; reader in neutrino.trace)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import attrs

# neutrino.maps and neutrino.trace_writer (numpy) are imported where results are written: the launcher
# writes a run directory of events alone when no process loaded a CUDA module (launcher.close_run).

from neutrino.runtime.start.rundir_names import ENV_JOB, rank_dir_name, run_dir_name  # noqa: F401 (re-exported)


def append_closed_event(trace: "TraceDir", event: str, **fields) -> None:
    """One event after `trace` was closed (the exit handler's last phase): appended to its
    event.log when the process wrote one; never raises (timings never cost the program its exit)."""
    with trace._lock:
        if not trace._closed or not (trace.path / "event.log").is_file():
            return
        rec = {"event": event, "time": round(time.time(), 6), **fields}
        try:
            with open(trace.path / "event.log", "a", encoding="utf-8") as log:
                log.write(json.dumps(rec, separators=(",", ":")) + "\n")
        except OSError:
            pass


def run_path(root, start: float, pid: int, rank: int | None = None, job: str | None = None) -> Path:
    """Where a process's run directory goes (spec/trace-format.md): `<root>/<time>_<pid>` for a
    plain process; `<root>/<job>/rank<R>` for rank R of a job the launcher named; and
    `<root>/<time>_<pid>_rank<R>` for a rank whose launcher named no job."""
    root = Path(root).expanduser().resolve()
    if rank is None:
        return root / run_dir_name(start, pid)
    if job and "/" not in job and job not in (".", ".."):
        return root / job / rank_dir_name(rank)
    return root / f"{run_dir_name(start, pid)}_{rank_dir_name(rank)}"


def name_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:10]


# Events that alone do not make a process worth a trace directory: written once something else happens.
HELD_BACK_EVENTS = frozenset({"start", "framework_flags", "phase"})


@attrs.define(eq=False)
class TraceDir:
    """One run's directory. Every method is thread-safe.

    A lazy TraceDir creates nothing on disk until the first event other than
    those of HELD_BACK_EVENTS (a process that never loads a CUDA module leaves
    no directory).
    """

    path: Path
    _log: object = attrs.field(default=None, repr=False)
    _lock: threading.RLock = attrs.field(factory=threading.RLock, repr=False)
    _next_launch: int = 0
    _next_kernel: int = 0
    _pending: list = attrs.field(factory=list, repr=False)  # lines and files held back while lazy
    _closed: bool = False
    _results: dict = attrs.field(factory=dict, repr=False)  # kernel dir -> open per-kernel result file
    result_bytes: int = 0
    _claim_pid: int | None = None  # a rank directory: claimed exclusively, `rank<R>.<pid>` if taken

    @classmethod
    def create(cls, root, *, start: float | None = None, pid: int | None = None, lazy: bool = False,
               rank: int | None = None, job: str | None = None) -> "TraceDir":
        start = time.time() if start is None else start
        pid = os.getpid() if pid is None else pid
        td = cls(run_path(root, start, pid, rank, job))
        if rank is not None and job:
            td._claim_pid = pid
        if not lazy:
            td._ensure()
        return td

    def _claim(self) -> None:
        """Two processes of one job may say they are the same rank (a restarted worker, a helper
        process that inherited RANK): the second takes `rank<R>.<pid>`."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.path.mkdir()
        except FileExistsError:
            self.path = self.path.with_name(f"{self.path.name}.{self._claim_pid}")

    def _ensure(self) -> None:
        with self._lock:
            if self._log is not None or self._closed:
                return
            if self._claim_pid is not None:
                self._claim()
                self._claim_pid = None
            (self.path / "result").mkdir(parents=True, exist_ok=True)
            (self.path / "kernel").mkdir(exist_ok=True)
            self._log = open(self.path / "event.log", "a", encoding="utf-8", buffering=1)
            pending, self._pending = self._pending, []
            for item in pending:
                if isinstance(item, str):
                    self._log.write(item)
                else:
                    (self.path / item[0]).write_text(item[1])

    def materialize(self) -> None:
        """Create the directory now (a file written beside the event log needs it)."""
        self._ensure()

    @property
    def materialized(self) -> bool:
        return self._log is not None

    # -- events
    def event(self, event: str, **fields) -> None:
        rec = {"event": event, "time": round(time.time(), 6), **fields}
        line = json.dumps(rec, default=str, separators=(",", ":")) + "\n"
        with self._lock:
            if self._log is None and event in HELD_BACK_EVENTS:
                self._pending.append(line)
                return
            self._ensure()
            if self._log is not None:
                self._log.write(line)

    def close(self) -> None:
        with self._lock:
            for fh in self._results.values():
                if isinstance(fh, int):
                    os.close(fh)
                else:
                    fh.close()
            self._results.clear()
            if self._log is not None:
                self._log.close()
                self._log = None
            self._closed = True

    # -- files
    def write_probe(self, text: str) -> None:
        with self._lock:
            if self._log is None:
                self._pending.append(("probe.toml", text))
                return
        (self.path / "probe.toml").write_text(text)

    def new_launch_index(self) -> int:
        with self._lock:
            n = self._next_launch
            self._next_launch += 1
            return n

    def write_kernel(self, name: str, original_ptx: str, probed_ptx: str, info: dict) -> str:
        """Write kernel/<k>_<hash>/ and return its path relative to the run dir."""
        with self._lock:
            k = self._next_kernel
            self._next_kernel += 1
        self._ensure()
        rel = f"kernel/{k}_{name_hash(name)}"
        d = self.path / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "original.ptx").write_text(original_ptx)
        (d / "probed.ptx").write_text(probed_ptx)
        (d / "kernel.json").write_text(json.dumps({"version": 1, "kernels": {name: info}}, indent=2))
        return rel

    def write_result(self, index: int, *, grid, block, shared_bytes: int, maps) -> str:
        from neutrino import trace_writer

        self._ensure()
        rel = f"result/{index}.bin"
        trace_writer.write_result(self.path / rel, grid=grid, block=block, shared_bytes=shared_bytes, maps=maps)
        return rel

    def append_result(self, kernel_dir: str, header: bytes, offsets, datas) -> tuple[int, str, int]:
        """Append one launch's maps (header from `neutrino.trace.encode_header`) as a frame of the
        kernel's result file result/<k>_<hash>.ntr; returns (launch index, file relative to the run dir, offset)."""
        from neutrino import trace_writer

        self._ensure()
        rel = f"result/{Path(kernel_dir).name}.ntr"
        with self._lock:
            fh = self._results.get(rel)
            if fh is None:
                fh = self._results[rel] = open(self.path / rel, "ab")
            offset, end = trace_writer.append_encoded(fh, header, offsets, datas)
            fh.flush()
            self.result_bytes += end
            index = self._next_launch
            self._next_launch += 1
        return index, rel, offset

    def result_fd(self, kernel_dir: str) -> tuple[int, str]:
        """An O_APPEND descriptor of the kernel's result file, for the native writer; and its relative path."""
        self._ensure()
        rel = f"result/{Path(kernel_dir).name}.ntr"
        return self._fd(rel), rel

    def index_fd(self) -> int:
        """result/index.bin (spec/trace-format.md), its header written when created."""
        from neutrino import maps as tracefmt

        self._ensure()
        rel = "result/index.bin"
        with self._lock:
            fresh = rel not in self._results
            fd = self._fd(rel)
            if fresh and os.fstat(fd).st_size == 0:
                os.write(fd, tracefmt.INDEX_MAGIC + tracefmt.INDEX_HEADER_TAIL)
        return fd

    def _fd(self, rel: str) -> int:
        with self._lock:
            fd = self._results.get(rel)
            if fd is None:
                fd = self._results[rel] = os.open(self.path / rel, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            return fd

    def write_text(self, rel: str, text: str) -> Path:
        self._ensure()
        p = self.path / rel
        p.write_text(text)
        return p
