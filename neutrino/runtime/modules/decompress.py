"""The two compressions found inside CUDA fatbin entries, decoded by their libraries.

nvcc 13 compresses PTX entries with Zstandard by default (and every entry with
``-Xfatbin -compress-all``); ``--compress-mode=speed`` switches to raw LZ4
blocks (no frame header). ``zstandard`` and ``lz4`` are dependencies of the
package; they are imported on first use, so a process whose fatbins are not
compressed never loads them.

This module knows nothing about fatbins; it raises `CorruptDataError` and the
caller adds which entry of which image was being read.
"""

from __future__ import annotations


class CorruptDataError(ValueError):
    """Compressed bytes that do not decode (truncated, corrupt or unsupported)."""


def decompress_lz4_block(data: bytes, uncompressed_size: int) -> bytes:
    """Decode one raw LZ4 block (no frame header) of known output size."""
    import lz4.block

    try:
        return lz4.block.decompress(data, uncompressed_size=uncompressed_size)
    except Exception as exc:  # noqa: BLE001 - lz4 raises its own LZ4BlockError (and ValueError)
        raise CorruptDataError(f"LZ4 block does not decode: {exc}") from None


def decompress_zstd(data: bytes, uncompressed_size: int) -> bytes:
    """Decode one or more Zstandard frames, at most `uncompressed_size` bytes of output."""
    import zstandard

    # A stream read bounded by the size we expect: a corrupt frame header declaring a huge content
    # size must not make zstandard allocate it (a MemoryError found by fuzzing)
    try:
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
            out = reader.read(uncompressed_size + 1)
    except zstandard.ZstdError as exc:
        raise CorruptDataError(f"zstd data does not decode: {exc}") from None
    if len(out) > uncompressed_size:
        raise CorruptDataError(f"zstd data decodes to more than the {uncompressed_size} bytes declared")
    return out
