"""Probed PTX is compiled as a whole program (neutrino/runtime/instrument/ptxas.py), never as
relocatable code: on Triton's layernorm under block_sched the relocatable compile takes 48
registers where the whole program takes 37 (the original: 36)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from neutrino.runtime.instrument import ptxas

CORPUS = Path(__file__).resolve().parent / "data" / "corpus" / "triton"
REAL_PTXAS = shutil.which("ptxas")


def test_gpu_name_keeps_an_arch_specific_target_of_this_device_only():
    assert ptxas.gpu_name(".version 8.4\n.target sm_90a\n", (9, 0)) == "sm_90a"
    assert ptxas.gpu_name(".version 8.4\n.target sm_80\n", (9, 0)) == "sm_90"
    assert ptxas.gpu_name(".target sm_90a\n", (10, 0)) == "sm_100"
    assert ptxas.gpu_name("no target", (8, 6)) == "sm_86"


def test_find_ptxas_order(monkeypatch, tmp_path):
    monkeypatch.setenv(ptxas.ENV_PTXAS, "driver")
    assert ptxas.find_ptxases() == []
    monkeypatch.setenv(ptxas.ENV_PTXAS, "/opt/x/ptxas")
    assert ptxas.find_ptxases() == ["/opt/x/ptxas"]
    monkeypatch.delenv(ptxas.ENV_PTXAS)
    real = tmp_path / "real_ptxas"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    monkeypatch.setenv("NEUTRINO_REAL_PTXAS", str(real))  # XLA's wrapper is first on PATH: the real one
    assert ptxas.find_ptxases()[0] == str(real)


def test_a_refusing_ptxas_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "ptxas"
    bad.write_text("#!/bin/sh\necho 'ptxas fatal   : Unresolved extern function vprintf' >&2\nexit 255\n")
    bad.chmod(0o755)
    with pytest.raises(ptxas.PtxasError, match="vprintf") as e:
        ptxas.compile_whole(str(bad), ".target sm_80\n", (8, 0))
    assert str(bad) in str(e.value)


@pytest.mark.skipif(REAL_PTXAS is None, reason="no ptxas on PATH")
def test_the_cubin_is_ptxas_whole_program_output(tmp_path):
    """Byte for byte what `ptxas -arch -o` makes (whole program), not what `ptxas -c` makes."""
    from neutrino import engine
    from neutrino.toolbox import load_probe_argument

    src = CORPUS / "layernorm.sm90a.ptx"
    if not src.exists():
        pytest.skip(f"{src} not in the corpus")
    probed = engine.instrument(src.read_text(), load_probe_argument("block_sched", None)).ptx
    path = tmp_path / "p.ptx"
    path.write_text(probed)
    ours = ptxas.compile_whole(REAL_PTXAS, probed, (9, 0))
    whole, reloc = tmp_path / "w.cubin", tmp_path / "r.cubin"
    subprocess.run([REAL_PTXAS, "-arch=sm_90a", "-o", str(whole), str(path)], check=True)
    subprocess.run([REAL_PTXAS, "-arch=sm_90a", "-c", "-o", str(reloc), str(path)], check=True)
    assert ours == whole.read_bytes()
    assert ours != reloc.read_bytes()
    regs = {}
    for flag, out in (("", whole), ("-c", reloc)):
        r = subprocess.run([REAL_PTXAS, "-arch=sm_90a", "-v", *([flag] if flag else []), "-o", str(out), str(path)],
                           capture_output=True, text=True, check=True)
        regs[flag] = int(r.stderr.split("Used ")[1].split()[0])
    assert regs[""] < regs["-c"]  # why: the relocatable compile of this kernel takes more registers


def test_a_ptxas_too_old_for_the_ptx_hands_it_to_the_next(monkeypatch, tmp_path):
    """Triton's bundled ptxas refuses CUDA 13's `.version 9.0`; the toolkit's takes it, and is tried
    first from then on. A refusal of another kind is not retried; every refusal is in the error."""
    from neutrino.runtime.driver import DriverError, RealDriver

    old, new = tmp_path / "old_ptxas", tmp_path / "new_ptxas"
    old.write_text("#!/bin/sh\necho \"ptxas fatal   : Unsupported .version 9.0; current version is '8.7'\" >&2\n"
                   "echo x >> " + str(tmp_path / "old_calls") + "\nexit 255\n")
    new.write_text("#!/bin/sh\nwhile [ $# -gt 1 ]; do [ \"$1\" = -o ] && out=$2; shift; done\nprintf CUBIN > $out\n")
    for p in (old, new):
        p.chmod(0o755)
    drv = RealDriver.__new__(RealDriver)
    drv._ptxas = (str(old), str(new))
    assert drv.compile_ptx(".version 9.0\n.target sm_90\n", (9, 0)) == b"CUBIN"
    assert drv._ptxas[0] == str(new)
    assert drv.compile_ptx(".version 9.0\n.target sm_90\n", (9, 0)) == b"CUBIN"
    assert (tmp_path / "old_calls").read_text().count("x") == 1  # not asked again
    bad = tmp_path / "bad_ptxas"
    bad.write_text("#!/bin/sh\necho 'ptxas fatal   : Unresolved extern function vprintf' >&2\nexit 255\n")
    bad.chmod(0o755)
    drv._ptxas = (str(bad), str(new))
    with pytest.raises(DriverError, match="vprintf"):
        drv.compile_ptx(".version 9.0\n.target sm_90\n", (9, 0))
