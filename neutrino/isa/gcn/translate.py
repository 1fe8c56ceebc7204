"""The neutral operations (neutrino/passes/neutral_ops.py) as GCN/RDNA instructions, in the kernel's dialect.

What is GCN's here: a one-per-wave value lives in SGPRs, a per-lane one in
VGPRs, a predicate in a lane mask (an SGPR pair on wave64, one SGPR on
wave32); a per-lane operation takes its VOP3 form, where gfx9 reads at most
one SGPR (a carry in counts) and no literal, so further SGPRs and literals are
first moved into VGPRs of ours; 64-bit arithmetic is a carry chain; a value
that a scalar load fills is waited for (`s_waitcnt lgkmcnt(0)`) before it is
used; `lanes` narrows `exec` (the old mask saved in one register per depth)
and `end` restores it; memory is `global_` instructions with an SGPR base
and a VGPR offset, or a VGPR address.
"""

from __future__ import annotations

import functools

import attrs

from neutrino.isa.gcn import ir
from neutrino.isa.gcn.registers import GcnKernelState, half, insn
from neutrino.passes.neutral_ops import ACTIVE, Pred, Val

INLINE = range(-16, 65)  # integers every operand slot takes as they are
#: 32-bit operations: (SALU, VALU) mnemonics (None: the dialect's add)
ALU = {"add": ("s_add_u32", None), "mul": ("s_mul_i32", "v_mul_lo_u32"), "and": ("s_and_b32", "v_and_b32_e64"),
       "or": ("s_or_b32", "v_or_b32_e64"), "xor": ("s_xor_b32", "v_xor_b32_e64"),
       "shl": ("s_lshl_b32", "v_lshlrev_b32_e64"), "shr": ("s_lshr_b32", "v_lshrrev_b32_e64")}
SHIFTS = ("shl", "shr")


def words(x) -> int:
    if type(x) is Val:
        return 1 if x.part is not None else x.words
    return x.count if type(x) is ir.RegRange else 1


def is_lane(x) -> bool:
    return x.lane if type(x) is Val else type(x) is ir.RegRange and x.file != "s"


class GcnTranslation:
    """Translates neutral operations for one kernel; `params`: the kernel parameters `param` reads, name → kernarg offset.

    A list of operations is translated once per dialect (`_template`, with registers standing for roles) and each
    kernel gets it with its own registers, taken in the same order: kernels and sites of one shape share the work."""

    def __init__(self, state: GcnKernelState, origin: str, params: dict[str, int] | None = None):
        self.state, self.origin, self.params = state, origin, tuple(sorted((params or {}).items()))
        self.pending = False  # the last translation left a scalar load not waited for

    def translate(self, ops: list, shared: bool = True) -> list[ir.Instruction]:
        """The instructions of `ops`; `shared=False` for operations on one site's own operands (no template)."""
        if not shared:
            writer = _write(_Writer(self.state.registers, self.state.dialect, self.origin, dict(self.params)), ops)
            self.pending = bool(writer.pending)
            return writer.out
        template = _template(tuple(ops), self.state.dialect, self.origin, self.params)
        self.pending = template.pending
        return template.instantiate(self.state.registers, self.origin)


ROLE_BASE, ROLE_SPAN = 1 << 20, 64  # a role's stand-in registers: far above any real one, `span` apart


class _Roles:
    """An allocator of stand-ins: role k's registers start at ROLE_BASE + ROLE_SPAN * k, in its file."""

    def __init__(self):
        self.taken: dict[str, ir.RegRange] = {}
        self.order: list[tuple[str, str, int]] = []  # (role, file, count), in first-use order

    def sgprs(self, role: str, count: int = 1) -> ir.RegRange:
        return self._take(role, "s", count)

    def vgprs(self, role: str, count: int = 1) -> ir.RegRange:
        return self._take(role, "v", count)

    def _take(self, role: str, file: str, count: int) -> ir.RegRange:
        if role not in self.taken:
            self.taken[role] = ir.RegRange(file, ROLE_BASE + ROLE_SPAN * len(self.order), count, bracketed=count > 1)
            self.order.append((role, file, count))
        return self.taken[role]


@attrs.frozen
class _Template:
    code: tuple  # (mnemonic, operands, modifiers); an int operand is an index into `slots`
    slots: tuple[tuple[str, int, int, int, bool], ...]  # (file, role index, word, count, bracketed) of each stand-in
    roles: tuple[tuple[str, str, int], ...]  # (role, file, count) in first-use order: the order registers are taken in
    pending: bool

    def instantiate(self, registers, origin: str) -> list[ir.Instruction]:
        homes = [(registers.sgprs if file == "s" else registers.vgprs)(role, count) for role, file, count in self.roles]
        real = [_register(file, homes[k].first + word, count, bracketed) for file, k, word, count, bracketed in self.slots]
        return [ir.Instruction(m, tuple(real[o] if type(o) is int else o for o in operands), modifiers, origin=origin)
                for m, operands, modifiers in self.code]


