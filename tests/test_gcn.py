"""GCN (AMD gfx90a/gfx942): round trip, semantics, the probe pipeline, and LLVM 19's assembler as the oracle."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from neutrino.engine import instrument
from neutrino.isa.gcn.target import GCN
from neutrino.errors import InstrumentError, ParseError, ProbeError
from neutrino.isa.gcn import ir, parse_module, print_module
from neutrino.isa.gcn.semantics import semantics
from neutrino.llvm_mc import assemble, find_llvm_mc
from neutrino.passes import default_pipeline
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probes

CORPUS = sorted((Path(__file__).parent / "data" / "gcn").glob("*.s"))
PROBES = ["neutrino/tools/block_sched/gcn.toml", "neutrino/tools/gmem_bytes/gcn.toml"]
needs_mc = pytest.mark.skipif(find_llvm_mc() is None, reason="llvm-mc-19 not installed (apt-get install llvm-19)")


def gfx(path: Path) -> str:
    return path.name.split(".")[-2]


def test_corpus_present():
    assert {gfx(p) for p in CORPUS} == {"gfx90a", "gfx942"} and len(CORPUS) >= 10


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_round_trip(path):
    text = path.read_text()
    module = parse_module(text, str(path))
    assert print_module(module) == text
    # the structure is right, not only the spacing: LLVM's layout prints the same without the kept separators
    for insn in ir.instructions(module.items):
        insn.gap = insn.separators = insn.modifier_gaps = None
    assert print_module(module) == text
    assert module.target == gfx(path) and len(module.kernels()) == 1


def test_parse_errors_are_located():
    with pytest.raises(ParseError) as e:
        parse_module("\t.amdhsa_kernel k\n\t\tbogus\n", "k.s")
    assert "k.s:2:" in str(e.value) and "k.s:1:" in str(e.value)
    with pytest.raises(ParseError, match="ends before it starts"):
        parse_module("k:\n\tv_mov_b32 v[3:2], 0\n", "k.s")


def one(text: str) -> ir.Instruction:
    return next(ir.instructions(parse_module(text + "\n").items))


@pytest.mark.parametrize("text, defs, uses, space, kind, nbytes, address", [
    ("\tglobal_load_dwordx4 a[12:15], v1, s[8:9] offset:48", (0,), (1, 2), "global", "load", 16, (1, 2)),
    ("\tglobal_store_dword v[4:5], v1, off", (), (0, 1, 2), "global", "store", 4, (0, 2)),
    ("\tglobal_atomic_add v1, v1, v6, s[14:15] glc", (0,), (1, 2, 3), "global", "atomic", 4, (1, 3)),
    ("\tglobal_atomic_add v1, v6, s[14:15]", (), (0, 1, 2), "global", "atomic", 4, (0, 2)),
    ("\tglobal_atomic_cmpswap_x2 v[0:1], v2, v[4:7], s[4:5] sc0", (0,), (1, 2, 3), "global", "atomic", 8, (1, 3)),
    ("\tflat_store_dwordx2 v[2:3], v[0:1]", (), (0, 1), "flat", "store", 8, (0,)),
    ("\tbuffer_load_dword v6, v5, s[0:3], 0 offen", (0,), (1, 2, 3), "buffer", "load", 4, (1, 2, 3)),
    ("\tds_read2_b32 v[0:1], v2 offset1:1", (0,), (1,), "lds", "load", 8, (1,)),
    ("\tds_add_rtn_u32 v4, v4, v5", (0,), (1, 2), "lds", "atomic", 4, (1,)),
    ("\ts_load_dwordx2 s[4:5], s[6:7], 0x10", (0,), (1, 2), "scalar", "load", 8, (1, 2)),
])
def test_memory_semantics(text, defs, uses, space, kind, nbytes, address):
    info = semantics(one(text))
    assert (info.defs, info.uses) == (defs, uses)
    assert (info.access.space, info.access.kind, info.access.bytes, info.access.address) == (space, kind, nbytes, address)


def test_mfma_semantics():
    info = semantics(one("\tv_mfma_f32_32x32x8_f16 a[0:15], v[6:7], v[8:9], a[0:15]"))
    assert info.defs == (0,) and info.uses == (1, 2, 3) and (info.mfma.m, info.mfma.n, info.mfma.k) == (32, 32, 8)
    assert semantics(one("\tv_add_co_u32_e32 v2, vcc, s8, v1")).implicit_defs == ("vcc",)
    assert semantics(one("\ts_and_saveexec_b64 s[0:1], vcc")).implicit_defs == ("scc", "exec")


@needs_mc
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: Path(p).stem)
def test_probed_corpus_assembles(path, probe):
    original = parse_module(path.read_text()).kernels()[0].descriptor
    pipeline = default_pipeline(GCN)
    pipeline.verify_each = True  # the kernels' invariants hold after every pass, not only at `verify`
    result = instrument(path.read_text(), load_probes(probe, isa="gcn"), source=str(path), isa=GCN, pipeline=pipeline)
    ok, err = assemble(result.ptx, gfx(path))
    assert ok, err
    info = next(iter(result.kernels.values()))
    assert info["sites"] > 0 and not info["skipped"]
    after = parse_module(result.ptx).kernels()[0].descriptor
    assert after.get_int("next_free_sgpr") > original.get_int("next_free_sgpr")
    assert after.get_int("next_free_vgpr") > original.get_int("next_free_vgpr")
    assert after.get_int("kernarg_size") == info["kernarg_size"] == info["params"][0]["offset"] + 8
    if original.get_int("next_free_vgpr") > original.get_int("accum_offset"):  # AGPRs: they move up with accum_offset
        assert after.get_int("next_free_vgpr") - after.get_int("accum_offset") == \
            original.get_int("next_free_vgpr") - original.get_int("accum_offset")
    # every original instruction is still there, in order
    kept = [i.mnemonic for i in ir.instructions(parse_module(result.ptx).items) if i.mnemonic]
    originals = [i.mnemonic for i in ir.instructions(parse_module(path.read_text()).items)]
    it = iter(kept)
    assert all(m in it for m in originals)


@needs_mc
def test_probe_kernel_oracle_rejects_broken_output():
    """The oracle can fail: an out-of-range register count is refused."""
    text = CORPUS[0].read_text().replace("s_endpgm", "v_mov_b32 v300, 0\n\ts_endpgm", 1)
    ok, err = assemble(text, gfx(CORPUS[0]))
    assert not ok and "error" in err


HOSTILE = [
    ('global_store_dword %x, %x, off', "not allowed in probes"),
    ('s_branch .LBB0_1', "not allowed in probes"),
    ('s_mov_b64 exec, 0', "exec is not a probe register"),
    ('v_mov_b32_e32 v0, 0', "physical register v0"),
    ('v_add_co_u32_e32 %x, vcc, 1, %x', "implicitly"),
    ('v_mov_b32_e32 %nope, 0', "undeclared register %nope"),
    ('v_mov_b32_e32 BYTES, 0', "BYTES is read-only"),
    ('s_setreg_b32 hwreg(HW_REG_MODE), %s', "not allowed in probes"),
    ('v_add_u32_e64 %x, -%x, 1', "take no operand modifiers"),
    ('v_add_u32_e64 %x, v[0:1], 1', "physical register v[0:1]"),
]


@pytest.mark.parametrize("line, message", HOSTILE, ids=[m for _, m in HOSTILE])
def test_hostile_snippets_refused(line, message):
    text = f'[p]\nposition = "global_load"\nbefore = """\n.reg .v32 %x\n.reg .s32 %s\n{line}\n"""\n'
    with pytest.raises(ProbeError) as e:
        parse_probes(text, "evil.toml", isa="gcn")
    assert message in str(e.value) and "evil.toml:6:" in str(e.value)


def test_helpers_that_do_not_apply_skip_the_site():
    probes = parse_probes('[p]\nposition = "ds_read"\nbefore = """\n.reg .v64 %a\n'
                          'v_mov_b32_e32 %a.lo, ADDR.lo\n"""\n', "p.toml", isa="gcn")
    path = next(p for p in CORPUS if p.name.startswith("lds_reduce"))
    result = instrument(path.read_text(), probes, isa=GCN)
    info = next(iter(result.kernels.values()))
    assert info["sites"] == 0 and info["skipped"] and "lds" in info["skipped"][0]["reason"]


