"""Issue 29, the phases from the spawn to the exit: the shim's constructor clock and the kernel lookups
(`constructor`, `lookup`), the child's `exec`, `interpreter` and `own_work` (listed, not added), modules
-k cannot select left unexamined (name_filter.py), and the launcher's exit without the interpreter's
teardown (quick_exit.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import neutrino.trace as nt
from neutrino.runtime.modules.name_filter import may_hold_selected, pattern_literals
from neutrino.runtime.start import phases as ph
from neutrino.runtime.start.launcher import run_main
from neutrino.runtime.start.quick_exit import runs_a_program

HERE = Path(__file__).parent
FAKE = HERE / "fakecuda"
VEC_PTX = HERE / "data" / "corpus" / "nvcc" / "vec.sm90.ptx"
BINARIES = HERE / "data" / "binaries"


@pytest.fixture(scope="module")
def fakecuda(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("fakecuda")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(FAKE / "fakecuda.c")], check=True)
    return d


def _run(tmp_path, fakecuda, capfd, *options):
    env = {"LD_LIBRARY_PATH": str(fakecuda), "FAKECUDA_BUFPARAM": "4", "NEUTRINO_CACHE_DIR": str(tmp_path / "cache")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out = tmp_path / f"trace{time.monotonic_ns()}"
    started = time.perf_counter()
    try:
        rc = run_main(["-p", "block_sched", "--timings", "-o", str(out), *options, "--", sys.executable,
                       str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "3"])
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    wall = time.perf_counter() - started
    line = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("neutrino: timings:")][0]
    return rc, nt.read_events(out / "event.log"), line, wall


def test_literals_of_the_patterns():
    assert pattern_literals(["saxpy", "=add", "x:y"]) == (b"saxpy", b"add", b"x:y")


def test_a_module_holds_a_selected_kernel_only_if_its_bytes_show_the_name():
    ptx = VEC_PTX.read_bytes()
    assert may_hold_selected(ptx, (b"saxpy4",)) and not may_hold_selected(ptx, (b"nomatchxyz",))
    assert may_hold_selected(ptx, ())  # no -k: every module is examined
    assert may_hold_selected(ptx, (b"nomatchxyz", b"saxpy"))  # any pattern will do
    cubin = (BINARIES / "add_sm90_debug.cubin").read_bytes()
    assert may_hold_selected(cubin, (b"add",)) and not may_hold_selected(cubin, (b"nomatchxyz",))


def test_a_fatbin_whose_compressed_entries_are_all_sass_is_not_examined():
    from tests.test_ptx_source import PTX_80, make_entry, make_fatbin, ptx_entry

    sass = make_entry(2, 90, b"\x7fELF" + bytes(60) + b"hidden_kernel_name", compression="zstd")
    assert not may_hold_selected(make_fatbin(sass), (b"nomatchxyz",))  # no PTX: nothing there can be probed
    assert not may_hold_selected(make_fatbin(ptx_entry(PTX_80, 80), sass), (b"nomatchxyz",))  # plain PTX shows names
    assert may_hold_selected(make_fatbin(ptx_entry(PTX_80, 80, compression="lz4"), sass), (b"nomatchxyz",))
    assert may_hold_selected(make_fatbin(sass), ())  # without -k every module is examined


def test_compressed_or_unknown_images_are_always_examined():
    for name in ("add_80_90.zstd.fatbin", "add_80_90.lz4.fatbin", "add_90a_100f_120.fatbin"):  # compressed entries
        assert may_hold_selected((BINARIES / name).read_bytes(), (b"nomatchxyz",)), name
    assert may_hold_selected(b"\x00\x01garbage", (b"nomatchxyz",))  # not an image we walk
    assert may_hold_selected(b"\x7fELF\x02\x01\x01" + bytes(64), (b"nomatchxyz",))  # a host ELF (or a broken one)


def test_nothing_probed_leaves_the_module_unexamined_and_the_phases_cover_the_process(tmp_path, fakecuda, capfd):
    rc, events, line, wall = _run(tmp_path, fakecuda, capfd, "-k", "nomatchxyz")
    assert rc == 0
    modules = [e for e in events if e["event"] == "module"]
    assert modules and all(e["examined"] is False and "-k" in e["reason"] for e in modules)
    assert not [e for e in events if e["event"] == "no_ptx"]
    phases = {e["phase"]: e for e in events if e["event"] == "phase"}
    assert set(phases) <= set(ph.PHASES)
    assert phases["lookup"]["count"] >= 1  # the app looks saxpy4 up once
    ctor, wire = phases["constructor"], phases["wire"]
    assert ctor["started_at"] < wire["started_at"] < time.time() and ctor["seconds"] < 0.01
    process = re.search(r"not added: its process ([\d.]+) s \(exec ([\d.]+), interpreter ([\d.]+), "
                        r"own work ([\d.]+)\)", line)
    assert process, line
    total, exec_s, interpreter, own = map(float, process.groups())
    assert abs(exec_s + interpreter + own - total) < 0.002 and interpreter > 0
    added, rest = line.split("; program ")
    assert "constructor" in added and "lookup x1" in added and "own work" not in added
    program = float(re.match(r"([\d.]+) s", rest).group(1))
    assert total < program + 0.01 < wall


def test_a_matching_pattern_examines_the_module(tmp_path, fakecuda, capfd):
    rc, events, line, _ = _run(tmp_path, fakecuda, capfd, "-k", "saxpy")
    assert rc == 0
    modules = [e for e in events if e["event"] == "module"]
    assert modules and all(e.get("examined", True) and e["source"] for e in modules)
    phases = {e["phase"]: e for e in events if e["event"] == "phase"}
    assert "cache_lookup" in phases  # saxpy4 built for probing
    assert phases["launch"]["count"] == 1  # the first launch only: the C fast path takes the next ones
    # the later two launches took the C fast path, clocked by the shim; the first launch's argument set was
    # written by the Python resolver (launch_args), taken off `launch`
    assert phases["fast_launch"]["count"] == 2 and 0 < phases["fast_launch"]["seconds"] < 5
    assert phases["launch_args"]["count"] >= 1
    assert "fast_launch x2" in line and "launch_args x" in line
    (first,) = [e for e in events if e["event"] == "first_launch"]  # once per process
    assert set(first["steps"]) == {"reserve", "frame", "enqueue", "ring_sizing", "submit", "arguments"}
    in_callback = sum(phases[n]["seconds"] for n in ph.KERNEL_PHASES if n in phases)  # the build ran in it too
    assert 0 < sum(first["steps"].values()) <= in_callback


def test_process_phases_known_answer():
    """exec = constructor start - spawn; interpreter = wire start - constructor end; own work = the
    process's wall time less exec, interpreter, every added phase and exit_process."""
    phases = {"constructor": {"seconds": 0.001, "started_at": 100.010}, "wire": {"seconds": 0.02, "started_at": 100.061},
              "imports": {"seconds": 0.1}, "module_ptx": {"seconds": 0.05}, "exit_process": {"seconds": 0.2},
              "module_jit": {"seconds": 9.0}, "background_jit": {"seconds": 7.0}}
    ph.add_process_start(phases, 100.0, 2.0)
    assert phases["exec"]["seconds"] == pytest.approx(0.010)
    assert phases["interpreter"]["seconds"] == pytest.approx(0.050)
    ours = 0.001 + 0.02 + 0.1 + 0.05
    assert phases["own_work"]["seconds"] == pytest.approx(2.0 - 0.010 - 0.050 - ours - 0.2)
    line = ph.timings_line({}, [phases], 2.0)
    assert f"{ours:.3f} s added" in line  # exec, interpreter, own work: listed, not added
    embedded = {**phases, "start": {"pid": 1, "embedded": True}}  # a C program: Python began at its first CUDA call
    ph.add_process_start(embedded, 100.0, 2.0)
    assert embedded["interpreter"]["seconds"] == 0.0
    assert embedded["own_work"]["seconds"] == pytest.approx(2.0 - 0.010 - ours - 0.2)


