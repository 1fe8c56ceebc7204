"""The `graph_chain` variant's code (PTX): the head load at entry and the advance at the kernel's exits.

A CUDA graph's chain node (spec/runtime.md, "The chain"; spec/kernel-json.md, "The chain head") has no
append node after it: its tagged first buffer parameter is the address of its *head*, whose first two
words say where this launch writes (`cur`, 0: nowhere) and which node's head it advances (`adv`). Thread 0
of block 0 advances that head before it leaves: it publishes the slot the advanced node just wrote and
picks that node's next one. The layout below is the runtime's too (one source of truth).
"""

from __future__ import annotations

import re

from neutrino.chain_head import (  # noqa: F401 (the layout, shared with the runtime)
    ADV, CUR, DRAINED, DROPPED, GEOM, HEAD_BYTES, PRIMED, RING, SLOT_ALIGN, TAG_BYTES, WRITTEN, slot_stride,
)
from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir
from neutrino.passes.build import exit_probe_runs, insn, splice

ORIGIN = "graph-chain"


def refuse_exiting_funcs(module: ir.Module, func_with_exit) -> None:
    """A `.func` with an `exit` could end thread 0 without its advance: the advanced node would never move on."""
    callee = func_with_exit(module)
    if callee is not None:
        raise InstrumentError(f"{module.source}: graph_chain: .func {callee} has an exit (a thread could leave without "
                              f"passing the kernel's exits, where the chain's advance runs)")


def _reg(name: str) -> ir.Register:
    return ir.Register(name)


def _at(base: str, offset: int) -> ir.Address:
    return ir.Address(_reg(base), ir.Immediate(str(offset)) if offset else None)


def _pair(a: str, b: str) -> ir.Vector:
    return ir.Vector((_reg(a), _reg(b)))


class ChainRegisters:
    """The variant's registers in one kernel (declared by buffer addressing with the rest)."""

    def __init__(self, temp):
        self.cur, self.adv, self.go = temp("ch_cur", "b64"), temp("ch_adv", "b64"), temp("ch_go", "pred")
        self.t = {w: temp(f"ch_t{w}", "b64") for w in (0, 2, 3, 4, 5, 6)}  # the advanced head's words
        self.low, self.off, self.nxt = temp("ch_low", "b64"), temp("ch_off", "b64"), temp("ch_next", "b64")
        self.k, self.used, self.tag = temp("ch_k", "b64"), temp("ch_used", "b64"), temp("ch_tag", "b64")
        self.mask, self.stride, self.idx = temp("ch_mask", "b32"), temp("ch_stride", "b32"), temp("ch_idx", "b32")
        self.had, self.full, self.has = temp("ch_had", "pred"), temp("ch_full", "pred"), temp("ch_has", "pred")
        self.temp = temp

    @property
    def at(self) -> str:
        """`go` and a guarded exit's own guard (declared only where a kernel has such an exit)."""
        return self.temp("ch_at", "pred")


def head_load(emit, r: ChainRegisters, buf: str, gated: str, on: str, tlin: str, blin: str) -> None:
    """Entry, every thread (where the gate was loaded): (cur, adv) from the head at `buf` when the pointer was
    tagged; the first map's buffer is `cur`, the gate `on` open when it is not 0. Thread 0 of block 0 (`go`)
    then loads the advanced head's words, in flight while the kernel's body runs."""
    emit("mov.u64", r.cur, 0)
    emit("mov.u64", r.adv, 0)
    emit("ld.global.v2.u64", _pair(r.cur, r.adv), _at(buf, 0), guard=gated)
    emit("mov.u64", buf, r.cur, guard=gated)
    emit("setp.ne.u64", on, buf, 0)
    emit("setp.eq.u32", r.go, tlin, 0)
    emit("setp.eq.and.u64", r.go, blin, 0, r.go)
    emit("setp.ne.and.u64", r.go, r.adv, 0, r.go)
    t = r.t
    emit("ld.relaxed.gpu.global.u64", t[0], _at(r.adv, CUR), guard=r.go)
    emit("ld.relaxed.gpu.global.v2.u64", _pair(t[2], t[3]), _at(r.adv, RING), guard=r.go)
    emit("ld.relaxed.gpu.global.v2.u64", _pair(t[4], t[5]), _at(r.adv, WRITTEN), guard=r.go)
    emit("ld.relaxed.gpu.global.u64", t[6], _at(r.adv, DRAINED), guard=r.go)


