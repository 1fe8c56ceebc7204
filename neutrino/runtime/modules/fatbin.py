"""The CUDA fatbin container, parsed without NVIDIA's tools.

Layout as observed in nvcc 13.0 output (see spec/ptx-sources.md for the whole
picture). All integers are little-endian.

Container header, 16 bytes::

    u32 magic        0xBA55ED50
    u16 version      1
    u16 header_size  16: entries start this far from the container start
    u64 fat_size     bytes of entries that follow the header

Then entries back to back until `fat_size` is used up. Each entry is a header
of `header_size` bytes (64; 80, 96 or 112 with trailing fields we skip) and
its payload::

    0  u16 kind               1 = PTX text, 2 = ELF (cubin)
    2  u16 format version     0x0101
    4  u32 header_size
    8  u64 payload_size       payload bytes after the header, padded to 8
    16 u32 compressed_size    bytes of compressed data (0 if not compressed)
    20 u32 (unknown)          64 when the header has trailing fields
    24 u16 code version minor PTX ISA version for PTX, ELF ABI version for cubins
    26 u16 code version major
    28 u32 arch               SM number: 80, 90, 100, 120...
    32 u32 name offset        (0 in nvcc output)
    36 u32 name length
    40 u64 flags              see FLAG_* below
    48 u64 (reserved)
    56 u64 uncompressed_size  size after decompression (0 if not compressed)

A fatbin *wrapper* (`__fatBinC_Wrapper_t`, what `.nvFatBinSegment` holds and
what the CUDA runtime registers) is 24 bytes: u32 magic 0x466243B1, u32
version, u64 address of the container, u64 address of prelinked fatbins
(version 2) or of a file name (version 1, usually 0).
"""

from __future__ import annotations

import enum
import struct

import attrs

from neutrino.errors import NeutrinoError
from neutrino.runtime.modules.decompress import (
    CorruptDataError,
    decompress_lz4_block,
    decompress_zstd,
)

FATBIN_MAGIC = 0xBA55ED50
FATBIN_WRAPPER_MAGIC = 0x466243B1

_CONTAINER_HEADER = struct.Struct("<IHHQ")
_ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQQQ")
_WRAPPER = struct.Struct("<IIQQ")
FATBIN_WRAPPER_SIZE = _WRAPPER.size

FLAG_64BIT = 0x1
FLAG_DEBUG = 0x2
FLAG_LINUX = 0x10
FLAG_OLD_COMPRESSION = 0x1000  # pre-LZ4 scheme named in old headers; never seen
FLAG_COMPRESSED_LZ4 = 0x2000  # nvcc -compress-mode=speed
FLAG_COMPRESSED_ZSTD = 0x8000  # nvcc 13 default for PTX, and -compress-all
FLAG_ARCH_SPECIFIC = 0x100000  # compute_90a: only for exactly that arch
FLAG_FAMILY_SPECIFIC = 0x200000  # compute_100f: that major family, minor >= arch's

# A payload that claims to grow past this is corrupt, not a real kernel image;
# refusing it keeps a damaged header from making us allocate gigabytes.
MAX_UNCOMPRESSED_SIZE = 1 << 31


class BinaryFormatError(NeutrinoError):
    """An image (fatbin, ELF, PTX bytes) that is malformed or truncated."""


class EntryKind(enum.IntEnum):
    PTX = 1
    ELF = 2


@attrs.frozen
class FatbinEntry:
    """One code image in a container; `payload` is still compressed if it was."""

    kind: int
    arch: int
    flags: int
    code_version: tuple[int, int]
    offset: int  # of the entry header, from the start of the parsed bytes
    payload: bytes = attrs.field(repr=False)
    uncompressed_size: int

    @property
    def is_ptx(self) -> bool:
        return self.kind == EntryKind.PTX

    @property
    def compression(self) -> str | None:
        if self.flags & FLAG_COMPRESSED_ZSTD:
            return "zstd"
        if self.flags & FLAG_COMPRESSED_LZ4:
            return "lz4"
        if self.flags & FLAG_OLD_COMPRESSION:
            return "unknown"
        return None

    @property
    def arch_variant(self) -> str:
        """'a' (arch-specific), 'f' (family-specific) or '' (portable)."""
        if self.flags & FLAG_ARCH_SPECIFIC:
            return "a"
        if self.flags & FLAG_FAMILY_SPECIFIC:
            return "f"
        return ""

    def decoded_payload(self) -> bytes:
        """The payload with any compression undone."""
        compression = self.compression
        if compression is None:
            return self.payload
        where = f"fatbin entry at offset {self.offset} (sm_{self.arch})"
        if compression == "unknown":
            raise BinaryFormatError(
                f"{where} uses an unsupported compression (flags {self.flags:#x})"
            )
        if not 0 < self.uncompressed_size <= MAX_UNCOMPRESSED_SIZE:
            raise BinaryFormatError(
                f"{where}: implausible uncompressed size {self.uncompressed_size}"
            )
        try:
            if compression == "zstd":
                data = decompress_zstd(self.payload, self.uncompressed_size)
            else:
                data = decompress_lz4_block(self.payload, self.uncompressed_size)
        except CorruptDataError as exc:
            raise BinaryFormatError(
                f"{where}: {compression} payload does not decode: {exc}"
            ) from None
        if len(data) != self.uncompressed_size:
            raise BinaryFormatError(
                f"{where}: decompressed to {len(data)} bytes, header says {self.uncompressed_size}"
            )
        return data


