"""Map layouts: how a map's records lie in device memory and in a result file (spec/trace-format.md).

The one owner of the layout arithmetic: the engine sizes device buffers with
`map_buffer_bytes`, the launch path and the writers lay frames out with it, and
the reader (neutrino.trace) decodes them with the same dtypes. No I/O here.
"""

from __future__ import annotations

import re
import struct
from typing import Iterable, Sequence

import attrs

from neutrino.errors import NeutrinoError

MAGIC = b"NTRESULT"
VERSION = 1
SECTION_ALIGN = 64

LEVELS = ("thread", "warp", "block")
MAP_TYPES = ("array", "sum", "hist")  # the code in a map header's `type` word is the index
FIELD_TYPES = {"u32": 4, "u64": 8}
_TYPE_BY_WIDTH = {4: "u32", 8: "u64"}

# result/index.bin: a 16-byte header, then one record per probed launch (written by shim/writer.c).
INDEX_MAGIC = b"NTINDEX1"
INDEX_VERSION = 1
INDEX_RECORD_BYTES = 96  # INDEX_RECORD.itemsize (tests/test_startup_accounting.py checks they agree)
# the itemsizes of FILE_HEADER, MAP_HEADER and FIELD_DESC (below), for frame_layout on the launch path
FILE_HEADER_BYTES, MAP_HEADER_BYTES, FIELD_DESC_BYTES = 48, 112, 40
INDEX_HEADER_TAIL = struct.pack("<2I", INDEX_VERSION, INDEX_RECORD_BYTES)

# The numpy dtypes of the layout, made at their first use (PEP 562, `__getattr__` below): a profiled
# process that probes nothing never needs them, and a program that does not import numpy itself (a
# driver-only or embedded one) is spared its import, ~0.25 s (issue 29; docs/startup.md).
_DTYPE_NAMES = ("FILE_HEADER", "MAP_HEADER", "FIELD_DESC", "INDEX_RECORD")


def _make_dtypes() -> dict:
    import numpy as np

    FILE_HEADER = np.dtype(
        [
            ("magic", "S8"),
            ("version", "<u4"),
            ("n_maps", "<u4"),
            ("grid", "<u4", (3,)),
            ("block", "<u4", (3,)),
            ("shared_bytes", "<u4"),
            ("reserved", "<u4"),
        ]
    )
    MAP_HEADER = np.dtype(
        [
            ("name", "S64"),
            ("level", "<u4"),  # index into LEVELS
            ("record_bytes", "<u4"),
            ("cap", "<u4"),  # records per unit actually allocated
            ("cap_is_count", "<u4"),  # 1 when the probe said cap = "count"; RING_SECTION: its section is a ring
            ("units", "<u8"),
            ("n_fields", "<u4"),
            ("type", "<u4"),  # index into MAP_TYPES; was `reserved` (0) in older files, which are all arrays
            ("offset", "<u8"),  # absolute byte offset of the section
            ("size", "<u8"),  # bytes of the section
        ]
    )
    FIELD_DESC = np.dtype([("name", "S32"), ("width", "<u4"), ("offset", "<u4")])

    INDEX_RECORD = np.dtype(
        [
            ("seq", "<u8"),  # launch index + 1
            ("kernel_launch", "<u8"),
            ("stream", "<u8"),
            ("offset", "<u8"),  # the launch's frame in its kernel's result file
            ("frame_size", "<u8"),
            ("grid", "<u4", (3,)),
            ("block", "<u4", (3,)),
            ("shared_bytes", "<u4"),
            ("kernel_id", "<u4"),  # k of kernel/<k>_<hash>, result/<k>_<hash>.ntr
            ("frame_id", "<u4"),  # id of a `frame` event (0: none)
            ("status", "<u4"),  # 0 written; 1 failed on the launch path; 2 copy back failed; 3 file write failed
            ("duration_ns", "<f8"),  # < 0: unknown
            ("graph", "<u8"),  # graph id << 32 | node id of a CUDA graph replay; 0 otherwise (`reserved`, 0, before)
        ]
    )
    return {"FILE_HEADER": FILE_HEADER, "MAP_HEADER": MAP_HEADER, "FIELD_DESC": FIELD_DESC,
            "INDEX_RECORD": INDEX_RECORD}


