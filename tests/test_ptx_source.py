"""PTX extraction from the images CUDA programs hand the driver.

Three layers of inputs:
- synthetic containers packed here (always run; pin the layout we rely on),
- small committed nvcc 13 outputs in tests/data/binaries (always run; see
  the README there),
- images nvcc builds at test time (skipped without nvcc): fatbins in every
  compression mode, executables, a shared library, cubins.
Malformed input is fuzzed with hypothesis: a result or BinaryFormatError,
nothing else. NEUTRINO_FUZZ_EXAMPLES raises the example count.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neutrino.errors import NeutrinoError
from neutrino.runtime.modules import decompress
from neutrino.runtime.modules.fatbin import (
    FATBIN_MAGIC,
    FLAG_ARCH_SPECIFIC,
    FLAG_COMPRESSED_LZ4,
    FLAG_COMPRESSED_ZSTD,
    FLAG_FAMILY_SPECIFIC,
    parse_fatbin,
)
from neutrino.runtime.modules.ptx_source import (
    BinaryFormatError,
    ImageKind,
    PtxImage,
    TritonCacheIndex,
    classify_image,
    extract_all_ptx,
    extract_ptx,
    find_ptx_for_cubin_path,
    image_size_hint,
    parse_fatbin_wrapper,
    ptx_from_file,
    select_ptx,
)

BINARIES = Path(__file__).parent / "data" / "binaries"
FUZZ = settings(
    max_examples=int(os.environ.get("NEUTRINO_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

KERNEL = """\
extern "C" __global__ void add(float *a, const float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
"""
PROGRAM = KERNEL + "int main() { add<<<1, 1>>>(nullptr, nullptr, 0); return (int)cudaDeviceSynchronize(); }\n"

PTX_80 = ".version 8.0\n.target sm_80\n.address_size 64\n\n.visible .entry k()\n{\n\tret;\n}\n"
PTX_90 = PTX_80.replace("sm_80", "sm_90")


# --------------------------------------------------------------------------
# Synthetic containers


def lz4_literals_only(data: bytes) -> bytes:
    """A valid LZ4 block with one literal-only sequence."""
    if len(data) < 15:
        return bytes([len(data) << 4]) + data
    rest = len(data) - 15
    return b"\xf0" + b"\xff" * (rest // 255) + bytes([rest % 255]) + data


def zstd_raw_frame(data: bytes) -> bytes:
    """A valid zstd frame of raw blocks, with the content size in its header."""
    frame = struct.pack("<IBI", 0xFD2FB528, 0xA0, len(data))  # single segment, 4-byte size
    chunks = [data[i : i + 100_000] for i in range(0, len(data), 100_000)] or [b""]
    for index, chunk in enumerate(chunks):
        last = index == len(chunks) - 1
        frame += (int(last) | (len(chunk) << 3)).to_bytes(3, "little") + chunk
    return frame


def make_entry(kind: int, arch: int, payload: bytes, *, flags: int = 0x11, compression: str | None = None) -> bytes:
    stored, uncompressed_size, compressed_size = payload, 0, 0
    if compression == "lz4":
        stored, flags = lz4_literals_only(payload), flags | FLAG_COMPRESSED_LZ4
    elif compression == "zstd":
        stored, flags = zstd_raw_frame(payload), flags | FLAG_COMPRESSED_ZSTD
    if compression:
        uncompressed_size, compressed_size = len(payload), len(stored)
    padded = stored + bytes(-len(stored) % 8)
    header = struct.pack(
        "<HHIQIIHHIIIQQQ", kind, 0x0101, 64, len(padded), compressed_size, 0,
        0, 9, arch, 0, 0, flags, 0, uncompressed_size,
    )  # fmt: skip
    return header + padded


def make_fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def ptx_entry(text: str, arch: int, **kwargs) -> bytes:
    return make_entry(1, arch, text.encode() + b"\0", **kwargs)


def test_synthetic_fatbin_all_compressions_give_the_same_text():
    for compression in (None, "lz4", "zstd"):
        image = make_fatbin(ptx_entry(PTX_80, 80, compression=compression))
        [ptx] = extract_all_ptx(image)
        assert ptx == PtxImage(PTX_80, 80, "fatbin")


def test_synthetic_fatbin_skips_elf_entries_and_selects_by_arch():
    image = make_fatbin(
        ptx_entry(PTX_80, 80),
        make_entry(2, 90, b"\x7fELF" + bytes(60)),
        ptx_entry(PTX_90, 90, compression="zstd"),
    )
    assert [p.arch for p in extract_all_ptx(image)] == [80, 90]
    assert extract_ptx(image, (8, 9)).arch == 80
    assert extract_ptx(image, (9, 0)).text == PTX_90
    assert extract_ptx(image, (7, 0)) is None


def test_entry_flags_give_the_arch_variant():
    image = make_fatbin(
        ptx_entry(PTX_90, 90, flags=0x11 | FLAG_ARCH_SPECIFIC),
        ptx_entry(PTX_90, 100, flags=0x11 | FLAG_FAMILY_SPECIFIC),
    )
    assert [(p.arch, p.arch_variant) for p in extract_all_ptx(image)] == [(90, "a"), (100, "f")]


def test_concatenated_containers_are_numbered():
    first = make_fatbin(ptx_entry(PTX_80, 80))
    second = make_fatbin(ptx_entry(PTX_90, 90))
    images = extract_all_ptx(first + bytes(16) + second)
    assert [(p.arch, p.container) for p in images] == [(80, 0), (90, 1)]
    # One module per container: the first module that has usable PTX wins.
    assert extract_ptx(first + second, (9, 0)).arch == 80


def test_fatbin_without_ptx_gives_none():
    assert extract_ptx(make_fatbin(make_entry(2, 90, b"\x7fELF" + bytes(60))), (9, 0)) is None
    assert extract_all_ptx(make_fatbin()) == []


# --------------------------------------------------------------------------
# Selection rule


def image(arch: int | None, variant: str = "", container: int = 0) -> PtxImage:
    return PtxImage(f"// {arch}{variant}", arch, "test", variant, container)


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ((7, 5), None),
        ((8, 0), "80"),
        ((8, 6), "80"),
        ((9, 0), "90a"),  # exact match: the arch-specific PTX is preferred
        ((10, 0), "100f"),
        ((10, 3), "100f"),  # same family, higher minor
        ((12, 0), "100"),  # a family PTX does not cross majors, portable does
        (None, "100"),  # no device: highest portable
    ],
)
def test_selection_rule(device, expected):
    images = [image(80), image(90, "a"), image(90), image(100, "f"), image(100)]
    chosen = select_ptx(images, device)
    assert (chosen.text[3:] if chosen else None) == expected


def test_arch_specific_ptx_needs_the_exact_arch():
    assert select_ptx([image(90, "a")], (9, 0)) is not None
    assert select_ptx([image(90, "a")], (10, 0)) is None
    assert select_ptx([image(90, "a")], None) is not None  # nothing better known


def test_selection_prefers_the_first_module():
    assert select_ptx([image(80, container=0), image(90, container=1)], (9, 0)).arch == 80
    assert select_ptx([image(100, container=0), image(90, container=1)], (9, 0)).arch == 90


# --------------------------------------------------------------------------
# Raw PTX


def test_raw_ptx_with_comments_and_nul_terminator():
    text = "// generated\n/* multi\n line */\n" + PTX_90.replace("sm_90", "sm_90a")
    ptx = extract_ptx(text.encode() + b"\0garbage", (9, 0))
    assert ptx == PtxImage(text, 90, "raw", "a")
    assert classify_image(text.encode()) is ImageKind.PTX
    assert image_size_hint(text.encode()) is None


def test_raw_ptx_follows_the_selection_rule_too():
    # PTX for a newer arch than the device's would not JIT there either.
    assert extract_ptx(PTX_90.encode(), (8, 0)) is None
    assert extract_ptx(PTX_90.encode(), None).arch == 90


@pytest.mark.parametrize("data", [b"", b"hello world", b".target sm_90\n", b"\0\0\0\0", b"MZ\x90\0"])
def test_unrecognised_bytes_raise(data):
    with pytest.raises(BinaryFormatError):
        extract_ptx(data, (9, 0))
    assert issubclass(BinaryFormatError, NeutrinoError)


# --------------------------------------------------------------------------
# Committed nvcc 13 outputs


def read_fixture(name: str) -> bytes:
    return (BINARIES / name).read_bytes()


def test_fixture_zstd_and_lz4_fatbins_agree():
    zstd_images = extract_all_ptx(read_fixture("add_80_90.zstd.fatbin"))
    lz4_images = extract_all_ptx(read_fixture("add_80_90.lz4.fatbin"))
    assert [p.arch for p in zstd_images] == [80, 90]
    assert [p.text for p in zstd_images] == [p.text for p in lz4_images]
    assert ".target sm_90" in zstd_images[1].text and zstd_images[1].text.rstrip().endswith("}")


def test_decoders_accept_what_the_libraries_write():
    # The synthetic literal-only/raw-block encodings above and the libraries' own
    # compressed output decode to the same bytes through our wrappers.
    import lz4.block
    import zstandard

    payload = read_fixture("add_80_90.zstd.fatbin")[:5000] * 3
    packed = lz4.block.compress(payload, store_size=False)
    assert decompress.decompress_lz4_block(packed, len(payload)) == payload
    assert decompress.decompress_zstd(zstandard.ZstdCompressor().compress(payload), len(payload)) == payload
    assert decompress.decompress_lz4_block(lz4_literals_only(payload), len(payload)) == payload
    assert decompress.decompress_zstd(zstd_raw_frame(payload), len(payload)) == payload


def test_fixture_entry_layout():
    container = parse_fatbin(read_fixture("add_80_90.lz4.fatbin"))
    assert [(e.kind, e.arch, e.compression) for e in container.entries] == [
        (1, 80, "lz4"), (2, 90, "lz4"), (1, 90, "lz4"),
    ]  # fmt: skip
    assert container.entries[1].decoded_payload()[:4] == b"\x7fELF"


def test_fixture_arch_specific_fatbin():
    data = read_fixture("add_90a_100f_120.fatbin")
    images = extract_all_ptx(data)
    assert [(p.arch, p.arch_variant) for p in images] == [(90, "a"), (100, "f"), (120, "")]
    assert ".target sm_90a" in images[0].text
    assert extract_ptx(data, (9, 0)).arch_variant == "a"
    assert extract_ptx(data, (10, 3)).arch == 100
    assert extract_ptx(data, (11, 0)) is None
    assert extract_ptx(data, (12, 1)).arch == 120


def test_fixture_debug_cubin_keeps_its_ptx():
    data = read_fixture("add_sm90_debug.cubin")
    assert classify_image(data) is ImageKind.CUBIN
    ptx = extract_ptx(data, (9, 0))
    assert ptx.source == "cubin-section:.nv_debug_ptx_txt" and ptx.source_kind == "cubin-section"
    assert ptx.arch == 90
    assert ptx.text.startswith(".version") and "add_param_0" in ptx.text


def test_fixture_size_hints_from_headers_alone():
    for name in ("add_80_90.zstd.fatbin", "add_sm90_debug.cubin"):
        data = read_fixture(name)
        assert image_size_hint(data[:64]) <= len(data)
        assert image_size_hint(_read_by_hints(data)) == len(data)


def _read_by_hints(memory: bytes) -> bytes:
    """What the runtime does with a bare pointer: read, ask, read more."""
    chunk = memory[:64]
    while (size := image_size_hint(chunk)) > len(chunk):
        chunk = memory[:size]
    return chunk


# --------------------------------------------------------------------------
# Images built by nvcc at test time

COMMON = ["-gencode", "arch=compute_80,code=compute_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
PTX_ONLY_90 = ["-gencode", "arch=compute_90,code=compute_90"]
BUILDS = {
    "default.fatbin": ["-fatbin", *COMMON, "kernel.cu"],
    "plain.fatbin": ["-fatbin", *COMMON, "-no-compress", "kernel.cu"],
    "all.fatbin": ["-fatbin", *COMMON, "-Xfatbin", "-compress-all", "kernel.cu"],
    "speed.fatbin": ["-fatbin", *COMMON, "-compress-mode=speed", "-Xfatbin", "-compress-all", "kernel.cu"],
    "prog_static": [*PTX_ONLY_90, "-cudart", "static", "program.cu"],
    "prog_shared": [*PTX_ONLY_90, "-cudart", "shared", "program.cu"],
    "libadd.so": [*PTX_ONLY_90, "-shared", "-Xcompiler", "-fPIC", "kernel.cu"],
    "kernel.cubin": ["-cubin", "-arch=sm_90", "kernel.cu"],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path | str]:
    """Every BUILDS image, built in parallel once; a failed build maps to its error."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    root = tmp_path_factory.mktemp("nvcc")
    (root / "kernel.cu").write_text(KERNEL)
    (root / "program.cu").write_text(PROGRAM)

    def build(item: tuple[str, list[str]]) -> tuple[str, Path | str]:
        name, args = item
        proc = subprocess.run(["nvcc", *args, "-o", name], cwd=root, capture_output=True, text=True)
        return name, root / name if proc.returncode == 0 else proc.stderr[-2000:]

    with ThreadPoolExecutor(max_workers=len(BUILDS)) as pool:
        return dict(pool.map(build, BUILDS.items()))


def artifact(built, name: str) -> Path:
    result = built[name]
    if isinstance(result, str):
        pytest.skip(f"nvcc could not build {name}: {result}")
    return result


def test_built_fatbin_selection(built):
    data = artifact(built, "default.fatbin").read_bytes()
    assert extract_ptx(data, (8, 0)).arch == 80
    assert extract_ptx(data, (8, 6)).arch == 80
    assert extract_ptx(data, (9, 0)).arch == 90
    assert extract_ptx(data, (7, 5)) is None
    assert ".target sm_80" in extract_ptx(data, (8, 6)).text


@pytest.mark.parametrize("name", ["default.fatbin", "all.fatbin", "speed.fatbin"])
def test_built_compressed_fatbins_match_uncompressed(built, name):
    expected = [(p.arch, p.text) for p in extract_all_ptx(artifact(built, "plain.fatbin").read_bytes())]
    data = artifact(built, name).read_bytes()
    assert any(e.compression for e in parse_fatbin(data).entries)
    assert [(p.arch, p.text) for p in extract_all_ptx(data)] == expected


@pytest.mark.parametrize("name", ["prog_static", "prog_shared", "libadd.so"])
def test_built_host_binaries(built, name):
    path = artifact(built, name)
    data = path.read_bytes()
    assert classify_image(data) is ImageKind.HOST_ELF
    [ptx] = extract_all_ptx(data)
    assert (ptx.arch, ptx.source) == (90, "fatbin:.nv_fatbin")
    assert ".visible .entry add(" in ptx.text
    assert ptx_from_file(str(path), (9, 0)) == ptx
    assert ptx_from_file(str(path), (8, 0)) is None
    assert image_size_hint(_read_by_hints(data)) == len(data)


def test_built_fatbin_wrapper_points_at_the_container(built):
    from elftools.elf.elffile import ELFFile

    with open(artifact(built, "prog_shared"), "rb") as stream:
        elf = ELFFile(stream)
        segment = elf.get_section_by_name(".nvFatBinSegment").data()
        fatbin_address = elf.get_section_by_name(".nv_fatbin")["sh_addr"]
    wrappers = [parse_fatbin_wrapper(segment[i : i + 24]) for i in range(0, len(segment), 24)]
    # The wrappers point into .nv_fatbin (their addresses are link-time ones).
    assert all(fatbin_address <= w.fatbin_address < fatbin_address + 4096 for w in wrappers)
    assert image_size_hint(segment[:24]) == 24
    with pytest.raises(BinaryFormatError, match="fatbin wrapper"):
        extract_ptx(segment[:24], (9, 0))


def test_built_cubin_has_no_ptx(built):
    path = artifact(built, "kernel.cubin")
    data = path.read_bytes()
    assert classify_image(data) is ImageKind.CUBIN
    assert extract_ptx(data, (9, 0)) is None
    assert extract_all_ptx(data) == []
    assert ptx_from_file(str(path), (9, 0)) is None
    assert image_size_hint(_read_by_hints(data)) == len(data)


# --------------------------------------------------------------------------
# Triton caches


@pytest.fixture
def cubin_bytes() -> bytes:
    return read_fixture("add_sm90_debug.cubin")


def make_cache_entry(root: Path, name: str, cubin: bytes, ptx: str) -> Path:
    entry = root / name
    entry.mkdir(parents=True)
    (entry / "add.cubin").write_bytes(cubin)
    (entry / "add.ptx").write_text(ptx)
    (entry / "add.json").write_text("{}")
    return entry


TRITON_PTX = PTX_90.replace("sm_90", "sm_90a")


def test_triton_ptx_found_beside_the_cubin_path(tmp_path, cubin_bytes):
    entry = make_cache_entry(tmp_path, "HASH", cubin_bytes, TRITON_PTX)
    cubin_path = str(entry / "add.cubin")
    assert find_ptx_for_cubin_path(cubin_path) == str(entry / "add.ptx")
    assert find_ptx_for_cubin_path(str(tmp_path / "missing.cubin")) is None
    ptx = extract_ptx(cubin_bytes, (9, 0), path=cubin_path)
    assert ptx == PtxImage(TRITON_PTX, 90, f"triton-cache:{entry / 'add.ptx'}", "a")
    assert ptx_from_file(cubin_path).text == TRITON_PTX


def test_triton_ptx_found_by_cubin_content(tmp_path, cubin_bytes):
    make_cache_entry(tmp_path / "cache", "other", b"\x7fELF not this one" + bytes(len(cubin_bytes) - 17), "x")
    entry = make_cache_entry(tmp_path / "cache", "HASH", cubin_bytes, TRITON_PTX)
    index = TritonCacheIndex([str(tmp_path / "cache"), str(tmp_path / "absent")])
    assert index.find_ptx(cubin_bytes) == str(entry / "add.ptx")
    ptx = extract_ptx(cubin_bytes, (9, 0), triton_index=index)
    assert ptx.text == TRITON_PTX and ptx.source_kind == "triton-cache"
    assert index.scans == 1  # both lookups used the one index


def test_triton_index_rescans_on_a_miss_at_most_once_per_interval(tmp_path, cubin_bytes):
    now = [0.0]
    index = TritonCacheIndex([str(tmp_path)], min_rescan_interval=5.0, clock=lambda: now[0])
    assert index.find_ptx(cubin_bytes) is None
    assert index.find_ptx(cubin_bytes) is None
    assert index.scans == 1  # the second miss came too soon to rescan
    entry = make_cache_entry(tmp_path, "NEW", cubin_bytes, TRITON_PTX)
    assert index.find_ptx(cubin_bytes) is None  # still too soon
    now[0] = 6.0
    assert index.find_ptx(cubin_bytes) == str(entry / "add.ptx")
    assert index.scans == 2
    assert index.find_ptx(cubin_bytes) is not None and index.scans == 2  # hits never rescan


def test_default_triton_dirs_follow_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "t"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "i"))
    assert TritonCacheIndex().dirs == (str(tmp_path / "t"), str(tmp_path / "i" / "triton"))


