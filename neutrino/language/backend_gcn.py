"""The GCN and RDNA backends: Neutrino IR → GCN probe snippets (neutrino/isa/gcn/snippets.py), in a dialect.

Values live per lane, as in the IR: a u32 in one VGPR (`.v32`), a u64 in a
VGPR pair (`.v64`, halves `.lo`/`.hi`), a predicate in SGPRs holding a lane
mask (`.s64` on wave64 CDNA, `.s32` on wave32 RDNA 3). What the generations
spell differently (mask instructions, the carry chain, how clocks are read:
gfx11 has no s_memtime, its `clock` is the 20-bit SHADER_CYCLES counter) is
their `Dialect`'s (neutrino/isa/gcn/dialect.py). Predication without branches: a guarded instruction
computes into a temporary and `v_cndmask` (or mask arithmetic, for
predicates) keeps the old value in lanes where the guard is false; a guarded
SAVE keeps its guard (`@%p SAVE ...`) and SAVE lowering narrows the lanes.

gfx9's VOP3 encoding takes no literal constant, so a constant outside the
inline range (-16..64) is first moved into a VGPR. Division and remainder
exist only by powers of two (there is no integer divide instruction).
"""

from __future__ import annotations

from typing import Sequence

from neutrino.errors import Diagnostic, Location
from neutrino.isa.gcn.dialect import GFX9, Dialect
from neutrino.isa.rdna.dialect import GFX11
from neutrino.language.backend import Backend
from neutrino.language.errors import DslError
from neutrino.language.ir import PRED, U32, U64, Field, Imm, Instr, Reg
from neutrino.language.loops import loop_tree

KIND = {U32: "v32", U64: "v64", PRED: "s64"}
CMP = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
BITWISE = {"and": "v_and_b32_e64", "or": "v_or_b32_e64", "xor": "v_xor_b32_e64"}
TEMP = "%_gcn_"  # prefix of the backend's own registers


class GCNBackend(Backend):
    name = "gcn"
    dialect: Dialect = GFX9

    def emitter(self) -> "_Emitter":
        return _Emitter(self.dialect)

    def snippet(self, body: Sequence[Instr]) -> str:
        emitter = self.emitter()
        self.emit_items(emitter, loop_tree(body))
        return emitter.text()

    def emit_items(self, emitter: "_Emitter", items: list) -> None:
        """GCN probes have no branches: a loop is unrolled (spec/language.md, "Loops"). The backend's
        temporaries live within one IR instruction, so every trip reuses the first trip's."""
        for item in items:
            if isinstance(item, tuple):
                trips, inner = item
                first = emitter.temps
                for _ in range(trips):
                    emitter.temps = first
                    self.emit_items(emitter, inner)
            else:
                emitter.instruction(item)


class RDNABackend(GCNBackend):
    """RDNA 3 (gfx11, wave32): GCN's backend in gfx11's dialect (spec/gcn.md, "RDNA")."""

    name = "rdna"
    dialect = GFX11


