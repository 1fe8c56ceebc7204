"""Code cache for instrumented kernels: in memory and on disk.

Key: sha256 over the tool version, device arch, probe text, kernel name and
the module's PTX. An entry holds the probed PTX, its kernel description and,
once the driver has JIT-compiled it, the cubin, so a second run of the same
program pays neither instrumentation nor JIT.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import neutrino

ENV_CACHE_DIR = "NEUTRINO_CACHE_DIR"


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "neutrino"


def cache_key(ptx: str, probe_text: str, arch: tuple[int, int], kernel: str, *, variant: str = "probed",
              version: str = neutrino.__version__) -> str:
    h = hashlib.sha256()
    for part in (variant, version, f"sm_{arch[0]}{arch[1]}", kernel, probe_text, ptx):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class CacheEntry:
    """A probed kernel's code: its PTX, kernel description (None for pruned baselines) and cubin.
    A plain class: the launcher imports this module (checked_probe_text) before every profiled
    program, where attrs and dataclasses cost their imports (spec/runtime.md, "Start-up and exit phases")."""

    __slots__ = ("ptx", "info", "cubin")

    def __init__(self, ptx: str, info: dict | None, cubin: bytes | None = None):
        self.ptx, self.info, self.cubin = ptx, info, cubin


class CodeCache:
    def __init__(self, root: Path | None):
        self.root = root  # None: memory only
        self._mem: dict[str, CacheEntry] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[CacheEntry | None, str]:
        """(entry, where) with where in 'memory', 'disk', 'miss'."""
        with self._lock:
            e = self._mem.get(key)
        if e is not None:
            return e, "memory"
        e = self._read_disk(key)
        if e is None:
            return None, "miss"
        with self._lock:
            self._mem[key] = e
        return e, "disk"

    def put(self, key: str, entry: CacheEntry) -> None:
        with self._lock:
            self._mem[key] = entry
        self._write_disk(key, entry)

    def _dir(self, key: str) -> Path | None:
        return None if self.root is None else self.root / "kernels" / key[:2] / key

    def _read_disk(self, key: str) -> CacheEntry | None:
        d = self._dir(key)
        if d is None or not (d / "probed.ptx").exists():
            return None
        try:
            ptx = (d / "probed.ptx").read_text()
            info = json.loads((d / "kernel.json").read_text()) if (d / "kernel.json").exists() else None
            cubin = (d / "probed.cubin").read_bytes() if (d / "probed.cubin").exists() else None
        except (OSError, ValueError):
            return None  # a damaged entry is a miss
        return CacheEntry(ptx, info, cubin)

    def _write_disk(self, key: str, e: CacheEntry) -> None:
        """Best effort: a full or read-only disk only costs the next run its cache."""
        d = self._dir(key)
        if d is None:
            return
        try:
            d.mkdir(parents=True, exist_ok=True)
            _atomic_write(d / "probed.ptx", e.ptx.encode())
            if e.info is not None:
                _atomic_write(d / "kernel.json", json.dumps(e.info).encode())
            if e.cubin is not None:
                _atomic_write(d / "probed.cubin", e.cubin)
        except OSError:
            pass


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}.{threading.get_ident()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------- checked probe files
#
# A probe file's TOML text (a DSL file's compiled: the built-in tools, a user's .py probe) depends
# only on the file's text and path and on the compiler; whether it passes the verifier, on that
# text and the verifier. Both are cached like kernels: an entry is written once the text was
# compiled *and verified*, so the launcher and every profiled process of a later run read the
# TOML instead of compiling and verifying it again (spec/runtime.md, "Start-up and exit phases").

_PACKAGE = Path(neutrino.__file__).resolve().parent
# The code a cached probe text depends on: the DSL compiler, the probe reader and the verifier.
PROBE_CODE = (_PACKAGE / "language", _PACKAGE / "probefile.py", _PACKAGE / "probe_model.py",
              _PACKAGE / "passes" / "verify.py", _PACKAGE / "isa" / "ptx" / "semantics.py", _PACKAGE / "loop_limits.py")


def _code_fingerprint() -> bytes:
    """The package version and each file of PROBE_CODE's size and mtime (a development checkout
    changes the compiler or the verifier without changing the version)."""
    parts = [neutrino.__version__]
    for root in PROBE_CODE:
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name) if root.is_dir() else [root]
            for entry in entries:
                if str(entry.name).endswith(".py"):
                    st = entry.stat()
                    parts.append(f"{entry.name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{root.name}:unreadable")
    return "\n".join(parts).encode()


def probe_cache_key(path: str, source: str, backend: str) -> str:
    h = hashlib.sha256()
    for part in (b"probe", _code_fingerprint(), backend.encode(), path.encode(), source.encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def checked_probe_text(path, backend: str = "ptx", verify=None, root: Path | None = None) -> tuple[str, str]:
    """(a probe file's TOML text, 'hit' or 'miss'). On a miss a DSL file is compiled and the text
    given to `verify` (which raises on a bad probe); only a verified text is stored. Without
    `verify` nothing is stored (the caller verifies later). Errors are never cached: a bad file
    raises every time. A cache that cannot be written only costs the next run its compilation."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError) as e:
        from neutrino.errors import Diagnostic, Location, ProbeError

        raise ProbeError(Diagnostic(Location(path), f"cannot read probe file: {e}")) from None
    root = default_cache_dir() if root is None else root
    entry = root / "probes" / f"{probe_cache_key(path, source, backend)}.toml"
    try:
        return entry.read_text(encoding="utf-8"), "hit"
    except (OSError, UnicodeDecodeError):
        pass
    text = source
    if path.endswith(".py"):
        from neutrino.language import compile_source

        text = compile_source(source, path, backend)
    if verify is None:
        return text, "miss"
    verify(text)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(entry, text.encode("utf-8"))
    except OSError:
        pass
    return text, "miss"
