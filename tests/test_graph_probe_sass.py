"""A kernel's `.reqntid` makes its block shape constants in the probe's prologue (neutrino/passes/buffers.py,
thread_geometry): fewer instructions per warp on tiny kernels (issue 24), the same unit indices. ptxas is the
oracle for what we emit; benchmarks/graph_probe_sass.py counts the machine code."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neutrino.engine import instrument
from neutrino.passes.buffers import required_block
from neutrino.toolbox import load_probe_argument

ROOT = Path(__file__).resolve().parents[1]
VADD = ROOT / "tests" / "data" / "corpus" / "triton" / "vadd.sm90a.ptx"


def prologue_sources(ptx: str) -> dict[str, str]:
    """What each of the prologue's block registers is set from (register suffix → source operand)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"mov\.u32\s+%nt_(n?tid_[xyz]),\s*([^;]+);", ptx)}


def with_reqntid(ptx: str, dims: str | None) -> str:
    return re.sub(r"\.reqntid [^\n]*\n", f".reqntid {dims}\n" if dims else "", ptx, count=1)


@pytest.mark.parametrize("directives, block", [
    ([".reqntid 128"], (128, 1, 1)), ([".maxnreg 32", ".reqntid 16, 16"], (16, 16, 1)),
    ([".reqntid 2,4,8"], (2, 4, 8)), ([".maxntid 128"], None), ([], None), ([".reqntid 0"], None)])
def test_the_required_block_is_read_from_the_directives(directives, block):
    assert required_block(directives) == block


@pytest.mark.parametrize("dims, expected", [
    ("128", {"ntid_x": "128", "ntid_y": "1", "ntid_z": "1", "tid_x": "%tid.x", "tid_y": "0", "tid_z": "0"}),
    ("16, 8", {"ntid_x": "16", "ntid_y": "8", "ntid_z": "1", "tid_x": "%tid.x", "tid_y": "%tid.y", "tid_z": "0"}),
    (None, {"ntid_x": "%ntid.x", "ntid_y": "%ntid.y", "ntid_z": "%ntid.z", "tid_x": "%tid.x", "tid_y": "%tid.y",
            "tid_z": "%tid.z"}),
])
def test_a_required_block_shape_is_constant_in_the_prologue(tmp_path, dims, expected):
    """With `.reqntid` every launch has that block: its sizes are immediates and a size-1 dimension's index is
    0; without it the special registers are read as before. ptxas accepts each."""
    ptx = with_reqntid(VADD.read_text(), dims)
    out = instrument(ptx, load_probe_argument("block_sched", None)).ptx
    assert prologue_sources(out) == expected
    if shutil.which("ptxas"):
        (tmp_path / "k.ptx").write_text(out)
        r = subprocess.run(["ptxas", "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_the_sass_count_of_the_probe_on_a_tiny_kernel():
    """benchmarks/graph_probe_sass.py on vadd: the probe adds fewer instructions with the block shape constant
    than without it (the directive removed), and no constant-bank read of the block's sizes is left."""
    if not shutil.which("ptxas"):
        pytest.skip("no ptxas")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import graph_probe_sass

    try:
        graph_probe_sass.disassembler()
    except SystemExit:
        pytest.skip("no nvdisasm or cuobjdump")
    with_block = graph_probe_sass.measure(VADD, "block_sched")
    without = VADD.parent / "vadd.sm90a.ptx"
    tmp = Path(pytest.importorskip("tempfile").mkdtemp()) / "vadd_noreq.sm90a.ptx"
    tmp.write_text(with_reqntid(without.read_text(), None))
    no_block = graph_probe_sass.measure(tmp, "block_sched")
    added = (lambda m: m["sass"][1] - m["sass"][0])
    assert with_block["sass"][0] == no_block["sass"][0]  # the program's own code is the same
    assert added(with_block) < added(no_block)
    assert with_block["added"]["constant"] < no_block["added"]["constant"]


def test_block_sched_adds_no_select_to_a_tiny_kernel(tmp_path):
    """Its register arithmetic runs in every lane and its cursor counts there too (neutrino/passes/resolve.py
    leader_free, lower_save.cursor_in_every_lane): ptxas keeps no other lane's old value, so the probe adds no
    `SEL`; predicated on the leader, each result cost one (7 on vadd before)."""
    if not shutil.which("ptxas"):
        pytest.skip("no ptxas")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import graph_probe_sass

    try:
        graph_probe_sass.disassembler()
    except SystemExit:
        pytest.skip("no nvdisasm or cuobjdump")
    plain = VADD.read_text()
    probed = instrument(plain, load_probe_argument("block_sched", None)).ptx
    _, ops0 = graph_probe_sass.compile_ptx(plain, "sm_90a", tmp_path, "plain")
    _, ops1 = graph_probe_sass.compile_ptx(probed, "sm_90a", tmp_path, "probed")
    assert ops1["SEL"] <= ops0["SEL"]
    assert ops1["STG.E.64"] >= ops0["STG.E.64"] + 2  # the record's two stores are still there
