"""The one table of what GCN instructions do: defs, uses, memory address, bytes.

Passes ask `semantics(insn)`; no pass looks at a mnemonic itself. Operand
positions follow LLVM's AMDGPU assembly syntax (gfx90a, gfx942):

    global_load_dwordx2  vdst, vaddr, saddr|off [offset:N]
    global_store_dword   vaddr, vdata, saddr|off
    global_atomic_add    [vdst,] vaddr, vdata, saddr|off   (vdst with glc / sc0)
    flat_*               as global_*, without saddr
    buffer_load_dword    vdst, vaddr|off, srsrc, soffset [offen idxen offset:N]
    buffer_store_dword   vdata, vaddr|off, srsrc, soffset
    ds_read_b32          vdst, vaddr [offset:N];  ds_write_b32 vaddr, vdata
    ds_add_u32           vaddr, vdata;  ds_add_rtn_u32 vdst, vaddr, vdata
    s_load_dwordx2       sdst, sbase, offset
    v_mfma_*             vdst, srcA, srcB, srcC
"""

from __future__ import annotations

import functools
import re

import attrs

from neutrino.isa.gcn import ir


@attrs.frozen
class Access:
    """One memory access of an instruction, per lane (scalar loads: per wave)."""

    space: str  # global, flat, buffer, lds, scalar
    kind: str  # load, store, atomic
    bytes: int
    address: tuple[int, ...]  # operand indices that form the address (vaddr, saddr / srsrc, soffset)
    data: int | None = None  # operand index of the stored or atomic source value
    returns: bool = False  # an atomic that returns the old value


@attrs.frozen
class Mfma:
    """A matrix fused multiply-add: D(MxN) = A(MxK) x B(KxN) + C, per wave."""

    m: int
    n: int
    k: int
    blocks: int = 1


@attrs.frozen
class Info:
    defs: tuple[int, ...]  # operand indices written
    uses: tuple[int, ...]  # operand indices read
    implicit_defs: tuple[str, ...] = ()  # scc, vcc, exec, m0
    access: Access | None = None
    mfma: Mfma | None = None
    ends_kernel: bool = False
    branch: bool = False


WIDTH_WORDS = {
    "ubyte": 1, "sbyte": 1, "byte": 1, "u8": 1, "i8": 1, "ushort": 2, "sshort": 2, "short": 2, "u16": 2, "i16": 2,
    "dword": 4, "b32": 4, "u32": 4, "i32": 4, "f32": 4, "dwordx2": 8, "b64": 8, "u64": 8, "i64": 8, "f64": 8,
    "dwordx3": 12, "b96": 12, "dwordx4": 16, "b128": 16, "x2": 8, "pk_add_f16": 4, "pk_add_bf16": 4,
}
NO_DEF_SALU = re.compile(r"s_(cmp|cmpk|bitcmp|cbranch|branch|waitcnt|nop|endpgm|barrier|sendmsg|setprio|setreg|sleep|trap|icache|dcache|ttracedata|setkill|set_gpr_idx_off|set_gpr_idx_on|setvskip|wakeup|code_end|denorm_mode|round_mode)")
SCC_FREE = re.compile(r"s_(mov|movk|cmov|cselect|getreg|memtime|memrealtime|load|buffer_load|waitcnt|nop|endpgm|barrier|branch|cbranch|setprio|sendmsg|sleep|getpc|setpc|swappc|dcache|store|atc|memrealtime)")
CARRY_E32 = re.compile(r"v_(add|sub|subrev|addc|subb|subbrev)_co_u32_e32|v_(addc|subb|subbrev)_u32_e32")
MFMA = re.compile(r"v_(?:mfma|smfmac)_[a-z0-9]+_(\d+)x(\d+)x(\d+)(?:_?[a-z0-9]+)*")


def semantics(insn: ir.Instruction) -> Info:
    has_return = "glc" in insn.modifiers or "sc0" in insn.modifiers
    return _semantics(insn.mnemonic, len(insn.operands), has_return)


@functools.lru_cache(maxsize=4096)
def _semantics(mnemonic: str, count: int, has_return: bool) -> Info:
    every = tuple(range(count))
    space = _memory_space(mnemonic)
    if space:
        return _memory(mnemonic, space, count, has_return)
    m = MFMA.match(mnemonic)
    if m:
        return Info((0,), every[1:], mfma=Mfma(int(m.group(1)), int(m.group(2)), int(m.group(3))))
    if mnemonic == "CUID":  # the probe language's compute-unit id, expanded per target by operand resolution
        return Info((0,), ())
    if mnemonic == "s_endpgm":
        return Info((), (), ends_kernel=True)
    if mnemonic.startswith(("s_branch", "s_cbranch")):
        return Info((), every, branch=True)
    if mnemonic.startswith("s_"):
        implicit = () if SCC_FREE.match(mnemonic) else ("scc",)
        if "saveexec" in mnemonic:
            implicit += ("exec",)
        if NO_DEF_SALU.match(mnemonic):
            return Info((), every, implicit)
        return Info(every[:1], every[1:], implicit)
    if mnemonic.startswith("v_cmpx"):
        return Info((), every, ("exec",) + (("vcc",) if mnemonic.endswith("_e32") else ()))
    if mnemonic.startswith("v_cmp") and mnemonic.endswith("_e32"):
        return Info((), every, ("vcc",))
    if CARRY_E32.match(mnemonic):
        return Info(every[:1], every[1:], ("vcc",))
    if mnemonic.startswith("v_writelane"):
        return Info((0,), every)  # also reads its old value in the other lanes
    if mnemonic.startswith("v_"):
        return Info(every[:1], every[1:])
    return Info((), every)


