"""The HIP hook end to end on the CPU: shim/hip.c + neutrino/runtime/hip against a fake HIP runtime.

tests/fakehip/fakehip.c plays libamdhip64.so (device memory is host memory) and,
for a probed launch, writes what block_sched would into the map buffer it finds
among the kernel's arguments; tests/fakehip/app.py is a HIP program. What is
checked: the hooks see the module API, the probed code object is built with
the LLVM tools and loaded, the map buffer is appended to the kernel's own
arguments (kernelParams or `extra`), and the results land in a trace that
neutrino.trace reads; a kernel we cannot probe runs unprobed with a fallback line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from neutrino import trace
from neutrino.isa.gcn import parse_module
from neutrino.runtime.hip import codeobj

HERE = Path(__file__).parent
FAKE = HERE / "fakehip"
VADD = HERE / "data" / "gcn" / "vadd.gfx90a.s"
pytestmark = pytest.mark.skipif(not codeobj.tools_present(), reason="LLVM 19 tools not installed (apt-get install llvm-19 lld-19)")


@pytest.fixture(scope="module")
def fakehip(tmp_path_factory):
    d = tmp_path_factory.mktemp("fakehip")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(d / "libamdhip64.so"), str(FAKE / "fakehip.c")], check=True)
    elf = codeobj.assemble(VADD.read_text(), "gfx90a")
    (d / "vadd.co").write_bytes(elf)
    (d / "vadd.bundle").write_bytes(codeobj.bundle([("host-x86_64-unknown-linux-gnu", b""),
                                                     ("hipv4-amdgcn-amd-amdhsa--gfx90a", elf)]))
    return d


def run_app(tmp_path, fakehip, image: str, probe: str, *, extra: bool = False) -> tuple[list[str], Path]:
    log, tracedir = tmp_path / "log", tmp_path / "trace"
    env = dict(os.environ, LD_LIBRARY_PATH=str(fakehip), FAKEHIP_LOG=str(log), FAKEHIP_BUFPARAM="4",
               PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("LD_PRELOAD", None)
    if extra:  # the map pointer goes after the kernel's arguments, hidden ones included: at align8(kernarg size)
        env["FAKEAPP_EXTRA"] = "1"
        env["FAKEHIP_BUFOFFSET"] = str(-(-parse_module(VADD.read_text()).kernels()[0].descriptor.get_int("kernarg_size") // 8) * 8)
    cmd = [sys.executable, "-m", "neutrino.runtime.hip.hook", "-p", probe, "-t", str(tracedir),
           str(FAKE / "app.py"), str(fakehip / image), "vadd", "2"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "app done" in r.stdout, r.stderr
    return log.read_text().splitlines(), tracedir


@pytest.mark.parametrize("image, extra", [("vadd.bundle", False), ("vadd.co", True)], ids=["bundle-kernelParams", "elf-extra"])
def test_probed_launch_writes_a_trace(tmp_path, fakehip, image, extra):
    lines, tracedir = run_app(tmp_path, fakehip, image, "block_sched", extra=extra)
    # the probed copy ran, with the program's own first argument still first
    assert lines == ["vadd probed=1 grid=3 arg0=1000"] * 2
    t = trace.load(tracedir)
    assert [launch.kernel for launch in t.launches] == ["vadd", "vadd"]
    info = t.kernel_info("vadd")
    assert info["isa"] == "gcn" and info["params"][0]["name"] == "nt_map_block_sched"
    data = t.launches[0].maps["block_sched"]
    records = data.valid()
    assert len(records) == 3 * 2  # 3 workgroups of 128 work-items: 2 wave64 units each
    assert [int(r["lstart"]) for r in records] == list(range(6)) and {int(r["elapse"]) for r in records} == {7}
    probed = next(tracedir.glob("*/kernel/*/probed.ptx")).read_text()
    assert "nt_map_block_sched" in probed and "s_memtime" in probed


def test_unprobeable_kernel_runs_unprobed(tmp_path, fakehip):
    lines, tracedir = run_app(tmp_path, fakehip, "vadd.bundle", "dmat")  # cap = "count": refused on GCN
    assert lines == ["vadd probed=0 grid=3 arg0=1000"] * 2
    events = trace.read_events(next(tracedir.iterdir()) / "event.log")
    fallbacks = [e for e in events if e["event"] == "fallback"]
    assert len(fallbacks) == 1 and 'cap = "count"' in fallbacks[0]["reason"]
