"""What differs between the AMDGPU generations the GCN steps write code for: one table per dialect.

The assembly syntax (LLVM's AMDGPU assembler), the parser, printer and the
steps are shared; a `Dialect` names what they emit differently:

* the wave: 64 lanes on CDNA (gfx90a, gfx942), 32 on RDNA (gfx11). A lane
  mask is an SGPR pair (`exec`) or one SGPR (`exec_lo`), so every scalar
  instruction on a mask takes the `_b64` or `_b32` form;
* spellings: gfx11 renamed the memory instructions (`global_store_dword` →
  `global_store_b32`, `s_load_dwordx2` → `s_load_b64`), the carry chain
  (`v_addc_co_u32` → `v_add_co_ci_u32`), `v_add_u32` (→ `v_add_nc_u32`),
  `s_ff1` (→ `s_ctz`), `s_andn2` (→ `s_and_not1`);
* registers: how many SGPRs a kernel may name and how the hardware ID reads.

CDNA's table is here (`GFX9`); RDNA's is `neutrino/isa/rdna/dialect.py`.
A kernel's state carries its dialect (`GcnKernelState.dialect`), so the steps
never look at the target name themselves.
"""

from __future__ import annotations

import attrs

from neutrino.isa.gcn.mnemonics_gfx9 import MNEMONICS as GFX9_MNEMONICS


@attrs.frozen
class Dialect:
    family: str  # "gfx9" (CDNA), "gfx11" (RDNA 3)
    wave_lanes: int  # lanes per wave: a `warp` unit
    exec: str  # the lane mask register as an operand: exec (an SGPR pair) or exec_lo
    add_u32: str  # VOP2 32-bit add without carry
    add_carry_in: str  # VOP3 add with carry in and out (the high half of a 64-bit add)
    sub_borrow_in: str  # VOP3 subtract with borrow in and out (the high half of a 64-bit subtract)
    store: tuple[str, str]  # global stores of 4 and 8 bytes
    atomic_add_u64: str  # global 64-bit atomic add, no return
    scalar_load: tuple[str, str]  # scalar loads of 2 and 8 dwords
    first_one: str  # index of the lowest set bit of a lane mask
    sgpr_limit: int  # SGPRs a kernel may name (s0..s[limit-1]), before the reserved ones
    reserved_in_sgprs: bool  # vcc / flat_scratch / xnack_mask taken from the top of the SGPRs (gfx9), or separate (gfx10+)
    hw_id: str  # the getreg name of the hardware ID register
    cu_field: int  # s_bfe_u32 operand (width << 16 | offset) of the compute-unit bits in it
    mma_prefix: str  # the matrix instructions the portable positions mma/wmma/wgmma name
    and_not: str  # a lane mask and the complement of another (s_andn2 / s_and_not1), on a mask
    clock: tuple[str, int]  # the shader clock read into an SGPR of ours ({} names it), and its bits (64 or 20)
    realtime: str  # the constant-rate 64-bit clock read into an SGPR pair of ours
    mnemonics: frozenset[str] = attrs.field(repr=False)  # every base mnemonic the generation has (isa/gcn/mnemonics.py)

    @property
    def mask_sgprs(self) -> int:
        """SGPRs per lane mask."""
        return self.wave_lanes // 32

    def mask(self, op: str) -> str:
        """The scalar instruction `op` (s_and, s_mov, s_cselect, s_and_saveexec, s_lshl, ...) on a lane mask."""
        return f"{op}_b{self.wave_lanes}"

    def compare_mask(self) -> str:
        """Scalar compare of a lane mask with 0 (sets SCC)."""
        return f"s_cmp_lg_u{self.wave_lanes}"


GFX9 = Dialect(
    family="gfx9", wave_lanes=64, exec="exec",
    add_u32="v_add_u32_e32", add_carry_in="v_addc_co_u32_e64", sub_borrow_in="v_subb_co_u32_e64",
    store=("global_store_dword", "global_store_dwordx2"), atomic_add_u64="global_atomic_add_x2",
    scalar_load=("s_load_dwordx2", "s_load_dwordx8"), first_one="s_ff1_i32_b64",
    sgpr_limit=102, reserved_in_sgprs=True, hw_id="HW_REG_HW_ID", cu_field=0x80008, mma_prefix="v_mfma_",
    and_not="s_andn2_b64", clock=("s_memtime {}", 64), realtime="s_memrealtime {}",
    mnemonics=GFX9_MNEMONICS,
)