@attrs.frozen
class FatbinContainer:
    offset: int  # of the container header within the parsed bytes
    size: int  # header + entries
    entries: tuple[FatbinEntry, ...]

    @property
    def end(self) -> int:
        return self.offset + self.size


@attrs.frozen
class FatbinWrapper:
    version: int
    fatbin_address: int  # where the container is, in the registering process
    extra_address: int  # v2: prelinked fatbins; v1: file name (usually 0)


def is_fatbin(data: bytes, offset: int = 0) -> bool:
    return _u32_at(data, offset) == FATBIN_MAGIC


def is_fatbin_wrapper(data: bytes, offset: int = 0) -> bool:
    return _u32_at(data, offset) == FATBIN_WRAPPER_MAGIC


def _u32_at(data: bytes, offset: int) -> int | None:
    if offset < 0 or offset + 4 > len(data):
        return None
    return int.from_bytes(data[offset : offset + 4], "little")


def fatbin_size(data: bytes, offset: int = 0) -> int:
    """Bytes the container at `offset` occupies, read from its header alone."""
    _magic, _version, header_size, fat_size = _read_container_header(data, offset)
    return header_size + fat_size


def _read_container_header(data: bytes, offset: int) -> tuple[int, int, int, int]:
    if offset + _CONTAINER_HEADER.size > len(data):
        raise BinaryFormatError(
            f"fatbin at offset {offset} is truncated: {len(data) - offset} bytes,"
            f" its header alone takes {_CONTAINER_HEADER.size}"
        )
    magic, version, header_size, fat_size = _CONTAINER_HEADER.unpack_from(data, offset)
    if magic != FATBIN_MAGIC:
        raise BinaryFormatError(f"no fatbin at offset {offset} (magic {magic:#010x})")
    if header_size < _CONTAINER_HEADER.size:
        raise BinaryFormatError(f"fatbin at offset {offset} has header size {header_size} < 16")
    return magic, version, header_size, fat_size


def parse_fatbin(data: bytes, offset: int = 0) -> FatbinContainer:
    """Parse the one container that starts at `offset`."""
    _magic, _version, header_size, fat_size = _read_container_header(data, offset)
    end = offset + header_size + fat_size
    if end > len(data):
        raise BinaryFormatError(
            f"fatbin at offset {offset} is truncated: its header says"
            f" {header_size + fat_size} bytes, only {len(data) - offset} are there"
        )
    entries = []
    position = offset + header_size
    while position < end:
        if not any(data[position : min(position + _ENTRY_HEADER.size, end)]):
            break  # zero padding after the last entry: no entry header is all zeros
        entry, position = _parse_entry(data, position, end)
        entries.append(entry)
    return FatbinContainer(offset, header_size + fat_size, tuple(entries))