def test_ptx_probes_refused_for_gcn():
    with pytest.raises(InstrumentError, match="isa='gcn'"):
        instrument(CORPUS[0].read_text(), load_probes("block_sched"), isa=GCN)


# ---------------------------------------------------------------- the DSL's GCN backend

# The DSL tools on two files (one per target) by default; on the whole corpus with NEUTRINO_GCN=full.
DSL_CORPUS = CORPUS if os.environ.get("NEUTRINO_GCN") == "full" else [p for p in CORPUS if p.name.startswith("mfma.")]
DSL_TOOLS = ["neutrino/tools/block_sched/probe.py", "neutrino/tools/gmem_bytes/probe.py", "gmem_bytes_thread", "tensorop", "tensorop_thread"]


@needs_mc
@pytest.mark.parametrize("tool", DSL_TOOLS, ids=lambda t: Path(t).stem)
def test_dsl_tools_compile_to_gcn_and_assemble(tool):
    probes = load_probes(tool, isa="gcn")
    assert probes.isa == "gcn"
    for path in DSL_CORPUS:
        result = instrument(path.read_text(), probes, source=str(path), isa=GCN)
        ok, err = assemble(result.ptx, gfx(path))
        assert ok, f"{path.name}: {err}"
        assert next(iter(result.kernels.values()))["sites"] > 0


