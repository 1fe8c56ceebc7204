"""PTX compiled inside the process (XLA's nvJitLink, the driver's linker) reaches the engine;
modules without PTX are attributed to a framework; a JAX child gets its XLA flags.

The end-to-end tests run a Python program that compiles PTX with a fake libnvJitLink
(tests/fakecuda/fakenvjitlink.c) and loads the result with a fake libcuda, under the
real shim, as XLA does on CUDA 13.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import shutil
import sysconfig
from collections import Counter
from pathlib import Path

import pytest

import neutrino.trace as nt
from neutrino.runtime.modules import compilers, frameworks
from neutrino.runtime.modules.compilers import CompiledIndex

from test_runtime_core import VEC_PTX, events, finish, make_runtime, req
from test_runtime_shim import FAKE, _run_under_fake, fakecuda, shim  # noqa: F401 - fixtures

VEC_PTX_FILE = FAKE.parent / "data" / "corpus" / "nvcc" / "vec.sm90.ptx"
CUBIN = b"\x7fELF" + b"\x00" * 60 + b"loop_add_fusion\x00"


# ---------------------------------------------------------------- the index


def test_one_ptx_link_maps_its_cubin_to_that_ptx():
    idx = CompiledIndex()
    idx.add_input("nvJitLink", 1, "PTX-A")
    idx.add_output("nvJitLink", 1, b"cubin-a")
    hit = idx.lookup(b"cubin-a")
    assert hit.ptx == "PTX-A" and hit.compiler == "nvJitLink" and hit.reason is None
    assert idx.lookup(b"cubin-b") is None
    assert idx.links_seen == {"nvJitLink": 1}


def test_links_of_several_inputs_give_a_reason_not_ptx():
    idx = CompiledIndex()
    idx.add_input("nvJitLink", 1, "PTX-A")
    idx.add_input("nvJitLink", 1, "PTX-B")
    idx.add_input("nvJitLink", 2, "PTX-C")
    idx.add_input("nvJitLink", 2, None, "cubin")
    idx.add_output("nvJitLink", 1, b"ab")
    idx.add_output("nvJitLink", 2, b"c")
    assert idx.lookup(b"ab").ptx is None and "2 PTX" in idx.lookup(b"ab").reason
    assert idx.lookup(b"c").ptx is None and "1 PTX, cubin" in idx.lookup(b"c").reason


def test_handles_are_forgotten_and_reused():
    idx = CompiledIndex()
    idx.add_input("nvJitLink", 7, "OLD")
    idx.forget("nvJitLink", 7)
    idx.add_input("nvJitLink", 7, "NEW")  # the allocator gave the same address to a new link
    idx.add_output("nvJitLink", 7, b"x")
    assert idx.lookup(b"x").ptx == "NEW"


def test_memory_is_bounded_oldest_first():
    idx = CompiledIndex(max_bytes=25)
    for i in range(5):
        idx.add_input("nvJitLink", i, f"ptx-number-{i}")  # 12 characters each
        idx.add_output("nvJitLink", i, f"cubin{i}".encode())
    assert [idx.lookup(f"cubin{i}".encode()) is not None for i in range(5)] == [False, False, False, True, True]


def test_compiler_callback_reads_what_the_shim_reports():
    import ctypes as C

    idx = CompiledIndex()
    ptx = C.create_string_buffer(b".version 8.0\n.target sm_90\n")
    out = C.create_string_buffer(b"cubin bytes")
    cb = compilers.make_compiler_callback(idx, lambda addr: (C.string_at(addr), addr))
    cb(compilers.TAP_INPUT_DATA, 0x10, compilers.NVJITLINK_INPUT_PTX, C.addressof(ptx), len(ptx.value))
    cb(compilers.TAP_OUTPUT_CUBIN, 0x10, 0, C.addressof(out), 0)
    cb(compilers.TAP_DESTROY, 0x10, 0, None, 0)
    assert idx.lookup(b"cubin bytes").ptx == ".version 8.0\n.target sm_90\n"


def test_compiler_callback_never_raises_into_c():
    def unreadable(addr):
        raise ValueError("image claims 1 TB")

    cb = compilers.make_compiler_callback(CompiledIndex(), unreadable)
    cb(compilers.TAP_OUTPUT_CUBIN, 0x11, 0, 0x1000, 0)  # swallowed: the program's compilation goes on


# ---------------------------------------------------------------- the runtime


def test_runtime_probes_a_cubin_compiled_by_nvjitlink(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    rt.compiled.add_input("nvJitLink", 0x99, VEC_PTX)
    rt.compiled.add_output("nvJitLink", 0x99, CUBIN)
    rt.on_module("cuModuleLoadData", 0x100, CUBIN)
    assert rt.on_function("module_function", 0x100, "saxpy4", 0x200)
    r, keep = req()
    assert rt.on_launch(r) == 0
    finish(rt)
    (mod,) = events(rt, "module")
    assert mod["source"] == "nvJitLink"
    assert not events(rt, "no_ptx")


def test_runtime_finds_a_copied_driver_linked_cubin_by_content(tmp_path):
    """XLA's driver fallback: cuLinkComplete's cubin is copied before cuModuleLoadData."""
    rt, drv, _ = make_runtime(tmp_path)
    rt.on_link_add(0x77, VEC_PTX)
    rt.on_link_complete(0x77, 0xCAFE, CUBIN)
    rt.on_module("cuModuleLoadData", 0x500, CUBIN, image_addr=0xBEEF)
    assert rt.on_function("module_function", 0x500, "saxpy4", 0x501)
    finish(rt)


def test_no_ptx_summary_names_the_framework(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    rt.on_module("cuModuleLoadData", 0x1, b"\x7fELF...sm90_xmma_gemm_f32f32\x00")
    rt.on_module("cuModuleLoadData", 0x2, b"\x7fELF...ncclDevKernel_AllReduce\x00")
    rt.compiled.add_input("nvJitLink", 5, "A")
    rt.compiled.add_input("nvJitLink", 5, "B")
    rt.compiled.add_output("nvJitLink", 5, b"\x7fELF..input_reduce_fusion\x00")
    rt.on_module("cuModuleLoadData", 0x3, b"\x7fELF..input_reduce_fusion\x00")
    out = finish(rt)
    assert "3 module(s) had no PTX" in out
    assert "cuBLAS: NVIDIA ships cuBLAS kernels as SASS only" in out and "NCCL:" in out
    assert "XLA (JAX):" in out and "nvJitLink linked several inputs (2 PTX)" in out
    origins = {e["origin"] for e in events(rt, "no_ptx")}
    assert origins == {"cuBLAS", "NCCL", "XLA (JAX)"}


def test_xla_modules_without_any_nvjitlink_link_say_so(tmp_path):
    rt, drv, _ = make_runtime(tmp_path)
    rt.on_module("cuModuleLoadData", 0x1, b"\x7fELF...loop_add_fusion\x00")
    out = finish(rt)
    assert "XLA (JAX):" in out and "no nvJitLink link was seen in this process" in out


@pytest.mark.parametrize("image, path, modules, expected", [
    (b"..cudnn_infer_sm90..", None, {}, frameworks.CUDNN),
    (b"..._ZN2at6native29vectorized_elementwise_kernel..", None, {}, frameworks.TORCH),
    (b"..loop_multiply_fusion\x00..", None, {}, frameworks.XLA),
    (b"\x7fELF anonymous", None, {"jaxlib": 1}, frameworks.XLA),
    (b"\x7fELF anonymous", None, {"torch": 1}, frameworks.TORCH),
    (b"\x7fELF anonymous", None, {}, frameworks.NVCC),
    (None, "/usr/lib/libcublasLt.so.13", {}, frameworks.CUBLAS),
    # cuBLAS's CUTLASS instances, as XLA's GEMM autotuning loads them (seen on the GPU machine)
    (b".text._ZN7cutlass7Kernel2I51cutlass_80_tensorop_s1688gemm_256x64_32x3_tt_align1EEvNT_6ParamsE\x00", None,
     {"jax": 1}, frameworks.CUBLAS),
])
def test_module_origin(image, path, modules, expected):
    assert frameworks.module_origin(image, path, modules) == expected


def test_an_unnamed_module_in_a_jax_process_whose_compiles_we_see_is_a_library():
    assert frameworks.module_origin(b"\x7fELF anonymous", None, {"jax": 1}, xla_compiles_seen=True) \
        == frameworks.XLA_LIBRARY
    assert frameworks.module_origin(b"..loop_add_fusion\x00", None, {"jax": 1}, xla_compiles_seen=True) == frameworks.XLA


def test_summary_is_silent_without_ptx_less_modules():
    assert frameworks.summary_lines(Counter()) == []


# ---------------------------------------------------------------- XLA flags for a JAX child


def test_xla_flags_appended_never_overriding():
    value, added = frameworks.xla_flags_for_probing("--xla_dump_to=/tmp/d")
    assert value == "--xla_dump_to=/tmp/d --xla_gpu_enable_command_buffer=" and added == [
        "--xla_gpu_enable_command_buffer="]
    value, added = frameworks.xla_flags_for_probing("--xla_gpu_enable_command_buffer=FUSION")
    assert value == "--xla_gpu_enable_command_buffer=FUSION" and added == []


def test_prepare_jax_notes_the_flags_in_the_event_log(tmp_path, monkeypatch):
    monkeypatch.setattr(frameworks, "route_ptxas_through_wrapper", lambda env, event=None: None)
    env, seen = {}, []
    assert frameworks.prepare_jax(env, lambda kind, **f: seen.append((kind, f))) == ["--xla_gpu_enable_command_buffer="]
    assert env["XLA_FLAGS"] == "--xla_gpu_enable_command_buffer="
    (kind, fields), = seen
    assert kind == "framework_flags" and fields["framework"] == "jax" and fields["variable"] == "XLA_FLAGS"
    assert frameworks.prepare_jax(env, lambda kind, **f: seen.append(kind)) == [] and len(seen) == 1


# ---------------------------------------------------------------- XLA's ptxas subprocess: the wrapper

from neutrino.runtime.modules import subprocess_compilers  # noqa: E402

HAVE_PTXAS = subprocess_compilers.find_real("ptxas") is not None


def test_ptxas_arguments_as_xla_writes_them():
    assert subprocess_compilers.split_arguments(["/tmp/x/m.ptx", "-o", "/tmp/x/m.cubin", "-arch=sm_90a", "--warn-on-spills"]) \
        == ("/tmp/x/m.ptx", "/tmp/x/m.cubin")
    assert subprocess_compilers.split_arguments(["-arch=sm_90", "--output-file=/o.cubin", "/i.ptx"]) == ("/i.ptx", "/o.cubin")
    assert subprocess_compilers.split_arguments(["--version"]) == (None, None)


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
def test_wrapper_runs_ptxas_unchanged_and_files_the_ptx_by_cubin_hash(tmp_path, monkeypatch):
    """A JAX process: PATH leads XLA to the wrapper; its cubin is the real ptxas's, byte for byte, and the
    index then answers a module load of that cubin with the PTX it came from."""
    env, seen = {"PATH": os.environ["PATH"]}, []
    bin_dir = frameworks.route_ptxas_through_wrapper(env, lambda kind, **f: seen.append(f), str(tmp_path / "idx"))
    assert env["PATH"].split(os.pathsep)[0] == bin_dir and seen[0]["variable"] == "PATH"
    assert shutil.which("ptxas", path=env["PATH"]) == os.path.join(bin_dir, "ptxas")
    ptx = VEC_PTX_FILE.read_text()
    (tmp_path / "m.ptx").write_text(ptx)
    args = [str(tmp_path / "m.ptx"), "-arch=sm_90", "-o"]
    clean_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([os.path.join(bin_dir, "ptxas"), *args, str(tmp_path / "wrapped.cubin")],
                       env=dict(clean_env, PATH=env["PATH"]), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    real = subprocess.run([subprocess_compilers.find_real("ptxas"), *args, str(tmp_path / "real.cubin")], timeout=120)
    assert real.returncode == 0
    cubin = (tmp_path / "wrapped.cubin").read_bytes()
    assert cubin == (tmp_path / "real.cubin").read_bytes()
    monkeypatch.setenv(subprocess_compilers.ENV_INDEX, env[subprocess_compilers.ENV_INDEX])
    found = compilers.CompiledIndex().lookup(cubin)
    assert found is not None and found.compiler == "ptxas" and found.ptx == ptx
    assert compilers.CompiledIndex().lookup(cubin + b"\0") is None
    # a failing compile keeps ptxas's status and files nothing
    (tmp_path / "bad.ptx").write_text(".version 8.0\n.target sm_90\nnot ptx;\n")
    r = subprocess.run([os.path.join(bin_dir, "ptxas"), str(tmp_path / "bad.ptx"), "-arch=sm_90", "-o",
                        str(tmp_path / "bad.cubin")], env=clean_env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "error" in r.stderr.lower()
    assert len(list((tmp_path / "idx").glob("*.ptx"))) == 1
    # a second JAX import in the same process (or a child) does not wrap the wrapper
    assert frameworks.route_ptxas_through_wrapper(env) is None


def test_nvlink_arguments():
    split = subprocess_compilers.split_link_arguments
    assert split(["-arch=sm_90", "-o", "/t/out.cubin", "/t/a.o", "/t/b.o"]) == (["/t/a.o", "/t/b.o"], "/t/out.cubin")
    assert split(["--arch", "sm_90a", "/t/a.cubin", "--output-file=/t/o", "-L", "/lib", "-lcudadevrt"]) \
        == (["/t/a.cubin"], "/t/o")
    assert split(["--version"]) == ([], None)


HAVE_NVLINK = HAVE_PTXAS and subprocess_compilers.find_real("nvlink") is not None


def _wrapped(bin_dir, tool, *args):
    clean_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run([os.path.join(bin_dir, tool), *map(str, args)], env=clean_env, capture_output=True,
                          text=True, timeout=120)


def _second_module(ptx: str) -> str:
    """A PTX module with the same kernels under other names (a second part of one XLA module)."""
    return ptx.replace("saxpy4", "saxpy4_part2").replace("hscale", "hscale_part2")


@pytest.mark.skipif(not HAVE_NVLINK, reason="needs ptxas and nvlink")
def test_nvlink_wrapper_files_the_ptx_of_a_one_part_link_and_a_reason_for_several(tmp_path, monkeypatch):
    """XLA compiles a module in parts (ptxas -c) and links them with nvlink: a link of one part is that
    part's PTX; a link of several parts is refused with the reason; the calls are summarised at exit."""
    env, seen = {"PATH": os.environ["PATH"]}, []
    bin_dir = frameworks.route_ptxas_through_wrapper(env, lambda kind, **f: seen.append(f), str(tmp_path / "idx"))
    assert shutil.which("nvlink", path=env["PATH"]) == os.path.join(bin_dir, "nvlink")
    assert seen[0]["real_nvlink"] == subprocess_compilers.find_real("nvlink")
    ptx = VEC_PTX_FILE.read_text()
    (tmp_path / "a.ptx").write_text(ptx)
    (tmp_path / "b.ptx").write_text(_second_module(ptx))
    for part in ("a", "b"):
        r = _wrapped(bin_dir, "ptxas", "-c", "-arch=sm_90", tmp_path / f"{part}.ptx", "-o", tmp_path / f"{part}.o")
        assert r.returncode == 0, r.stderr
    r = _wrapped(bin_dir, "nvlink", "-arch=sm_90", "-o", tmp_path / "one.cubin", tmp_path / "a.o")
    assert r.returncode == 0, r.stderr
    r = _wrapped(bin_dir, "nvlink", "-arch=sm_90", "-o", tmp_path / "two.cubin", tmp_path / "a.o", tmp_path / "b.o")
    assert r.returncode == 0, r.stderr
    real = subprocess.run([subprocess_compilers.find_real("nvlink"), "-arch=sm_90", "-o", str(tmp_path / "real.cubin"),
                           str(tmp_path / "a.o")], timeout=120)
    assert real.returncode == 0
    one = (tmp_path / "one.cubin").read_bytes()
    assert one == (tmp_path / "real.cubin").read_bytes()  # the wrapper changes nothing nvlink writes
    monkeypatch.setenv(subprocess_compilers.ENV_INDEX, env[subprocess_compilers.ENV_INDEX])
    found = compilers.CompiledIndex().lookup(one)
    assert found is not None and found.ptx == ptx
    two = compilers.CompiledIndex().lookup((tmp_path / "two.cubin").read_bytes())
    assert two is not None and two.ptx is None and "nvlink linked 2 relocatable cubins" in two.reason
    # a failed link keeps nvlink's status and files nothing
    r = _wrapped(bin_dir, "nvlink", "-arch=sm_90", "-o", tmp_path / "bad.cubin", tmp_path / "missing.o")
    assert r.returncode != 0
    index = compilers.CompiledIndex()
    index.wrapper_dir = tmp_path / "idx"
    events = []
    index.close(lambda kind, **f: events.append((kind, f)))
    (kind, fields), = events
    assert kind == "subprocess_compilers"
    assert fields == {"calls": {"ptxas": 2, "nvlink": 3}, "failed": 1, "nvlink_inputs": {"1": 2, "2": 1}}
    assert not (tmp_path / "idx").exists()


