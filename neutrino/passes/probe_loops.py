"""Bounded loops in probe snippets: the verifier's loop rule (spec/verifier.md, "Loops").

A probe may loop only in one shape, which proves its own trip count::

        mov.u32   %c, 10;            // the counter: set to a constant before the loop
    LOOP:
        ...                          // the body: does not write %c or %p
        sub.u32   %c, %c, 1;         // the one write of %c in the loop: +/- a constant, unguarded
        setp.ne.u32 %p, %c, 0;       // the one write of %p in the loop: %c against a constant, unguarded
        @%p bra.uni LOOP;            // the only way back: to the loop's label, guarded by %p

`analyse` finds every loop of a snippet, runs each counter (the arithmetic of
its type, wrapping) until the comparison fails, and bounds the whole snippet's
longest path: the instructions outside loops once, a loop's body (nested loops
included) once per trip. It returns the loops with what the engine needs to
splice them (the control instructions, which run in every lane whatever the
site's predicate, so that a loop's trip count is the same in every lane and its
branch is uniform), and every problem, located by snippet line.
"""

from __future__ import annotations

import attrs

from neutrino.isa.ptx import ir
from neutrino.isa.ptx.semantics import defined_registers

# MAX_PATH_LENGTH: the most instructions one execution of a probe snippet may run, loops unrolled (labels
# not counted); MAX_TRIP_COUNT: the most trips one loop may make (a loop that makes more, or never stops, is
# refused); MAX_LOOP_DEPTH: loops nested deeper are refused. In neutrino/loop_limits.py, which the DSL
# compiler reads without loading this package.
from neutrino.loop_limits import MAX_LOOP_DEPTH, MAX_PATH_LENGTH, MAX_TRIP_COUNT  # noqa: E402

BRANCH_OPCODES = ("bra", "bra.uni")
_COMPARE = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "lo": lambda a, b: a < b, "ls": lambda a, b: a <= b, "hi": lambda a, b: a > b, "hs": lambda a, b: a >= b,
}


@attrs.frozen
class LoopProblem:
    line: int
    token: str | None
    message: str
    hint: str = ""


@attrs.define(eq=False)
class Loop:
    label: str
    head: int  # index of the label among the snippet's statements
    tail: int  # index of the backward branch
    line: int
    depth: int = 1
    parent: "Loop | None" = None
    trips: int = 0
    control: list = attrs.Factory(list)  # the counter's set/update, the compare, the branch
    shape: tuple = ()  # (counter, bound, cmp, type, step, update index, compare index), once checked
    init_index: int | None = None  # the counter's last write before the label


@attrs.define(eq=False)
class LoopAnalysis:
    loops: list[Loop]
    problems: list[LoopProblem]
    path_length: int  # the longest path through the snippet, in instructions (0 when a loop is refused)

    @property
    def control_ids(self) -> frozenset[int]:
        return frozenset(id(insn) for loop in self.loops for insn in loop.control)


def is_branch(insn: ir.Instruction) -> bool:
    return insn.opcode.text in BRANCH_OPCODES


def has_control_flow(statements: list[ir.Statement]) -> bool:
    return any(isinstance(s, ir.Label) or (isinstance(s, ir.Instruction) and s.opcode.base == "bra") for s in statements)


def _target(insn: ir.Instruction) -> str | None:
    ops = insn.operands
    if len(ops) == 1 and isinstance(ops[0], (ir.Symbol, ir.Register)):
        return ops[0].name
    return None


