"""GCN/RDNA mnemonics: a mistyped one in a probe's position or snippet is refused where it is written, with a did-you-mean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from neutrino.errors import ProbeError
from neutrino.isa.gcn import ir, parse_module
from neutrino.isa.gcn.dialect import GFX9
from neutrino.isa.gcn.mnemonics import PARSER_LIBRARY, accepted, candidates, is_known
from neutrino.isa.rdna.dialect import GFX11
from neutrino.llvm_mc import find_llvm_mc
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probes

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


def probe_text(position: str, line: str) -> str:
    return f'[p]\nposition = "{position}"\nbefore = """\n.reg .s64 %t\n.reg .v32 %v\n{line}\n"""\n'


def refusal(text: str, isa: str) -> str:
    with pytest.raises(ProbeError) as e:
        parse_probes(text, "t.toml", isa=isa)
    return str(e.value)


@pytest.mark.parametrize("isa, folder, dialect", [("gcn", "gcn", GFX9), ("rdna", "rdna", GFX11)])
def test_every_corpus_mnemonic_is_known(isa, folder, dialect):
    """The lists are complete for what compilers emit: every instruction of the corpus is in its generation's list."""
    mnemonics = {i.mnemonic for path in (DATA / folder).glob("*.s") for i in ir.instructions(parse_module(path.read_text()).items)}
    assert len(mnemonics) > 30
    assert [m for m in sorted(mnemonics) if not is_known(m, dialect.mnemonics)] == []


@pytest.mark.parametrize("isa, position, suggestion", [
    ("gcn", "global_lod_", "global_load_"), ("rdna", "global_lod_", "global_load_"), ("gcn", "s_cbrnch_", "s_cbranch_"),
    ("gcn", "ld.globl", "ld.global"), ("gcn", "#memroy.global", "#memory.global"), ("gcn", "v_wmma_", "v_mfma_"),
])
def test_mistyped_position_is_refused_with_a_suggestion(isa, position, suggestion):
    message = refusal(probe_text(position, "s_mov_b64 %t, 0"), isa)
    assert "t.toml:2:13: error: [probe p] position" in message
    assert f"did you mean '{suggestion}'" in message


@pytest.mark.parametrize("isa, position", [("gcn", "global_load_dwordx2"), ("gcn", "v_mfma_"), ("rdna", "v_wmma_"),
                                           ("rdna", "global_load_b32:global_store_"), ("gcn", "ld.global:#memory.global")])
def test_real_positions_are_accepted(isa, position):
    assert parse_probes(probe_text(position, "s_mov_b64 %t, 0"), "t.toml", isa=isa).probes[0].position


@pytest.mark.parametrize("isa, line, suggestion", [
    ("gcn", "s_memtme %t", "s_memtime"), ("gcn", "s_mov_b23 %t, 0", "s_mov_b32"), ("rdna", "s_mov_b46 %t, 0", "s_mov_b64"),
    ("gcn", "v_mov_b32_e23 %v, 0", "v_mov_b32"), ("rdna", "v_add_nc_u23_e32 %v, 1, %v", "v_add_nc_u32_e32"),
])
def test_mistyped_snippet_mnemonic_is_refused_with_a_suggestion(isa, line, suggestion):
    message = refusal(probe_text("kernel", line), isa)
    assert f"t.toml:6:1: error: [probe p] unknown {isa.upper()} mnemonic {line.split()[0]}" in message
    assert f"did you mean '{suggestion}'" in message


def test_other_generations_word_keeps_its_own_hint():
    """s_memtime is a real mnemonic, of gfx9 only: on RDNA the hint says what to write instead."""
    assert "does not exist on RDNA" in refusal(probe_text("kernel", "s_memtime %t"), "rdna")


@pytest.mark.parametrize("how", ["file", "-e"])
def test_instrument_refuses_a_typo_with_exit_1(tmp_path, how):
    text = probe_text("global_lod_", "s_memtme %t")
    probe = tmp_path / "typo.toml"
    probe.write_text(text)
    args = ["-p", str(probe)] if how == "file" else ["-e", text]
    proc = subprocess.run([sys.executable, "-m", "neutrino", "instrument", str(DATA / "gcn" / "vadd.gfx90a.s"), *args,
                           "-o", str(tmp_path / "out.s")], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "did you mean 'global_load_'" in proc.stderr and "did you mean 's_memtime'" in proc.stderr
    assert not (tmp_path / "out.s").exists()


@pytest.mark.skipif(find_llvm_mc() is None or not Path(PARSER_LIBRARY).exists(), reason="llvm-19 not installed")
def test_lists_are_what_llvm_19_accepts():
    """The generated lists equal what `python -m neutrino.isa.gcn.mnemonics` would write now (not edited by hand)."""
    names = candidates()
    assert set().union(accepted(names, "gfx90a"), accepted(names, "gfx942")) == GFX9.mnemonics
    assert accepted(names, "gfx1100") == GFX11.mnemonics


@pytest.mark.parametrize("isa", ["gcn", "rdna"])
def test_source_line_positions_are_refused_as_ptx_only(isa):
    """`block`/`line` (the lines tools) are no typo: GCN modules carry no source lines, so the message says so."""
    message = refusal(probe_text("block", "s_mov_b64 %t, 0"), isa)
    assert "position 'block': selects instructions by source line, which only PTX modules carry" in message
    with pytest.raises(ProbeError, match="only PTX modules carry"):
        load_probes("lines_light", isa=isa)


@pytest.mark.parametrize("isa", ["gcn", "rdna"])
@pytest.mark.parametrize("tool", ["block_sched", "gmem_bytes", "gmem_bytes_thread", "tensorop", "tensorop_thread",
                                  "program_progress", "dmat"])
def test_builtin_tools_positions_are_known_on_amd(isa, tool):
    assert load_probes(tool, isa=isa).probes
