"""Per-block staging of aggregation maps in shared memory: the step of the PTX SAVE lowering for `stage = "block"` maps.

A sum/hist map declared with `stage = "block"` (spec/probe-toml.md, "Aggregation
maps") keeps its counters of one block in a `.shared` array of the kernel, laid
out as the map's row (u64 counters); its global buffer has one row
(spec/kernel-json.md). SAVE lowering has already written the adds as
`red.global.add.u64` into the map's pointer registers (`buf_<map>`, `hoff_<map>`);
this step, run right after it, makes of them:

    entry     the map's global row is kept (`gbuf_<map>`: buffer addressing gives staged maps
              no stripe row), `buf_<map>` points at the map's part of the shared array, the block's
              threads zero the array (and the exit counter after it), then `bar.sync 0`
              (every thread of the block reaches the kernel's first instruction)
    hist add  (at most 32 at a time) `red.shared.add.u32`, no result awaited, while the
              adding thread's own staged adds stay below THREAD_STAGED_LIMIT; past it the
              add goes to the global row as without staging; so no 32-bit word of a block
              of at most 1024 threads wraps (the high word stays 0)
    sum add   `atom.shared.add.u32` of the low word, then the high word plus the carry
              out of the low one (`red.shared.add.u32`, only when non-zero): an exact u64
              add out of 32-bit shared atomics (64-bit shared adds are compare-and-swap
              loops in SASS); every add keeps its predicate (gate, guard, leader)
    each exit before the `ret`/`exit` (under its guard): the warp's leaving lanes make
              their shared adds visible (`membar.cta`, `bar.warp.sync`), the lowest adds
              their number to the block's exit counter; the lanes that bring it to the
              block's thread count are the block's last, and they copy every non-zero
              counter of the array into the global row (`red.global.add.u64`, one per
              counter and block, spread over those lanes). No barrier on exit paths:
              threads leave at different exits and times.

A kernel where this cannot be done safely keeps the global adds, all into the one
row (correct, but every warp of the launch adds to the same counters):
its target below sm_70 (or a `.version` that cannot take the warp operations),
a `.func` of the module with an `exit` (a thread could leave without passing an
exit of the entry, and the block's last lanes would never flush), or static shared
memory over 48 KB with the array (`STATIC_SHARED_LIMIT`). Dynamic shared memory
(`.extern .shared`) is not known here: a launch asking for more than the block's
maximum less the array fails, and the runtime falls back to the original kernel.
The counting variant of a kernel has no aggregation maps and is left alone.
"""

from __future__ import annotations

import re

import attrs

from neutrino.isa.ptx import ir
from neutrino.passes.build import entry_index, insn, splice
from neutrino.passes.state import Context, KernelState

ORIGIN = "shared-aggregation"
LOWERING_ORIGIN = "save-lowering"  # passes/lower_save.ORIGIN (not imported: lower_save imports this module)
GATE_REGISTER = "on"  # passes/lower_save.GATE_REGISTER
STAGE_SM = 70  # independent thread scheduling: the exit protocol below is written for it
STATIC_SHARED_LIMIT = 48 * 1024  # static shared memory a block may declare
DYNAMIC_ALIGN_WORDS = 1024 // 8  # the array is a whole number of KB (see stage)
#: a thread adds to the staged hist counters until its own adds reach this, then to global memory: the
#: block's ≤ 1024 threads thus add < 2^32 to each 32-bit counter word, which never wraps
THREAD_STAGED_LIMIT = 1 << 22
#: the registers whose atomics this step adds (passes/verify.py admits them): the exit counter and a global counter
EXIT_COUNTER, GLOBAL_COUNTER = "stg_exitp", "stg_gptr"

_SHARED_DECL = re.compile(r"^(?:\.\w+\s+)*\.shared\b")
_ELEMENT = re.compile(r"\.[busf](8|16|32|64|128)\b")
_VECTOR = re.compile(r"\.v(2|4|8)\b")
_DIMS = re.compile(r"\[(\d*)\]")


