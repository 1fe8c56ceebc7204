"""RDNA 3 (gfx11, wave32) as a dialect of the GCN steps (neutrino/isa/gcn/dialect.py says what a dialect is).

Lane masks are one SGPR (`exec_lo`); gfx11's spellings of the memory, carry
and mask instructions; 106 SGPRs a kernel may name, with vcc outside them;
the compute unit of a wave read from HW_ID1 (bits 10-20: workgroup
processor, shader array, shader engine); WMMA as the matrix instructions.
"""

from __future__ import annotations

from neutrino.isa.gcn.dialect import Dialect
from neutrino.isa.rdna.mnemonics_gfx11 import MNEMONICS as GFX11_MNEMONICS

GFX11 = Dialect(
    family="gfx11", wave_lanes=32, exec="exec_lo",
    add_u32="v_add_nc_u32_e32", add_carry_in="v_add_co_ci_u32_e64", sub_borrow_in="v_sub_co_ci_u32_e64",
    store=("global_store_b32", "global_store_b64"), atomic_add_u64="global_atomic_add_u64",
    scalar_load=("s_load_b64", "s_load_b256"), first_one="s_ctz_i32_b32",
    sgpr_limit=106, reserved_in_sgprs=False, hw_id="HW_REG_HW_ID1", cu_field=0xB000A, mma_prefix="v_wmma_",
    # no s_memtime / s_memrealtime: the 20-bit SHADER_CYCLES counter (as LLVM's readcyclecounter) and the 100 MHz clock
    and_not="s_and_not1_b32", clock=("s_getreg_b32 {}, hwreg(HW_REG_SHADER_CYCLES, 0, 20)", 20),
    realtime="s_sendmsg_rtn_b64 {}, sendmsg(MSG_RTN_GET_REALTIME)",
    mnemonics=GFX11_MNEMONICS,
)
