"""The passes' work for an ISA that keeps each site's code on the site until buffer addressing splices it (GCN, RDNA).

Such an ISA resolves a site's snippet into a list of its own instructions and
abstract SAVEs (`neutral_ops.SaveOp`), lowers the SAVEs in the neutral
operations (passes/neutral_ops.py) and splices everything in one scan of the
module at the end (passes/build.py `site_edits`). What is the same whatever its
instructions is here, written once; the ISA hands in its hooks:

    resolve_sites   resolve_site(state, site, probe, statements) -> code: one site's snippet made concrete
                    (SkipSite: why not)
    snippet_code    instruction(stmt) -> code, save_operand(item, role): a snippet's statements and SAVE operands
    lower_saves     translate(ops, shared) -> instructions: the neutral operations as its instructions
    check_kernels   owned(state) -> ours, check_inserted(kernel, insn, ours): an inserted instruction writes only ours
    shown           comment(text) -> a statement; virtualize: home(name, type) -> a probe register's registers
"""

from __future__ import annotations

from neutrino.errors import InstrumentError
from neutrino.isa.interface import SAVE
from neutrino.isa.ptx import ir as ptx
from neutrino.passes.build import site_edits, splice
from neutrino.passes.neutral_ops import NeutralSteps, SaveOp, save_of
from neutrino.passes.save_core import lower_exit_counts

LOWERING_ORIGIN = "save-lowering"


class SkipSite(Exception):
    """This site cannot run its snippet; the message says why."""


def resolve_sites(ctx, resolve_site) -> None:
    """Every kernel's sites resolved by the ISA's `resolve_site`; a site it skips is dropped and listed with the reason
    (spec/probe-toml.md, "Helpers"). The probe's map and every map an explicit `SAVE [ MAP ]` names get a buffer."""
    probes = {p.name: p for p in ctx.probes.probes}
    for state in ctx.kernels.values():
        kept = []
        for site in state.sites:
            probe = probes[site.probe]
            snippet = probe.before if site.where == "before" else probe.after
            try:
                site.code = resolve_site(state, site, probe, snippet.statements)
            except SkipSite as e:
                state.skipped.append({"probe": site.probe, "line": site.anchor.line if site.anchor else 0,
                                      "instruction": site.anchor.mnemonic if site.anchor else "", "reason": str(e)})
                continue
            kept.append(site)
            for name in [probe.map] + [c.map for c in site.code if type(c) is SaveOp]:
                if name and name not in state.maps:
                    state.maps.append(name)
        state.sites = kept


def snippet_code(statements: list, probe, maps: dict, instruction, save_operand) -> list:
    """A snippet's statements as one site's code: the ISA's (`instruction(stmt)`, a list; empty for a declaration) and
    each SAVE as a SaveOp (`save_operand` reads its values and guard); the compact form's SAVEs of one snippet fill one record."""
    code: list = []
    pending: SaveOp | None = None
    for stmt in statements:
        if type(stmt) is not ptx.Instruction or stmt.opcode.base != SAVE:
            code += instruction(stmt)
            continue
        save = save_of(stmt, probe, maps, save_operand)
        compact = stmt.opcode.text != SAVE
        if compact and pending is not None:
            code.remove(pending)
            save = save.joined(pending)
        pending = save if compact else None
        code.append(save)
    return code


def lower_saves(ctx, lanes: int, state, translate) -> list:
    """Each SaveOp of the kernel's sites replaced by its stores (`translate`d neutral steps, `lanes` to a wave);
    returns the kernel's exit code: each array map's unit count stored."""
    steps = NeutralSteps(lanes)
    for site in state.sites:
        code: list = []
        for item in site.code:
            if type(item) is not SaveOp:
                code.append(item)
                continue
            moves, record = lowered(steps, ctx, item, state)
            code += translate(moves, shared=False) + translate(record)
        site.code = code
    return translate(lower_exit_counts(steps, [ctx.probes.maps[name] for name in state.maps]))


def lowered(steps: NeutralSteps, ctx, save: SaveOp, state) -> tuple[list, list]:
    """The neutral operations of one SAVE (NeutralSteps.lower), or the refusal of a map they cannot fill yet."""
    spec = ctx.probes.maps[save.map]
    if spec.type == "hist":
        raise InstrumentError(f"[probe {save.probe}] hist maps are not supported on {ctx.isa.name.upper()} yet (map {save.map})")
    if spec.cap == "count":
        raise InstrumentError(f"[probe {save.probe}] cap = \"count\" is not supported on {ctx.isa.name.upper()} yet "
                              f"(map {save.map})")
    state.levels.add(spec.level)
    return steps.lower(spec, save.values, save.types, save.guard)


def splice_all(items: list, ctx) -> None:
    """All sites' code and each kernel's entry and exit code into the module's statements, in one pass over them."""
    splice(items, site_edits(ctx))
    for state in ctx.kernels.values():
        state.spliced = True


def shown(items: list, ctx, comment) -> list | None:
    """--print-after before buffer addressing: a copy of the module's statements with each site's code in place, an
    abstract SAVE as a comment (`comment(text)`, the ISA's comment line); None once everything is spliced."""
    if not ctx.kernels or all(state.spliced for state in ctx.kernels.values()):
        return None

    def readable(code: list) -> list:
        return [comment(f"SAVE [{c.map}] {{{', '.join(f'{v}:{t}' for v, t in zip(c.values, c.types))}}}"
                        f"{f' if {c.guard}' if c.guard is not None else ''} (probe {c.probe})") if type(c) is SaveOp else c
                for c in code]

    copy = list(items)
    splice(copy, site_edits(ctx, readable))
    return copy


def virtualize(ctx, state, home) -> None:
    """Each probe register gets one home per kernel (`home(name, type)`): probe registers are shared by name across
    the probes of a file (a `before` at kernel entry hands values to an `after` at exit)."""
    for name, rtype in ctx.probes.registers.items():
        state.renames[name] = home(name, rtype)


def check_kernels(originals: list, ctx, lowered: bool, owned, check_inserted) -> None:
    """Phase 2 of the verifier, after any pass: each kernel's original instructions (`originals`: the module's
    instructions of no origin, in order) all there, in order, none inside our code; every inserted instruction
    passes the ISA's `check_inserted` against the registers the allocator gave out (SAVEs still abstract until lowered)."""
    for name, state in ctx.kernels.items():
        mine = originals  # the common case, a module of one kernel: the module's instructions are the kernel's
        if len(ctx.kernels) > 1 or len(originals) != len(state.originals):
            own = {id(i) for i in state.originals}
            mine = [i for i in originals if id(i) in own]
        if mine != state.originals:  # identity: instructions compare as objects
            raise InstrumentError(f"kernel {name}: the original instructions were changed by a pass")
        ours = owned(state)
        for insn in [c for site in state.sites for c in site.code] + state.entry_code + state.exit_code:
            if type(insn) is SaveOp:
                if lowered:
                    raise InstrumentError(f"kernel {name}: a SAVE of probe {insn.probe} was not lowered")
                continue
            if insn.origin is None:
                raise InstrumentError(f"kernel {name}: internal: an original instruction inside probe code")
            check_inserted(name, insn, ours)
