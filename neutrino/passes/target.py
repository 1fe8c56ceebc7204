"""Fit the module's `.target`/`.version` to the code we inserted.

Old modules (sm_1x/sm_2x era PTX, `.version 1.4`..`3.x`) predate some of what
probe code and the engine's own code use: `%globaltimer` needs PTX 3.1 and
sm_30, `%dynamic_smem_size` PTX 4.1, `cvta` and `%clock64` sm_20... (the
`since` fields of neutrino/isa/ptx/formats.py). This pass collects what every
inserted instruction needs and then

* raises `.target` to the lowest architecture that has all of it. The driver
  JIT-compiles PTX for the GPU it runs on (sm_75 or newer for CUDA 13), so the
  target only states what the code may use; the one difference in meaning is
  sm_1x's implied flush-to-zero of f32 subnormals, which is written out on
  the original instructions (`add.f32` → `add.ftz.f32`, see `explicit_sm1x`)
  so that ptxas emits the same machine code as before (tests/test_targets.py
  compares it). Refused, located at `.target`, where that is impossible:
  `.tex` variables (retired after PTX 1.4, which no raised target takes);
* raises `.version` to the lowest version that has all of it and knows the
  target, when no original instruction is of a form that newer versions
  retired (formats.RETIRED): the meaning of the original code does not depend
  on `.version` otherwise.

It runs after the last pass that inserts code, so it sees everything printed.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from neutrino.errors import InstrumentError
from neutrino.isa.ptx import formats, ir
from neutrino.passes.state import Context


def _header(module: ir.Module, directive: str) -> ir.Directive | None:
    for item in module.items:
        if isinstance(item, ir.Directive) and item.text.split()[:1] == [directive]:
            return item
    return None


@attrs.frozen
class PtxTargetFitting:
    name: ClassVar[str] = "fit-target"
    requires: ClassVar[tuple[str, ...]] = ("buffer-addressing",)

    def run(self, module: ir.Module, ctx: Context) -> None:
        version, target = formats.parse_version(module.version), formats.parse_target(module.target)
        size = _header(module, ".address_size")
        modern = version is not None and target is not None and version >= formats.NEWEST.ptx and target >= formats.NEWEST.sm
        if modern and (size is None or size.text.split()[1:] != ["32"]):
            return  # the common case, in constant time: the module has everything the tables know
        inserted = [
            insn
            for state in ctx.kernels.values()
            for insn in ir.instructions(state.function.body)
            if insn.origin is not None
        ]
        if not inserted:
            return
        if size is not None and size.text.split()[1:] == ["32"]:
            raise InstrumentError(
                f"{module.source}:{size.line}: error: 32-bit PTX (.address_size 32) cannot be instrumented: probe "
                "buffers are addressed with 64 bits (and ptxas no longer assembles 32-bit code)"
            )
        need = formats.ANY
        for insn in inserted:
            need = need.join(formats.requirement(insn))
        target = formats.parse_target(module.target)
        if target is not None and need.sm > target:
            raise_target(module, need, inserted)
            need = need.join(formats.Requirement(TARGET_VERSION[need.sm], need.sm))
        raise_version(module, need)


def raise_version(module: ir.Module, need: formats.Requirement) -> None:
    """`.version` → need.ptx where it is older, unless an original instruction has a form that version retired."""
    directive = _header(module, ".version")
    have = formats.parse_version(module.version)
    if directive is None or have is None or have >= need.ptx:
        return
    found = _retired_original(module, need)
    if found is not None:
        insn, retired = found
        raise InstrumentError(
            f"{module.source}:{insn.line}: error: the probes need {need}, but this module's .version "
            f"{module.version} cannot be raised to {need.version_text}: {retired}"
        )
    ir.edit(directive, text=directive.text.replace(module.version, need.version_text, 1))


ABI_VERSION = (3, 0)  # from here ptxas compiles with the ABI, which refuses module-scoped .local variables


def _retired_original(module: ir.Module, need: formats.Requirement) -> tuple[ir.Statement, str] | None:
    """The first original statement of a form that `.version` need.ptx retired, with why."""
    target = formats.parse_target(module.target) or 0
    if need.ptx >= ABI_VERSION:
        for item in module.items:
            if isinstance(item, ir.Directive) and item.text.split()[:1] == [".local"]:
                return item, "a module-scoped .local variable (refused from PTX 3.0 on, with the ABI)"
    for function in module.items:  # every function: a called .func is assembled under the same .version
        if not isinstance(function, ir.Function) or function.body is None:
            continue
        for insn in ir.instructions(function.body):
            if insn.origin is None:
                retired = formats.retired_form(insn, target, need.ptx)
                if retired is not None:
                    return insn, retired
    return None


def version_reachable(module: ir.Module, need: formats.Requirement) -> bool:
    """Would this pass accept code needing `need`? (The target has it; `.version` has it or can be raised.)

    Lowering asks before it emits optional code (warp aggregation), so that an
    old module gets the plain form instead of a refusal.
    """
    target, version = formats.parse_target(module.target), formats.parse_version(module.version)
    if target is None or target < need.sm:
        return False
    return (version is not None and version >= need.ptx) or _retired_original(module, need) is None


# ---------------------------------------------------------------- raising the target

# The lowest `.version` that takes each target the tables may ask for (formats' `since` fields:
# sm_20, sm_30, sm_50; match/redux are only emitted where the module's target already has them).
TARGET_VERSION = {20: (2, 0), 30: (3, 0), 50: (4, 0), 70: (6, 0), 80: (7, 0)}

# f32 instructions that take `.ftz`: on sm_1x every one of them flushes f32 subnormals
# without it (PTX ISA; checked against ptxas 13.0's machine code), later targets only with it.
FTZ_OPCODES = frozenset("add sub mul mad fma div abs neg min max rcp sqrt rsqrt sin cos lg2 ex2 setp set slct cvt".split())


def raise_target(module: ir.Module, need: formats.Requirement, inserted: list[ir.Instruction]) -> None:
    """`.target` → sm_{need.sm}; an sm_1x module's original code first says what sm_1x implied."""
    directive = _header(module, ".target")
    old = formats.parse_target(module.target)
    if need.sm not in TARGET_VERSION:  # not reached with today's tables
        culprit = next(i for i in inserted if formats.requirement(i).sm > old)
        raise InstrumentError(
            f"{module.source}:{directive.line}: error: the module targets {module.target}, but the "
            f"instrumentation needs sm_{need.sm} ({culprit.opcode}, from {culprit.origin})"
        )
    options = [o.strip() for o in directive.text.split(None, 1)[1].split(",")[1:]]
    if old < 20:
        _refuse_tex(module, need)
        explicit_sm1x(module)
        options = [o for o in options if o != "map_f64_to_f32"]  # sm_13+ refuse it; ptxas 13 keeps f64 anyway
    ir.edit(directive, text=", ".join([f".target sm_{need.sm}", *options]))


