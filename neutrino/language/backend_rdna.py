"""The RDNA backend: Neutrino IR → RDNA 3 (gfx11, wave32) probe snippets (spec/gcn.md, "RDNA").

The GCN backend (backend_gcn.py) with wave32's lane masks and gfx11's
instructions: a predicate is one SGPR (`.s32`) holding a lane mask, masks
combine with `s_and_b32`/`s_or_b32`/`s_and_not1_b32` against `exec_lo`, the
high half of a 64-bit add carries with `v_add_co_ci_u32`. gfx11 has no
`s_memtime`/`s_memrealtime`: `clock` is the 20-bit SHADER_CYCLES counter
(`s_getreg_b32`, as LLVM's readcyclecounter on gfx11; zero-extended, so
differences of clocks wrap at 2^20 cycles) and `time` the 100 MHz counter
read by `s_sendmsg_rtn_b64 sendmsg(MSG_RTN_GET_REALTIME)`. `laneid` needs
only `v_mbcnt_lo`.
"""

from __future__ import annotations

from neutrino.language.backend_gcn import TEMP, GCNBackend, _Emitter


class _Wave32Emitter(_Emitter):
    MASK = "s32"
    EXEC = "exec_lo"
    AND, OR, ANDN2 = "s_and_b32", "s_or_b32", "s_and_not1_b32"
    ADDC, SUBB = "v_add_co_ci_u32_e64", "v_sub_co_ci_u32_e64"

    def op_clock(self, ins, d, wide):
        t = self.declare(f"{TEMP}cycles", "s32")
        self.emit(f"s_getreg_b32 {t}, hwreg(HW_REG_SHADER_CYCLES, 0, 20)")
        self.emit(f"v_mov_b32_e32 {d}.lo, {t}")
        self.emit(f"v_mov_b32_e32 {d}.hi, 0")

    def op_time(self, ins, d, wide):
        t = self.declare(f"{TEMP}clock", "s64")
        self.emit(f"s_sendmsg_rtn_b64 {t}, sendmsg(MSG_RTN_GET_REALTIME)")
        self.emit("s_waitcnt lgkmcnt(0)")
        self.emit(f"v_mov_b32_e32 {d}.lo, {t}.lo")
        self.emit(f"v_mov_b32_e32 {d}.hi, {t}.hi")

    def op_laneid(self, ins, d, wide):
        self.emit(f"v_mbcnt_lo_u32_b32 {d}, -1, 0")


class RDNABackend(GCNBackend):
    name = "rdna"

    def emitter(self) -> _Emitter:
        return _Wave32Emitter()
