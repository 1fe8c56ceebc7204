"""The timeline's runtime side: finding libcupti, starting and stopping shim/cupti.c, its events.

The shim records every kernel, copy and memset through CUPTI's Activity API into
timeline.bin (spec/trace-format.md, "Context tables"); this module only decides where
libcupti is, starts it when the runtime is built and writes the event log's lines about it
(spec/runtime.md, "Timeline").
"""

from __future__ import annotations

import ctypes as C
import glob
import os
import sys
from pathlib import Path

ENV_CUPTI = "NEUTRINO_CUPTI"
TOOLKIT_GLOBS = ("/usr/local/cuda*/targets/x86_64-linux/lib/libcupti.so*", "/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*")
WHEEL_DIRS = ("nvidia/cu13/lib", "nvidia/cuda_cupti/lib")
COUNT_NAMES = ("records", "kernels", "memcpys", "memsets", "probed", "dropped", "names", "no_thread", "api_records",
               "probe_correlations", "forwarded_to_program", "program_had_no_room", "with_host_time",
               "launch_callbacks", "no_gpu_time", "hooked_launches", "hook_joined", "hook_passed_over",
               "graph_replays", "graph_replays_sampled", "graph_replays_whole", "graph_trace_switches",
               "graph_trace_switch_ns", "graph_execs_untraced", "graph_replays_quiet",
               "kernel_records_switches", "kernel_records_switch_ns", "kernel_records_switch_errors")
PROFILER_CALLS = {1: "register_callbacks", 2: "enable", 3: "disable", 4: "flush_all", 5: "finalize", 7: "subscribe",
                  8: "unsubscribe", 9: "timestamp_callback", 10: "clock_flush"}
INFO_BYTES = 4096
DEFAULT_LEVEL = "copies,host,hooks"  # shim/cupti.c's default NEUTRINO_TIMELINE_LEVEL


def _wheel_candidates() -> list[str]:
    found = []
    for base in sys.path:
        for sub in WHEEL_DIRS:
            found += sorted(glob.glob(os.path.join(base or ".", sub, "libcupti.so*")), reverse=True)
    return found


def _toolkit_candidates() -> list[str]:
    return [p for pattern in TOOLKIT_GLOBS for p in sorted(glob.glob(pattern), reverse=True)]


def find_cupti(env=None) -> tuple[str | None, str]:
    """(path of a libcupti, where it came from) or (None, why none). Order: $NEUTRINO_CUPTI;
    PyTorch's wheel copy when torch is imported (the shim prefers a libcupti the process already
    loaded anyway); the CUDA toolkit; the wheels on sys.path."""
    env = os.environ if env is None else env
    chosen = env.get(ENV_CUPTI)
    if chosen:
        return (chosen, ENV_CUPTI) if os.path.isfile(chosen) else (None, f"{ENV_CUPTI}={chosen} is not a file")
    groups = [("toolkit", _toolkit_candidates()), ("wheel", _wheel_candidates())]
    if "torch" in sys.modules:
        groups.reverse()
    for origin, paths in groups:
        for p in paths:
            if os.path.isfile(p):
                return p, origin
    return None, (f"no libcupti found (set {ENV_CUPTI}; looked in {', '.join(TOOLKIT_GLOBS)} and "
                  f"{', '.join(WHEEL_DIRS)} under sys.path)")


