"""Issue 29, nothing probed: a fatbin -k can select nothing of is decided from its entries' headers read in
place (hooks.unselectable_fatbin), never skipping one whose PTX holds a selected kernel's name."""

from __future__ import annotations

import ctypes as C
import random

import pytest

from neutrino.runtime import hooks
from neutrino.runtime.modules.fatbin import parse_fatbin
from neutrino.runtime.modules.name_filter import fatbin_may_hold_selected, may_hold_selected
from neutrino.runtime.modules.registry import Registry
from tests.test_ptx_source import PTX_80, make_entry, make_fatbin, ptx_entry

SASS = b"\x7fELF" + bytes(60) + b"hidden_kernel_name"


def in_memory(data: bytes):
    buf = C.create_string_buffer(data, len(data))
    return buf, C.addressof(buf)


def wrapper_of(address: int):
    buf = C.create_string_buffer(24)
    C.memmove(buf, (C.c_uint32 * 2)(0x466243B1, 1), 8)
    C.memmove(C.addressof(buf) + 8, C.byref(C.c_uint64(address)), 8)
    return buf


def skipped(data: bytes, literal: bytes) -> bool:
    buf, address = in_memory(data)
    return hooks.unselectable_fatbin(address, (literal,))


def test_sass_only_fatbin_is_skipped_without_being_read_whole():
    zstd_sass = make_entry(2, 90, SASS, compression="zstd")
    assert skipped(make_fatbin(zstd_sass), b"nomatchxyz")
    assert skipped(make_fatbin(zstd_sass, make_entry(2, 80, SASS, compression="lz4")), b"hidden_kernel_name")


def test_a_fatbin_whose_ptx_names_the_kernel_is_examined():
    plain = make_fatbin(ptx_entry(PTX_80.replace(" k()", " saxpy4()"), 80), make_entry(2, 90, SASS, compression="zstd"))
    assert not skipped(plain, b"saxpy")
    assert skipped(plain, b"nomatchxyz")  # its PTX shows every name: none matches
    for compression in ("zstd", "lz4"):  # compressed PTX may hide any name
        assert not skipped(make_fatbin(ptx_entry(PTX_80, 80, compression=compression)), b"nomatchxyz")


def test_an_uncompressed_sass_entry_naming_the_kernel_is_examined_as_before():
    assert not skipped(make_fatbin(make_entry(2, 90, SASS)), b"hidden_kernel")  # its no_ptx event says why
    assert skipped(make_fatbin(make_entry(2, 90, SASS)), b"nomatchxyz")


def test_a_wrapper_is_followed_and_other_images_are_left_to_the_copy():
    sass_only = make_fatbin(make_entry(2, 90, SASS, compression="zstd"))
    buf, address = in_memory(sass_only)
    wrapper = wrapper_of(address)
    assert hooks.unselectable_fatbin(C.addressof(wrapper), (b"nomatchxyz",))
    for other in (PTX_80.encode() + b"\0", b"\x7fELF\x02\x01\x01" + bytes(64), b"\x50\xed\x55\xba" + bytes(4)):
        assert not skipped(other, b"nomatchxyz"), other[:8]
    broken = bytearray(make_fatbin(ptx_entry(PTX_80, 80)))
    broken[16 + 4:16 + 8] = (8).to_bytes(4, "little")  # an entry header size below 64
    assert not skipped(bytes(broken), b"nomatchxyz")


def test_never_skips_a_module_whose_ptx_holds_the_name():
    """Random fatbins: a name placed in PTX entries (compressed or not) and in SASS entries; whenever the
    address check skips one, no PTX entry's text holds the pattern; and it agrees with the copy's
    check (may_hold_selected) wherever the pattern is not in a header or compressed bytes."""
    rng = random.Random(29)
    skips = examines = 0
    for _ in range(300):
        entries = []
        for _ in range(rng.randint(1, 4)):
            name = rng.choice(["saxpy4", "gemm_tile", "reduce_sum"])
            compression = rng.choice([None, "zstd", "lz4"])
            if rng.random() < 0.5:
                entries.append(ptx_entry(PTX_80.replace(" k()", f" {name}()"), 80, compression=compression))
            else:
                entries.append(make_entry(2, 90, SASS + name.encode(), compression=compression))
        data = make_fatbin(*entries)
        pattern = rng.choice([b"saxpy", b"gemm", b"reduce", b"nomatchxyz"])
        parsed = parse_fatbin(data).entries
        ptx_texts = [e.decoded_payload() for e in parsed if e.is_ptx]
        buf, address = in_memory(data)
        skip = hooks.unselectable_fatbin(address, (pattern,))
        if skip:
            assert not any(pattern in text for text in ptx_texts)
            skips += 1
        else:
            examines += 1
        if not any(pattern in e.payload for e in parsed if e.compression):  # (raw compressed bytes may show it)
            assert skip is not may_hold_selected(data, (pattern,))
    assert skips > 30 and examines > 30  # both ways exercised


def test_the_module_callback_records_the_skip_and_examines_a_match():
    """module_cb with the real registry: a SASS-only fatbin unexamined (no image copied), a fatbin whose PTX
    names the kernel examined and its PTX looked for."""

    class Runtime:
        def __init__(self, literals):
            self.registry = Registry(find_ptx=self.find, arch=lambda: (9, 0), wants=lambda n: True,
                                     selected_literals=literals)
            self.images, self.records = [], []

        def find(self, image, arch, path=None):
            self.images.append(image)
            return None

        def on_module(self, kind, handle, image, path=None, image_addr=0, read_seconds=0.0, examined=True):
            self.records.append(self.registry.add_module(kind, handle, image, path, image_addr, examined)[0])

    sass_only = make_fatbin(make_entry(2, 90, SASS, compression="zstd"))
    named = make_fatbin(ptx_entry(PTX_80.replace(" k()", " saxpy4()"), 80))
    for literals, want in (((b"nomatchxyz",), [False, False]), ((b"saxpy",), [False, True]), ((), [True, True])):
        rt = Runtime(literals)
        module_cb = hooks.make_callbacks(rt, shim=None)[0]
        keep = [in_memory(image) for image in (sass_only, named)]
        for handle, (_, address) in enumerate(keep, 1):
            module_cb(1, C.c_void_p(handle), C.c_void_p(address), None)
        assert [rec.examined for rec in rt.records] == want, literals
        assert len(rt.images) == sum(want)  # only examined images are copied and looked into


@pytest.mark.parametrize("literals", [(), (b"x",)])
def test_without_a_fatbin_header_the_answer_is_examine(literals):
    assert fatbin_may_hold_selected(lambda at, count: b"", 0, literals) is True
