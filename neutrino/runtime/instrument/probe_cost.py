"""What probing added to a kernel: one `probe_cost` event per probed kernel and context.

At a kernel's first probed launch (after its probed code is loaded and the
original's attributes copied over), the driver is asked for the resources of
the program's function and of ours (registers, static shared, local and
constant bytes, the largest block each can run), and how many blocks of each
fit on an SM for that launch's block size and dynamic shared memory. The
engine's instruction counts come from the kernel description (spec/kernel-json.md).
Never per launch, never raises: a failure is the event's `error`
(spec/trace-format.md, spec/tools.md "Probe cost").
"""

from __future__ import annotations

from neutrino import occupancy as occ
from neutrino.runtime.driver import DEV_ATTR_CC_MAJOR, DriverError, function_of

# CUfunction_attribute numbers (cuda.h) of what the event records.
FUNC_ATTR_MAX_THREADS_PER_BLOCK = 0
FUNC_ATTR_SHARED_SIZE_BYTES = 1
FUNC_ATTR_CONST_SIZE_BYTES = 2
FUNC_ATTR_LOCAL_SIZE_BYTES = 3
FUNC_ATTR_NUM_REGS = 4
RESOURCE_ATTRS = {
    "regs": FUNC_ATTR_NUM_REGS, "shared_static": FUNC_ATTR_SHARED_SIZE_BYTES, "local": FUNC_ATTR_LOCAL_SIZE_BYTES,
    "const": FUNC_ATTR_CONST_SIZE_BYTES, "max_threads": FUNC_ATTR_MAX_THREADS_PER_BLOCK,
}


def function_resources(drv, func: int) -> dict[str, int]:
    return {name: drv.func_get_attribute(func, attr) for name, attr in RESOURCE_ATTRS.items()}


def side(drv, func: int, threads: int, dynamic_shared: int, dev: occ.DeviceLimits) -> dict:
    """One function's resources and occupancy for a block of `threads` with `dynamic_shared` bytes.
    `blocks_per_sm` is the driver's answer where it gives one (`occupancy_from`: "driver"), else the
    formula's; `formula_blocks` is always the formula's, and `limiter` the formula's limiting resource."""
    func = function_of(drv, func)
    res = function_resources(drv, func)
    calc = occ.occupancy(threads, res["regs"], res["shared_static"], dynamic_shared, dev, res["max_threads"])
    blocks, source = calc.blocks, "formula"
    ask = getattr(drv, "occupancy_max_blocks", None)
    if ask is not None:
        try:
            blocks, source = ask(func, threads, dynamic_shared), "driver"
        except DriverError:
            pass
    warps = blocks * max(1, -(-threads // dev.warp_size))
    return {**res, "blocks_per_sm": blocks, "warps_per_sm": warps, "occupancy": round(warps / dev.warps_per_sm, 6),
            "formula_blocks": calc.blocks, "limiter": calc.limiter, "occupancy_from": source}


def instruction_counts(info: dict) -> dict:
    """The engine's static counts (kernel.json `instructions`), with what was inserted and the
    mean per site; {} for a description written before they existed."""
    counts = info.get("instructions")
    if not isinstance(counts, dict) or "original" not in counts or "probed" not in counts:
        return {}
    inserted = counts["probed"] - counts["original"]
    sites = info.get("sites") or 0
    out = {"original": counts["original"], "probed": counts["probed"], "inserted": inserted, "sites": sites,
           "per_site": round(inserted / sites, 3) if sites else None}
    if "register_counters" in counts:  # hist buckets counted in registers (passes/register_counters.py)
        out["register_counters"] = counts["register_counters"]
    return out


def record(drv, trace, pk, req) -> None:
    """The `probe_cost` event of `pk` (a ProbedKernel) at its launch `req`, once per probed kernel."""
    if pk.cost_recorded:
        return
    pk.cost_recorded = True
    threads = req.block[0] * req.block[1] * req.block[2]
    fields = {"kernel": pk.name, "block": list(req.block), "threads": threads, "dynamic_shared": req.shared_bytes,
              "instructions": instruction_counts(pk.info)}
    try:
        dev = occ.from_device(drv.device_attr, drv.device_attr(DEV_ATTR_CC_MAJOR))
        fields["warps_per_sm_max"] = dev.warps_per_sm
        fields["original"], fields["probed"] = (side(drv, func, threads, req.shared_bytes, dev)
                                                for func in (req.func, pk.func))
    except Exception as e:  # noqa: BLE001 - the cost is a report line; the launch goes on
        fields["error"] = f"{type(e).__name__}: {e}"
    trace.event("probe_cost", **fields)
