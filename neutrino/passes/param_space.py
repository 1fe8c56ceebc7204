"""The kernel parameter space: how many bytes an entry's parameters take, and the limit.

ptxas refuses an entry whose parameters exceed the space its PTX version and
target allow ("uses too much parameter space"). Buffer addressing appends a
parameter per map, so it checks here first and refuses with a located error
(the runtime then runs the original kernel) instead of handing ptxas a module
it rejects.

Limits (ptxas 13.0, and the PTX ISA's `.entry` rules): 4,352 bytes; 32,764
bytes from PTX ISA 8.1 on sm_70 and later targets.
"""

from __future__ import annotations

import functools
import re

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import formats, ir

SMALL_LIMIT = 4352
LARGE_LIMIT = 32764
LARGE_SINCE = (8, 1)  # PTX ISA version
LARGE_SM = 70
HANDLE_BYTES = 8  # .texref, .samplerref, .surfref parameters are 64-bit handles
HANDLE_TYPES = frozenset({"texref", "samplerref", "surfref"})
ARRAY = re.compile(r"\[\s*(\d+)\s*\]", re.ASCII)


def limit_for(version: str | None, target: str | None) -> int:
    """The parameter space of one entry, in bytes, for a module's `.version` and `.target`."""
    have = formats.parse_version(version)
    sm = formats.parse_target(target) or 0
    return LARGE_LIMIT if have is not None and have >= LARGE_SINCE and sm >= LARGE_SM else SMALL_LIMIT


@functools.lru_cache(maxsize=4096)  # a kernel and its counting copy, and launches of one program, repeat them
def param_layout(text: str) -> tuple[int, int]:
    """(bytes, alignment) of one parameter declaration: `.param .align 8 .b8 p[24]` → (24, 8).

    After `.ptr`, `.align` is the pointee's alignment, not the parameter's.
    """
    words = text.split()
    element, align, pointer = 0, 0, False
    for i, word in enumerate(words):
        name = word.lstrip(".")
        if word == ".ptr":
            pointer = True
        elif word == ".align" and i + 1 < len(words) and words[i + 1].isascii() and words[i + 1].isdigit():
            if not pointer:
                align = int(words[i + 1])
        elif name in ir.TYPE_BYTES and word.startswith("."):
            element = max(ir.TYPE_BYTES[name], 1)
        elif name in HANDLE_TYPES and word.startswith("."):
            element = HANDLE_BYTES
    count = 1
    for m in ARRAY.finditer(words[-1] if words else ""):
        count *= int(m.group(1))
    return element * count, max(align, element, 1)


def params_bytes(params: list[ir.Param]) -> int:
    """The parameters laid out in order, each at its alignment."""
    offset = 0
    for param in params:
        size, align = param_layout(param.text)
        offset = -(-offset // align) * align + size
    return offset


def check_param_space(module: ir.Module, function: ir.Function, original: int) -> None:
    """Refuse, located, an entry whose parameters (its `original` first ones and ours) exceed the limit."""
    params = function.params or []
    total = params_bytes(params)
    if total <= SMALL_LIMIT:  # every kernel fits this: no need to read the module's header
        return
    limit = limit_for(module.version, module.target)
    if total <= limit:
        return
    own = params_bytes(params[:original])
    raise InstrumentError(
        f"{module.source}:{function.line}: error: entry {function.name}: its parameters take {own} bytes and the "
        f"probe buffers' {len(params) - original} more make {total}, over the {limit}-byte parameter space of "
        f".version {module.version} .target {module.target} (32,764 bytes needs .version 8.1 and sm_70)"
    )
