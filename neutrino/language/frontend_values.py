"""Frontend, phase 3 (expressions): lowering one expression of a probe body to IR operands and the
instructions that compute them; conditions become predicates. `ExpressionLowering` is the half of
`ProbeLowering` (frontend_lower.py) that reads values; the statements half writes them."""

from __future__ import annotations

import ast
from typing import Optional

from neutrino.language.ir import BITS, PRED, U32, U64, Field, Imm, Instr, Reg
from neutrino.language.frontend_scan import (BINOPS, CMP_FOLD, CMPOPS, CONSTRUCT_NAMES, DTYPES, FIELD_HELPERS, MAP_METHODS,
                                             MASK64, VALUE_HELPERS, fit, fold_binop, wrap_constant)
from neutrino.language.frontend_types import join_types


class ExpressionLowering:
    """`value_<Node>` per expression; `condition` for predicates. Uses the emission state of
    `ProbeLowering` (temp, emit, guard, types)."""

    # ---- values
    def value(self, node, hint: Optional[str] = None, dst: Optional[Reg] = None):
        """Lower an expression; returns Reg, Field or Imm (Imm.type None = a
        constant whose type the context decides, kept as a Python int)."""
        method = getattr(self, "value_" + type(node).__name__, None)
        if method is None:
            what = CONSTRUCT_NAMES.get(type(node).__name__, type(node).__name__)
            if isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
                self.src.abort(node, "wrong types: a condition is not a value",
                               hint="use it in an if statement, or write `1 if cond else 0`")
            self.src.abort(node, f"unsupported construct: {what}")
        return method(node, hint, dst)

    def value_Constant(self, node, hint, dst):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, int):
            self.src.abort(node, f"unsupported constant {v!r}: only integers")
        return Const(wrap_constant(v))

    def value_Name(self, node, hint, dst):
        name = node.id
        if name in self.loops.names:
            return self.loops.names[name]
        if name in self.scan.constants:
            return Const(self.scan.constants[name])
        if name in self.types and name in self.assigned:
            return self.user_reg(name)
        if name in self.scan.maps:
            self.src.abort(node, f"map '{name}' is not a value", hint=f"save into it: {name}.save(...)")
        helper = self.scan.resolve_helper(node)
        if helper is not None:
            return self.helper_value(node, helper)
        if name in self.types:
            self.src.abort(node, f"undefined variable '{name}': it is never assigned",
                           hint=f"declare it at module level with an initial value: {name}: nl.u64 = 0")
        self.src.abort(node, f"undefined variable '{name}'")

    def value_Attribute(self, node, hint, dst):
        helper = self.scan.resolve_helper(node)
        if helper is None:
            self.src.abort(node, f"unknown name '{ast.unparse(node)}'")
        return self.helper_value(node, helper, dst)

    def helper_value(self, node, helper: str, dst=None):
        if helper in FIELD_HELPERS:
            return self.field(node, helper)
        if helper in VALUE_HELPERS:  # `nl.clock` written without the call: the same value as nl.clock()
            return self.read_register_helper(helper, dst)
        if helper in DTYPES:
            self.src.abort(node, f"'{ast.unparse(node)}' is a conversion: call it on a value, {ast.unparse(node)}(x)")
        self.src.abort(node, f"'{ast.unparse(node)}' is not a value",
                       hint=f"values: {', '.join(f'nl.{h}' for h in {**VALUE_HELPERS, **FIELD_HELPERS})}")

    def read_register_helper(self, helper: str, dst):
        op, ty = VALUE_HELPERS[helper]
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr(op, ty, out))
        return out

    def field(self, node, helper: str) -> Field:
        fname, ty = FIELD_HELPERS[helper]
        text = ast.unparse(node)
        if self.decl.position == "kernel":
            self.src.abort(node, f"{text} is not available at pos=\"kernel\"",
                           hint="field helpers describe the matched instruction; use an instruction position such as pos=\"ld.global\"")
        if fname == "OUT" and self.decl.when != "after":
            self.src.abort(node, f"{text} is only available after the instruction", hint="use after=True")
        return Field(fname, ty)

    def value_Call(self, node: ast.Call, hint, dst):
        helper = self.scan.resolve_helper(node.func)
        if helper is None:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in MAP_METHODS:
                self.src.abort(node, f"{func.attr}(...) is a statement, not a value")
            self.src.abort(node, f"unknown function '{ast.unparse(func)}'",
                           hint="probe bodies can only call neutrino.language helpers and MAP.save(...)")
        text = ast.unparse(node.func)
        if helper in VALUE_HELPERS or helper in FIELD_HELPERS:
            if node.args or node.keywords:
                self.src.abort(node, f"{text}() takes no arguments", hint=f"write {text}() or {text}: both read the same value")
            if helper in FIELD_HELPERS:  # `nl.addr()`: the same value as nl.addr
                return self.field(node.func, helper)
            return self.read_register_helper(helper, dst)
        if helper in DTYPES:
            ty = DTYPES[helper]
            if len(node.args) != 1 or node.keywords:
                self.src.abort(node, f"{text}(x) takes one value")
            arg = node.args[0]
            op = self.value(arg, hint=ty)
            if isinstance(op, Const):
                return Imm(op.value & type_mask(ty), ty)  # an explicit conversion truncates
            return self.coerce(op, ty, arg, truncate=True, dst=dst)
        if helper == "save":
            self.src.abort(node, "nl.save(...) is a statement, not a value")
        self.src.abort(node, f"'{text}' cannot be called here",
                       hint="calls: nl.clock(), nl.time(), nl.cuid(), nl.smid(), nl.laneid(), nl.u32(x), nl.u64(x), "
                            "MAP.save(...)")

    def value_UnaryOp(self, node: ast.UnaryOp, hint, dst):
        if isinstance(node.op, ast.UAdd):
            return self.value(node.operand, hint, dst)
        if isinstance(node.op, ast.Not):
            self.src.abort(node, "wrong types: a condition is not a value", hint="use it in an if statement")
        op = self.value(node.operand, hint)
        name = "neg" if isinstance(node.op, ast.USub) else "not"
        c = const_of(op)
        if c is not None:
            v = wrap_constant(-c[0] if name == "neg" else ~c[0])
            return Const(v) if c[1] is None else Imm(v & type_mask(c[1]), c[1])
        ty = op.type
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr(name, ty, out, (op,)))
        return out

    def value_BinOp(self, node: ast.BinOp, hint, dst):
        if type(node.op) not in BINOPS:
            self.src.abort(node, f"unsupported operator '{operator_text(node.op)}'")
        name = BINOPS[type(node.op)]
        shift = name in ("shl", "shr")
        a = self.value(node.left, hint)
        b = self.value(node.right, None if shift else hint)
        ca, cb = const_of(a), const_of(b)
        if ca is not None and cb is not None:
            ty = ca[1] if shift else join_types(ca[1], cb[1])
            res = fold_binop(name, ca[0], cb[0], ty or hint or U64)
            if res is None:
                self.src.abort(node.right, "division by zero")
            return Const(res) if ty is None else Imm(res & type_mask(ty), ty)
        if name in ("div", "rem") and cb is not None and cb[0] == 0:
            self.src.abort(node.right, "division by zero")
        if shift:
            ty = type_of_operand(a) or hint or U64
            b = self.coerce(b, U32, node.right, truncate=True)
        else:
            ty = join_types(type_of_operand(a), type_of_operand(b)) or hint or U64
            b = self.coerce(b, ty, node.right)
        a = self.coerce(a, ty, node.left)
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr(name, ty, out, (a, b)))
        return out

    def value_IfExp(self, node: ast.IfExp, hint, dst):
        cond = self.condition(node.test)
        if isinstance(cond, bool):
            return self.value(node.body if cond else node.orelse, hint, dst)
        a = self.value(node.body, hint)
        b = self.value(node.orelse, hint)
        ty = join_types(type_of_operand(a), type_of_operand(b)) or hint or U64
        a = self.coerce(a, ty, node.body)
        b = self.coerce(b, ty, node.orelse)
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr("selp", ty, out, (a, b, cond)))
        return out

    def coerce(self, op, ty: str, node, truncate: bool = False, dst: Optional[Reg] = None):
        """`op` as a value of type `ty`: constants take the type, narrower
        values are zero-extended; wider ones are truncated only when
        `truncate` (explicit conversions and saves)."""
        if isinstance(op, Const):
            return Imm(fit(self.src, node, op.value, ty), ty)
        if op.type == ty:
            return op
        if op.type == U64 and ty == U32 and not truncate:
            self.src.abort(node, "wrong types: u64 value where u32 is needed", hint="convert explicitly: nl.u32(...)")
        if isinstance(op, Imm):
            return Imm(op.value & type_mask(ty), ty)
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr("cvt", ty, out, (op,), src_type=op.type))
        return out

    def materialize(self, op):
        """A register holding `op` (SAVE operands are registers)."""
        if isinstance(op, Reg):
            return op
        t = self.temp(op.type)
        self.emit(Instr("mov", op.type, t, (op,)))
        return t

    # ---- conditions
    def condition(self, node):
        """Lower a condition, unguarded (predicates must always be defined);
        returns a pred Reg, or a Python bool when it is constant."""
        saved = self.guard
        self.guard = None
        try:
            return self._condition(node)
        finally:
            self.guard = saved

    def _condition(self, node):
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BoolOp):
            parts = []
            is_and = isinstance(node.op, ast.And)
            for v in node.values:
                c = self._condition(v)
                if isinstance(c, bool):
                    if c != is_and:  # False in `and`, True in `or` decides
                        return c
                    continue
                parts.append(c)
            if not parts:
                return is_and
            acc = parts[0]
            for p in parts[1:]:
                t = self.temp(PRED)
                self.emit(Instr("pand" if is_and else "por", PRED, t, (acc, p)), guarded=False)
                acc = t
            return acc
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            c = self._condition(node.operand)
            if isinstance(c, bool):
                return not c
            t = self.temp(PRED)
            self.emit(Instr("pnot", PRED, t, (c,)), guarded=False)
            return t
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return node.value
        op = self.value(node)  # truthiness: x != 0
        return self.setp("ne", op, Const(0), node)

    def compare(self, node: ast.Compare):
        result = True
        left = self.value(node.left)
        for cmp_op, right_node in zip(node.ops, node.comparators):
            if type(cmp_op) not in CMPOPS:
                self.src.abort(node, f"unsupported comparison '{operator_text(cmp_op)}'")
            right = self.value(right_node)
            c = self.setp(CMPOPS[type(cmp_op)], left, right, node)
            left = right
            if c is False:
                return False
            if c is True:
                continue
            if result is True:
                result = c
            else:
                t = self.temp(PRED)
                self.emit(Instr("pand", PRED, t, (result, c)), guarded=False)
                result = t
        return result

    def setp(self, cmp: str, a, b, node):
        ca, cb = const_of(a), const_of(b)
        if ca is not None and cb is not None:
            return CMP_FOLD[cmp](ca[0] & MASK64, cb[0] & MASK64)
        ty = join_types(type_of_operand(a), type_of_operand(b)) or U64
        a = self.coerce(a, ty, node)
        b = self.coerce(b, ty, node)
        t = self.temp(PRED)
        self.emit(Instr("setp", ty, t, (a, b), cmp=cmp), guarded=False)
        return t


class Const:
    """A constant whose type the context decides (Python int in [-2**63, 2**64))."""

    __slots__ = ("value",)
    type = None

    def __init__(self, value: int):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Const) and other.value == self.value

    def __hash__(self):
        return hash(self.value)


def const_of(op):
    """(value, type or None) when `op` is a constant, else None."""
    if isinstance(op, Const):
        return op.value, None
    if isinstance(op, Imm):
        return op.value, op.type
    return None


def type_mask(ty: str) -> int:
    return (1 << BITS[ty]) - 1


def type_of_operand(op) -> Optional[str]:
    return op.type


def operator_text(op) -> str:
    return {ast.Pow: "**", ast.MatMult: "@", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
            ast.NotIn: "not in"}.get(type(op), type(op).__name__)