def _parse_entry(data: bytes, position: int, end: int) -> tuple[FatbinEntry, int]:
    if position + _ENTRY_HEADER.size > end:
        raise BinaryFormatError(
            f"fatbin entry at offset {position} is cut off by the container end"
        )
    (
        kind, _format, header_size, payload_size, compressed_size, _unknown,
        minor, major, arch, _name_offset, _name_length, flags, _reserved,
        uncompressed_size,
    ) = _ENTRY_HEADER.unpack_from(data, position)  # fmt: skip
    if header_size < _ENTRY_HEADER.size:
        raise BinaryFormatError(
            f"fatbin entry at offset {position} has header size {header_size} < 64"
        )
    payload_start = position + header_size
    payload_end = payload_start + payload_size
    if payload_end > end:
        raise BinaryFormatError(
            f"fatbin entry at offset {position} (sm_{arch}) has a {payload_size}-byte"
            f" payload that runs past the container end"
        )
    stored_size = payload_size
    if flags & (FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD | FLAG_OLD_COMPRESSION):
        # payload_size is padded to 8; compressed_size is the exact length.
        if compressed_size > payload_size:
            raise BinaryFormatError(
                f"fatbin entry at offset {position}: compressed size {compressed_size}"
                f" exceeds its payload of {payload_size} bytes"
            )
        stored_size = compressed_size
    entry = FatbinEntry(
        kind=kind,
        arch=arch,
        flags=flags,
        code_version=(major, minor),
        offset=position,
        payload=bytes(data[payload_start : payload_start + stored_size]),
        uncompressed_size=uncompressed_size,
    )
    return entry, payload_end


def parse_fatbin_sequence(data: bytes, offset: int = 0) -> list[FatbinContainer]:
    """Parse the container at `offset` and every one that directly follows it.

    ELF sections (and some loaders) place containers back to back, each
    starting at an 8-byte boundary. Anything after the last container that is
    not another container is not ours to judge and is ignored.
    """
    containers = [parse_fatbin(data, offset)]
    while (following := _next_container_offset(data, containers[-1].end)) is not None:
        containers.append(parse_fatbin(data, following))
    return containers


def _next_container_offset(data: bytes, end: int) -> int | None:
    if is_fatbin(data, end):
        return end
    position = (end + 7) & ~7
    # Skip zero padding, one 8-byte word at a time.
    while position + 8 <= len(data) and not any(data[position : position + 8]):
        position += 8
    return position if is_fatbin(data, position) else None


def parse_fatbin_wrapper(data: bytes) -> FatbinWrapper:
    if len(data) < _WRAPPER.size:
        raise BinaryFormatError(
            f"fatbin wrapper is truncated: {len(data)} bytes of {_WRAPPER.size}"
        )
    magic, version, fatbin_address, extra_address = _WRAPPER.unpack_from(data, 0)
    if magic != FATBIN_WRAPPER_MAGIC:
        raise BinaryFormatError(f"not a fatbin wrapper (magic {magic:#010x})")
    return FatbinWrapper(version, fatbin_address, extra_address)


def entry_layouts(read, size: int, offset: int = 0):
    """(kind, compressed, payload offset, stored payload bytes) of each entry of the container at `offset`,
    from the headers alone: `read(position, count) -> bytes` reads the image (a pointer into the
    program, or a bytes object), so payloads are neither copied nor decompressed (name_filter.py: a
    module -k can select nothing of is decided without reading it). `size`: the bytes readable from
    offset 0. Raises BinaryFormatError where `parse_fatbin` would."""
    _magic, _version, header_size, fat_size = _read_container_header(read(offset, _CONTAINER_HEADER.size), 0)
    end = offset + header_size + fat_size
    if end > size:
        raise BinaryFormatError(f"fatbin at offset {offset} is truncated: its header says"
                                f" {header_size + fat_size} bytes, only {size - offset} are there")
    position = offset + header_size
    while position < end:
        head = read(position, min(_ENTRY_HEADER.size, end - position))
        if not any(head):
            return  # zero padding after the last entry
        if len(head) < _ENTRY_HEADER.size:
            raise BinaryFormatError(f"fatbin entry at offset {position} is cut off by the container end")
        fields = _ENTRY_HEADER.unpack(head)
        kind, entry_header, payload_size, compressed_size, flags = (fields[0], fields[2], fields[3], fields[4],
                                                                    fields[11])
        if entry_header < _ENTRY_HEADER.size or position + entry_header + payload_size > end:
            raise BinaryFormatError(f"fatbin entry at offset {position} has a bad header or payload size")
        compressed = flags & (FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD | FLAG_OLD_COMPRESSION)
        if compressed and compressed_size > payload_size:
            raise BinaryFormatError(f"fatbin entry at offset {position}: compressed size {compressed_size}"
                                    f" exceeds its payload of {payload_size} bytes")
        yield kind, bool(compressed), position + entry_header, compressed_size if compressed else payload_size
        position += entry_header + payload_size


def next_container_offset(data: bytes, offset: int) -> int | None:
    """Where the container after the one at `offset` starts (parse_fatbin_sequence's rule), or None."""
    return _next_container_offset(data, offset + fatbin_size(data, offset))
