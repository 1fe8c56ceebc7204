"""Corrupted traces never escape as tracebacks, hangs or gigabytes (issue 30 §6).

Every reader entry point (`neutrino report`/`export`, and the API: load, load_job,
read_result, Launch.maps, MapData.valid/totals/histogram, Trace.kernel_info,
read_events, the find_* helpers) reads what is valid and says what it skipped
(Trace.problems, the report's warnings), or raises TraceError naming the file and
the offset. First one minimal input per class of the independent campaign's
reproducers, written with the writers (tests/tracefuzz.py) and then damaged; then
memory (a report over many launches, a sparse section declaring 2^27 units); then
a fuzz test: valid traces of several tools, random corruptions, every entry point
in a subprocess whose own peak resident memory (os.wait4) and time are checked.
The default profile takes a few seconds; NEUTRINO_FUZZ_LONG=1 runs 20 times more
cases, with pictures, from random seeds.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import neutrino.trace as nt
import tracefuzz as tf
from neutrino.cli import main as cli

LONG = os.environ.get("NEUTRINO_FUZZ_LONG") == "1"
GIB = 1 << 30


def _run(tmp_path: Path, seed, rng_seed: int = 0) -> Path:
    return seed(tmp_path, np.random.default_rng(rng_seed))


def _report(capsys, *argv) -> tuple[int, str, str]:
    rc = cli(["report", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


# ---------------------------------------------------------------- report/export reproducers


def test_a_rank_without_its_start_event_is_reported(tmp_path, capsys):
    """KeyError: 'pid': the rank's description read the start event's pid unconditionally."""
    job = _run(tmp_path, tf.seed_job)
    log = job / "rank1" / "event.log"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines() if '"event": "start"' not in line))
    rc, out, err = _report(capsys, job, "--out", tmp_path / "plots")
    assert rc == 0 and "== rank 1\n" in out and "== rank 0 (pid 100)" in out
    rc, out, _ = _report(capsys, job, "--format", "csv")
    assert rc == 0 and out.startswith("rank,kernel")
    assert cli(["export", str(job), "--perfetto", str(tmp_path / "job.json")]) == 0
    names = [e["args"]["name"] for e in json.loads((tmp_path / "job.json").read_text())["traceEvents"]
             if e.get("name") == "process_name"]
    assert names == ["rank 0 (pid 100)", "rank 1"]


def test_a_tensorop_counter_named_cnt_is_counted(tmp_path, capsys):
    """KeyError: 'count': the sum map's reader wanted `count`, which the spec lets a probe spell `cnt`."""
    rng = np.random.default_rng(1)
    launches = [("mma", (2, 1, 1), (32, 1, 1), [tf.sum_section("tensorop", ["cnt", "warp_count", "active_warps"], rng)])
                for _ in range(3)]
    run = tf.write_index_run(tmp_path / "run", launches)
    expected = sum(la.maps["tensorop"].totals()["cnt"] for la in nt.load(run).launches)
    rc, out, _ = _report(capsys, run, "--format", "json")
    (row,) = json.loads(out)["kernels"]
    assert rc == 0 and row["tensorop.mma_threads"] == expected > 0


def _sum_map_with_record_bytes(tmp_path: Path, record_bytes: int) -> Path:
    section = tf.sum_section("counters", ["a"], np.random.default_rng(2))
    run = tf.write_event_run(tmp_path / "run", [("k", (1, 1, 1), (32, 1, 1), [section])])
    path = run / "result" / "0.bin"
    raw = bytearray(path.read_bytes())
    at = nt.FILE_HEADER.itemsize + 68  # the map header's record_bytes
    raw[at:at + 4] = np.uint32(record_bytes).tobytes()
    path.write_bytes(bytes(raw))
    return run


def test_a_sum_map_whose_records_are_not_u64_is_refused_with_the_offset(tmp_path, capsys):
    """ValueError: buffer size must be a multiple of element size (12-byte sum records)."""
    run = _sum_map_with_record_bytes(tmp_path, 12)
    with pytest.raises(nt.TraceError, match=r"0\.bin: map counters: records of 12 bytes .* header at offset 48"):
        nt.read_result(run / "result" / "0.bin")
    rc, _, err = _report(capsys, run, "--format", "csv")
    assert rc == 1 and "records of 12 bytes" in err and "none of the 1 launch result(s) could be read" in err


