"""Density pictures without matplotlib: a colour map and a tiny PNG codec.

The CI machine has numpy but maybe not matplotlib, so every plot of the
analyses is a 2-D array of counts turned into RGB pixels here and written as
an 8-bit RGB PNG with `zlib` (no filtering: filter byte 0 on every row).
`decode_png` reads back exactly what `encode_png` writes (tests use it to check
pictures pixel by pixel).
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

BACKGROUND = (255, 255, 255)  # colour of empty cells

# Control points of a perceptually ordered map (viridis, sampled): low -> high.
_VIRIDIS = np.array([
    (68, 1, 84), (72, 40, 120), (62, 74, 137), (49, 104, 142), (38, 130, 142),
    (31, 158, 137), (53, 183, 121), (109, 205, 89), (180, 222, 44), (253, 231, 37),
], dtype=np.float64)

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def colorize(counts: np.ndarray, *, log: bool = True) -> np.ndarray:
    """RGB uint8 image `(h, w, 3)` of a non-negative 2-D array.

    Zero cells get `BACKGROUND`; non-zero cells are coloured by density (on a
    log scale when `log`) from dark purple (least) to yellow (most).
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2:
        raise ValueError("colorize needs a 2-D array")
    rgb = np.empty(counts.shape + (3,), dtype=np.uint8)
    rgb[...] = BACKGROUND
    nonzero = counts > 0
    if not nonzero.any():
        return rgb
    values = np.log1p(counts) if log else counts
    lo = values[nonzero].min()
    hi = values[nonzero].max()
    scaled = np.zeros_like(values) if hi <= lo else (values - lo) / (hi - lo)
    pos = scaled[nonzero] * (len(_VIRIDIS) - 1)
    i0 = np.clip(np.floor(pos).astype(np.int64), 0, len(_VIRIDIS) - 2)
    frac = (pos - i0)[:, None]
    colours = _VIRIDIS[i0] * (1 - frac) + _VIRIDIS[i0 + 1] * frac
    rgb[nonzero] = np.clip(np.rint(colours), 0, 255).astype(np.uint8)
    return rgb


def upscale(rgb: np.ndarray, min_width: int = 512, min_height: int = 256,
            max_factor: int = 16) -> np.ndarray:
    """Nearest-neighbour enlarge, each axis by its own integer factor (at most
    `max_factor`), so that small pictures are at least about the minimum size."""
    h, w = rgb.shape[:2]
    fy = max(1, min(max_factor, -(-min_height // max(h, 1))))
    fx = max(1, min(max_factor, -(-min_width // max(w, 1))))
    return np.repeat(np.repeat(rgb, fy, axis=0), fx, axis=1)


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def encode_png(rgb: np.ndarray) -> bytes:
    """PNG bytes of an RGB uint8 array of shape `(height, width, 3)`."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ValueError(f"encode_png needs a non-empty (h, w, 3) array, got shape {rgb.shape}")
    h, w = rgb.shape[:2]
    raw = np.zeros((h, 1 + 3 * w), dtype=np.uint8)  # column 0: filter type 0 (None)
    raw[:, 1:] = rgb.reshape(h, 3 * w)
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit, truecolour
    return (_SIGNATURE + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)) + _chunk(b"IEND", b""))


def decode_png(data: bytes) -> np.ndarray:
    """Inverse of `encode_png` (8-bit RGB, filter 0 only); for tests."""
    if not data.startswith(_SIGNATURE):
        raise ValueError("not a PNG file")
    pos, idat, width, height = len(_SIGNATURE), b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"bad CRC in {kind!r} chunk")
        if kind == b"IHDR":
            width, height, depth, colour, _, _, _ = struct.unpack(">IIBBBBB", body)
            if (depth, colour) != (8, 2):
                raise ValueError("only 8-bit RGB is supported")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + 3 * width)
    if raw[:, 0].any():
        raise ValueError("only filter type 0 is supported")
    return raw[:, 1:].reshape(height, width, 3).copy()


def write_density_png(path: str, counts: np.ndarray, *, log: bool = True,
                      flip_rows: bool = True, enlarge: bool = True) -> None:
    """Write a density picture of `counts[x, y]` with x horizontal and y vertical.

    `counts` is indexed `[column, row]` (e.g. `[time bin, address bin]`); row 0
    is drawn at the bottom when `flip_rows`.
    """
    image = colorize(np.asarray(counts).T, log=log)
    if flip_rows:
        image = image[::-1]
    if enlarge:
        image = upscale(image)
    with open(path, "wb") as f:
        f.write(encode_png(image))
