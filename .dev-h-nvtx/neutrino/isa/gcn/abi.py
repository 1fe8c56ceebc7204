"""What the hardware puts where at wave launch (AMDGPU HSA ABI, code object v4/v5)."""

from __future__ import annotations

from neutrino.isa.gcn import ir

#: user SGPRs in the order the hardware fills them, with their sizes
USER_SGPRS = (("private_segment_buffer", 4), ("dispatch_ptr", 2), ("queue_ptr", 2), ("kernarg_segment_ptr", 2),
              ("dispatch_id", 2), ("flat_scratch_init", 2), ("private_segment_size", 1))
#: system SGPRs that follow the user SGPRs, in order
SYSTEM_SGPRS = ("workgroup_id_x", "workgroup_id_y", "workgroup_id_z", "workgroup_info", "private_segment_wavefront_offset")


def user_sgpr_count(desc: ir.Descriptor) -> int:
    """`.amdhsa_user_sgpr_count`, or (a descriptor rebuilt by the disassembler lacks it) the sum of the enabled user SGPRs."""
    if desc.get("user_sgpr_count") is not None:
        return desc.get_int("user_sgpr_count")
    enabled = sum(n for key, n in USER_SGPRS if desc.get_int(f"user_sgpr_{key}"))
    return enabled + desc.get_int("user_sgpr_kernarg_preload_length")


def kernarg_pointer(desc: ir.Descriptor) -> int | None:
    """The first of the two SGPRs holding the kernarg segment pointer, or None when it is not passed."""
    if not desc.get_int("user_sgpr_kernarg_segment_ptr"):
        return None
    return sum(n for key, n in USER_SGPRS[:3] if desc.get_int(f"user_sgpr_{key}"))


def system_sgpr(desc: ir.Descriptor, name: str) -> int | None:
    """The SGPR the hardware puts a system value in (workgroup_id_x, ...), or None when it is not enabled."""
    index = user_sgpr_count(desc)
    for key in SYSTEM_SGPRS:
        enabled = desc.get_int(f"system_sgpr_{key}", 1 if key == "workgroup_id_x" else 0)
        if key == name:
            return index if enabled else None
        index += 1 if enabled else 0
    raise KeyError(name)


def launched_sgprs(desc: ir.Descriptor) -> int:
    """How many SGPRs hold launch values: the kernel owns them even where its code never reads them."""
    return user_sgpr_count(desc) + sum(
        desc.get_int(f"system_sgpr_{k}", 1 if k == "workgroup_id_x" else 0) for k in SYSTEM_SGPRS)
