"""Every built-in probe and every test probe instruments every corpus kernel into valid PTX."""

import pytest

from neutrino.engine import instrument
from neutrino.isa.ptx import parse_module
from neutrino.toolbox import load_probes

from helpers import CORPUS, HAVE_PTXAS, PROBES, assert_keeps_original, ptxas

BUILTINS = ["block_sched", "gmem_bytes", "gmem_bytes_thread", "tensorop", "tensorop_thread"]
ALL_PROBES = BUILTINS + [str(p) for p in PROBES]


def probe_id(p):
    return p.rsplit("/", 1)[-1]


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize("probe", ALL_PROBES, ids=probe_id)
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_instrumented_corpus_assembles_and_keeps_originals(probe, path):
    text = path.read_text()
    probes = load_probes(probe)
    result = instrument(text, probes, source=str(path))
    entries = [f.name for f in parse_module(text).entries()]
    assert set(entries) <= set(result.kernels)
    assert_keeps_original(text, result.ptx, entries)
    ptxas(result.ptx)
    for name, info in result.kernels.items():
        assert len(info["params"]) >= len(probes.maps)
        if any(m.cap == "count" for m in probes.maps.values()):
            assert info["count_kernel"] == name + "__nt_count"
            assert parse_module(result.ptx).function(info["count_kernel"]) is not None


def test_test_probes_cover_the_acceptance_list():
    """thread/warp/block, kernel/instruction positions, helpers, cooperation, CAP>1 and count."""
    files = [load_probes(str(p)) for p in PROBES]
    assert len(files) >= 12
    levels = {p.level for f in files for p in f.probes}
    assert levels == {"thread", "warp", "block"}
    assert any(p.at_kernel for f in files for p in f.probes)
    assert any(not p.at_kernel for f in files for p in f.probes)
    caps = {m.cap for f in files for m in f.maps.values()}
    assert "count" in caps and any(isinstance(c, int) and c > 1 for c in caps)
    texts = " ".join(path.read_text() for path in PROBES)
    for helper in ("OUT", "IN1", "IN2", "ADDR", "BYTES"):
        assert helper in texts
    assert any(len(f.probes) >= 3 for f in files)  # cooperating probes


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize("path", CORPUS[:4], ids=lambda p: p.name)
def test_single_kernel_is_pruned(path):
    text = path.read_text()
    first = parse_module(text).entries()[0].name
    result = instrument(text, load_probes("block_sched"), kernel=first)
    assert list(result.kernels) == [first]
    assert [f.name for f in parse_module(result.ptx).entries()] == [first]
    ptxas(result.ptx)
