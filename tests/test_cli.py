"""The offline commands: clear messages and exit codes, never a traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CORPUS, DATA, HAVE_PTXAS

VADD = DATA / "corpus" / "triton" / "vadd.sm90a.ptx"


REPO = Path(__file__).resolve().parent.parent


def cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "neutrino.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env)


def test_print_roundtrips():
    proc = cli("print", VADD)
    assert proc.returncode == 0
    assert ".visible .entry vadd(" in proc.stdout and "ld.global.v4.b32" in proc.stdout


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
def test_instrument_with_builtin_probe_info_and_check(tmp_path):
    out, info = tmp_path / "o.ptx", tmp_path / "i.json"
    proc = cli("instrument", VADD, "-p", "block_sched", "-o", out, "--info", info, "--check")
    assert proc.returncode == 0, proc.stderr
    assert "ptxas: ok" in proc.stderr
    desc = json.loads(info.read_text())["kernels"]["vadd"]
    assert desc["maps"][0]["level"] == "warp" and desc["maps"][0]["record_bytes"] == 16
    assert desc["params"] == [{"name": "vadd__nt_buf_block_sched", "type": "u64", "map": "block_sched", "role": "buffer"}]
    assert desc["original_params"] == 6
    assert "vadd__nt_buf_block_sched" in out.read_text()


def test_instrument_one_kernel_by_name(tmp_path):
    gemm = DATA / "corpus" / "nvcc" / "gemm.sm90.ptx"
    proc = cli("instrument", gemm, "-p", "gmem_bytes", "-k", "_Z5sgemmILi16EEviiifPKfS1_fPf")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(".entry") == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["instrument", "missing.ptx", "-p", "block_sched"], "missing.ptx: error: cannot read"),
        (["instrument", VADD, "-p", "no_such_probe"], "no such probe file or built-in tool"),
        (["instrument", VADD, "-p", "block_sched", "-k", "nope"], "no entry named 'nope' or containing it (entries: vadd)"),
    ],
)
def test_errors_are_messages(args, message):
    proc = cli(*args)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_ptx_and_bad_probe(tmp_path):
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.0\n.target sm_90\n.address_size 64\n.entry k()\n{\n\tmov.u32 %r1 1\n}\n")
    proc = cli("instrument", bad, "-p", "block_sched")
    assert proc.returncode == 1 and f"{bad}:6:" in proc.stderr and "Traceback" not in proc.stderr
    probe = tmp_path / "p.toml"
    probe.write_text('[p]\nposition = "kernel"\nbefore = "bra $L;"\n')
    proc = cli("instrument", VADD, "-p", probe)
    assert proc.returncode == 1 and f"{probe}:3:" in proc.stderr and "branches are not allowed" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_demo_runs_without_gpu(tmp_path):
    """A few readable lines: what was done and where the files are; the PTX goes to files, not the terminal."""
    proc = cli("demo", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 8 and proc.stderr == ""
    assert "instrumented the example kernel vadd with block_sched" in lines[0]
    assert "map block_sched (array, warp level): start:u64, elapsed:u32, cuid:u32" in proc.stdout
    out = Path(proc.stdout.split("files: ")[1].split(",")[0]).parent  # a temporary directory, not the cwd
    assert not list(tmp_path.iterdir()) and ".entry" not in proc.stdout
    assert "__nt_buf_block_sched" in (out / "probed.ptx").read_text()
    assert json.loads((out / "kernel.json").read_text())["kernels"]["vadd"]["sites"] >= 2


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
def test_instrument_accepts_a_fatbin(tmp_path):
    fatbins = sorted((DATA / "binaries").glob("*.fatbin"))
    if not fatbins:
        pytest.skip("no fatbin fixture")
    proc = cli("instrument", fatbins[0], "-p", "block_sched", "--check", "-o", tmp_path / "o.ptx")
    assert proc.returncode == 0, proc.stderr
    assert "__nt_buf_block_sched" in (tmp_path / "o.ptx").read_text()


def test_pass_debugging_options():
    proc = cli("instrument", DATA / "corpus" / "nvcc" / "vec.sm90.ptx", "-p", "block_sched", "--time-passes", "--verify-each", "--print-after", "lower-save", "-o", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    assert "// ----- IR after lower-save -----" in proc.stderr and "st.global.v2.b32" in proc.stderr
    assert "buffer-addressing" in proc.stderr.split("-----")[-1]
    proc = cli("instrument", VADD, "-p", "block_sched", "--print-after", "nope")
    assert proc.returncode == 1 and "no pass named nope" in proc.stderr
