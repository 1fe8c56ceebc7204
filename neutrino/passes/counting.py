"""The counting variant: a copy of a kernel that runs before it and must change nothing.

For maps with `cap = "count"` the runtime first launches `k__nt_count`, which
only counts the records the real kernel will write, then sizes the buffers
and launches the real kernel. Whatever the counting launch does to the
program's state happens twice, so it must do nothing the program can see:

* writes to program memory go (`drop_global_writes`): stores, reductions and
  copies into global or generic memory are dropped; an atomic becomes a load
  of the same bytes into its destination; shared and local memory are the
  counting launch's own and stay;
* every function the copy calls, transitively, is called through a copy of
  its own, `f__nt_count`, rewritten the same way; the real kernel keeps
  calling the originals;
* calls to functions whose body is not in the module: the ones whose effects
  we know (`EXTERN_CALLS`) are dropped (`vprintf`, `free`, `malloc`) or end the
  thread (`__assertfail`, which never returns: the real kernel reports the
  failure); `trap`/`brkpt` end the thread too (`exit`), so a counting run
  never stops the program where the real kernel would not;
* what cannot be made free of effects refuses the kernel with a located
  `InstrumentError` (the runtime then runs the original kernel, with one
  `fallback` line of stage `instrument` in the event log): an indirect call
  (through a function pointer), a call to another body-less function, a dropped
  call whose result is read, and an atomic's loaded stand-in value that decides
  control flow (a branch, a guarded call/return, a SAVE's guard): the stand-in
  is not what the atomic would have returned, so counts could differ, or a
  loop waiting on other threads' atomics would spin for ever.

Which instruction is a store, an atomic, a call or a trap, the semantics table
says (`neutrino/isa/ptx/semantics.py`); only the names of body-less functions
are listed here, as they are no instructions.
"""

from __future__ import annotations

import re
from typing import Callable, ClassVar

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir
from neutrino.isa.ptx.semantics import access_spaces, defined_registers, effects, lookup
from neutrino.passes.lower_save import COUNT_SUFFIX, COUNTING_ORIGIN, clone_function, drop_global_writes
from neutrino.passes.state import Context
from neutrino.passes.match import exits_of
from neutrino.passes.prune import declared_name
from neutrino.probefile import SAVE

_REGISTER_TOKEN = re.compile(r"%[A-Za-z0-9_$]+")
# Body-less functions a counting variant may call, and what becomes of the call there.
DROP = "drop"  # the call goes; its result, if any, must not be read
STOP = "stop"  # the thread ends there (`exit`): the function never returns
EXTERN_CALLS = {"vprintf": DROP, "malloc": DROP, "free": DROP, "__assertfail": STOP}


def counting_name(name: str) -> str:
    """The name of the counting copy of a function or an entry."""
    return name + COUNT_SUFFIX


@attrs.frozen
class CallParts:
    """`call{.uni} (ret…), target, (arg…){, prototype}` as names."""

    returns: tuple[str, ...]
    target: ir.Operand
    args: tuple[str, ...]


def call_parts(insn: ir.Instruction) -> CallParts:
    operands = list(insn.operands)
    returns: tuple[str, ...] = ()
    if operands and isinstance(operands[0], ir.ParenList):
        returns = tuple(str(item) for item in operands.pop(0).items)
    target = operands.pop(0) if operands else ir.Sink()
    args = tuple(str(item) for item in operands[0].items) if operands and isinstance(operands[0], ir.ParenList) else ()
    return CallParts(returns, target, args)


def is_call(insn: ir.Instruction) -> bool:
    return lookup(insn.opcode).control == "call"


def _refuse(source: str, function: ir.Function, insn: ir.Instruction, kernel: str, why: str) -> InstrumentError:
    return InstrumentError(
        f"{source}:{insn.line or function.line}: error: kernel {kernel}: no counting variant for its cap = \"count\" "
        f"maps: {why} (in {function.name}); the kernel runs unprobed"
    )


