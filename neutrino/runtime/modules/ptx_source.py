"""Find the PTX text behind a GPU code image, and pick the one for a device.

A CUDA program hands the driver raw PTX, a fatbin container, a fatbin
wrapper, a cubin, or (offline) we are given an executable or shared library.
Only PTX can be instrumented, so this module answers: what PTX is in these
bytes, and which of it would this device (compute capability major.minor)
run? Cubins carry no PTX by default; for Triton and TorchInductor the PTX
lies beside the cubin in their cache, which `TritonCacheIndex` searches.

Sources, selection rule and container layout: spec/ptx-sources.md.
"""

from __future__ import annotations

import contextlib
import enum
import getpass
import hashlib
import io
import os
import re
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

import attrs

from neutrino.runtime.modules.fatbin import (
    FATBIN_MAGIC,
    FATBIN_WRAPPER_SIZE,
    BinaryFormatError,
    FatbinContainer,
    FatbinEntry,
    FatbinWrapper,
    fatbin_size,
    is_fatbin,
    is_fatbin_wrapper,
    parse_fatbin_sequence,
    parse_fatbin_wrapper,
)

__all__ = [
    "BinaryFormatError",
    "FatbinWrapper",
    "ImageKind",
    "PtxImage",
    "TritonCacheIndex",
    "classify_image",
    "default_triton_dirs",
    "extract_all_ptx",
    "extract_ptx",
    "find_ptx_for_cubin_path",
    "image_size_hint",
    "parse_fatbin_wrapper",
    "ptx_from_file",
    "select_ptx",
]

EM_CUDA = 190
ELF_MAGIC = b"\x7fELF"

# Host ELF sections that hold fatbin containers: `.nv_fatbin` for whole-program
# code, `__nv_relfatbin` for relocatable device code (-rdc) awaiting nvlink.
HOST_FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
# ptxas keeps the PTX in a cubin built with -G, one line per NUL-terminated string.
CUBIN_DEBUG_PTX_SECTION = ".nv_debug_ptx_txt"


@attrs.frozen
class PtxImage:
    """PTX text and where it came from.

    `arch` is the SM number the PTX targets (90 for sm_90/sm_90a, 100 for
    sm_100f), None if unknown. `arch_variant` is "a" (runs only on exactly
    that arch), "f" (that major family) or "" (portable forward). `source` is
    "<kind>[:<detail>]" with kind one of raw, fatbin, cubin-section,
    triton-cache. `container` numbers the fatbin containers of one image:
    each is one CUDA module, so images from different containers hold
    different kernels.
    """

    text: str = attrs.field(repr=False)  # PTX can be megabytes; keep reprs short
    arch: int | None
    source: str
    arch_variant: str = ""
    container: int = 0

    @property
    def source_kind(self) -> str:
        return self.source.split(":", 1)[0]


class ImageKind(enum.Enum):
    PTX = "ptx"
    FATBIN = "fatbin"
    FATBIN_WRAPPER = "fatbin-wrapper"
    CUBIN = "cubin"
    HOST_ELF = "host-elf"  # executable, shared library or object file


# --------------------------------------------------------------------------
# Public API


def classify_image(data: bytes) -> ImageKind:
    """What kind of image these bytes are; raises if none we know."""
    if not data:
        raise BinaryFormatError("empty image")
    if is_fatbin(data):
        return ImageKind.FATBIN
    if is_fatbin_wrapper(data):
        return ImageKind.FATBIN_WRAPPER
    if data[:4] == ELF_MAGIC:
        return ImageKind.CUBIN if _elf_machine(data) == EM_CUDA else ImageKind.HOST_ELF
    if _looks_like_ptx(data):
        return ImageKind.PTX
    raise BinaryFormatError(
        f"unrecognised image: neither PTX, fatbin nor ELF (starts {bytes(data[:8]).hex()})"
    )


