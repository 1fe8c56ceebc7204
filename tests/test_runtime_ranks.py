"""Several GPUs: devices per context in one process, ranks from the launcher's environment,
one run directory per rank, and report/export over a job (spec/runtime.md, "Several GPUs")."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

import neutrino.trace as nt
from neutrino.analysis.ranks import describe_rank
from neutrino.cli import main as cli_main
from neutrino.probefile import parse_probes
from neutrino.runtime.instrument.codecache import CodeCache
from neutrino.runtime.core import NOT_HANDLED, Runtime
from neutrino.runtime.start.launcher import child_env
from neutrino.runtime.start.options import RuntimeOptions
from neutrino.runtime.modules.ptx_source import PtxImage
from neutrino.runtime.start.rank import COLLECTIVE_DEFAULTS, ENV_DEFAULTS, rank_from_env, start_fields
from neutrino.runtime.start.tracedir import ENV_JOB, TraceDir, run_path

from fakedriver import FakeDriver, FakeShim, ctx_of, param_u64
from test_runtime_core import BLOCK_SCHED, VEC_PTX, fake_block_sched, req
from test_runtime_shim import FAKE, VEC_PTX as VEC_PTX_PATH, _run_under_fake, fakecuda, shim  # noqa: F401 - fixtures


# ------------------------------------------------------------------ several devices, one process

def multi_device_runtime(tmp_path, devices, *, ptx=None, **opts):
    drv, shim = FakeDriver(devices=devices), FakeShim()
    buffers = []  # (context current at the launch, the map buffer it was given)

    def kernel(drv, r, params, name):
        buffers.append((drv.ctx_get_current(), param_u64(params, 4)))
        fake_block_sched(drv, r, params, name)

    drv.kernel_impl["saxpy4"] = kernel
    image = ptx or PtxImage(VEC_PTX, None, "test")
    rt = Runtime(drv, shim, RuntimeOptions(probe="p.toml", tracedir=str(tmp_path), **opts),
                 parse_probes(BLOCK_SCHED, "p.toml"), trace=TraceDir.create(tmp_path / "trace"),
                 cache=CodeCache(None), ptx_finder=lambda image_, arch, path=None: image)
    rt.on_module("cuLibraryLoadData", 0x100, VEC_PTX.encode())
    # a CUkernel handle: valid in every context, launched on whichever is current
    assert rt.on_function("library_kernel", 0x100, "saxpy4", 0x200)
    return rt, drv, buffers


def launch_on(rt, drv, device, index=0):
    drv.ctx_set_current(ctx_of(device))
    r, keep = req(func=0x200, index=index)
    return rt.on_launch(r)


def events_of(rt, kind):
    return [e for e in nt.read_events(rt.trace.path / "event.log") if e["event"] == kind]


def test_one_function_on_two_devices_gets_code_and_buffers_per_context(tmp_path):
    rt, drv, buffers = multi_device_runtime(tmp_path, [(9, 0), (10, 0)])
    assert [launch_on(rt, drv, d, i) for i, d in enumerate([0, 1, 0, 1])] == [0, 0, 0, 0]
    rt.finish(io.StringIO())
    probed = [f for _, f, *_ in drv.launches]
    assert drv.launch_ctx == [ctx_of(d) for d in (0, 1, 0, 1)]
    # each context launches probed code loaded in that context; a context reuses its own
    assert [drv.made_in[f] for f in probed] == drv.launch_ctx
    assert probed[0] == probed[2] != probed[1] == probed[3]
    # and is given buffers allocated in it
    assert [(ctx, drv.made_in[buf]) for ctx, buf in buffers] == [(c, c) for c in drv.launch_ctx]
    ctxs = events_of(rt, "context")
    assert [(e["device"], e["arch"], e["pci_bus_id"]) for e in ctxs] == [(0, "sm_90", "0000:18:00.0"),
                                                                         (1, "sm_100", "0000:19:00.0")]
    # different architectures never share probed code: two cache misses, two entries
    assert [e["cache"] for e in events_of(rt, "instrument")] == ["miss", "miss"]
    t = nt.load(rt.trace.path)
    assert len(t.launches) == 4 and all(len(la.maps["block_sched"].valid()) == 8 for la in t.launches)


def test_devices_of_one_arch_share_the_cache_entry_not_the_module(tmp_path):
    rt, drv, _ = multi_device_runtime(tmp_path, [(9, 0), (9, 0)])
    assert launch_on(rt, drv, 0) == 0 and launch_on(rt, drv, 1) == 0
    rt.finish(io.StringIO())
    assert [e["cache"] for e in events_of(rt, "instrument")] == ["miss", "memory"]
    assert drv.links == 1  # JIT once; loaded once per context
    f0, f1 = (f for _, f, *_ in drv.launches)
    assert f0 != f1 and drv.made_in[f0] == ctx_of(0) and drv.made_in[f1] == ctx_of(1)


def test_ptx_for_one_arch_falls_back_on_the_other_device_only(tmp_path):
    """sm_90a PTX (picked when the library was loaded) cannot run on sm_100: that device runs the
    original, logged once; the kernel stays probed on sm_90."""
    rt, drv, _ = multi_device_runtime(tmp_path, [(9, 0), (10, 0)], ptx=PtxImage(VEC_PTX, 90, "test", "a"))
    assert [launch_on(rt, drv, d, i) for i, d in enumerate([1, 0, 1, 0])] == [NOT_HANDLED, 0, NOT_HANDLED, 0]
    out = io.StringIO()
    rt.finish(out)
    (fb,) = events_of(rt, "fallback")
    assert fb["stage"] == "arch" and "sm_90a" in fb["reason"] and "sm_100" in fb["reason"] and not fb["permanent"]
    assert rt.fallbacks[("saxpy4", "arch")] == 2 and rt.functions[0x200].failed is None and not rt.shim.removed
    assert len(nt.load(rt.trace.path).launches) == 2


def test_teardown_forgets_contexts(tmp_path):
    """A context created after a teardown may reuse the handle: nothing built for the old one is used."""
    rt, drv, _ = multi_device_runtime(tmp_path, [(9, 0)])
    assert launch_on(rt, drv, 0) == 0
    rt.on_teardown()
    assert launch_on(rt, drv, 0, 1) == 0
    rt.finish(io.StringIO())
    assert [e["cache"] for e in events_of(rt, "instrument")] == ["miss", "memory"]
    assert len(events_of(rt, "context")) == 2
    f0, f1 = (f for _, f, *_ in drv.launches)
    assert f0 != f1


def test_collective_kernels_untouched_and_reported_once(tmp_path):
    rt, drv, _ = multi_device_runtime(tmp_path, [(9, 0)])
    names = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_Broadcast_RING_LL", "ncclKernel_AllGather"]
    assert not any(rt.on_function("library_kernel", 0x100, n, 0x300 + i) for i, n in enumerate(names))
    assert not rt.on_function("module_function", 0x999, names[0], 0x400)  # a module without PTX: same
    assert launch_on(rt, drv, 0) == 0
    out = io.StringIO()
    rt.finish(out)
    assert [e["kernel"] for e in events_of(rt, "collective")] == [names[0]]
    assert out.getvalue().count("NCCL") == 1 and "3 NCCL kernel(s) ran untouched" in out.getvalue()
    (ex,) = events_of(rt, "exit")
    assert ex["collectives"] == 3


def test_collective_kernels_probed_when_named(tmp_path):
    rt, _, _ = multi_device_runtime(tmp_path, [(9, 0)], kernels=("saxpy4:ncclDevKernel",))
    assert rt.on_function("library_kernel", 0x100, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0x300)


# ------------------------------------------------------------------ ranks and directories

@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}, (3, 1, 8, "torchrun")),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"},
     (2, 0, 4, "openmpi")),
    ({"PMI_RANK": "5", "PMI_SIZE": "6"}, (5, None, 6, "pmi")),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, None),  # a batch script's single process
    ({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2"}, (1, 1, 2, "slurm")),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "RANK": "1", "WORLD_SIZE": "4"}, (1, None, 4, "torchrun")),
    ({"RANK": "x", "PMIX_RANK": "7"}, (7, None, None, "pmix")),
    ({"RANK": "-1"}, None),
])
def test_rank_from_env(env, expected):
    info = rank_from_env(env)
    assert (None if info is None else (info.rank, info.local_rank, info.world_size, info.launcher)) == expected


def test_run_path_layouts(tmp_path):
    assert run_path(tmp_path, 0, 42).name.endswith("_42")
    assert run_path(tmp_path, 0, 42, 1, "20261123-190000_7") == tmp_path / "20261123-190000_7" / "rank1"
    assert run_path(tmp_path, 0, 42, 1, None).name.endswith("_42_rank1")
    assert run_path(tmp_path, 0, 42, 1, "../x").name.endswith("_42_rank1")  # never outside the trace dir


def test_a_second_process_of_one_rank_takes_its_own_directory(tmp_path):
    a = TraceDir.create(tmp_path, pid=10, rank=0, job="job", lazy=True)
    b = TraceDir.create(tmp_path, pid=11, rank=0, job="job", lazy=True)
    for td in (a, b):
        td.event("start", pid=0)
        td.event("module")
        td.close()
    assert (a.path.name, b.path.name) == ("rank0", "rank0.11")
    assert [r for r, _ in nt.find_rank_dirs(tmp_path / "job")] == [0, 0]


def test_child_env_turns_nvlink_multicast_off_unless_set(tmp_path):
    opts = RuntimeOptions(probe="p.toml")
    env = child_env(opts, Path("/x/shim.so"), base={"NCCL_NVLS_ENABLE": "1"})
    assert env["NCCL_NVLS_ENABLE"] == "1"  # the user's choice stands
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env[ENV_DEFAULTS] == "TORCH_SYMM_MEM_DISABLE_MULTICAST,NVSHMEM_DISABLE_NVLS"
    assert env[ENV_JOB].endswith(f"_{os.getpid()}")
    fields = start_fields(dict(env, RANK="1", WORLD_SIZE="2", CUDA_VISIBLE_DEVICES="0"))
    assert fields["rank"] == 1 and fields["world_size"] == 2 and fields["cuda_visible_devices"] == "0"
    assert fields["env_defaults"] == {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    assert set(COLLECTIVE_DEFAULTS) == {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}


# ------------------------------------------------------------------ the shim, end to end (fake libcuda)

def test_c_fast_path_plans_and_pools_per_context(tmp_path, fakecuda, shim, monkeypatch):  # noqa: F811
    """One function launched on two devices in turn: a plan and a pool per context, every launch probed."""
    monkeypatch.setenv("FAKEAPP_DEVICES", "2")
    monkeypatch.setenv("FAKECUDA_CC", "90,90")
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX_PATH),
                                                   "saxpy4", "20"])
    assert rc == 0 and log == ["saxpy4 probed=1 grid=4"] * 20
    t = nt.load(tmp_path / "trace")
    assert [(e["device"], e["arch"]) for e in t.events if e["event"] == "context"] == [(0, "sm_90"), (1, "sm_90")]
    assert len([e for e in t.events if e["event"] == "fast_path"]) == 2
    assert [la.index for la in t.launches] == list(range(20))
    assert all(len(la.maps["block_sched"].valid()) == 8 for la in t.launches)


def test_mixed_architectures_in_one_process(tmp_path, fakecuda, shim, monkeypatch):  # noqa: F811
    """sm_90 PTX on an sm_90 and an sm_80 device: probed on the first, the original on the second."""
    monkeypatch.setenv("FAKEAPP_DEVICES", "2")
    monkeypatch.setenv("FAKECUDA_CC", "90,80")
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "app.py"), str(VEC_PTX_PATH),
                                                   "saxpy4", "6"])
    assert rc == 0 and [line.split()[1] for line in log] == ["probed=1", "probed=0"] * 3
    t = nt.load(tmp_path / "trace")
    assert [e["stage"] for e in t.events if e["event"] == "fallback"] == ["arch"]
    assert len(t.launches) == 3


def test_two_ranks_on_one_device_each_get_a_directory_and_report(tmp_path, fakecuda, shim, capsys):  # noqa: F811
    rc, log = _run_under_fake(tmp_path, fakecuda, [sys.executable, str(FAKE / "ranks.py"), "2", str(VEC_PTX_PATH),
                                                   "saxpy4", "5"])
    assert rc == 0 and log == ["saxpy4 probed=1 grid=4"] * 10
    (job,) = (tmp_path / "trace").iterdir()  # the launcher process of ranks.py left no directory
    ranks = nt.find_rank_dirs(job)
    assert [(r, p.name) for r, p in ranks] == [(0, "rank0"), (1, "rank1")]
    pids = set()
    for rank, t in nt.load_job(job):
        (start,) = [e for e in t.events if e["event"] == "start"]
        assert (start["rank"], start["local_rank"], start["world_size"], start["rank_from"]) == (rank, rank, 2,
                                                                                                 "torchrun")
        assert set(start["env_defaults"]) <= set(COLLECTIVE_DEFAULTS)
        pids.add(start["pid"])
        assert len(t.launches) == 5 and describe_rank(rank, t).startswith(f"rank {rank} (pid ")
    assert len(pids) == 2
    with pytest.raises(nt.TraceError, match="a job of 2 rank"):
        nt.load(job)

    capsys.readouterr()
    assert cli_main(["report", str(job)]) == 0
    out = capsys.readouterr().out
    assert "== rank 0 (pid" in out and "== rank 1 (pid" in out and "GPU 0 sm_90 0000:18:00.0" in out
    combined = out.split("== all ranks", 1)[1].splitlines()
    assert combined[1].split() == ["kernel", "launches", "rank", "0", "(us)", "rank", "1", "(us)", "max/min"]
    assert combined[3].split()[:2] == ["saxpy4", "10"]
    assert cli_main(["report", str(job), "--format", "json"]) == 0  # for scripts: each rank's rows
    rows = json.loads(capsys.readouterr().out)["kernels"]
    assert [(r["rank"], r["kernel"], r["launches"]) for r in rows] == [(0, "saxpy4", 5), (1, "saxpy4", 5)]

    out_json = tmp_path / "job.json"
    assert nt.find_job_dir(tmp_path / "trace") == job  # the trace directory holds this job only
    assert cli_main(["export", str(tmp_path / "trace"), "--perfetto", str(out_json)]) == 0
    doc = json.loads(out_json.read_text())
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert sorted(names) == [1, 2] and names[1].startswith("rank 0") and names[2].startswith("rank 1")
    launches = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "launch"]
    assert sorted((e["pid"], e["args"]["rank"]) for e in launches) == [(1, 0)] * 5 + [(2, 1)] * 5
    assert doc["otherData"]["time"] == "host" and doc["otherData"]["ranks"] == [0, 1]
    # a rank's launches do not overlap on its timeline
    for pid in (1, 2):
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in launches if e["pid"] == pid)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
