"""Hist counters held in registers for the probe sites inside loops: a step of the PTX SAVE lowering.

A thread-level SAVE of a value known when instrumenting (passes/save_constants.py) into a
hist map always adds 1 per saving thread to one bucket: `lines_blocks.record(nl.block)` at
every basic block. Inside a loop that add runs on every trip: lanes counted (`activemask`,
`popc`), a shared or global atomic by the lowest of them. Here such a bucket gets instead a
u32 register of each thread (`<prefix>rc<k>`), zeroed at the kernel's entry; the site becomes
one `add.u32` (under the SAVE's predicate): no memory operation, no warp operation. Before
every `ret`/`exit` (under its guard) each counter is flushed as a thread-level sum into the
bucket's u64 counter: summed across the warp's leaving lanes (`redux.sync` from sm_80,
`shfl.sync` before, lane by lane before sm_30), the lowest of them adds the total if it is not
0 and the probe gate is on. The map's layout and totals are unchanged: every thread adds, once,
the number of times it saved there, which is what the per-site adds summed.

Sites that run equally often share one counter: unguarded sites whose basic blocks are in one
class of passes/flow_classes.py (a dominator and a post-dominator of each other that lie on the
same cycles: an `if` and its join, a loop's header and its latch when nothing leaves or skips in
between). The first of them adds 1; the others add nothing, and the exits flush the counter
into each one's bucket.

Which sites (spec/probe-toml.md, "Aggregation maps", register counters):

* every SAVE of the bucket's map in the kernel is such a SAVE (one record per snippet
  execution, thread level, value known), so no other code adds to the map at run time except
  through this step and the folded adds; and every site of the bucket is in one class (a
  staged counter then gets either the per-site adds or the flushes, never both);
* the class has a site inside a loop: a site covered by the span `[label, branch]` of some
  branch to a label at or before it (every cycle of the control flow contains such a
  backward branch and lies within the spans of its backward branches, so a site outside
  every span runs at most once per thread and keeps the folded add);
* at most MAX_REGISTER_COUNTERS classes per kernel, the most deeply nested first (the number
  of spans covering a site estimates its nesting), then in text order;
* not in a kernel whose module has a `.func` with an `exit` (a thread could leave without
  passing the kernel's exits, and its counts would be lost), nor in the counting variant.

A counter wraps after 2^32 - 1 executions of its block by one thread.
"""

from __future__ import annotations

import re

import attrs

from neutrino.isa.ptx import ir
from neutrino.passes import flow_classes
from neutrino.passes.build import entry_index
from neutrino.probe_model import Field, MapSpec

#: the most buckets of one kernel counted in registers (each is a live u32 register of every thread);
#: Triton's kernels that inline two elements' sinf/cosf per thread have more than 16 classes in loops
MAX_REGISTER_COUNTERS = 32
_BRANCHES = ("bra", "bra.uni")


@attrs.frozen
class Counter:
    """A u32 register of each thread and the (map, bucket) of each site it stands for, in text order."""

    register: str
    targets: tuple[tuple[str, int], ...]


@attrs.frozen
class Plan:
    """The register counters of one kernel, and what becomes of each SAVE they take (by origin)."""

    counters: tuple[Counter, ...] = ()
    adds: dict = attrs.Factory(dict)  # origin → the Counter its site adds 1 to
    dropped: frozenset = frozenset()  # origins whose site adds nothing: its class's counter stands for it

    def __contains__(self, origin: str) -> bool:
        return origin in self.adds or origin in self.dropped


def count(state) -> int:
    """How many register counters the kernel has (its `<prefix>rc<k>` registers)."""
    own = re.compile(re.escape(state.prefix) + r"rc\d+")
    return sum(1 for name in state.temps if own.fullmatch(name))


def loop_depths(body: list[ir.Statement]) -> dict[int, int]:
    """id(instruction) → the number of backward-branch spans `[label, branch]` covering it, for those covered.

    Every branch counts, the kernel's and the probes' own (a probe loop repeats its SAVEs).
    Linear in the body: the spans are summed as differences over positions.
    """
    statements = [stmt for _, _, stmt in ir.walk(body)]
    labels: dict[str, int] = {}
    for position, stmt in enumerate(statements):
        if type(stmt) is ir.Label:
            labels.setdefault(stmt.name, position)
    change = [0] * (len(statements) + 1)
    for position, stmt in enumerate(statements):
        if type(stmt) is not ir.Instruction or stmt.opcode.text not in _BRANCHES:
            continue
        target = stmt.operands[-1] if stmt.operands else None
        start = labels.get(target.name) if isinstance(target, (ir.Symbol, ir.Register)) else None
        if start is not None and start <= position:
            change[start] += 1
            change[position + 1] -= 1
    depths, depth = {}, 0
    for position, stmt in enumerate(statements):
        depth += change[position]
        if depth and type(stmt) is ir.Instruction:
            depths[id(stmt)] = depth
    return depths


