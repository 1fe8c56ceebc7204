"""Bounded loops in DSL probes: `for i in range(...)` and counted `while` (spec/language.md, "Loops").

The frontend calls `lower_for` / `lower_while` for a loop statement of a probe
body. Every loop's trip count is known when the file is compiled:

* `for i in range(N)` / `range(A, B)` / `range(A, B, STEP)` with integer
  constants (literals, module constants, arithmetic on them);
* `while i CMP K:` where K is a constant, the counter `i` is set to a constant
  by the last statement before the loop that writes it (in the same block),
  and the body writes `i` once, at its own top level, with `i += C` or `i -= C`.

A loop of at most `UNROLL_MAX_TRIPS` trips is unrolled (in a `for`, `i` is a
constant in each copy, so arithmetic on it folds). A longer one becomes the IR
pair `loop %c, TRIPS` ... `endloop %c, %p` around its body: the PTX backend
writes it as the verifier's bounded-loop shape (spec/verifier.md, "Loops"),
the GCN backend unrolls it (`loop_tree`). The limits are the verifier's
(`neutrino/passes/probe_loops.py`): trips per loop, nesting depth and the
probe's path length, each refused here at the loop's line.
"""

from __future__ import annotations

import ast

import attrs

from neutrino.language.ir import BITS, PRED, U32, U64, Imm, Instr, Reg
from neutrino.loop_limits import MAX_LOOP_DEPTH, MAX_PATH_LENGTH, MAX_TRIP_COUNT  # not passes/: the PTX parser

#: loops of at most this many trips are unrolled; longer ones are emitted as loops
UNROLL_MAX_TRIPS = 8

_CMP = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
        ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
_MIRROR = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}


@attrs.define
class LoopState:
    """What one probe's lowering keeps about its loops (the frontend holds one per probe)."""

    names: dict = attrs.Factory(dict)  # loop variables in scope: name -> constant (unrolled) or register
    depth: int = 0
    path_done: int = 0  # instructions of the body already counted (up to `path_index`), for a linear path check
    path_index: int = 0
    path_reported: bool = False
    blocks: dict | None = None  # id(statement) -> (the statement list holding it, its index), built at the first while


# ------------------------------------------------------------------ for


def lower_for(lw, node: ast.For, fold, constant) -> None:
    """`for NAME in range(...)`: `lw` is the frontend's probe lowering (`_ProbeLowering`), `fold` its
    constant folder (node, constants) -> int or None, `constant` its type of an untyped constant."""
    src = lw.src
    if node.orelse:
        src.abort(node.orelse[0], "for ... else is not supported in probes")
    if not isinstance(node.target, ast.Name):
        src.abort(node.target, "the loop variable must be a plain name: for i in range(N)")
    call = node.iter
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"):
        src.abort(call, f"a probe loops only over range() of constants, not over '{ast.unparse(call)}'",
                  hint="for i in range(N), range(A, B) or range(A, B, STEP) with integer constants")
    if call.keywords or not 1 <= len(call.args) <= 3:
        src.abort(call, "range() takes one to three integer constants")
    args = []
    for arg in call.args:
        value = fold(arg, lw.scan.constants)
        if value is None:
            src.abort(arg, f"loop bound not a compile-time constant: '{ast.unparse(arg)}' is not an integer constant",
                      hint="a probe's loops make a number of trips known when the file is compiled")
        args.append(value)
    if len(args) == 3 and args[2] == 0:
        src.abort(call.args[2], "range() step must not be zero")
    values = range(*args)
    name = node.target.id
    _check_body(lw, node, name, "loop variable")
    _check_trips(lw, node, len(values))
    step = values.step
    wide = any(not 0 <= v < 1 << 32 for v in (values.start, values[-1] if values else values.start))

    def bind(value):
        lw.loops.names[name] = value

    if len(values) <= UNROLL_MAX_TRIPS:
        _unrolled(lw, node, [lambda v=v: bind(constant(v)) for v in values] or [lambda: bind(constant(values.start))], name,
                  dead=not values)
        return
    ty = U64 if wide else U32
    var = lw.temp(ty)
    mask = (1 << BITS[ty]) - 1
    lw.emit(Instr("mov", ty, var, (Imm(values.start & mask, ty),)), guarded=False)
    _looped(lw, node, len(values), name, lambda: bind(var),
            after=lambda: lw.emit(Instr("add", ty, var, (var, Imm(step & mask, ty))), guarded=False))


# ------------------------------------------------------------------ while


