"""Ranges (NVTX injection, neutrino.annotate) and the tensor trace (launch_args.jsonl), on the CPU.

The NVTX side uses tests/fakenvtx/fakenvtx.c, a stand-in for one NVTX v3 instance: it loads
NVTX_INJECTION64_PATH and calls InitializeInjectionNvtx2 like NVTX's own loader. Launches go
through the fake driver (tests/fakecuda).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from neutrino import ranges as nr
from neutrino.annotation import _reset_backend, annotate
from neutrino.runtime.start import build
from neutrino.runtime.context_tables.tables import param_sizes
from neutrino.runtime.context_tables.tensors import READ_USER_FRAMES, TensorResolver

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from test_runtime_shim import FAKE, VEC_PTX, _run_under_fake  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    return build.build_shim(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def fakecuda(tmp_path_factory):
    d = tmp_path_factory.mktemp("fakecuda")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(FAKE / "fakecuda.c")],
                   check=True)
    return d


@pytest.fixture(scope="module")
def fakenvtx(tmp_path_factory):
    out = tmp_path_factory.mktemp("fakenvtx") / "libfakenvtx.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-Wall", "-o", str(out), str(HERE / "fakenvtx" / "fakenvtx.c"),
                    "-ldl"], check=True)
    return out


# ---------------------------------------------------------------- the reader

def _write_ranges(run: Path, records, names, *, cut: int = 0, magic=b"NTRANGE1"):
    blob = magic + struct.pack("<II", 1, 40)
    for start, end, tid, depth, source, name_id, domain_id in records:
        blob += struct.pack("<QQIHBBIIQ", start, end, tid, depth, source, 0, name_id, domain_id, 0)
    (run / "ranges.bin").write_bytes(blob[: len(blob) - cut])
    (run / "ranges_names.txt").write_text("".join(n.replace("\n", "\\n") + "\n" for n in names))


def test_ranges_round_trip_sorted_named_and_enclosing(tmp_path):
    names = ["step", "fwd\nline2", "dom", "bwd"]
    _write_ranges(tmp_path, [(300, 400, 7, 1, 1, 3, 2), (100, 900, 7, 0, 3, 0, 0xFFFFFFFF),
                             (150, 250, 7, 1, 1, 1, 0xFFFFFFFF), (120, 130, 8, 0, 2, 0, 0xFFFFFFFF)], names)
    t = nr.read_ranges(tmp_path)
    assert list(t["start_ns"]) == [100, 120, 150, 300]
    assert list(t["name"]) == ["step", "step", "fwd\nline2", "bwd"]
    assert list(t["domain"]) == ["", "", "", "dom"]
    assert list(t["source"]) == [3, 2, 1, 1] and list(t["tid"]) == [7, 8, 7, 7]
    assert list(nr.enclosing(t, 7, 200)["name"]) == ["step", "fwd\nline2"]  # outermost first
    assert list(nr.enclosing(t, 7, 400)["name"]) == ["step", "bwd"]  # the end is inside
    assert len(nr.enclosing(t, 8, 200)) == 0 and len(nr.enclosing(t, 7, 950)) == 0


def test_ranges_record_cut_short_is_ignored_and_bad_magic_is_an_error(tmp_path):
    _write_ranges(tmp_path, [(1, 2, 1, 0, 1, 0, 0xFFFFFFFF), (3, 4, 1, 0, 1, 0, 0xFFFFFFFF)], ["a"], cut=7)
    assert len(nr.read_ranges(tmp_path)) == 1
    _write_ranges(tmp_path, [], [], magic=b"NTINDEX1")
    with pytest.raises(nr.RangesError, match="ranges.bin"):
        nr.read_ranges(tmp_path)
    assert len(nr.read_ranges(tmp_path / "nowhere")) == 0


def test_launch_args_reader(tmp_path):
    lines = [{"argset": 0, "kernel": "k", "args": []}, {"launch": 0, "argset": 0, "tid": 5, "host_ns": 10},
             {"launch": 1, "argset": None, "tid": 5, "host_ns": 20},
             {"launch": 2, "argset": 0, "tid": 6, "host_ns": 30}]
    (tmp_path / "launch_args.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines) + '{"launch": 3, "arg')
    argsets, uses = nr.read_launch_args(tmp_path)
    assert list(argsets) == [0] and uses == {0: 0, 2: 0}
    assert nr.read_launch_hosts(tmp_path) == {0: (5, 10), 1: (5, 20), 2: (6, 30)}


# ---------------------------------------------------------------- the NVTX injection, C level

NVTX_SCRIPT = textwrap.dedent('''
    import ctypes as C, sys, threading
    shim, nvtx = C.CDLL(sys.argv[1]), C.CDLL(sys.argv[2])
    nvtx.fake_nvtx_start.restype = C.c_uint64
    nvtx.fake_nvtx_end.argtypes = [C.c_uint64]
    for f in ("fake_nvtx_domain", "fake_nvtx_register"):
        getattr(nvtx, f).restype = C.c_void_p
    nvtx.fake_nvtx_register.argtypes = [C.c_void_p, C.c_char_p]
    nvtx.fake_nvtx_domain_push.argtypes = [C.c_void_p, C.c_void_p, C.c_char_p]
    nvtx.fake_nvtx_domain_pop.argtypes = [C.c_void_p]
    assert nvtx.fake_nvtx_attached() == 1
    assert nvtx.fake_nvtx_push(b"outer") == 0          # recorded before the directory is known: held
    assert nvtx.fake_nvtx_push_ex(b"inner") == 1
    assert nvtx.fake_nvtx_pop() == 1 and nvtx.fake_nvtx_pop() == 0
    assert nvtx.fake_nvtx_pop() == -1                   # a pop without push: nothing
    shim.neutrino_context_open(sys.argv[3].encode())
    dom = nvtx.fake_nvtx_domain(b"mydomain")
    reg = nvtx.fake_nvtx_register(dom, b"registered")
    nvtx.fake_nvtx_push(b"plain")
    nvtx.fake_nvtx_domain_push(dom, reg, None)
    nvtx.fake_nvtx_domain_push(dom, None, b"ascii")
    assert nvtx.fake_nvtx_pop() == 0                     # the default domain's range, under the domain's two
    assert nvtx.fake_nvtx_domain_pop(C.c_void_p(dom)) == 2 and nvtx.fake_nvtx_domain_pop(C.c_void_p(dom)) == 1
    nvtx.fake_nvtx_push_w(C.c_wchar_p("wide \\u00e9\\u4e2d"))
    nvtx.fake_nvtx_pop()
    rid = nvtx.fake_nvtx_start(b"async")
    def other():
        nvtx.fake_nvtx_push(b"thread"); nvtx.fake_nvtx_pop(); nvtx.fake_nvtx_end(C.c_uint64(rid))
    t = threading.Thread(target=other); t.start(); t.join()
    shim.neutrino_context_close()
    print(threading.get_native_id())
''')


def test_nvtx_injection_records_ranges(tmp_path, shim, fakenvtx):
    script = tmp_path / "nvtx.py"
    script.write_text(NVTX_SCRIPT)
    run = tmp_path / "run"
    run.mkdir()
    env = dict(os.environ, NVTX_INJECTION64_PATH=str(shim))
    r = subprocess.run([sys.executable, str(script), str(shim), str(fakenvtx), str(run)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    main_tid = int(r.stdout.split()[-1])
    t = nr.read_ranges(run)
    got = {(str(x["name"]), str(x["domain"])): x for x in t}
    assert set(got) == {("outer", ""), ("inner", ""), ("plain", ""), ("registered", "mydomain"),
                        ("ascii", "mydomain"), ("wide é中", ""), ("async", ""), ("thread", "")}
    assert got[("outer", "")]["depth"] == 0 and got[("inner", "")]["depth"] == 1
    assert got[("inner", "")]["start_ns"] >= got[("outer", "")]["start_ns"]
    assert got[("inner", "")]["end_ns"] <= got[("outer", "")]["end_ns"]
    assert got[("ascii", "mydomain")]["depth"] == 2 and got[("plain", "")]["depth"] == 0
    assert got[("async", "")]["source"] == 2 and got[("async", "")]["tid"] == main_tid  # the thread that started it
    assert got[("thread", "")]["tid"] != main_tid
    assert {int(x["source"]) for x in t if x["name"] != "async"} == {1}
    assert all(x["end_ns"] >= x["start_ns"] > 1.7e18 for x in t)  # Unix-epoch nanoseconds
    names = (run / "ranges_names.txt").read_text().split("\n")[:-1]
    assert len(names) == len(set(names))  # each name once


BOUNDED_SCRIPT = textwrap.dedent('''
    import ctypes as C, sys
    shim, nvtx = C.CDLL(sys.argv[1]), C.CDLL(sys.argv[2])
    for _ in range(int(sys.argv[4])):  # no run directory yet: held in memory, up to 8 MiB
        nvtx.fake_nvtx_push(b"r"); nvtx.fake_nvtx_pop()
    shim.neutrino_context_open(sys.argv[3].encode())
    shim.neutrino_context_close()
    written, dropped = (C.c_uint64 * 3)(), (C.c_uint64 * 3)()
    shim.neutrino_context_stats(written, dropped)
    print(written[1], dropped[1])
''')


def test_ranges_before_the_run_directory_are_bounded_and_counted(tmp_path, shim, fakenvtx):
    script = tmp_path / "bounded.py"
    script.write_text(BOUNDED_SCRIPT)
    n = 250_000
    env = dict(os.environ, NVTX_INJECTION64_PATH=str(shim))
    r = subprocess.run([sys.executable, str(script), str(shim), str(fakenvtx), str(tmp_path), str(n)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    written, dropped = map(int, r.stdout.split())
    per_chunk = (128 << 10) // 40
    kept = ((8 << 20) // ((128 << 10) + 24)) * per_chunk  # whole 128 KiB buffers within 8 MiB
    assert (written, dropped) == (kept * 40, n - kept)
    assert len(nr.read_ranges(tmp_path)) == kept


def test_no_injection_without_the_variable(tmp_path, shim, fakenvtx):
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    code = f"import ctypes as C; n = C.CDLL({str(fakenvtx)!r}); print(n.fake_nvtx_attached(), n.fake_nvtx_push(b'x'))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["0", "-1"]


# ---------------------------------------------------------------- neutrino.annotate

def test_annotate_without_neutrino_is_a_no_op(monkeypatch):
    monkeypatch.delenv("NEUTRINO_SHIM", raising=False)
    monkeypatch.delitem(sys.modules, "nvtx", raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    _reset_backend()
    calls = []

    @annotate("deco")
    def f(x, *, y=1):
        """doc"""
        calls.append(x)
        return x + y

    with annotate("cm") as a:
        assert f(1, y=2) == 3
    assert a.name == "cm" and f.__name__ == "f" and f.__doc__ == "doc" and calls == [1]


def test_annotate_forwards_to_an_imported_nvtx_package(monkeypatch):
    monkeypatch.delenv("NEUTRINO_SHIM", raising=False)
    seen = []
    fake = types.SimpleNamespace(push_range=lambda m: seen.append(("push", m)), pop_range=lambda: seen.append("pop"))
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    _reset_backend()
    try:
        with annotate("a"):
            with annotate("b"):
                pass
    finally:
        _reset_backend()
    assert seen == [("push", "a"), ("push", "b"), "pop", "pop"]


ANNOTATE_SCRIPT = textwrap.dedent('''
    import ctypes as C, sys, threading
    import neutrino
    shim = C.CDLL(sys.argv[1])
    shim.neutrino_context_open(sys.argv[2].encode())

    @neutrino.annotate("work")
    def work(n):
        with neutrino.annotate(f"inner{n}"):
            return n * 2

    with neutrino.annotate("outer"):
        assert work(1) == 2
    threads = [threading.Thread(target=work, args=(k,)) for k in (2, 3)]
    [t.start() for t in threads]; [t.join() for t in threads]
    try:
        with neutrino.annotate("raises"):
            raise KeyError
    except KeyError:
        pass
    import os
    pid = os.fork()
    if pid == 0:  # a forked child records nothing (and never waits for the parent's locks)
        with neutrino.annotate("child"):
            pass
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    shim.neutrino_context_close()
''')


def test_annotate_under_neutrino_nested_decorated_threads(tmp_path, shim):
    script = tmp_path / "annotate.py"
    script.write_text(ANNOTATE_SCRIPT)
    env = dict(os.environ, LD_PRELOAD=str(shim), NEUTRINO_SHIM=str(shim), NEUTRINO_OPTIONS="{}",
               PYTHONPATH=str(HERE.parent))
    r = subprocess.run([sys.executable, str(script), str(shim), str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    t = nr.read_ranges(tmp_path)
    by = {str(x["name"]): x for x in t}
    assert sorted(by) == ["inner1", "inner2", "inner3", "outer", "raises", "work"] and len(t) == 8
    assert set(t["source"]) == {3}
    assert (by["outer"]["depth"], by["inner1"]["depth"]) == (0, 2)
    assert by["inner2"]["tid"] != by["inner3"]["tid"] and by["inner2"]["tid"] != by["outer"]["tid"]
    works = t[t["name"] == "work"]
    assert sorted(works["depth"]) == [0, 0, 1]  # in the two threads, and under "outer"
    assert list(nr.enclosing(t, int(by["inner1"]["tid"]), int(by["inner1"]["start_ns"]))["name"]) == \
        ["outer", "work", "inner1"]


# ---------------------------------------------------------------- launch arguments through the fake driver

def test_launch_args_deduplicated_uses_per_launch_and_ranges_enclose(tmp_path, fakecuda, shim, fakenvtx, monkeypatch):
    monkeypatch.setenv("FAKEAPP_ARGS_CYCLE", "3")
    monkeypatch.setenv("FAKEAPP_NVTX", str(fakenvtx))
    monkeypatch.setenv("PYTHONPATH", str(HERE.parent))
    n = 8
    app = [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", str(n)]
    rc, log = _run_under_fake(tmp_path, fakecuda, app)
    assert rc == 0 and len(log) == n
    (run,) = [p for p in (tmp_path / "trace").iterdir() if p.is_dir()]
    argsets, uses = nr.read_launch_args(run)
    assert sorted(argsets) == [0, 1, 2]  # one set per distinct argument bytes
    assert uses == {i: i % 3 for i in range(n)}  # first launch in Python, the rest in C
    for k, s in argsets.items():
        assert s["kernel"] == "saxpy4" and [a["size"] for a in s["args"]] == [8, 8, 4, 8]
        assert [a["value"] for a in s["args"]] == [k, 1, 2, 3] and s["args"][2]["hex"] == "02000000"
    assert nr.launch_ranges(run) == {i: [f"annot{i % 2}", f"nvtx{i}"] for i in range(n)}
    events = [json.loads(line) for line in (run / "event.log").read_text().splitlines()]
    (ct,) = [e for e in events if e["event"] == "context_tables"]
    assert ct["nvtx_instances"] == 1 and ct["ranges"] == 2 * n and ct["argsets"] == 3
    assert ct["nvtx_injection"] == "neutrino"


def test_launch_args_from_threads_carry_their_thread(tmp_path, fakecuda, shim, monkeypatch):
    monkeypatch.setenv("FAKEAPP_THREADS", "3")  # one launch, then 3 threads launching 5 each
    rc, _ = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "5"])
    (run,) = [p for p in (tmp_path / "trace").iterdir() if p.is_dir()]
    argsets, uses = nr.read_launch_args(run)
    hosts = nr.read_launch_hosts(run)
    assert rc == 0 and list(argsets) == [0] and uses == {i: 0 for i in range(16)}
    tids = [tid for tid, _ in hosts.values()]
    assert len(set(tids)) == 4 and sorted(tids.count(t) for t in set(tids)) == [1, 5, 5, 5]


def test_launch_args_off(tmp_path, fakecuda, shim, monkeypatch):
    monkeypatch.setenv("NEUTRINO_ARGS", "0")
    rc, _ = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX), "saxpy4", "3"])
    (run,) = [p for p in (tmp_path / "trace").iterdir() if p.is_dir()]
    assert rc == 0 and not (run / "launch_args.jsonl").exists()


# ---------------------------------------------------------------- parameter sizes from PTX

def test_param_sizes_from_ptx():
    ptx = """