def __getattr__(name: str):
    if name in _DTYPE_NAMES:
        made = _make_dtypes()
        globals().update(made)
        return made[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class TraceError(NeutrinoError):
    """A trace directory or result file that cannot be read."""


def align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def units_for(level: str, grid: Sequence[int], block: Sequence[int], lanes: int = 32) -> int:
    """Number of units of a map of `level` for one launch (spec/kernel-json.md); `lanes`: 64 for AMD's wave64."""
    blocks = int(grid[0]) * int(grid[1]) * int(grid[2])
    threads = int(block[0]) * int(block[1]) * int(block[2])
    if level == "thread":
        return blocks * threads
    if level == "warp":
        return blocks * ((threads + lanes - 1) // lanes)
    if level == "block":
        return blocks
    raise ValueError(f"unknown map level {level!r}")


def buffer_bytes(units: int, cap: int, record_bytes: int) -> int:
    """Size of one `array` map buffer: counts (16-aligned) then records."""
    return align(4 * units, 16) + units * cap * record_bytes


# A sum/hist map's buffer holds STRIPES rows of counters; a warp adds to row
# (%smid % STRIPES), so that the atomics of a launch spread over many addresses
# (and L2 slices) instead of queueing on one. Rows start ROW_ALIGN apart. The
# buffer is written to the result file as it is (units = rows there); readers
# add the rows up. Old files keep their own row count, so the row counts may change.
STRIPES = 32
# A sum map's rows are one cache line of a few counters each, and every warp of a launch adds to one at its
# exit: on a 16,384-block grid 32 rows (~4 SMs a row on a 132-SM H200) cost 8% of a streaming kernel, 128 rows
# nothing measurable (benchmarks/probe_cost.py, `gmem_bytes 128 rows`, docs/overhead.md session 9). A hist map's
# rows are whole bucket arrays (2 KiB for 255 buckets), whose copy-out per launch grows with the rows: it keeps 32.
SUM_STRIPES = 128
ROW_ALIGN = 128


def stripes(kind: str) -> int:
    """Rows of counters of a new `sum` or `hist` map (kernel.json's `rows`); a power of two: the row is
    %smid masked. Files and kernel.json entries without `rows` were written with STRIPES."""
    return SUM_STRIPES if kind == "sum" else STRIPES


def stripe_row_bytes(record_bytes: int) -> int:
    """Distance between two rows of counters in a sum/hist map's device buffer."""
    return align(record_bytes, ROW_ALIGN)


# A `cap = "count"` map built with `layout: "ring"` (spec/kernel-json.md, "Ring of a count-sized
# map") has one ring of `cap` record slots per launch, shared by all its units: a warp reserves
# slots by adding to the head, so no unit needs a cap of its own and no counting launch sizes it.
RING_SECTION = 2  # the map header's cap_is_count word for a ring section
RING_HEADER = 16  # head u64 (records reserved: every attempt), then 8 bytes reserved (0)
RING_LAYOUT = "ring"


RING_RECORDS_PER_UNIT = 1024  # slots per unit of a kernel's first ring, before its need is known (--ring-records)
RING_LEARN_LAUNCHES = 4  # launches whose rings' heads are read back (one sync each) until one saved records
RING_BUDGET_SHARE = 4  # a launch's ring takes at most this fraction of the buffer budget: launches overlap


def ring_slots(units: int, record_bytes: int, per_unit: int, limit_bytes: int) -> int:
    """Slots of a launch's ring: `per_unit` per unit of the launch, at most what `limit_bytes` hold
    (and 2^32 - 1: the cap is a u32 parameter), at least 1. shim/fastlaunch.c computes the same."""
    return max(1, min(per_unit * units, ring_slot_limit(record_bytes, limit_bytes)))


def learned_slots_per_unit(head: int, units: int) -> int:
    """Slots per unit for a kernel's later launches, from a launch that tried `head` records with
    `units` units: a quarter more than it needed per unit, and one."""
    need = -(-head // max(units, 1))
    return need + need // 4 + 1


def ring_slot_limit(record_bytes: int, limit_bytes: int) -> int:
    """The most slots a ring of `limit_bytes` holds (a slot: its record and its u32 unit tag)."""
    return max(1, min((limit_bytes - RING_HEADER - 16) // (record_bytes + 4), (1 << 32) - 1))


def is_ring(map_info: dict) -> bool:
    """Whether a kernel.json map entry is a count-sized map written as a device ring."""
    return map_info.get("layout") == RING_LAYOUT


def ring_records_offset(cap: int) -> int:
    """Where a ring's records start: after its header and its u32 unit tags, 16-aligned."""
    return align(RING_HEADER + 4 * cap, 16)


def ring_bytes(cap: int, record_bytes: int) -> int:
    """Size of a ring of `cap` slots: header, unit tags u32[cap], records [cap][record_bytes]."""
    return ring_records_offset(cap) + cap * record_bytes


def map_buffer_bytes(map_info: dict, grid: Sequence[int], block: Sequence[int], cap: int | None = None) -> tuple[int, int]:
    """(units, bytes) of the device buffer of one map for one launch: THE sizing rule.

    `map_info` is the map's entry in kernel.json (spec/kernel-json.md); `cap`
    is the records per unit for an `array` map (for `cap = "count"` the
    counted cap; None: the declared one, 1 when it is "count"). A `sum` or
    `hist` map is STRIPES rows of u64 counters per launch, whatever the grid
    (`rows` of kernel.json when given: 1 for a map staged per block in shared
    memory): `units` is the number of rows.
    """
    kind = map_info.get("type", "array")
    if kind != "array":
        rows = int(map_info.get("rows", STRIPES))
        return rows, rows * stripe_row_bytes(int(map_info["record_bytes"]))
    if cap is None:
        cap = map_info["cap"] if isinstance(map_info["cap"], int) else 1
    units = units_for(map_info["level"], grid, block, int(map_info.get("lanes", 32)))
    if is_ring(map_info):  # `cap` is the ring's slots, shared by the launch's units
        return units, ring_bytes(cap, int(map_info["record_bytes"]))
    return units, buffer_bytes(units, cap, int(map_info["record_bytes"]))


def section_bytes(kind: str, units: int, cap: int, record_bytes: int, ring: bool = False) -> int:
    """Bytes of a map's section in a result file (= its device buffer); `units` = rows for sum/hist."""
    if ring:
        return ring_bytes(cap, record_bytes)
    return buffer_bytes(units, cap, record_bytes) if kind == "array" else units * stripe_row_bytes(record_bytes)


def ring_head(data) -> int:
    """A ring section's head: the records its launch tried to reserve (written or not)."""
    import numpy as np

    return int(np.frombuffer(data, "<u8", count=1)[0]) if memoryview(data).nbytes >= 8 else 0


@attrs.frozen
class Buckets:
    """The buckets of a `hist` map: `log2`, or `linear:MIN:MAX:STEP` (unsigned values).

    log2 (bpftrace's `hist()`): bucket 0 holds the value 0, bucket k >= 1 the
    values [2^(k-1), 2^k); 65 buckets cover u64. linear (bpftrace's `lhist()`):
    bucket 0 holds values < MIN, bucket 1 + (v - MIN) // STEP values in
    [MIN, MAX), the last bucket values >= MAX.
    """

    kind: str  # log2 / linear
    min: int = 0
    max: int = 0
    step: int = 1

    LOG2_COUNT = 65

    @classmethod
    def parse(cls, text: str) -> "Buckets":
        """The bucket spec of `text`; ValueError with a reason when malformed."""
        text = str(text).strip()
        if text == "log2":
            return cls("log2")
        m = re.fullmatch(r"linear:([0-9]+):([0-9]+):([0-9]+)", text)  # ASCII digits: \d takes any script's
        if not m:
            raise ValueError(f"malformed buckets {text!r}: write \"log2\" or \"linear:MIN:MAX:STEP\"")
        lo, hi, step = (int(g) for g in m.groups())
        if step <= 0 or lo >= hi or hi >= 1 << 64:
            raise ValueError(f"buckets {text!r}: need 0 <= MIN < MAX < 2^64 and STEP > 0")
        spec = cls("linear", lo, hi, step)
        if spec.count > 4096:
            raise ValueError(f"buckets {text!r} make {spec.count} buckets; at most 4096")
        return spec

    def __str__(self) -> str:
        return "log2" if self.kind == "log2" else f"linear:{self.min}:{self.max}:{self.step}"

    def header_names(self) -> tuple[str, ...]:
        """How a result file's field table spells the spec: `log2`, or `linear`, `min=N`, `max=N`, `step=N`."""
        return ("log2",) if self.kind == "log2" else ("linear", f"min={self.min}", f"max={self.max}", f"step={self.step}")

    @classmethod
    def from_header_names(cls, names: Sequence[str]) -> "Buckets":
        if list(names[:1]) == ["linear"] and len(names) == 4:
            return cls.parse("linear:" + ":".join(n.split("=", 1)[-1] for n in names[1:]))
        return cls.parse(":".join(names))

    @property
    def linear_count(self) -> int:
        return -(-(self.max - self.min) // self.step)

    @property
    def count(self) -> int:
        return self.LOG2_COUNT if self.kind == "log2" else self.linear_count + 2

    def index(self, value: int) -> int:
        """The bucket of one value (the rule the lowered code implements)."""
        if self.kind == "log2":
            return int(value).bit_length()
        if value < self.min:
            return 0
        if value >= self.max:
            return self.count - 1
        return 1 + (value - self.min) // self.step

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of every bucket: bucket i holds low[i] <= v < high[i] (high of the last is 2^64)."""
        import numpy as np

        top = 1 << 64
        if self.kind == "log2":
            low = [0] + [1 << (k - 1) for k in range(1, 65)]
            high = [1] + [1 << k for k in range(1, 65)]
        else:
            edges = [min(self.min + k * self.step, self.max) for k in range(self.linear_count + 1)]
            low, high = [0] + edges, [self.min] + edges[1:] + [top]
        return np.array(low, dtype=object), np.array(high, dtype=object)


@attrs.frozen
class Field:
    name: str
    type: str = attrs.field(validator=attrs.validators.in_(FIELD_TYPES))
    offset: int = attrs.field(validator=attrs.validators.ge(0))

    @property
    def width(self) -> int:
        return FIELD_TYPES[self.type]


def _fields(value: Iterable) -> tuple[Field, ...]:
    out = []
    for f in value:
        if isinstance(f, Field):
            out.append(f)
        elif isinstance(f, dict):
            out.append(Field(f["name"], f["type"], int(f["offset"])))
        else:
            out.append(Field(*f))
    return tuple(out)


@attrs.frozen
class MapSection:
    """One map of one launch, as written: its layout and its raw buffer.

    `data` is the device buffer copied back (any object supporting the
    buffer protocol), exactly `section_bytes(type, units, cap, record_bytes)`
    long. For a `hist` map `buckets` is its bucket spec; its fields are not
    written (the counters are the buckets).
    """

    name: str
    level: str = attrs.field(validator=attrs.validators.in_(LEVELS))
    record_bytes: int
    cap: int
    units: int
    fields: tuple[Field, ...] = attrs.field(converter=_fields)
    data: object = attrs.field(repr=False)
    cap_is_count: bool = False
    type: str = attrs.field(default="array", validator=attrs.validators.in_(MAP_TYPES))
    buckets: str | None = None
    ring: bool = False  # a count-sized map's ring (`cap` slots for all units), not per-unit records

    @classmethod
    def of(cls, map_info: dict, units: int, cap: int, data) -> "MapSection":
        """The section of a map described by its kernel.json entry, `units` and `cap` as
        `map_buffer_bytes` gave them; `data` is the device buffer, written as it is."""
        return cls(map_info["name"], map_info["level"], map_info["record_bytes"], cap, units, map_info["fields"], data,
                   cap_is_count=map_info["cap"] == "count", type=map_info.get("type", "array"),
                   buckets=map_info.get("buckets"), ring=is_ring(map_info))

    @property
    def size(self) -> int:
        return section_bytes(self.type, self.units, self.cap, self.record_bytes, self.ring)

    @property
    def header_cap_word(self) -> int:
        """The map header's cap_is_count word: 0, 1 (cap = "count"), or RING_SECTION."""
        return RING_SECTION if self.ring else int(self.cap_is_count)

    @property
    def dropped(self) -> int:
        """Records tried beyond the cap (always 0 for sum and hist maps: they cannot overflow);
        for a ring, the reservations past its last slot."""
        if self.ring:
            return max(ring_head(self.data) - self.cap, 0)
        if self.type != "array" or not self.units:
            return 0
        import numpy as np

        counts = np.frombuffer(self.data, "<u4", count=self.units).astype("i8")
        return int(np.clip(counts - self.cap, 0, None).sum())

    def header_fields(self) -> tuple[Field, ...]:
        """The field table of the map header; a hist map's spells its bucket spec (Buckets.header_names)."""
        if self.type == "hist":
            return tuple(Field(name, "u64", 0) for name in Buckets.parse(self.buckets or "").header_names())
        return self.fields


def fold_rows(rows: np.ndarray, record_bytes: int) -> np.ndarray:
    """The counters of a sum/hist map: its rows (u64, `rows x stripe_row_bytes/8`) added up modulo 2^64."""
    import numpy as np

    return rows[:, : record_bytes // 8].sum(axis=0, dtype=np.uint64)


def record_dtype(fields: Sequence[Field], record_bytes: int) -> np.dtype:
    import numpy as np

    return np.dtype(
        {
            "names": [f.name for f in fields],
            "formats": ["<u4" if f.type == "u32" else "<u8" for f in fields],
            "offsets": [f.offset for f in fields],
            "itemsize": record_bytes,
        }
    )


@attrs.frozen
class FrameLayout:
    """Where everything of a result frame lies, from the maps' layouts alone (no data)."""

    map_headers: tuple[int, ...]  # offset of each map header in the frame
    offsets: tuple[int, ...]  # offset of each section
    size: int  # the frame's bytes, padded to SECTION_ALIGN


def frame_layout(maps: Sequence[MapSection]) -> FrameLayout:
    """THE layout rule of a frame: file header, map headers with their field tables,
    then each section at the next multiple of SECTION_ALIGN."""
    headers, pos = [], FILE_HEADER_BYTES
    for m in maps:
        headers.append(pos)
        pos += MAP_HEADER_BYTES + len(m.header_fields()) * FIELD_DESC_BYTES
    offsets, pos = [], align(pos, SECTION_ALIGN)
    for m in maps:
        offsets.append(pos)
        pos = align(pos + m.size, SECTION_ALIGN)
    return FrameLayout(tuple(headers), tuple(offsets), pos)


# ---------------------------------------------------------------- one launch's buffers and frame


@attrs.frozen
class MapLayout:
    """One map's buffer for one launch shape (spec/kernel-json.md)."""

    map: dict
    units: int
    cap: int
    size: int
    zero_bytes: int  # what must be zero before the launch: the counts (array maps) or everything


def map_layouts(maps: list[dict], grid, block, caps: dict[str, int], ring: tuple[int, int] | None = None,
                learned: dict[str, int] | None = None) -> tuple[MapLayout, ...]:
    """The buffers of one launch; `ring`: (slots per unit, most bytes) of a count-sized map's ring
    (None: RING_RECORDS_PER_UNIT, 256 MiB), `learned`: slots per unit of the rings whose need an
    earlier launch showed (map name → slots)."""
    ring = ring or (RING_RECORDS_PER_UNIT, 1 << 28)
    out = []
    for m in maps:
        cap = caps.get(m["name"], m["cap"])
        if is_ring(m):
            units = units_for(m["level"], grid, block, int(m.get("lanes", 32)))
            per_unit = (learned or {}).get(m["name"], ring[0])
            cap = ring_slots(units, int(m["record_bytes"]), per_unit, ring[1])
        elif not isinstance(cap, int):
            cap = 1
        units, size = map_buffer_bytes(m, grid, block, cap)
        # Records past a unit's count are never read: an array map needs only its counts zeroed
        # (a ring's slots past its head likewise, but the C path zeroes whole regions anyway).
        zero = align(4 * units, 16) if m.get("type", "array") == "array" else size
        if is_ring(m):
            zero = RING_HEADER
        out.append(MapLayout(m, units, cap, size, zero))
    return tuple(out)


def launch_frame(maps: list[dict], grid, block, caps: dict[str, int], ring=None,
                 learned: dict[str, int] | None = None) -> tuple[tuple[MapLayout, ...], FrameLayout]:
    """One launch shape's map buffers and the frame the writer appends for them."""
    layouts = map_layouts(maps, grid, block, caps, ring, learned)
    return layouts, frame_layout([MapSection.of(lay.map, lay.units, lay.cap, b"") for lay in layouts])
