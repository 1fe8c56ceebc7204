"""The GCN backend: Neutrino IR → GCN probe snippets (neutrino/isa/gcn/snippets.py).

Values live per lane, as in the IR: a u32 in one VGPR (`.v32`), a u64 in a
VGPR pair (`.v64`, halves `.lo`/`.hi`), a predicate in an SGPR pair holding a
lane mask (`.s64`). Predication without branches: a guarded instruction
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

    def emitter(self) -> "_Emitter":
        return _Emitter()

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


class _Emitter:
    # what a lane mask is on wave64 (gfx9); the RDNA backend (backend_rdna.py) narrows them to wave32
    MASK = "s64"  # the probe register type of a predicate
    EXEC = "exec"
    AND, OR, ANDN2 = "s_and_b64", "s_or_b64", "s_andn2_b64"
    ADDC, SUBB = "v_addc_co_u32_e64", "v_subb_co_u32_e64"  # the high half of a 64-bit add / subtract

    def __init__(self):
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
        return self.declare(f"%{r.name}", self.MASK if r.type == PRED else KIND[r.type])

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
                    mask = self.temp(self.MASK)
                    self.emit(f"{self.ANDN2} {mask}, {self.EXEC}, {self.reg(ins.guard.reg)}")
                guard = f"@{mask} "
            values = [self.save_value(s) for s in ins.srcs]
            self.emit(f"{guard}SAVE [ {ins.map} ] {{{', '.join(values)}}}")
            return
        if ins.guard is None:
            self.compute(ins, self.reg(ins.dst))
            return
        # predication: compute into a temporary, keep the old value where the guard is false
        dst = self.reg(ins.dst)
        kind = self.MASK if ins.dst.type == PRED else KIND[ins.dst.type]
        tmp = self.temp(kind)
        self.compute(ins, tmp)
        guard = self.reg(ins.guard.reg)
        old, new = (tmp, dst) if ins.guard.negated else (dst, tmp)
        if kind == self.MASK:
            keep = self.temp(self.MASK)
            self.emit(f"{self.AND} {keep}, {new}, {guard}" if not ins.guard.negated else f"{self.ANDN2} {keep}, {old}, {guard}")
            self.emit(f"{self.ANDN2} {dst}, {dst}, {guard}" if not ins.guard.negated else f"{self.AND} {dst}, {dst}, {guard}")
            self.emit(f"{self.OR} {dst}, {dst}, {keep}")
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
    def op_clock(self, ins, d, wide, source="s_memtime"):
        t = self.declare(f"{TEMP}clock", "s64")
        self.emit(f"{source} {t}")
        self.emit("s_waitcnt lgkmcnt(0)")
        self.emit(f"v_mov_b32_e32 {d}.lo, {t}.lo")
        self.emit(f"v_mov_b32_e32 {d}.hi, {t}.hi")

    def op_time(self, ins, d, wide):
        self.op_clock(ins, d, wide, "s_memrealtime")

    def op_cuid(self, ins, d, wide):
        t = self.declare(f"{TEMP}cuid", "s32")
        self.emit(f"CUID {t}")
        self.emit(f"v_mov_b32_e32 {d}, {t}")

    def op_laneid(self, ins, d, wide):
        self.emit(f"v_mbcnt_lo_u32_b32 {d}, -1, 0")
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
        cy, sink = self.declare(f"{TEMP}carry", self.MASK), self.declare(f"{TEMP}carry_out", self.MASK)
        lo_a, lo_b, hi_a, hi_b = self.part(a, "lo"), self.part(b, "lo"), self.part(a, "hi"), self.part(b, "hi")
        t = self.temp("v32")  # the low half into a temporary: d may alias a source's high half
        self.emit(f"{first} {t}, {cy}, {lo_a}, {lo_b}")
        self.emit(f"{chain} {d}.hi, {sink}, {hi_a}, {hi_b}, {cy}")
        self.emit(f"v_mov_b32_e32 {d}.lo, {t}")

    def op_add(self, ins, d, wide):
        self._carry_chain(ins, d, wide, "v_add_co_u32_e64", self.ADDC, "v_add_u32_e64")

    def op_sub(self, ins, d, wide):
        self._carry_chain(ins, d, wide, "v_sub_co_u32_e64", self.SUBB, "v_sub_u32_e64")

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
        self.emit(f"{self.AND} {d}, {self.reg(ins.srcs[0])}, {self.reg(ins.srcs[1])}")

    def op_por(self, ins, d, wide):
        self.emit(f"{self.OR} {d}, {self.reg(ins.srcs[0])}, {self.reg(ins.srcs[1])}")

    def op_pnot(self, ins, d, wide):
        self.emit(f"{self.ANDN2} {d}, {self.EXEC}, {self.reg(ins.srcs[0])}")