def extract_ptx(
    data: bytes,
    device_cc: tuple[int, int] | None = None,
    *,
    path: str | None = None,
    triton_index: TritonCacheIndex | None = None,
) -> PtxImage | None:
    """The PTX best suited to `device_cc` in an image handed to the driver.

    `data` is what cuModuleLoadData / cuLibraryLoadData / cuModuleLoadFatBinary
    received (PTX, fatbin, cubin) or the content of the file named by `path`
    (cuModuleLoad / cuLibraryLoadFromFile). For a cubin, `path` and
    `triton_index` let us find the PTX in a Triton cache. Returns None when
    there is no PTX the device can use. A fatbin *wrapper* only points at
    the container: read it with `parse_fatbin_wrapper` + `image_size_hint`
    and pass the container instead.
    """
    data = _as_bytes(data)
    kind = classify_image(data)
    if kind is ImageKind.CUBIN:
        return _ptx_for_cubin(data, path, triton_index)
    return _select(_candidates(data, kind), device_cc)


def extract_all_ptx(data: bytes) -> list[PtxImage]:
    """Every PTX in an image (fatbin, executable, library, cubin or PTX)."""
    data = _as_bytes(data)
    return [candidate.image() for candidate in _candidates(data, classify_image(data))]


def ptx_from_file(path: str, device_cc: tuple[int, int] | None = None) -> PtxImage | None:
    """The best PTX in a .ptx, .fatbin, .cubin, executable or shared library.

    For executables with several modules (fatbin containers) this is the best
    PTX of the first module that has one usable on the device; use
    `extract_all_ptx` + `select_ptx` per `container` for all of them.
    """
    try:
        with open(path, "rb") as stream:
            head = stream.read(64)
            if head[:4] == ELF_MAGIC and _elf_machine(head) != EM_CUDA:
                # Executables and libraries can be huge: read only the sections we need.
                return _select(_host_elf_candidates(stream), device_cc)
            data = head + stream.read()
        return extract_ptx(data, device_cc, path=path)
    except OSError as exc:
        raise BinaryFormatError(f"cannot read {path}: {exc.strerror or exc}") from None
    except BinaryFormatError as exc:  # say which file ("empty image" alone names none)
        message = str(exc)
        raise BinaryFormatError(message if str(path) in message else f"{path}: {message}") from None


def select_ptx(
    images: Sequence[PtxImage], device_cc: tuple[int, int] | None = None
) -> PtxImage | None:
    """Pick from `images` by the selection rule (see `_select`)."""
    return _select(images, device_cc)


def image_size_hint(data: bytes) -> int | None:
    """How many bytes the image starting at `data` occupies, from its headers.

    For reading an image through a bare pointer: read a first chunk (64 bytes
    cover every header), ask, read that many bytes. Fatbin: container header
    + fat size. Fatbin wrapper: its 24 bytes (the container is elsewhere, at
    `parse_fatbin_wrapper(data).fatbin_address`). ELF: the end of the header
    tables; once `data` includes the section header table, the end of the
    furthest section too, so ask again until the answer stops growing. PTX:
    None, it ends at its NUL terminator.
    """
    data = _as_bytes(data)
    kind = classify_image(data)
    if kind is ImageKind.FATBIN:
        return fatbin_size(data)
    if kind is ImageKind.FATBIN_WRAPPER:
        return FATBIN_WRAPPER_SIZE
    if kind is ImageKind.PTX:
        return None
    return _elf_size_hint(data)


def find_ptx_for_cubin_path(path: str) -> str | None:
    """The `.ptx` beside a cubin (Triton's cache layout: `<kernel>.cubin`
    next to `<kernel>.ptx`), or None."""
    candidate = Path(path).with_suffix(".ptx")
    return str(candidate) if candidate.is_file() else None


# --------------------------------------------------------------------------
# Selection


class _Selectable(Protocol):
    arch: int | None
    arch_variant: str
    container: int


def _select(items: Iterable[_PtxCandidate | PtxImage], device_cc: tuple[int, int] | None):
    """The selection rule, per module (container) in order:

    - PTX for arch A with no variant runs on every device arch >= A;
      "a" only on exactly A; "f" on A's major family with minor >= A's.
    - Among usable PTX, take the highest arch; at equal arch the most
      specific ("a" over "f" over portable), which can use that device's
      special instructions. Ties keep the first.
    - Without a device, prefer portable PTX, highest arch first.

    The result is from the first container that has a usable PTX. Arch is
    compared as the integer 10 * major + minor (8.6 -> 86, 10.3 -> 103).
    """
    device_arch = None if device_cc is None else device_cc[0] * 10 + device_cc[1]
    by_container: dict[int, list] = {}
    for item in items:
        by_container.setdefault(item.container, []).append(item)
    for group in by_container.values():
        usable = [item for item in group if _usable_on(item, device_arch)]
        if usable:
            best = max(usable, key=lambda item: _preference(item, device_arch))
            return best.image() if isinstance(best, _PtxCandidate) else best
    return None


