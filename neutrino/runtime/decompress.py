"""Decoders for the two compressions found inside CUDA fatbin entries.

nvcc 13 compresses PTX entries with Zstandard by default (and every entry with
``-Xfatbin -compress-all``); ``-compress-mode=speed`` switches to raw LZ4
blocks. The runtime must read that PTX inside arbitrary user processes, where
we cannot count on the ``zstandard`` or ``lz4`` wheels being installed, so
both formats have a small pure-Python decoder here. When the C-backed modules
are importable we use them instead (they are much faster on large images).

The decoders follow RFC 8878 (Zstandard) and the LZ4 block format
description; they support what compressors emit for a single payload: no
dictionaries, and the content checksum is skipped rather than verified (the
fatbin entry header gives the decompressed size, which we check instead).

This module knows nothing about fatbins; it raises `CorruptDataError` and the
caller adds which entry of which image was being read.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Sequence

import attrs


class CorruptDataError(ValueError):
    """Compressed bytes that do not decode (truncated, corrupt or unsupported)."""


# --------------------------------------------------------------------------
# Entry points: prefer the C-backed libraries, fall back to pure Python.


def _optional_module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def decompress_lz4_block(data: bytes, uncompressed_size: int) -> bytes:
    """Decode one raw LZ4 block (no frame header) of known output size."""
    lz4_block = _optional_module("lz4.block")
    if lz4_block is not None:
        try:
            return lz4_block.decompress(data, uncompressed_size=uncompressed_size)
        except Exception as exc:  # lz4 raises its own LZ4BlockError
            raise CorruptDataError(f"LZ4 block does not decode: {exc}") from None
    return lz4_block_decompress(data, uncompressed_size)


def decompress_zstd(data: bytes, uncompressed_size: int | None = None) -> bytes:
    """Decode one or more Zstandard frames; `uncompressed_size` bounds the output."""
    zstandard = _optional_module("zstandard")
    if zstandard is not None and uncompressed_size is not None:
        try:
            return zstandard.ZstdDecompressor().decompress(
                data, max_output_size=uncompressed_size
            )
        except zstandard.ZstdError as exc:
            raise CorruptDataError(f"zstd data does not decode: {exc}") from None
    return zstd_decompress(data, uncompressed_size)


# --------------------------------------------------------------------------
# LZ4 block format.

_LZ4_MIN_MATCH = 4


def lz4_block_decompress(src: bytes, uncompressed_size: int) -> bytes:
    """Pure-Python LZ4 block decoder.

    A block is a run of sequences: a token byte (high nibble literal length,
    low nibble match length - 4; 15 means "more length bytes follow"), the
    literals, then a 2-byte little-endian back-reference offset. The last
    sequence has literals only.
    """
    out = bytearray()
    pos, end = 0, len(src)
    while pos < end:
        token = src[pos]
        pos += 1
        literal_length, pos = _lz4_extended_length(src, pos, token >> 4)
        if pos + literal_length > end:
            raise CorruptDataError("LZ4 literals run past the end of the block")
        out += src[pos : pos + literal_length]
        pos += literal_length
        if pos == end:
            break  # the last sequence carries literals only
        if pos + 2 > end:
            raise CorruptDataError("LZ4 block ends inside a match offset")
        offset = src[pos] | (src[pos + 1] << 8)
        pos += 2
        if offset == 0 or offset > len(out):
            raise CorruptDataError(f"LZ4 match offset {offset} points before the output")
        match_length, pos = _lz4_extended_length(src, pos, token & 0x0F)
        _copy_match(out, offset, match_length + _LZ4_MIN_MATCH)
        if len(out) > uncompressed_size:
            raise CorruptDataError("LZ4 block decodes to more than its declared size")
    if len(out) != uncompressed_size:
        raise CorruptDataError(
            f"LZ4 block decodes to {len(out)} bytes, header says {uncompressed_size}"
        )
    return bytes(out)


def _lz4_extended_length(src: bytes, pos: int, nibble: int) -> tuple[int, int]:
    length = nibble
    if nibble != 15:
        return length, pos
    while True:
        if pos >= len(src):
            raise CorruptDataError("LZ4 block ends inside a length")
        byte = src[pos]
        pos += 1
        length += byte
        if byte != 255:
            return length, pos


def _copy_match(out: bytearray, offset: int, length: int) -> None:
    """Append `length` bytes copied from `offset` back; the ranges may overlap."""
    start = len(out) - offset
    if length <= offset:
        out += out[start : start + length]
        return
    # An overlapping copy repeats the last `offset` bytes as a pattern.
    pattern = bytes(out[start:])
    repeats, rest = divmod(length, offset)
    out += pattern * repeats + pattern[:rest]


# --------------------------------------------------------------------------
# Zstandard (RFC 8878).

_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A50  # low nibble is free
_MAX_HUFFMAN_BITS = 11
_MAX_BLOCK_SIZE = 128 * 1024  # no block may decode to more (RFC 8878 3.1.1.2.4)


@attrs.frozen
class _FseTable:
    """Decoding table of one FSE distribution: per state, its symbol and the
    bits to read (`nbits`) to form the next state (`base` + those bits)."""

    accuracy_log: int
    symbols: Sequence[int]
    nbits: Sequence[int]
    base: Sequence[int]


@attrs.frozen
class _HuffmanTable:
    """Direct lookup table indexed by the next `max_bits` bits of the stream."""

    max_bits: int
    symbols: bytes
    nbits: bytes


@attrs.define
class _FrameState:
    """What one block hands on to the next within a frame (RFC 8878 3.1.1.1)."""

    huffman: _HuffmanTable | None = None
    literal_lengths: _FseTable | None = None
    offsets: _FseTable | None = None
    match_lengths: _FseTable | None = None
    repeat_offsets: list[int] = attrs.Factory(lambda: [1, 4, 8])


def zstd_decompress(src: bytes, max_output_size: int | None = None) -> bytes:
    """Pure-Python Zstandard decoder: every frame in `src`, concatenated."""
    out = bytearray()
    pos = 0
    while pos < len(src):
        if not any(src[pos:]):
            break  # zero padding after the last frame
        magic = _read_le(src, pos, 4, "frame magic")
        if magic & 0xFFFFFFF0 == _SKIPPABLE_MAGIC:
            pos += 8 + _read_le(src, pos + 4, 4, "skippable frame size")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptDataError(f"not a zstd frame (magic {magic:#010x})")
        pos = _decode_frame(src, pos + 4, out, max_output_size)
    if pos > len(src):
        raise CorruptDataError("zstd skippable frame runs past the end of the data")
    return bytes(out)


def _read_le(data: bytes, pos: int, size: int, what: str) -> int:
    if pos + size > len(data):
        raise CorruptDataError(f"zstd data ends inside the {what}")
    return int.from_bytes(data[pos : pos + size], "little")


def _decode_frame(src: bytes, pos: int, out: bytearray, limit: int | None) -> int:
    descriptor = _read_le(src, pos, 1, "frame header")
    pos += 1
    content_size_flag = descriptor >> 6
    single_segment = bool(descriptor & 0x20)
    has_checksum = bool(descriptor & 0x04)
    dictionary_id_size = (0, 1, 2, 4)[descriptor & 0x03]
    if descriptor & 0x08:
        raise CorruptDataError("zstd frame header has its reserved bit set")
    if not single_segment:
        pos += 1  # window descriptor: we keep the whole frame, so no use for it
    if dictionary_id_size and _read_le(src, pos, dictionary_id_size, "dictionary id"):
        raise CorruptDataError("zstd frames that need a dictionary are not supported")
    pos += dictionary_id_size
    content_size_bytes = (1 if single_segment else 0, 2, 4, 8)[content_size_flag]
    content_size = None
    if content_size_bytes:
        content_size = _read_le(src, pos, content_size_bytes, "content size")
        content_size += 256 if content_size_bytes == 2 else 0
        pos += content_size_bytes

    frame_start = len(out)
    state = _FrameState()
    last_block = False
    while not last_block:
        header = _read_le(src, pos, 3, "block header")
        pos += 3
        last_block = bool(header & 1)
        block_type = (header >> 1) & 3
        block_size = header >> 3
        if block_size > _MAX_BLOCK_SIZE:
            raise CorruptDataError(f"zstd block of {block_size} bytes exceeds the 128 KiB maximum")
        if block_type == 0:  # raw
            out += _slice(src, pos, block_size, "raw block")
            pos += block_size
        elif block_type == 1:  # RLE: one byte, repeated block_size times
            out += _slice(src, pos, 1, "RLE block") * block_size
            pos += 1
        elif block_type == 2:
            block = _slice(src, pos, block_size, "compressed block")
            _decode_compressed_block(block, out, state, frame_start)
            pos += block_size
        else:
            raise CorruptDataError("zstd block has the reserved block type")
        if limit is not None and len(out) > limit:
            raise CorruptDataError(f"zstd data decodes to more than {limit} bytes")
    if has_checksum:
        _slice(src, pos, 4, "content checksum")
        pos += 4
    if content_size is not None and len(out) - frame_start != content_size:
        raise CorruptDataError(
            f"zstd frame decodes to {len(out) - frame_start} bytes,"
            f" its header says {content_size}"
        )
    return pos


def _slice(data: bytes, pos: int, size: int, what: str) -> bytes:
    if pos + size > len(data):
        raise CorruptDataError(f"zstd data ends inside a {what}")
    return data[pos : pos + size]


def _decode_compressed_block(
    block: bytes, out: bytearray, state: _FrameState, frame_start: int
) -> None:
    literals, pos = _decode_literals_section(block, state)
    sequences = _decode_sequences_section(block, pos, state)
    _execute_sequences(literals, sequences, out, state, frame_start)


# ---- literals section (RFC 8878 3.1.1.3.1)


def _decode_literals_section(block: bytes, state: _FrameState) -> tuple[bytes, int]:
    first = _read_le(block, 0, 1, "literals header")
    literals_type = first & 3
    size_format = (first >> 2) & 3
    if literals_type in (0, 1):  # raw or RLE
        if size_format in (0, 2):
            header_size, size = 1, first >> 3
        elif size_format == 1:
            header_size, size = 2, _read_le(block, 0, 2, "literals header") >> 4
        else:
            header_size, size = 3, _read_le(block, 0, 3, "literals header") >> 4
        if literals_type == 0:
            return _slice(block, header_size, size, "raw literals"), header_size + size
        return _slice(block, header_size, 1, "RLE literals") * size, header_size + 1

    # Huffman-compressed (2) or "treeless", reusing the previous table (3).
    header_size = (3, 3, 4, 5)[size_format]
    header = _read_le(block, 0, header_size, "literals header")
    field_bits = (10, 10, 14, 18)[size_format]
    mask = (1 << field_bits) - 1
    regenerated_size = (header >> 4) & mask
    compressed_size = (header >> (4 + field_bits)) & mask
    stream_count = 1 if size_format == 0 else 4
    data = _slice(block, header_size, compressed_size, "compressed literals")
    if literals_type == 2:
        state.huffman, used = _read_huffman_table(data)
        data = data[used:]
    elif state.huffman is None:
        raise CorruptDataError("zstd treeless literals before any Huffman table")
    literals = _decode_huffman_streams(data, state.huffman, regenerated_size, stream_count)
    return literals, header_size + compressed_size


def _read_huffman_table(data: bytes) -> tuple[_HuffmanTable, int]:
    header = _read_le(data, 0, 1, "Huffman tree description")
    if header < 128:
        weights = _decode_fse_huffman_weights(_slice(data, 1, header, "Huffman weights"))
        used = 1 + header
    else:  # weights stored directly, 4 bits each
        count = header - 127
        packed = _slice(data, 1, (count + 1) // 2, "Huffman weights")
        weights = [(packed[i // 2] >> (0 if i % 2 else 4)) & 15 for i in range(count)]
        used = 1 + len(packed)
    return _build_huffman_table(weights), used


def _build_huffman_table(weights: list[int]) -> _HuffmanTable:
    if any(w > _MAX_HUFFMAN_BITS for w in weights):
        raise CorruptDataError("zstd Huffman weight too large")
    total = sum(1 << (w - 1) for w in weights if w)
    if total == 0:
        raise CorruptDataError("zstd Huffman table has no symbols")
    # The last symbol's weight is implied: it completes a power of two.
    max_bits = total.bit_length()
    rest = (1 << max_bits) - total
    if rest & (rest - 1) or max_bits > _MAX_HUFFMAN_BITS:
        raise CorruptDataError("zstd Huffman weights do not form a prefix code")
    weights = [*weights, rest.bit_length()]
    if len(weights) > 256:
        raise CorruptDataError("zstd Huffman table has more than 256 symbols")

    # Canonical layout: lowest weights (longest codes) first, then by symbol.
    symbols = bytearray(1 << max_bits)
    nbits = bytearray(1 << max_bits)
    position = 0
    for weight in range(1, max_bits + 1):
        span = 1 << (weight - 1)
        for symbol, symbol_weight in enumerate(weights):
            if symbol_weight != weight:
                continue
            symbols[position : position + span] = bytes([symbol]) * span
            nbits[position : position + span] = bytes([max_bits + 1 - weight]) * span
            position += span
    return _HuffmanTable(max_bits, bytes(symbols), bytes(nbits))


def _decode_fse_huffman_weights(data: bytes) -> list[int]:
    accuracy_log, probabilities, used = _read_fse_distribution(data, max_symbol=255)
    if accuracy_log > 6:
        raise CorruptDataError("zstd Huffman weight table accuracy above 6")
    table = _build_fse_table(probabilities, accuracy_log)
    bits = _BackwardBits(data[used:])
    # Two interleaved states share one table; decoding stops when the
    # bitstream is over-read, after emitting the other state's symbol.
    states = [bits.read(accuracy_log), bits.read(accuracy_log)]
    weights: list[int] = []
    turn = 0
    while len(weights) < 255:
        state = states[turn]
        weights.append(table.symbols[state])
        states[turn] = table.base[state] + bits.read(table.nbits[state])
        turn ^= 1
        if bits.overflowed:
            weights.append(table.symbols[states[turn]])
            return weights
    raise CorruptDataError("zstd Huffman weights do not terminate")


def _decode_huffman_streams(
    data: bytes, table: _HuffmanTable, size: int, stream_count: int
) -> bytes:
    if stream_count == 1:
        return _decode_huffman_stream(data, table, size)
    if len(data) < 6:
        raise CorruptDataError("zstd literals end inside the jump table")
    sizes = [int.from_bytes(data[i : i + 2], "little") for i in (0, 2, 4)]
    sizes.append(len(data) - 6 - sum(sizes))
    if sizes[3] < 0:
        raise CorruptDataError("zstd literal streams overrun their section")
    per_stream = (size + 3) // 4
    counts = [per_stream] * 3 + [size - 3 * per_stream]
    if counts[3] < 0:
        raise CorruptDataError("zstd literal size too small for four streams")
    pieces, pos = [], 6
    for stream_size, count in zip(sizes, counts):
        pieces.append(_decode_huffman_stream(data[pos : pos + stream_size], table, count))
        pos += stream_size
    return b"".join(pieces)


_HUFFMAN_PADDING_BITS = 16  # zero bits prepended so lookups may run past the start


def _decode_huffman_stream(stream: bytes, table: _HuffmanTable, count: int) -> bytes:
    if not stream or stream[-1] == 0:
        raise CorruptDataError("zstd Huffman stream lacks its end marker")
    # The stream is read backwards from just below the highest set bit. This
    # is the hot loop of the decoder, so it is written out by hand.
    buffer = bytes(_HUFFMAN_PADDING_BITS // 8) + stream
    position = _HUFFMAN_PADDING_BITS + (len(stream) - 1) * 8 + stream[-1].bit_length() - 1
    max_bits, symbols, nbits = table.max_bits, table.symbols, table.nbits
    mask = (1 << max_bits) - 1
    from_bytes = int.from_bytes
    out = bytearray(count)
    for index in range(count):
        low = position - max_bits
        if low < 0:
            raise CorruptDataError("zstd Huffman stream is shorter than its literals")
        byte = low >> 3
        code = (from_bytes(buffer[byte : byte + 3], "little") >> (low & 7)) & mask
        out[index] = symbols[code]
        position -= nbits[code]
    if position != _HUFFMAN_PADDING_BITS:
        raise CorruptDataError("zstd Huffman stream length does not match its literals")
    return bytes(out)


# ---- FSE distributions (RFC 8878 4.1)


def _read_fse_distribution(data: bytes, max_symbol: int) -> tuple[int, list[int], int]:
    """Read a compact FSE table description; returns (accuracy log,
    normalized probabilities with -1 for "less than one", bytes used)."""
    bits = _ForwardBits(data)
    accuracy_log = bits.read(4) + 5
    remaining = (1 << accuracy_log) + 1
    threshold = 1 << accuracy_log
    width = accuracy_log + 1
    probabilities: list[int] = []
    previous_was_zero = False
    while remaining > 1:
        if previous_was_zero:
            # A zero probability is followed by 2-bit repeat counts of more zeros.
            repeat = bits.read(2)
            zeros = repeat
            while repeat == 3:
                repeat = bits.read(2)
                zeros += repeat
            probabilities += [0] * zeros
        if len(probabilities) > max_symbol:
            raise CorruptDataError("zstd FSE table has too many symbols")
        small_values = (2 * threshold - 1) - remaining
        value = bits.peek(width)
        if value & (threshold - 1) < small_values:
            value &= threshold - 1
            bits.skip(width - 1)
        else:
            value &= 2 * threshold - 1
            if value >= threshold:
                value -= small_values
            bits.skip(width)
        probability = value - 1
        remaining -= abs(probability)
        probabilities.append(probability)
        previous_was_zero = probability == 0
        while remaining < threshold:
            width -= 1
            threshold >>= 1
    if remaining != 1:
        raise CorruptDataError("zstd FSE probabilities do not add up")
    used = (bits.position + 7) // 8
    if used > len(data):
        raise CorruptDataError("zstd FSE table description runs past its data")
    return accuracy_log, probabilities, used


def _build_fse_table(probabilities: Sequence[int], accuracy_log: int) -> _FseTable:
    size = 1 << accuracy_log
    symbols = [0] * size
    next_state = [0] * len(probabilities)
    high = size - 1
    # "Less than one" symbols take the last cells, one each.
    for symbol, probability in enumerate(probabilities):
        if probability == -1:
            symbols[high] = symbol
            high -= 1
            next_state[symbol] = 1
        else:
            next_state[symbol] = probability
    step = (size >> 1) + (size >> 3) + 3
    position = 0
    for symbol, probability in enumerate(probabilities):
        for _ in range(max(probability, 0)):
            symbols[position] = symbol
            position = (position + step) & (size - 1)
            while position > high:
                position = (position + step) & (size - 1)
    if position != 0:
        raise CorruptDataError("zstd FSE distribution does not fill its table")
    nbits = [0] * size
    base = [0] * size
    for state in range(size):
        symbol = symbols[state]
        x = next_state[symbol]
        next_state[symbol] += 1
        nbits[state] = accuracy_log - (x.bit_length() - 1)
        base[state] = (x << nbits[state]) - size
    return _FseTable(accuracy_log, symbols, nbits, base)


def _rle_fse_table(symbol: int) -> _FseTable:
    return _FseTable(0, [symbol], [0], [0])


# ---- sequences section (RFC 8878 3.1.1.3.2)

# Baselines and extra bits of literal-length codes 16..35 and match-length
# codes 32..52; lower codes stand for themselves (match lengths add 3).
_LL_EXTRA = [(16, 1), (18, 1), (20, 1), (22, 1), (24, 2), (28, 2), (32, 3), (40, 3),
             (48, 4), (64, 6), (128, 7), (256, 8), (512, 9), (1024, 10), (2048, 11),
             (4096, 12), (8192, 13), (16384, 14), (32768, 15), (65536, 16)]  # fmt: skip
_ML_EXTRA = [(35, 1), (37, 1), (39, 1), (41, 1), (43, 2), (47, 2), (51, 3), (59, 3),
             (67, 4), (83, 4), (99, 5), (131, 7), (259, 8), (515, 9), (1027, 10),
             (2051, 11), (4099, 12), (8195, 13), (16387, 14), (32771, 15),
             (65539, 16)]  # fmt: skip
LL_BASELINE = [*range(16), *(b for b, _ in _LL_EXTRA)]
LL_BITS = [0] * 16 + [n for _, n in _LL_EXTRA]
ML_BASELINE = [*range(3, 35), *(b for b, _ in _ML_EXTRA)]
ML_BITS = [0] * 32 + [n for _, n in _ML_EXTRA]

_PREDEFINED_LL = (6, [4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                      2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1])  # fmt: skip
_PREDEFINED_ML = (6, [1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                      1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1,
                      -1, -1, -1, -1, -1])  # fmt: skip
_PREDEFINED_OF = (5, [1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                      -1, -1, -1, -1, -1])  # fmt: skip

# (attribute of _FrameState, predefined distribution, largest symbol, largest accuracy log)
_SEQUENCE_TABLE_KINDS = {
    "literal_lengths": (_PREDEFINED_LL, 35, 9),
    "offsets": (_PREDEFINED_OF, 31, 8),
    "match_lengths": (_PREDEFINED_ML, 52, 9),
}


def _decode_sequences_section(
    block: bytes, pos: int, state: _FrameState
) -> list[tuple[int, int, int]]:
    """Returns (literal length, match length, offset value) per sequence."""
    first = _read_le(block, pos, 1, "sequences header")
    if first == 0:
        return []
    if first < 128:
        count, pos = first, pos + 1
    elif first < 255:
        count, pos = ((first - 128) << 8) + _read_le(block, pos + 1, 1, "count"), pos + 2
    else:
        count, pos = _read_le(block, pos + 1, 2, "sequence count") + 0x7F00, pos + 3
    modes = _read_le(block, pos, 1, "compression modes")
    pos += 1
    if modes & 3:
        raise CorruptDataError("zstd sequences header has reserved bits set")
    tables = {}
    for kind, shift in (("literal_lengths", 6), ("offsets", 4), ("match_lengths", 2)):
        tables[kind], pos = _sequence_table(block, pos, (modes >> shift) & 3, kind, state)
    ll_table, of_table, ml_table = (
        tables["literal_lengths"], tables["offsets"], tables["match_lengths"]
    )  # fmt: skip

    bits = _BackwardBits(block[pos:])
    ll_state = bits.read(ll_table.accuracy_log)
    of_state = bits.read(of_table.accuracy_log)
    ml_state = bits.read(ml_table.accuracy_log)
    sequences = []
    for index in range(count):
        of_code = of_table.symbols[of_state]
        ll_code = ll_table.symbols[ll_state]
        ml_code = ml_table.symbols[ml_state]
        if of_code > 31:
            raise CorruptDataError("zstd offset code out of range")
        offset_value = (1 << of_code) + bits.read(of_code)
        match_length = ML_BASELINE[ml_code] + bits.read(ML_BITS[ml_code])
        literal_length = LL_BASELINE[ll_code] + bits.read(LL_BITS[ll_code])
        sequences.append((literal_length, match_length, offset_value))
        if index == count - 1:
            break
        ll_state = ll_table.base[ll_state] + bits.read(ll_table.nbits[ll_state])
        ml_state = ml_table.base[ml_state] + bits.read(ml_table.nbits[ml_state])
        of_state = of_table.base[of_state] + bits.read(of_table.nbits[of_state])
    if bits.remaining != 0:
        raise CorruptDataError("zstd sequence bitstream not consumed exactly")
    return sequences


def _sequence_table(
    block: bytes, pos: int, mode: int, kind: str, state: _FrameState
) -> tuple[_FseTable, int]:
    predefined, max_symbol, max_accuracy = _SEQUENCE_TABLE_KINDS[kind]
    if mode == 0:
        table = _build_fse_table(predefined[1], predefined[0])
    elif mode == 1:
        table = _rle_fse_table(_read_le(block, pos, 1, "RLE symbol"))
        pos += 1
    elif mode == 2:
        accuracy_log, probabilities, used = _read_fse_distribution(block[pos:], max_symbol)
        if accuracy_log > max_accuracy:
            raise CorruptDataError(f"zstd {kind} table accuracy too large")
        table = _build_fse_table(probabilities, accuracy_log)
        pos += used
    else:
        table = getattr(state, kind)
        if table is None:
            raise CorruptDataError(f"zstd repeats a {kind} table it never saw")
    if max(table.symbols) > max_symbol:
        raise CorruptDataError(f"zstd {kind} symbol out of range")
    setattr(state, kind, table)
    return table, pos


def _execute_sequences(
    literals: bytes,
    sequences: list[tuple[int, int, int]],
    out: bytearray,
    state: _FrameState,
    frame_start: int,
) -> None:
    repeats = state.repeat_offsets
    literal_pos = 0
    block_end_limit = len(out) + _MAX_BLOCK_SIZE
    for literal_length, match_length, offset_value in sequences:
        if len(out) + literal_length + match_length > block_end_limit:
            raise CorruptDataError("zstd block decodes to more than 128 KiB")
        if literal_pos + literal_length > len(literals):
            raise CorruptDataError("zstd sequence uses more literals than decoded")
        out += literals[literal_pos : literal_pos + literal_length]
        literal_pos += literal_length
        offset = _resolve_offset(offset_value, literal_length, repeats)
        if offset <= 0 or offset > len(out) - frame_start:
            raise CorruptDataError(f"zstd match offset {offset} points before the frame")
        _copy_match(out, offset, match_length)
    out += literals[literal_pos:]


def _resolve_offset(offset_value: int, literal_length: int, repeats: list[int]) -> int:
    """Turn an offset value into a distance, updating the repeat history in place.

    Values 1-3 name one of the three most recent offsets (shifted by one when
    the sequence has no literals, where value 3 means "most recent minus one").
    """
    if offset_value > 3:
        offset = offset_value - 3
        repeats[:] = [offset, repeats[0], repeats[1]]
        return offset
    index = offset_value - (1 if literal_length else 0)
    if index == 0:
        return repeats[0]
    offset = repeats[0] - 1 if index == 3 else repeats[index]
    if index == 1:
        repeats[:] = [offset, repeats[0], repeats[2]]
    else:
        repeats[:] = [offset, repeats[0], repeats[1]]
    return offset


# ---- bit readers


class _ForwardBits:
    """Little-endian bit reader, lowest bit first (FSE table descriptions)."""

    def __init__(self, data: bytes):
        self._data = data
        self.position = 0

    def peek(self, count: int) -> int:
        start = self.position >> 3
        chunk = int.from_bytes(self._data[start : start + (count + 14) // 8], "little")
        return (chunk >> (self.position & 7)) & ((1 << count) - 1)

    def skip(self, count: int) -> None:
        self.position += count
        if self.position > len(self._data) * 8:
            raise CorruptDataError("zstd FSE table description is truncated")

    def read(self, count: int) -> int:
        value = self.peek(count)
        self.skip(count)
        return value


class _BackwardBits:
    """Reader for zstd's backward bitstreams: starts under the highest set
    bit of the last byte and moves towards the first byte. Reading past the
    start yields zero bits and sets `overflowed` (as the reference does)."""

    def __init__(self, data: bytes):
        if not data or data[-1] == 0:
            raise CorruptDataError("zstd bitstream lacks its end marker")
        self._data = data
        self.remaining = (len(data) - 1) * 8 + data[-1].bit_length() - 1

    @property
    def overflowed(self) -> bool:
        return self.remaining < 0

    def read(self, count: int) -> int:
        if count == 0:
            return 0
        self.remaining -= count
        low = self.remaining
        high = low + count
        if high <= 0:
            return 0
        start = max(low, 0)
        chunk = int.from_bytes(self._data[start >> 3 : (high + 7) >> 3], "little")
        value = (chunk >> (start & 7)) & ((1 << (high - start)) - 1)
        return value << (start - low)