@attrs.define
class _Rewriter:
    """Makes one counting kernel and the functions it reaches free of side effects."""

    module: ir.Module
    kernel: str  # the real kernel's name, for messages
    clones: dict[str, ir.Function]  # original function name → its counting copy (shared by every kernel)
    defined: dict[str, ir.Function]
    new_clones: list[ir.Function] = attrs.Factory(list)
    dropped_results: list[tuple[ir.Function, ir.Instruction, set[str]]] = attrs.Factory(list)  # registers loaded from their results
    result_loads: set[int] = attrs.Factory(set)  # the `ld.param`s of dropped calls' results: they go with the call
    fresh_name: Callable[[str], str] = counting_name  # a module-level name unused by the program (spec/pipeline.md, "Names")

    def refuse(self, function: ir.Function, insn: ir.Instruction, why: str) -> InstrumentError:
        return _refuse(self.module.source, function, insn, self.kernel, why)

    def run(self, counting_kernel: ir.Function) -> None:
        """Rewrite the calls of the kernel and of every copy made on the way."""
        work = [counting_kernel]
        while work:
            function = work.pop()
            work += self.rewrite_body(function, function.body or [])

    def rewrite_body(self, function: ir.Function, body: list[ir.Statement]) -> list[ir.Function]:
        """Calls and traps of one body rewritten in place; the functions first cloned here."""
        fresh: list[ir.Function] = []
        rebuilt: list[ir.Statement] = []
        changed = False
        for index, stmt in enumerate(body):
            if type(stmt) is ir.Scope:
                fresh += self.rewrite_body(function, stmt.body)
            elif type(stmt) is ir.Instruction and stmt.origin is None:
                if id(stmt) in self.result_loads:  # ptxas crashes on a result read without its call
                    changed = True
                    continue
                control = lookup(stmt.opcode).control
                if control == "trap":
                    rebuilt.append(_exit_for(stmt))
                    changed = True
                    continue
                if control == "call":
                    replacement = self.rewrite_call(function, stmt, fresh, body[index + 1 :])
                    if replacement is not None:
                        rebuilt.extend(replacement)
                        changed = True
                        continue
            rebuilt.append(stmt)
        if changed:
            body[:] = rebuilt
        return fresh

    def rewrite_call(
        self, function: ir.Function, insn: ir.Instruction, fresh: list[ir.Function], rest: list[ir.Statement]
    ) -> list[ir.Instruction] | None:
        """None: the call stays, retargeted at a counting copy; else what replaces it (`rest`: what follows it)."""
        parts = call_parts(insn)
        if not isinstance(parts.target, ir.Symbol):
            raise self.refuse(function, insn, f"an indirect call through {parts.target} (a function pointer) cannot be followed")
        name = parts.target.name
        callee = self.defined.get(name)
        if callee is None:
            action = EXTERN_CALLS.get(name)
            if action is None:
                raise self.refuse(function, insn, f"it calls {name}, whose body is not in this module")
            if action == STOP:
                return [_exit_for(insn)]
            if parts.returns:
                loads = _loads_from(rest, set(parts.returns))
                self.result_loads |= {id(load) for load in loads}
                registers = {r.name for load in loads for r in ir.registers_in(load.operands[0])}
                self.dropped_results.append((function, insn, registers))
            return []
        clone = self.clones.get(name)
        if clone is None:
            clone = self.clones[name] = clone_function(callee)
            clone.name, clone.linkage = self.fresh_name(counting_name(name)), ()
            drop_global_writes(clone)
            fresh.append(clone)
            self.new_clones.append(clone)
        insn.operands = tuple(ir.Symbol(clone.name) if op is parts.target else op for op in insn.operands)
        return None


def _exit_for(insn: ir.Instruction) -> ir.Instruction:
    """`exit` under the same guard: the thread stops where the real kernel would stop the program."""
    return ir.Instruction(ir.opcode("exit"), (), insn.guard, insn.line, COUNTING_ORIGIN)


def _prototype(clone: ir.Function) -> ir.Function:
    """A declaration of a counting copy, so calls may come before its body (and recursion works)."""
    return ir.Function(
        "func", clone.name, (),
        None if clone.returns is None else [ir.Param(p.text) for p in clone.returns],
        None if clone.params is None else [ir.Param(p.text) for p in clone.params],
        list(clone.directives), None,
    )


def place_clones(module: ir.Module, after: ir.Function, clones: list[ir.Function]) -> None:
    """Declarations of the copies before the first function, their bodies after `after`."""
    if not clones:
        return
    first = next(i for i, item in enumerate(module.items) if isinstance(item, ir.Function))
    module.items[first:first] = [_prototype(c) for c in clones]
    at = module.items.index(after) + 1
    module.items[at:at] = clones


