"""The neutral operations (neutrino/passes/neutral_ops.py) as PTX instructions.

What is PTX's here: a value of ours is a virtual register named after its role
(`KernelState.temp`: .b32 for one word, .b64 for two, .pred for a lane set);
every lane has its own registers, so arithmetic runs unpredicated in every
lane (it writes only registers of ours, read in the same region), while
what leaves a trace (`store`, `atomic_add`, `count`) is predicated on the
running lanes; `lanes p` therefore emits no branch: inside another `lanes`
it ANDs the outer predicate into p (p is the region's own, used nowhere
else), and `end` returns to the outer one. A compare whose predicate is then
ANDed with another one takes PTX's fused `setp.CMP.and` form.

Only the operations PTX's SAVE lowering takes from the neutral steps so far are
spelled (an array map's record and a unit's count at exit: mul, add, cmp, pand,
mov of a predicate, lanes, end, count, store); any other is refused.
"""

from __future__ import annotations

from neutrino.isa.ptx import ir
from neutrino.passes.build import insn
from neutrino.passes.neutral_ops import Pred, Val


class PtxTranslation:
    """Translates neutral operations into one kernel's registers (`state`: a passes.state.KernelState)."""

    def __init__(self, state, origin: str):
        self.state, self.origin = state, origin
        self.running: list = []  # the `lanes` predicates in force, innermost last (ir.Guard or Pred)

    def translate(self, ops: list) -> list[ir.Instruction]:
        out: list[ir.Instruction] = []
        i = 0
        while i < len(ops):
            op = ops[i]
            fused = op.name == "cmp" and i + 1 < len(ops) and ops[i + 1].name == "pand" and ops[i + 1][1:3] == (op.dst, op.dst)
            if fused:
                out.append(self.compare(op, ops[i + 1].b))
                i += 2
                continue
            handler = getattr(self, f"op_{op.name}", None)
            if handler is None:
                raise NotImplementedError(f"the PTX translation lacks the neutral operation {op.name}")
            out += handler(op)
            i += 1
        return out

    # -- operands
    def reg(self, x):
        if type(x) is Val:
            return self.state.temp(x.role, "b64" if x.words == 2 else "b32")
        if type(x) is Pred:
            return self.state.temp(x.role, "pred")
        if type(x) is tuple:
            return ir.Vector(tuple(ir.Register(self.reg(v)) for v in x))
        return x  # an integer or an operand of the ISA

    def guard(self) -> ir.Guard | None:
        """The predicate of the running lanes (None: every lane)."""
        if not self.running:
            return None
        p = self.running[-1]
        return p if type(p) is ir.Guard else ir.Guard(ir.Register(self.reg(p)))

    def emit(self, opcode: str, *operands, guard=None) -> ir.Instruction:
        return insn(opcode, *operands, origin=self.origin, guard=guard)

    # -- operations
    def compare(self, op, also=None) -> ir.Instruction:
        """p = a cond b (unsigned), ANDed with `also` in the same instruction when given."""
        p, cond, a, b = op[1:]
        bits = 64 if type(a) is Val and a.words == 2 else 32
        a = self.reg(a)  # the compared value's register asked for first: declarations list types in first-use order
        dst = self.reg(p)
        if also is None:
            return self.emit(f"setp.{cond}.u{bits}", dst, a, self.reg(b))
        return self.emit(f"setp.{cond}.and.u{bits}", dst, a, self.reg(b), self.reg(also))

    def op_cmp(self, op) -> list[ir.Instruction]:
        return [self.compare(op)]

    def op_pand(self, op) -> list[ir.Instruction]:
        """p = a ∧ b; a negated predicate of the ISA is first complemented into p."""
        p, a = self.reg(op.dst), op.a
        if type(a) is ir.Guard and a.negated:
            return [self.emit("not.pred", p, a.register), self.emit("and.pred", p, p, self.reg(op.b))]
        return [self.emit("and.pred", p, a.register if type(a) is ir.Guard else self.reg(a), self.reg(op.b))]

    def op_mov(self, op) -> list[ir.Instruction]:
        """A lane set copied (a negated predicate of the ISA: complemented); values are not moved here yet."""
        if type(op.dst) is not Pred or type(op.a) is not ir.Guard:
            raise NotImplementedError("the PTX translation moves predicates of the ISA only")
        return [self.emit("not.pred" if op.a.negated else "mov.pred", self.reg(op.dst), op.a.register)]

    def op_mul(self, op) -> list[ir.Instruction]:
        d, a = op.dst, op.a
        wide = d.words == 2 and (type(a) is not Val or a.words == 1)
        return [self.emit("mul.wide.u32" if wide else f"mul.lo.u{32 * d.words}", self.reg(d), self.reg(a), self.reg(op.b))]

    def op_add(self, op) -> list[ir.Instruction]:
        return [self.emit(f"add.u{32 * op.dst.words}", self.reg(op.dst), self.reg(op.a), self.reg(op.b))]

    def op_lanes(self, op) -> list[ir.Instruction]:
        """From here the running lanes are those of p among the running ones: p ∧= the outer predicate."""
        p, outer = op.dst, self.running[-1] if self.running else None
        self.running.append(p)
        if outer is None:
            if type(p) is Pred:
                self.reg(p)  # declared here, ahead of the registers the region uses
            return []
        if type(p) is not Pred:
            raise NotImplementedError("the PTX translation narrows nested lanes by predicates of its own only")
        name = self.reg(p)
        if type(outer) is not ir.Guard:
            return [self.emit("and.pred", name, name, self.reg(outer))]
        if not outer.negated:
            return [self.emit("and.pred", name, name, outer.register)]
        negation = self.state.temp("n" + p.role, "pred")
        return [self.emit("not.pred", negation, outer.register), self.emit("and.pred", name, name, negation)]

    def op_end(self, op) -> list[ir.Instruction]:
        self.running.pop()
        return []

    def op_count(self, op) -> list[ir.Instruction]:
        d = self.reg(op.dst)
        return [self.emit("add.u32", d, d, 1, guard=self.guard())]

    def op_store(self, op) -> list[ir.Instruction]:
        """[b + o] = v; a tuple v is one vector store of its values (consecutive, aligned to its size)."""
        base, offset, value, typed = op.dst, op.a, op.b, op.c
        items = value if type(value) is tuple else (value,)
        address = ir.Address(ir.Register(self.reg(base)), ir.Immediate(str(offset)) if offset else None)
        if len({v.words for v in items}) > 1:
            return self.mixed_store(address, items)
        shape = f".v{len(items)}" if len(items) > 1 else ""
        spelled = typed or f"b{32 * items[0].words}"  # a type the steps give (a count's u32), else the bits
        return [self.emit(f"st.global{shape}.{spelled}", address, self.reg(value), guard=self.guard())]

    def mixed_store(self, address: ir.Address, items: tuple) -> list[ir.Instruction]:
        """Values of one and two words, consecutive: one `st.global.v4.b32` of their words (low word first, as
        memory holds a u64), each two-word value split into 32-bit registers first (free: a register pair)."""
        code, words = [], []
        for v in items:
            if v.words == 1:
                words.append(ir.Register(self.reg(v)))
                continue
            halves = tuple(ir.Register(self.state.temp(f"{v.role}_w{k}", "b32")) for k in (0, 1))
            code.append(self.emit("mov.b64", ir.Vector(halves), ir.Register(self.reg(v))))
            words += halves
        store = self.emit(f"st.global.v{len(words)}.b32", address, ir.Vector(tuple(words)), guard=self.guard())
        return code + [store]
