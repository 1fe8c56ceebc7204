"""AMDGPU code objects: bundles, disassembly back to assembly, and reassembly (LLVM 19 tools)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from neutrino.engine import instrument
from neutrino.isa.gcn.target import GCN
from neutrino.isa.gcn import parse_module
from neutrino.toolbox import load_probes
from neutrino.runtime.hip import codeobj

CORPUS = sorted((Path(__file__).parent / "data" / "gcn").glob("*.s"))
needs_tools = pytest.mark.skipif(not codeobj.tools_present(), reason="LLVM 19 tools not installed (apt-get install llvm-19 lld-19)")


def text_section(elf: bytes, tmp_path: Path, name: str) -> bytes:
    src, out = tmp_path / f"{name}.co", tmp_path / f"{name}.bin"
    src.write_bytes(elf)
    subprocess.run(["llvm-objcopy-19", "-O", "binary", "--only-section=.text", str(src), str(out)], check=True)
    return out.read_bytes()


@needs_tools
@pytest.mark.parametrize("path", CORPUS[::3], ids=lambda p: p.name)
def test_disassembly_reassembles_to_the_same_code(path, tmp_path):
    gfx = path.name.split(".")[-2]
    elf = codeobj.assemble(path.read_text(), gfx)
    assert codeobj.elf_target(elf) == gfx and codeobj.elf_size(elf) == len(elf)
    text = codeobj.disassemble(elf)
    module = parse_module(text)  # our parser reads what the rebuild gives
    assert [k.name for k in module.kernels()] == [k.name for k in parse_module(path.read_text()).kernels()]
    again = codeobj.assemble(text, gfx)
    original, rebuilt = text_section(elf, tmp_path, "a"), text_section(again, tmp_path, "b")
    assert rebuilt and original[:len(rebuilt)] == rebuilt  # the original also has LLVM's trailing padding


@needs_tools
def test_probed_code_object_from_a_bundle():
    path = next(p for p in CORPUS if p.name == "loop_sum.gfx942.s")
    elf = codeobj.assemble(path.read_text(), "gfx942")
    other = codeobj.assemble(next(p for p in CORPUS if p.name == "vadd.gfx90a.s").read_text(), "gfx90a")
    image = codeobj.bundle([("host-x86_64-unknown-linux-gnu", b""), ("hipv4-amdgcn-amd-amdhsa--gfx90a", other),
                            ("hipv4-amdgcn-amd-amdhsa--gfx942", elf)])
    assert codeobj.bundle_size(image) == len(image)
    assert codeobj.code_object_for(image, "gfx942") == elf
    with pytest.raises(codeobj.CodeObjectError, match="several targets"):
        codeobj.code_object_for(image)
    result = instrument(codeobj.disassemble(elf), load_probes("block_sched", isa="gcn"), isa=GCN)
    probed = codeobj.assemble(result.ptx, "gfx942")
    assert codeobj.elf_target(probed) == "gfx942" and b"nt_map_block_sched" in probed


def test_bad_images_refused():
    with pytest.raises(codeobj.CodeObjectError, match="compressed"):
        codeobj.unbundle(b"CCOB" + bytes(60))
    with pytest.raises(codeobj.CodeObjectError, match="not a clang offload bundle"):
        codeobj.code_object_for(b"junk" * 20)
    with pytest.raises(codeobj.CodeObjectError, match="past the end"):
        codeobj.unbundle(codeobj.BUNDLE_MAGIC + (1).to_bytes(8, "little") + (10**6).to_bytes(8, "little") * 2 + bytes(8))
