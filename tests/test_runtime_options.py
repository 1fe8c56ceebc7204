"""Option parsing, launch filters, cache keys, image reading, callbacks, attribution, start-up chaining."""

from __future__ import annotations

import ctypes as C
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neutrino.runtime.launch_path import attribution
from neutrino.runtime.results.callback import CallbackError, load_callback, split_spec
from neutrino.runtime.instrument.codecache import CacheEntry, CodeCache, cache_key
from neutrino.runtime.hooks import read_image
from neutrino.runtime.start.launcher import STARTUP_DIR, parse_args
from neutrino.runtime.start.options import U64_MAX, LaunchFilter, OptionError, RuntimeOptions

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("text,expect", [
    (None, LaunchFilter()),
    ("10:20", LaunchFilter(10, 20, 1)),
    ("5:", LaunchFilter(5, U64_MAX, 1)),
    (":3", LaunchFilter(0, 3, 1)),
    ("7", LaunchFilter(7, 8, 1)),
    ("every:4", LaunchFilter(0, U64_MAX, 4)),
])
def test_launch_filter_parse(text, expect):
    assert LaunchFilter.parse(text) == expect


@pytest.mark.parametrize("text", ["a:b", "5:5", "9:2", "every:0", "every:x", "-1:3", "1:2:3"])
def test_launch_filter_errors(text):
    with pytest.raises(OptionError, match="--launches"):
        LaunchFilter.parse(text)


@given(start=st.integers(0, 50), length=st.integers(1, 50), every=st.integers(1, 7), i=st.integers(0, 200))
def test_launch_filter_selects(start, length, every, i):
    f = LaunchFilter(start, start + length, every)
    assert f.selects(i) == (start <= i < start + length and (i - start) % every == 0)


def test_options_json_round_trip():
    o = RuntimeOptions(probe="/p.toml", tracedir="/t", kernels=["a:b", "c"], exclude="x", benchmark=True,
                       launches=LaunchFilter(1, 5, 2), callback="/cb.py:fn")
    assert o.kernels == ("a", "b", "c") and o.exclude == ("x",)
    assert RuntimeOptions.from_json(o.to_json()) == o


def test_kernel_wants():
    o = RuntimeOptions(probe="p", kernels="matmul:softmax", exclude="bwd")
    assert o.wants("triton_matmul_kernel") and o.wants("softmax")
    assert not o.wants("matmul_bwd") and not o.wants("vadd")
    assert RuntimeOptions(probe="p").wants("anything")


def test_parse_args_with_and_without_separator():
    ns, cmd = parse_args(["-p", "block_sched", "python", "main.py", "-k", "x"])
    assert ns.probe == "block_sched" and cmd == ["python", "main.py", "-k", "x"] and ns.kernel == []
    ns, cmd = parse_args(["-p", "gmem_bytes", "-k", "vadd", "--launches", "every:3", "--", "python", "-p", "y"])
    assert ns.kernel == ["vadd"] and ns.launches == "every:3" and cmd == ["python", "-p", "y"]
    ns, cmd = parse_args(["--probe", "x.toml", "--benchmark", "--memusage", "--filter", "a:b", "--callback", "c.py", "prog"])
    assert ns.benchmark and ns.memusage and ns.filter == ["a:b"] and ns.callback == "c.py" and cmd == ["prog"]


def test_parse_args_missing_probe():
    from neutrino.runtime.start.launcher import UsageError

    with pytest.raises(UsageError, match="no probe: give -p PROBE"):
        parse_args(["--tracedir", "t", "python", "x.py"])


def test_cache_key():
    k = cache_key("ptx", "probe", (9, 0), "k")
    assert k == cache_key("ptx", "probe", (9, 0), "k")
    others = {cache_key("ptx2", "probe", (9, 0), "k"), cache_key("ptx", "probe2", (9, 0), "k"),
              cache_key("ptx", "probe", (8, 0), "k"), cache_key("ptx", "probe", (9, 0), "k2"),
              cache_key("ptx", "probe", (9, 0), "k", version="0.0.0"), cache_key("ptx", "probe", (9, 0), "k", variant="pruned")}
    assert k not in others and len(others) == 6
    # no ambiguity from concatenation
    assert cache_key("ab", "c", (9, 0), "k") != cache_key("a", "bc", (9, 0), "k")


def test_code_cache_disk(tmp_path):
    c = CodeCache(tmp_path)
    assert c.get("ab" * 32) == (None, "miss")
    c.put("ab" * 32, CacheEntry("ptx", {"name": "k"}, b"cubin"))
    e, where = CodeCache(tmp_path).get("ab" * 32)
    assert where == "disk" and e.ptx == "ptx" and e.info == {"name": "k"} and e.cubin == b"cubin"
    assert c.get("ab" * 32)[1] == "memory"
    (tmp_path / "kernels" / "ab" / ("ab" * 32) / "kernel.json").write_text("{broken")
    assert CodeCache(tmp_path).get("ab" * 32) == (None, "miss")