def advance(r: ChainRegisters, exit_insn: ir.Instruction, labels: tuple[str, str]) -> list:
    """The advance of the head at `adv` (its words in r.t), before `exit_insn` (thread 0 of block 0, where the
    exit's own guard holds): spec/runtime.md, "The chain", steps 1-5. `labels`: (prime, done), fresh."""
    code: list = []

    def emit(opcode, *operands, guard=None):
        code.append(insn(opcode, *operands, origin=ORIGIN, guard=guard))

    prime, done = labels
    t, go = r.t, r.go
    if exit_insn.guard is not None:  # a guarded `@%p ret`: the advance runs only where the thread leaves
        g = exit_insn.guard
        at = r.at
        emit("and.pred", at, go, ir.Negated(g.register) if g.negated else g.register)
        go = at
    emit("bra", done, guard=ir.Guard(_reg(go), negated=True))
    emit("shr.u64", r.low, t[5], 32)
    emit("setp.eq.u64", r.has, r.low, 0)
    emit("bra", prime, guard=r.has)  # 1. not primed: it has not run yet
    emit("setp.ne.u64", r.had, t[0], 0)  # 2. it wrote a slot: published; else dropped
    emit("add.u64", t[4], t[4], 1, guard=r.had)
    emit("add.u64", t[5], t[5], 1, guard=ir.Guard(_reg(r.had), negated=True))
    emit("cvt.u32.u64", r.mask, t[3])  # 3. the next slot, written mod K, unless the ring is full
    emit("shr.u64", r.low, t[3], 32)
    emit("cvt.u32.u64", r.stride, r.low)
    emit("cvt.u32.u64", r.idx, t[4])
    emit("and.b32", r.idx, r.idx, r.mask)
    emit("mul.wide.u32", r.off, r.idx, r.stride)
    emit("add.u64", r.nxt, t[2], r.off)
    emit("cvt.u64.u32", r.k, r.mask)
    emit("add.u64", r.k, r.k, 1)
    emit("sub.u64", r.used, t[4], t[6])
    emit("setp.ge.u64", r.full, r.used, r.k)
    emit("mov.u64", r.nxt, 0, guard=r.full)
    emit("and.b64", r.low, t[5], 0xFFFFFFFF)  # 4. its tag: the launch it is given to, 1-based
    emit("add.u64", r.tag, t[4], r.low)
    emit("add.u64", r.tag, r.tag, 1)
    emit("setp.ne.u64", r.has, r.nxt, 0)
    emit("cvt.u64.u32", r.off, r.stride)
    emit("add.u64", r.off, r.off, r.nxt)
    emit("st.global.u64", _at(r.off, -TAG_BYTES), r.tag, guard=r.has)
    emit("st.relaxed.gpu.global.u64", _at(r.adv, CUR), r.nxt)  # 5. published
    emit("st.relaxed.gpu.global.v2.u64", _at(r.adv, WRITTEN), _pair(t[4], t[5]))
    emit("bra", done)
    code.append(ir.Label(prime))
    emit("or.b64", t[5], t[5], PRIMED)
    emit("st.relaxed.gpu.global.u64", _at(r.adv, DROPPED), t[5])
    code.append(ir.Label(done))
    return code


# --- the `late_head` option (issue 24): the head's words consumed where the probe first needs them ---------------

_LINEAR = {"add": (1, 2), "sub": (1,), "mad": (3,), "mov": (1,)}  # opcode → the operands a buffer may enter by (+1x)
_REG = re.compile(r"%[\w$]+")


def _names(stmt: ir.Instruction) -> set[str]:
    """Every register an instruction mentions (its guard included); from its text where it was never parsed."""
    text = stmt.source_operands if stmt._operands is None else ", ".join(map(str, stmt.operands))
    out = set(_REG.findall(text or ""))
    if stmt.guard is not None:
        out.add(stmt.guard.register.name)
    return out


def _rebased(code: list, start: int, buf: str, gated: str) -> set[str] | None:
    """The prologue's registers (from code[start:]) that hold `buf` + something not derived from it: those the
    exit's rebase moves by (slot - head). None where one is derived otherwise (scaled, compared, masked, two
    buffers added, or under a predicate other than the tag's)."""
    derived = {buf}
    tagged = ir.Guard(_reg(gated))
    for stmt in code[start:]:
        if type(stmt) is not ir.Instruction or stmt.opcode.base == "bra":
            continue
        regs = [o.name if type(o) is ir.Register else None for o in stmt.operands]
        reads = {i for i, name in enumerate(regs[1:], 1) if name in derived}
        if stmt.guard is not None and stmt.guard.register.name in derived:
            return None
        if not reads:
            if regs and regs[0] in derived and stmt.guard != ir.Guard(_reg(gated), negated=True):
                return None  # overwritten (untagged lanes' writes are fine: their rebase adds 0)
            continue
        text = str(stmt.opcode)
        linear = reads <= set(_LINEAR.get(stmt.opcode.base, ())) and (stmt.opcode.base != "mad" or ".lo." in text)
        if len(reads) != 1 or not linear or not text.endswith("64") or stmt.guard not in (None, tagged):
            return None
        derived.add(regs[0])
    return derived