def plan(lowerer, groups: dict[str, list[ir.Instruction]], constants: dict) -> Plan:
    """Which SAVEs are counted in registers: by class of equal counts (passes/flow_classes.py), the deepest first."""
    eligible = _eligible_sites(lowerer.probes, groups, constants)
    if not eligible:
        return Plan()
    body = lowerer.state.function.body
    depths, classes = loop_depths(body), flow_classes.statement_classes(body)
    members: dict = {}  # class key → origins, in text order
    for origin in eligible:
        save = groups[origin][0]
        key = classes.get(id(save)) if save.guard is None else None
        members.setdefault(("site", origin) if key is None else ("class", key), []).append(origin)
    sites_of_bucket: dict = {}
    for key, origins in members.items():
        for origin in origins:
            sites_of_bucket.setdefault(eligible[origin], set()).add(key)
    # a bucket with sites in two classes keeps its adds at the sites: its staged counter must have one kind of add
    whole = [key for key, origins in members.items() if all(sites_of_bucket[eligible[o]] == {key} for o in origins)]
    depth = {key: max(depths.get(id(groups[o][0]), 0) for o in members[key]) for key in whole}
    order = {key: k for k, key in enumerate(members)}
    chosen = sorted((key for key in whole if depth[key]), key=lambda key: (-depth[key], order[key]))
    counters, adds, dropped = [], {}, set()
    for k, key in enumerate(chosen[:MAX_REGISTER_COUNTERS]):
        origins = members[key]
        counter = Counter(lowerer.state.temp(f"rc{k}", "b32"), tuple(eligible[o] for o in origins))
        counters.append(counter)
        adds[origins[0]] = counter
        dropped.update(origins[1:])
    return Plan(tuple(counters), adds, frozenset(dropped))


def _eligible_sites(probes, groups: dict, constants: dict) -> dict[str, tuple[str, int]]:
    """origin → (map, bucket) of the SAVEs that may be counted in registers (module docstring)."""
    eligible: dict[str, tuple[str, int]] = {}
    refused: set[str] = set()  # maps some SAVE adds to otherwise
    for origin, saves in groups.items():
        specs = [_spec_of(probes, origin, save) for save in saves]
        known = constants.get(id(saves[0]), (None,))
        bucket = _bucket(specs[0], known) if len(saves) == 1 else None
        if bucket is None:
            refused.update(spec.name for spec in specs)
        else:
            eligible[origin] = (specs[0].name, bucket)
    return {o: target for o, target in eligible.items() if target[0] not in refused}


def _spec_of(probes, origin: str, save: ir.Instruction) -> MapSpec:
    if isinstance(save.operands[0], ir.Address):
        return probes.maps[save.operands[0].base.name]
    probe_name = origin.split(" ", 1)[1].split("#")[0]
    return probes.maps[next(p for p in probes.probes if p.name == probe_name).map]


def _bucket(spec: MapSpec, known: tuple) -> int | None:
    from neutrino.passes.save_constants import constant_bucket

    if spec.type != "hist" or spec.level != "thread" or len(known) != 1 or known[0] is None:
        return None
    return constant_bucket(spec.buckets, known[0])


