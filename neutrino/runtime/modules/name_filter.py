"""Whether a loaded module can hold a kernel that `-k` selects, decided from its bytes alone.

With `-k PATTERN` (or `=NAME`) only kernels whose name contains the pattern are probed. A kernel's
name is stored verbatim in every image a module is loaded from (PTX's `.entry NAME`, a cubin's
string tables and `.text.NAME` sections): when none of the patterns occurs anywhere in the image,
and no part of it is compressed (where a name could hide), no kernel of it can be selected, and
its PTX need not be found, hashed or looked up (issue 29: a run that probes nothing pays ~no
module work; spec/runtime.md, "Start-up and exit phases").
"""

from __future__ import annotations

SKIPPED_REASON = "not examined: no kernel name in the image can match -k"


def pattern_literals(patterns) -> tuple[bytes, ...]:
    """The bytes each `-k` pattern needs in a kernel's name (`=NAME`: NAME; else the pattern)."""
    return tuple((p[1:] if p.startswith("=") else p).encode("utf-8", "surrogatepass") for p in patterns)


def may_hold_selected(image, literals: tuple[bytes, ...]) -> bool:
    """False only when no kernel of `image` can have a name containing one of `literals`: none of
    them occurs in its bytes and none of its bytes is compressed. Without literals (no -k), True."""
    if not literals or image is None:
        return True
    data = bytes(image) if not isinstance(image, bytes) else image
    if any(literal in data for literal in literals):
        return True
    return _may_hide_names(data)


def fatbin_may_hold_selected(read, size: int, literals: tuple[bytes, ...]) -> bool:
    """`may_hold_selected` for one fatbin container read through `read(offset, count) -> bytes`
    (hooks.py asks with the shim's image pointer before copying the image): only the entries' headers
    and uncompressed payloads are read. A compressed PTX entry may hide a name (True); a compressed
    SASS entry's kernels have no PTX to probe (ptx_source.py takes a fatbin's PTX from its PTX
    entries), so it is not read; an uncompressed entry shows its names. Unreadable: True (examined,
    where the error is reported)."""
    if not literals:
        return True
    from neutrino.runtime.modules.fatbin import EntryKind, entry_layouts

    try:
        for kind, compressed, payload_at, stored in entry_layouts(read, size):
            if compressed:
                if kind != EntryKind.ELF:
                    return True  # a PTX entry's names are inside its compressed bytes
                continue
            payload = read(payload_at, stored)
            if any(literal in payload for literal in literals):
                return True
    except Exception:  # noqa: BLE001 - malformed: examined, where the error is reported
        return True
    return False


def _may_hide_names(data: bytes) -> bool:
    """Whether a probe-able kernel's name could be in `data` without its bytes showing: a compressed
    PTX entry of a fatbin, or an image whose parts we do not walk here (host executables, fatbin
    wrappers, unknown bytes). A fatbin's compressed SASS (ELF) entries hide names too, but of kernels
    with no PTX there, which cannot be probed (ptx_source.py takes a fatbin's PTX from its PTX
    entries only): the SASS-only libraries (cuBLAS, ATen) are not decompressed under -k. The
    entries are walked by their headers (fatbin.entry_layouts): no payload is copied."""
    from neutrino.runtime.modules.ptx_source import ImageKind, classify_image

    try:
        kind = classify_image(data)
        if kind in (ImageKind.PTX, ImageKind.CUBIN):
            return False
        if kind is ImageKind.FATBIN:
            from neutrino.runtime.modules.fatbin import EntryKind, entry_layouts, next_container_offset

            offset: int | None = 0
            while offset is not None:
                layouts = list(entry_layouts(lambda at, count: data[at:at + count], len(data), offset))
                if any(entry_kind != EntryKind.ELF and compressed for entry_kind, compressed, _, _ in layouts):
                    return True
                offset = next_container_offset(data, offset)
            return False
    except Exception:  # noqa: BLE001 - unreadable: examined as before, where errors are reported
        return True
    return True
