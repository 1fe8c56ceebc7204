"""One instrumentation core for every ISA: the Isa interface, the shared pipeline, --verify-each and --print-after on both."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from neutrino.cli import main
from neutrino.engine import instrument
from neutrino.errors import InstrumentError
from neutrino.isa.gcn import ir as gcn_ir
from neutrino.isa.gcn.registers import insn as gcn_insn
from neutrino.isa.gcn.target import GCN
from neutrino.isa.interface import Isa
from neutrino.isa.ptx.target import PTX
from neutrino.isa.registry import ISAS, isa_named, isa_of_file
from neutrino.llvm_mc import find_llvm_mc
from neutrino.passes import default_pipeline
from neutrino.passes.manager import PassFailed
from neutrino.toolbox import load_probes

DATA = Path(__file__).parent / "data"
GCN_FILE = DATA / "gcn" / "lds_reduce.gfx942.s"
PTX_FILE = DATA / "corpus" / "nvcc" / "vec.sm90.ptx"


def interface_names() -> set[str]:
    """Every attribute and method the Isa protocol declares."""
    names = set(Isa.__annotations__)
    names |= {n for n, v in vars(Isa).items() if inspect.isfunction(v) and not n.startswith("_")}
    return names


@pytest.mark.parametrize("isa", list(ISAS.values()), ids=lambda i: i.name)
def test_every_isa_provides_the_whole_interface(isa):
    missing = [n for n in sorted(interface_names()) if not hasattr(isa, n)]
    assert not missing, f"{isa.name} lacks {missing}"
    assert isa_named(isa.name) is isa


def test_isa_of_file_by_content(tmp_path):
    assert isa_of_file(str(GCN_FILE)) is GCN and isa_of_file(str(PTX_FILE)) is PTX
    assert isa_of_file(str(tmp_path / "absent.s")) is PTX  # the PTX reader names the missing file
    with pytest.raises(Exception, match="unknown assembly 'riscv'"):
        isa_named("riscv")


def test_one_pipeline_less_the_steps_an_isa_lacks():
    ptx, gcn = default_pipeline(PTX).names(), default_pipeline(GCN).names()
    assert ptx == ["match-tracepoints", "virtualize-registers", "resolve-operands", "counting-variant", "lower-save",
                   "verify", "buffer-addressing", "fit-target", "prune"]
    assert gcn == [n for n in ptx if n not in ("counting-variant", "fit-target", "prune")]
    assert [type(p) for p in default_pipeline(GCN).passes] == [type(p) for p in default_pipeline(PTX).passes
                                                              if p.name in gcn]


def test_gcn_cli_verify_each_and_print_after(tmp_path, capsys):
    out = tmp_path / "o.s"
    argv = ["instrument", str(GCN_FILE), "-p", "gmem_bytes", "-o", str(out), "--verify-each",
            "--print-after", "resolve-operands", "--print-after", "buffer-addressing"]
    assert main(argv + (["--check"] if find_llvm_mc() else [])) == 0
    err = capsys.readouterr().err
    resolved, spliced = err.split("; ----- IR after buffer-addressing -----")
    # before buffer addressing GCN keeps the code on its sites: the dump shows it in place, SAVE still abstract
    assert "; ----- IR after resolve-operands -----" in resolved and "; SAVE [gmem_bytes] {v[" in resolved
    assert "global_atomic_add_x2" not in resolved
    assert "global_atomic_add_x2" in spliced and "nt_map_gmem_bytes" in spliced
    assert out.read_text() in spliced  # after the last pass that edits, the dump is what is written


def test_print_after_names_an_existing_pass_of_the_isa(capsys):
    assert main(["instrument", str(GCN_FILE), "-p", "gmem_bytes", "-o", "/dev/null", "--print-after", "prune"]) != 0
    assert "no pass named prune" in capsys.readouterr().err


class _WritesKernelRegister:
    """A broken pass: probe code that writes v0, a register of the kernel."""

    name = "break-registers"
    requires = ()

    def run(self, module, ctx):
        state = next(iter(ctx.kernels.values()))
        state.sites[0].code = [*state.sites[0].code, gcn_insn("v_mov_b32_e32", gcn_ir.RegRange("v", 0), 0, origin="bad")]


class _DropsOriginal:
    """A broken pass: removes one of the kernel's own instructions."""

    name = "drop-original"
    requires = ()

    def run(self, module, ctx):
        state = next(iter(ctx.kernels.values()))
        victim = state.originals[1]
        if ctx.isa is GCN:
            module.items.remove(victim)
        else:
            state.function.body.remove(victim)


@pytest.mark.parametrize("broken, message", [
    (_WritesKernelRegister, r"after pass 'break-registers': kernel \w+: bad code writes v0, a register of the kernel"),
    (_DropsOriginal, r"after pass 'drop-original': kernel \w+: the original instructions were changed"),
])
def test_gcn_verify_each_names_the_pass_that_broke_an_invariant(broken, message):
    pipeline = default_pipeline(GCN).insert_after("resolve-operands", broken())
    probes = load_probes("gmem_bytes", isa="gcn")
    if broken is _WritesKernelRegister:  # without --verify-each, the verify pass finds it too, later
        with pytest.raises(InstrumentError, match="bad code writes v0"):
            instrument(GCN_FILE.read_text(), probes, isa=GCN, pipeline=default_pipeline(GCN).insert_after("resolve-operands", broken()))
    pipeline.verify_each = True
    with pytest.raises(PassFailed, match=message):
        instrument(GCN_FILE.read_text(), probes, isa=GCN, pipeline=pipeline)


def test_ptx_verify_each_names_the_pass_that_broke_an_invariant():
    pipeline = default_pipeline(PTX).insert_after("match-tracepoints", _DropsOriginal())
    pipeline.verify_each = True
    with pytest.raises(PassFailed, match=r"after pass 'drop-original': \w+: the original instructions were changed"):
        instrument(PTX_FILE.read_text(), load_probes("block_sched"), pipeline=pipeline)


def test_gcn_matched_counts_reach_the_unmatched_warning(tmp_path, capsys):
    """Matching is shared: a GCN position that names no instruction is said aloud, as on PTX."""
    probe = tmp_path / "nop.toml"
    probe.write_text('[nop]\nposition = "v_mfma_"\nbefore = "s_nop 0"\n')
    assert main(["instrument", str(GCN_FILE), "-p", str(probe), "-o", "/dev/null"]) == 0
    assert "probe nop: position 'v_mfma_' matched 0 instructions in kernel lds_reduce" in capsys.readouterr().err
    result = instrument(GCN_FILE.read_text(), load_probes("gmem_bytes", isa="gcn"), isa=GCN)
    info = next(iter(result.kernels.values()))
    assert info["matched"] and all(count > 0 for count in info["matched"].values())


def test_probes_of_the_other_isa_refused():
    with pytest.raises(InstrumentError, match="its snippets are PTX; load it with isa='gcn'"):
        instrument(GCN_FILE.read_text(), load_probes("block_sched"), isa=GCN)
    with pytest.raises(InstrumentError, match="its snippets are GCN; load it with isa='ptx'"):
        instrument(PTX_FILE.read_text(), load_probes("block_sched", isa="gcn"))