class Timeline:
    """The shim's CUPTI recorder for one run directory."""

    def __init__(self, lib, run_dir: Path, info: dict):
        self.lib, self.run_dir, self.info = lib, run_dir, info
        self.begin = lib.neutrino_timeline_begin_probed
        self.end = lib.neutrino_timeline_end_probed
        self.begin.restype = C.c_uint64
        self.end.argtypes = [C.c_uint64]
        self.cancel = lib.neutrino_timeline_cancel_probed  # the probed kernel never ran: its token given back
        self.cancel.argtypes = [C.c_uint64]
        self._enter = getattr(lib, "neutrino_timeline_launch_enter", None)
        if self._enter is not None:
            self._enter.restype = C.c_void_p
            self._enter.argtypes = [C.c_void_p, C.c_void_p, C.c_int, C.POINTER(C.c_uint * 6)]
            lib.neutrino_timeline_launch_exit.argtypes = [C.c_void_p, C.c_int]
        self.summary: dict | None = None

    def launch_enter(self, func: int, stream: int, dims: tuple[int, ...]):
        """A launch of ours to the driver directly, entered in its stream's queue as the shim's launch
        hooks enter the program's (level `hooks`; shim/cupti.c): its record gets its thread and host time."""
        if self._enter is None:
            return None
        return self._enter(func, stream, 0, C.byref((C.c_uint * 6)(*dims)))

    def launch_exit(self, entry, rc: int) -> None:
        if self._enter is not None:
            self.lib.neutrino_timeline_launch_exit(entry, rc)

    def stop(self, trace) -> dict:
        """Flush and close timeline.bin; write the exit counts (and the program's profiler calls)."""
        if self.summary is not None:
            return self.summary
        counts = (C.c_uint64 * len(COUNT_NAMES))()
        self.lib.neutrino_timeline_stop(counts, len(COUNT_NAMES))
        summary = dict(zip(COUNT_NAMES, (int(c) for c in counts)))
        try:
            summary["probed_by_order"] = join_probed_by_order(self.run_dir)
        except Exception as e:  # noqa: BLE001 - an unreadable trace leaves the records unflagged
            summary["probed_by_order"], summary["join_error"] = 0, f"{type(e).__name__}: {e}"
        summary.update(_kernel_origins(self.run_dir))
        self.summary = summary
        _log_profiler_calls(self.lib, trace)
        trace.event("timeline_counts", **summary)
        _check_sampled_graph_replays(summary, trace)
        return summary


SMALL_TIMELINE = 50_000  # records: fewer are counted in Python (timeline_format.kernel_counts) unless numpy is loaded


def _kernel_origins(run_dir: Path) -> dict:
    from neutrino import timeline_format

    try:  # a run that probed nothing has not imported numpy: for a small timeline, reading it costs less
        if "numpy" not in sys.modules and timeline_format.record_count(run_dir) <= SMALL_TIMELINE:
            return timeline_format.kernel_counts(run_dir)
    except (OSError, timeline_format.TraceError) as e:
        return {"by_origin": {}, "error": str(e)}
    from neutrino.timeline import TraceError, kernels_by_origin, read_timeline

    try:
        tl = read_timeline(run_dir, untimed=True)  # a kernel without GPU time still ran: counted
    except (OSError, TraceError) as e:
        return {"by_origin": {}, "error": str(e)}
    kernels = tl[tl["kind"] == 1]  # the reader leaves out our calibration kernel (clock.py)
    flagged = int(((kernels["flags"] & 1) != 0).sum())
    # replays with a kernel record (a quiet replay's copy and memset nodes are still recorded: spec/runtime.md)
    nodes = tl[((tl["flags"] & 2) != 0) & (tl["graph_exec"] > 0) & (tl["kind"] == 1)]
    with_nodes = len({(int(g), int(r)) for g, r in zip(nodes["graph_exec"].tolist(), nodes["graph_replay"].tolist())})
    return {"kernels": len(kernels), "by_origin": kernels_by_origin(tl), "kernels_flagged_probed": flagged,
            "graph_replays_with_nodes": with_nodes}


def _check_sampled_graph_replays(summary: dict, trace) -> None:
    """Graph replays launched to be recorded node by node (spec/runtime.md "Graph replays") whose nodes CUPTI did
    not record: one line in the event log saying how to record every replay node by node instead."""
    launched = summary.get("graph_replays_sampled", 0)
    missing = launched - summary.get("graph_replays_with_nodes", 0)
    if launched and missing > 0:
        trace.event("timeline_graph_records", sampled_launched=launched, missing=missing,
                    note=f"CUPTI recorded no node of {missing} of the {launched} graph replays launched to be "
                         "recorded node by node; NEUTRINO_TIMELINE_GRAPH_NODES=all records every replay so")


