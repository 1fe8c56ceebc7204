"""The GCN and RDNA backends: Neutrino IR → GCN probe snippets (neutrino/isa/gcn/snippets.py), in a dialect.

Each IR instruction is written in the neutral operations (passes/neutral_ops.py)
and translated by the engine's own translation (isa/gcn/translate.py), on
probe registers instead of physical ones: values live per lane, as in the IR (a
u32 in a `.v32`, a u64 in a `.v64` with halves `.lo`/`.hi`), a predicate is a
lane mask (`.s64` on wave64 CDNA, `.s32` on wave32 RDNA 3). So the lane
arithmetic (carry chains, VOP3's operand limits, mask instructions, gfx11's
spellings) is written once, for SAVE lowering and the DSL alike.

Predication without branches: a guarded instruction computes into a
temporary and a `select` (mask logic, for predicates) keeps the old value in
lanes where the guard is false; a guarded SAVE keeps its guard (`@%p SAVE
...`) and SAVE lowering narrows the lanes. Division and remainder exist only
by powers of two (there is no integer divide instruction). How a generation
reads its clocks is its `Dialect`'s: gfx11 has no s_memtime, its `clock` is
the 20-bit SHADER_CYCLES counter.
"""

from __future__ import annotations

from typing import Sequence

from neutrino.errors import Diagnostic, Location
from neutrino.isa.gcn import ir
from neutrino.isa.gcn.dialect import GFX9, Dialect
from neutrino.isa.gcn.printer import print_instruction
from neutrino.isa.gcn.translate import written
from neutrino.isa.rdna.dialect import GFX11
from neutrino.language.backend import Backend
from neutrino.language.errors import DslError
from neutrino.language.ir import FIELDS, PRED, U64, Field, Imm, Instr, Reg
from neutrino.language.loops import loop_tree
from neutrino.passes.neutral_ops import ACTIVE, Op, Pred, Val

TEMP = "%_gcn_"  # prefix of the backend's own registers
#: IR operations that are one neutral operation of the same name, on the same operands
SAME = ("add", "sub", "mul", "and", "or", "xor", "not", "pand", "por")


class GCNBackend(Backend):
    name = "gcn"
    dialect: Dialect = GFX9

    def snippet(self, body: Sequence[Instr]) -> str:
        emitter = _Emitter(self.dialect)
        self.emit_items(emitter, loop_tree(body))
        return emitter.text()

    def emit_items(self, emitter: "_Emitter", items: list) -> None:
        """GCN probes have no branches: a loop is unrolled (spec/language.md, "Loops"); the backend's
        temporaries are named by their role, so every trip reuses the first trip's."""
        for item in items:
            if isinstance(item, tuple):
                trips, inner = item
                for _ in range(trips):
                    self.emit_items(emitter, inner)
            else:
                emitter.instruction(item)


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


class _Emitter:
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

    # -- IR operands as neutral ones
    def value(self, x, index: int = 0):
        """A register or helper as a Val (a predicate as a Pred), an immediate as an integer: a u64 one past 32 bits
        first moved into a temporary."""
        if isinstance(x, Reg):
            return Pred("%" + x.name) if x.type == PRED else Val("%" + x.name, 2 if x.type == U64 else 1, lane=True)
        if isinstance(x, Field):
            return Val(x.name, 2 if x.type == U64 and x.name != "BYTES" else 1, lane=True)  # BYTES is 32-bit
        if x.value < 1 << 32:
            return x.value
        wide = Val(f"imm{index}", 2, lane=True)
        self.run(Op("mov", wide.word(0), x.value & 0xFFFFFFFF), Op("mov", wide.word(1), x.value >> 32))
        return wide

    # -- instructions
    def instruction(self, ins: Instr) -> None:
        if ins.op == "save":
            return self.save(ins)
        dst = self.value(ins.dst)
        if ins.guard is None:
            return self.compute(ins, dst)
        # predication: compute into a temporary, keep the old value where the guard is false
        guard, negated = self.value(ins.guard.reg), ins.guard.negated
        tmp = Pred("guarded") if type(dst) is Pred else Val(f"guarded{dst.words}", dst.words, lane=True)
        self.compute(ins, tmp)
        if type(dst) is Pred:
            keep = Pred("keep")
            self.run(Op("pandn" if negated else "pand", keep, tmp, guard),
                     Op("pand" if negated else "pandn", dst, dst, guard), Op("por", dst, dst, keep))
        else:
            self.run(Op("select", dst, guard, *((dst, tmp) if negated else (tmp, dst))))

    def save(self, ins: Instr) -> None:
        guard = ""
        if ins.guard is not None:
            mask = self.value(ins.guard.reg)
            if ins.guard.negated:  # SAVE takes a lane mask: its complement within the active lanes
                mask = Pred("save_mask")
                self.run(Op("pandn", mask, ACTIVE, self.value(ins.guard.reg)))
            guard = f"@{self.name(mask)} "
        values = [self.value(src, i) for i, src in enumerate(ins.srcs)]
        for i, (src, value) in enumerate(zip(ins.srcs, values)):
            if isinstance(src, Imm):  # SAVE takes registers: a constant first moved into one
                values[i] = Val(f"save_imm{i}", 2 if src.type == U64 else 1, lane=True)
                self.run(Op("mov", values[i], value))
        values = [self.name(v) for v in values]
        self.lines.append(f"{guard}SAVE [ {ins.map} ] {{{', '.join(values)}}}")

    def compute(self, ins: Instr, d) -> None:
        op, srcs = ins.op, [self.value(s, i) for i, s in enumerate(ins.srcs)]
        if op in SAME:
            self.run(Op(op, d, *srcs))
        elif op in ("mov", "cvt"):  # u64 → u32 keeps the low half; u32 → u64 zero-extends
            self.run(Op("mov", d, srcs[0]))
        elif op == "neg":
            self.run(Op("sub", d, 0, srcs[0]))
        elif op in ("shl", "shr"):  # the amount is its low word
            amount = srcs[1].word(0) if type(srcs[1]) is Val and srcs[1].words == 2 else srcs[1]
            self.run(Op(op, d, srcs[0], amount))
        elif op in ("div", "rem"):
            b = ins.srcs[1]
            if not isinstance(b, Imm) or b.value <= 0 or b.value & (b.value - 1):
                raise self.error(ins, f"{op} by a value other than a constant power of two is not supported on GCN")
            if op == "div":
                self.run(Op("shr", d, srcs[0], b.value.bit_length() - 1))
            else:
                self.run(Op("and", d, srcs[0], self.value(Imm(b.value - 1, b.type), 1)))
        elif op == "setp":
            self.run(Op("cmp", d, ins.cmp, *srcs))
        elif op == "selp":
            self.run(Op("select", d, srcs[2], srcs[0], srcs[1]))
        elif op == "pnot":
            self.run(Op("pandn", d, ACTIVE, srcs[0]))
        elif op in ("clock", "time", "cuid", "laneid"):
            getattr(self, op)(self.name(d))
        else:
            raise self.error(ins, f"{op} is not supported by the GCN backend")

    @staticmethod
    def error(ins: Instr, message: str) -> DslError:
        return DslError(Diagnostic(ins.loc or Location("<dsl>"), message, hint="GCN has no integer divide; divide by powers of two"))

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