def test_which_commands_exit_without_the_interpreter_teardown():
    assert runs_a_program(["-p", "gmem_bytes", "--", "python", "x.py"]) and runs_a_program(["-e", "x"])
    assert not runs_a_program(["report", "trace"]) and not runs_a_program(["--help"]) and not runs_a_program([])
    assert not runs_a_program(["--version"])


def test_the_launcher_exits_with_the_programs_status_and_runs_the_exit_handlers(tmp_path):
    """`python -m neutrino` after a profiled program: the status is the program's, registered exit
    handlers (coverage's) still run, and stdout/stderr are flushed."""
    marker = tmp_path / "handler-ran"
    code = (f"import atexit, sys; atexit.register(lambda: open({str(marker)!r}, 'w').write('yes')); "
            "sys.argv = ['neutrino', '-p', 'gmem_bytes', '-o', sys.argv[1], '--', sys.executable, '-c', "
            "'import sys; sys.exit(7)']; from neutrino.runtime.start.quick_exit import console_main; console_main()")
    path = os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, NEUTRINO_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t")], env=env, capture_output=True, text=True)
    assert res.returncode == 7, res.stderr
    assert marker.read_text() == "yes"
    assert "no kernel seen" in res.stderr  # flushed before the exit


def test_the_layouts_byte_constants_are_the_dtypes_sizes():
    """maps.py sizes frames and the index header without numpy (a process that probes nothing never
    imports it); its constants are the dtypes' sizes."""
    import numpy as np

    from neutrino import maps

    assert maps.FILE_HEADER_BYTES == maps.FILE_HEADER.itemsize
    assert maps.MAP_HEADER_BYTES == maps.MAP_HEADER.itemsize
    assert maps.FIELD_DESC_BYTES == maps.FIELD_DESC.itemsize
    assert maps.INDEX_RECORD_BYTES == maps.INDEX_RECORD.itemsize
    assert maps.INDEX_HEADER_TAIL == np.array([maps.INDEX_VERSION, maps.INDEX_RECORD.itemsize], "<u4").tobytes()


