"""AMDGPU code objects: find them, turn them into assembly, and back.

A HIP program hands the runtime either an ELF code object (`\\x7fELF`,
machine EM_AMDGPU) or a clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`)
holding one code object per target. There is no way back from a code object
to LLVM's own assembly, so `disassemble` rebuilds an assembly module with
LLVM's tools: `llvm-objdump -d` for each kernel's instructions (branch offsets
turned back into labels), `llvm-objdump -D --disassemble-symbols=K.kd` for its
descriptor as `.amdhsa_` directives, and `llvm-readelf --notes` for the
metadata YAML. `assemble` goes the other way with llvm-mc and ld.lld. A
kernel whose code computes addresses from its own PC (`s_getpc_b64`, for
globals and calls) cannot be moved and is refused.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import attrs

from neutrino.errors import NeutrinoError

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_BUNDLE_MAGIC = b"CCOB"
ELF_MAGIC = b"\x7fELF"
EM_AMDGPU = 224
#: EF_AMDGPU_MACH values of the targets we instrument (LLVM's AMDGPU ELF flags)
MACH = {0x3F: "gfx90a", 0x40: "gfx940", 0x4B: "gfx941", 0x4C: "gfx942", 0x4F: "gfx950",
        0x41: "gfx1100", 0x46: "gfx1101", 0x47: "gfx1102", 0x44: "gfx1103", 0x43: "gfx1150", 0x4A: "gfx1151"}  # RDNA 3
TOOLS = {"objdump": "llvm-objdump-19", "readelf": "llvm-readelf-19", "mc": "llvm-mc-19", "lld": "ld.lld-19"}
OBJDUMP_LINE = re.compile(r"^\s+(\S.*?)\s*//\s+([0-9A-Fa-f]+):")  # \s*: a long line (gfx11's s_delay_alu) touches the //
BRANCH = re.compile(r"^(s_branch|s_cbranch_\w+)\s+(\d+)$")


class CodeObjectError(NeutrinoError):
    """A code object we cannot read, rebuild or reassemble; the launch falls back to the original."""


def tool(name: str) -> str:
    path = shutil.which(TOOLS[name])
    if path is None:
        raise CodeObjectError(f"{TOOLS[name]} not found (Debian: apt-get install llvm-19 lld-19)")
    return path


def tools_present() -> bool:
    return all(shutil.which(t) for t in TOOLS.values())


# ---------------------------------------------------------------- finding code objects


def elf_size(data: bytes) -> int:
    """Bytes of an ELF64 image from its header: the section header table ends it."""
    if len(data) < 64 or data[:4] != ELF_MAGIC:
        raise CodeObjectError("not an ELF image")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    return max(shoff + shentsize * shnum, 64)


def elf_target(data: bytes) -> str | None:
    """`gfx90a`, ... of an AMDGPU ELF code object; None for another machine."""
    if len(data) < 64 or data[:4] != ELF_MAGIC:
        return None
    machine, = struct.unpack_from("<H", data, 0x12)
    if machine != EM_AMDGPU:
        return None
    flags, = struct.unpack_from("<I", data, 0x30)
    return MACH.get(flags & 0xFF, f"mach{flags & 0xFF:#x}")


@attrs.frozen
class BundleEntry:
    triple: str  # e.g. hipv4-amdgcn-amd-amdhsa--gfx90a
    data: bytes

    @property
    def target(self) -> str | None:
        return elf_target(self.data)


def unbundle(data: bytes) -> list[BundleEntry]:
    """The entries of a clang offload bundle (uncompressed form)."""
    if data[:4] == COMPRESSED_BUNDLE_MAGIC:
        raise CodeObjectError("compressed offload bundle (CCOB): not supported yet")
    if not data.startswith(BUNDLE_MAGIC):
        raise CodeObjectError("not a clang offload bundle")
    pos = len(BUNDLE_MAGIC)
    count, = struct.unpack_from("<Q", data, pos)
    pos += 8
    entries = []
    for _ in range(count):
        offset, size, triple_len = struct.unpack_from("<QQQ", data, pos)
        pos += 24
        triple = data[pos:pos + triple_len].decode("ascii", "replace")
        pos += triple_len
        if offset + size > len(data):
            raise CodeObjectError(f"bundle entry {triple} runs past the end of the image")
        entries.append(BundleEntry(triple, bytes(data[offset:offset + size])))
    return entries


def bundle(entries: list[tuple[str, bytes]]) -> bytes:
    """An uncompressed clang offload bundle (what tests hand the fake runtime, as hipcc embeds)."""
    header = len(BUNDLE_MAGIC) + 8 + sum(24 + len(t) for t, _ in entries)
    out, blobs, offset = bytearray(BUNDLE_MAGIC + struct.pack("<Q", len(entries))), b"", header
    for triple, data in entries:
        out += struct.pack("<QQQ", offset, len(data), len(triple)) + triple.encode()
        blobs += data
        offset += len(data)
    return bytes(out) + blobs


def bundle_size(data: bytes) -> int:
    pos = len(BUNDLE_MAGIC)
    count, = struct.unpack_from("<Q", data, pos)
    pos += 8
    end = pos
    for _ in range(count):
        offset, size, triple_len = struct.unpack_from("<QQQ", data, pos)
        pos += 24 + triple_len
        end = max(end, offset + size, pos)
    return end


def code_object_for(data: bytes, target: str | None = None) -> bytes:
    """The ELF code object to instrument: the image itself, or the bundle's entry for `target` (else its only amdgcn one)."""
    if data[:4] == ELF_MAGIC:
        if elf_target(data) is None:
            raise CodeObjectError("an ELF image that is not an AMDGPU code object")
        return data[:elf_size(data)]
    entries = [e for e in unbundle(data) if e.target is not None]
    if target is not None:
        entries = [e for e in entries if e.target == target] or entries
    if not entries:
        raise CodeObjectError("the bundle holds no AMDGPU code object")
    if len(entries) > 1 and target is None:
        names = ", ".join(e.triple for e in entries)
        raise CodeObjectError(f"the bundle holds code objects for several targets ({names}): name the device's")
    return entries[0].data