def _usable_on(item: _Selectable, device_arch: int | None) -> bool:
    if device_arch is None or item.arch is None:
        return True
    if item.arch_variant == "a":
        return item.arch == device_arch
    if item.arch_variant == "f":
        return item.arch // 10 == device_arch // 10 and item.arch <= device_arch
    return item.arch <= device_arch


_SPECIFICITY = {"": 0, "f": 1, "a": 2}


def _preference(item: _Selectable, device_arch: int | None) -> tuple[int, int]:
    arch = -1 if item.arch is None else item.arch
    if device_arch is None:
        return (item.arch_variant == "", arch)
    return (arch, _SPECIFICITY.get(item.arch_variant, 0))


# --------------------------------------------------------------------------
# Candidates: PTX found but not yet decompressed, so that selection decodes
# only the entry it picks.


@attrs.frozen
class _PtxCandidate:
    arch: int | None
    arch_variant: str
    container: int
    source: str
    entry: FatbinEntry | None = None
    text: str | None = attrs.field(default=None, repr=False)

    def image(self) -> PtxImage:
        if self.text is not None:
            return PtxImage(self.text, self.arch, self.source, self.arch_variant, self.container)
        assert self.entry is not None
        text = _decode_text(self.entry.decoded_payload())
        # The entry flags name the variant; older producers may only say it in .target.
        variant = self.arch_variant or _target_of(text)[1]
        return PtxImage(text, self.arch, self.source, variant, self.container)


def _candidates(data: bytes, kind: ImageKind) -> list[_PtxCandidate]:
    if kind is ImageKind.PTX:
        text = _decode_text(data)
        arch, variant = _target_of(text)
        return [_PtxCandidate(arch, variant, 0, "raw", text=text)]
    if kind is ImageKind.FATBIN:
        return _fatbin_candidates(parse_fatbin_sequence(data), "fatbin")
    if kind is ImageKind.FATBIN_WRAPPER:
        wrapper = parse_fatbin_wrapper(data)
        raise BinaryFormatError(
            f"this is a fatbin wrapper (version {wrapper.version}); its container is at"
            f" address {wrapper.fatbin_address:#x} in the process that registered it:"
            f" read it from there and pass the container"
        )
    if kind is ImageKind.CUBIN:
        with _elf_errors("cubin"):
            candidate = _cubin_section_candidate(_open_elf(io.BytesIO(data)))
        return [candidate] if candidate else []
    return _host_elf_candidates(io.BytesIO(data))


def _fatbin_candidates(
    containers: Sequence[FatbinContainer], source: str, first_index: int = 0
) -> list[_PtxCandidate]:
    return [
        _PtxCandidate(entry.arch, entry.arch_variant, first_index + index, source, entry=entry)
        for index, container in enumerate(containers)
        for entry in container.entries
        if entry.is_ptx
    ]


# --------------------------------------------------------------------------
# ELF: host binaries and cubins


def _elf_machine(data: bytes) -> int | None:
    if len(data) < 20 or data[5] not in (1, 2):
        return None
    return int.from_bytes(data[18:20], "little" if data[5] == 1 else "big")


@contextlib.contextmanager
def _elf_errors(what: str) -> Iterator[None]:
    try:
        yield
    except BinaryFormatError:
        raise
    # pyelftools reports malformed input with whatever its parser hit first
    # (ELFError, construct errors, struct.error, ValueError, ...); any of them
    # means the bytes are not a well-formed ELF.
    except Exception as exc:
        raise BinaryFormatError(f"malformed {what} ELF: {type(exc).__name__}: {exc}") from None


def _open_elf(stream: BinaryIO):
    from elftools.elf.elffile import ELFFile  # deferred: only ELF inputs need it

    return ELFFile(stream)