# --------------------------------------------------------------------------
# Malformed input: a result or BinaryFormatError, never anything else


def outcome(data: bytes) -> None:
    for call in (extract_all_ptx, lambda d: extract_ptx(d, (9, 0)), image_size_hint):
        try:
            call(data)
        except BinaryFormatError as exc:
            assert str(exc)  # every refusal says why


@FUZZ
@given(st.binary(max_size=512))
def test_fuzz_random_bytes(data):
    outcome(data)


@FUZZ
@given(
    st.sampled_from([b"\x50\xed\x55\xba", b"\xb1\x43\x62\x46", b"\x7fELF\x02\x01\x01", b".version 8.0\n"]),
    st.binary(max_size=512),
)
def test_fuzz_random_bytes_behind_known_magics(magic, data):
    outcome(magic + data)


FIXTURES = ["add_80_90.zstd.fatbin", "add_80_90.lz4.fatbin", "add_90a_100f_120.fatbin", "add_sm90_debug.cubin"]


@FUZZ
@given(st.sampled_from(FIXTURES), st.data())
def test_fuzz_truncated_fixtures(name, draw):
    data = read_fixture(name)
    outcome(data[: draw.draw(st.integers(0, len(data)))])


@FUZZ
@given(st.sampled_from(FIXTURES), st.data())
def test_fuzz_corrupted_fixtures(name, draw):
    data = bytearray(read_fixture(name))
    for _ in range(draw.draw(st.integers(1, 8))):
        data[draw.draw(st.integers(0, len(data) - 1))] = draw.draw(st.integers(0, 255))
    outcome(bytes(data))


