"""A `ptxas` that XLA runs in place of the real one, so a JAX program's kernels can be probed.

XLA (jaxlib 0.11 on CUDA 13, without its nvJitLink build option) compiles each module's PTX with
a ptxas *subprocess* and hands the driver the cubin: the shim then sees no PTX. In a JAX process
(frameworks.prepare_jax) the runtime puts a directory holding this wrapper first on PATH. The
wrapper runs the real ptxas with the same arguments (its output, messages and exit status are the
program's, unchanged) and, when it succeeded, files the PTX it compiled under the SHA-256 of the
cubin it produced: `<index>/<sha256>.ptx`. When the program loads that cubin, compilers.py finds
the PTX there and the module is probed from its own PTX. Recording never changes what ptxas did:
any failure of ours is one line in `<index>/errors.log`.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ENV_INDEX = "NEUTRINO_PTX_INDEX_DIR"  # where the wrapper files PTX by cubin hash
ENV_REAL = "NEUTRINO_REAL_PTXAS"  # the ptxas the wrapper runs
CUDA_BIN_FALLBACKS = ("/usr/local/cuda/bin",)  # where XLA also looks when PATH has none


def find_real_ptxas(path: str | None = None, skip: str | None = None) -> str | None:
    """The ptxas on PATH (without our wrapper's directory), else in the usual CUDA root."""
    dirs = [d for d in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep) if d]
    if skip is not None:
        dirs = [d for d in dirs if os.path.realpath(d) != os.path.realpath(skip)]
    found = shutil.which("ptxas", path=os.pathsep.join([*dirs, *CUDA_BIN_FALLBACKS]))
    return os.path.realpath(found) if found else None


def install(index_dir: Path, real_ptxas: str) -> Path:
    """Write `<index_dir>/bin/ptxas` (a shell script running this module); returns the bin directory."""
    bin_dir = index_dir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    package_parent = str(Path(__file__).resolve().parent.parent.parent)
    code = f"import sys; sys.path.insert(0, {package_parent!r}); from neutrino.runtime.ptxas_wrapper import main; " \
           "sys.exit(main())"
    script = bin_dir / "ptxas"
    # LD_PRELOAD cleared: neither the wrapper's Python nor ptxas is a program to profile
    script.write_text("#!/bin/sh\n"
                      f"export {ENV_REAL}={shlex.quote(real_ptxas)} {ENV_INDEX}={shlex.quote(str(index_dir))}\n"
                      f"LD_PRELOAD= exec {shlex.quote(sys.executable)} -c {shlex.quote(code)} \"$@\"\n")
    script.chmod(0o755)
    return bin_dir


def split_arguments(argv: list[str]) -> tuple[str | None, str | None]:
    """(input PTX file, output cubin file) of a ptxas command line, as far as they can be told."""
    output = None
    positional = []
    it = iter(range(len(argv)))
    for i in it:
        arg = argv[i]
        if arg in ("-o", "--output-file") and i + 1 < len(argv):
            output = argv[i + 1]
            next(it, None)
        elif arg.startswith("--output-file="):
            output = arg.split("=", 1)[1]
        elif not arg.startswith("-"):
            positional.append(arg)
    ptx = next((p for p in positional if p.endswith(".ptx")), None)
    if ptx is None:
        ptx = next((p for p in reversed(positional) if os.path.isfile(p)), None)
    return ptx, output


def record(argv: list[str], index_dir: Path) -> Path | None:
    """File the PTX of a successful compile under its cubin's hash; the path written, or None."""
    ptx_path, cubin_path = split_arguments(argv)
    if not ptx_path or not cubin_path:
        return None
    ptx = Path(ptx_path).read_bytes()
    key = hashlib.sha256(Path(cubin_path).read_bytes()).hexdigest()
    target = index_dir / f"{key}.ptx"
    tmp = index_dir / f".{key}.{os.getpid()}.tmp"
    tmp.write_bytes(ptx)
    os.replace(tmp, target)  # atomic: a reader sees the whole PTX or none
    return target


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    real = os.environ.get(ENV_REAL) or find_real_ptxas()
    if not real:
        sys.stderr.write("neutrino: the ptxas wrapper found no real ptxas\n")
        return 127
    rc = subprocess.call([real, *argv])
    index = os.environ.get(ENV_INDEX)
    if rc == 0 and index:
        try:
            record(argv, Path(index))
        except Exception as e:  # noqa: BLE001 - recording never changes what ptxas did
            try:
                with open(Path(index) / "errors.log", "a") as log:
                    log.write(f"{argv}: {type(e).__name__}: {e}\n")
            except OSError:
                pass
    return rc