def analyse(statements: list[ir.Statement]) -> LoopAnalysis:
    """The loops of one snippet, their trip counts and the snippet's longest path; every problem found."""
    problems: list[LoopProblem] = []
    labels: dict[str, int] = {}
    for index, stmt in enumerate(statements):
        if isinstance(stmt, ir.Label):
            if stmt.name in labels:
                problems.append(LoopProblem(stmt.line, stmt.name, f"label {stmt.name} is defined twice"))
            labels.setdefault(stmt.name, index)
    loops = _find_loops(statements, labels, problems)
    if problems:
        return LoopAnalysis([], problems, 0)
    _nest(loops, problems)
    if problems:
        return LoopAnalysis([], problems, 0)
    owner = _owners(len(statements), loops)
    for loop in loops:
        _check_shape(statements, loop, owner, problems)
        _check_saves(statements, loop, problems)
    _last_writes_before_heads(statements, [loop for loop in loops if loop.shape])
    for loop in loops:
        if loop.shape:
            _check_trips(statements, loop, owner, problems)
    if problems:
        return LoopAnalysis([], problems, 0)
    length = _path_length(statements, loops)
    if loops and length > MAX_PATH_LENGTH:
        first = loops[0]
        problems.append(LoopProblem(
            first.line, first.label,
            f"path too long: one run of this probe executes up to {length} instructions with its loops "
            f"(trip counts {', '.join(f'{loop.label}: {loop.trips}' for loop in loops[:4])}{', …' if len(loops) > 4 else ''}); "
            f"the limit is {MAX_PATH_LENGTH}",
            hint="make fewer trips or a shorter loop body"))
    return LoopAnalysis(loops, problems, length)


def _find_loops(statements, labels: dict[str, int], problems: list[LoopProblem]) -> list[Loop]:
    loops: list[Loop] = []
    targeted: set[str] = set()
    for index, stmt in enumerate(statements):
        if not isinstance(stmt, ir.Instruction) or stmt.opcode.base != "bra":
            continue
        name = _target(stmt)
        if not is_branch(stmt) or name is None:
            problems.append(LoopProblem(stmt.line, stmt.opcode.text, f"{stmt.opcode} {', '.join(map(str, stmt.operands))}: "
                                        "a probe branches only with bra or bra.uni to a label of its own loop"))
            continue
        if name not in labels:
            problems.append(LoopProblem(stmt.line, stmt.opcode.text, f"branches are not allowed in probes, except a bounded loop's "
                                        f"branch back to its label: {name} is not a label of this snippet"))
            continue
        if labels[name] > index:
            problems.append(LoopProblem(stmt.line, name, f"forward branch to {name}: a probe branches only back, to the head of a bounded loop",
                                        hint="predicate the instructions instead (@%p ...)"))
            continue
        if name in targeted:
            problems.append(LoopProblem(stmt.line, name, f"a second branch back to {name}: a loop has one backward branch"))
            continue
        targeted.add(name)
        if stmt.guard is None:
            problems.append(LoopProblem(stmt.line, stmt.opcode.text, f"unbounded loop: the branch back to {name} is unconditional",
                                        hint="guard it with a predicate set from a counter: @%p bra LOOP;"))
            continue
        loops.append(Loop(name, labels[name], index, statements[labels[name]].line))
    reported = {p.token for p in problems}
    for name, index in labels.items():
        if name not in targeted and name not in reported:
            problems.append(LoopProblem(statements[index].line, name, f"label {name} is not allowed: it is not the head of a bounded loop",
                                        hint="a probe's only label is the one its loop's backward branch returns to"))
    loops.sort(key=lambda loop: loop.head)
    return loops


def _nest(loops: list[Loop], problems: list[LoopProblem]) -> None:
    """Loops nest properly (one inside the other, or apart); depth within the limit. One pass, by head."""
    open_loops: list[Loop] = []
    for loop in loops:
        while open_loops and open_loops[-1].tail < loop.head:
            open_loops.pop()
        if open_loops and open_loops[-1].tail < loop.tail:
            outer = open_loops[-1]
            problems.append(LoopProblem(loop.line, loop.label,
                                        f"loops {outer.label} and {loop.label} overlap: a loop lies inside another or apart"))
            continue
        loop.parent = open_loops[-1] if open_loops else None
        loop.depth = len(open_loops) + 1
        if loop.depth > MAX_LOOP_DEPTH:
            problems.append(LoopProblem(loop.line, loop.label,
                                        f"loop {loop.label} is nested {loop.depth} deep; the limit is {MAX_LOOP_DEPTH}"))
        open_loops.append(loop)


def _owners(count: int, loops: list[Loop]) -> list:
    """For each statement, the innermost loop holding it (None outside loops); inner loops come later."""
    owner: list = [None] * count
    for loop in loops:
        owner[loop.head:loop.tail + 1] = [loop] * (loop.tail + 1 - loop.head)
    return owner


def _writes(insn: ir.Instruction, name: str) -> bool:
    return isinstance(insn, ir.Instruction) and not is_branch(insn) and any(r.name == name for r in defined_registers(insn))