def _refuse_tex(module: ir.Module, need: formats.Requirement) -> None:
    """`.tex` (PTX 1.x texture variables) is refused from PTX 1.5 on, below every version a raised target needs."""
    for item in module.items:
        if isinstance(item, ir.Directive) and item.text.split()[:1] == [".tex"]:
            raise InstrumentError(
                f"{module.source}:{item.line}: error: the instrumentation needs sm_{need.sm}, but this "
                f"{module.target} module cannot be raised to it: its .tex variables are refused from PTX 1.5 on, "
                f"and sm_{need.sm} needs PTX {'.'.join(map(str, TARGET_VERSION[need.sm]))}"
            )


def explicit_sm1x(module: ir.Module) -> None:
    """Writes out what sm_1x implies for the original f32 instructions, so that a newer target compiles them the same.

    `.ftz` on every f32 instruction that takes it, except a cvt from an integer
    (nothing to flush) or between f32 and f64 in PTX 1.4 and older (those did
    not flush); `mad.f32` without rounding is `mad.rn.ftz.f32` (the form sm_20
    and later require; ptxas compiles both alike).
    """
    legacy_cvt = (formats.parse_version(module.version) or (0, 0)) <= (1, 4)
    for item in module.items:
        if not isinstance(item, ir.Function) or item.body is None:
            continue
        for insn in ir.instructions(item.body):
            if insn.origin is None:
                text = _explicit_f32(insn.opcode, legacy_cvt)
                if text != insn.opcode.text:
                    ir.edit(insn, opcode=ir.opcode(text))


def _explicit_f32(opcode: ir.Opcode, legacy_cvt: bool) -> str:
    modifiers, types = list(opcode.modifiers), opcode.types
    if opcode.base not in FTZ_OPCODES or "ftz" in modifiers or "f32" not in types:
        return opcode.text
    if opcode.base == "slct" and types[-1] != "f32":
        return opcode.text  # .ftz applies to slct's f32 selector only
    if opcode.base == "cvt" and (types[-1] not in ("f32", "f64") or set(types) == {"f32", "f64"} and legacy_cvt):
        return opcode.text  # from an integer nothing can be subnormal
    if opcode.base == "mad" and not set(modifiers) & set(formats.ROUND):
        modifiers.insert(0, "rn")
    # `.ftz` goes after rounding, approximation and comparison modifiers, before `.sat` and the types.
    at = next(i for i, m in enumerate(modifiers) if m == "sat" or m in ir.TYPE_BYTES)
    modifiers.insert(at, "ftz")
    return ".".join([opcode.base, *modifiers])