def join_probed_by_order(run_dir: Path) -> int:
    """Flag the probed launches that external correlation did not (its API records are off by
    default, spec/runtime.md "Timeline"). Per kernel name, apart for stream launches and graph
    replays: the trace's probed launches (result/index.bin order) and the unflagged kernel records
    of that name (correlation, then start order) are paired in order when they are as many; else,
    for stream launches, launch i of the kernel (index.bin's `kernel_launch`) is the i-th record
    when every launch of it is on the timeline. Rewrites the records in place; returns how many
    it flagged."""
    path = run_dir / "timeline.bin"
    if not (run_dir / "result" / "index.bin").exists() or not path.exists():
        return 0  # (before numpy's import: a run that probed nothing has no index)
    import numpy as np

    from neutrino import trace as nt
    from neutrino.timeline import FLAG_GRAPH, FLAG_PROBED, HEADER_BYTES, read_header, read_names, record_dtype

    names = read_names(run_dir)
    with open(path, "rb") as fh:
        size = read_header(fh.read(HEADER_BYTES), path)
    n = (path.stat().st_size - HEADER_BYTES) // size
    if n <= 0:
        return 0
    recs = np.memmap(path, dtype=record_dtype(size), mode="r+", offset=HEADER_BYTES, shape=(n,))
    probed = (recs["kind"] == 1) & ((recs["flags"] & FLAG_PROBED) != 0)
    joined = set(recs["probe_launch"][probed].tolist())
    launches = [la for la in nt.load(run_dir, timeline_durations=False).launches if la.index not in joined]
    flagged = 0
    for graph in (False, True):
        free = (recs["kind"] == 1) & ~probed & (((recs["flags"] & FLAG_GRAPH) != 0) == graph)
        rows = _rows_by_name(recs, np.flatnonzero(free), names)
        for la, row in _pairs(launches, rows, graph):
            recs["flags"][row] |= FLAG_PROBED
            recs["probe_launch"][row] = la.index
            flagged += 1
    recs.flush()
    return flagged


def _rows_by_name(recs, rows, names: list[str]) -> dict[str, list[int]]:
    import numpy as np

    order = rows[np.lexsort((recs["start_ns"][rows], recs["correlation"][rows]))]
    out: dict[str, list[int]] = {}
    for i in order:
        nid = int(recs["name_id"][i])
        out.setdefault(names[nid] if nid < len(names) else "", []).append(int(i))
    return out


def _pairs(launches, rows: dict[str, list[int]], graph: bool):
    """(launch, record row) pairs of one kind of launch (stream or graph replay), per kernel name."""
    mine: dict[str, list] = {}
    for la in sorted(launches, key=lambda la: la.index):
        if (la.graph is not None) == graph:
            mine.setdefault(la.kernel, []).append(la)
    for kernel, las in mine.items():
        recs = rows.get(kernel, [])
        if len(recs) == len(las):
            yield from zip(las, recs)
        elif not graph and max(int(la.event.get("kernel_launch", -1)) for la in las) < len(recs):
            yield from ((la, recs[int(la.event["kernel_launch"])]) for la in las if la.event.get("kernel_launch", -1) >= 0)


