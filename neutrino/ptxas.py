"""ptxas as the oracle for the PTX we print (`instrument --check`, `demo`).

Two things make a naive `ptxas -arch=<.target>` give false failures:

* the module's `.target` may be an architecture this ptxas no longer builds
  for (`sm_52` is gone from ptxas 13): PTX for `.target sm_XY` assembles for
  every `sm_MN` with MN >= XY, so we pick the lowest one this ptxas lists
  (`sm_XYa` only for itself; `sm_XYf` within its family);
* relocatable PTX (`nvcc -rdc=true`: `.extern .func`, `.extern .global`)
  has unresolved symbols by design: it is assembled with `-c`, as nvcc does.

When no architecture fits, or ptxas refuses the *unprobed* module as well
(32-bit PTX, retired features), the check is reported as skipped, with the
reason, rather than blamed on the probes.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import attrs

from neutrino.errors import NeutrinoError
from neutrino.isa.ptx import ir

_ARCH_RE = re.compile(r"^sm_(\d+)([af]?)$")


@attrs.frozen
class CheckResult:
    ok: bool
    arch: str | None  # what ptxas assembled for
    relocatable: bool  # assembled with -c
    skipped: str | None = None  # why the check could not be made
    stderr: str = ""


@functools.lru_cache(maxsize=8)  # one `ptxas --help` per ptxas binary
def supported_archs(ptxas: str) -> tuple[str, ...]:
    """The `sm_*` values of --gpu-name that this ptxas lists."""
    proc = subprocess.run([ptxas, "--help"], capture_output=True, text=True)
    text = proc.stdout.replace("\n", " ")
    m = re.search(r"--gpu-name.*?Allowed values for this option:(.*?)Default value", text)
    names = re.findall(r"'(sm_\d+[af]?)'", m.group(1) if m else "")
    return tuple(names)


def choose_arch(target: str, archs: tuple[str, ...]) -> str | None:
    """The lowest architecture in `archs` that can assemble PTX written for `target`, or None."""
    m = _ARCH_RE.match(target)
    if m is None:
        return None
    version, suffix = int(m.group(1)), m.group(2)
    if suffix == "a":
        return target if target in archs else None
    parsed = [(int(a.group(1)), a.group(2), a.group(0)) for a in map(_ARCH_RE.match, archs) if a]
    if suffix == "f":  # the same family: same major version, minor at least ours
        fits = [(v, name) for v, s, name in parsed if v // 10 == version // 10 and v >= version and s in ("", "f")]
    else:
        fits = [(v, name) for v, s, name in parsed if v >= version and s == ""]
    return min(fits)[1] if fits else None


def is_relocatable(module: ir.Module) -> bool:
    """Does the module reference symbols defined elsewhere (nvcc -rdc output)?

    `.extern .shared` (dynamic shared memory) does not count: it is resolved at launch.
    """
    for item in module.items:
        if isinstance(item, ir.Function) and item.body is None and ".extern" in item.linkage:
            return True
        if isinstance(item, ir.Directive):
            words = item.text.split()
            if words[:1] == [".extern"] and ".shared" not in words:
                return True
    return False


def _run(ptxas: str, ptx: str, arch: str, relocatable: bool, timeout: float | None = None) -> subprocess.CompletedProcess:
    """ptxas on `ptx`; raises subprocess.TimeoutExpired after `timeout` seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "module.ptx"
        src.write_text(ptx)
        command = [ptxas, f"-arch={arch}", *(["-c"] if relocatable else []), str(src), "-o", str(Path(tmp) / "module.cubin")]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def check(ptx: str, module: ir.Module, original: str | None = None, ptxas: str | None = None,
          timeout: float | None = None) -> CheckResult:
    """Assemble `ptx` (whose parsed form is `module`); `original` is the unprobed text, tried on failure.

    With `timeout`, a ptxas run that takes longer is a skipped check (the fuzz suite's huge modules).
    """
    try:
        return _check(ptx, module, original, ptxas, timeout)
    except subprocess.TimeoutExpired:
        return CheckResult(False, None, is_relocatable(module), skipped=f"ptxas did not finish within {timeout} s")


def _check(ptx: str, module: ir.Module, original: str | None, ptxas: str | None, timeout: float | None) -> CheckResult:
    ptxas = ptxas or shutil.which("ptxas")
    if ptxas is None:
        raise NeutrinoError("--check needs ptxas on the PATH")
    relocatable = is_relocatable(module)
    if module.target is None:
        return CheckResult(False, None, relocatable, skipped="the module has no .target directive")
    archs = supported_archs(ptxas)
    arch = choose_arch(module.target, archs)
    if arch is None:
        listed = ", ".join(a for a in archs if _ARCH_RE.match(a) and not _ARCH_RE.match(a).group(2))
        return CheckResult(False, None, relocatable, skipped=f"this ptxas cannot assemble .target {module.target} (it builds {listed})")
    proc = _run(ptxas, ptx, arch, relocatable, timeout)
    if proc.returncode == 0:
        return CheckResult(True, arch, relocatable, stderr=proc.stderr)
    unprobed = _run(ptxas, original, arch, relocatable, timeout) if original is not None else None
    if unprobed is not None and unprobed.returncode != 0:
        lines = unprobed.stderr.splitlines()
        first = next((line for line in lines if "error" in line or "fatal" in line), unprobed.stderr.strip())
        return CheckResult(False, arch, relocatable, skipped=f"ptxas refuses the unprobed module as well ({first.strip()})", stderr=proc.stderr)
    return CheckResult(False, arch, relocatable, stderr=proc.stderr)


def check_assembles(ptx: str, original: str | None = None) -> str:
    """Assemble the probed PTX (the arch and -c picked as by `check`); the line to print.

    Raises when ptxas rejects what we produced; a check that cannot be made
    (no arch fits, or the unprobed `original` is refused too) is reported as skipped.
    """
    from neutrino.isa.ptx import parse_module

    result = check(ptx, parse_module(ptx), original)
    if result.skipped:
        return f"ptxas: check skipped: {result.skipped}"
    how = f"{result.arch}{', relocatable (-c)' if result.relocatable else ''}"
    if not result.ok:
        raise NeutrinoError(f"ptxas ({how}) rejected the probed PTX:\n" + result.stderr.strip())
    return f"ptxas: ok for {how}"
