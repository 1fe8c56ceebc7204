"""The engine's exit-path options (issue 24; not yet the default): `mixed_stores` (a record's u64 and u32 fields
in one 16-byte store) and `late_gate` (the probe gate's predicate set again before each exit's probe code).
Each changes only what it names, every probe and corpus kernel still assembles (ptxas is the oracle), and
the default output stays what it was."""

from __future__ import annotations

import pytest

from neutrino.engine import instrument
from neutrino.toolbox import load_probes

from helpers import CORPUS, HAVE_PTXAS, PROBES, ptxas

VADD = next(p for p in CORPUS if p.name == "vadd.sm90a.ptx")
GATE = "\tsetp.eq.u32 \t%nt_on, %nt_gate, 0;"
OPTIONS = [{"mixed_stores": True}, {"late_gate": True}, {"mixed_stores": True, "late_gate": True}]


def lines(ptx: str) -> list[str]:
    return ptx.splitlines()


def test_late_gate_sets_the_gate_again_before_the_exit_code_only():
    probes = load_probes("block_sched")
    plain, late = (instrument(VADD.read_text(), probes, late_gate=flag).ptx for flag in (False, True))
    assert lines(plain).count(GATE) == 1 and lines(late).count(GATE) == 2
    again = [i for i, line in enumerate(lines(late)) if line == GATE][1]
    rest = lines(late)[again + 1:]
    exit_clock = next(i for i, line in enumerate(rest) if "%clock64" in line)
    ret = next(i for i, line in enumerate(rest) if line.strip() == "ret;")
    assert exit_clock == 0 and ret > exit_clock  # right before the exit probe's first instruction
    assert [line for line in lines(late) if line != GATE] == [line for line in lines(plain) if line != GATE]


def test_late_gate_leaves_the_chain_variant_alone():
    probes = load_probes("block_sched")
    chain = instrument(VADD.read_text(), probes, graph_chain=True, late_gate=True).ptx
    assert chain == instrument(VADD.read_text(), probes, graph_chain=True).ptx


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "+".join(o))
@pytest.mark.parametrize("probe", ["block_sched", "gmem_bytes", "gmem_bytes_thread", "tensorop", *map(str, PROBES)],
                         ids=lambda p: p.rsplit("/", 1)[-1])
def test_options_assemble_on_the_corpus(probe, options):
    probes = load_probes(probe)
    for path in CORPUS:
        ptxas(instrument(path.read_text(), probes, source=str(path), **options).ptx)
