"""Positions by class and property (spec/probe-toml.md, "Selectors"): the built-in tools name selectors of
the semantics table, and instrument the same sites as the opcode lists they named before, on the corpus."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from neutrino.isa.ptx import ir, parse_module, parse_statements
from neutrino.isa.ptx.semantics import TABLE, position_matcher, selector_problem
from neutrino.passes.match import kernel_state, matcher
from neutrino.passes.pipeline import TracepointMatching
from neutrino.probefile import parse_probes
from neutrino.errors import ProbeError
from neutrino.toolbox import load_probes

ROOT = Path(__file__).resolve().parent.parent
# The project's shared corpus beside the checkout (../shared/corpus), when there is one, and the tests' own copy.
SHARED = next((d / "shared" / "corpus" / "ptx" for d in (ROOT.parent, ROOT.parent.parent) if (d / "shared" / "corpus").is_dir()),
              None)
CORPUS = (sorted(SHARED.glob("**/*.ptx")) if SHARED else []) + sorted((ROOT / "tests" / "data" / "corpus").glob("*/*.ptx"))

# The positions the built-in tools named before selectors (gmem_bytes: every .global spelling, 149 of them).
GMEM_BEFORE = (
    "ld.global:ld.volatile.global:ld.weak.global:ld.relaxed.cta.global:ld.relaxed.cluster.global:ld.relaxed.gpu.global:ld.relaxed.sys.global:ld.acquire.cta.global:ld.acquire.cluster.global:ld.acquire.gpu.global:ld.acquire.sys.global:ld.mmio.relaxed.sys.global:ldu.global:"
    "st.global:st.volatile.global:st.weak.global:st.relaxed.cta.global:st.relaxed.cluster.global:st.relaxed.gpu.global:st.relaxed.sys.global:st.release.cta.global:st.release.cluster.global:st.release.gpu.global:st.release.sys.global:st.mmio.relaxed.sys.global:"
    "atom.global:atom.cta.global:atom.cluster.global:atom.gpu.global:atom.sys.global:atom.relaxed.global:atom.acquire.global:atom.release.global:atom.acq_rel.global:atom.relaxed.cta.global:atom.relaxed.cluster.global:atom.relaxed.gpu.global:atom.relaxed.sys.global:atom.acquire.cta.global:atom.acquire.cluster.global:atom.acquire.gpu.global:atom.acquire.sys.global:atom.release.cta.global:atom.release.cluster.global:atom.release.gpu.global:atom.release.sys.global:atom.acq_rel.cta.global:atom.acq_rel.cluster.global:atom.acq_rel.gpu.global:atom.acq_rel.sys.global:"
    "red.global:red.cta.global:red.cluster.global:red.gpu.global:red.sys.global:red.relaxed.global:red.release.global:red.relaxed.cta.global:red.relaxed.cluster.global:red.relaxed.gpu.global:red.relaxed.sys.global:red.release.cta.global:red.release.cluster.global:red.release.gpu.global:red.release.sys.global:"
    "cp.async.ca.shared.global:cp.async.ca.shared::cta.global:cp.async.cg.shared.global:cp.async.cg.shared::cta.global:"
    "cp.async.bulk.shared::cluster.global:cp.async.bulk.shared::cta.global:cp.async.bulk.global.shared::cta:cp.reduce.async.bulk.global.shared::cta:"
    "cp.async.bulk.tensor.1d.shared::cluster.global:cp.async.bulk.tensor.1d.shared::cta.global:cp.async.bulk.tensor.1d.global.shared::cta:cp.async.bulk.tensor.2d.shared::cluster.global:cp.async.bulk.tensor.2d.shared::cta.global:cp.async.bulk.tensor.2d.global.shared::cta:cp.async.bulk.tensor.3d.shared::cluster.global:cp.async.bulk.tensor.3d.shared::cta.global:cp.async.bulk.tensor.3d.global.shared::cta:cp.async.bulk.tensor.4d.shared::cluster.global:cp.async.bulk.tensor.4d.shared::cta.global:cp.async.bulk.tensor.4d.global.shared::cta:cp.async.bulk.tensor.5d.shared::cluster.global:cp.async.bulk.tensor.5d.shared::cta.global:cp.async.bulk.tensor.5d.global.shared::cta:cp.reduce.async.bulk.tensor.1d.global.shared::cta:cp.reduce.async.bulk.tensor.2d.global.shared::cta:cp.reduce.async.bulk.tensor.3d.global.shared::cta:cp.reduce.async.bulk.tensor.4d.global.shared::cta:cp.reduce.async.bulk.tensor.5d.global.shared::cta:"
    "wmma.load.a.sync.aligned.row.m16n16k16.global:wmma.load.a.sync.aligned.row.m32n8k16.global:wmma.load.a.sync.aligned.row.m8n32k16.global:wmma.load.a.sync.aligned.row.m16n16k8.global:wmma.load.a.sync.aligned.row.m8n8k4.global:wmma.load.a.sync.aligned.row.m8n8k32.global:wmma.load.a.sync.aligned.row.m8n8k128.global:wmma.load.a.sync.aligned.col.m16n16k16.global:wmma.load.a.sync.aligned.col.m32n8k16.global:wmma.load.a.sync.aligned.col.m8n32k16.global:wmma.load.a.sync.aligned.col.m16n16k8.global:wmma.load.a.sync.aligned.col.m8n8k4.global:wmma.load.a.sync.aligned.col.m8n8k32.global:wmma.load.a.sync.aligned.col.m8n8k128.global:"
    "wmma.load.b.sync.aligned.row.m16n16k16.global:wmma.load.b.sync.aligned.row.m32n8k16.global:wmma.load.b.sync.aligned.row.m8n32k16.global:wmma.load.b.sync.aligned.row.m16n16k8.global:wmma.load.b.sync.aligned.row.m8n8k4.global:wmma.load.b.sync.aligned.row.m8n8k32.global:wmma.load.b.sync.aligned.row.m8n8k128.global:wmma.load.b.sync.aligned.col.m16n16k16.global:wmma.load.b.sync.aligned.col.m32n8k16.global:wmma.load.b.sync.aligned.col.m8n32k16.global:wmma.load.b.sync.aligned.col.m16n16k8.global:wmma.load.b.sync.aligned.col.m8n8k4.global:wmma.load.b.sync.aligned.col.m8n8k32.global:wmma.load.b.sync.aligned.col.m8n8k128.global:"
    "wmma.load.c.sync.aligned.row.m16n16k16.global:wmma.load.c.sync.aligned.row.m32n8k16.global:wmma.load.c.sync.aligned.row.m8n32k16.global:wmma.load.c.sync.aligned.row.m16n16k8.global:wmma.load.c.sync.aligned.row.m8n8k4.global:wmma.load.c.sync.aligned.row.m8n8k32.global:wmma.load.c.sync.aligned.row.m8n8k128.global:wmma.load.c.sync.aligned.col.m16n16k16.global:wmma.load.c.sync.aligned.col.m32n8k16.global:wmma.load.c.sync.aligned.col.m8n32k16.global:wmma.load.c.sync.aligned.col.m16n16k8.global:wmma.load.c.sync.aligned.col.m8n8k4.global:wmma.load.c.sync.aligned.col.m8n8k32.global:wmma.load.c.sync.aligned.col.m8n8k128.global:"
    "wmma.store.d.sync.aligned.row.m16n16k16.global:wmma.store.d.sync.aligned.row.m32n8k16.global:wmma.store.d.sync.aligned.row.m8n32k16.global:wmma.store.d.sync.aligned.row.m16n16k8.global:wmma.store.d.sync.aligned.row.m8n8k4.global:wmma.store.d.sync.aligned.row.m8n8k32.global:wmma.store.d.sync.aligned.row.m8n8k128.global:wmma.store.d.sync.aligned.col.m16n16k16.global:wmma.store.d.sync.aligned.col.m32n8k16.global:wmma.store.d.sync.aligned.col.m8n32k16.global:wmma.store.d.sync.aligned.col.m16n16k8.global:wmma.store.d.sync.aligned.col.m8n8k4.global:wmma.store.d.sync.aligned.col.m8n8k32.global:wmma.store.d.sync.aligned.col.m8n8k128.global"
)
BEFORE = {
    "gmem_bytes": GMEM_BEFORE, "gmem_bytes_thread": GMEM_BEFORE,
    "dmat": "ld.global:st.global:atom.global:red.global",
    "program_progress": "bra",
    "tensorop": "mma:wmma.mma:wgmma.mma_async", "tensorop_thread": "mma:wmma.mma:wgmma.mma_async",
}


def as_position(text: str) -> tuple[tuple[str, ...], ...]:
    import re

    return tuple(tuple(part.split(".")) for part in re.split(r"(?<!:):(?!:)", text))


def site_list(probe, module: ir.Module) -> list[tuple[str, int, str]]:
    """(kernel, instruction index, before/after) of every site of `probe` in `module`."""
    sites = []
    for function in module.entries():
        state = kernel_state(module, function)
        index = {id(insn): n for n, insn in enumerate(state.originals)}
        for site in TracepointMatching.sites_of(probe, state, matcher(module, state)):
            sites.append((function.name, index.get(id(site.anchor), -1), site.where))
    return sites


@pytest.mark.parametrize("tool", sorted(BEFORE))
def test_builtin_tools_name_selectors_and_keep_their_sites_on_the_corpus(tool):
    assert len(CORPUS) >= 27, "the corpus is missing"
    probes = [p for p in load_probes(tool).probes if not p.at_kernel]
    assert probes and all(all(part[0].startswith("#") for part in p.position) for p in probes), tool
    modules = [parse_module(path.read_text(), str(path)) for path in CORPUS]
    total = 0
    for probe in probes:
        before = attrs.evolve(probe, position=as_position(BEFORE[tool]))
        for path, module in zip(CORPUS, modules):
            now, then = site_list(probe, module), site_list(before, module)
            assert now == then, f"{tool}: {path.name}: the selector's sites differ from the opcode list's"
            total += len(now)
    assert total > 0


def test_selectors_follow_the_table():
    def named(position: str, text: str) -> bool:
        (insn,) = parse_statements(text)
        return position_matcher(as_position(position))[insn.opcode.text]

    assert named("#memory.global", "ld.relaxed.gpu.global.u32 %r1, [%rd1];")
    assert named("#memory.shared", "st.shared::cta.u32 [%r1], %r2;")
    assert not named("#memory.global", "ld.shared.u32 %r1, [%r2];")
    assert named("#memory.generic", "ld.u32 %r1, [%rd1];") and not named("#memory.global", "ld.u32 %r1, [%rd1];")
    assert not named("#memory.global", "cp.async.cg.shared.global [%r1], [%rd1], 16;")  # an async copy, not memory
    assert named("#async_copy.global", "cp.async.cg.shared.global [%r1], [%rd1], 16;")
    assert named("#async_copy.shared", "cp.async.cg.shared.global [%r1], [%rd1], 16;")
    assert named("#load.global", "cp.async.cg.shared.global [%r1], [%rd1], 16;")  # load: by any instruction
    assert not named("#memory.global", "prefetch.global.L2 [%rd1];") and named("#prefetch.global", "prefetch.global.L2 [%rd1];")
    assert named("#atomic", "red.global.add.u32 [%rd1], 1;") and not named("#store", "red.global.add.u32 [%rd1], 1;")
    assert named("#barrier", "bar.sync 0;") and named("#branch", "brx.idx %r1, $T;") and named("#exit", "exit;")
    assert named("#tensor_core", "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f1}, %rd1, %rd2, 1, 1, 1, 1, 1;")
    assert not named("#tensor_core", "wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r1}, [%rd1];")
    assert {key for key, row in TABLE.items() if row.tensor_core} == {("mma",), ("wmma", "mma"), ("wgmma", "mma_async")}


@pytest.mark.parametrize("position, message, suggestion", [
    ("#memroy.global", "no selector '#memroy'", "'#memory.global'"),
    ("#memory.globl", "no state space 'globl'", "'#memory.global'"),
    ("#tensor_core.global", "selector #tensor_core takes no property", "'#tensor_core'"),
    ("#barier", "no selector '#barier'", "'#barrier'"),
    ("ld.globl", "no PTX modifier 'globl'", "'ld.global'"),
])
def test_a_mistyped_selector_is_refused_with_did_you_mean(position, message, suggestion):
    with pytest.raises(ProbeError) as e:
        parse_probes(f'[p]\nposition = "{position}"\nbefore = "add.u32 %r9, %r9, 1;"\n', "p.toml")
    text = str(e.value)
    assert "p.toml:2:" in text and message in text and f"did you mean {suggestion}" in text, text
    assert selector_problem(as_position(position)[0]) is not None or not position.startswith("#")


@pytest.mark.parametrize("position, suggestion", [("#memroy.global", "'#memory.global'"), ("ld.globl", "'ld.global'")])
def test_a_mistyped_position_in_the_dsl_is_refused_at_the_decorator(tmp_path, position, suggestion):
    source = tmp_path / "tool.py"
    source.write_text(f'''from neutrino import Map, probe
import neutrino.language as nl


@Map(type="sum")
class loads:
    n: nl.u64


count: nl.u64 = 0


@probe(pos="{position}", level="thread", before=True)
def count_loads():
    count += 1


@probe(pos="kernel", level="thread", after=True)
def save():
    loads.add(count)
''')
    with pytest.raises(Exception) as e:
        load_probes(str(source))
    text = str(e.value)
    assert f"tool.py:13:" in text and f"did you mean {suggestion}" in text, text