def test_code_cache_unwritable_is_silent(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    c = CodeCache(f / "sub")  # cannot create a directory under a file
    c.put("cd" * 32, CacheEntry("ptx", None))
    assert c.get("cd" * 32)[1] == "memory"


def _addr(data: bytes):
    buf = C.create_string_buffer(data + b"\0" * 64)
    return buf, C.addressof(buf)


def test_read_image_ptx_and_fatbin():
    ptx = (DATA / "corpus" / "nvcc" / "vec.sm90.ptx").read_bytes()
    keep, addr = _addr(ptx)
    data, start = read_image(addr)
    assert data == ptx and start == addr
    fat = (DATA / "binaries" / "add_80_90.zstd.fatbin").read_bytes()
    keep2, addr2 = _addr(fat + b"trailing garbage")
    data, _ = read_image(addr2)
    assert data == fat
    # a fatbin wrapper (what __cudaRegisterFatBinary passes) points at the container
    wrapper = (C.c_uint32 * 6)(0x466243B1, 1, addr2 & 0xFFFFFFFF, addr2 >> 32, 0, 0)
    data, start = read_image(C.addressof(wrapper))
    assert data == fat and start == addr2


def test_read_image_cubin():
    cubin = (DATA / "binaries" / "add_sm90_debug.cubin").read_bytes()
    keep, addr = _addr(cubin + b"\xff" * 100)
    data, _ = read_image(addr)
    assert data == cubin


def test_callback_loading(tmp_path):
    f = tmp_path / "cb.py"
    f.write_text("def analyze(path, launch):\n    return path\ndef other(path, launch):\n    return 2\n")
    assert load_callback(str(f))("x", {}) == "x"
    assert load_callback(f"{f}:other")("x", {}) == 2
    assert split_spec("/a/b.py:fn") == ("/a/b.py", "fn") and split_spec("b.py") == ("b.py", "analyze")
    with pytest.raises(CallbackError, match="does not exist"):
        load_callback(str(tmp_path / "none.py"))
    with pytest.raises(CallbackError, match="no function"):
        load_callback(f"{f}:missing")
    (tmp_path / "bad.py").write_text("1/0\n")
    with pytest.raises(CallbackError, match="ZeroDivisionError"):
        load_callback(str(tmp_path / "bad.py"))
    (tmp_path / "rel.py").write_text("def analyze(p, l): return 'rel'\n")
    assert load_callback("rel.py", str(tmp_path))("x", {}) == "rel"


def test_user_frame_skips_library_frames():
    here = user_frame_via_library()
    assert here is not None and here.startswith(__file__) and "(user_frame_via_library)" in here
    assert attribution.is_library_file("/tmp/torchinductor_root/ab/cabc.py", ())
    assert attribution.is_library_file("/x/site-packages/triton/runtime/jit.py", ("/x/site-packages/triton/",))


def test_finding_the_users_line_leaves_lazily_imported_packages_unimported(monkeypatch, tmp_path):
    """A package in sys.modules that imports lazily (CuPy registers `cupyx` so) is not imported by our
    look at its directory: the program never paid for it (0.43 s for cupyx on the GPU machine)."""
    import importlib.util

    pkg = tmp_path / "numba"  # one of the packages whose frames are library frames
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import builtins\nbuiltins.LAZY_PACKAGE_RAN = True\n")
    spec = importlib.util.spec_from_file_location("numba", pkg / "__init__.py")
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # lazy: runs at the first attribute access
    monkeypatch.setitem(sys.modules, "numba", module)
    import builtins

    assert attribution.user_frame() is not None
    assert not hasattr(builtins, "LAZY_PACKAGE_RAN")  # still not imported
    assert str(pkg) + os.sep in attribution._package_dirs()  # yet its directory is known
    module.__name__  # noqa: B018 - the program's own first use imports it, as without us
    assert builtins.LAZY_PACKAGE_RAN
    del builtins.LAZY_PACKAGE_RAN


def user_frame_via_library():
    return attribution.user_frame()


def test_sitecustomize_chains_and_stays_quiet(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.CHAINED = True\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(STARTUP_DIR), str(other)]))
    env.pop("NEUTRINO_OPTIONS", None)
    r = subprocess.run([sys.executable, "-c", "import builtins, sys; print(builtins.CHAINED, 'neutrino.runtime.start.bootstrap' in sys.modules)"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["True", "False"], r.stderr


def test_sitecustomize_bad_options_do_not_break_program(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(STARTUP_DIR), str(Path(__file__).parent.parent)]),
               NEUTRINO_OPTIONS='{"probe": "/no/such/probe.toml"}', NEUTRINO_SHIM="/no/such/shim.so")
    r = subprocess.run([sys.executable, "-c", "print('program ran')"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "program ran" in r.stdout
    assert "neutrino: runtime not started" in r.stderr and "unprobed" in r.stderr


def test_user_frame_of_worker_thread_falls_back_to_main(monkeypatch, tmp_path):
    import threading

    got = []
    gen = tmp_path / "generated.py"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    gen.write_text("import neutrino.runtime.launch_path.attribution as a\ndef call(out):\n    out.append(a.user_frame())\n")
    ns = {}
    exec(compile(gen.read_text(), str(gen), "exec"), ns)
    t = threading.Thread(target=ns["call"], args=(got,))
    t.start()
    t.join()  # the main thread waits here: the worker's launch is attributed to this line
    assert got[0] and got[0].startswith(__file__) and "test_user_frame_of_worker_thread" in got[0]


def test_runtime_options_refuse_values_out_of_range():
    """The checks attrs' validators made, kept by the dataclass (a bad NEUTRINO_OPTIONS is reported
    by the profiled process as `runtime not started`)."""
    for bad in ({"when_full": "block"}, {"while_building": "later"}, {"time_every": -1}, {"recount_every": 0},
                {"build_threads": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RuntimeOptions(probe="p", **bad)
    o = RuntimeOptions(probe="p", kernels=["a:b"], exclude="c")
    assert (o.kernels, o.exclude) == (("a", "b"), ("c",))
    with pytest.raises(AttributeError):  # frozen
        o.probe = "q"
    assert o.to_dict()["kernels"] == ["a", "b"] and o.to_dict()["launches"] == {"start": 0, "stop": U64_MAX,
                                                                                "every": 1}