def staged_maps(state: KernelState, probes) -> list:
    """The kernel's aggregation maps declared `stage = "block"`, in the kernel's map order."""
    return [probes.maps[m] for m in state.maps
            if probes.maps[m].type != "array" and getattr(probes.maps[m], "stage", None) == "block"]


def static_shared_bytes(text: str) -> int:
    """Bytes a `.shared` declaration reserves statically (0 for `.extern`, dynamic)."""
    if not _SHARED_DECL.match(text) or text.startswith(".extern") or " .extern " in text:
        return 0
    element = _ELEMENT.search(text)
    size = int(element.group(1)) // 8 if element else 1
    vector = _VECTOR.search(text)
    size *= int(vector.group(1)) if vector else 1
    for dim in _DIMS.findall(text):
        size *= int(dim) if dim else 0
    return size


def module_static_shared(module: ir.Module, function: ir.Function) -> int:
    """Static shared bytes the kernel may use: every module-level `.shared` (an upper bound) and its own."""
    total = sum(static_shared_bytes(item.text) for item in module.items if isinstance(item, ir.Directive))
    return total + sum(static_shared_bytes(s.text) for _, _, s in ir.walk(function.body) if isinstance(s, ir.Directive))


def func_with_exit(module: ir.Module) -> str | None:
    """The first `.func` whose body has an `exit`, or None."""
    for f in module.functions():
        if not f.is_entry and f.body is not None and any(i.opcode.base == "exit" for i in ir.instructions(f.body)):
            return f.name
    return None


def counters_bytes(maps: list) -> int:
    return sum(spec.record_bytes for spec in maps)