def test_export_of_a_trace_with_corrupt_results_leaves_them_out(tmp_path, capsys):
    run = _sum_map_with_record_bytes(tmp_path, 12)
    assert cli(["export", str(run), "--perfetto", str(tmp_path / "out.json")]) == 0
    assert "records of 12 bytes" in capsys.readouterr().err
    assert json.loads((tmp_path / "out.json").read_text())["traceEvents"] is not None


# ---------------------------------------------------------------- API reproducers


def test_a_probe_that_is_not_utf8_is_replaced_and_said(tmp_path, capsys):
    """UnicodeDecodeError from load (and the CLI refused the whole trace)."""
    run = _run(tmp_path, tf.seed_block_sched)
    (run / "probe.toml").write_bytes(b"[block_sched]\n# caf\xe9\n")
    t = nt.load(run)
    assert len(t.launches) == 3 and "caf\ufffd" in t.probe_text
    assert any("probe.toml: byte offset 19: not UTF-8" in p for p in t.problems)
    rc, out, err = _report(capsys, run, "--format", "csv")
    assert rc == 0 and "warning:" in err and "probe.toml" in err and out.count("\n") == 2


@pytest.mark.parametrize("name", ["event.log", "probe.toml", "result/index.bin", "result/0.bin"])
def test_a_directory_where_a_file_should_be(tmp_path, capsys, name):
    """IsADirectoryError: event.log a directory. The other files: skipped and said, or TraceError."""
    run = _run(tmp_path, tf.seed_block_sched if name != "result/index.bin" else tf.seed_sums)
    (run / name).unlink()
    (run / name).mkdir()
    if name == "event.log" or name == "result/index.bin":
        with pytest.raises(nt.TraceError, match=f"{name}: .*not a regular file"):
            nt.load(run)
        rc, _, err = _report(capsys, run, "--format", "csv")
        assert rc == 1 and f"{name}: " in err
    elif name == "probe.toml":
        t = nt.load(run)
        assert t.probe_text == "" and len(t.launches) == 3
        assert "probe.toml: the probe is not a regular file" in t.problems[0]
    else:
        t = nt.load(run)
        assert [la.index for la in t.launches] == [1, 2]
        assert "launch event 0 skipped" in t.problems[0]
        with pytest.raises(nt.TraceError, match="0.bin: a result file is not a regular file"):
            nt.read_result(run / name)


def test_a_fifo_named_by_a_trace_does_not_block(tmp_path):
    run = _run(tmp_path, tf.seed_block_sched)
    (run / "result" / "0.bin").unlink()
    os.mkfifo(run / "result" / "0.bin")
    with pytest.raises(nt.TraceError, match="not a regular file"):
        nt.read_result(run / "result" / "0.bin")
    os.unlink(run / "probe.toml")
    os.mkfifo(run / "probe.toml")
    assert "not a regular file" in nt.load(run).problems[0]


@pytest.mark.parametrize("content, message", [
    (b'{"version": 1, "kernels": {"sched', r"kernel\.json:1:28: byte offset 27: corrupt kernel.json: Unterminated"),
    (b'{"version": 1, "kernels": {"sch\xffed": {}}}', r"kernel\.json: byte offset 31: not UTF-8"),
    (b'[1, 2]', r"kernel\.json: not a JSON object"),
    (b'{"version": 1, "kernels": [1]}', r'kernel\.json: no "kernels" object'),
])
def test_garbage_kernel_json_is_a_trace_error_with_the_offset(tmp_path, content, message):
    """JSONDecodeError from Trace.kernel_info."""
    run = _run(tmp_path, tf.seed_block_sched)
    t = nt.load(run)
    assert t.kernel_info("sched_kernel")["maps"][0]["name"] == "block_sched"
    (path,) = run.glob("kernel/*/kernel.json")
    path.write_bytes(content)
    with pytest.raises(nt.TraceError, match=message):
        t.kernel_info("sched_kernel")
    path.unlink()
    path.mkdir()
    with pytest.raises(nt.TraceError, match="kernel.json is not a regular file"):
        t.kernel_info("sched_kernel")