@FUZZ
@given(st.binary(max_size=4096), st.booleans(), st.data())
def test_fuzz_decoders_roundtrip_and_reject(payload, zstd, draw):
    # Real compressed payloads, corrupted: the decoders raise CorruptDataError
    # or return bytes; never another exception or a hang.
    fixture = "add_80_90.zstd.fatbin" if zstd else "add_80_90.lz4.fatbin"
    entries = parse_fatbin(read_fixture(fixture)).entries
    compressed = bytearray(entries[0].payload)
    position = draw.draw(st.integers(0, len(compressed) - 1))
    compressed[position] ^= draw.draw(st.integers(1, 255))
    decoder = decompress.decompress_zstd if zstd else decompress.decompress_lz4_block
    try:
        decoder(bytes(compressed), entries[0].uncompressed_size)
    except decompress.CorruptDataError:
        pass
    assert decompress.decompress_lz4_block(lz4_literals_only(payload), len(payload)) == payload
    assert decompress.decompress_zstd(zstd_raw_frame(payload), len(payload)) == payload


def test_triton_index_rescan_lists_only_the_directories_that_changed(tmp_path, cubin_bytes):
    """A rescan (every miss: each SASS-only module) reuses the listing of a directory whose mtime is
    unchanged and old; a cubin added to an existing entry, or a new entry, is still found."""
    import os

    for i in range(20):
        make_cache_entry(tmp_path, f"OLD{i}", b"\x7fELF other" + bytes(i), "x")
    old = 1_000_000_000  # every directory last changed long ago (a listing of it is complete)
    for directory, _, _ in os.walk(tmp_path):
        os.utime(directory, ns=(old, old))
    index = TritonCacheIndex([str(tmp_path)], min_rescan_interval=0.0)
    assert index.find_ptx(cubin_bytes) is None
    first = index.listings
    assert first == 21  # the root and its 20 entries
    assert index.find_ptx(cubin_bytes) is None
    assert index.listings == first  # nothing changed: one stat per directory, no listing
    entry = tmp_path / "OLD7"  # Triton writes into an entry's directory after creating it
    (entry / "kern.cubin").write_bytes(cubin_bytes)
    (entry / "kern.ptx").write_text(TRITON_PTX)
    assert index.find_ptx(cubin_bytes) == str(entry / "kern.ptx")
    assert index.listings == first + 1  # only the entry that changed was listed again
    new = make_cache_entry(tmp_path, "NEW", cubin_bytes + b"\0", TRITON_PTX)
    assert index.find_ptx(cubin_bytes + b"\0") == str(new / "add.ptx")  # a new entry: the root changed
