"""The built-in gmem_bytes (and its per-thread form) matches every global-memory form the semantics table knows.

A form is counted when the semantics table says it loads, stores or updates
global memory (not a prefetch); the probe must match exactly those, in both
tools, and its code must add the table's bytes at each site.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from neutrino.engine import instrument
from neutrino.isa.ptx import parse_statements
from neutrino.isa.ptx.semantics import effects, position_matcher
from neutrino.toolbox import load_probes

from helpers import HAVE_PTXAS, ptxas
from test_counting_rewrite import FORMS as ATOMIC_FORMS
from test_semantics import BYTE_FORMS

REPO = Path(__file__).resolve().parent.parent
GMEM_EXACT = REPO / "tests" / "gpu" / "workloads" / "gmem_exact.sm80.ptx"

SCOPES = ("cta", "cluster", "gpu", "sys")
ORDERED = (
    [f"ld.{sem}.{scope}.global.u32 %r1, [%rd1];" for sem in ("relaxed", "acquire") for scope in SCOPES]
    + [f"st.{sem}.{scope}.global.u32 [%rd1], %r1;" for sem in ("relaxed", "release") for scope in SCOPES]
    + ["ld.volatile.global.u32 %r1, [%rd1];", "ld.weak.global.u32 %r1, [%rd1];", "ld.mmio.relaxed.sys.global.u32 %r1, [%rd1];",
       "st.volatile.global.u32 [%rd1], %r1;", "st.weak.global.u32 [%rd1], %r1;", "st.mmio.relaxed.sys.global.u32 [%rd1], %r1;",
       "atom.gpu.global.add.u32 %r1, [%rd1], 1;", "atom.acquire.global.add.u32 %r1, [%rd1], 1;", "red.sys.global.add.u32 [%rd1], 1;",
       "red.release.gpu.global.add.u32 [%rd1], 1;", "ld.global.nc.L1::no_allocate.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];",
       "cp.async.cg.shared::cta.global.L2::128B [%r1], [%rd1], 16, %r2;", "cp.async.ca.shared.global [%r1], [%rd1], 8;"]
)
SHAPES = ("m16n16k16", "m32n8k16", "m8n32k16", "m16n16k8", "m8n8k4", "m8n8k32", "m8n8k128")
WMMA = [f"wmma.load.{f}.sync.aligned.{layout}.{shape}.global.f16 {{%r1}}, [%rd1], %r9;" for f in "abc" for layout in ("row", "col") for shape in SHAPES] + [
    f"wmma.store.d.sync.aligned.{layout}.{shape}.global.f32 [%rd1], {{%f1}}, %r9;" for layout in ("row", "col") for shape in SHAPES]
TMA = [f"cp.async.bulk.tensor.{n}d.{spaces}.mbarrier::complete_tx::bytes [%r1], [%rd1, {{%r2}}], [%r3];" for n in range(1, 6)
       for spaces in ("shared::cluster.global", "shared::cta.global")] + [
    f"cp.async.bulk.tensor.{n}d.global.shared::cta.bulk_group [%rd1, {{%r2}}], [%r1];" for n in range(1, 6)] + [
    f"cp.reduce.async.bulk.tensor.{n}d.global.shared::cta.add.bulk_group [%rd1, {{%r2}}], [%r1];" for n in range(1, 6)]
CATALOGUE = sorted({f[0] for f in BYTE_FORMS} | {line for pair in ATOMIC_FORMS for line in pair if line} | set(ORDERED) | set(WMMA) | set(TMA))


def moves_global_memory(text: str) -> bool:
    (insn,) = parse_statements(text)
    return any(m.space == "global" and m.access != "prefetch" for m in effects(insn).memory)


def counting_probe(probes):
    (probe,) = [p for p in probes.probes if not p.at_kernel and p.before is not None]
    return probe


@pytest.mark.parametrize("form", ["gmem_bytes", "gmem_bytes_thread"])
def test_positions_are_the_global_forms_of_the_table(form):
    probe = counting_probe(load_probes(form))
    named = position_matcher(probe.position)
    wrong = []
    for text in CATALOGUE:
        (insn,) = parse_statements(text)
        matched = named[insn.opcode.text]
        if matched != moves_global_memory(text):
            wrong.append(f"{'matched' if matched else 'missed'}: {text}")
    assert not wrong, "\n".join(wrong)
    assert sum(map(moves_global_memory, CATALOGUE)) > 150  # the catalogue is the whole table, not a sample


def test_summed_and_per_thread_forms_match_the_same_instructions():
    summed = counting_probe(load_probes("gmem_bytes")).position
    per_thread = counting_probe(load_probes("gmem_bytes_thread")).position
    assert sorted(summed) == sorted(per_thread)


def test_a_tool_named_or_given_by_path_is_one_definition():
    """`-p gmem_bytes` and the tool file's path load the same probe, with the fields of spec/tools.md."""
    by_name, by_path = load_probes("gmem_bytes"), load_probes(str(REPO / "neutrino" / "tools" / "gmem_bytes" / "probe.py"))
    assert by_name.text == by_path.text
    assert [f.name for f in by_name.maps["gmem_bytes"].fields] == ["bytes", "active_threads"]


@pytest.mark.parametrize("form", ["gmem_bytes", "gmem_bytes_thread"])
def test_gmem_exact_kernels_count_every_global_access(form):
    """The GPU test's kernels: every wmma fragment, cp.async and store is a site, with the table's bytes."""
    text = GMEM_EXACT.read_text()
    result = instrument(text, load_probes(form), source=GMEM_EXACT.name)
    wmma, pipeline = result.kernels["wmma_gemm"], result.kernels["pipelined_scale"]
    assert wmma["skipped"] == [] and pipeline["skipped"] == []
    global_accesses = {name: sum(1 for line in text.split(f".entry {name}(")[1].split(".entry")[0].splitlines()
                                 if moves_global_memory_line(line)) for name in ("wmma_gemm", "pipelined_scale")}
    assert wmma["sites"] == global_accesses["wmma_gemm"] + 2 and global_accesses["wmma_gemm"] == 11  # + kernel entry and exit
    assert pipeline["sites"] == global_accesses["pipelined_scale"] + 2
    out = result.ptx
    assert "16;" in out.split(".entry pipelined_scale")[0]  # a wmma f16 fragment: 16 bytes per thread
    assert "32;" in out.split(".entry pipelined_scale")[0]  # the f32 accumulator tile: 32 bytes per thread
    assert "%nt_h_bytes_b" in out.split(".entry pipelined_scale")[1]  # cp.async: the src-size register, at run time
    if HAVE_PTXAS:
        ptxas(out)


def moves_global_memory_line(line: str) -> bool:
    line = line.strip()
    if not line or line.startswith(("//", ".", "$", "{", "}", "@")) or line.endswith(":") or ";" not in line:
        return False
    return moves_global_memory(line.split(";")[0] + ";")