def test_an_unseen_xla_cubin_says_which_route_was_missing(monkeypatch):
    monkeypatch.delenv(subprocess_compilers.ENV_INDEX, raising=False)
    assert "ptxas wrapper is not in place" in compilers.unseen_xla_compile_reason()
    monkeypatch.setenv(subprocess_compilers.ENV_INDEX, "/nonexistent")
    assert "persistent compilation cache" in compilers.unseen_xla_compile_reason()


# ---------------------------------------------------------------- end to end: shim + fake nvJitLink


@pytest.fixture(scope="module")
def fakejitlink(fakecuda):  # noqa: F811
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(fakecuda / "libnvJitLink.so.13"),
                    str(FAKE / "fakenvjitlink.c")], check=True)
    return fakecuda


def test_nvjitlink_compiled_kernel_is_probed(tmp_path, fakejitlink, shim):  # noqa: F811
    rc, log = _run_under_fake(tmp_path, fakejitlink, [sys.executable, str(FAKE / "app_nvjitlink.py"),
                                                      str(VEC_PTX_FILE), "saxpy4", "3"])
    assert rc == 0
    assert log == ["saxpy4 probed=1 grid=4"] * 3
    t = nt.load(tmp_path / "trace")
    assert len(t.launches) == 3 and len(t.launches[0].maps["block_sched"].valid()) == 8
    mods = [e for e in nt.read_events(t.path / "event.log") if e["event"] == "module"]
    assert [m["source"] for m in mods] == ["nvJitLink"]


