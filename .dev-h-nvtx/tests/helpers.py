"""Shared test helpers: the corpus, ptxas as an oracle, FileCheck, instruction order."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from neutrino.isa.ptx import ir, parse_module

DATA = Path(__file__).parent / "data"
CORPUS = sorted((DATA / "corpus").glob("*/*.ptx"))
PROBES = sorted((DATA / "probes").glob("*.toml"))
HAVE_PTXAS = shutil.which("ptxas") is not None


def ptxas(ptx: str, target: str | None = None) -> str:
    """Assemble with ptxas for the module's target; returns stderr, raises AssertionError on failure."""
    target = target or parse_module(ptx).target or "sm_90"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run(["ptxas", f"-arch={target}", str(src), "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    assert proc.returncode == 0, f"ptxas failed:\n{proc.stderr}"
    return proc.stderr


def filecheck(output: str, checks: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_file = Path(tmp) / "checks"
        check_file.write_text(checks)
        proc = subprocess.run([sys.executable, "-m", "filecheck", str(check_file)], input=output, capture_output=True, text=True)
    assert proc.returncode == 0, f"FileCheck failed:\n{proc.stdout}\n{proc.stderr}\n--- output ---\n{output}"


def instruction_keys(module: ir.Module, function: str) -> list[tuple]:
    fn = module.function(function)
    return [i.key() for i in ir.instructions(fn.body)]


def assert_keeps_original(original_ptx: str, probed_ptx: str, kernels: list[str]) -> None:
    """Every original instruction of each kernel is in the probed kernel, in the same order."""
    before, after = parse_module(original_ptx), parse_module(probed_ptx)
    for name in kernels:
        expected = instruction_keys(before, name)
        got = iter(instruction_keys(after, name))
        for key in expected:
            for candidate in got:
                if candidate == key:
                    break
            else:
                raise AssertionError(f"{name}: original instruction {key} missing or out of order")
