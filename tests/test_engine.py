"""The engine's front door: what `instrument` promises beyond the passes."""

import gc
from pathlib import Path

import pytest

from neutrino.engine import instrument
from neutrino.toolbox import load_probes

from helpers import CORPUS


PROBES = ["block_sched", "gmem_bytes", *sorted(str(p) for p in (Path(__file__).parent / "data" / "probes").glob("*.toml"))]


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: Path(p).stem)
@pytest.mark.parametrize("path", [p for p in CORPUS if p.name in ("matmul.sm90a.ptx", "reduce.sm90.ptx")], ids=lambda p: p.name)
def test_instrumenting_leaves_no_reference_cycles(path, probe):
    """Pausing the cycle collector during `instrument` is only sound if the IR never forms cycles."""
    probes = load_probes(probe)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        result = instrument(path.read_text(), probes)
        del result
        assert gc.collect() == 0
    finally:
        if was_enabled:
            gc.enable()


@pytest.mark.parametrize("enabled", [True, False])
def test_instrument_restores_the_collector_state(enabled):
    probes = load_probes("block_sched")
    text = CORPUS[0].read_text()
    (gc.enable if enabled else gc.disable)()
    try:
        instrument(text, probes)
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
