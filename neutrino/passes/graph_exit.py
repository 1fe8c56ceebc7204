"""The graph variant of a probed kernel: each replay's append done by the kernel's last threads.

A probed kernel captured into a CUDA graph used to be followed by an append node of ours (a
kernel node after every probed node: runtime/cudagraphs/ring.py). That node's fixed cost per
replay (~5-6 µs on an H200 for a graph of 8 tiny kernels) was most of what probing a graph
cost. The graph variant of a kernel, built only for graph capture (eager launches keep the
probed code as it was, byte for byte), does the append itself (spec/kernel-json.md, "The
graph variant"):

* **Entry.** The first map's buffer pointer arrives tagged (bit 0). Its head, the 256 bytes
  before it, holds the node's control block (below). The kernel loads this replay's slot
  address from the head: 0, the gate is shut (a replay `--launches` leaves out, or whose ring
  was full) and every store of the probe is predicated off; otherwise every map's buffer is
  moved by (slot - buffer): the probe writes this replay's results straight into its ring
  slot, which the previous replay zeroed. No copy.
* **Every exit.** The threads leaving together (`activemask`, and the exit's own guard) count
  themselves: the lowest of them adds their number to the node's ticket counter (one atomic
  per warp and exit; with the gate open after a fence, so what the probe wrote is visible
  first). The threads whose addition completes the launch's count (threads of the grid) are
  the last: they branch to the appender, the rest leave as before.
* **The appender** (once per launch, the last group of threads): resets the ticket; when the
  replay had a slot, publishes it (fence, then the slot's flag in the host ring = replay + 1,
  the written count); a selected replay without a slot is counted dropped; counts the replay;
  decides the next replay (`--launches` applied to its number, a free slot: written -
  consumed < slots) and, when it probes, zeroes its slot (the group's lanes share the stores)
  and writes its address as the next replay's slot word (0 otherwise). The host side (the
  poller of shim/graphs.c, PythonGraphSink) is unchanged: flags, counters and device slots are
  where the append node put them.

The control block (u64 words at negative offsets from the first map's buffer, written at
capture by runtime/cudagraphs/capture.py; `CONTROL` lists them).
"""

from __future__ import annotations

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir
from neutrino.isa.ptx.parser import parse_statements

ORIGIN = "graph-exit"
#: the control block's u64 words: name -> offset from the first map's buffer (negative)
CONTROL = {
    "ring": -256,  # the host ring (mapped): counters at +0, flags at +64
    "nslots": -248,  # device slots in the ring
    "slots": -240,  # the first device slot
    "stride": -232,  # bytes between slots
    "state": -224,  # the node's device state: replays, written, dropped
    "consumed": -216,  # where the host's consumed count is read
    "start": -208,  # --launches: first replay, end (exclusive), step
    "stop": -200,
    "every": -192,
    "span": -184,  # bytes of a slot to zero (the maps, a multiple of 16)
    "ticket": -24,  # threads of this replay that have left
    "slot": -16,  # this replay's slot address; 0: the gate is shut
}
#: the node's device state lives in the head too (the `state` word points there): its counters
#: and the host's consumed count are then read with the control block, in one round trip
STATE_OFFSET = -64
# The state's counters (runtime/cudagraphs/ring.py REPLAYS, WRITTEN, DROPPED, CONSUMED) and the host ring's mirror.
REPLAYS, WRITTEN, DROPPED, CONSUMED = 0, 8, 16, 24
FLAGS = 64

_REGISTERS = {
    "gx_p": "b64", "gx_m": "b32", "gx_lt": "b32", "gx_lead": "pred", "gx_go": "pred", "gx_n": "b32",
    "gx_n64": "b64", "gx_old": "b64", "gx_total": "b64", "gx_w": "b64", "gx_last": "pred", "gx_lastw": "b32",
    "gx_src": "b32", "gx_grp": "pred", "gx_rank": "b32", "gx_g": "pred",
    "ga_cur": "b64", "ga_ring": "b64", "ga_k": "b64", "ga_slots": "b64", "ga_stride": "b64", "ga_state": "b64",
"ga_start": "b64", "ga_stop": "b64", "ga_every": "b64", "ga_span": "b64", "ga_r": "b64",
    "ga_wr": "b64", "ga_c": "b64", "ga_t": "b64", "ga_u": "b64", "ga_next": "b64", "ga_off": "b64",
    "ga_lead": "pred", "ga_had": "pred", "ga_sel": "pred", "ga_x": "pred", "ga_y": "pred", "ga_z": "b32",
}