def test_dsl_counting_maps_refused_on_gcn():
    probes = load_probes("dmat", isa="gcn")
    with pytest.raises(InstrumentError, match='cap = "count" is not supported on GCN'):
        instrument(CORPUS[0].read_text(), probes, isa=GCN)


def test_dsl_backend_output_shape():
    from neutrino.language import compile_source

    src = '''
from neutrino import Map, probe
import neutrino.language as nl

@Map(level="thread", type="array", size=16, cap=2)
class rec:
    t: nl.u64
    x: nl.u32

@probe(pos="ld.global", level="thread", before=True)
def on_load():
    n: nl.u64 = nl.clock() * 3 + 1000
    if n % 64 == 0:
        rec.save(n >> 2, nl.laneid())
'''
    text = compile_source(src, "t.py", backend="gcn")
    assert "s_memtime" in text and "v_mul_lo_u32" in text and "v_lshrrev_b64" in text
    assert re.search(r"v_mov_b32_e32 %_gcn_op_tmp\d, 0x3e8", text)  # 1000 is no inline constant: moved into a VGPR first
    assert "@%" in text and "SAVE [ rec ]" in text  # the guarded save keeps its lane mask
    probes = parse_probes(text, "t.toml", isa="gcn")
    if find_llvm_mc():
        path = next(p for p in CORPUS if p.name == "vadd.gfx90a.s")
        result = instrument(path.read_text(), probes, isa=GCN)
        ok, err = assemble(result.ptx, "gfx90a")
        assert ok, err


EVERY_DSL_OPERATION = '''
from neutrino import Map, probe
import neutrino.language as nl

@Map(level="thread", type="array", size=16, cap=2)
class rec:
    t: nl.u64
    x: nl.u32

@probe(pos="ld.global", level="thread", before=True)
def on_load():
    n: nl.u64 = nl.clock() + nl.time() * 3 + 0x123456789
    m: nl.u32 = nl.laneid() ^ 7
    k: nl.u64 = (n - 5) * n
    j: nl.u32 = (m | 3) & ~m
    if n % 64 != 0 and m < 9 or k >= n:
        rec.save(n >> 2, nl.laneid())
    if not (j == 4):
        m = m << 3
        k = -k
    rec.save(k / 8 + (n << 1), nl.cuid() + m)
'''