class _Emitter:
    def __init__(self, dialect: Dialect):
        # a lane mask (the probe register type of a predicate) and the instructions on it: wave64 or wave32
        self.d, self.mask_type, self.exec = dialect, f"s{dialect.wave_lanes}", dialect.exec
        self.s_and, self.s_or, self.and_not = dialect.mask("s_and"), dialect.mask("s_or"), dialect.and_not
        self.addc, self.subb = dialect.add_carry_in, dialect.sub_borrow_in  # the high half of a 64-bit add / subtract
        self.decls: dict[str, str] = {}  # register → kind, in first-use order
        self.lines: list[str] = []
        self.temps = 0

    def text(self) -> str:
        by_kind: dict[str, list[str]] = {}
        for name, kind in self.decls.items():
            by_kind.setdefault(kind, []).append(name)
        decls = [f".reg .{kind} {', '.join(names)}" for kind, names in by_kind.items()]
        return "\n".join(decls + self.lines)

    # -- registers and operands
    def declare(self, name: str, kind: str) -> str:
        self.decls.setdefault(name, kind)
        return name

    def reg(self, r: Reg) -> str:
        return self.declare(f"%{r.name}", self.mask_type if r.type == PRED else KIND[r.type])

    def temp(self, kind: str) -> str:
        self.temps += 1
        return self.declare(f"{TEMP}{kind}_{self.temps}", kind)

    def emit(self, line: str) -> None:
        self.lines.append(line)

    def part(self, op, which: str) -> str:
        """The low or high 32 bits of a source, as an operand any VOP3 instruction accepts."""
        if isinstance(op, Imm):
            value = op.value if which == "lo" else op.value >> 32
            return self.constant(value & 0xFFFFFFFF)
        if isinstance(op, Field):
            if op.type == U32 or op.name == "BYTES":
                return op.name if which == "lo" else "0"
            return f"{op.name}.{which}"
        if op.type == U32:
            return self.reg(op) if which == "lo" else "0"
        return f"{self.reg(op)}.{which}"

    def constant(self, value: int) -> str:
        signed = value - (1 << 32) if value >= 1 << 31 else value
        if -16 <= signed <= 64:
            return str(signed)
        t = self.temp("v32")
        self.emit(f"v_mov_b32_e32 {t}, {hex(value)}")
        return t

    def pair(self, op) -> str:
        """A 64-bit source as a VGPR pair (VOP3 64-bit operands take no literal)."""
        if isinstance(op, Reg) and op.type == U64:
            return self.reg(op)
        if isinstance(op, Field) and op.type == U64 and op.name != "BYTES":
            return op.name
        t = self.temp("v64")
        self.emit(f"v_mov_b32_e32 {t}.lo, {self.part(op, 'lo')}")
        self.emit(f"v_mov_b32_e32 {t}.hi, {self.part(op, 'hi')}")
        return t

    # -- instructions
    def instruction(self, ins: Instr) -> None:
        if ins.op == "save":
            guard = ""
            if ins.guard is not None:
                mask = self.reg(ins.guard.reg)
                if ins.guard.negated:  # SAVE takes a lane mask: its complement within the active lanes
                    mask = self.temp(self.mask_type)
                    self.emit(f"{self.and_not} {mask}, {self.exec}, {self.reg(ins.guard.reg)}")
                guard = f"@{mask} "
            values = [self.save_value(s) for s in ins.srcs]
            self.emit(f"{guard}SAVE [ {ins.map} ] {{{', '.join(values)}}}")
            return
        if ins.guard is None:
            self.compute(ins, self.reg(ins.dst))
            return
        # predication: compute into a temporary, keep the old value where the guard is false
        dst = self.reg(ins.dst)
        kind = self.mask_type if ins.dst.type == PRED else KIND[ins.dst.type]
        tmp = self.temp(kind)
        self.compute(ins, tmp)
        guard = self.reg(ins.guard.reg)
        old, new = (tmp, dst) if ins.guard.negated else (dst, tmp)
        if kind == self.mask_type:
            keep = self.temp(self.mask_type)
            self.emit(f"{self.s_and} {keep}, {new}, {guard}" if not ins.guard.negated else f"{self.and_not} {keep}, {old}, {guard}")
            self.emit(f"{self.and_not} {dst}, {dst}, {guard}" if not ins.guard.negated else f"{self.s_and} {dst}, {dst}, {guard}")
            self.emit(f"{self.s_or} {dst}, {dst}, {keep}")
        elif kind == "v32":
            self.emit(f"v_cndmask_b32_e64 {dst}, {old}, {new}, {guard}")
        else:
            for h in ("lo", "hi"):
                self.emit(f"v_cndmask_b32_e64 {dst}.{h}, {old}.{h}, {new}.{h}, {guard}")

    def save_value(self, src) -> str:
        if isinstance(src, Reg):
            return self.reg(src)
        if isinstance(src, Field):
            return src.name
        t = self.temp("v64" if src.type == U64 else "v32")
        if src.type == U64:
            self.emit(f"v_mov_b32_e32 {t}.lo, {hex(src.value & 0xFFFFFFFF)}")
            self.emit(f"v_mov_b32_e32 {t}.hi, {hex(src.value >> 32)}")
        else:
            self.emit(f"v_mov_b32_e32 {t}, {hex(src.value)}")
        return t

    def compute(self, ins: Instr, d: str) -> None:
        op, wide = ins.op, ins.type == U64
        method = getattr(self, f"op_{op}", None)
        if method is None:
            raise self.error(ins, f"{op} is not supported by the GCN backend")
        method(ins, d, wide)

    @staticmethod
    def error(ins: Instr, message: str) -> DslError:
        return DslError(Diagnostic(ins.loc or Location("<dsl>"), message, hint="GCN has no integer divide; divide by powers of two"))

    def halves(self, d: str, wide: bool) -> list[tuple[str, str]]:
        return [(f"{d}.lo", "lo"), (f"{d}.hi", "hi")] if wide else [(d, "lo")]

    # special values
    def op_clock(self, ins, d, wide):
        self.read_clock(d, *self.d.clock)

    def op_time(self, ins, d, wide):
        self.read_clock(d, self.d.realtime, 64)

    def read_clock(self, d, read: str, bits: int):
        """A clock read into an SGPR of ours (a 64-bit one waited for), then zero-extended into the lanes' pair."""
        if bits < 64:
            t = self.declare(f"{TEMP}cycles", "s32")
            self.emit(read.format(t))
            self.emit(f"v_mov_b32_e32 {d}.lo, {t}")
            self.emit(f"v_mov_b32_e32 {d}.hi, 0")
            return
        t = self.declare(f"{TEMP}clock", "s64")
        self.emit(read.format(t))
        self.emit("s_waitcnt lgkmcnt(0)")
        self.emit(f"v_mov_b32_e32 {d}.lo, {t}.lo")
        self.emit(f"v_mov_b32_e32 {d}.hi, {t}.hi")

    def op_cuid(self, ins, d, wide):
        t = self.declare(f"{TEMP}cuid", "s32")
        self.emit(f"CUID {t}")
        self.emit(f"v_mov_b32_e32 {d}, {t}")

    def op_laneid(self, ins, d, wide):
        self.emit(f"v_mbcnt_lo_u32_b32 {d}, -1, 0")
        if self.d.wave_lanes == 64:
            self.emit(f"v_mbcnt_hi_u32_b32 {d}, -1, {d}")

    # moves and conversions
    def op_mov(self, ins, d, wide):
        for dst, h in self.halves(d, wide):
            self.emit(f"v_mov_b32_e32 {dst}, {self.part(ins.srcs[0], h)}")

    def op_cvt(self, ins, d, wide):
        self.op_mov(ins, d, wide)  # u64 → u32 keeps the low half; u32 → u64 zero-extends (part 'hi' of a u32 is 0)

    # arithmetic
    def _carry_chain(self, ins, d, wide, first, chain, plain):
        a, b = ins.srcs
        if not wide:
            self.emit(f"{plain} {d}, {self.part(a, 'lo')}, {self.part(b, 'lo')}")
            return
        cy, sink = self.declare(f"{TEMP}carry", self.mask_type), self.declare(f"{TEMP}carry_out", self.mask_type)
        lo_a, lo_b, hi_a, hi_b = self.part(a, "lo"), self.part(b, "lo"), self.part(a, "hi"), self.part(b, "hi")
        t = self.temp("v32")  # the low half into a temporary: d may alias a source's high half
        self.emit(f"{first} {t}, {cy}, {lo_a}, {lo_b}")
        self.emit(f"{chain} {d}.hi, {sink}, {hi_a}, {hi_b}, {cy}")
        self.emit(f"v_mov_b32_e32 {d}.lo, {t}")

    def op_add(self, ins, d, wide):
        self._carry_chain(ins, d, wide, "v_add_co_u32_e64", self.addc, "v_add_u32_e64")

    def op_sub(self, ins, d, wide):
        self._carry_chain(ins, d, wide, "v_sub_co_u32_e64", self.subb, "v_sub_u32_e64")

    def op_neg(self, ins, d, wide):
        zero = Imm(0, ins.type)
        self.op_sub(Instr("sub", ins.type, ins.dst, (zero, ins.srcs[0]), loc=ins.loc), d, wide)

    def op_mul(self, ins, d, wide):
        a, b = ins.srcs
        if not wide:
            self.emit(f"v_mul_lo_u32 {d}, {self.part(a, 'lo')}, {self.part(b, 'lo')}")
            return
        lo, hi, cross1, cross2 = self.temp("v32"), self.temp("v32"), self.temp("v32"), self.temp("v32")
        al, ah, bl, bh = self.part(a, "lo"), self.part(a, "hi"), self.part(b, "lo"), self.part(b, "hi")
        self.emit(f"v_mul_lo_u32 {lo}, {al}, {bl}")
        self.emit(f"v_mul_hi_u32 {hi}, {al}, {bl}")
        self.emit(f"v_mul_lo_u32 {cross1}, {al}, {bh}")
        self.emit(f"v_mul_lo_u32 {cross2}, {ah}, {bl}")
        self.emit(f"v_add3_u32 {d}.hi, {hi}, {cross1}, {cross2}")
        self.emit(f"v_mov_b32_e32 {d}.lo, {lo}")

    def _power_of_two(self, ins) -> int:
        b = ins.srcs[1]
        if not isinstance(b, Imm) or b.value <= 0 or b.value & (b.value - 1):
            raise self.error(ins, f"{ins.op} by a value other than a constant power of two is not supported on GCN")
        return b.value

    def op_div(self, ins, d, wide):
        shift = self._power_of_two(ins).bit_length() - 1
        self.op_shr(Instr("shr", ins.type, ins.dst, (ins.srcs[0], Imm(shift, ins.type)), loc=ins.loc), d, wide)

    def op_rem(self, ins, d, wide):
        mask = self._power_of_two(ins) - 1
        self.op_and(Instr("and", ins.type, ins.dst, (ins.srcs[0], Imm(mask, ins.type)), loc=ins.loc), d, wide)

    # bitwise
    def _bitwise(self, ins, d, wide):
        a, b = ins.srcs
        for dst, h in self.halves(d, wide):
            self.emit(f"{BITWISE[ins.op]} {dst}, {self.part(a, h)}, {self.part(b, h)}")

    op_and = op_or = op_xor = _bitwise

    def op_not(self, ins, d, wide):
        for dst, h in self.halves(d, wide):
            self.emit(f"v_not_b32_e32 {dst}, {self.part(ins.srcs[0], h)}")

    def _shift(self, ins, d, wide, name):
        a, b = ins.srcs
        amount = self.part(b, "lo")
        if wide:
            self.emit(f"{name}_b64 {d}, {amount}, {self.pair(a)}")
        else:
            self.emit(f"{name}_b32_e64 {d}, {amount}, {self.part(a, 'lo')}")

    def op_shl(self, ins, d, wide):
        self._shift(ins, d, wide, "v_lshlrev")

    def op_shr(self, ins, d, wide):
        self._shift(ins, d, wide, "v_lshrrev")

    # comparisons and predicates
    def op_setp(self, ins, d, wide):
        a, b = ins.srcs
        if wide:
            self.emit(f"v_cmp_{CMP[ins.cmp]}_u64_e64 {d}, {self.pair(a)}, {self.pair(b)}")
        else:
            self.emit(f"v_cmp_{CMP[ins.cmp]}_u32_e64 {d}, {self.part(a, 'lo')}, {self.part(b, 'lo')}")

    def op_selp(self, ins, d, wide):
        a, b, p = ins.srcs
        pred = self.reg(p)
        for dst, h in self.halves(d, wide):
            self.emit(f"v_cndmask_b32_e64 {dst}, {self.part(b, h)}, {self.part(a, h)}, {pred}")

    def op_pand(self, ins, d, wide):
        self.emit(f"{self.s_and} {d}, {self.reg(ins.srcs[0])}, {self.reg(ins.srcs[1])}")

    def op_por(self, ins, d, wide):
        self.emit(f"{self.s_or} {d}, {self.reg(ins.srcs[0])}, {self.reg(ins.srcs[1])}")

    def op_pnot(self, ins, d, wide):
        self.emit(f"{self.and_not} {d}, {self.exec}, {self.reg(ins.srcs[0])}")