def test_a_process_that_probes_nothing_imports_no_numpy(tmp_path, fakecuda):
    """The driver-only program (no numpy of its own) under -k nomatchxyz: numpy is never imported
    (python -X importtime lists every import of the profiled process, ours included)."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(fakecuda), FAKECUDA_BUFPARAM="4",
               NEUTRINO_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p))
    tiny = HERE.parent / "benchmarks" / "startup_tiny.py"
    res = subprocess.run([sys.executable, "-m", "neutrino", "-p", "block_sched", "-k", "nomatchxyz", "-o",
                          str(tmp_path / "t"), "--", sys.executable, "-X", "importtime", str(tiny), "3"],
                         env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "neutrino.runtime.core" in imported  # the runtime was built (a module was loaded)
    assert "numpy" not in imported


def test_graph_calls_are_the_api_hooks_phase(tmp_path, fakecuda, capfd):
    """The program's graph calls reach our Python graph callback (capture, instantiate, launch: hooks.py);
    their host time there is `api_hooks`, in the kernels group of `--timings`."""
    env = {"LD_LIBRARY_PATH": str(fakecuda), "FAKECUDA_BUFPARAM": "4", "NEUTRINO_CACHE_DIR": str(tmp_path / "cache"),
           "GRAPH_APP_OUT": str(tmp_path / "app.out")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out = tmp_path / "trace"
    try:
        rc = run_main(["-p", "block_sched", "--timings", "-o", str(out), "--graphs", "--", sys.executable,
                       str(FAKE / "graph_app.py"), str(VEC_PTX), "saxpy4", "2", "3"])
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    line = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("neutrino: timings:")][0]
    assert rc == 0
    phases = {e["phase"]: e for e in nt.read_events(out / "event.log") if e["event"] == "phase"}
    hooks = phases["api_hooks"]
    assert hooks["count"] >= 2 * 3 and 0 < hooks["seconds"] < 5  # 2 cycles: capture calls, instantiate, 3 replays
    kernels = re.search(r"kernels ([\d.]+) s \(([^)]*)\)", line)
    assert kernels and f"api_hooks x{hooks['count']}" in kernels.group(2), line


def test_an_environment_sitecustomize_is_the_programs_not_wire(tmp_path, fakecuda, capfd, monkeypatch):
    """Our sitecustomize runs the environment's own first (site/sitecustomize.py): `wire` counts from our
    sitecustomize's first line, and the other one's code (0.3 s here) is the program's start (`interpreter`)."""
    other = tmp_path / "site_other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import time\ntime.sleep(0.3)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(other), os.environ.get("PYTHONPATH", "")]))
    rc, events, line, _ = _run(tmp_path, fakecuda, capfd, "-k", "nomatchxyz")
    assert rc == 0
    wire = {e["phase"]: e for e in events if e["event"] == "phase"}["wire"]
    assert wire["seconds"] < 0.3
    interpreter = float(re.search(r"interpreter ([\d.]+)", line).group(1))
    assert interpreter >= 0.3, line