def _check_shape(statements, loop: Loop, owner: list, problems: list[LoopProblem]) -> None:
    """The branch's predicate from one setp of a counter against a constant; the counter stepped once by a constant."""
    branch = statements[loop.tail]

    def refuse(line, token, message, hint=""):
        problems.append(LoopProblem(line, token, f"loop {loop.label}: {message}", hint))

    predicate = branch.guard.register.name
    compares = [i for i in range(loop.head, loop.tail) if _writes(statements[i], predicate)]
    if len(compares) != 1:
        refuse(branch.line, predicate, f"cannot bound the trip count: {predicate} must be written once in the loop, by setp "
               f"comparing the counter with a constant (it is written {len(compares)} times)")
        return
    setp = statements[compares[0]]
    shape = _compare_shape(setp)
    operands = setp.operands
    if shape is None and setp.opcode.base == "setp" and len(operands) == 3 and all(isinstance(o, ir.Register) for o in operands[1:]):
        refuse(setp.line, str(operands[2]), f"data-dependent bound: {setp.opcode} compares {operands[1]} with {operands[2]}, "
               "a register, not with a constant", hint="compare the counter with a constant: the trip count must be known")
        return
    if shape is None or setp.guard is not None or owner[compares[0]] is not loop:
        refuse(setp.line, setp.opcode.text, f"cannot bound the trip count: {predicate} must come from an unguarded "
               "setp.CMP.TYPE comparing a register with a constant, in the loop itself")
        return
    counter = shape[0]
    updates = [i for i in range(loop.head, loop.tail) if _writes(statements[i], counter)]
    update = statements[updates[0]] if len(updates) == 1 else None
    step = _step(update, counter) if update is not None else None
    if step is None or update.guard is not None or owner[updates[0]] is not loop:
        line = statements[updates[1]].line if len(updates) > 1 else (update.line if update else branch.line)
        refuse(line, counter, f"counter {counter} must be written exactly once in the loop, unguarded, by add or sub "
               f"of a constant (it is written {len(updates)} times)" if step is None or len(updates) != 1 else
               f"counter {counter} must be updated unguarded and in the loop itself, not in a nested loop")
        return
    loop.shape = (*shape, step, updates[0], compares[0])


def _last_writes_before_heads(statements, loops: list[Loop]) -> None:
    """Each loop's `init_index`: where its counter was last written before its label (one pass)."""
    at_head = {loop.head: loop for loop in loops}
    last: dict[str, int] = {}
    for index, stmt in enumerate(statements):
        loop = at_head.get(index)
        if loop is not None:
            loop.init_index = last.get(loop.shape[0])
        if isinstance(stmt, ir.Instruction) and not is_branch(stmt) and stmt.opcode.base != "SAVE":
            for reg in defined_registers(stmt):
                last[reg.name] = index


def _check_trips(statements, loop: Loop, owner: list, problems: list[LoopProblem]) -> None:
    """The counter's start: the last write before the label, at the loop's own level (inside the enclosing loop,
    outside sibling loops), an unguarded mov of a constant; then the trips, by running the counter."""
    counter, bound, cmp, type_, step, update_at, compare_at = loop.shape
    branch = statements[loop.tail]
    index = loop.init_index
    init_insn = statements[index] if index is not None else None
    parent_head = loop.parent.head if loop.parent else -1
    if index is None or index <= parent_head or owner[index] is not loop.parent or init_insn.guard is not None \
            or init_insn.opcode.base != "mov" or len(init_insn.operands) != 2 \
            or not isinstance(init_insn.operands[1], ir.Immediate) or init_insn.operands[1].value is None:
        problems.append(LoopProblem(loop.line, loop.label, f"loop {loop.label}: counter {counter} is not set to a constant before the loop",
                                    hint=f"mov.{type_} {counter}, N; right before {loop.label}:, unguarded"))
        return
    init = init_insn.operands[1].value
    trips = _run(init, step, bound, cmp, type_, update_first=update_at < compare_at, negated=branch.guard.negated)
    if trips is None:
        problems.append(LoopProblem(branch.line, branch.guard.register.name,
                                    f"loop {loop.label}: trip count not bounded: counter {counter} from {init} by {step:+d} while "
                                    f"{'not ' if branch.guard.negated else ''}{cmp} {bound} runs more than {MAX_TRIP_COUNT} trips (or for ever)"))
        return
    loop.trips = trips
    loop.control = [init_insn, statements[update_at], statements[compare_at], branch]