def exit_code(lowerer, counters: tuple[Counter, ...], guard: ir.Guard | None) -> list[ir.Instruction]:
    """Before an exit: each counter, where the exit's guard holds, added as a thread-level sum to each of its buckets.

    From sm_80 the warp sum of a counter is taken once, whatever the number of buckets it stands for,
    and only where some leaving lane counted (a ballot; counters of blocks the warp never ran, such
    as slow paths, cost four instructions): the leaving lanes' u32 values cut into 16 + 16 bits (each
    part sums to at most 21 bits over 32 lanes), two `redux.sync`, and the lowest present lane adds
    the total to every bucket where it is not 0 (and the gate is on). The lanes present and the
    lowest of them are found once per exit.
    Before sm_80, each bucket gets the map's own thread-level add (lower_save counter_add)."""
    if not lowerer.has_redux:
        return _exit_code_per_bucket(lowerer, counters, guard)
    state = lowerer.state
    mask, lt, lead = state.temp("agg_mask", "b32"), state.temp("agg_lt", "b32"), state.temp("agg_lead", "pred")
    leaving, a, b = state.temp("rc_leaving", "b32"), state.temp("agg_a", "b32"), state.temp("agg_b", "b32")
    total, part = state.temp("agg_total", "b64"), state.temp("agg_part", "b64")
    some, ballot, go = state.temp("rc_some", "pred"), state.temp("rc_ballot", "b32"), state.temp("rc_go", "pred")
    code = [lowerer.emit("activemask.b32", mask), lowerer.emit("mov.u32", lt, "%lanemask_lt"),
            lowerer.emit("and.b32", lt, lt, mask), lowerer.emit("setp.eq.u32", lead, lt, 0)]
    for counter in counters:
        value = counter.register
        if guard is not None:  # lanes staying (guard false) add 0 and keep their counts for a later exit
            picks = (0, counter.register) if guard.negated else (counter.register, 0)
            code.append(lowerer.emit("selp.b32", leaving, *picks, guard.register))
            value = leaving
        code += [lowerer.emit("setp.ne.u32", some, value, 0), lowerer.emit("vote.sync.ballot.b32", ballot, some, mask),
                 lowerer.emit("setp.ne.u32", some, ballot, 0), lowerer.emit("and.pred", go, some, lead)]
        on = ir.Guard(ir.Register(some))  # the warp's sum is taken only where some lane counted (uniform)
        code += [lowerer.emit("and.b32", a, value, 0xFFFF, guard=on), lowerer.emit("shr.u32", b, value, 16, guard=on),
                 lowerer.emit("redux.sync.add.u32", a, a, mask, guard=on),
                 lowerer.emit("redux.sync.add.u32", b, b, mask, guard=on),
                 lowerer.emit("cvt.u64.u32", total, a, guard=on), lowerer.emit("cvt.u64.u32", part, b, guard=on),
                 lowerer.emit("shl.b64", part, part, 16, guard=on), lowerer.emit("add.u64", total, total, part, guard=on)]
        for map_name, bucket in counter.targets:
            address = lowerer.counter_address(lowerer.probes.maps[map_name], 8 * bucket)
            code += lowerer.add_if_nonzero(address, total, go)
    return code


def _exit_code_per_bucket(lowerer, counters: tuple[Counter, ...], guard: ir.Guard | None) -> list[ir.Instruction]:
    value = lowerer.state.temp("rc_value", "b64")
    code: list[ir.Instruction] = []
    for counter in counters:
        for map_name in dict.fromkeys(m for m, _ in counter.targets):
            buckets = [b for m, b in counter.targets if m == map_name]
            view = MapSpec(map_name, "thread", 1, [Field(f"bucket{b}", "u64", 8 * b) for b in buckets],
                           lowerer.probes.maps[map_name].record_bytes, "sum")
            for index in range(len(buckets)):  # (counter_add masks the value in place: converted again each time)
                code.append(lowerer.emit("cvt.u64.u32", value, counter.register))
                code += lowerer.counter_add(view, index, value, guard)
    return code


def apply(lowerer, plan_: Plan, groups: dict, edits: dict) -> None:
    """The sites' adds into `edits` (the other sites of a class: nothing); the entry's zeroing and the exits' flushes."""
    if not plan_.counters:
        return
    for origin, counter in plan_.adds.items():
        save = groups[origin][0]
        edits[id(save)] = ([], [lowerer.emit("add.u32", counter.register, counter.register, 1, guard=save.guard)], [])
    for origin in plan_.dropped:
        edits[id(groups[origin][0])] = ([], [], [])
    for anchor in lowerer.state.exits:
        before, replacement, after = edits.get(id(anchor), ([], None, []))
        edits[id(anchor)] = (exit_code(lowerer, plan_.counters, anchor.guard) + before, replacement, after)
    body = lowerer.state.function.body
    position = entry_index(body)
    body[position:position] = [lowerer.emit("mov.u32", c.register, 0) for c in plan_.counters]
