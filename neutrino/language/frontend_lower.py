"""Frontend, phase 3 (statements): `ProbeLowering`, an `ast.NodeVisitor` with one `visit_<Node>` per
statement, lowers each probe body to IR; `if`/`else` becomes predication, loops go to loops.py,
expressions to `ExpressionLowering` (frontend_values.py)."""

from __future__ import annotations

import ast
from typing import Optional

import attrs

from neutrino.probefile import FIELD_NAME_BYTES, MAP_NAME_BYTES, FieldNames
from neutrino.language.ir import PRED, U32, U64, Guard, Instr, MapIR, Reg
from neutrino.language.loops import LoopState, lower_for, lower_while
from neutrino.language.frontend_scan import (BINOPS, CONSTRUCT_NAMES, DTYPES, MAP_METHODS, MAP_METHODS_OF, CompileAbort,
                                             ModuleScan, ProbeDecl, check_size, fold_constant, mangle)
from neutrino.language.frontend_values import Const, ExpressionLowering, operator_text



# ------------------------------------------------------------------ probe lowering


class ProbeLowering(ExpressionLowering, ast.NodeVisitor):
    """Lowers one probe body to IR instructions."""

    def __init__(self, scan: ModuleScan, decl: ProbeDecl, types: dict, assigned: set, diags: list, implied_maps: dict):
        self.scan = scan
        self.src = scan.src
        self.decl = decl
        self.types = types
        self.assigned = assigned
        self.diags = diags
        self.implied_maps = implied_maps
        self.body: list[Instr] = []
        self.guard: Optional[Guard] = None
        self.counters = {U64: 0, U32: 0, PRED: 0}
        self.node = decl.node  # the statement being lowered, for instruction locations
        self.negations: dict[Reg, Reg] = {}
        self.dead = 0  # >0 while lowering a branch that a constant condition never takes
        self.loops = LoopState()  # loop variables in scope, nesting (language/loops.py)
        # the short form: nl.save(...) calls of this probe build one record
        self.short_total = sum(
            1 for n in ast.walk(decl.node)
            if isinstance(n, ast.Call) and self._is_short_save(n.func)
        )
        self.short_seen = 0
        self.short_fields: list[tuple[str, str]] = []
        self.short_names = FieldNames()  # unique field names, in linear time
        self.short_regs: list[Reg] = []
        self.short_guard = None

    def _is_short_save(self, func) -> bool:
        try:
            return self.scan.resolve(func) == "lang:save"
        except CompileAbort:
            return False

    # ---- emission
    def temp(self, ty: str) -> Reg:
        prefix = {U64: "_d", U32: "_r", PRED: "_p"}[ty]
        n = self.counters[ty]
        self.counters[ty] += 1
        return Reg(f"{prefix}{n}", ty, temp=True)

    def emit(self, ins: Instr, guarded: bool = True) -> None:
        if guarded:
            ins.guard = self.guard
        ins.loc = self.src.location(self.node)
        if not self.dead:
            self.body.append(ins)

    def user_reg(self, name: str) -> Reg:
        return Reg(mangle(name), self.types[name])

    # ---- statements
    def run(self) -> list[Instr]:
        self.statements(self.decl.node.body, top=True)
        return self.body

    def statements(self, stmts, top=False) -> None:
        for i, stmt in enumerate(stmts):
            if top and i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                continue  # docstring
            self.node = stmt
            try:
                self.visit(stmt)
            except CompileAbort as e:
                d = e.diagnostic
                self.diags.append(attrs.evolve(d, message=f"[probe {self.decl.name}] {d.message}"))

    def generic_visit(self, node):
        what = CONSTRUCT_NAMES.get(type(node).__name__, type(node).__name__)
        self.src.abort(node, f"unsupported construct: {what}")

    def visit_Pass(self, node):
        pass

    def visit_Assign(self, node: ast.Assign):
        if len(node.targets) != 1:
            self.src.abort(node.targets[1], "chained assignment is not supported", hint="assign one name per statement")
        target = node.targets[0]
        if not isinstance(target, ast.Name):
            what = CONSTRUCT_NAMES.get(type(target).__name__, type(target).__name__)
            self.src.abort(target, f"unsupported assignment target: {what}", hint="assign to a plain name")
        self.assign(target, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if not isinstance(node.target, ast.Name):
            self.src.abort(node.target, "unsupported assignment target", hint="assign to a plain name")
        name = node.target.id
        ty = self.scan.dtype(node.annotation)
        if ty is None:
            self.src.abort(node.annotation, f"variable '{name}' must be annotated nl.u32 or nl.u64")
        if self.types.get(name) != ty:
            self.src.abort(node.annotation, f"wrong types: '{name}' is {self.types.get(name)} elsewhere in this file, not {ty}")
        if node.value is not None:
            self.assign(node.target, node.value)

    def visit_AugAssign(self, node: ast.AugAssign):
        if not isinstance(node.target, ast.Name):
            self.src.abort(node.target, "unsupported assignment target", hint="assign to a plain name")
        if type(node.op) not in BINOPS:
            self.src.abort(node, f"unsupported operator '{operator_text(node.op)}='")
        load = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target)
        value = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
        self.assign(node.target, value)

    def assign(self, target: ast.Name, value) -> None:
        name = target.id
        self.check_assignable(target)
        reg = self.user_reg(name)
        op = self.value(value, hint=reg.type, dst=reg)
        if op == reg:
            return
        if op.type == U64 and reg.type == U32:
            self.src.abort(value, f"wrong types: cannot assign a u64 value to u32 variable '{name}'",
                           hint="convert explicitly: nl.u32(...)")
        self.move(reg, op, value)

    def check_assignable(self, target: ast.Name) -> None:
        name = target.id
        if name in self.scan.constants:
            self.src.abort(target, f"cannot assign to constant '{name}'")
        if name in self.scan.maps or name in self.scan.aliases:
            self.src.abort(target, f"cannot assign to '{name}': it names a {'map' if name in self.scan.maps else 'module'}")

    def move(self, dst: Reg, op, node) -> None:
        """dst = op, converting (zero-extending or truncating) as needed."""
        op = self.coerce(op, dst.type, node, truncate=True, dst=dst)
        if op != dst:
            self.emit(Instr("mov", dst.type, dst, (op,)))

    def visit_If(self, node: ast.If):
        cond = self.condition(node.test)
        if isinstance(cond, bool):
            live, dead = (node.body, node.orelse) if cond else (node.orelse, node.body)
            self.statements(live)
            self.dead += 1
            try:
                self.statements(dead)
            finally:
                self.dead -= 1
            return
        outer = self.guard
        self.guard = self.combine(outer, Guard(cond))
        self.statements(node.body)
        if node.orelse:
            self.node = node
            self.guard = self.combine(outer, Guard(cond, negated=True))
            self.statements(node.orelse)
        self.guard = outer

    def combine(self, outer: Optional[Guard], inner: Guard) -> Guard:
        """The guard of a branch nested under `outer`: outer AND inner, computed unguarded."""
        if outer is None:
            return inner
        regs = []
        for g in (outer, inner):
            if g.negated:
                regs.append(self.negation(g.reg))
            else:
                regs.append(g.reg)
        t = self.temp(PRED)
        self.emit(Instr("pand", PRED, t, tuple(regs)), guarded=False)
        return Guard(t)

    def negation(self, pred: Reg) -> Reg:
        """`not pred`, computed once per predicate (temporaries are assigned once)."""
        if pred not in self.negations:
            t = self.temp(PRED)
            self.emit(Instr("pnot", PRED, t, (pred,)), guarded=False)
            self.negations[pred] = t
        return self.negations[pred]

    def visit_For(self, node: ast.For):
        lower_for(self, node, fold_constant, Const)

    def visit_While(self, node: ast.While):
        lower_while(self, node, fold_constant)

    def visit_Expr(self, node: ast.Expr):
        call = node.value
        if isinstance(call, ast.Constant) and isinstance(call.value, str):
            return  # a string statement is a comment
        if not isinstance(call, ast.Call):
            self.src.abort(node, "expression statement has no effect", hint="assign it to a variable or save it")
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in MAP_METHODS and isinstance(func.value, ast.Name) \
                and func.value.id not in self.scan.aliases:
            self.map_save(call, func.value, func.attr)
            return
        helper = self.scan.resolve_helper(func)
        if helper == "save":
            self.short_save(call)
            return
        if helper is not None:
            self.src.abort(call, f"the result of '{ast.unparse(func)}()' is not used")
        self.src.abort(call, f"unknown function '{ast.unparse(func)}'", hint="probe bodies can only call neutrino.language helpers and MAP.save(...)")

    # ---- saves
    def map_save(self, call: ast.Call, map_node: ast.Name, method: str = "save") -> None:
        """MAP.save(...) (array, sum), MAP.add(...) (sum), MAP.record(v) (hist): one SAVE."""
        name = map_node.id
        m = self.scan.maps.get(name)
        if m is None:
            self.src.abort(map_node, f"unknown map '{name}'", hint="declare it with @Map(...) class " + name + ": ...")
        if method not in MAP_METHODS_OF[m.type]:
            self.src.abort(call.func, f"{m.type} map '{name}' has no {method}()",
                           hint=f"use {' or '.join(f'{name}.{x}(...)' for x in MAP_METHODS_OF[m.type])}")
        args = list(call.args)
        if call.keywords and method == "add" and not call.args:
            args = self.keyword_values(call, m)
        elif call.keywords:
            self.src.abort(call.keywords[0], f"{name}.{method}() takes positional values only")
        fields = ", ".join(f"{n}:{t}" for n, t in m.fields)
        if len(args) != len(m.fields):
            self.src.abort(call, f"{method} of map '{name}' needs {len(m.fields)} values ({fields}), got {len(args)}")
        if m.level != self.decl.level:
            self.src.abort(call, f"probe '{self.decl.name}' has level {self.decl.level} but map '{name}' has level {m.level}",
                           hint="a probe saves only into maps of its own level")
        ops = []
        for arg, (_, ty) in zip(args, m.fields):
            if isinstance(arg, ast.Starred):
                self.src.abort(arg, "starred arguments are not supported")
            op = self.coerce(self.value(arg, hint=ty), ty, arg, truncate=True)
            ops.append(self.materialize(op))
        self.emit(Instr("save", srcs=tuple(ops), map=name))

    def keyword_values(self, call: ast.Call, m: MapIR) -> list:
        """MAP.add(field=value, ...): the named counters get the values, the others 0."""
        names = [n for n, _ in m.fields]
        given = {}
        for k in call.keywords:
            if k.arg not in names:
                self.src.abort(k, f"map '{m.name}' has no field '{k.arg}'", hint="fields: " + ", ".join(names))
            given[k.arg] = k.value
        return [given.get(n, ast.copy_location(ast.Constant(0), call)) for n in names]

    def short_save(self, call: ast.Call) -> None:
        dtype = None
        for k in call.keywords:
            if k.arg != "dtype":
                self.src.abort(k, f"unknown argument '{k.arg}' to nl.save", hint="nl.save(value or (values, ...), dtype=nl.u64)")
            dtype = self.scan.dtype(k.value)
            if dtype is None:
                self.src.abort(k.value, "dtype must be nl.u32 or nl.u64")
        if len(call.args) != 1:
            self.src.abort(call, "nl.save takes one value or a tuple of values", hint="nl.save((a, b), dtype=nl.u32)")
        arg = call.args[0]
        items = arg.elts if isinstance(arg, ast.Tuple) else [arg]
        if not items:
            self.src.abort(arg, "nothing to save")
        if self.short_seen and self.short_guard != self.guard:
            self.src.abort(call, "all nl.save calls of a probe must run under the same condition",
                           hint="they build one record; use a @Map class and MAP.save(...) for separate records")
        self.short_guard = self.guard
        for item in items:
            op = self.value(item, hint=dtype)
            ty = dtype or op.type or U64
            op = self.coerce(op, ty, item, truncate=True)
            last = self.short_seen + 1 == self.short_total
            if not (isinstance(op, Reg) and (op.temp or last)):
                # a register holding the value as it is at this call (SAVE comes at the last one)
                snap = self.temp(ty)
                self.emit(Instr("mov", ty, snap, (op,)))
                op = snap
            field = self.field_name(item)
            self.src.check_name(item, "field", field, FIELD_NAME_BYTES, hint="the field is named after the value saved")
            self.short_fields.append((field, ty))
            self.short_regs.append(op)
        self.short_seen += 1
        if self.short_seen == self.short_total:
            self.finish_short_map(call)

    def field_name(self, node) -> str:
        if isinstance(node, ast.Name):
            base = node.id
        else:
            target = node.func if isinstance(node, ast.Call) else node
            h = self.scan.resolve(target)
            base = h[5:] if h and h.startswith("lang:") and h[5:] not in DTYPES else "value"
            if h and h[5:] in DTYPES and isinstance(node, ast.Call) and node.args:
                return self.field_name(node.args[0])
        return self.short_names.claim(base)

    def finish_short_map(self, call) -> None:
        d = self.decl
        self.src.check_name(d.node, "map", d.name, MAP_NAME_BYTES, hint="nl.save in a probe implies a map named after it")
        if d.name in self.scan.maps:
            self.src.abort(call, f"nl.save in probe '{d.name}' implies a map '{d.name}', but a @Map class of that name exists",
                           hint=f"use {d.name}.save(...) or rename the probe")
        if d.size is not None:
            check_size(self.src, (d.size, d.size_node), self.short_fields)
        self.implied_maps[d.name] = MapIR(d.name, d.level, d.cap, list(self.short_fields), self.src.location(d.node))
        ins = Instr("save", srcs=tuple(self.short_regs), map=d.name)
        self.emit(ins)

