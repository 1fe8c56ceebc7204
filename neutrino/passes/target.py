"""Fit the module's `.version`/`.target` to the code we inserted.

Old modules (sm_1x/sm_2x era PTX, `.version 1.4`..`3.x`) predate some of what
probe code and the engine's own code use: `%globaltimer` needs PTX 3.1 and
sm_30, `%dynamic_smem_size` PTX 4.1, `popc` sm_20... (the `since` fields of
neutrino/isa/ptx/formats.py). This pass collects what every inserted
instruction needs and then

* raises `.version` to the lowest version that has all of it, when the
  module's target supports it and no original instruction is of a form that
  newer versions retired (formats.RETIRED): the meaning of the original code
  does not depend on `.version` otherwise;
* refuses, with a message located at the probe line (or at `.target` for the
  engine's own code), what the module's `.target` lacks: raising the target
  would change what the original code is compiled for.

It runs after the last pass that inserts code, so it sees everything printed.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from neutrino.errors import Diagnostic, InstrumentError, Location, ProbeError
from neutrino.isa.ptx import formats, ir
from neutrino.passes.manager import Context


def _header(module: ir.Module, directive: str) -> ir.Directive | None:
    for item in module.items:
        if isinstance(item, ir.Directive) and item.text.split()[:1] == [directive]:
            return item
    return None


@attrs.frozen
class TargetFitting:
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
        self.check_target(module, ctx, inserted, need)
        self.raise_version(module, ctx, need)

    # -- the target: never changed, so what it lacks is refused
    def check_target(self, module: ir.Module, ctx: Context, inserted: list[ir.Instruction], need: formats.Requirement) -> None:
        target = formats.parse_target(module.target)
        if target is None or need.sm <= target:
            return
        probes_used = {site.probe for state in ctx.kernels.values() for site in state.sites}
        problems = probe_target_problems(ctx, probes_used, module.target, target)
        if problems:
            raise ProbeError(problems)
        culprit = next(i for i in inserted if formats.requirement(i).sm > target)
        where = _header(module, ".target")
        raise InstrumentError(
            f"{module.source}:{where.line if where else 0}: error: the module targets {module.target}, but the "
            f"instrumentation needs sm_{formats.requirement(culprit).sm} ({culprit.opcode} {', '.join(map(str, culprit.operands))}, from {culprit.origin})"
        )

    # -- the version: raised when that is legal and enough
    def raise_version(self, module: ir.Module, ctx: Context, need: formats.Requirement) -> None:
        directive = _header(module, ".version")
        have = formats.parse_version(module.version)
        if directive is None or have is None or have >= need.ptx:
            return
        found = _retired_original(module, ctx, need)
        if found is not None:
            insn, retired = found
            raise InstrumentError(
                f"{module.source}:{insn.line}: error: the probes need {need}, but this module's .version "
                f"{module.version} cannot be raised to {need.version_text}: {retired}"
            )
        ir.edit(directive, text=directive.text.replace(module.version, need.version_text, 1))


def _retired_original(module: ir.Module, ctx: Context, need: formats.Requirement) -> tuple[ir.Instruction, str] | None:
    """The first original instruction of a form that `.version` need.ptx retired, with why."""
    target = formats.parse_target(module.target) or 0
    for state in ctx.kernels.values():
        for insn in ir.instructions(state.function.body):
            if insn.origin is None:
                retired = formats.retired_form(insn, target, need.ptx)
                if retired is not None:
                    return insn, retired
    return None


def version_reachable(module: ir.Module, ctx: Context, need: formats.Requirement) -> bool:
    """Would this pass accept code needing `need`? (The target has it; `.version` has it or can be raised.)

    Lowering asks before it emits optional code (warp aggregation), so that an
    old module gets the plain form instead of a refusal.
    """
    target, version = formats.parse_target(module.target), formats.parse_version(module.version)
    if target is None or target < need.sm:
        return False
    return (version is not None and version >= need.ptx) or _retired_original(module, ctx, need) is None


def probe_target_problems(ctx: Context, probe_names: set[str], target_text: str, target: int) -> list[Diagnostic]:
    """Located refusals for the probe instructions that need more than `.target` offers."""
    problems = []
    probe_file = ctx.probes
    for probe in probe_file.probes:
        if probe.name not in probe_names:
            continue
        for snippet in probe.snippets():
            for insn in ir.instructions(snippet.statements):
                need = formats.requirement(insn)
                if need.sm <= target:
                    continue
                what = next((o.name for o in _operands_flat(insn) if isinstance(o, ir.SpecialRegister)
                             and formats.SPECIAL.get(o.base, formats.SpecialFormat(32)).since.sm > target), str(insn.opcode))
                loc: Location = probe_file.location(insn.line, what)
                problems.append(Diagnostic(loc, f"[probe {probe.name}] {what} needs sm_{need.sm}, but the module targets {target_text}"))
    return problems


def _operands_flat(insn: ir.Instruction) -> list[ir.Operand]:
    """Operands with vectors (SAVE's values) opened."""
    return [item for o in insn.operands for item in (o.items if isinstance(o, ir.Vector) else (o,))]
