"""benchmarks/graph_chain.py (issue 24's append-free graph data path, a prototype) offline: its kernels compile
with ptxas for sm_90a, the host's advance gives known answers, and a dry run on the model of the GPU
(benchmarks/graph_chain_sim.py: the generated advance interpreted) checks exact, and fails when the advance
is broken on purpose. The GPU timing itself is benchmarks/graph_chain_gpu.sh's."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "graph_chain.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
spec = importlib.util.spec_from_file_location("graph_chain", SCRIPT)
gc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gc)

SMALL = ["--simulate", "--rounds", "1", "--warmup-rounds", "0", "--replays", "20", "--slots", "32",
         "--drain-replays", "40", "--drain-slots", "8", "--only", "candidate),SetParams"]


def head(cur=0x1000, written=0, dropped=0, primed=1, drained=0, mask=7, stride=0x100):
    return [cur, 0, 0x1000, mask | stride << 32, written, dropped | primed << 32, drained, 0]


def test_host_advance_known_answers():
    h = gc.host_advance(head(written=3))  # a slot written: published, the next one is slot 4
    assert (h[gc.WRITTEN // 8], h[gc.CUR // 8], h[gc.DROPPED // 8] & 0xFFFFFFFF) == (4, 0x1000 + 4 * 0x100, 0)
    h = gc.host_advance(head(written=7, drained=1))  # 8 published, 1 drained: 7 held, slot 8 % 8 is free
    assert (h[gc.WRITTEN // 8], h[gc.CUR // 8]) == (8, 0x1000)
    h = gc.host_advance(head(written=8, drained=1))  # 9 published, 1 drained: 8 held, the ring is full
    assert (h[gc.WRITTEN // 8], h[gc.CUR // 8]) == (9, 0)
    h = gc.host_advance(head(cur=0, written=8, dropped=2))  # wrote nowhere: counted dropped
    assert (h[gc.WRITTEN // 8], h[gc.DROPPED // 8] & 0xFFFFFFFF, h[gc.CUR // 8]) == (8, 3, 0)
    assert gc.host_advance(head(primed=0)) == head(primed=0)  # an unprimed sink: nothing to publish


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
def test_every_kernel_compiles_for_sm90a(tmp_path):
    assert gc.ptx_only(tmp_path) == 0
    assert len(list(tmp_path.glob("chain_*.cubin"))) == len({gc.chain_name(r.opts) for r in gc.ROWS if r.opts})


def run(*extra):
    done = subprocess.run([sys.executable, str(SCRIPT), *SMALL, *extra], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_dry_run_is_exact():
    out = run()
    rows = [ln for ln in out.splitlines() if ln.startswith("| chain") or ln.startswith("| host SetParams")]
    assert len(rows) >= 6 and all(ln.rstrip(" |").endswith("ok") for ln in rows), out
    drained = [ln for ln in out.splitlines() if ln.startswith("drained run")]
    assert len(drained) == 8 and all(ln.endswith(": ok") for ln in drained), out  # (candidate, host-cached, engine, late)
    assert "written [8, 8, 8, 8, 8, 8, 8, 8], dropped [32, 32, 32, 32, 32, 32, 32, 32]" in out


@pytest.mark.parametrize("fault", ["no-tag", "no-full"])
def test_a_broken_advance_is_caught(fault):
    out = run("--fault", fault)
    assert "WRONG" in out, out
