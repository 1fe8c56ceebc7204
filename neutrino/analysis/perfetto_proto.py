"""`neutrino export TRACE --perfetto OUT`: one timeline in Perfetto's protobuf trace format.

The file is a `perfetto.protos.perfetto.trace.Trace`: a sequence of
`TracePacket`s, each written as soon as it is made (the field `packet`, number
1, repeated: concatenated packets are one Trace), so memory stays bounded by
the largest launch's records whatever the trace's size. The few messages used
(TracePacket, TrackDescriptor, ProcessDescriptor, ThreadDescriptor,
TrackEvent, DebugAnnotation) are encoded here with their public field numbers
(tests decode the output with the `perfetto` package's generated classes), so
exporting needs no protobuf runtime.

Layout (spec/analysis.md, "Perfetto export"): per run (a rank of a job, or the
one run) a process; in it a thread track per host thread with its ranges
(ranges.bin), one track per GPU stream with every kernel, copy and memset
(timeline.bin), and under a stream's track the SM-slot tracks of the probed
launches' blocks, with a track per warp rank under each slot.
"""

from __future__ import annotations

import struct
import sys

import numpy as np

# Field numbers (perfetto/trace/trace_packet.proto and track_event/*.proto).
TRACE_PACKET = 1
PKT_TIMESTAMP, PKT_SEQ_ID, PKT_TRACK_EVENT, PKT_SEQ_FLAGS, PKT_TRACK_DESCRIPTOR = 8, 10, 11, 13, 60
TE_DEBUG_ANNOTATIONS, TE_TYPE, TE_TRACK_UUID, TE_CATEGORIES, TE_NAME = 4, 9, 11, 22, 23
TE_SLICE_BEGIN, TE_SLICE_END = 1, 2
DA_BOOL, DA_UINT, DA_INT, DA_DOUBLE, DA_STRING, DA_NAME = 2, 3, 4, 5, 6, 10
TD_UUID, TD_NAME, TD_PROCESS, TD_THREAD, TD_PARENT, TD_CHILD_ORDERING, TD_SIBLING_RANK, TD_DESCRIPTION = \
    1, 2, 3, 4, 5, 11, 12, 14
PD_PID, PD_NAME = 1, 6
THD_PID, THD_TID, THD_NAME = 1, 2, 5
ORDER_EXPLICIT = 3
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQUENCE_ID = 1


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 values are ten-byte two's complement varints
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(int(value))


