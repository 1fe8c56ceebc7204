"""Result files written from Python: frames of one launch's maps (spec/trace-format.md).

The native writer (shim/writer.c) writes the same frames in production; this
module is its twin for the Python launch path and for tests that need a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

# FrameLayout and frame_layout (the layout rule of a frame) live with the trace layout, in neutrino.maps.
from neutrino.maps import (FIELD_DESC, FILE_HEADER, LEVELS, MAGIC, MAP_HEADER, MAP_TYPES,  # noqa: F401
                           SECTION_ALIGN, VERSION, FrameLayout, MapSection, TraceError, align, frame_layout)


def encode_header(*, grid, block, shared_bytes: int, maps: Sequence[MapSection]) -> tuple[bytes, list[int]]:
    """The header bytes of a result file and the absolute offset of each section."""
    head = np.zeros((), FILE_HEADER)
    head["magic"] = MAGIC
    head["version"] = VERSION
    head["n_maps"] = len(maps)
    head["grid"] = tuple(grid)
    head["block"] = tuple(block)
    head["shared_bytes"] = shared_bytes
    descs: list[bytes] = []
    layout = frame_layout(maps)
    for m, pos in zip(maps, layout.offsets):
        _check_section(m)
        mh = np.zeros((), MAP_HEADER)
        mh["name"] = m.name.encode()
        mh["level"] = LEVELS.index(m.level)
        mh["record_bytes"] = m.record_bytes
        mh["cap"] = m.cap
        mh["cap_is_count"] = m.header_cap_word
        mh["units"] = m.units
        fields = m.header_fields()
        mh["n_fields"] = len(fields)
        mh["type"] = MAP_TYPES.index(m.type)
        mh["offset"] = pos
        mh["size"] = m.size
        fd = np.zeros(len(fields), FIELD_DESC)
        for i, f in enumerate(fields):
            fd[i] = (f.name.encode(), f.width, f.offset)
        descs.append(mh.tobytes() + fd.tobytes())
    return head.tobytes() + b"".join(descs), list(layout.offsets)


def _check_section(m: MapSection) -> None:
    if len(m.name.encode()) > 63:
        raise TraceError(f"map name too long for a result file: {m.name!r}")
    for f in m.header_fields():
        if len(f.name.encode()) > 31:
            raise TraceError(f"field name too long for a result file: {f.name!r}")
        if f.offset + f.width > m.record_bytes:
            raise TraceError(f"field {f.name} of map {m.name} lies outside its {m.record_bytes}-byte record")
    got = memoryview(m.data).nbytes
    if got != m.size:
        raise TraceError(f"map {m.name}: buffer has {got} bytes, layout needs {m.size}")


def append_frame(fh, *, grid, block, shared_bytes: int, maps: Sequence[MapSection]) -> tuple[int, int]:
    """Append one result frame (the layout of a result file) to an open binary file at a
    multiple of SECTION_ALIGN; returns (offset, size). Offsets inside the frame are
    relative to its start, so a reader maps the frame with `read_result(path, offset)`."""
    header, offsets = encode_header(grid=grid, block=block, shared_bytes=shared_bytes, maps=maps)
    return append_encoded(fh, header, offsets, [m.data for m in maps])


def append_encoded(fh, header: bytes, offsets: Sequence[int], datas: Sequence) -> tuple[int, int]:
    """`append_frame` with the header already encoded (the writer caches it per launch shape)."""
    start = fh.seek(0, os.SEEK_END)
    pad = align(start, SECTION_ALIGN) - start
    if pad:
        fh.write(b"\0" * pad)
        start += pad
    fh.write(header)
    pos = len(header)
    for off, data in zip(offsets, datas):
        if off > pos:
            fh.write(b"\0" * (off - pos))
        view = memoryview(data).cast("B")
        fh.write(view)
        pos = off + view.nbytes
    end = align(pos, SECTION_ALIGN)
    if end > pos:
        fh.write(b"\0" * (end - pos))
    return start, end


def write_result(path, *, grid, block, shared_bytes: int, maps: Sequence[MapSection]) -> Path:
    """Write one result file atomically (temporary file, then rename)."""
    path = Path(path)
    header, offsets = encode_header(grid=grid, block=block, shared_bytes=shared_bytes, maps=maps)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(header)
        for m, off in zip(maps, offsets):
            fh.write(b"\0" * (off - fh.tell()))
            fh.write(memoryview(m.data).cast("B"))
    os.replace(tmp, path)
    return path