def test_kernel_dirs_and_results_outside_the_run_are_not_followed(tmp_path):
    run = _run(tmp_path, tf.seed_block_sched)
    log = run / "event.log"
    text = log.read_text().replace('"result": "result/1.bin"', '"result": "/dev/stdin"')
    text = text.replace('"result": "result/2.bin"', '"result": "../x/result/2.bin"')
    log.write_text(text.replace('"kernel_dir": "kernel/', '"kernel_dir": "../kernel/'))
    t = nt.load(run)
    assert [la.index for la in t.launches] == [0] and len(t.problems) == 2
    assert all("leads out of the run directory" in p for p in t.problems)
    assert t.kernel_info("sched_kernel") is None


def test_a_field_named_unit_reads_with_the_unit_column_renamed(tmp_path):
    """ValueError: field 'unit' occurs more than once, from MapData.valid() of a valid probe."""
    rng = np.random.default_rng(3)
    grid, block = (2, 1, 1), (64, 1, 1)
    fields = [("unit", "u32", 0), ("_unit", "u32", 4)]
    section = tf.array_section("m", "warp", fields, 8, 2, grid, block, rng)
    run = tf.write_event_run(tmp_path / "run", [("k", grid, block, [section])])
    data = nt.load(run).launches[0].maps["m"]
    assert data.unit_column == "__unit"
    valid = data.valid()
    assert valid.dtype.names == ("unit", "_unit", "__unit")
    counts = np.minimum(np.asarray(data.counts, np.int64), 2)
    assert list(valid["__unit"]) == list(np.repeat(np.arange(len(counts)), counts))
    records = np.asarray(data.records)
    assert list(valid["unit"]) == [int(records[u, s]["unit"]) for u in range(len(counts)) for s in range(counts[u])]


@pytest.mark.parametrize("at, what", [(1, "map name"), (nt.MAP_HEADER.itemsize + 2, "field name of map block_sched")])
def test_names_with_a_nul_inside_are_refused(tmp_path, at, what):
    run = _run(tmp_path, tf.seed_block_sched)
    path = run / "result" / "1.bin"
    raw = bytearray(path.read_bytes())
    raw[nt.FILE_HEADER.itemsize + at] = 0
    path.write_bytes(bytes(raw))
    with pytest.raises(nt.TraceError, match=f"1.bin: {what} holds a NUL byte .*offset 48"):
        nt.read_result(path)


def test_repeated_and_shuffled_event_lines(tmp_path):
    run = _run(tmp_path, tf.seed_block_sched)
    lines = (run / "event.log").read_text().splitlines(keepends=True)
    lines = lines + lines[2:4] + ["{not json\n", "\x00\x01\n"]
    random.Random(4).shuffle(lines)
    (run / "event.log").write_text("".join(lines))
    t = nt.load(run)
    assert [la.index for la in t.launches] == [0, 1, 2]
    assert sum("an index seen before" in p for p in t.problems) == 2  # launches 0 and 1 twice
    assert any("2 line(s) that are not JSON events skipped (the first at byte offset" in p for p in t.problems)


@pytest.mark.parametrize("change", [
    {"index": 10**30}, {"index": -1}, {"grid": [2**40, 1, 1]}, {"block": [2**20, 2**20, 1]},
    {"result_offset": 2**64}, {"duration_ns": float("inf")}, {"shared_bytes": 2**33},
])
def test_huge_ids_and_sizes_in_launch_events_are_skipped_and_said(tmp_path, change):
    run = _run(tmp_path, tf.seed_block_sched)
    log = run / "event.log"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    for ev in events:
        if ev["event"] == "launch" and ev["index"] == 1:
            ev.update(change)
    log.write_text("".join(json.dumps(ev) + "\n" for ev in events))
    t = nt.load(run)
    assert [la.index for la in t.launches] == [0, 2]
    assert len(t.problems) == 1 and "launch event" in t.problems[0] and "skipped" in t.problems[0]