def _check_saves(statements, loop: Loop, problems: list[LoopProblem]) -> None:
    """The compact SAVE (SAVE.u32 {...}, a datamodel's) builds one record per run: not in a loop."""
    for stmt in statements[loop.head:loop.tail]:
        if isinstance(stmt, ir.Instruction) and stmt.opcode.base == "SAVE" and stmt.operands \
                and not isinstance(stmt.operands[0], ir.Address):
            problems.append(LoopProblem(stmt.line, "SAVE", f"loop {loop.label}: {stmt.opcode} builds one record per probe run, "
                                        "so it cannot be in a loop", hint="declare a [map.NAME] and write SAVE [ NAME ] {...}: one record per trip"))


def _compare_shape(setp) -> tuple[str, int, str, str] | None:
    """(counter, constant, comparison, type) of `setp.CMP.TYPE %p, %c, K` (or K, %c, mirrored)."""
    parts = setp.opcode.modifiers
    if setp.opcode.base != "setp" or len(parts) != 2 or len(setp.operands) != 3:
        return None
    cmp, type_ = parts
    if cmp not in _COMPARE or type_[0] not in "usb" or type_ == "b16" and cmp not in ("eq", "ne"):
        return None
    a, b = setp.operands[1], setp.operands[2]
    if isinstance(a, ir.Register) and isinstance(b, ir.Immediate) and b.value is not None:
        return a.name, b.value, cmp, type_
    mirror = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "lo": "hi", "hi": "lo", "ls": "hs", "hs": "ls"}
    if isinstance(b, ir.Register) and isinstance(a, ir.Immediate) and a.value is not None:
        return b.name, a.value, mirror.get(cmp, cmp), type_
    return None


def _step(update, counter: str) -> int | None:
    """The constant `update` adds to the counter (`add %c, %c, K` or `add %c, K, %c`, `sub %c, %c, K`)."""
    base = update.opcode.base
    if base not in ("add", "sub") or len(update.operands) != 3 or len(update.opcode.modifiers) != 1:
        return None
    _, a, b = update.operands
    if isinstance(a, ir.Register) and a.name == counter and isinstance(b, ir.Immediate) and b.value is not None:
        return b.value if base == "add" else -b.value
    if base == "add" and isinstance(b, ir.Register) and b.name == counter and isinstance(a, ir.Immediate) and a.value is not None:
        return a.value
    return None


def _run(init: int, step: int, bound: int, cmp: str, type_: str, update_first: bool, negated: bool = False) -> int | None:
    """Trips the loop makes, by running its counter (wrapping in the type's width); None past MAX_TRIP_COUNT."""
    bits = int(type_[1:])
    mask = (1 << bits) - 1
    signed = type_[0] == "s"

    def view(v: int) -> int:
        v &= mask
        return v - (1 << bits) if signed and v >> (bits - 1) else v

    test = _COMPARE[cmp]
    value = init & mask
    for trips in range(1, MAX_TRIP_COUNT + 1):
        if update_first:
            value = (value + step) & mask
            again = test(view(value), view(bound))
        else:
            again = test(view(value), view(bound))
            value = (value + step) & mask
        if again == negated:  # `@!%p bra` goes back while the comparison fails
            return trips
    return None


def _path_length(statements, loops: list[Loop]) -> int:
    """Instructions on the longest path: each loop body counted once per trip, nested loops multiplied."""
    weight = [1 if isinstance(s, ir.Instruction) else 0 for s in statements]

    at_head = {loop.head: loop for loop in loops}

    def span(start: int, end: int) -> int:  # statements[start:end], loops inside counted with their trips
        total, index = 0, start
        while index < end:
            inner = at_head.get(index)
            if inner is None:
                total += weight[index]
                index += 1
                continue
            total += inner.trips * span(inner.head + 1, inner.tail + 1)  # the label itself weighs nothing
            index = inner.tail + 1
        return total

    return span(0, len(statements))
