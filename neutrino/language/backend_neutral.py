"""Neutrino IR in the neutral operations (passes/neutral_ops.py): the backend of every ISA that translates them.

What does not depend on the ISA is written here once: each IR instruction as
neutral operations on values named after its registers (IR registers are per
lane: a u32 one word, a u64 two; a predicate is a set of lanes); predication
without branches (a guarded instruction computes into a temporary and
`select` keeps the old value where the guard is false; mask logic for
predicates); a guarded SAVE keeps its lane set; loops are unrolled (such
probes have no branches); division and remainder exist only by constant
powers of two. An ISA (language/backend_gcn.py: GCN and RDNA) subclasses
`NeutralEmitter` with `run(*ops)` (translate and write them), `name(value)`
(how its snippets name a value), the special values (`clock`, `time`,
`cuid`, `laneid`) and `text()`.
"""

from __future__ import annotations

from typing import Sequence

from neutrino.errors import Diagnostic, Location
from neutrino.language.backend import Backend
from neutrino.language.errors import DslError
from neutrino.language.ir import PRED, U64, Field, Imm, Instr, Reg
from neutrino.language.loops import loop_tree
from neutrino.passes.neutral_ops import ACTIVE, Op, Pred, Val

#: IR operations that are one neutral operation of the same name, on the same operands
SAME = ("add", "sub", "mul", "and", "or", "xor", "not", "pand", "por")
SPECIAL = ("clock", "time", "cuid", "laneid")


class NeutralBackend(Backend):
    """A backend whose emitter (`emitter()`) writes neutral operations."""

    def emitter(self) -> "NeutralEmitter":
        raise NotImplementedError

    def snippet(self, body: Sequence[Instr]) -> str:
        emitter = self.emitter()
        self.emit_items(emitter, loop_tree(body))
        return emitter.text()

    def emit_items(self, emitter: "NeutralEmitter", items: list) -> None:
        """Probes without branches: a loop is unrolled (spec/language.md, "Loops"); temporaries are named by
        their role, so every trip reuses the first trip's."""
        for item in items:
            if isinstance(item, tuple):
                trips, inner = item
                for _ in range(trips):
                    self.emit_items(emitter, inner)
            else:
                emitter.instruction(item)


class NeutralEmitter:
    isa = ""  # how messages name the ISA
    lines: list[str]

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
                raise self.error(ins, f"{op} by a value other than a constant power of two is not supported on {self.isa}")
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
        elif op in SPECIAL:
            getattr(self, op)(self.name(d))
        else:
            raise self.error(ins, f"{op} is not supported by the {self.isa} backend")

    def error(self, ins: Instr, message: str) -> DslError:
        return DslError(Diagnostic(ins.loc or Location("<dsl>"), message,
                                   hint=f"{self.isa} has no integer divide; divide by powers of two"))