@functools.lru_cache(maxsize=4096)  # registers are values: kernels share the few they are given
def _register(file: str, first: int, count: int, bracketed: bool) -> ir.RegRange:
    return ir.RegRange(file, first, count, bracketed)


@functools.lru_cache(maxsize=512)  # a pure function of its arguments: kernels and sites of one shape share it
def _template(ops: tuple, dialect, origin: str, params: tuple) -> _Template:
    writer = _write(_Writer(_Roles(), dialect, origin, dict(params)), ops)
    slots: dict[ir.RegRange, int] = {}

    def slot(o):
        if type(o) is not ir.RegRange or o.first < ROLE_BASE:
            return o
        return slots.setdefault(o, len(slots))

    code = tuple((i.mnemonic, tuple(map(slot, i.operands)), i.modifiers) for i in writer.out)
    stand_ins = tuple((o.file, *divmod(o.first - ROLE_BASE, ROLE_SPAN), o.count, o.bracketed) for o in slots)
    return _Template(code, stand_ins, tuple(writer.regs.order), bool(writer.pending))


def written(ops, registers, dialect, origin: str) -> list[ir.Instruction]:
    """`ops` on whatever registers `registers` hands out (`sgprs`/`vgprs` by role), without templates: the DSL's
    backends write probe registers so (language/backend_gcn.py)."""
    return _write(_Writer(registers, dialect, origin, {}), ops).out


def _write(writer: "_Writer", ops) -> "_Writer":
    for op in ops:
        if writer.pending and any(type(x) is Val and x.role in writer.pending for x in op[1:]):
            writer.emit("s_waitcnt", "lgkmcnt(0)")
            writer.pending.clear()
        getattr(writer, "op_" + op.name)(*op[1:])
    return writer


