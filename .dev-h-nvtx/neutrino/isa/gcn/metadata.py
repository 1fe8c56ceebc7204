"""Edits of the code object's metadata (the YAML of `.amdgpu_metadata`), line by line.

LLVM writes one kernel per `  - ` item of `amdhsa.kernels`, its keys four
spaces in, its arguments as `      - ` items of `.args`. We change only what a
probed kernel changes (appended arguments, kernarg size, register counts) and
keep every other line as it was.
"""

from __future__ import annotations

import re

from neutrino.errors import InstrumentError
from neutrino.isa.gcn import ir


def kernel_span(meta: ir.Metadata, kernel: str) -> tuple[int, int]:
    """[start, end) of the lines of `kernel`'s item in amdhsa.kernels."""
    starts = [i for i, line in enumerate(meta.lines) if line.startswith("  - ")]
    first = starts[0] if starts else 0
    top = next((i for i, line in enumerate(meta.lines) if i > first and line[:1] not in (" ", "")), len(meta.lines))
    wanted = [".name:", kernel]
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else top
        if any(line.startswith(("    .name:", "  - .name:")) and line.split()[-2:] == wanted for line in meta.lines[start:end]):
            return start, end
    raise InstrumentError(f"kernel {kernel}: not found in the code object's metadata")


def arguments(meta: ir.Metadata, kernel: str) -> list[dict[str, str]]:
    start, end = kernel_span(meta, kernel)
    args: list[dict[str, str]] = []
    for line in meta.lines[start:end]:
        m = re.match(r"^      (- |  )\.(\w+):\s+(.*)$", line)
        if m:
            if m.group(1) == "- ":
                args.append({})
            args[-1][m.group(2)] = m.group(3).strip()
    return args


def set_key(meta: ir.Metadata, kernel: str, key: str, value: int | str) -> None:
    start, end = kernel_span(meta, kernel)
    heads = (f"  - .{key}:", f"    .{key}:")
    for i in range(start, end):
        line = meta.lines[i]
        if line.startswith(heads):
            head, rest = line.split(":", 1)
            meta.lines[i] = f"{head}:{rest[:len(rest) - len(rest.lstrip())]}{value}"
            return


def append_arguments(meta: ir.Metadata, kernel: str, new: list[dict[str, str]]) -> None:
    """Adds argument items after the kernel's last one, in LLVM's layout (keys sorted, values at column 24)."""
    start, end = kernel_span(meta, kernel)
    last = max((i for i in range(start, end) if meta.lines[i].startswith("      ")), default=None)
    if last is None:
        raise InstrumentError(f"kernel {kernel}: its metadata has no .args to extend")
    lines = []
    for arg in new:
        for n, key in enumerate(sorted(arg)):
            lead = "      - " if n == 0 else "        "
            lines.append(f"{lead}.{key}:".ljust(24) + f"{arg[key]}" if len(f"{lead}.{key}:") < 24 else f"{lead}.{key}: {arg[key]}")
    meta.lines[last + 1:last + 1] = lines


def get_int(meta: ir.Metadata, kernel: str, key: str) -> int | None:
    """An integer key of the kernel's item (`sgpr_count`), or None."""
    start, end = kernel_span(meta, kernel)
    heads = (f"  - .{key}:", f"    .{key}:")
    for line in meta.lines[start:end]:
        if line.startswith(heads):
            return int(line.split(":", 1)[1])
    return None
