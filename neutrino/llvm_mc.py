"""LLVM's AMDGPU assembler as the oracle for probed GCN (like ptxas for PTX).

LLVM 19 is pinned (Debian's `llvm-19`): code-object directives differ between
LLVM versions, and the corpus is generated with the same version's llc.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

CANDIDATES = ("llvm-mc-19",)


def find_llvm_mc() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def assemble(text: str, gfx: str, timeout: float = 60) -> tuple[bool, str]:
    """(accepted, diagnostics) of `llvm-mc -triple=amdgcn-amd-amdhsa -mcpu=GFX -filetype=obj`."""
    tool = find_llvm_mc()
    if tool is None:
        raise FileNotFoundError("llvm-mc-19 not found (Debian: apt-get install llvm-19)")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probed.s"
        src.write_text(text)
        proc = subprocess.run([tool, "-triple=amdgcn-amd-amdhsa", f"-mcpu={gfx}", "-filetype=obj", str(src), "-o", str(Path(tmp) / "probed.o")],
                              capture_output=True, text=True, timeout=timeout)
    return proc.returncode == 0, proc.stderr


def check(text: str, original: str | None = None) -> str:
    """Assemble a probed module with llvm-mc-19 for its own target: the line to print; raises when it is rejected.

    `original` (the unprobed text) is not needed: the descriptor names the target.
    """
    from neutrino.errors import NeutrinoError
    from neutrino.isa.gcn import parse_module

    if find_llvm_mc() is None:
        return "llvm-mc: check skipped: llvm-mc-19 not installed (Debian: apt-get install llvm-19)"
    gfx = parse_module(text).target or "gfx90a"
    ok, err = assemble(text, gfx)
    if not ok:
        raise NeutrinoError(f"llvm-mc ({gfx}) rejected the probed assembly:\n" + err.strip())
    return f"llvm-mc: ok for {gfx}"
