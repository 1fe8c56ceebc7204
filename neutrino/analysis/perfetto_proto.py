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

from neutrino.analysis import _common as C

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


def warn(message: str) -> None:
    print(f"neutrino export: warning: {message}", file=sys.stderr)


__all__ = ["ProtoWriter", "warn", "C"]