.visible .entry k(
    .param .u64 .ptr .global .align 1 k_param_0,
    .param .u32 k_param_1,
    .param .align 8 .b8 k_param_2[24],
    .param .f16 k_param_3,
    .param .u8 k_param_4
)
{ ret; }
.visible .entry empty()
{ ret; }
"""
    assert param_sizes(ptx, "k") == [8, 4, 24, 2, 1]
    assert param_sizes(ptx, "empty") == []
    assert param_sizes(ptx, "missing") is None
    assert param_sizes(VEC_PTX.read_text(), "saxpy4") == [8, 8, 4, 8]


# ---------------------------------------------------------------- tensor resolution (a stand-in torch)

class _Tensor:
    is_cuda = True

    def __init__(self, ptr, shape, dtype="torch.float32", itemsize=4):
        self._ptr, self.shape, self.dtype, self._itemsize = ptr, tuple(shape), dtype, itemsize
        self.device = types.SimpleNamespace(index=0)

    def data_ptr(self):
        return self._ptr

    def stride(self):
        out, acc = [], 1
        for n in reversed(self.shape):
            out.insert(0, acc)
            acc *= n
        return tuple(out)

    def numel(self):
        return int(np.prod(self.shape))

    def element_size(self):
        return self._itemsize


class _Module:
    def __init__(self, params, kids=()):
        self._params, self._kids = params, kids

    def children(self):
        return iter(self._kids)

    def named_parameters(self, remove_duplicate=True):
        yield from self._params.items()
        for i, k in enumerate(self._kids):
            for n, p in k.named_parameters():
                yield f"{i}.{n}", p

    def named_buffers(self, remove_duplicate=True):
        return iter(())


@pytest.fixture
def fake_torch(monkeypatch):
    torch = types.SimpleNamespace(Tensor=_Tensor, nn=types.SimpleNamespace(Module=_Module))
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


INDUCTOR_CALL = """
def call(resolver, pointers, args, dead_proxy):
    primals_1, primals_2 = args
    args.clear()
    buf0 = primals_2
    del primals_2
    return resolver.resolve(pointers)
