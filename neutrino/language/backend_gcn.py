"""The GCN and RDNA backends: Neutrino IR → GCN probe snippets (neutrino/isa/gcn/snippets.py), in a dialect.

The IR is written in the neutral operations by language/backend_neutral.py
(predication, SAVE, loops) and translated by the engine's own translation
(isa/gcn/translate.py), on probe registers instead of physical ones: a u32
in a `.v32`, a u64 in a `.v64` (halves `.lo`/`.hi`), a predicate is a lane
mask (`.s64` on wave64 CDNA, `.s32` on wave32 RDNA 3). So the lane
arithmetic (carry chains, VOP3's operand limits, mask instructions, gfx11's
spellings) is written once, for SAVE lowering and the DSL alike. What is
GCN's here: the probe registers, and the special values, read as the
dialect reads them (gfx11 has no s_memtime: its `clock` is the 20-bit
SHADER_CYCLES counter).
"""

from __future__ import annotations

from neutrino.isa.gcn import ir
from neutrino.isa.gcn.dialect import GFX9, Dialect
from neutrino.isa.gcn.printer import print_instruction
from neutrino.isa.gcn.translate import written
from neutrino.isa.rdna.dialect import GFX11
from neutrino.language.backend_neutral import NeutralBackend, NeutralEmitter
from neutrino.language.ir import FIELDS
from neutrino.passes.neutral_ops import Op, Val

TEMP = "%_gcn_"  # prefix of the backend's own registers


class GCNBackend(NeutralBackend):
    name = "gcn"
    dialect: Dialect = GFX9

    def emitter(self) -> "_Emitter":
        return _Emitter(self.dialect)


class RDNABackend(GCNBackend):
    """RDNA 3 (gfx11, wave32): GCN's backend in gfx11's dialect (spec/gcn.md, "RDNA")."""

    name = "rdna"
    dialect = GFX11


class _ProbeRegisters:
    """The translation's registers as probe registers, declared on first use: an IR register keeps its name (role
    `%name`), a helper is itself (ADDR, OUT, ...), the translation's own temporaries are ours (`%_gcn_<role>`)."""

    def __init__(self):
        self.decls: dict[str, str] = {}  # register → kind, in first-use order

    def sgprs(self, role: str, count: int = 1) -> ir.ProbeReg:
        return self.take(role, "s", count)

    def vgprs(self, role: str, count: int = 1) -> ir.ProbeReg:
        return self.take(role, "v", count)

    def take(self, role: str, file: str, count: int) -> ir.ProbeReg:
        if role in FIELDS:
            return ir.ProbeReg(role)
        name = role if role.startswith("%") else TEMP + role
        self.decls.setdefault(name, f"{file}{32 * count}")
        return ir.ProbeReg(name)


class _Emitter(NeutralEmitter):
    isa = "GCN"

    def __init__(self, dialect: Dialect):
        self.d, self.regs = dialect, _ProbeRegisters()
        self.lines: list[str] = []

    def text(self) -> str:
        by_kind: dict[str, list[str]] = {}
        for name, kind in self.regs.decls.items():
            by_kind.setdefault(kind, []).append(name)
        return "\n".join([f".reg .{kind} {', '.join(names)}" for kind, names in by_kind.items()] + self.lines)

    def run(self, *ops: Op) -> None:
        """The neutral operations, translated, as snippet lines."""
        self.lines += [print_instruction(i).lstrip() for i in written(ops, self.regs, self.d, "dsl")]

    def name(self, x) -> str:
        """A neutral operand as the snippet writes it."""
        if type(x) is Val:
            return str((self.regs.vgprs if x.lane else self.regs.sgprs)(x.role, x.words))
        return str(self.regs.sgprs(x.role, self.d.mask_sgprs))

    # -- the special values: the dialect's instructions
    def clock(self, d: str) -> None:
        self.read_clock(d, *self.d.clock)

    def time(self, d: str) -> None:
        self.read_clock(d, self.d.realtime, 64)

    def read_clock(self, d: str, read: str, bits: int) -> None:
        """A clock read into an SGPR of ours (a 64-bit one waited for), then zero-extended into the lanes' pair."""
        t = self.name(Val("clock", 2) if bits == 64 else Val("cycles"))
        self.lines.append(read.format(t))
        if bits == 64:
            self.lines += ["s_waitcnt lgkmcnt(0)", f"v_mov_b32_e32 {d}.lo, {t}.lo", f"v_mov_b32_e32 {d}.hi, {t}.hi"]
        else:
            self.lines += [f"v_mov_b32_e32 {d}.lo, {t}", f"v_mov_b32_e32 {d}.hi, 0"]

    def cuid(self, d: str) -> None:
        t = self.name(Val("cuid"))
        self.lines += [f"CUID {t}", f"v_mov_b32_e32 {d}, {t}"]

    def laneid(self, d: str) -> None:
        self.lines.append(f"v_mbcnt_lo_u32_b32 {d}, -1, 0")
        if self.d.wave_lanes == 64:
            self.lines.append(f"v_mbcnt_hi_u32_b32 {d}, -1, {d}")