class _Writer:
    """The instructions of each operation, on stand-in registers."""

    def __init__(self, regs: _Roles, dialect, origin: str, params: dict[str, int]):
        self.regs, self.d, self.origin, self.params = regs, dialect, origin, params
        self.pending: set[str] = set()  # roles a scalar load fills, not yet waited for
        self.depth = 0  # `lanes` not yet ended
        self.out: list = []

    def emit(self, mnemonic: str, *operands, offset: int = 0) -> None:
        self.out.append(insn(mnemonic, *map(self.reg, operands), origin=self.origin,
                             modifiers=(f"offset:{offset}",) if offset else ()))

    def reg(self, x):
        """The instruction operand of a neutral one."""
        kind = type(x)
        if kind is Val:
            whole = (self.regs.vgprs if x.lane else self.regs.sgprs)(x.role, x.words)
            return whole if x.part is None else half(whole, x.part)
        if kind is Pred:
            return self.regs.sgprs(x.role, self.d.mask_sgprs)
        return self.d.exec if x is ACTIVE else x

    def word(self, x, index: int):
        """32-bit word `index` of an operand; past its width 0 (an integer: its sign)."""
        if type(x) is int:
            return x if index == 0 else -(x < 0)
        if index >= words(x):
            return 0
        reg = self.reg(x)  # its registers taken now: the order of first use is the order registers are taken in
        if type(x) is Val:  # kept neutral, so that what is per lane stays known (a probe register does not say)
            return x.word(index) if words(x) > 1 else x
        return reg if words(x) == 1 else half(reg, index)

    def vop3(self, *sources, sgprs: int = 1) -> list:
        """Sources a VOP3 takes: literals and SGPRs past the first `sgprs` moved into VGPRs."""
        out = []
        for i, x in enumerate(map(self.reg, sources)):
            literal = (type(x) is int and x not in INLINE) or (type(x) is ir.Imm and x.value not in INLINE)
            scalar = literal or (type(x) is ir.RegRange and x.file == "s") or isinstance(x, str)
            if literal or (scalar and sgprs == 0):
                tmp = self.regs.vgprs(f"op_tmp{i}")
                self.emit("v_mov_b32_e32", tmp, x)
                x = tmp
            elif scalar:
                sgprs -= 1
            out.append(x)
        return out

    # -- arithmetic: one-per-wave values in SALU instructions, per-lane ones in VALU (VOP3)
    def op_mov(self, d, a, *_) -> None:
        for i in range(words(d)):
            mnemonic = "v_mov_b32_e32" if is_lane(d) else "v_readfirstlane_b32" if is_lane(a) else "s_mov_b32"
            self.emit(mnemonic, self.word(d, i), self.word(a, i))

    def alu(self, name: str, d, a, b) -> None:
        """A 32-bit operation of ALU (the vector shifts take the amount first)."""
        scalar, vector = ALU[name]
        if not is_lane(d):
            self.emit(scalar, d, a, b)
        else:
            self.emit(vector or self.d.add_u32.replace("_e32", "_e64"), d, *self.vop3(*((b, a) if name in SHIFTS else (a, b))))

    def op_add(self, d, a, b, *_, sub: bool = False) -> None:
        """d = a + b (a - b with `sub`); 64 bits as a carry chain."""
        if words(d) == 1 and not sub:
            return self.alu("add", d, a, b)
        if words(d) == 1:  # the dialect's add without carry, as a subtract
            mnemonic = self.d.add_u32.replace("add", "sub").replace("_e32", "_e64") if is_lane(d) else "s_sub_u32"
            return self.emit(mnemonic, d, *(self.vop3(a, b) if is_lane(d) else (a, b)))
        w, low = self.word, ("v_sub_co_u32_e64", self.d.sub_borrow_in) if sub else ("v_add_co_u32_e64", self.d.add_carry_in)
        if not is_lane(d):
            self.emit("s_sub_u32" if sub else "s_add_u32", w(d, 0), w(a, 0), w(b, 0))
            self.emit("s_subb_u32" if sub else "s_addc_u32", w(d, 1), w(a, 1), w(b, 1))
            return
        carry, sink = self.regs.sgprs("carry", self.d.mask_sgprs), self.regs.sgprs("carry_out", self.d.mask_sgprs)
        self.emit(low[0], w(d, 0), carry, *self.vop3(w(a, 0), w(b, 0)))
        self.emit(low[1], w(d, 1), sink, *self.vop3(w(a, 1), w(b, 1), sgprs=0), carry)

    def op_sub(self, d, a, b, *_) -> None:
        self.op_add(d, a, b, sub=True)

    def op_mul(self, d, a, b, *_) -> None:
        """The low word; a 64-bit d also the high one (32-bit a and b: the whole product; else its low 64 bits)."""
        if words(d) == 2 and max(words(a), words(b)) == 2:
            return self.mul_wide(d, a, b)
        a, b = self.vop3(a, b) if is_lane(d) else (a, b)
        if words(d) == 2:
            self.emit("v_mul_hi_u32" if is_lane(d) else "s_mul_hi_u32", self.word(d, 1), a, b)
        self.alu("mul", self.word(d, 0), a, b)

    def mul_wide(self, d, a, b) -> None:
        """The low 64 bits of a 64 x 64-bit product, per lane (d a VGPR pair): a0 b0 + (a0 b1 + a1 b0) << 32, in
        temporaries first (d may be a or b)."""
        lo, hi, cross = Val("mul_lo", lane=True), Val("mul_hi", lane=True), [Val(f"mul_x{i}", lane=True) for i in (1, 2)]
        a0, a1, b0, b1 = self.vop3(self.word(a, 0), self.word(a, 1), self.word(b, 0), self.word(b, 1), sgprs=0)
        self.emit("v_mul_lo_u32", lo, a0, b0)
        self.emit("v_mul_hi_u32", hi, a0, b0)
        self.emit("v_mul_lo_u32", cross[0], a0, b1)
        self.emit("v_mul_lo_u32", cross[1], a1, b0)
        self.emit("v_add3_u32", self.word(d, 1), hi, *cross)
        self.emit("v_mov_b32_e32", self.word(d, 0), lo)

    def op_shl(self, d, a, n, *_, name: str = "shl") -> None:
        if words(d) == 1:
            return self.alu(name, d, a, n)
        if not is_lane(d):
            return self.emit(ALU[name][0].replace("32", "64"), d, self.pair(a, lane=False), n)
        self.emit(ALU[name][1].replace("b32_e64", "b64"), d, *self.vop3(n), self.pair(a))

    def op_shr(self, d, a, n, *_) -> None:
        self.op_shl(d, a, n, name="shr")

    def pair(self, x, slot: int = 0, lane: bool = True):
        """Operand `slot` of a 64-bit shift or compare as a register pair of its file (they take no literal and no
        32-bit register), moved into one of ours if need be."""
        if words(x) == 2 and is_lane(x) == lane:
            return self.reg(x)
        tmp = Val(f"pair_tmp{slot}" if lane else "pair_stmp", 2, lane)
        self.op_mov(tmp, x)
        return self.reg(tmp)

    def bitwise(self, name: str, d, a, b) -> None:
        if words(d) == 1:  # d's register taken after the operands' temporaries, as every 32-bit operation does
            return self.alu(name, d, a, b)
        for i in range(words(d)):
            self.alu(name, self.word(d, i), self.word(a, i), self.word(b, i))

    def op_and(self, d, a, b, *_) -> None:
        self.bitwise("and", d, a, b)

    def op_or(self, d, a, b, *_) -> None:
        self.bitwise("or", d, a, b)

    def op_xor(self, d, a, b, *_) -> None:
        self.bitwise("xor", d, a, b)

    def op_not(self, d, a, *_) -> None:
        for i in range(words(d)):
            self.emit("v_not_b32_e32" if is_lane(d) else "s_not_b32", self.word(d, i), self.word(a, i))

    def op_select(self, d, p, a, b) -> None:
        """d = a in the lanes of p, else b: per lane (d VGPRs; no SGPR read besides the mask)."""
        for i in range(words(d)):
            self.emit("v_cndmask_b32_e64", self.word(d, i), *self.vop3(self.word(b, i), self.word(a, i), sgprs=0), p)

    def op_bfe(self, d, a, at, width) -> None:
        if is_lane(d):
            self.emit("v_bfe_u32", d, *self.vop3(a, at, width))
        else:
            self.emit("s_bfe_u32", d, a, width << 16 | at)

    # -- lanes: a predicate is a lane mask; `lanes` narrows exec
    def op_cmp(self, p, cond, a, b) -> None:
        if max(words(a), words(b)) == 2:  # 64-bit, per lane
            self.emit(f"v_cmp_{cond}_u64_e64", p, self.pair(a, 0), self.pair(b, 1))
        elif is_lane(a) or is_lane(b):
            self.emit(f"v_cmp_{cond}_u32_e64", p, *self.vop3(a, b))
        else:  # one answer for the wave: all running lanes or none
            self.emit(f"s_cmp_{cond}_u32", a, b)
            self.emit(self.d.mask("s_cselect"), p, self.d.exec, 0)

    def op_pand(self, p, a, b, *_) -> None:
        self.emit(self.d.mask("s_and"), p, a, b)

    def op_por(self, p, a, b, *_) -> None:
        self.emit(self.d.mask("s_or"), p, a, b)

    def op_pandn(self, p, a, b, *_) -> None:
        self.emit(self.d.and_not, p, a, b)

    def op_first(self, p, a, *_) -> None:
        """p = the lowest running lane of a, or no lane (s_ff1 of none is -1, and 1 << -1 meets no candidate)."""
        candidates, lane, d = Pred("candidates"), Val("leader_lane"), self.d
        self.emit(d.mask("s_and"), candidates, d.exec, a)
        self.emit(d.first_one, lane, candidates)
        self.emit(d.mask("s_lshl"), p, 1, lane)
        self.emit(d.mask("s_and"), p, p, candidates)

    def op_lanes(self, p, *_) -> None:
        self.emit(self.d.mask("s_and_saveexec"), Pred(f"exec_saved{self.depth}"), p)
        self.depth += 1

    def op_end(self, *_) -> None:
        self.depth -= 1
        self.emit(self.d.mask("s_mov"), self.d.exec, Pred(f"exec_saved{self.depth}"))

    def op_count(self, d, *_) -> None:
        if is_lane(d):
            return self.op_add(d, d, 1)
        self.emit(self.d.compare_mask(), self.d.exec, 0)  # SCC = some lane runs; add it
        self.emit("s_addc_u32", d, d, 0)

    # -- memory
    def op_param(self, d, name, *_) -> None:
        self.emit(self.d.scalar_load[0 if words(d) == 2 else 1], d, Val("kernarg", 2), self.params[name])
        self.pending.add(d.role)

    def op_store(self, base, offset, value, *_, mnemonic: str = "") -> None:
        """A global access: a VGPR address, or an SGPR one with `zero` (a VGPR of ours set at entry) as its offset."""
        if not is_lane(value):  # data is VGPRs
            data = Val(f"store_data{words(value)}", words(value), lane=True)
            self.op_mov(data, value)
            value = data
        mnemonic = mnemonic or self.d.store[words(value) - 1]
        address = (base, value, "off") if is_lane(base) else (Val("zero", lane=True), value, base)
        self.emit(mnemonic, *address, offset=offset)

    def op_atomic_add(self, base, offset, value, *_) -> None:
        self.op_store(base, offset, value, mnemonic=self.d.atomic_add_u64)