@needs_mc
@pytest.mark.parametrize("backend", ["gcn", "rdna"])
def test_every_dsl_operation_assembles(backend):
    """The DSL's backends write the neutral operations (isa/gcn/translate.py) on probe registers: every IR operation,
    guarded and not, 32 and 64 bits, passes the snippet verifier and the instrumented kernel assembles."""
    from neutrino.isa.rdna.target import RDNA
    from neutrino.language import compile_source

    text = compile_source(EVERY_DSL_OPERATION, "t.py", backend=backend)
    assert "v_mul_hi_u32" in text and "v_cndmask_b32_e64" in text and ".hi, 1\n" in text  # the u64 constant's high word
    isa, path = (GCN, "vadd.gfx90a.s") if backend == "gcn" else (RDNA, "vadd.gfx1100.s")
    kernel = next(Path(__file__).parent.joinpath("data", backend).glob(path))
    result = instrument(kernel.read_text(), parse_probes(text, "t.toml", isa=backend), isa=isa)
    ok, err = assemble(result.ptx, "gfx90a" if backend == "gcn" else "gfx1100")
    assert ok, err


def test_dsl_division_by_non_power_of_two_refused():
    from neutrino.language import compile_source
    from neutrino.language.errors import DslError

    src = '''
from neutrino import Map, probe
import neutrino.language as nl

@Map(level="thread", type="array", size=8, cap=1)
class rec:
    t: nl.u64

@probe(pos="kernel", level="thread", after=True)
def fin():
    rec.save(nl.clock() / 3)
'''
    with pytest.raises(DslError, match="power of two") as e:
        compile_source(src, "div.py", backend="gcn")
    assert "div.py:" in str(e.value)


def test_cuid_per_target():
    probes = load_probes("block_sched", isa="gcn")
    for path in CORPUS[:2]:
        text = instrument(path.read_text(), probes, isa=GCN).ptx
        assert "hwreg(HW_REG_HW_ID)" in text
        assert ("hwreg(HW_REG_XCC_ID)" in text) == (gfx(path) == "gfx942")


def test_cli_instruments_gcn(tmp_path, capsys):
    from neutrino.cli import main

    out, info = tmp_path / "o.s", tmp_path / "i.json"
    path = next(p for p in CORPUS if p.name == "lds_reduce.gfx942.s")
    assert main(["instrument", str(path), "-p", "gmem_bytes", "-o", str(out), "--info", str(info)] +
                (["--check"] if find_llvm_mc() else [])) == 0
    assert "nt_map_gmem_bytes" in out.read_text() and '"isa": "gcn"' in info.read_text()
    assert main(["print", str(path)]) == 0
    assert capsys.readouterr().out == path.read_text()


def test_hostile_dsl_refused_for_gcn_too():
    """The frontend refuses what it refuses whatever the backend: a loop is no probe."""
    from neutrino.language import compile_source
    from neutrino.language.errors import DslError

    src = '''
from neutrino import probe
import neutrino.language as nl

@probe(pos="kernel", level="thread", before=True)
def spin():
    while True:
        pass
'''
    with pytest.raises(DslError) as e:
        compile_source(src, "spin.py", backend="gcn")
    assert "spin.py:7:" in str(e.value)


def test_kernel_selection_and_unknown_kernel():
    probes = load_probes("gmem_bytes", isa="gcn")
    path = next(p for p in CORPUS if p.name == "atomics.gfx90a.s")
    assert list(instrument(path.read_text(), probes, kernel="atomics", isa=GCN).kernels) == ["atomics"]
    with pytest.raises(InstrumentError, match="no kernel named 'nope' \\(kernels: atomics\\)"):
        instrument(path.read_text(), probes, kernel="nope", isa=GCN)


def test_skipped_after_branch_and_scc_kept():
    probes = parse_probes('[p]\nposition = "s_cbranch:global_load"\nafter = """\n.reg .s32 %n\ns_add_u32 %n, %n, 1\n"""\n',
                          "p.toml", isa="gcn")
    path = next(p for p in CORPUS if p.name == "loop_sum.gfx90a.s")
    result = instrument(path.read_text(), probes, isa=GCN)
    info = next(iter(result.kernels.values()))
    assert info["skipped"] and all("after a branch" in s["reason"] for s in info["skipped"])
    lines = result.ptx.splitlines()
    at = next(i for i, line in enumerate(lines) if "s_add_u32" in line and "s[" not in line and line.strip().startswith("s_add_u32 s"))
    # the probe's SALU add sits between SCC's save and its restore
    assert lines[at - 1].strip().startswith("s_cselect_b32") and lines[at + 1].strip().startswith("s_cmp_lg_u32")