def _host_elf_candidates(stream: BinaryIO) -> list[_PtxCandidate]:
    candidates: list[_PtxCandidate] = []
    containers_seen = 0  # numbers containers across sections
    with _elf_errors("host"):
        elf = _open_elf(stream)
        if elf.num_sections() == 0:
            # Section headers stripped: fall back to finding containers by magic.
            stream.seek(0)
            return _fatbin_candidates(_scan_for_containers(stream.read()), "fatbin:scan")
        for section in elf.iter_sections():
            if section.name not in HOST_FATBIN_SECTIONS or section["sh_type"] == "SHT_NOBITS":
                continue
            section_data = section.data()
            if not any(section_data[:16]):
                continue  # empty, or zero padding only
            containers = parse_fatbin_sequence(section_data)
            source = f"fatbin:{section.name}"
            candidates += _fatbin_candidates(containers, source, containers_seen)
            containers_seen += len(containers)
    return candidates


def _scan_for_containers(data: bytes) -> list[FatbinContainer]:
    """Containers found by their magic at 8-byte boundaries; unparsable hits skipped."""
    containers: list[FatbinContainer] = []
    magic = FATBIN_MAGIC.to_bytes(4, "little")
    position = data.find(magic)
    while position != -1:
        if position % 8 == 0:
            with contextlib.suppress(BinaryFormatError):
                found = parse_fatbin_sequence(data, position)
                containers += found
                position = found[-1].end - 1
        position = data.find(magic, position + 1)
    return containers


def _cubin_section_candidate(elf) -> _PtxCandidate | None:
    """PTX kept inside a cubin: ptxas -G keeps it in .nv_debug_ptx_txt; any
    other section whose content is PTX text counts as well."""
    for section in elf.iter_sections():
        if section["sh_type"] == "SHT_NOBITS" or section["sh_size"] == 0:
            continue
        text = _section_ptx_text(section.data())
        if text is not None:
            arch, variant = _target_of(text)
            return _PtxCandidate(arch, variant, 0, f"cubin-section:{section.name}", text=text)
    return None


def _section_ptx_text(raw: bytes) -> str | None:
    trimmed = raw.strip(b"\0")
    if not trimmed.lstrip().startswith((b".version", b"//", b"/*")):
        return None
    # .nv_debug_ptx_txt stores one NUL-terminated string per line.
    trimmed = trimmed.replace(b"\0", b"\n")
    return _decode_text(trimmed) if _looks_like_ptx(trimmed) else None


def _ptx_for_cubin(
    data: bytes,
    path: str | None,
    triton_index: TritonCacheIndex | None,
) -> PtxImage | None:
    """Where a cubin's PTX may be, most direct first: beside the file it was
    loaded from, in a Triton cache entry with the same cubin, inside it."""
    ptx_path = find_ptx_for_cubin_path(path) if path else None
    if ptx_path is None and triton_index is not None:
        ptx_path = triton_index.find_ptx(data)
    if ptx_path is not None:
        image = _read_ptx_file(ptx_path)
        if image is not None:
            return image
    # Whatever PTX made this cubin is the answer; whether the cubin suits the
    # device is the driver's business, so no selection by device here.
    if b".version" not in data:
        return None  # no section can hold PTX (_looks_like_ptx): a SASS-only cubin, not parsed as ELF
    with _elf_errors("cubin"):
        candidate = _cubin_section_candidate(_open_elf(io.BytesIO(data)))
    return candidate.image() if candidate else None


def _read_ptx_file(path: str) -> PtxImage | None:
    # The cache is another program's directory: a file that vanished or is
    # not PTX means "not found here", not an error of the image being loaded.
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    if not _looks_like_ptx(raw):
        return None
    text = _decode_text(raw)
    arch, variant = _target_of(text)
    return PtxImage(text, arch, f"triton-cache:{path}", variant)


def _elf_size_hint(data: bytes) -> int:
    layout = _elf_header_layout(data)
    (phoff, shoff, ehsize, phentsize, phnum, shentsize, shnum), endian, is_64 = layout
    size = max(ehsize, phoff + phentsize * phnum if phnum else 0)
    if not shnum:
        return size
    size = max(size, shoff + shentsize * shnum)
    if shoff + shentsize * shnum <= len(data):
        size = max(size, _furthest_section_end(data, shoff, shentsize, shnum, endian, is_64))
    return size