def make_side_effect_free(
    module: ir.Module, kernel: str, counting_kernel: ir.Function, clones: dict[str, ir.Function], defined: dict[str, ir.Function],
    fresh_name: Callable[[str], str] = counting_name,
) -> None:
    """Rewrite `counting_kernel` (already stripped of its own writes) and what it calls; refuse what cannot be.

    `clones`: the copies made so far in this module (filled in here); `defined`: its functions with a body.
    """
    rewriter = _Rewriter(module, kernel, clones, defined, fresh_name=fresh_name)
    rewriter.run(counting_kernel)
    read = _dropped_result_read(rewriter.dropped_results)
    if read is not None:
        function, insn = read
        raise rewriter.refuse(function, insn, f"the result of {call_parts(insn).target} is read, and the call must go")
    problem = stand_ins_deciding_control(_called_closure(counting_kernel, clones), module)
    if problem is not None:
        function, insn = problem
        raise rewriter.refuse(function, insn, f"a value an atomic would return decides control flow at '{insn.opcode}'")
    place_clones(module, counting_kernel, rewriter.new_clones)


def _called_closure(kernel: ir.Function, clones: dict[str, ir.Function]) -> list[ir.Function]:
    by_name = {c.name: c for c in clones.values()}
    out, seen, work = [], {kernel.name}, [kernel]
    while work:
        function = work.pop()
        out.append(function)
        for insn in ir.instructions(function.body or []):
            if is_call(insn) and isinstance(target := call_parts(insn).target, ir.Symbol):
                callee = by_name.get(target.name)
                if callee is not None and callee.name not in seen:
                    seen.add(callee.name)
                    work.append(callee)
    return out


def _loads_from(rest: list[ir.Statement], params: set[str]) -> list[ir.Instruction]:
    """The `ld.param`s of a call's return `params` in the statements after it, up to the next call."""
    loads: list[ir.Instruction] = []
    for stmt in rest:
        if type(stmt) is not ir.Instruction:
            continue
        if is_call(stmt):
            break
        if _param_base(stmt, "load") in params:
            loads.append(stmt)
    return loads


def _dropped_result_read(
    dropped: list[tuple[ir.Function, ir.Instruction, set[str]]]
) -> tuple[ir.Function, ir.Instruction] | None:
    """A dropped call whose result registers some instruction of its function reads (wherever: a
    sound over-approximation), else None. One scan per function, however many calls it drops."""
    by_function: dict[int, tuple[ir.Function, dict[str, ir.Instruction]]] = {}
    for function, call, registers in dropped:
        owners = by_function.setdefault(id(function), (function, {}))[1]
        owners.update((r, call) for r in registers)
    for function, owners in by_function.values():
        if not owners:
            continue
        for insn in ir.instructions(function.body or []):
            if insn.guard is not None and insn.guard.register.name in owners:
                return function, owners[insn.guard.register.name]
            if insn._operands is None and not _may_name(insn.source_operands or "", owners):
                continue  # the text names none of them: no need to parse it
            for reg in effects(insn).uses:
                if reg.name in owners:
                    return function, owners[reg.name]
    return None


def _may_name(text: str, registers: dict[str, ir.Instruction]) -> bool:
    """Whether operand text mentions one of the registers (a superset: `%r1` also matches `%r12`)."""
    return "%" in text and any(token in registers for token in _REGISTER_TOKEN.findall(text))


