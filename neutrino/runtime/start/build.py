"""Building the LD_PRELOAD shim with the system C compiler, cached by source hash."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from neutrino.errors import NeutrinoError
from neutrino.runtime.instrument.codecache import default_cache_dir

CFLAGS = ("-O2", "-fPIC", "-shared", "-Wall", "-fvisibility=default")
LIBS = ("-ldl", "-lpthread")


class ShimBuildError(NeutrinoError):
    """The shim could not be compiled."""


SHIM_SOURCES = ("preload.c", "writer.c", "fastlaunch.c", "compilers.c", "graphs.c", "ctxsink.c", "nvtx.c",
               "argtrace.c", "cupti.c", "realsym.c", "graphpick.c")
SHIM_HEADERS = ("shim.h", "writer.h", "context.h", "cupti_abi.h")


def shim_sources() -> list[Path]:
    """shim/preload.c and shim/writer.c of this checkout (or installed copies beside the package)."""
    here = Path(__file__).resolve().parent
    for folder in (here.parents[2] / "shim", here):
        paths = [folder / name for name in SHIM_SOURCES]
        if all(p.is_file() for p in paths):
            return paths
    raise ShimBuildError(f"shim sources {', '.join(SHIM_SOURCES)} not found (looked in {here.parents[2] / 'shim'} "
                         f"and {here})")


def shim_source() -> Path:
    return shim_sources()[0]


def compiler() -> list[str]:
    cc = os.environ.get("CC") or "cc"
    parts = shlex.split(cc)
    if not shutil.which(parts[0]):
        raise ShimBuildError(f"no C compiler: {parts[0]!r} is not on PATH (set CC to one); the shim must be built once")
    return parts


def shim_path(cache_dir: Path | None = None) -> Path:
    headers = [p.parent / h for p in shim_sources()[:1] for h in SHIM_HEADERS]
    src = b"".join(p.read_bytes() for p in [*shim_sources(), *headers] if p.exists())
    h = hashlib.sha256(src + " ".join(CFLAGS + LIBS).encode()).hexdigest()[:16]
    return (cache_dir or default_cache_dir()) / f"shim-{h}.so"


def build_shim(cache_dir: Path | None = None, *, force: bool = False) -> Path:
    """Path of the compiled shim, compiling it first if its source changed."""
    out = shim_path(cache_dir)
    if out.exists() and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name, suffix=".tmp", dir=out.parent)
    os.close(fd)
    sources = shim_sources()
    cmd = [*compiler(), *CFLAGS, f"-I{sources[0].parent}", "-o", tmp, *map(str, sources), *LIBS]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        os.unlink(tmp)
        raise ShimBuildError(f"cannot run the C compiler ({' '.join(cmd)}): {e}") from None
    if res.returncode != 0:
        os.unlink(tmp)
        raise ShimBuildError(f"building the shim failed ({' '.join(cmd)}):\n{res.stderr.strip()}")
    os.replace(tmp, out)
    return out