def test_huge_values_in_the_launch_index(tmp_path, capsys):
    run = _run(tmp_path, tf.seed_sums)
    path = run / "result" / "index.bin"
    raw = bytearray(path.read_bytes())
    records = np.frombuffer(raw, nt.INDEX_RECORD, offset=16).copy()
    records[0]["seq"] = 2**64 - 1
    records[1]["offset"] = 2**62
    records[2]["block"] = (2**32 - 1, 2**32 - 1, 1)
    path.write_bytes(bytes(raw[:16]) + records.tobytes())
    t = nt.load(run)
    assert [la.index for la in t.launches] == [1] and len(t.problems) == 2
    with pytest.raises(nt.TraceError, match="no result frame at offset 4611686018427387904"):
        t.launches[0].maps
    rc, _, err = _report(capsys, run, "--format", "csv")
    assert rc == 1 and "no result frame at offset" in err


def test_names_that_are_not_utf8_print(tmp_path):
    """A lone surrogate escaped in the event log, a run directory whose name is not UTF-8: printed
    by a real `neutrino report` (a strict stdout), not a UnicodeEncodeError."""
    parent = tmp_path / "t"
    parent.mkdir()
    run = tf.seed_sums(parent, np.random.default_rng(7))
    odd = Path(os.fsdecode(bytes(run) + b"\xff"))
    run.rename(odd)
    log = odd / "event.log"
    log.write_text(log.read_text().replace('"kernel": "mma_kernel"', '"kernel": "mma\\udc80"'))
    assert nt.load(odd).launches[0].kernel == "mma\ufffd"
    proc = subprocess.run([sys.executable, "-m", "neutrino", "report", str(parent)], capture_output=True,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(tf.ROOT)}, timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    assert "mma\ufffd".encode() in proc.stdout and b"\\udcff" in proc.stdout


# ---------------------------------------------------------------- memory


def _child_python(code: str, timeout: float = 60) -> tuple[int, str, int, float]:
    """Run `code` in a fresh interpreter: (exit status, stderr, the peak RSS it reports on its last
    stdout line, seconds)."""
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(tf.ROOT), "OPENBLAS_NUM_THREADS": "1"})
    lines = proc.stdout.decode(errors="replace").strip().splitlines()
    rss = int(lines[-1]) if lines and lines[-1].isdigit() else -1
    return proc.returncode, proc.stderr.decode(errors="replace"), rss, time.monotonic() - began


REPORT_PEAK = """
import resource, sys
from neutrino.cli import main
rc = main({argv!r})
sys.stdout.write("\\n%d\\n" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
sys.exit(rc)
"""

API_PEAK = """
import resource, sys
import neutrino.trace as nt
t = nt.load({path!r})
for launch in t.launches:
    for data in launch.maps.values():
        assert len(data.valid()) == {valid} and data.dropped == 0 and data.record_stats() == ({valid}, 0)
sys.stdout.write("\\n%d\\n" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
"""


def test_a_sparse_section_declaring_2_27_units_costs_no_gigabytes(tmp_path):
    """3.7 GB in `report`, 2.1 GB in the API before: the counts were converted whole, and valid()
    built a mask of every slot. Now memory is a chunk's, whatever the header declares."""
    run = _run(tmp_path, tf.seed_block_sched)
    tf.write_sparse_result(run / "result" / "0.bin", 1 << 27, counts_at=[5, 1 << 26])
    for n in (1, 2):
        (run / "result" / f"{n}.bin").unlink()
    assert os.stat(run / "result" / "0.bin").st_blocks * 512 < 1 << 20  # a sparse file indeed
    # Issue 30's bound is 1 GB resident. Alone this stays under 200 MiB; once, inside the whole suite on a
    # loaded 2-core machine, the API child peaked at 518 MiB (probably the 512 MiB of declared counts, mapped from
    # the hole, not read): under the bound, so the bound is the issue's.
    rc, err, rss, seconds = _child_python(API_PEAK.format(path=str(run), valid=2), timeout=120)
    assert rc == 0, err
    assert rss < 1 << 30 and seconds < 20, (rss >> 20, seconds)
    code = REPORT_PEAK.format(argv=["report", str(run), "--format", "json"])
    rc, err, rss, seconds = _child_python(code, timeout=120)
    assert rc == 0 and "Traceback" not in err, err
    assert rss < 1 << 30 and seconds < 20, (rss >> 20, seconds)


