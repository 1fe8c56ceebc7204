"""Every built-in DSL tool compiles and instruments every corpus kernel into ptxas-valid PTX."""

from __future__ import annotations

from pathlib import Path

import pytest

import neutrino.language as nl
from neutrino.engine import instrument
from neutrino.isa.ptx import parse_module
from neutrino.toolbox import load_probes

from helpers import CORPUS, HAVE_PTXAS, ptxas

TOOLS_DIR = Path(nl.__file__).resolve().parent.parent / "tools"
TOOLS = ("block_sched", "gmem_bytes", "dmat", "tensorop", "program_progress")


@pytest.fixture(scope="module", params=TOOLS)
def tool(request):
    return request.param, load_probes(str(TOOLS_DIR / request.param / "probe.py"))


def test_corpus_is_there():
    assert len(CORPUS) >= 20


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_language_tool_instruments_corpus(tool, path):
    name, probes = tool
    text = path.read_text()
    result = instrument(text, probes, source=str(path))
    entries = [f.name for f in parse_module(text).entries()]
    assert set(entries) <= set(result.kernels)
    ptxas(result.ptx)
    for info in result.kernels.values():
        maps = {m["name"]: m for m in info["maps"]}
        assert name in maps, info["maps"]


def test_language_tools_load_through_the_engine():
    """load_probes on a .py path goes through compile_file; the maps keep the DSL's field names."""
    pf = load_probes(str(TOOLS_DIR / "block_sched" / "probe.py"))
    m = pf.maps["block_sched"]
    assert (m.level, m.cap) == ("warp", 1)
    assert [f.name for f in m.fields] == ["start", "elapsed", "cuid"]


def test_sampled_save_is_predicated_in_the_instrumented_kernel():
    path = next(p for p in CORPUS if p.name.startswith("reduce.sm90"))
    result = instrument(path.read_text(), load_probes(str(TOOLS_DIR / "program_progress" / "probe.py")))
    assert "bra" in path.read_text()
    ptxas(result.ptx)
