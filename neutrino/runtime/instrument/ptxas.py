"""Compile probed PTX to a cubin the way the program's compilers do: whole-program `ptxas`.

The driver's linker (`cuLink*`) compiles PTX as relocatable code, where ptxas may not
allocate registers across the whole kernel as it does for a whole program: measured on
Triton's layernorm under block_sched, 48 registers linked against 37 whole (the original: 36),
two fewer blocks per SM. So the probed code is compiled like the original was (Triton and
nvcc run ptxas on a whole module): by a `ptxas` found here; where none is found or it fails,
the caller hands the PTX to the driver's own JIT (`cuModuleLoadDataEx`, whole-program too),
which gives no cubin to keep in the code cache (spec/runtime.md, "A probed launch"). Not the
oracle of `instrument --check` (neutrino/ptxas.py): that one only checks that text assembles, for
the lowest architecture a ptxas lists; this one builds the code that runs, for the launch's device.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

ENV_PTXAS = "NEUTRINO_PTXAS"  # a ptxas to use; "driver": none (the driver's JIT)
PTXAS_TIMEOUT_S = 600
_TARGET = re.compile(r"^\s*\.target\s+(sm_(\d)(\d+)([af]?))\b", re.MULTILINE)
_CUDA_BINS = ("/usr/local/cuda/bin",)


class PtxasError(Exception):
    """ptxas was not found, or it refused the PTX (its message)."""


def find_ptxases() -> list[str]:
    """The ptxas programs to compile with, in order: $NEUTRINO_PTXAS alone ("driver": none), else
    the one XLA's wrapper runs, Triton's (TRITON_PTXAS_PATH, its bundled one), one on PATH (not our
    XLA wrapper), the CUDA toolkit's. More than one: a ptxas older than the PTX's ISA version refuses
    it (Triton's bundled ptxas and CUDA 13's `.version 9.0`), and the next may take it."""
    chosen = os.environ.get(ENV_PTXAS)
    if chosen:
        return [] if chosen == "driver" else [chosen]
    from neutrino.runtime.modules.subprocess_compilers import find_real

    wrapper_dir = os.environ.get("NEUTRINO_PTX_INDEX_DIR")
    candidates = [os.environ.get("NEUTRINO_REAL_PTXAS"),  # subprocess_compilers.ENV_REAL: PATH has our wrapper
                  os.environ.get("TRITON_PTXAS_PATH"), _triton_bundled(),
                  find_real("ptxas", skip=os.path.join(wrapper_dir, "bin") if wrapper_dir else None)]
    out: list[str] = []
    for path in candidates:
        if path and os.access(path, os.X_OK) and os.path.realpath(path) not in map(os.path.realpath, out):
            out.append(path)
    return out


def too_old(message: str) -> bool:
    """ptxas refused the PTX for its ISA version or target, which a newer ptxas may know."""
    return "Unsupported .version" in message or "Unsupported .target" in message


def _triton_bundled() -> str | None:
    """Triton's own ptxas (triton/backends/nvidia/bin/ptxas), found without importing Triton."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "backends", "nvidia", "bin", "ptxas")
        if os.path.exists(path):
            return path
    return None


def gpu_name(ptx: str, arch: tuple[int, int]) -> str:
    """ptxas's `-arch` for a device of compute capability `arch`: the PTX's own target where it names
    this device (keeping `sm_90a`'s arch-specific features), else `sm_<major><minor>`."""
    m = _TARGET.search(ptx)
    if m and (int(m.group(2)), int(m.group(3))) == tuple(arch):
        return m.group(1)
    return f"sm_{arch[0]}{arch[1]}"


def compile_whole(ptxas: str, ptx: str, arch: tuple[int, int]) -> bytes:
    """The cubin `ptxas -arch=... -o out in.ptx` makes of `ptx` (whole program); PtxasError if it fails."""
    with tempfile.TemporaryDirectory(prefix="neutrino-ptxas-") as tmp:
        src, out = os.path.join(tmp, "probed.ptx"), os.path.join(tmp, "probed.cubin")
        with open(src, "w") as fh:
            fh.write(ptx)
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # ptxas is not a program to profile
        try:
            r = subprocess.run([ptxas, f"-arch={gpu_name(ptx, arch)}", "-o", out, src], capture_output=True,
                               text=True, timeout=PTXAS_TIMEOUT_S, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PtxasError(f"{ptxas}: {e}") from None
        if r.returncode != 0 or not os.path.exists(out):
            raise PtxasError(f"{ptxas} exit {r.returncode}: {(r.stderr or r.stdout).strip()[-500:]}")
        with open(out, "rb") as fh:
            return fh.read()
