"""Theoretical occupancy: how many blocks of a kernel fit on one SM at once.

The formula of spec/tools.md ("Probe cost"), written from the CUDA occupancy
rules for compute capability 7.0 and later: the smallest of four limits (warp
slots, registers, shared memory, the hardware's blocks per SM). The runtime
records the driver's own answer (cuOccupancyMaxActiveBlocksPerMultiprocessor)
and uses this only where the driver cannot answer; both give the limiting
resource from here. Pure arithmetic on integers: no driver, no numpy.
"""

from __future__ import annotations

import attrs

LIMITERS = ("warps", "registers", "shared", "blocks")  # the order ties are broken in
NO_LIMIT = 2**31 - 1  # a resource the kernel does not use limits nothing


@attrs.frozen
class DeviceLimits:
    """Per-SM resources of one device (CUDA device attributes, `from_device`)."""

    threads_per_sm: int = 2048
    registers_per_sm: int = 65536
    registers_per_block: int = 65536
    shared_per_sm: int = 233472  # bytes the SM's shared memory can be configured to (sm_90: 228 KiB)
    blocks_per_sm: int = 32
    reserved_shared_per_block: int = 1024  # the driver's own shared memory per block (sm_80+)
    warp_size: int = 32
    register_unit: int = 256  # registers are allocated per warp in units of this many
    shared_unit: int = 128  # shared memory is allocated per block in units of this many bytes
    sub_partitions: int = 4  # an SM's register file is split between this many schedulers

    @property
    def warps_per_sm(self) -> int:
        return self.threads_per_sm // self.warp_size


# CUdevice_attribute numbers (cuda.h) of the fields above.
DEVICE_ATTRIBUTES = {
    "threads_per_sm": 39, "registers_per_sm": 82, "registers_per_block": 12, "shared_per_sm": 81,
    "blocks_per_sm": 106, "reserved_shared_per_block": 111, "warp_size": 10,
}


def from_device(attribute, cc_major: int) -> DeviceLimits:
    """The limits of a device whose attributes `attribute(number) -> int` gives; the allocation
    units by compute capability (shared memory: 256 bytes before sm_80, 128 from sm_80)."""
    values = {name: int(attribute(number)) for name, number in DEVICE_ATTRIBUTES.items()}
    return DeviceLimits(**values, shared_unit=128 if cc_major >= 8 else 256)


@attrs.frozen
class Occupancy:
    blocks: int  # resident blocks per SM
    warps: int  # resident warps per SM: blocks × warps per block
    fraction: float  # warps / the SM's warp slots
    limiter: str  # which of LIMITERS gave `blocks` (the first of them on a tie)
    limits: dict  # each limiter's own block count


def round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def register_limit(registers: int, warps_per_block: int, dev: DeviceLimits) -> int:
    """Blocks the register file holds: each warp takes `registers × 32` rounded up to the
    allocation unit; each sub-partition holds whole warps only."""
    if registers <= 0:
        return NO_LIMIT
    per_warp = round_up(registers * dev.warp_size, dev.register_unit)
    # a block's warps are spread over the sub-partitions: it must fit as if rounded up to them
    if per_warp * round_up(warps_per_block, dev.sub_partitions) > dev.registers_per_block:
        return 0
    warps_per_partition = (dev.registers_per_sm // dev.sub_partitions) // per_warp
    return warps_per_partition * dev.sub_partitions // warps_per_block


def shared_limit(static_bytes: int, dynamic_bytes: int, dev: DeviceLimits) -> int:
    """Blocks the shared memory holds with the largest carveout: each block takes its static and
    dynamic bytes and the driver's reserved bytes, rounded up to the allocation unit."""
    per_block = round_up(static_bytes + dynamic_bytes + dev.reserved_shared_per_block, dev.shared_unit)
    if per_block == 0:
        return NO_LIMIT
    return dev.shared_per_sm // per_block


def occupancy(threads: int, registers: int, static_shared: int, dynamic_shared: int, dev: DeviceLimits,
              max_threads: int | None = None) -> Occupancy:
    """Resident blocks per SM of a kernel using `registers` per thread and `static_shared` bytes,
    launched with `threads` per block and `dynamic_shared` bytes. `max_threads`: the function's
    own limit (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK); a larger block cannot launch: 0 blocks."""
    warps_per_block = max(1, -(-threads // dev.warp_size))
    too_big = threads > (max_threads or dev.threads_per_sm)  # 0 or None: the function's limit unknown
    limits = {
        "warps": 0 if too_big else dev.warps_per_sm // warps_per_block,
        "registers": register_limit(registers, warps_per_block, dev),
        "shared": shared_limit(static_shared, dynamic_shared, dev),
        "blocks": dev.blocks_per_sm,
    }
    limiter = min(LIMITERS, key=lambda name: limits[name])  # min keeps the first of equal ones
    blocks = limits[limiter]
    return Occupancy(blocks, blocks * warps_per_block, blocks * warps_per_block / dev.warps_per_sm, limiter, limits)