# ---------------------------------------------------------------- code object → assembly


def _run(args: list[str], what: str) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise CodeObjectError(f"{what} failed: {proc.stderr.strip()[:2000]}")
    return proc.stdout


@attrs.frozen
class Symbol:
    name: str
    value: int
    size: int


def kernel_symbols(path: Path) -> list[Symbol]:
    """Kernels: FUNC symbols that have a `NAME.kd` descriptor beside them."""
    out = _run([tool("readelf"), "-sW", str(path)], "llvm-readelf -s")
    funcs, kds = {}, set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[0].rstrip(":").isdigit():
            value, size, kind, name = int(parts[1], 16), int(parts[2], 0), parts[3], parts[7]
            if kind == "FUNC":
                funcs[name] = Symbol(name, value, size)
            elif name.endswith(".kd"):
                kds.add(name[:-3])
    return [funcs[n] for n in sorted(funcs, key=lambda n: funcs[n].value) if n in kds]


def disassemble(elf: bytes) -> str:
    """An assembly module that llvm-mc turns back into the same kernels."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "code.o"
        path.write_bytes(elf)
        kernels = kernel_symbols(path)
        if not kernels:
            raise CodeObjectError("the code object has no kernel (no NAME with a NAME.kd descriptor)")
        listing = _run([tool("objdump"), "-d", "--no-show-raw-insn", str(path)], "llvm-objdump -d")
        descriptors = {k.name: _descriptor(path, k.name) for k in kernels}
        notes = _run([tool("readelf"), "--notes", str(path)], "llvm-readelf --notes")
    meta = metadata_yaml(notes)
    target = re.search(r"^amdhsa\.target:\s+(\S+)", meta, re.M)
    version = re.search(r"^amdhsa\.version:\s*\n\s+- (\d+)\n\s+- (\d+)", meta, re.M)
    if target is None or version is None:
        raise CodeObjectError("the code object's metadata names no amdhsa.target / amdhsa.version")
    cov = int(version.group(2)) + 3  # metadata 1.0 is code object v3, 1.1 v4, 1.2 v5
    lines = ["\t.text", f'\t.amdgcn_target "{target.group(1)}"', f"\t.amdhsa_code_object_version {cov}"]
    code = _instructions(listing, kernels)
    for k in kernels:
        lines += [f"\t.globl\t{k.name}", "\t.p2align\t8", f"\t.type\t{k.name},@function", f"{k.name}:"] + code[k.name]
    lines += ["\t.section\t.rodata,\"a\",@progbits"]
    for k in kernels:
        lines += ["\t.p2align\t6, 0x0", *descriptors[k.name]]
    lines += ["\t.text", "\t.amdgpu_metadata", *meta.rstrip("\n").split("\n"), "\t.end_amdgpu_metadata"]
    return "\n".join(lines) + "\n"


def _descriptor(path: Path, kernel: str) -> list[str]:
    out = _run([tool("objdump"), "-D", f"--disassemble-symbols={kernel}.kd", str(path)], "llvm-objdump (descriptor)")
    body = out[out.find(".amdhsa_kernel"):]
    end = body.find(".end_amdhsa_kernel")
    if not body or end < 0:
        raise CodeObjectError(f"{kernel}: llvm-objdump gave no descriptor")
    lines = body[:end + len(".end_amdhsa_kernel")].splitlines()
    # The disassembler prints granulated counts and folds vcc/xnack into next_free_sgpr; keep them
    # reserved explicitly so that raising the counts keeps room for them.
    body = []
    for line in lines[1:-1]:
        key = line.split()[0] if line.strip() else ";"
        if key.startswith(";"):
            continue  # gfx11: fields the assembler does not take (`; SHARED_VGPR_COUNT 0`) are printed as comments
        if key == ".amdhsa_reserve_xnack_mask":
            continue  # the target id decides it; the disassembler's 0 contradicts an xnack-any target
        body.append("\t\t" + (".amdhsa_reserve_vcc 1" if key == ".amdhsa_reserve_vcc" else line.strip()))
    return ["\t" + lines[0].strip(), *body, "\t" + lines[-1].strip()]


def metadata_yaml(notes: str) -> str:
    at = notes.find("AMDGPU Metadata:")
    if at < 0:
        raise CodeObjectError("the code object has no AMDGPU metadata note")
    text = notes[at:].split("\n", 1)[1]
    lines = []
    for line in text.split("\n"):
        if not lines:
            line = line.strip()  # readelf indents the `---` line only
        lines.append(line)
        if line.strip() == "...":
            break
    return "\n".join(lines) + "\n"


def _instructions(listing: str, kernels: list[Symbol]) -> dict[str, list[str]]:
    """Each kernel's instruction lines, branch offsets made labels (`.Lnt_<addr>`)."""
    spans = {k.name: (k.value, k.value + k.size) for k in kernels}
    out: dict[str, list[tuple[int, str]]] = {k.name: [] for k in kernels}
    current = None
    for line in listing.splitlines():
        m = re.match(r"^[0-9a-fA-F]+ <(.+)>:$", line)
        if m:
            current = m.group(1) if m.group(1) in out else None
            continue
        m = OBJDUMP_LINE.match(line)
        if current is None or not m:
            continue
        text, addr = m.group(1).strip(), int(m.group(2), 16)
        lo, hi = spans[current]
        if lo <= addr < hi:
            if text.startswith(("s_getpc_b64", "s_setpc_b64", "s_swappc_b64")):
                raise CodeObjectError(f"{current}: uses its own PC ({text.split()[0]}): code that moves would break it")
            out[current].append((addr, text))
    result = {}
    for name, insns in out.items():
        targets = {}
        for addr, text in insns:
            b = BRANCH.match(text)
            if b:
                offset = int(b.group(2))
                offset = offset - 0x10000 if offset >= 0x8000 else offset
                targets[addr] = addr + 4 + 4 * offset
        labels = {t: f".Lnt_{t:x}" for t in targets.values()}
        lines = []
        for addr, text in insns:
            if addr in labels:
                lines.append(f"{labels.pop(addr)}:")
            if addr in targets:
                text = f"{BRANCH.match(text).group(1)} {f'.Lnt_{targets[addr]:x}'}"
            lines.append("\t" + text)
        if labels:  # a branch out of the kernel's code
            raise CodeObjectError(f"{name}: branches to {', '.join(hex(t) for t in labels)}, outside its code")
        result[name] = lines
    return result


# ---------------------------------------------------------------- assembly → code object


def assemble(text: str, target: str) -> bytes:
    """A loadable (linked, ET_DYN) code object from an assembly module."""
    with tempfile.TemporaryDirectory() as tmp:
        src, obj, out = Path(tmp) / "m.s", Path(tmp) / "m.o", Path(tmp) / "m.co"
        src.write_text(text)
        _run([tool("mc"), "-triple=amdgcn-amd-amdhsa", f"-mcpu={target}", "-filetype=obj", str(src), "-o", str(obj)], "llvm-mc")
        _run([tool("lld"), "-shared", str(obj), "-o", str(out)], "ld.lld")
        return out.read_bytes()