@attrs.frozen
class PtxCountingVariant:
    """For maps with cap = "count": a copy of each kernel that only counts records.

    Made before lowering, from the kernel with its SAVE pseudo-instructions, so
    that both copies see exactly the same probe code. The copy and every
    function it calls are free of side effects (the module's docstring), or the
    kernel is refused.
    """

    name: ClassVar[str] = "counting-variant"
    requires: ClassVar[tuple[str, ...]] = ("resolve-operands",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        if not any(m.cap == "count" for m in ctx.probes.maps.values()):
            return
        clones: dict[str, ir.Function] = {}  # called functions' copies, shared by every kernel of the module
        defined = {f.name: f for f in module.functions() if f.body is not None and not f.is_entry}
        names = ctx.names(module)
        for name, state in list(ctx.kernels.items()):
            clone = clone_function(state.function)
            # A fresh module-level name: the module may already define `k__nt_count` (kernel.json records ours).
            clone.name = names.fresh_global(counting_name(name))
            names.copy_scope(state.function, clone)
            drop_global_writes(clone)
            module.items.insert(module.items.index(state.function) + 1, clone)
            make_side_effect_free(module, name, clone, clones, defined, names.fresh_global)
            originals = [i for i in ir.instructions(clone.body) if i.origin is None]
            ctx.kernels[clone.name] = attrs.evolve(
                state,
                function=clone,
                counting=True,
                originals=originals,
                original_ids=[id(i) for i in originals],
                exits=exits_of(originals),
                temps=dict(state.temps),
                levels=set(state.levels),
                sites=list(state.sites),
                skipped=[],
                params=[],
            )
            state.count_kernel = clone.name



# -- does a stand-in value (an atomic turned into a load) decide control flow?
# Memory the counting copy keeps writing: a stand-in stored there may come back through a load of it.
_KEPT_SPACES = ("local", "shared", None)
ANYWHERE = ("", "")  # the region of an address we cannot resolve: it may be any kept memory


@attrs.define
class _Facts:
    """What the analysis knows across functions; every field only grows, so iterating ends."""

    params: dict[str, set[str]]  # function → its parameters that may receive a stand-in
    returns: set[str] = attrs.Factory(set)  # functions that may return one
    regions: set[tuple[str, str]] = attrs.Factory(set)  # kept memory a stand-in was stored to (`_region`)

    def size(self) -> tuple[int, int, int]:
        return sum(map(len, self.params.values())), len(self.returns), len(self.regions)


@attrs.define
class _Calls:
    """One function's calls to counting copies: which callee each argument and result name belongs to."""

    args: dict[str, list[tuple[ir.Function, int]]] = attrs.Factory(dict)
    returns: dict[str, set[str]] = attrs.Factory(dict)

    @classmethod
    def of(cls, function: ir.Function, by_name: dict[str, ir.Function]) -> "_Calls":
        calls = cls()
        for insn in ir.instructions(function.body or []):
            if not is_call(insn):
                continue
            parts = call_parts(insn)
            callee = by_name.get(str(parts.target))
            if callee is None:
                continue
            for index, arg in enumerate(parts.args):
                calls.args.setdefault(arg, []).append((callee, index))
            for name in parts.returns:
                calls.returns.setdefault(name, set()).add(callee.name)
        return calls


def stand_ins_deciding_control(functions: list[ir.Function], module: ir.Module) -> tuple[ir.Function, ir.Instruction] | None:
    """The first place where a value an atomic's stand-in load gave may decide control flow, else None.

    Flow-insensitive taint over registers (a register is tainted if any definition of it reads a
    tainted one, or is guarded by one), across calls through parameters and return values, and
    through the local and shared memory the copy keeps: a store of a tainted value taints the
    region it writes (a variable: a function's stack frame, a shared array), and loads from that
    region, or from any region when either address is not known. A sink is a control instruction (branch, call, return, exit,
    barrier) reading a tainted register, its guard included, and a SAVE under a tainted guard.
    """
    if not any(_is_stand_in(i) for f in functions for i in ir.instructions(f.body or [])):
        return None  # the common case: no atomic's result is used
    module_names = {name for item in module.items if isinstance(item, ir.Directive) and (name := declared_name(item))}
    by_name = {f.name: f for f in functions}
    facts = _Facts({f.name: set() for f in functions})
    calls = {f.name: _Calls.of(f, by_name) for f in functions}
    roots = {f.name: _address_roots(f) for f in functions}
    users = {f.name: _users(f) for f in functions}
    while True:
        before = facts.size()
        for function in functions:
            regions = _Regions(function.name, roots[function.name], module_names)
            hit = _taint_function(function, facts, calls[function.name], regions, users[function.name])
            if hit is not None:
                return function, hit
        if facts.size() == before:
            return None


def _is_stand_in(insn: ir.Instruction) -> bool:
    return insn.origin == COUNTING_ORIGIN and any(access == "load" for _, access, _ in access_spaces(insn.opcode))


def _param_base(insn: ir.Instruction, wanted: str) -> str | None:
    """The parameter name an `ld.param`/`st.param` addresses (`wanted`: load or store), else None."""
    for index, access, space in access_spaces(insn.opcode):
        if space == "param" and access == wanted and index < len(insn.operands):
            address = insn.operands[index]
            if isinstance(address, ir.Address) and isinstance(address.base, ir.Symbol):
                return address.base.name
    return None


def _is_seed(insn: ir.Instruction, function: ir.Function, facts: _Facts, calls: _Calls, regions: "_Regions") -> bool:
    if _is_stand_in(insn):
        return True
    spaces = access_spaces(insn.opcode)
    if not any(access == "load" for _, access, _ in spaces):
        return False
    param = _param_base(insn, "load")
    if param is not None:
        return param in facts.params[function.name] or bool(calls.returns.get(param, set()) & facts.returns)
    if not facts.regions:
        return False
    for index, access, space in spaces:
        if access == "load" and space in _KEPT_SPACES and index < len(insn.operands):
            region = regions.of(insn.operands[index])
            if region == ANYWHERE or ANYWHERE in facts.regions or region in facts.regions:
                return True
    return False


def _users(function: ir.Function) -> dict[str, list[ir.Instruction]]:
    """Register → the instructions reading it (its guard included)."""
    users: dict[str, list[ir.Instruction]] = {}
    for insn in ir.instructions(function.body or []):
        for reg in effects(insn).uses:
            users.setdefault(reg.name, []).append(insn)
    return users


def _taint_function(
    function: ir.Function, facts: _Facts, calls: _Calls, regions: "_Regions", users: dict[str, list[ir.Instruction]]
) -> ir.Instruction | None:
    """Propagate taint inside one function, updating `facts`; the sink reached, if any."""
    body = ir.instructions(function.body or [])
    tainted: set[str] = set()
    work = [insn for insn in body if _is_seed(insn, function, facts, calls, regions)]
    own_returns = {p.name for p in function.returns or []}
    while work:
        insn = work.pop()
        eff = effects(insn)
        reads_taint = any(r.name in tainted for r in eff.uses)
        if reads_taint and (eff.control is not None or (insn.opcode.base == SAVE and insn.guard is not None
                                                        and insn.guard.register.name in tainted)):
            return insn
        for reg in () if insn.opcode.base == SAVE else eff.defs:  # a SAVE defines nothing (the table does not know it)
            if reg.name not in tainted:
                tainted.add(reg.name)
                work.extend(users.get(reg.name, ()))
        if reads_taint:
            _taint_stores(insn, function.name, facts, calls, own_returns, regions)
    return None


def _taint_stores(
    insn: ir.Instruction, function: str, facts: _Facts, calls: _Calls, own_returns: set[str], regions: "_Regions"
) -> None:
    """A tainted store: into a call's argument, the function's result, or kept memory."""
    for index, access, space in access_spaces(insn.opcode):
        if access not in ("store", "atomic"):
            continue
        if space != "param":
            if space in _KEPT_SPACES and index < len(insn.operands):
                facts.regions.add(regions.of(insn.operands[index]))
            continue
        param = _param_base(insn, access)
        if param in own_returns:
            facts.returns.add(function)
        for callee, index in calls.args.get(param or "", ()):
            if callee.params and index < len(callee.params):
                facts.params[callee.name].add(callee.params[index].name)


@attrs.define
class _Regions:
    """The region of kept memory an address names: (scope, variable), scope '' for module variables
    (shared arrays every function sees) and the function's name for its own (`.local` frames)."""

    function: str
    roots: dict[str, str]  # register → the variable it points into
    module_names: set[str]

    def of(self, address: ir.Operand) -> tuple[str, str]:
        base = address.base if isinstance(address, ir.Address) else None
        root = base.name if isinstance(base, ir.Symbol) else self.roots.get(base.name) if isinstance(base, ir.Register) else None
        if root is None:
            return ANYWHERE
        return ("" if root in self.module_names else self.function, root)


def _address_roots(function: ir.Function) -> dict[str, str]:
    """Register → the variable whose address it holds (`mov r, var`, then conversions and offset
    arithmetic), for registers every definition of which agrees; the others point anywhere."""
    definitions: dict[str, list[ir.Instruction]] = {}
    for insn in ir.instructions(function.body or []):
        for reg in defined_registers(insn):
            definitions.setdefault(reg.name, []).append(insn)
    roots: dict[str, str | None] = {}
    for _ in range(3):  # a chain in program order settles in one pass; loops' increments in the next
        for name, defs in definitions.items():
            found = {_root_of(d, roots) for d in defs}
            roots[name] = found.pop() if len(found) == 1 else None
    return {name: root for name, root in roots.items() if root is not None}


def _root_of(insn: ir.Instruction, roots: dict[str, str | None]) -> str | None:
    if insn.opcode.base not in ("mov", "cvta", "add", "sub"):
        return None
    named = [o.name for o in insn.operands[1:] if isinstance(o, ir.Symbol)]
    pointers = [roots.get(o.name) for o in insn.operands[1:] if isinstance(o, ir.Register) and o.name in roots]
    if len(named) + len([p for p in pointers if p]) != 1:
        return None
    return named[0] if named else next(p for p in pointers if p)