def _selected(r: str, out: str) -> str:
    """PTX setting predicate `out` when replay `r` is selected (start <= r < stop, (r - start) % every == 0)."""
    return f"""
    setp.ge.u64 {out}, {r}, %ga_start;
    setp.lt.and.u64 {out}, {r}, %ga_stop, {out};
    sub.u64 %ga_t, {r}, %ga_start;
    rem.u64 %ga_t, %ga_t, %ga_every;
    setp.eq.and.u64 {out}, %ga_t, 0, {out};"""


class GraphExit:
    """The graph variant's exit code for one kernel: the ticket at each exit, the appender once."""

    def __init__(self, state, names, function, first_param: str, warp_ops: bool):
        self.state, self.function, self.param, self.warp_ops = state, function, first_param, warp_ops
        self.r = {role: state.temp(role, rtype) for role, rtype in _REGISTERS.items()}
        self.on = state.temp("on", "pred")
        self.append_label = names.fresh_local(function, "$nt_graph_append")
        self.zero_label = names.fresh_local(function, "$nt_graph_zero")
        self.zeroed_label = names.fresh_local(function, "$nt_graph_zeroed")

    def _code(self, text: str) -> list[ir.Statement]:
        text = text.replace("%gx_", f"{self.state.prefix}gx_").replace("%ga_", f"{self.state.prefix}ga_")
        text = text.replace("%ON", self.on).replace("PARAM", self.param)
        for label in ("APPEND", "ZEROED", "ZERO"):
            text = text.replace(f"$L_{label}", getattr(self, f"{label.lower()}_label"))
        body = parse_statements(text, "<graph-exit>")
        for _, _, stmt in ir.walk(body):
            if type(stmt) is ir.Instruction:
                stmt.origin = ORIGIN
        return body

    def at_exit(self, guard: ir.Guard | None) -> list[ir.Statement]:
        """Before one exit (`guard`: its predicate): the leaving threads take their ticket; the last branch to the appender."""
        g = ""
        text = ""
        if guard is not None:
            text += f"\n    {'not.pred' if guard.negated else 'mov.pred'} %gx_g, {guard.register};"
            g = "%gx_g"
        if self.warp_ops:
            text += """
    activemask.b32 %gx_m;"""
            if g:
                text += f"\n    vote.sync.ballot.b32 %gx_m, {g}, %gx_m;"
            text += """
    mov.u32 %gx_lt, %lanemask_lt;
    and.b32 %gx_lt, %gx_lt, %gx_m;
    popc.b32 %gx_rank, %gx_lt;
    setp.eq.u32 %gx_lead, %gx_lt, 0;
    popc.b32 %gx_n, %gx_m;"""
            if g:
                text += f"\n    and.pred %gx_lead, %gx_lead, {g};"
                text += f"\n    and.pred %gx_go, %ON, {g};\n    @%gx_go bar.warp.sync %gx_m;"
            else:
                text += "\n    @%ON bar.warp.sync %gx_m;"
        else:  # every thread for itself
            text += """
    mov.u32 %gx_rank, 0;
    mov.u32 %gx_n, 1;
    mov.u32 %gx_m, 1;
    setp.eq.u32 %gx_lead, %gx_rank, 0;"""
            if g:
                text += f"\n    and.pred %gx_lead, %gx_lead, {g};"
        text += """
    and.pred %gx_go, %gx_lead, %ON;
    ld.param.u64 %gx_p, [PARAM];
    and.b64 %gx_p, %gx_p, -2;
    cvta.to.global.u64 %gx_p, %gx_p;
LOADS
    @%gx_go membar.gl;
    cvt.u64.u32 %gx_n64, %gx_n;
    mov.u64 %gx_old, 0;
    @%gx_lead atom.global.add.u64 %gx_old, [%gx_p+-24], %gx_n64;
    add.u64 %gx_old, %gx_old, %gx_n64;
    mov.u32 %gx_src, %ntid.x;
    mov.u32 %gx_lastw, %ntid.y;
    mul.wide.u32 %gx_total, %gx_src, %gx_lastw;
    mov.u32 %gx_src, %ntid.z;
    cvt.u64.u32 %gx_w, %gx_src;
    mul.lo.u64 %gx_total, %gx_total, %gx_w;
    mov.u32 %gx_src, %nctaid.x;
    cvt.u64.u32 %gx_w, %gx_src;
    mul.lo.u64 %gx_total, %gx_total, %gx_w;
    mov.u32 %gx_src, %nctaid.y;
    cvt.u64.u32 %gx_w, %gx_src;
    mul.lo.u64 %gx_total, %gx_total, %gx_w;
    mov.u32 %gx_src, %nctaid.z;
    cvt.u64.u32 %gx_w, %gx_src;
    mul.lo.u64 %gx_total, %gx_total, %gx_w;
    setp.eq.and.u64 %gx_last, %gx_old, %gx_total, %gx_lead;"""
        if self.warp_ops:  # the lead tells its group (the lowest lane of the mask)
            text += """
    selp.u32 %gx_lastw, 1, 0, %gx_last;
    brev.b32 %gx_src, %gx_m;
    clz.b32 %gx_src, %gx_src;"""
            if g:
                text += f"\n    @{g} shfl.sync.idx.b32 %gx_lastw, %gx_lastw, %gx_src, 31, %gx_m;"
                text += f"\n    setp.ne.and.u32 %gx_grp, %gx_lastw, 0, {g};"
            else:
                text += "\n    shfl.sync.idx.b32 %gx_lastw, %gx_lastw, %gx_src, 31, %gx_m;"
                text += "\n    setp.ne.u32 %gx_grp, %gx_lastw, 0;"
        else:
            text += "\n    mov.pred %gx_grp, %gx_last;"
        text += "\n    @%gx_grp bra $L_APPEND;"
        return self._code(text.replace("LOADS", self.prefetch(g)))

    @staticmethod
    def prefetch(g: str) -> str:
        """What the appender reads, loaded by every leaving group before its ticket: the group that
        turns out last finds it there when its atomic returns (the loads' latency hides behind the
        atomic's). The counters are the previous replay's (nothing writes them during a launch); the
        consumed count may be older than the host's latest, which only makes the ring look fuller."""
        guard = f"@{g} " if g else ""
        c = CONTROL
        loads = [(name, c[key]) for name, key in (
            ("cur", "slot"), ("ring", "ring"), ("k", "nslots"), ("slots", "slots"), ("stride", "stride"),
            ("start", "start"), ("stop", "stop"), ("every", "every"), ("span", "span"))]
        loads += [("r", STATE_OFFSET + REPLAYS), ("wr", STATE_OFFSET + WRITTEN)]
        text = "\n".join(f"    {guard}ld.global.u64 %ga_{name}, [%gx_p+{off}];" for name, off in loads)
        return text + f"\n    {guard}ld.volatile.global.u64 %ga_c, [%gx_p+{STATE_OFFSET + CONSUMED}];"

    def appender(self) -> list[ir.Statement]:
        """Once per launch, the last group of threads (%gx_p, %gx_m, %gx_rank, %gx_n set at their exit)."""
        c = CONTROL
        sync = "    bar.warp.sync %gx_m;" if self.warp_ops else ""
        text = f"""
$L_APPEND:
    add.u64 %ga_state, %gx_p, {STATE_OFFSET};
    setp.eq.u32 %ga_lead, %gx_rank, 0;
    setp.ne.and.u64 %ga_had, %ga_cur, 0, %ga_lead;
    @%ga_had membar.gl;
    rem.u64 %ga_t, %ga_wr, %ga_k;
    shl.b64 %ga_t, %ga_t, 3;
    add.u64 %ga_t, %ga_t, %ga_ring;
    add.u64 %ga_u, %ga_r, 1;
    @%ga_had st.volatile.global.u64 [%ga_t+{FLAGS}], %ga_u;
    setp.ne.u64 %ga_x, %ga_cur, 0;
    selp.u64 %ga_t, 1, 0, %ga_x;
    add.u64 %ga_wr, %ga_wr, %ga_t;
    @%ga_had st.volatile.global.u64 [%ga_state+{WRITTEN}], %ga_wr;
    @%ga_had st.volatile.global.u64 [%ga_ring+{WRITTEN}], %ga_wr;
{_selected("%ga_r", "%ga_sel")}
    not.pred %ga_y, %ga_x;
    and.pred %ga_y, %ga_y, %ga_sel;
    and.pred %ga_y, %ga_y, %ga_lead;
    @%ga_y ld.volatile.global.u64 %ga_t, [%ga_state+{DROPPED}];
    add.u64 %ga_t, %ga_t, 1;
    @%ga_y st.volatile.global.u64 [%ga_state+{DROPPED}], %ga_t;
    @%ga_y st.volatile.global.u64 [%ga_ring+{DROPPED}], %ga_t;
    add.u64 %ga_r, %ga_r, 1;
    @%ga_lead st.volatile.global.u64 [%ga_state+{REPLAYS}], %ga_r;
    @%ga_lead st.volatile.global.u64 [%ga_ring+{REPLAYS}], %ga_r;
{_selected("%ga_r", "%ga_sel")}
    sub.u64 %ga_t, %ga_wr, %ga_c;
    setp.lt.and.u64 %ga_sel, %ga_t, %ga_k, %ga_sel;
    rem.u64 %ga_t, %ga_wr, %ga_k;
    mad.lo.u64 %ga_next, %ga_t, %ga_stride, %ga_slots;
    selp.u64 %ga_next, %ga_next, 0, %ga_sel;
    mul.wide.u32 %ga_off, %gx_rank, 16;
    mul.wide.u32 %ga_u, %gx_n, 16;
    mov.u32 %ga_z, 0;
$L_ZERO:
    setp.lt.and.u64 %ga_y, %ga_off, %ga_span, %ga_sel;
    @!%ga_y bra $L_ZEROED;
    add.u64 %ga_t, %ga_next, %ga_off;
    st.global.v4.u32 [%ga_t], {{%ga_z, %ga_z, %ga_z, %ga_z}};
    add.u64 %ga_off, %ga_off, %ga_u;
    bra $L_ZERO;
$L_ZEROED:
{sync}
    @%ga_lead st.global.u64 [%gx_p+{c["ticket"]}], 0;
    @%ga_lead st.global.u64 [%gx_p+{c["slot"]}], %ga_next;
    exit;"""
        return self._code(text)