def _memory_space(mnemonic: str) -> str | None:
    for prefix, space in (("global_", "global"), ("flat_", "flat"), ("buffer_", "buffer"), ("ds_", "lds"),
                          ("s_load_", "scalar"), ("s_buffer_load_", "scalar")):
        if mnemonic.startswith(prefix):
            return space
    return None


def access_bytes(mnemonic: str) -> int:
    """Bytes one lane moves: the width in the name, doubled for ds_*2* (two addresses)."""
    words = mnemonic.split("_")
    nbytes = 4
    for word in reversed(words):
        if word in WIDTH_WORDS:
            nbytes = WIDTH_WORDS[word]
            break
    if mnemonic.startswith("ds_") and re.match(r"ds_(read|write|load|store)_?2", mnemonic):  # gfx11: ds_load_2addr_b32
        nbytes *= 2
    return nbytes


def _memory(mnemonic: str, space: str, count: int, has_return: bool) -> Info:
    nbytes = access_bytes(mnemonic)
    if "_atomic_" in mnemonic or (space == "lds" and not re.match(r"ds_(read|write|load|store|swizzle|permute|bpermute|nop|gws|append|consume)", mnemonic)):
        return _atomic(mnemonic, space, count, has_return, nbytes)
    store = bool(re.match(r"(global|flat|buffer)_store|ds_(write|store)", mnemonic))
    if mnemonic.startswith(("global_", "flat_")):
        address = (0, 2) if (store and count > 2) else (0,) if store else ((1, 2) if count > 2 else (1,))
        if store:
            return Info((), tuple(range(count)), access=Access(space, "store", nbytes, address, 1))
        return Info((0,), tuple(range(1, count)), access=Access(space, "load", nbytes, address))
    if space == "buffer":
        address = (1, 2, 3)
        if store:
            return Info((), tuple(range(count)), access=Access(space, "store", nbytes, address, 0))
        return Info((0,), tuple(range(1, count)), access=Access(space, "load", nbytes, address))
    if space == "scalar":
        return Info((0,), tuple(range(1, count)), access=Access(space, "load", nbytes, (1, 2) if count > 2 else (1,)))
    # lds
    if store:
        return Info((), tuple(range(count)), access=Access(space, "store", nbytes, (0,), 1 if count > 1 else None))
    if count >= 2:
        return Info((0,), tuple(range(1, count)), access=Access(space, "load", nbytes, (1,)))
    return Info((), tuple(range(count)))  # ds_nop, ds_gws_*: no address


def _atomic(mnemonic: str, space: str, count: int, has_return: bool, nbytes: int) -> Info:
    if "cmpswap" in mnemonic and nbytes in (8, 16) and not mnemonic.endswith(("_x2", "_b64")):  # gfx11: _b64 is one value's width
        nbytes = 4  # the compare and swap values together take two words
    elif "cmpswap" in mnemonic and mnemonic.endswith("_x2"):
        nbytes = 8
    if space == "lds":
        returns = "_rtn_" in mnemonic
        base = 1 if returns else 0
        return Info((0,) if returns else (), tuple(range(base, count)),
                    access=Access(space, "atomic", nbytes, (base,), base + 1 if count > base + 1 else None, returns))
    base = 1 if has_return else 0
    if space == "buffer":  # the data operand is also the returned value
        return Info((0,) if has_return else (), tuple(range(count)),
                    access=Access(space, "atomic", nbytes, (1, 2, 3), 0, has_return))
    address = (base, base + 2) if count > base + 2 else (base,)
    return Info((0,) if has_return else (), tuple(range(base, count)),
                access=Access(space, "atomic", nbytes, address, base + 1, has_return))


def registers(insn: ir.Instruction, indices: tuple[int, ...]) -> list[ir.RegRange]:
    out: list[ir.RegRange] = []
    for i in indices:
        if i < len(insn.operands):
            out.extend(ir.registers_in(insn.operands[i]))
    return out


def kernel_exits(instructions: list[ir.Instruction]) -> list[ir.Instruction]:
    return [i for i in instructions if semantics(i).ends_kernel]