def why_not_staged(module: ir.Module, state: KernelState, maps: list, sm: int) -> str | None:
    """Why the kernel keeps global adds (spec above), or None when its counters can be staged in shared memory."""
    if sm < STAGE_SM:
        return f"its target is below sm_{STAGE_SM} or its .version cannot take warp operations"
    callee = func_with_exit(module)
    if callee is not None:
        return f".func {callee} has an exit: a thread could leave without passing the kernel's exits"
    words = counters_bytes(maps) // 8 + 1
    total = module_static_shared(module, state.function) + -(-words // DYNAMIC_ALIGN_WORDS) * DYNAMIC_ALIGN_WORDS * 8
    if total > STATIC_SHARED_LIMIT:
        return f"static shared memory would be {total} bytes, over the {STATIC_SHARED_LIMIT} a block may declare"
    return None


def stage_counters(module: ir.Module, ctx: Context, sm: int) -> None:
    """The step itself, for every kernel with staged maps (called by the PTX SAVE lowering once it has lowered)."""
    for state in ctx.kernels.values():
        if state.counting:
            continue
        maps = staged_maps(state, ctx.probes)
        if not maps:
            continue
        if why_not_staged(module, state, maps, sm) is None:
            _Stager(state, maps).stage()
        # else the adds stay global, into the map's one row (buffer addressing gives it no stripe)


@attrs.define
class _Stager:
    state: KernelState
    maps: list
    code: list = attrs.Factory(list)

    def t(self, role: str, rtype: str) -> str:
        return self.state.temp(role, rtype)

    def emit(self, opcode: str, *operands, guard=None) -> None:
        self.code.append(insn(opcode, *operands, origin=ORIGIN, guard=guard))

    def label(self, role: str) -> str:
        name = f"{self.state.prefix}L_{role}"
        self.code.append(ir.Label(name))
        return name

    def buf(self, spec) -> str:
        return self.t(f"buf_{spec.name}", "b64")

    def gbuf(self, spec) -> str:
        return self.t(f"gbuf_{spec.name}", "b64")

    def take(self) -> list:
        out, self.code = self.code, []
        return out

    def insert_at_entry(self) -> None:
        body = self.state.function.body
        i = entry_index(body)  # buffer addressing later puts its prologue ahead of this code
        body[i:i] = self.take()

    def row_zero(self) -> None:
        """gbuf = the map's one row: its buffer as buffer addressing loads it (no stripe for staged maps)."""
        for spec in self.maps:
            self.emit("mov.b64", self.gbuf(spec), self.buf(spec))

    def stage(self) -> None:
        body = self.state.function.body
        array = f"{self.state.prefix}stg_counters"
        words = counters_bytes(self.maps) // 8 + 1  # the counters, then the exit counter (u32 in a u64 word)
        # Whole KB: dynamic shared memory (after the static) keeps the 1024-byte alignment that swizzled
        # tensor-core layouts assume of it (Triton's `.extern .shared .align 16` buffer is read that way).
        declared = -(-words // DYNAMIC_ALIGN_WORDS) * DYNAMIC_ALIGN_WORDS
        body.insert(0, ir.Directive(f".shared .align 8 .b64 {array}[{declared}];", 0))
        self.entry_code(ir.Symbol(array), words)
        self.insert_at_entry()
        edits = {id(i): ([], self.staged_add(i), []) for i in ir.instructions(body) if self.is_map_add(i)}
        for k, anchor in enumerate(self.state.exits):
            edits[id(anchor)] = (self.exit_code(k, anchor.guard), None, [])
        splice(body, edits)

    def thread_counts(self) -> tuple[str, str]:
        """(linear thread index in the block, threads in the block)."""
        tlin, tpb, n = self.t("stg_tlin", "b32"), self.t("stg_tpb", "b32"), self.t("stg_nt", "b32")
        self.emit("mov.u32", tlin, "%tid.z")
        self.emit("mov.u32", n, "%ntid.y")
        self.emit("mov.u32", tpb, "%tid.y")
        self.emit("mad.lo.u32", tlin, tlin, n, tpb)
        self.emit("mov.u32", n, "%ntid.x")
        self.emit("mov.u32", tpb, "%tid.x")
        self.emit("mad.lo.u32", tlin, tlin, n, tpb)
        self.emit("mov.u32", tpb, "%ntid.y")
        self.emit("mul.lo.u32", tpb, tpb, n)
        self.emit("mov.u32", n, "%ntid.z")
        self.emit("mul.lo.u32", tpb, tpb, n)
        return tlin, tpb

    def entry_code(self, array: ir.Symbol, words: int) -> None:
        tlin, tpb = self.thread_counts()
        self.row_zero()
        base, offset = self.t("stg_base", "b64"), 0
        self.emit("mov.u64", base, array)
        for spec in self.maps:
            self.emit("add.u64", self.buf(spec), base, offset)
            offset += spec.record_bytes
        self.emit("add.u64", self.t(EXIT_COUNTER, "b64"), base, offset)
        self.emit("mov.u32", self.t("stg_mine", "b32"), 0)
        i, done, a, w = self.t("stg_i", "b32"), self.t("stg_done", "pred"), self.t("stg_a", "b64"), self.t("stg_w", "b64")
        self.emit("mov.u32", i, tlin)
        zero = self.label("stg_zero")
        self.emit("setp.ge.u32", done, i, words)
        self.emit("bra", f"{self.state.prefix}L_stg_zeroed", guard=done)
        self.emit("mul.wide.u32", w, i, 8)
        self.emit("add.u64", a, base, w)
        self.emit("st.shared.u64", ir.Address(ir.Register(a)), ir.Immediate("0"))
        self.emit("add.u32", i, i, tpb)
        self.emit("bra", zero)
        self.label("stg_zeroed")
        self.emit("bar.sync", 0)

    def is_map_add(self, instruction: ir.Instruction) -> bool:
        if instruction.origin != LOWERING_ORIGIN or instruction.opcode.text != "red.global.add.u64":
            return False
        address = instruction.operands[0]
        bases = {self.t(f"{role}_{spec.name}", "b64") for spec in self.maps for role in ("buf", "hoff")}
        return isinstance(address, ir.Address) and isinstance(address.base, ir.Register) and address.base.name in bases

    def staged_add(self, red: ir.Instruction) -> list[ir.Instruction]:
        address = red.operands[0]
        spec = next((m for m in self.maps if address.base.name == self.t(f"hoff_{m.name}", "b64")), None)
        return self.counted_add(red, spec) if spec is not None else self.carried_add(red)

    def counted_add(self, red: ir.Instruction, spec) -> list[ir.Instruction]:
        """A hist bucket's add (≤ 32 at a time): `red.shared.add.u32`, no result awaited, while this thread's own
        adds stay below THREAD_STAGED_LIMIT; past it, the add goes to the map's global row as before staging."""
        address, amount = red.operands
        lo, hi, mine, after = (self.t(f"stg_{r}", "b32") for r in ("lo", "hi", "mine", "after"))
        staged, direct, out = self.t("stg_staged", "pred"), self.t("stg_direct", "pred"), self.t(GLOBAL_COUNTER, "b64")
        code = [
            insn("mov.b64", ir.Vector((ir.Register(lo), ir.Register(hi))), amount, origin=LOWERING_ORIGIN),
            insn("add.u32", after, mine, lo, origin=LOWERING_ORIGIN),
            insn("setp.lt.u32", staged, after, THREAD_STAGED_LIMIT, origin=LOWERING_ORIGIN),
            insn("not.pred", direct, staged, origin=LOWERING_ORIGIN),
        ]
        if red.guard is not None:
            g = red.guard.register
            if red.guard.negated:
                code += [insn("and.pred", staged, staged, ir.Negated(g), origin=LOWERING_ORIGIN),
                         insn("and.pred", direct, direct, ir.Negated(g), origin=LOWERING_ORIGIN)]
            else:
                code += [insn("and.pred", staged, staged, g, origin=LOWERING_ORIGIN),
                         insn("and.pred", direct, direct, g, origin=LOWERING_ORIGIN)]
        return code + [
            insn("mov.u32", mine, after, origin=LOWERING_ORIGIN, guard=staged),  # counts only what it staged
            insn("red.shared.add.u32", address, lo, origin=LOWERING_ORIGIN, guard=staged),
            insn("sub.u64", out, address.base, self.buf(spec), origin=ORIGIN, guard=direct),
            insn("add.u64", out, out, self.gbuf(spec), origin=ORIGIN, guard=direct),
            insn("red.global.add.u64", ir.Address(ir.Register(out), address.offset), amount, origin=ORIGIN, guard=direct),
        ]

    def carried_add(self, red: ir.Instruction) -> list[ir.Instruction]:
        """`red.global.add.u64 [a], v` → the same u64 add into shared memory, as two 32-bit adds with carry."""
        address, value = red.operands
        lo, hi, old, new = (self.t(f"stg_{r}", "b32") for r in ("lo", "hi", "old", "new"))
        carry, high = self.t("stg_carry", "pred"), self.t("stg_high", "pred")
        high_address = ir.Address(address.base, ir.Immediate(str(address.offset_value + 4)))
        out = [
            insn("mov.b64", ir.Vector((ir.Register(lo), ir.Register(hi))), value, origin=LOWERING_ORIGIN),
            insn("atom.shared.add.u32", old, address, lo, origin=LOWERING_ORIGIN, guard=red.guard),
            insn("add.u32", new, old, lo, origin=LOWERING_ORIGIN),
            insn("setp.lt.u32", carry, new, old, origin=LOWERING_ORIGIN),
            insn("add.u32", hi, hi, 1, origin=LOWERING_ORIGIN, guard=carry),
        ]
        if red.guard is not None:  # where the add did not happen, nothing carries and nothing is added
            out.append(insn("mov.u32", hi, 0, origin=LOWERING_ORIGIN, guard=ir.Guard(red.guard.register, not red.guard.negated)))
        return out + [insn("setp.ne.u32", high, hi, 0, origin=LOWERING_ORIGIN),
                      insn("red.shared.add.u32", high_address, hi, origin=LOWERING_ORIGIN, guard=high)]

    def exit_code(self, k: int, guard: ir.Guard | None) -> list[ir.Instruction]:
        """Before exit `k` (guard: its own): the leaving lanes count themselves out; the block's last ones copy out."""
        active, leaving, lt, rank = (self.t(f"stg_{r}", "b32") for r in ("active", "leaving", "lt", "rank"))
        n, old, low, src = (self.t(f"stg_{r}", "b32") for r in ("n", "old", "low", "src"))
        lead, last = self.t("stg_lead", "pred"), self.t("stg_last", "pred")
        skip = f"{self.state.prefix}L_stg_kept_{k}"
        self.emit("activemask.b32", active)
        if guard is None:
            self.emit("mov.b32", leaving, active)
        else:
            predicate = ir.Negated(guard.register) if guard.negated else guard.register
            self.emit("vote.sync.ballot.b32", leaving, predicate, active)
            self.emit("bra", skip, guard=ir.Guard(guard.register, not guard.negated))
        self.emit("membar.cta")  # this lane's shared adds, before the block may count it out
        self.emit("bar.warp.sync", leaving)
        self.emit("mov.u32", lt, "%lanemask_lt")
        self.emit("and.b32", lt, lt, leaving)
        self.emit("popc.b32", rank, lt)
        self.emit("popc.b32", n, leaving)
        self.emit("setp.eq.u32", lead, rank, 0)
        self.emit("atom.shared.add.u32", old, ir.Address(ir.Register(self.t(EXIT_COUNTER, "b64"))), n, guard=lead)
        self.emit("neg.s32", low, leaving)
        self.emit("and.b32", low, low, leaving)
        self.emit("bfind.u32", src, low)  # the lowest leaving lane: the one that counted
        self.emit("shfl.sync.idx.b32", old, old, src, 31, leaving)
        self.emit("add.u32", old, old, n)
        self.emit("setp.eq.u32", last, old, self.t("stg_tpb", "b32"))
        self.emit("bra", skip, guard=ir.Guard(ir.Register(last), True))
        self.emit("membar.cta")  # every other thread's adds, before reading the counters
        for m, spec in enumerate(self.maps):
            self.flush(spec, f"{k}_{m}", rank, n)
        self.code.append(ir.Label(skip))
        return self.take()

    def flush(self, spec, tag: str, rank: str, lanes: str) -> None:
        """Lane `rank` of `lanes` adds counters rank, rank + lanes, ... of the block to the map's global row."""
        i, done, w = self.t("stg_i", "b32"), self.t("stg_done", "pred"), self.t("stg_w", "b64")
        a, value, out, go = self.t("stg_a", "b64"), self.t("stg_v", "b64"), self.t(GLOBAL_COUNTER, "b64"), self.t("stg_go", "pred")
        end = f"{self.state.prefix}L_stg_out_{tag}"
        self.emit("mov.u32", i, rank)
        loop = self.label(f"stg_copy_{tag}")
        self.emit("setp.ge.u32", done, i, spec.record_bytes // 8)
        self.emit("bra", end, guard=done)
        self.emit("mul.wide.u32", w, i, 8)
        self.emit("add.u64", a, self.buf(spec), w)
        self.emit("ld.shared.u64", value, ir.Address(ir.Register(a)))
        self.emit("add.u64", out, self.gbuf(spec), w)
        self.emit("setp.ne.and.u64", go, value, 0, self.t(GATE_REGISTER, "pred"))
        self.emit("red.global.add.u64", ir.Address(ir.Register(out)), value, guard=go)
        self.emit("add.u32", i, i, lanes)
        self.emit("bra", loop)
        self.code.append(ir.Label(end))