def _log_profiler_calls(lib, trace) -> None:
    """The program's own CUPTI calls (torch.profiler, jax.profiler) that reached the shim."""
    n = 256
    buf = (C.c_uint64 * (3 * n))()
    made = lib.neutrino_timeline_profiler_calls(buf, n)
    if not made:
        return
    calls = [{"time": buf[3 * i] / 1e9, "call": PROFILER_CALLS.get(buf[3 * i + 1], "?"),
              "kind": C.c_int64(buf[3 * i + 2]).value} for i in range(min(made, n))]
    trace.event("timeline_profiler", calls=made, first=calls[:64],
                note="the program's profiler shared CUPTI with the timeline: its buffers got copies of the "
                     "records of the kinds it enabled (no gap in our records); a subscribe of kind 2 shared "
                     "our callback subscriber (its callbacks called from ours), kind 1 made ours step aside")
    for start, end in host_gaps(calls):
        trace.event("timeline_host_gap", start=start, end=end,
                    note="the program subscribed to CUPTI's callbacks (one subscriber per process): the launch "
                         "callbacks stepped aside, so records of copies, memsets and graph replays (and of kernel "
                         "launches, at a level without `hooks`) in this window have no host time or thread "
                         "(tid 0); end null: until the timeline stopped")


def host_gaps(calls: list[dict]) -> list[tuple[float, float | None]]:
    """(start, end) of each window in which the program held CUPTI's subscriber and our launch
    callbacks had stepped aside: a `subscribe` call with kind 1 up to the next `unsubscribe`
    (end None when there was none)."""
    gaps, opened = [], None
    for c in calls:
        if c["call"] == "subscribe" and c["kind"] == 1 and opened is None:
            opened = c["time"]
        elif c["call"] == "unsubscribe" and opened is not None:
            gaps.append((opened, c["time"]))
            opened = None
    if opened is not None:
        gaps.append((opened, None))
    return gaps


def start(shim_lib, trace, enabled: bool = True) -> Timeline | None:
    """Start the timeline for `trace` (a TraceDir); one `timeline` event says how or why not."""
    if not enabled:
        trace.event("timeline", enabled=False, reason="--no-timeline")
        return None
    fn = getattr(shim_lib, "neutrino_timeline_start", None)
    if fn is None:
        trace.event("timeline", enabled=False, reason="the shim has no timeline (built before it existed)")
        return None
    path, where = find_cupti()
    info = C.create_string_buffer(INFO_BYTES)
    trace.materialize()
    fn.argtypes = [C.c_char_p, C.c_char_p, C.c_char_p, C.c_int]
    rc = fn(str(trace.path).encode(), (path or "").encode(), info, INFO_BYTES)
    fields = parse_info(info.value.decode(errors="replace"))
    if rc != 0:
        reason = fields.get("reason", "unknown")
        if path is None and "cannot load" in reason:
            reason = where
        trace.event("timeline", enabled=False, reason=reason)
        return None
    trace.event("timeline", enabled=True, library=fields.get("library"), found=where,
                version=int(fields.get("version", 0) or 0), kinds=fields.get("kinds", "").split(),
                clock="CLOCK_REALTIME (CUPTI's default on Linux)",
                clock_offset_ns=int(fields.get("clock_offset_ns", 0) or 0),
                api_cbids=int(fields.get("api_records", 0) or 0),
                host_callbacks=int(fields.get("host_callbacks", 0) or 0),
                cupti_settings=parse_settings(fields.get("cupti_settings", "")),
                graph_records=fields.get("graph_records", "nodes"),
                **({"host_error": f"cuptiSubscribe failed (CUPTI error {fields['host_error']}): records have no host "
                                  f"time or thread"} if "host_error" in fields else {}),
                level=os.environ.get("NEUTRINO_TIMELINE_LEVEL",
                                                                                         DEFAULT_LEVEL))
    return Timeline(shim_lib, trace.path, fields)


def parse_settings(text: str) -> dict[str, int | str]:
    """The shim's `cupti_settings` line (`name=value` words, spec/runtime.md "CUPTI settings"): numbers as ints;
    `error:N` (CUPTI refused) and `bad:TEXT` (the variable is not a number) kept as text."""
    out: dict[str, int | str] = {}
    for word in text.split():
        name, _, value = word.partition("=")
        out[name] = int(value) if value.isdigit() else value
    return out


def parse_info(text: str) -> dict[str, str]:
    """The shim's tab-separated `key<TAB>value...` lines."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition("\t")
        if key:
            out[key] = value.replace("\t", " ").strip()
    return out
