"""The module path with nothing probed (issue 29, `modules: ptx xN`), on the CPU without a driver.

Images shaped like the torch.compile program's 30 loads are put in memory and handed, by address,
to the shim's module callback (hooks.make_callbacks) in front of a stand-in runtime whose registry
is the real one (-k nomatchxyz): 19 Triton-like cubins (uncompressed ELF, 40 KB), 10 ATen/cuBLAS-like
fatbins (SASS only, compressed ELF entries for 4 archs, MB each) and one fatbin with a compressed
PTX entry (always examined). Prints the median seconds of the 30 loads and of each kind over
--repeat passes, and how many were examined.

usage: PYTHONPATH=$PWD python benchmarks/startup_modules.py [--repeat 15] [--sass-mb 4]
"""

from __future__ import annotations

import argparse
import ctypes as C
import os
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from neutrino.runtime import hooks  # noqa: E402
from neutrino.runtime.modules.registry import Registry  # noqa: E402
from neutrino.runtime.modules.fatbin import FATBIN_MAGIC, FLAG_COMPRESSED_ZSTD  # noqa: E402

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PTX_80 = ".version 8.0\n.target sm_80\n.address_size 64\n\n.visible .entry k()\n{\n\tret;\n}\n"


def make_entry(kind: int, arch: int, stored: bytes, uncompressed_size: int) -> bytes:
    """A fatbin entry (fatbin.py's layout) whose payload claims zstd compression: with nothing probed its
    bytes are never decoded, so random ones stand for compressed SASS (no tests/ helpers: the device has
    no pytest)."""
    padded = stored + bytes(-len(stored) % 8)
    header = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x0101, 64, len(padded), len(stored), 0, 0, 9, arch, 0, 0,
                         0x11 | FLAG_COMPRESSED_ZSTD, 0, uncompressed_size)
    return header + padded


def make_fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body

CUBIN = Path(__file__).resolve().parent.parent / "tests" / "data" / "binaries" / "add_sm90_debug.cubin"


def images(sass_mb: float) -> list[tuple[str, bytes]]:
    cubin = CUBIN.read_bytes()
    cubin = cubin + bytes(40_000 - len(cubin)) if len(cubin) < 40_000 else cubin  # ELF sized by its headers
    per_entry = int(sass_mb * (1 << 20) / 4)
    sass = [make_entry(2, arch, ZSTD_MAGIC + os.urandom(per_entry), 3 * per_entry) for arch in (80, 86, 90, 100)]
    aten = make_fatbin(*sass)
    compressed_ptx = make_fatbin(make_entry(1, 80, ZSTD_MAGIC + os.urandom(len(PTX_80) // 2), len(PTX_80)), *sass[:1])
    return [("cubin", cubin)] * 19 + [("sass_fatbin", aten)] * 10 + [("ptx_fatbin", compressed_ptx)]


class StandIn:
    """What module_cb calls: on_module with the runtime's registry (-k nomatchxyz)."""

    def __init__(self):
        self.registry = Registry(find_ptx=lambda image, arch, path=None: None, arch=lambda: (9, 0),
                                 wants=lambda name: False, selected_literals=(b"nomatchxyz",))
        self.examined = 0

    def on_module(self, kind, handle, image, path=None, image_addr=0, read_seconds=0.0, examined=None):
        more = {} if examined is None else {"examined": examined}  # (a tree before the address check: none)
        rec = self.registry.add_module(kind, handle, image, path, image_addr, **more)[0]
        self.examined += rec.examined

    @property
    def selected_literals(self):
        return self.registry.selected_literals


def one_pass(rt, module_cb, buffers) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for handle, (kind, buf) in enumerate(buffers, 1):
        started = time.perf_counter()
        module_cb(1, handle, C.addressof(buf), None)
        seconds[kind] = seconds.get(kind, 0.0) + time.perf_counter() - started
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--sass-mb", type=float, default=4.0, help="size of each SASS-only fatbin")
    args = parser.parse_args()
    loaded = images(args.sass_mb)
    buffers = [(kind, C.create_string_buffer(data, len(data))) for kind, data in loaded]
    rt = StandIn()
    module_cb = hooks.make_callbacks(rt, shim=None)[0]
    module_cb = _python_side(module_cb)
    passes = [one_pass(rt, module_cb, buffers) for _ in range(args.repeat)]
    total = [sum(p.values()) for p in passes]
    counts = {kind: sum(1 for k, _ in loaded if k == kind) for kind, _ in loaded}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {len(loaded)} loads "
          f"({', '.join(f'{n} {k}' for k, n in counts.items())}; SASS fatbins {len(loaded[19][1]) / 1e6:.1f} MB)")
    print(f"all loads: median {statistics.median(total) * 1e3:.2f} ms over {args.repeat} passes "
          f"(min {min(total) * 1e3:.2f})")
    for kind in counts:
        per = statistics.median(p[kind] for p in passes)
        print(f"  {kind}: {per * 1e3:.2f} ms together, {per / counts[kind] * 1e3:.3f} ms each")
    print(f"examined: {rt.examined // args.repeat} of {len(loaded)} per pass")


def _python_side(cfunc):
    """Call the C callback object as C would (ctypes converts the arguments)."""
    return lambda kind, handle, image, path: cfunc(kind, C.c_void_p(handle), C.c_void_p(image), path)


if __name__ == "__main__":
    main()