def add_graph_exits(module, ctx, state, first_param: str, warp_ops: bool) -> None:
    """The graph variant's exit code in one kernel (after buffer addressing named the first map's
    parameter): the ticket before every original exit, the appender at the end of the body."""
    from neutrino.passes.build import splice

    check_graph_variant(module, state, ctx.probes)
    exits = GraphExit(state, ctx.names(module), state.function, first_param, warp_ops)
    splice(state.function.body, {id(anchor): (exits.at_exit(anchor.guard), None, []) for anchor in state.exits})
    state.function.body.extend(exits.appender())


def check_graph_variant(module, state, probes) -> None:
    """Refuse what the graph variant cannot count: `exit` in a called function (its threads would
    never take their ticket), `cap = "count"` maps (refused inside graphs anyway), no map at all."""
    if not state.maps:
        raise InstrumentError(f"{state.name}: the graph variant needs a map (the kernel's probes save nothing)")
    if any(probes.maps[m].cap == "count" for m in state.maps):
        raise InstrumentError(f'{state.name}: cap = "count" maps have no graph variant')
    for function in module.functions():
        if function.is_entry or function.body is None:
            continue
        for insn in ir.instructions(function.body):
            if insn.opcode.base == "exit":
                raise InstrumentError(f"{module.source}: function {function.name} ends the thread with exit: "
                                      "the graph variant could not count its threads")


def graph_warp_ops(module) -> bool:
    """Whether the exit count may use warp operations (the SAVE lowering's rule: sm_30 and a
    `.version` that reaches 6.2); else every thread takes its own ticket."""
    from neutrino.passes.lower_save import WARP_OPS, WARP_SM, sm_version
    from neutrino.passes.target import version_reachable

    return sm_version(module.target) >= WARP_SM and version_reachable(module, WARP_OPS)