def _elf_header_layout(data: bytes):
    if len(data) < 6 or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise BinaryFormatError("ELF image too short or with an unknown class/byte order")
    is_64 = data[4] == 2
    endian = "<" if data[5] == 1 else ">"
    fields = struct.Struct(endian + ("QQ4xHHHHH" if is_64 else "II4xHHHHH"))
    start = 32 if is_64 else 28
    if len(data) < start + fields.size:
        raise BinaryFormatError(
            f"ELF header is truncated: {len(data)} bytes, need {start + fields.size}"
        )
    return fields.unpack_from(data, start), endian, is_64


def _furthest_section_end(
    data: bytes, shoff: int, shentsize: int, shnum: int, endian: str, is_64: bool
) -> int:
    # sh_type, then sh_offset and sh_size (after sh_flags and sh_addr).
    entry = struct.Struct(endian + ("4xI16xQQ" if is_64 else "4xI8xII"))
    if shentsize < entry.size:
        raise BinaryFormatError(f"ELF section header size {shentsize} is too small")
    sht_nobits = 8
    furthest = 0
    for index in range(shnum):
        sh_type, offset, size = entry.unpack_from(data, shoff + index * shentsize)
        if sh_type != sht_nobits:
            furthest = max(furthest, offset + size)
    return furthest


# --------------------------------------------------------------------------
# PTX text