def lower_while(lw, node: ast.While, fold) -> None:
    """`while i CMP K:` with a counter the compiler can run (see the module docstring)."""
    src = lw.src
    if node.orelse:
        src.abort(node.orelse[0], "while ... else is not supported in probes")
    name, cmp, bound = _while_condition(lw, node.test, fold)
    ty = lw.types.get(name)
    if ty is None or name in lw.loops.names:
        src.abort(node.test, f"the counter '{name}' of a while loop must be a variable of this probe file")
    step = _counter_step(lw, node, name, fold)
    init = _counter_init(lw, node, name, fold)
    mask = (1 << BITS[ty]) - 1
    value, trips = init & mask, 0
    while cmp(value, bound & mask):
        trips += 1
        value = (value + step) & mask
        if trips > MAX_TRIP_COUNT:
            src.abort(node, f"trip count not bounded: '{name}' from {init} by {step:+d} while {ast.unparse(node.test)} "
                      f"makes more than {MAX_TRIP_COUNT} trips (or never stops)",
                      hint=f"the limit is {MAX_TRIP_COUNT} trips per loop")
    _check_body(lw, node, None, "counter")
    _check_trips(lw, node, trips)
    if trips <= UNROLL_MAX_TRIPS:
        _unrolled(lw, node, [lambda: None] * max(trips, 1), None, dead=trips == 0)
        return
    _looped(lw, node, trips, None, lambda: None, after=lambda: None)


def _while_condition(lw, test, fold):
    """(counter name, comparison, constant) of `i CMP K` or `K CMP i`."""
    src = lw.src
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _CMP):
        src.abort(test, "a while loop's condition compares a counter with a constant: while i < N",
                  hint="or write for i in range(N)")
    left, right, op = test.left, test.comparators[0], type(test.ops[0])
    if not isinstance(left, ast.Name) or fold(left, lw.scan.constants) is not None:
        left, right, op = right, left, _MIRROR[op]
    if not isinstance(left, ast.Name):
        src.abort(test, "a while loop's condition compares a counter with a constant: while i < N")
    bound = fold(right, lw.scan.constants)
    if bound is None:
        src.abort(right, f"loop bound not a compile-time constant: '{ast.unparse(right)}' is not an integer constant",
                  hint="a probe's loops make a number of trips known when the file is compiled")
    return left.id, _CMP[op], bound


def _counter_step(lw, node: ast.While, name: str, fold) -> int:
    """The constant of the one `name += C` / `name -= C` at the top level of the body."""
    writes = [n for stmt in node.body for n in ast.walk(stmt) if _writes(n, name)]
    top = [s for s in node.body if _writes(s, name)]
    if not writes:
        lw.src.abort(node, f"unbounded loop: the counter '{name}' never changes in the loop body",
                     hint=f"change it once per trip: {name} += 1")
    if len(writes) != 1 or len(top) != 1 or not isinstance(top[0], ast.AugAssign) \
            or not isinstance(top[0].op, (ast.Add, ast.Sub)) or fold(top[0].value, lw.scan.constants) is None:
        where = next((w for w in writes if w not in top), writes[1] if len(writes) > 1 else (writes[0] if writes else node))
        lw.src.abort(where, f"counter written in the loop body: '{name}' must change exactly once per trip, "
                     f"by {name} += C or {name} -= C with a constant C, at the loop's own level",
                     hint="otherwise the trip count cannot be bounded")
    value = fold(top[0].value, lw.scan.constants)
    return value if isinstance(top[0].op, ast.Add) else -value


def _counter_init(lw, node: ast.While, name: str, fold) -> int:
    """The constant the last statement before the loop (in its block) that writes `name` sets it to."""
    block, index = _block_of(lw, node)
    for stmt in reversed(block[:index]):
        if not any(_writes(n, name) for n in ast.walk(stmt)):
            continue
        value = None
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and _writes(stmt, name):
            value = fold(stmt.value, lw.scan.constants)
        if value is not None:
            return value
        break
    lw.src.abort(node, f"counter '{name}' is not set to a constant before the loop",
                 hint=f"write {name} = 0 (or another constant) right before the while")


def _writes(node, name: str) -> bool:
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return isinstance(node.target, ast.Name) and node.target.id == name and (
            not isinstance(node, ast.AnnAssign) or node.value is not None)
    if isinstance(node, (ast.For, ast.NamedExpr)):
        return isinstance(node.target, ast.Name) and node.target.id == name
    return False


def _block_of(lw, node) -> tuple[list, int]:
    """The statement list holding `node` and its index there (a map of the probe's blocks, built once per probe)."""
    if lw.loops.blocks is None:
        lw.loops.blocks = {}
        for parent in ast.walk(lw.decl.node):
            for field in ("body", "orelse"):
                block = getattr(parent, field, None)
                if isinstance(block, list):
                    for index, stmt in enumerate(block):
                        lw.loops.blocks[id(stmt)] = (block, index)
    return lw.loops.blocks.get(id(node), ([node], 0))


