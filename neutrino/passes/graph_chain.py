"""The `graph_chain` variant's code (PTX): the head load at entry and the advance at the kernel's exits.

A CUDA graph's chain node (spec/runtime.md, "The chain"; spec/kernel-json.md, "The chain head") has no
append node after it: its tagged first buffer parameter is the address of its *head*, whose first two
words say where this launch writes (`cur`, 0: nowhere) and which node's head it advances (`adv`). Thread 0
of block 0 advances that head before it leaves: it publishes the slot the advanced node just wrote and
picks that node's next one. The layout below is the runtime's too (one source of truth).
"""

from __future__ import annotations

from neutrino.chain_head import (  # noqa: F401 (the layout, shared with the runtime)
    ADV, CUR, DRAINED, DROPPED, GEOM, HEAD_BYTES, PRIMED, RING, SLOT_ALIGN, TAG_BYTES, WRITTEN, slot_stride,
)
from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir
from neutrino.passes.build import insn

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
