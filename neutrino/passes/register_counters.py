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

Which buckets (spec/pipeline.md, "SAVE lowering", register counters):

* every SAVE of the bucket's map in the kernel is such a SAVE (one record per snippet
  execution, thread level, value known), so no other code adds to the map at run time except
  through this step and the folded adds;
* the bucket has a site inside a loop: a site covered by the span `[label, branch]` of some
  branch to a label at or before it (every cycle of the control flow contains such a
  backward branch and lies within the spans of its backward branches, so a site outside
  every span runs at most once per thread and keeps the folded add);
* at most MAX_REGISTER_COUNTERS buckets per kernel, the most deeply nested first (the number
  of spans covering a site estimates its nesting), then in text order;
* not in a kernel whose module has a `.func` with an `exit` (a thread could leave without
  passing the kernel's exits, and its counts would be lost), nor in the counting variant.

A counter wraps after 2^32 - 1 executions of its block by one thread.
"""

from __future__ import annotations

import re

import attrs

from neutrino.isa.ptx import ir
from neutrino.passes.build import entry_index
from neutrino.probe_model import Field, MapSpec

#: the most buckets of one kernel counted in registers (each is a live u32 register of every thread)
MAX_REGISTER_COUNTERS = 16
_BRANCHES = ("bra", "bra.uni")


@attrs.frozen
class Counter:
    map_name: str
    bucket: int
    register: str


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


def plan(lowerer, groups: dict[str, list[ir.Instruction]], constants: dict) -> dict[str, Counter]:
    """origin of a snippet execution → the register counter its SAVE adds to, for the sites this step takes."""
    state, probes = lowerer.state, lowerer.probes
    eligible: dict[str, tuple[MapSpec, int]] = {}  # origin → (map, bucket)
    refused: set[str] = set()  # maps some SAVE adds to otherwise
    for origin, saves in groups.items():
        specs = [_spec_of(probes, origin, save) for save in saves]
        known = constants.get(id(saves[0]), (None,))
        bucket = _bucket(specs[0], known) if len(saves) == 1 else None
        if bucket is None:
            refused.update(spec.name for spec in specs)
        else:
            eligible[origin] = (specs[0], bucket)
    eligible = {o: v for o, v in eligible.items() if v[0].name not in refused}
    if not eligible:
        return {}
    depths = loop_depths(state.function.body)
    depth_of: dict[tuple[str, int], int] = {}
    for origin, (spec, bucket) in eligible.items():
        key = (spec.name, bucket)
        depth_of[key] = max(depth_of.get(key, 0), depths.get(id(groups[origin][0]), 0))
    order = {key: k for k, key in enumerate(depth_of)}
    chosen = sorted((key for key, depth in depth_of.items() if depth), key=lambda key: (-depth_of[key], order[key]))
    registers = {key: state.temp(f"rc{k}", "b32") for k, key in enumerate(chosen[:MAX_REGISTER_COUNTERS])}
    return {origin: Counter(spec.name, bucket, registers[(spec.name, bucket)])
            for origin, (spec, bucket) in eligible.items() if (spec.name, bucket) in registers}


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


def site_code(lowerer, counter: Counter, save: ir.Instruction) -> list[ir.Instruction]:
    """What replaces the SAVE: one add to the thread's counter, where the SAVE's predicate holds."""
    return [lowerer.emit("add.u32", counter.register, counter.register, 1, guard=save.guard)]


def entry_code(lowerer, counters: list[Counter]) -> list[ir.Instruction]:
    return [lowerer.emit("mov.u32", c.register, 0) for c in counters]


def exit_code(lowerer, counters: list[Counter], guard: ir.Guard | None) -> list[ir.Instruction]:
    """Before an exit: each counter, where the exit's guard holds, added as a thread-level sum to its bucket."""
    value = lowerer.state.temp("rc_value", "b64")
    code: list[ir.Instruction] = []
    for map_name in dict.fromkeys(c.map_name for c in counters):
        mine = [c for c in counters if c.map_name == map_name]
        spec = lowerer.probes.maps[map_name]
        view = MapSpec(map_name, "thread", 1, [Field(f"bucket{c.bucket}", "u64", 8 * c.bucket) for c in mine],
                       spec.record_bytes, "sum")
        for index, counter in enumerate(mine):
            code.append(lowerer.emit("cvt.u64.u32", value, counter.register))
            code += lowerer.counter_add(view, index, value, guard)
    return code


def apply(lowerer, plan_: dict[str, Counter], groups: dict, edits: dict) -> None:
    """The sites' adds into `edits`; the entry's zeroing and the exits' flushes into the body and `edits`."""
    if not plan_:
        return
    for origin, counter in plan_.items():
        save = groups[origin][0]
        edits[id(save)] = ([], site_code(lowerer, counter, save), [])
    counters = list(dict.fromkeys(plan_.values()))
    for anchor in lowerer.state.exits:
        before, replacement, after = edits.get(id(anchor), ([], None, []))
        edits[id(anchor)] = (exit_code(lowerer, counters, anchor.guard) + before, replacement, after)
    body = lowerer.state.function.body
    position = entry_index(body)
    body[position:position] = entry_code(lowerer, counters)
