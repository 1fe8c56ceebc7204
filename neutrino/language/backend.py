"""Backends: Neutrino IR -> target snippet text.

The frontend never sees a backend; a backend sees only the IR. Adding a
target (e.g. AMD GCN) means one more `Backend` subclass registered in
`BACKENDS` (language/backends.py), nothing else.
"""

from __future__ import annotations

import abc
from typing import ClassVar, Sequence

from neutrino.language.ir import BITS, LOOP_OPS, PRED, U32, U64, Field, Imm, Instr, Reg
from neutrino.language.loops import loop_label


class Backend(abc.ABC):
    """Turns the instruction list of one probe into the text of one snippet."""

    name: ClassVar[str]

    @abc.abstractmethod
    def snippet(self, body: Sequence[Instr]) -> str:
        """The snippet text (declarations included) for `body`."""


class PTXBackend(Backend):
    """PTX snippets in the vocabulary of spec/probe-toml.md ("Snippets"):
    `.reg` declarations, arithmetic/logic/conversion/comparison instructions
    guarded by probe predicates, the special registers and the SAVE statement."""

    name = "ptx"

    _DECL = {U64: ".b64", U32: ".b32", PRED: ".pred"}
    _SPECIAL = {"clock": "%clock64", "time": "%globaltimer", "cuid": "%smid", "laneid": "%laneid"}
    _PRED_OPS = {"pand": "and.pred", "por": "or.pred", "pnot": "not.pred"}

    def snippet(self, body: Sequence[Instr]) -> str:
        lines = self._declarations(body)
        for ins in body:
            lines += self.loop_lines(ins) if ins.op in LOOP_OPS else [self.instruction(ins)]
        return "\n".join(lines)

    def loop_lines(self, ins: Instr) -> list[str]:
        """A bounded loop in the verifier's shape (spec/verifier.md, "Loops"): the counter counts the trips down."""
        counter, label = self.reg(ins.dst), loop_label(ins.dst)
        if ins.op == "loop":
            return [f"mov.u32 {counter}, {ins.srcs[0].value};", f"{label}:"]
        again = self.reg(ins.srcs[0])
        return [f"sub.u32 {counter}, {counter}, 1;", f"setp.ne.u32 {again}, {counter}, 0;", f"@{again} bra.uni {label};"]

    def _declarations(self, body: Sequence[Instr]) -> list[str]:
        seen: dict[str, Reg] = {}
        for ins in body:
            for reg in ins.regs():
                seen.setdefault(reg.name, reg)
        lines = []
        for ty in (U64, U32, PRED):
            names = [self.reg(r) for r in seen.values() if r.type == ty]
            if names:
                lines.append(f".reg {self._DECL[ty]} {', '.join(names)};")
        return lines

    @staticmethod
    def reg(r: Reg) -> str:
        return f"%{r.name}"

    def operand(self, op) -> str:
        if isinstance(op, Reg):
            return self.reg(op)
        if isinstance(op, Imm):
            return str(op.value) if op.value < (1 << 31) else hex(op.value)
        if isinstance(op, Field):
            return op.name
        raise TypeError(f"not an operand: {op!r}")

    def instruction(self, ins: Instr) -> str:
        guard = ""
        if ins.guard is not None:
            guard = f"@{'!' if ins.guard.negated else ''}{self.reg(ins.guard.reg)} "
        return guard + self._body(ins) + ";"

    def _body(self, ins: Instr) -> str:
        op = ins.op
        ops = [self.operand(s) for s in ins.srcs]
        if op == "save":
            return f"SAVE [ {ins.map} ] {{{', '.join(ops)}}}"
        dst = self.reg(ins.dst)
        if op in self._SPECIAL:
            return f"mov.{ins.dst.type} {dst}, {self._SPECIAL[op]}"
        if op in self._PRED_OPS:
            return f"{self._PRED_OPS[op]} {', '.join([dst, *ops])}"
        bits = BITS.get(ins.type)
        mnemonic = {
            "mov": f"mov.{ins.type}",
            "add": f"add.{ins.type}",
            "sub": f"sub.{ins.type}",
            "mul": f"mul.lo.{ins.type}",
            "div": f"div.{ins.type}",
            "rem": f"rem.{ins.type}",
            "and": f"and.b{bits}",
            "or": f"or.b{bits}",
            "xor": f"xor.b{bits}",
            "shl": f"shl.b{bits}",
            "shr": f"shr.{ins.type}",
            "neg": f"neg.s{bits}",
            "not": f"not.b{bits}",
            "cvt": f"cvt.{ins.type}.{ins.src_type}",
            "setp": f"setp.{ins.cmp}.{ins.type}",
            "selp": f"selp.b{bits}",
        }[op]
        return f"{mnemonic} {', '.join([dst, *ops])}"