# Whitespace and comments that may precede the mandatory leading .version.
_PTX_PREAMBLE = re.compile(rb"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.DOTALL)
_PTX_TARGET_LINE = re.compile(rb"^[ \t]*\.target[ \t]", re.MULTILINE)
_PTX_TARGET_ARCH = re.compile(r"^[ \t]*\.target[ \t]+(?:sm|compute)_(\d+)([af]?)\b", re.MULTILINE)


def _looks_like_ptx(data: bytes) -> bool:
    """PTX is text that starts (after comments) with .version and has a .target."""
    end = data.find(b"\0")
    head = data if end < 0 else data[:end]
    rest = head[_PTX_PREAMBLE.match(head).end() :]
    return rest.startswith(b".version") and _PTX_TARGET_LINE.search(head) is not None


def _decode_text(raw: bytes) -> str:
    """PTX bytes up to their NUL terminator, as text. PTX is ASCII, but
    comments may not be UTF-8; latin-1 then keeps every byte as it was."""
    end = raw.find(b"\0")
    raw = raw if end < 0 else raw[:end]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _target_of(text: str) -> tuple[int | None, str]:
    match = _PTX_TARGET_ARCH.search(text)
    if match is None:
        return None, ""
    return int(match.group(1)), match.group(2)


def _as_bytes(data) -> bytes:
    if isinstance(data, bytes):
        return data
    try:
        return bytes(data)
    except TypeError:
        raise BinaryFormatError(f"expected image bytes, got {type(data).__name__}") from None


# --------------------------------------------------------------------------
# Triton / TorchInductor caches


def default_triton_dirs() -> list[str]:
    """Where Triton and TorchInductor keep compiled kernels, from the
    environment as it is now (Triton: $TRITON_CACHE_DIR, else
    $TRITON_HOME/.triton/cache, else ~/.triton/cache; Inductor:
    $TORCHINDUCTOR_CACHE_DIR/triton, else <tmp>/torchinductor_<user>/triton)."""
    triton_home = os.environ.get("TRITON_HOME") or os.path.expanduser("~")
    triton = os.environ.get("TRITON_CACHE_DIR") or os.path.join(triton_home, ".triton", "cache")
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not inductor:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no user name in a bare container
            user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
        inductor = os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")
    return [triton, os.path.join(inductor, "triton")]


_SAME_TICK_NS = 2_000_000_000  # coarser than any file system's mtime granularity we meet (FAT: 2 s)


@attrs.define(eq=False)
class TritonCacheIndex:
    """Finds the `.ptx` of a cubin by content among Triton cache entries.

    Triton and Inductor load cubins from memory, so only their bytes tell
    which cache entry they are. The index is built on the first lookup and
    rebuilt on a miss (new kernels get compiled all the time) at most once
    per `min_rescan_interval` seconds, so a stream of cubins that are not
    in any cache does not rescan the disk every time. Only cubins of the
    looked-up size are hashed, each once per (path, size, mtime).
    Safe to share between threads.
    """

    dirs: tuple[str, ...] = attrs.field(
        default=None, converter=lambda d: tuple(default_triton_dirs() if d is None else d)
    )
    min_rescan_interval: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _cubins_by_size: dict[int, list[str]] = attrs.field(factory=dict, init=False)
    _digests: dict[tuple[str, int, int], bytes] = attrs.field(factory=dict, init=False)
    _last_scan: float | None = attrs.field(default=None, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    scans: int = attrs.field(default=0, init=False)  # for tests and diagnostics
    # directory -> (its mtime, its subdirectories, its cubins as (path, size), when listed) at the last scan:
    # a rescan lists again only the directories whose entries changed since (a miss is every SASS-only module)
    _listed: dict[str, tuple] = attrs.field(factory=dict, init=False)
    listings: int = attrs.field(default=0, init=False)  # directories listed, over all scans (tests)

    def find_ptx(self, cubin: bytes) -> str | None:
        """Path of the `.ptx` beside a cached cubin identical to `cubin`, or None."""
        digest = hashlib.sha256(cubin).digest()
        with self._lock:
            if self._last_scan is None:
                self._scan()
            found = self._lookup(len(cubin), digest)
            if found is None and self._may_rescan():
                self._scan()
                found = self._lookup(len(cubin), digest)
        return found

    def find_ptx_image(self, cubin: bytes) -> PtxImage | None:
        path = self.find_ptx(cubin)
        return _read_ptx_file(path) if path else None

    def _may_rescan(self) -> bool:
        return self._last_scan is None or self.clock() - self._last_scan >= self.min_rescan_interval

    def _scan(self) -> None:
        """Every cubin under the cache directories, by size. A directory whose mtime is the one seen
        at the last scan has the same entries (creating, renaming or deleting an entry changes it):
        its listing is reused, so a rescan costs one stat per directory, not a listing per directory
        and a stat per cubin (~20 ms for 400 Triton entries on every SASS-only module load)."""
        by_size: dict[int, list[str]] = {}
        listed: dict[str, tuple] = {}
        pending = list(self.dirs)
        while pending:
            directory = pending.pop()
            try:
                mtime = os.stat(directory).st_mtime_ns
            except OSError:  # absent, or deleted while we walk
                continue
            known = self._listed.get(directory)
            # a listing made within _SAME_TICK of the mtime may have missed an entry made in that tick
            fresh = known is not None and known[0] == mtime and known[3] - mtime > _SAME_TICK_NS
            entry = known if fresh else self._list(directory, mtime)
            listed[directory] = entry
            pending.extend(entry[1])
            for path, size in entry[2]:
                by_size.setdefault(size, []).append(path)
        self._listed = listed
        self._cubins_by_size = by_size
        self._last_scan = self.clock()
        self.scans += 1

    def _list(self, directory: str, mtime: int) -> tuple:
        subdirs: list[str] = []
        cubins: list[tuple[str, int]] = []
        self.listings += 1
        listed_at = time.time_ns()
        with contextlib.suppress(OSError):
            with os.scandir(directory) as entries:
                for item in entries:
                    with contextlib.suppress(OSError):  # deleted while we list
                        if item.is_dir(follow_symlinks=False):
                            subdirs.append(item.path)
                        elif item.name.endswith(".cubin"):
                            cubins.append((item.path, item.stat().st_size))
        return mtime, subdirs, cubins, listed_at

    def _lookup(self, size: int, digest: bytes) -> str | None:
        for path in self._cubins_by_size.get(size, ()):
            if self._digest_of(path) != digest:
                continue
            ptx_path = find_ptx_for_cubin_path(path)
            if ptx_path is not None:
                return ptx_path
        return None

    def _digest_of(self, path: str) -> bytes | None:
        try:
            stat = os.stat(path)
            key = (path, stat.st_size, stat.st_mtime_ns)
            if key not in self._digests:
                self._digests[key] = hashlib.sha256(Path(path).read_bytes()).digest()
            return self._digests[key]
        except OSError:
            return None