"""


def _generated_call(path="/tmp/torchinductor_user/ab/cabcdef.py"):
    """A function compiled as if Inductor had generated it (its file in Inductor's cache)."""
    scope = {}
    exec(compile(INDUCTOR_CALL, path, "exec"), scope)
    return scope["call"]


def _dead_proxy():
    """A weak proxy whose object is gone (touching its __class__ raises ReferenceError)."""
    import weakref

    gone = _Tensor(1 << 20, (1,))
    proxy = weakref.proxy(gone)
    del gone
    return proxy


def test_tensor_resolution_names_parameters_generated_locals_and_offsets(fake_torch):
    weight = _Tensor(0x7F0000000000, (4, 8))
    model = _Module({}, kids=(_Module({"weight": weight}),))  # noqa: F841 - found by the gc walk
    activation = _Tensor(0x7F0000100000, (16,), "torch.float16", 2)
    other = _Tensor(0x7F0000200000, (2, 2))
    pointers = [weight.data_ptr(), activation.data_ptr() + 6, other.data_ptr(), 12345, 0x1000000]
    found = _generated_call()(TensorResolver(), pointers, [weight, activation], _dead_proxy())
    assert found[weight.data_ptr()] == {"name": "0.weight", "shape": [4, 8], "dtype": "float32", "strides": [8, 1],
                                        "offset_bytes": 0, "device": 0}  # the module's name, not the variable's
    inside = found[activation.data_ptr() + 6]
    assert inside["name"] == "buf0" and inside["offset_bytes"] == 6 and inside["dtype"] == "float16"
    assert 12345 not in found and 0x1000000 not in found  # a small value; a pointer into nothing
    assert (other.data_ptr() in found) == READ_USER_FRAMES  # a local of the program's frame: read from 3.13


GRAPH_TREES_RUN = """
def run(call, resolver, pointers, make, gone):
    out = make()
    found = call(resolver, pointers, [out, out], None)
    del out  # CUDA-graph trees free an output's memory themselves once no reference should hold it
    return found, gone()
"""


def test_frames_outside_the_launch_keep_no_tensor_alive(fake_torch, monkeypatch):
    """A library frame that calls the generated code (CUDA-graph trees' run) and drops a tensor after
    the launch: before Python 3.13 a read of its f_locals would leave a snapshot holding the tensor
    until the frame ends (seen on an H200 as CUDA-graph trees' "not allocated in pool" error); its
    frames are not read, so the tensor goes at its del."""
    import weakref

    monkeypatch.setattr(fake_torch, "__file__", "/fake/site-packages/torch/__init__.py", raising=False)
    refs = []

    def make():
        t = _Tensor(0x7F0000300000, (8,))
        refs.append(weakref.ref(t))
        return t

    scope = {}
    exec(compile(GRAPH_TREES_RUN, "/fake/site-packages/torch/_inductor/cudagraph_trees.py", "exec"), scope)
    found, alive = scope["run"](_generated_call(), TensorResolver(), [0x7F0000300000], make, lambda: refs[0]())
    assert found[0x7F0000300000]["name"] in ("primals_1", "buf0")  # the generated code's frame was read
    assert alive is None


def test_tensor_resolution_never_keeps_parameters_alive(fake_torch):
    import gc
    import weakref

    weight = _Tensor(0x7F0000000000, (4,))
    model = _Module({"weight": weight})
    resolver = TensorResolver()
    assert resolver.resolve([weight.data_ptr()])[weight.data_ptr()]["name"] == "weight"
    gone = weakref.ref(weight)
    del model, weight
    gc.collect()
    assert gone() is None


def test_tensor_resolution_reads_inductor_code_in_its_cache_dir(fake_torch, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    weight, activation = _Tensor(0x7F0000000000, (4,)), _Tensor(0x7F0000100000, (16,))
    call = _generated_call(str(tmp_path / "inductor" / "ab" / "cabcdef.py"))
    found = call(TensorResolver(), [activation.data_ptr()], [weight, activation], None)
    assert found[activation.data_ptr()]["name"] == "buf0"
    found = _generated_call(str(tmp_path / "elsewhere.py"))(TensorResolver(), [activation.data_ptr()],
                                                              [weight, activation], None)
    assert (activation.data_ptr() in found) == READ_USER_FRAMES  # the program's own code: read from 3.13


def test_launcher_sets_the_nvtx_injection_unless_a_tool_did(tmp_path):
    from neutrino.runtime.start.launcher import child_env
    from neutrino.runtime.start.options import RuntimeOptions

    opts = RuntimeOptions(probe="block_sched", tracedir=str(tmp_path))
    assert child_env(opts, Path("/x/shim.so"), base={})["NVTX_INJECTION64_PATH"] == "/x/shim.so"
    theirs = child_env(opts, Path("/x/shim.so"), base={"NVTX_INJECTION64_PATH": "/nsys/libToolsInjection64.so"})
    assert theirs["NVTX_INJECTION64_PATH"] == "/nsys/libToolsInjection64.so"


def test_each_walk_for_module_parameters_is_told_with_its_seconds(fake_torch):
    """The walk is our host time inside the program (event.log `tensor_walk`, cross-rank own work)."""
    weight = _Tensor(0x7F0000000000, (4,))
    model = _Module({"weight": weight})
    walks = []
    resolver = TensorResolver(on_walk=lambda seconds, modules, source: walks.append((seconds, modules, source)))
    assert resolver.resolve([weight.data_ptr()])[weight.data_ptr()]["name"] == "weight"
    assert len(walks) == 1 and walks[0][0] >= 0 and walks[0][1] >= 1 and walks[0][2] == "gc"  # no hooks here
    resolver.resolve([0x7E0000000000])  # not found, but within REBUILD_SECONDS of the last walk: no walk
    assert len(walks) == 1
    del model