def _all_instructions(body: list):
    for stmt in body:
        if type(stmt) is ir.Scope:
            yield from _all_instructions(stmt.body)
        elif type(stmt) is ir.Instruction:
            yield stmt


def defer_head(state, code: list, r: ChainRegisters, buf: str, gated: str, on: str, label: str) -> list:
    """The prologue `code` (head_load's, not yet in the body) with the head's words consumed late (issue 24):

    * thread 0 of block 0 alone tests `adv` and issues the advanced head's loads, behind a branch: other warps
      no longer wait for the head load there;
    * the buffer pointers keep the head's address at entry, and the probe code before each exit first moves them
      by (cur - head) when tagged (the rebase), so ptxas meets the loaded `cur` only at the warp's end.
      Idempotent (the base moves too, so a second rebase on one path, after a guarded exit not taken, adds 0);
    * the head is loaded from its address + (lanemask_lt & lanemask_eq), 0 in every lane: a per-lane address to
      ptxas, which otherwise takes the words as warp-uniform and hoists their move into uniform registers
      (R2UR) to the load, a wait at entry again (ptxas 13.0, sm_90a: softmax, layernorm).

    Where the rebase would not be exact (a pointer not buf + offset, or probe code outside the exits reading
    them), the pointers are set at entry as ever and only the branch stays."""
    i_mov = next(i for i, s in enumerate(code) if s.opcode.base == "mov"
                 and s.guard == ir.Guard(_reg(gated)) and s.operands == (_reg(buf), _reg(r.cur)))
    i_on = i_mov + 1
    i_go = next(i for i, s in enumerate(code) if s.operands[:2] == (_reg(r.go), _reg(r.adv)))
    i_last = next(i for i, s in enumerate(code) if s.operands[:1] == (_reg(r.t[6]),))

    def mk(opcode, *operands, guard=None):
        return insn(opcode, *operands, origin=ORIGIN, guard=guard)

    out = code[:i_go] + [mk("bra", label, guard=ir.Guard(_reg(r.go), negated=True)), mk("setp.ne.u64", r.go, r.adv, 0)]
    out += code[i_go + 1:i_last + 1] + [ir.Label(label)] + code[i_last + 1:]
    moved = _rebased(out, out.index(code[i_on]) + 1, buf, gated)
    readers = {buf, on, r.cur} | (moved or set())
    firsts, inside = exit_probe_runs(state.function.body, {id(a) for a in state.exits})
    if moved is None or any(_names(s) & readers for s in _all_instructions(state.function.body)
                            if id(s) not in inside):
        return out
    lane, d = r.temp("ch_lane", "b32"), r.temp("ch_d", "b64")
    base = buf  # the head's address at the exit: buf, unless the prologue moves buf itself (a sum map's row)
    if any(type(s) is ir.Instruction and s.operands[:1] == (_reg(buf),) for s in out[i_on + 1:]):
        base = r.temp("ch_base", "b64")
        out.insert(out.index(code[i_on]), mk("mov.u64", base, buf))
        moved = moved | {base}
    rebase = [mk("mov.u64", d, 0), mk("sub.u64", d, r.cur, base, guard=gated)]
    rebase += [mk("add.u64", m, m, d) for m in sorted(moved - {base})] + [mk("add.u64", base, base, d)]
    rebase.append(mk("setp.ne.u64", on, base, 0))
    splice(state.function.body, {k: (list(rebase), None, []) for k in firsts})
    i_ld = out.index(code[i_mov]) - 1
    load = out[i_ld]
    zero = r.temp("ch_zero", "b32")  # lanemask_lt & lanemask_eq: 0 in every lane, per lane to ptxas
    address = [mk("mov.u32", lane, "%lanemask_lt"), mk("mov.u32", zero, "%lanemask_eq"), mk("and.b32", lane, lane, zero),
               mk("cvt.u64.u32", d, lane), mk("add.u64", d, d, buf)]
    load.operands = (load.operands[0], _at(d, 0))
    out[i_ld:i_ld] = address
    return [s for s in out if s is not code[i_mov] and s is not code[i_on]]