# ------------------------------------------------------------------ shared


def _check_body(lw, node, variable, what: str) -> None:
    """No write to a for loop's variable in its body; no short-form nl.save (one record per run) in a loop."""
    for stmt in node.body:
        for n in ast.walk(stmt):
            if variable is not None and _writes(n, variable):
                lw.src.abort(n, f"{what} '{variable}' is written in the loop body",
                             hint="range() sets it; use another variable")
            if isinstance(n, ast.Call) and lw._is_short_save(n.func):
                lw.src.abort(n, "nl.save(...) builds one record per probe run: it cannot be in a loop",
                             hint="declare a @Map class and call MAP.save(...) in the loop: one record per trip")


def _check_trips(lw, node, trips: int) -> None:
    if trips > MAX_TRIP_COUNT:
        lw.src.abort(node, f"trip count {trips} exceeds the limit of {MAX_TRIP_COUNT} trips per loop")
    if lw.loops.depth + 1 > MAX_LOOP_DEPTH:
        lw.src.abort(node, f"loops nested {lw.loops.depth + 1} deep; the limit is {MAX_LOOP_DEPTH}")


def _unrolled(lw, node, bindings, variable, dead: bool) -> None:
    """The body once per trip (once, lowered but not emitted, when the loop makes none)."""
    saved = lw.loops.names.get(variable) if variable else None
    errors = len(lw.diags)
    lw.loops.depth += 1
    lw.dead += dead
    try:
        for bind in bindings:
            bind()
            lw.statements(node.body)
            if len(lw.diags) > errors:
                break  # report a body's problems once, not once per trip
    finally:
        lw.dead -= dead
        lw.loops.depth -= 1
        _restore(lw, variable, saved)
    _check_path(lw, node)


def _looped(lw, node, trips: int, variable, bind, after) -> None:
    counter, again = lw.temp(U32), lw.temp(PRED)
    saved = lw.loops.names.get(variable) if variable else None
    lw.emit(Instr("loop", U32, counter, (Imm(trips, U32),)), guarded=False)
    lw.loops.depth += 1
    try:
        bind()
        lw.statements(node.body)
    finally:
        lw.loops.depth -= 1
        _restore(lw, variable, saved)
    lw.node = node
    after()
    lw.emit(Instr("endloop", U32, counter, (again,)), guarded=False)
    _check_path(lw, node)


def _restore(lw, variable, saved) -> None:
    if variable is None:
        return
    if saved is None:
        lw.loops.names.pop(variable, None)
    else:
        lw.loops.names[variable] = saved


def _check_path(lw, node) -> None:
    if lw.loops.depth:
        return  # the outermost loop checks the whole probe
    state = lw.loops  # outside loops the path is additive: count only what was emitted since the last check
    length = state.path_done + path_length(lw.body[state.path_index:])
    state.path_done, state.path_index = length, len(lw.body)
    if length > MAX_PATH_LENGTH and not state.path_reported:
        state.path_reported = True  # once per probe: every later loop is over the limit too
        lw.src.abort(node, f"path too long: with this loop one run of the probe executes up to {length} instructions; "
                     f"the limit is {MAX_PATH_LENGTH}", hint="make fewer trips or a shorter loop body")


# ------------------------------------------------------------------ IR helpers for the backends


def path_length(body: list) -> int:
    """Instructions one run executes, as the PTX backend writes them: `loop` is one (the counter's mov),
    `endloop` three per trip (sub, setp, bra), every other instruction one, loop bodies once per trip."""
    stack = [[0, 1]]  # [instructions so far, trips] per open loop
    for ins in body:
        if ins.op == "loop":
            stack[-1][0] += 1
            stack.append([0, ins.srcs[0].value])
        elif ins.op == "endloop":
            inner, trips = stack.pop()
            stack[-1][0] += (inner + 3) * trips
        else:
            stack[-1][0] += 1
    return stack[0][0]


def loop_tree(body: list) -> list:
    """The body as a tree: an instruction, or (trips, [items]) for a loop (the counters are not needed)."""
    out: list = []
    stack: list[tuple[int, list]] = []
    for ins in body:
        if ins.op == "loop":
            stack.append((ins.srcs[0].value, out))
            out = []
        elif ins.op == "endloop":
            trips, outer = stack.pop()
            outer.append((trips, out))
            out = outer
        else:
            out.append(ins)
    return out


def loop_label(counter: Reg) -> str:
    """The label of the loop counted by `counter` (unique in its probe: counters are temporaries)."""
    return f"L{counter.name}"


__all__ = ["UNROLL_MAX_TRIPS", "loop_tree", "loop_label", "lower_for", "lower_while", "path_length"]