def _peak_traced(function, *args):
    """(result, peak bytes numpy and Python allocated while `function` ran)."""
    tracemalloc.start()
    try:
        return function(*args), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_sparse_event_log_and_index_are_read_around_their_holes(tmp_path):
    """A full disk leaves runs of NULs (holes): no line of them is held, no hole is read."""
    run = _run(tmp_path, tf.seed_sums)
    log, index = run / "event.log", run / "result" / "index.bin"
    text = log.read_bytes()
    with open(log, "r+b") as fh:
        fh.seek(256 << 20)  # 256 MiB of NULs, then the events again
        fh.write(b"\n" + text + b"{cut")
    size = index.stat().st_size
    with open(index, "r+b") as fh:
        fh.seek(size + (64 << 20) // 96 * 96)
        fh.write(index.read_bytes()[16:16 + 2 * 96])
    began = time.monotonic()
    trace, peak = _peak_traced(nt.load, run)
    assert time.monotonic() - began < 10 and peak < 32 << 20, peak
    assert sum(ev["event"] == "start" for ev in trace.events) == 2  # before and after the hole
    assert [la.index for la in trace.launches] == [0, 1, 2]  # the copies after the hole: seen before
    assert any("line(s) that are not JSON events skipped (the first at byte offset" in p for p in trace.problems)
    assert any("record(s) of zeros (seq 0) skipped" in p for p in trace.problems)
    assert sum("an index seen before" in p for p in trace.problems) == 2


def _retained_by_report(tmp_path: Path, launches: int) -> int:
    """Bytes a report of `launches` dmat launches (one kernel) still holds when it is done."""
    from neutrino.analysis import report as R

    run = tf.seed_dmat(tmp_path / f"n{launches}", np.random.default_rng(5), launches=launches,
                       grid=(4, 1, 1), block=(64, 1, 1))
    trace, loaded = R.load_trace(str(run))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = R.analyze(trace, loaded, keep_full=R.plotted_per_kernel(True, 4))
        assert result.kernels["dmat_kernel"].launches == launches
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_report_memory_does_not_grow_with_each_launch_arrays(tmp_path):
    """~1.06 MB kept per dmat launch before (3,000 launches: 3.2 GB): every launch's histogram
    and sections. Now the launches after the plotted ones keep their row's numbers."""
    small, large = _retained_by_report(tmp_path, 8), _retained_by_report(tmp_path, 48)
    per_launch = (large - small) / 40
    assert per_launch < 4096, f"{per_launch:.0f} bytes kept per launch"


def _tool_results(tmp_path):
    """(tool module, [full results]) of a trace of each tool whose results retain.summary_only shrinks."""
    from neutrino.analysis import block_sched, dmat, program_progress

    rng = np.random.default_rng(6)
    grid, block = (6, 1, 1), (64, 1, 1)
    out = []
    for tool, section in ((dmat, lambda: tf.dmat_section(grid, block, rng)),
                          (block_sched, lambda: tf.block_sched_section(grid, block, rng)),
                          (program_progress, lambda: tf.progress_section(grid, block, rng))):
        run = tf.write_event_run(tmp_path / tool.__name__, [("k", grid, block, [section()]) for _ in range(3)])
        t = nt.load(run)
        out.append((tool, [tool.analyze_launch(la, la.maps[section().name], t.probe_text) for la in t.launches]))
    return out


def test_summaries_give_the_report_the_same_numbers(tmp_path):
    """retain.summary_only keeps what every tool's kernel row reads: the numbers are the same."""
    from neutrino.analysis import retain, tool_name

    for tool, results in _tool_results(tmp_path):
        full = tool.kernel_numbers(results)
        mixed = tool.kernel_numbers(results[:1] + [retain.summary_only(tool_name(tool), r) for r in results[1:]])
        assert json.dumps(full, sort_keys=True, default=str) == json.dumps(mixed, sort_keys=True, default=str), tool
        assert tool.kernel_summary(results) == tool.kernel_summary(
            [retain.summary_only(tool_name(tool), r) for r in results])


# ---------------------------------------------------------------- fuzz


CASES = 120 if LONG else 12
BATCH = 20 if LONG else 16
PEAK_RSS = GIB


def _fuzz_cases(root: Path, seed: int) -> list[tuple[Path, list[str]]]:
    seeds_dir = root / "seeds"
    rng_np = np.random.default_rng(seed)
    seeds = {name: make(seeds_dir / name, rng_np) for name, make in tf.SEEDS.items()}
    cases = [(path, ["unchanged"]) for path in seeds.values()]
    rng = random.Random(seed)
    for i in range(CASES):
        name = sorted(seeds)[i % len(seeds)]
        dest = root / f"case{i}" / seeds[name].name
        cases.append((dest, tf.corrupted_copy(seeds[name], dest, rng, rng.randrange(1, 4))))
    return cases


def _run_batch(paths: list[Path], out: Path, plots: bool) -> tuple[list[dict], int]:
    """tracefuzz's runner in a subprocess: its results and the subprocess's own peak RSS (os.wait4)."""
    env = {**os.environ, "PYTHONPATH": str(tf.ROOT), "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "NEUTRINO_FUZZ_PLOTS": "1" if plots else "0"}
    with open(out.with_suffix(".stderr"), "wb") as stderr:
        proc = subprocess.Popen([sys.executable, str(Path(tf.__file__)), str(out), *map(str, paths)],
                                stdout=subprocess.DEVNULL, stderr=stderr, env=env, preexec_fn=_limits)
    deadline = time.monotonic() + 60 + 25 * 5 * len(paths)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            raise AssertionError("the fuzz runner did not finish")
        time.sleep(0.05)
    err = out.with_suffix(".stderr").read_text(errors="replace")
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, f"the runner failed (status {proc.returncode}):\n{err[-3000:]}"
    return json.loads(out.read_text()), usage.ru_maxrss * 1024


def _limits() -> None:
    """The fuzz subprocess may not take the machine down when a case runs away (the RSS it
    reaches is measured and checked against PEAK_RSS; this only bounds the damage)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (16 * GIB, 16 * GIB))
    resource.setrlimit(resource.RLIMIT_CPU, (600, 600))


def test_corrupted_traces_fuzz(tmp_path):
    seed = random.randrange(1 << 30) if LONG else 30
    cases = _fuzz_cases(tmp_path, seed)
    what = {str(path): done for path, done in cases}
    failures = []
    for start in range(0, len(cases), BATCH):
        batch = [path for path, _ in cases[start:start + BATCH]]
        results, peak = _run_batch(batch, tmp_path / f"results{start}.json", plots=LONG)
        assert len(results) == 5 * len(batch)
        for r in results:
            if r["status"] not in ("ok", "refused") or r["seconds"] > tf.ENTRY_SECONDS or r["peak_rss"] > PEAK_RSS:
                failures.append(f"{r['entry']} on {r['trace']} ({'; '.join(what[r['trace']])}): {r['status']}, "
                                f"{r['seconds']:.1f} s, {r['peak_rss'] >> 20} MiB\n{r['detail'][-2000:]}")
        assert peak <= PEAK_RSS, f"the runner reached {peak >> 20} MiB"
    assert not failures, f"seed {seed}:\n" + "\n".join(failures[:5])


def test_the_fuzz_runner_sees_tracebacks_hangs_and_bad_exits(monkeypatch):
    monkeypatch.setattr(tf, "ENTRY_SECONDS", 0.2)

    def crash():
        raise KeyError("pid")

    def hang():
        while True:
            pass

    def silent():
        return 1

    assert tf.run_one("x", crash, ())["status"] == "traceback"
    assert tf.run_one("x", hang, ())["status"] == "hang"
    assert tf.run_one("x", silent, ())["status"] == "bad-exit"
    assert tf.run_one("x", lambda: 0, ())["status"] == "ok"
