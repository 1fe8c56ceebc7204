"""RDNA 3 (gfx1100, wave32): round trip, the gfx11 dialect of the GCN steps, every AMDGPU tool, LLVM 19's assembler as the oracle."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from neutrino.engine import instrument, instrument_module
from neutrino.errors import InstrumentError, ProbeError
from neutrino.isa.gcn import ir, parse_module, print_module
from neutrino.isa.gcn.dialect import GFX9
from neutrino.isa.gcn.semantics import semantics
from neutrino.isa.gcn.target import GCN
from neutrino.isa.registry import isa_of_file
from neutrino.isa.rdna.target import RDNA
from neutrino.llvm_mc import assemble, find_llvm_mc
from neutrino.passes import default_pipeline
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probes
from neutrino.runtime.hip import codeobj
from neutrino.trace import units_for

CORPUS = sorted((Path(__file__).parent / "data" / "rdna").glob("*.s"))
TOML_PROBES = ["block_sched", "gmem_bytes"]  # neutrino/tools/<tool>/rdna.toml
DSL_TOOLS = ["neutrino/tools/block_sched/probe.py", "neutrino/tools/gmem_bytes/probe.py", "gmem_bytes_thread", "tensorop", "tensorop_thread"]
needs_mc = pytest.mark.skipif(find_llvm_mc() is None, reason="llvm-mc-19 not installed (apt-get install llvm-19): "
                              "the RDNA oracle cannot run")
WAVE64_ONLY = ("s_and_saveexec_b64", "s_ff1_i32_b64", "s_andn2_b64", "v_addc_co_u32", "s_memtime", "s_memrealtime", "global_store_dword")


def test_corpus_present():
    assert [p.name.split(".")[0] for p in CORPUS] == ["atomics", "calls", "lds_reduce", "loop_sum", "vadd", "wmma"]
    assert all(p.name.endswith(".gfx1100.s") for p in CORPUS)
    text = "".join(p.read_text() for p in CORPUS)
    # what makes the corpus RDNA 3: wave32, dual-issue, ALU delay hints, clauses, the VGPR release, WMMA, a call
    for word in (".amdhsa_wavefront_size32 1", "v_dual_", "s_delay_alu", "s_clause", "MSG_DEALLOC_VGPRS", "v_wmma_", "s_swappc_b64"):
        assert word in text, word


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_round_trip(path):
    text = path.read_text()
    module = parse_module(text, str(path))
    assert print_module(module) == text
    for insn in ir.instructions(module.items):  # LLVM's own layout, rebuilt from the structure alone
        insn.gap = insn.separators = insn.modifier_gaps = None
    assert print_module(module) == text
    assert module.target == "gfx1100" and len(module.kernels()) == 1
    assert isa_of_file(str(path)) is RDNA


def test_cdna_files_stay_gcn():
    assert isa_of_file(str(Path(__file__).parent / "data" / "gcn" / "vadd.gfx90a.s")) is GCN


def one(text: str) -> ir.Instruction:
    return next(ir.instructions(parse_module(text + "\n").items))


@pytest.mark.parametrize("text, space, kind, nbytes, address", [
    ("\tglobal_load_b128 v[15:18], v[13:14], off offset:16", "global", "load", 16, (1, 2)),
    ("\tglobal_store_b32 v[1:2], v0, off", "global", "store", 4, (0, 2)),
    ("\tglobal_atomic_add_u32 v2, v2, v6, s[6:7] glc", "global", "atomic", 4, (1, 3)),
    ("\tglobal_atomic_cmpswap_b64 v[0:1], v2, v[4:7], s[4:5] glc", "global", "atomic", 8, (1, 3)),
    ("\tds_load_2addr_b32 v[0:1], v2 offset1:1", "lds", "load", 8, (1,)),
    ("\tds_store_b32 v1, v2", "lds", "store", 4, (0,)),
    ("\tbuffer_load_b32 v5, v0, s[0:3], 0 offen", "buffer", "load", 4, (1, 2, 3)),
    ("\ts_load_b64 s[8:9], s[2:3], 0x10", "scalar", "load", 8, (1, 2)),
])
def test_gfx11_memory_semantics(text, space, kind, nbytes, address):
    access = semantics(one(text)).access
    assert (access.space, access.kind, access.bytes, access.address) == (space, kind, nbytes, address)


def probed(path: Path, probes):
    pipeline = default_pipeline(RDNA)
    pipeline.verify_each = True
    return instrument(path.read_text(), probes, source=str(path), isa=RDNA, pipeline=pipeline)


def inserted_mnemonics(original: str, result: str) -> list[str]:
    """The mnemonics of the instructions the probes added (the result less the original's, as multisets)."""
    left = [i.mnemonic for i in ir.instructions(parse_module(original).items)]
    out = []
    for m in (i.mnemonic for i in ir.instructions(parse_module(result).items)):
        if m in left:
            left.remove(m)
        else:
            out.append(m)
    return out


@needs_mc
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
@pytest.mark.parametrize("probe", TOML_PROBES + DSL_TOOLS, ids=lambda p: Path(p).stem)
def test_every_tool_instruments_the_corpus_into_code_llvm_mc_accepts(path, probe):
    probes = load_probes(probe, isa="rdna")
    result = probed(path, probes)
    ok, err = assemble(result.ptx, "gfx1100")
    assert ok, err
    info = next(iter(result.kernels.values()))
    assert info["isa"] == "rdna" and info["sites"] > 0
    assert all("memory" in s["reason"] for s in info["skipped"])  # only gmem_bytes' WMMA site, which moves no memory
    assert all(m["lanes"] == 32 for m in info["maps"])
    before, after = parse_module(path.read_text()).kernels()[0].descriptor, parse_module(result.ptx).kernels()[0].descriptor
    assert after.get_int("next_free_sgpr") > before.get_int("next_free_sgpr")
    assert after.get_int("kernarg_size") == info["kernarg_size"] == info["params"][0]["offset"] + 8
    assert after.get_int("wavefront_size32") == 1
    added = inserted_mnemonics(path.read_text(), result.ptx)
    assert added and not [m for m in added if m.startswith(WAVE64_ONLY)]
    kept = iter(i.mnemonic for i in ir.instructions(parse_module(result.ptx).items))
    assert all(m in kept for m in (i.mnemonic for i in ir.instructions(parse_module(path.read_text()).items)))


@needs_mc
def test_the_oracle_rejects_wave64_code_for_gfx11():
    """Why the dialect exists: GCN's gfx9 code in a gfx1100 module is refused by llvm-mc (the oracle can fail)."""
    wave64 = attrs.evolve(RDNA, dialect=GFX9)
    result = instrument(CORPUS[-2].read_text(), load_probes("block_sched", isa="rdna"), isa=wave64)
    ok, err = assemble(result.ptx, "gfx1100")
    assert not ok and "not supported on this GPU" in err
    assert assemble(instrument(CORPUS[-2].read_text(), load_probes("block_sched", isa="rdna"), isa=RDNA).ptx, "gfx1100")[0]


def instrumented_module(path: Path, probe: str) -> ir.Module:
    module = parse_module(path.read_text(), str(path))
    instrument_module(module, load_probes(probe, isa="rdna"), isa=RDNA)
    return module


def test_exit_code_runs_before_the_vgprs_are_released():
    module = instrumented_module(next(p for p in CORPUS if p.name.startswith("wmma")), "block_sched")
    insns = list(ir.instructions(module.items))
    end = next(i for i, insn in enumerate(insns) if insn.mnemonic == "s_endpgm")
    assert [i.mnemonic for i in insns[end - 2:end + 1]] == ["s_nop", "s_sendmsg", "s_endpgm"]
    assert all(i.origin is None for i in insns[end - 2:end + 1])
    assert insns[end - 3].origin is not None  # the last of our exit code, right before the epilogue
    assert any(i.mnemonic.startswith("global_store") and i.origin for i in insns[:end])


def test_no_probe_code_inside_a_clause_or_after_an_alu_hint():
    module = instrumented_module(next(p for p in CORPUS if p.name.startswith("wmma")), "gmem_bytes")
    insns = list(ir.instructions(module.items))
    clauses = 0
    for index, insn in enumerate(insns):
        if insn.mnemonic == "s_clause":
            members = insns[index + 1:index + 2 + int(str(insn.operands[0]), 0)]
            assert all(m.origin is None and m.mnemonic.startswith(("global_", "s_load")) for m in members), members
            clauses += 1
        if insn.mnemonic == "s_delay_alu":
            assert insns[index + 1].origin is None
    assert clauses == 4 and sum(1 for i in insns if i.origin == "gmem_count") > 8


def test_warp_units_are_waves_of_32():
    module = instrumented_module(CORPUS[-2], "block_sched")
    text = print_module(module)
    assert "s_lshr_b32" in text and "s_ctz_i32_b32" in text and "s_and_saveexec_b32" in text
    ours = [i for i in ir.instructions(module.items) if i.origin == "buffer-addressing"]
    # waves per workgroup = (threads + 31) >> 5; a wave's index = its first work-item's >> 5
    adds = [i for i in ours if i.mnemonic == "s_add_u32" and str(i.operands[2]) == "31"]
    shifts = [i for i in ours if i.mnemonic == "s_lshr_b32" and str(i.operands[2]) == "5"]
    assert len(adds) == 1 and len(shifts) == 2
    assert units_for("warp", (4, 1, 1), (96, 1, 1), lanes=32) == 12 and units_for("warp", (4, 1, 1), (96, 1, 1), lanes=64) == 8


def test_wave64_gfx11_kernels_refused():
    text = CORPUS[-2].read_text().replace(".amdhsa_wavefront_size32 1", ".amdhsa_wavefront_size32 0")
    with pytest.raises(InstrumentError, match="wave64 gfx11 kernel"):
        instrument(text, load_probes("block_sched", isa="rdna"), isa=RDNA)


HOSTILE = [
    ("s_memtime %t", "s_memtime does not exist on RDNA", ".reg .s64 %t"),
    ("s_memrealtime %t", "s_memrealtime does not exist on RDNA", ".reg .s64 %t"),
    ("s_sendmsg_rtn_b64 %t, sendmsg(MSG_RTN_GET_DOORBELL)", "may only read the clock", ".reg .s64 %t"),
    ("s_mov_b32 exec_lo, 0", "exec_lo is not a probe register", ""),
    ("v_add_co_ci_u32_e32 %x, vcc_lo, 0, %x, vcc_lo", "implicitly", ".reg .v32 %x"),
    ("global_store_b32 %x, %x, off", "not allowed in probes", ".reg .v32 %x"),
]


@pytest.mark.parametrize("line, message, decl", HOSTILE, ids=[m for _, m, _ in HOSTILE])
def test_hostile_rdna_snippets_refused(line, message, decl):
    text = f'[p]\nposition = "global_load"\nbefore = """\n{decl}\n{line}\n"""\n'
    with pytest.raises(ProbeError) as e:
        parse_probes(text, "evil.toml", isa="rdna")
    assert message in str(e.value) and "evil.toml:5:" in str(e.value)


def test_gfx11_clocks_admitted_for_rdna_only():
    text = '[p]\nposition = "kernel"\nbefore = """\n.reg .s64 %t\ns_sendmsg_rtn_b64 %t, sendmsg(MSG_RTN_GET_REALTIME)\n"""\n'
    assert parse_probes(text, "ok.toml", isa="rdna").isa == "rdna"
    with pytest.raises(ProbeError, match="s_sendmsg_rtn_b64 does not exist on GCN"):
        parse_probes(text, "ok.toml", isa="gcn")


def test_probes_of_another_isa_refused():
    with pytest.raises(InstrumentError, match="isa='rdna'"):
        instrument(CORPUS[0].read_text(), load_probes("block_sched", isa="gcn"), isa=RDNA)


def test_dsl_rdna_backend_output_shape():
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
    n: nl.u64 = nl.clock() + nl.time() * 3 + 1000
    if n % 64 != 0:
        rec.save(n >> 2, nl.laneid())
'''
    text = compile_source(src, "t.py", backend="rdna")
    assert "hwreg(HW_REG_SHADER_CYCLES, 0, 20)" in text and "sendmsg(MSG_RTN_GET_REALTIME)" in text
    assert "v_add_co_ci_u32_e64" in text and "v_mbcnt_hi" not in text
    assert ".reg .s32" in text and "@%" in text  # the guard is a wave32 lane mask, one SGPR
    assert not [w for w in WAVE64_ONLY if w in text] and "exec," not in text
    probes = parse_probes(text, "t.toml", isa="rdna")
    if find_llvm_mc():
        result = instrument(CORPUS[-2].read_text(), probes, isa=RDNA)
        ok, err = assemble(result.ptx, "gfx1100")
        assert ok, err


@pytest.mark.parametrize("isa", [GCN, RDNA], ids=lambda i: i.name)
def test_maps_named_by_explicit_saves_get_their_buffers(isa):
    """The DSL writes `SAVE [ MAP ] {...}` without a probe-level map: the map still gets its argument and slot
    (before, its stores went through an SGPR pair nothing had set)."""
    path = CORPUS[-2] if isa is RDNA else Path(__file__).parent / "data" / "gcn" / "vadd.gfx90a.s"
    result = instrument(path.read_text(), load_probes("neutrino/tools/block_sched/probe.py", isa=isa.name), isa=isa)
    info = next(iter(result.kernels.values()))
    assert [p["map"] for p in info["params"]] == ["block_sched"] and [m["name"] for m in info["maps"]] == ["block_sched"]
    assert info["maps"][0]["lanes"] == isa.dialect.wave_lanes


# Every map level and kind the GCN steps lower, a lane-mask guard, the realtime clock, ADDR, BYTES and OUT (of loads
# up to 128 bits wide, whose first register an instruction reads) in one RDNA probe file.
MIXED = '''
[map.blk]
level = "block"
cap = 2
fields = ["n:u32", "t:u64"]

[map.lanes]
level = "thread"
cap = 4
fields = ["addr:u64", "bytes:u32"]

[map.total]
type = "sum"
level = "warp"
fields = ["n:u64"]

[probe.block_entry]
position = "kernel"
before = """
.reg .s64 %t0
s_sendmsg_rtn_b64 %t0, sendmsg(MSG_RTN_GET_REALTIME)
s_waitcnt lgkmcnt(0)
SAVE [ blk ] {7, %t0}
"""

[probe.loads]
position = "global_load:global_atomic"
before = """
.reg .v64 %a
.reg .v32 %lane
.reg .s32 %odd
v_mbcnt_lo_u32_b32 %lane, -1, 0
v_and_b32_e64 %lane, 1, %lane
v_cmp_eq_u32_e64 %odd, 1, %lane
v_mov_b32_e32 %a.lo, ADDR.lo
v_mov_b32_e32 %a.hi, ADDR.hi
@%odd SAVE [ lanes ] {%a, BYTES}
"""

[probe.after_load]
position = "global_load"
after = """
.reg .v64 %v
v_mov_b32_e32 %v.lo, OUT
v_mov_b32_e32 %v.hi, 0
SAVE [ total ] {%v}
"""
'''


@needs_mc
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_map_kind_guard_and_helper_assembles(path):
    result = probed(path, parse_probes(MIXED, "mixed.toml", isa="rdna"))
    ok, err = assemble(result.ptx, "gfx1100")
    assert ok, err
    info = next(iter(result.kernels.values()))
    assert not info["skipped"]
    expected = ["blk"] if path.name.startswith("calls") else ["blk", "lanes", "total"]  # calls: its load is in the callee
    assert [m["name"] for m in info["maps"]] == expected


def test_gcn_refuses_rdna_targets():
    with pytest.raises(InstrumentError, match="gfx1100 is not a gfx9"):
        instrument(CORPUS[-2].read_text(), load_probes("block_sched", isa="gcn"), isa=GCN)


def test_cli_instruments_a_gfx11_file_as_rdna(tmp_path, capsys):
    """`neutrino instrument` tells gfx11 assembly by its .amdgcn_target: RDNA probes, -e in RDNA, --check with llvm-mc."""
    import json

    from neutrino.cli import main

    info, out = tmp_path / "info.json", tmp_path / "out.s"
    check = ["--check"] if find_llvm_mc() else []
    vadd = str(CORPUS[-2])
    assert main(["instrument", vadd, "-p", "block_sched", "--info", str(info), "-o", str(out), *check]) == 0
    kernel = json.loads(info.read_text())["kernels"]["vadd"]
    assert kernel["isa"] == "rdna" and kernel["maps"][0]["lanes"] == 32 and "HW_REG_HW_ID1" in out.read_text()
    expr = r'position = "kernel", datamodel = "warp:8", after = ".reg .s64 %t\ns_sendmsg_rtn_b64 %t, sendmsg(MSG_RTN_GET_REALTIME)\nSAVE.u64 {%t}"'
    assert main(["instrument", vadd, "-e", expr, "-o", str(out), *check]) == 0
    assert main(["instrument", vadd, "-e", r'position = "kernel", after = ".reg .s64 %t\ns_memtime %t"']) == 1
    assert "s_memtime does not exist on RDNA" in capsys.readouterr().err


# ---------------------------------------------------------------- code objects and the HIP hook (tests/fakehip)

needs_tools = pytest.mark.skipif(not codeobj.tools_present(), reason="LLVM 19 tools not installed (apt-get install llvm-19 lld-19)")


@needs_tools
@pytest.mark.parametrize("path", [p for p in CORPUS if not p.name.startswith("calls")], ids=lambda p: p.name)
def test_gfx11_code_objects_rebuild_and_probe(path, tmp_path):
    """A gfx1100 code object disassembles into assembly that reassembles to the same code, and probes (calls: refused,
    it uses its own PC)."""
    import subprocess

    elf = codeobj.assemble(path.read_text(), "gfx1100")
    assert codeobj.elf_target(elf) == "gfx1100"
    text = codeobj.disassemble(elf)
    assert isa_of_file_text(text) is RDNA
    sections = []
    for name, image in (("a", elf), ("b", codeobj.assemble(text, "gfx1100"))):
        (tmp_path / f"{name}.co").write_bytes(image)
        subprocess.run(["llvm-objcopy-19", "-O", "binary", "--only-section=.text", str(tmp_path / f"{name}.co"),
                        str(tmp_path / f"{name}.bin")], check=True)
        sections.append((tmp_path / f"{name}.bin").read_bytes())
    assert sections[1] and sections[0][:len(sections[1])] == sections[1]  # every s_delay_alu kept
    result = instrument(text, load_probes("block_sched", isa="rdna"), isa=RDNA)
    assert b"nt_map_block_sched" in codeobj.assemble(result.ptx, "gfx1100")


def isa_of_file_text(text: str):
    from neutrino.isa.registry import SIGNATURES

    return next(isa for signature, isa in SIGNATURES.items() if signature in text.encode())


@needs_tools
def test_hip_hook_probes_a_gfx11_launch(tmp_path):
    """End to end against the fake HIP runtime, --arch gfx1100: wave32 units in the trace."""
    import os
    import subprocess
    import sys

    from neutrino import trace

    here = Path(__file__).parent
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "libamdhip64.so"), str(here / "fakehip" / "fakehip.c")],
                   check=True)
    (tmp_path / "vadd.co").write_bytes(codeobj.assemble(CORPUS[-2].read_text(), "gfx1100"))
    log, tracedir = tmp_path / "log", tmp_path / "trace"
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), FAKEHIP_LOG=str(log), FAKEHIP_BUFPARAM="4", FAKEHIP_LANES="32",
               PYTHONPATH=str(here.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("LD_PRELOAD", None)
    cmd = [sys.executable, "-m", "neutrino.runtime.hip.hook", "-p", "block_sched", "-t", str(tracedir), "--arch", "gfx1100",
           str(here / "fakehip" / "app.py"), str(tmp_path / "vadd.co"), "vadd", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "app done" in r.stdout, r.stderr
    assert log.read_text().splitlines() == ["vadd probed=1 grid=3 arg0=1000"]
    t = trace.load(tracedir)
    info = t.kernel_info("vadd")
    assert info["isa"] == "rdna" and info["maps"][0]["lanes"] == 32
    records = t.launches[0].maps["block_sched"].valid()
    assert len(records) == 3 * 4  # 3 workgroups of 128 work-items: 4 wave32 units each
    assert "HW_REG_SHADER_CYCLES" in next(tracedir.glob("*/kernel/*/probed.ptx")).read_text()


@needs_mc
def test_dsl_loops_unroll_into_rdna_code_llvm_mc_accepts():
    """The DSL's bounded loops (tests/test_loops.py) on RDNA: unrolled, no branch, wave32 masks, accepted by llvm-mc."""
    from neutrino.language import compile_source
    from tests.test_loops import SUMS

    text = compile_source(SUMS, "sums.py", backend="rdna")
    assert "s_cbranch" not in text and "s_branch" not in text and ".reg .s64 %_gcn_carry" not in text
    result = probed(CORPUS[-2], parse_probes(text, "sums.toml", isa="rdna"))
    ok, err = assemble(result.ptx, "gfx1100")
    assert ok, err