def real_nvjitlink() -> str | None:
    """A real libnvJitLink: $NEUTRINO_TEST_NVJITLINK, or the nvidia-nvjitlink wheel's."""
    if os.environ.get("NEUTRINO_TEST_NVJITLINK"):
        return os.environ["NEUTRINO_TEST_NVJITLINK"]
    site = sysconfig.get_paths()["purelib"]
    hits = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libnvJitLink.so.*")) +
                  glob.glob(os.path.join(site, "nvidia", "nvjitlink", "lib", "libnvJitLink.so.*")))
    return hits[-1] if hits else None


def test_real_nvjitlink_is_tapped(tmp_path, shim):  # noqa: F811
    """The real library (no GPU needed to compile), found by ctypes through dlsym as XLA's stubs do:
    the cubin it returns is mapped to its PTX, sized exactly from its ELF headers."""
    lib = real_nvjitlink()
    if lib is None:
        pytest.skip("no libnvJitLink (pip install nvidia-nvjitlink, or set NEUTRINO_TEST_NVJITLINK)")
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, LD_PRELOAD=str(shim), PYTHONPATH=os.pathsep.join([str(repo), str(FAKE)]))
    r = subprocess.run([sys.executable, str(FAKE / "real_nvjitlink.py"), str(shim), lib, str(VEC_PTX_FILE), "sm_90"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "tapped:" in r.stdout, r.stderr[-2000:]


def test_wrapper_keeps_the_tools_exit_status_and_signals():
    """What XLA sees of a wrapped tool is the tool's own status, a signal as a shell reports it."""
    assert subprocess_compilers.run_tool("/bin/sh", ["-c", "exit 3"]) == 3
    assert subprocess_compilers.run_tool("/bin/sh", ["-c", "kill -TERM $$"]) == 128 + 15
    line = "1.0 nvlink rc=0 out=ab\t-arch=sm_90\t-o\t/t/x y.cubin\t/t/a.o"
    assert subprocess_compilers.read_call(line) == ("nvlink", 0, ["-arch=sm_90", "-o", "/t/x y.cubin", "/t/a.o"])
    assert subprocess_compilers.read_call("garbage") is None