def _bytes(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _str(field: int, text: str) -> bytes:
    return _bytes(field, text.encode("utf-8", errors="replace"))


def _double(field: int, value: float) -> bytes:
    return _varint(field << 3 | 1) + struct.pack("<d", value)


def _annotation(name: str, value) -> bytes:
    body = _str(DA_NAME, name)
    if isinstance(value, bool):
        return body + _int(DA_BOOL, value)
    if isinstance(value, (int, np.integer)):
        return body + _int(DA_INT, int(value))
    if isinstance(value, (float, np.floating)):
        return body + _double(DA_DOUBLE, float(value))
    return body + _str(DA_STRING, str(value))


class ProtoWriter:
    """Writes packets one at a time to a binary file: tracks (returning their uuid) and slices."""

    def __init__(self, out):
        self.out = out
        self._next_uuid = 1
        self._first = True
        self.slices = 0

    def _packet(self, body: bytes, timestamp: int | None = None) -> None:
        head = _int(PKT_SEQ_ID, SEQUENCE_ID)
        if self._first:
            head += _int(PKT_SEQ_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED)
            self._first = False
        if timestamp is not None:
            head += _int(PKT_TIMESTAMP, max(0, int(timestamp)))
        self.out.write(_bytes(TRACE_PACKET, head + body))

    def track(self, name: str, *, parent: int | None = None, pid: int | None = None, tid: int | None = None,
              process_name: str | None = None, description: str | None = None, rank: int | None = None) -> int:
        """A TrackDescriptor: a process track (pid, process_name), a thread track (pid, tid) or a
        named track under `parent`; `rank` orders siblings (explicit ordering). Returns its uuid."""
        uuid = self._next_uuid
        self._next_uuid += 1
        body = _int(TD_UUID, uuid)
        if parent is not None:
            body += _int(TD_PARENT, parent)
        if process_name is not None:
            body += _bytes(TD_PROCESS, _int(PD_PID, pid) + _str(PD_NAME, process_name))
        elif tid is not None:
            body += _bytes(TD_THREAD, _int(THD_PID, pid) + _int(THD_TID, tid) + _str(THD_NAME, name))
        if process_name is None:
            body += _str(TD_NAME, name)
        if description:
            body += _str(TD_DESCRIPTION, description)
        body += _int(TD_CHILD_ORDERING, ORDER_EXPLICIT)
        if rank is not None:
            body += _int(TD_SIBLING_RANK, rank)
        self._packet(_bytes(PKT_TRACK_DESCRIPTOR, body))
        return uuid

    def slice(self, track: int, name: str, start_ns: int, end_ns: int, args: dict | None = None,
              category: str | None = None) -> None:
        """A slice [start, end] on `track`: a SLICE_BEGIN and a SLICE_END packet."""
        begin = _int(TE_TYPE, TE_SLICE_BEGIN) + _int(TE_TRACK_UUID, track) + _str(TE_NAME, name)
        if category:
            begin += _str(TE_CATEGORIES, category)
        for key, value in (args or {}).items():
            begin += _bytes(TE_DEBUG_ANNOTATIONS, _annotation(key, value))
        self._packet(_bytes(PKT_TRACK_EVENT, begin), start_ns)
        end = _int(TE_TYPE, TE_SLICE_END) + _int(TE_TRACK_UUID, track)
        self._packet(_bytes(PKT_TRACK_EVENT, end), max(int(start_ns), int(end_ns)))
        self.slices += 1

    def many(self, track, name_prefix: str, name_number, start_ns, end_ns, int_args: dict, category: str) -> None:
        """Slices of arrays (write_slices): `name_prefix` + decimal number, integer annotations."""
        write_slices(self, track, name_prefix, name_number, start_ns, end_ns, int_args, category)


class _Bytes:
    """Per-row byte strings of a batch of packets, built column block by column block: `parts` of
    (data[n, w], mask[n, w]); row r is the concatenation of data[r][mask[r]] over the parts.
    Vectorised (no Python per packet); joined once, when flattened."""

    def __init__(self, parts: list):
        self.parts = parts

    @classmethod
    def const(cls, n: int, raw: bytes) -> "_Bytes":
        row = np.frombuffer(raw, dtype=np.uint8)
        return cls([(np.broadcast_to(row, (n, len(row))), None)])

    @classmethod
    def varint(cls, values) -> "_Bytes":
        v = np.asarray(values).astype(np.int64).view(np.uint64)  # negative int64: two's complement, 10 bytes
        length = np.ones(len(v), dtype=np.int64)
        for k in range(1, 10):
            length += (v >> np.uint64(7 * k)) > 0
        width = int(length.max()) if len(v) else 1
        cols = np.arange(width)[None, :]
        groups = ((v[:, None] >> (np.uint64(7) * cols.astype(np.uint64))) & np.uint64(0x7F)).astype(np.uint8)
        groups |= (cols < (length - 1)[:, None]).astype(np.uint8) << 7
        return cls([(groups, cols < length[:, None])])

    @classmethod
    def decimal(cls, values) -> "_Bytes":
        """The ASCII decimal digits of non-negative integers."""
        v = np.asarray(values).astype(np.uint64)
        length = np.ones(len(v), dtype=np.int64)
        for k in range(1, 20):
            length += v >= np.uint64(10 ** k)
        width = int(length.max()) if len(v) else 1
        powers = np.array([10 ** k for k in range(width - 1, -1, -1)], dtype=np.uint64)
        digits = ((v[:, None] // powers[None, :]) % np.uint64(10)).astype(np.uint8) + ord("0")
        return cls([(digits, np.arange(width)[None, :] >= (width - length)[:, None])])

    def __add__(self, other: "_Bytes") -> "_Bytes":
        return _Bytes(self.parts + other.parts)

    def lengths(self) -> np.ndarray:
        return sum(d.shape[1] if m is None else m.sum(axis=1) for d, m in self.parts)

    def field(self, number: int) -> "_Bytes":
        """This, as a length-delimited field `number`."""
        n = self.parts[0][0].shape[0]
        return _Bytes.const(n, _varint(number << 3 | 2)) + _Bytes.varint(self.lengths()) + self

    def matrix(self, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(data, mask) joined, padded with invalid bytes to `width`."""
        data = np.hstack([d for d, _ in self.parts])
        mask = np.hstack([np.ones(d.shape, dtype=bool) if m is None else m for d, m in self.parts])
        extra = (width or data.shape[1]) - data.shape[1]
        if extra:
            data = np.pad(data, ((0, 0), (0, extra)))
            mask = np.pad(mask, ((0, 0), (0, extra)))
        return data, mask


def _int_field(number: int, values) -> _Bytes:
    return _Bytes.const(len(values), _varint(number << 3)) + _Bytes.varint(values)


def _interleave(a: _Bytes, b: _Bytes) -> bytes:
    """Rows a0 b0 a1 b1 …: each slice's BEGIN right before its END."""
    w = max(sum(d.shape[1] for d, _ in a.parts), sum(d.shape[1] for d, _ in b.parts))
    (da, ma), (db, mb) = a.matrix(w), b.matrix(w)
    return np.stack([da, db], axis=1)[np.stack([ma, mb], axis=1)].tobytes()


BATCH = 1 << 15  # slices encoded at once: bounds the batch's matrices to a few MB


def write_slices(writer: "ProtoWriter", track, name_prefix: str, name_number, start_ns, end_ns,
                 int_args: dict, category: str) -> None:
    """Many slices at once (arrays of equal length): named `name_prefix` + the decimal `name_number`,
    with integer debug annotations. Same packets as ProtoWriter.slice, encoded with numpy."""
    n = len(start_ns)
    if writer._first:  # the first packet of the sequence carries the flags: write one the slow way
        writer._packet(b"")
    for lo in range(0, n, BATCH):
        hi = min(n, lo + BATCH)
        m = hi - lo
        tracks = np.broadcast_to(np.asarray(track), (n,))[lo:hi]
        start = np.maximum(np.asarray(start_ns[lo:hi], dtype=np.int64), 0)
        end = np.maximum(np.asarray(end_ns[lo:hi], dtype=np.int64), start)
        event = (_Bytes.const(m, _int(TE_TYPE, TE_SLICE_BEGIN)) + _int_field(TE_TRACK_UUID, tracks)
                 + (_Bytes.const(m, name_prefix.encode()) + _Bytes.decimal(name_number[lo:hi])).field(TE_NAME)
                 + _Bytes.const(m, _str(TE_CATEGORIES, category)))
        for key, values in int_args.items():
            event = event + (_Bytes.const(m, _str(DA_NAME, key)) + _int_field(DA_INT, values[lo:hi])).field(
                TE_DEBUG_ANNOTATIONS)
        head = _Bytes.const(m, _int(PKT_SEQ_ID, SEQUENCE_ID))
        begin = (head + _int_field(PKT_TIMESTAMP, start) + event.field(PKT_TRACK_EVENT)).field(TRACE_PACKET)
        end_event = _Bytes.const(m, _int(TE_TYPE, TE_SLICE_END)) + _int_field(TE_TRACK_UUID, tracks)
        finish = (head + _int_field(PKT_TIMESTAMP, end) + end_event.field(PKT_TRACK_EVENT)).field(TRACE_PACKET)
        writer.out.write(_interleave(begin, finish))
        writer.slices += m


def warn(message: str) -> None:
    print(f"neutrino export: warning: {message}", file=sys.stderr)


__all__ = ["ProtoWriter", "write_slices", "warn"]
