"""The verifier: probes are untrusted code running inside someone else's kernel.

Two phases, as in the eBPF verifier. `verify_probe_file` checks every snippet
of a probe file against the rules of spec/verifier.md and returns every
problem, located; the shape of each instruction (types, modifiers, operands,
constants, special registers) is the instruction-format table's
(neutrino/isa/ptx/formats.py), so what it admits assembles; labels and
branches only as bounded loops (neutrino/passes/probe_loops.py). The `Verifier` pass then checks, on the instrumented kernel,
that the original instructions are all still there in their order and that
everything a probe contributed obeys the same rules after renaming.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from neutrino.errors import Diagnostic, InstrumentError, ProbeError
from neutrino.isa.ptx import formats, ir
from neutrino.isa.ptx.semantics import defined_registers, lookup
from neutrino.passes.state import Context
from neutrino.isa.interface import HELPERS, SAVE  # not from probefile, which runs this verifier when it loads a file
from neutrino.passes.probe_loops import analyse as analyse_loops, has_control_flow

LOWERING_ORIGIN = "save-lowering"  # lower_save.ORIGIN (not imported: lower_save imports resolve, which imports us)
# shared_agg.ORIGIN and the registers through which it counts exits and copies staged counters out
STAGING_ORIGIN, STAGING_REGISTERS = "shared-aggregation", ("stg_exitp", "stg_gptr")

# Probes may use exactly the opcodes the instruction-format table describes.
ALLOWED_OPCODES = frozenset(formats.FORMATS)
WIDE_SPECIAL = frozenset({"%clock64", "%globaltimer", "%gridid"})
REGISTER_TYPES = frozenset("pred b16 u16 s16 b32 u32 s32 f32 b64 u64 s64 f64".split())
CONTROL_REASONS = {
    "branch": "branches are not allowed in probes",
    "call": "calls are not allowed in probes",
    "return": "ret is not allowed in probes",
    "exit": "exit is not allowed in probes",
    "trap": "trap is not allowed in probes",
    "barrier": "barriers and other synchronization are not allowed in probes",
}
# ADDR is always a 64-bit address. OUT, IN1-3 and BYTES have the type of what they stand for at
# each site, so their uses are checked per site when the snippet is spliced in (passes/resolve.py,
# spec/probe-toml.md "Helpers"); here only ADDR's is.
HELPER_TYPES = {"ADDR": "b64"}
# The widest register each helper can be materialised in (what a use may assume at most).
HELPER_WIDEST = {"OUT": "b64", "IN1": "b64", "IN2": "b64", "IN3": "b64", "ADDR": "b64", "BYTES": "b64",
                  "LINE": "b64", "BLOCK": "b64"}


def type_bits(t: str) -> int | str:
    t = t.split()[-1]
    return "pred" if t == "pred" else ir.TYPE_BYTES.get(t, 0) * 8


# What a probe may not do with memory, said once: it neither reads nor writes memory itself (an address the
# verifier cannot bound could fault or corrupt the kernel's data); SAVE, into its own map, is its only way out.
NO_MEMORY = "probe code may neither read nor write memory; its results leave only through SAVE"


def _memory_verb(row) -> str:
    """What an instruction does to memory, from its semantics row: `reads memory`, `writes memory`, ..."""
    accesses = {access for _, access in row.addresses}
    if "atomic" in accesses or {"load", "store"} <= accesses:
        return "reads and writes memory"
    if "store" in accesses:
        return "writes memory"
    if "load" in accesses:
        return "reads memory"
    return "accesses memory"


@attrs.define
class _SnippetChecker:
    probe_file: "ProbeFile"  # noqa: F821 (neutrino.probefile)
    probe: "Probe"  # noqa: F821
    snippet: "Snippet"  # noqa: F821
    problems: list[Diagnostic]

    def error(self, line: int, message: str, token: str | None = None, hint: str = "", after: str | None = None) -> None:
        """Report at `token` on `line`; `after` (an opcode) picks the token's occurrence that follows it."""
        loc = self.probe_file.location(line, token)
        start = loc.text.find(after) if after and token else -1
        column = loc.text.find(token, start) if start >= 0 else -1
        if column >= 0:
            loc = attrs.evolve(loc, column=column + 1)
        self.problems.append(Diagnostic(loc, f"[probe {self.probe.name}] {message}", hint=hint))

    def operand_error(self, insn: ir.Instruction, message: str, token: str | None = None, hint: str = "") -> None:
        """Report at `token` of `insn`: its first occurrence after the opcode."""
        self.error(insn.line, message, token, hint, after=insn.opcode.text)

    def check(self) -> None:
        if has_control_flow(self.snippet.statements):
            self.check_loops()
        for stmt in self.snippet.statements:
            self.check_statement(stmt)

    def check_loops(self) -> None:
        """Labels and branches only as bounded loops (spec/verifier.md, "Loops")."""
        for problem in analyse_loops(self.snippet.statements).problems:
            self.error(problem.line, problem.message, problem.token, problem.hint)

    def check_statement(self, stmt: ir.Statement) -> None:
        if isinstance(stmt, ir.Comment):
            return
        if isinstance(stmt, ir.Scope):
            self.error(stmt.line, "nested { } scopes are not allowed in probes", "{")
        elif isinstance(stmt, ir.Label):
            return  # check_loops: a label is the head of a bounded loop
        elif isinstance(stmt, ir.RegDecl):
            if stmt.type not in REGISTER_TYPES:
                self.error(stmt.line, f"register type .{stmt.type} is not allowed", ".reg", hint="use .pred, .b16/.u16/.s16, .b32/.u32/.s32/.f32 or .b64/.u64/.s64/.f64")
        elif isinstance(stmt, ir.Directive):
            self.error(stmt.line, f"directive {stmt.text.split()[0]} is not allowed in probes", stmt.text.split()[0])
        elif isinstance(stmt, ir.Instruction):
            self.check_instruction(stmt)

    # -- instructions
    def check_instruction(self, insn: ir.Instruction) -> None:
        token = insn.opcode.text
        if self.check_ascii(insn):
            return
        if insn.guard is not None:
            self.check_guard(insn)
        if insn.opcode.base == SAVE:
            self.check_save(insn)
            return
        if insn.opcode.base == "bra":
            return  # check_loops: a branch is the backward branch of a bounded loop
        if insn.opcode.base not in ALLOWED_OPCODES:
            row = lookup(insn.opcode)
            if row.control:
                reason = CONTROL_REASONS[row.control]
            elif row.addresses or insn.opcode.base in ("ld", "st", "atom", "red", "cp", "ldu", "prefetch"):
                reason = f"{insn.opcode.base} {_memory_verb(row)}: {NO_MEMORY}"
            else:
                reason = f"instruction {insn.opcode.text} is not allowed in probes"
            self.operand_error(insn, reason, token, hint="allowed: arithmetic, logic, cvt, setp/selp and SAVE; "
                               "the matched instruction's address and operands: ADDR, IN1, IN2, IN3, OUT")
            return
        for operand in insn.operands:
            if isinstance(operand, (ir.Address, ir.BracketList)):
                self.operand_error(insn, f"memory operands are not allowed: {NO_MEMORY}", "[")
                return
            if isinstance(operand, ir.ParenList):
                self.operand_error(insn, "parenthesised operand lists are not allowed in probes", "(")
                return
        match = formats.match_opcode(insn.opcode)
        if match.format is None:
            self.operand_error(insn, match.problem, token)
            return
        form = match.format
        if len(insn.operands) != len(form.operands):
            self.error(
                insn.line,
                f"{insn.opcode} takes {len(form.operands)} operands, not {len(insn.operands)}",
                token,
                hint=f"{insn.opcode} {shape_of(form)};",
            )
            return
        for index, (operand, slot) in enumerate(zip(insn.operands, form.operands)):
            self.check_slot(insn, index, operand, slot, formats.slot_type(slot, insn.opcode), form)

    def check_slot(self, insn: ir.Instruction, index: int, operand: ir.Operand, slot: formats.Slot, wanted: str, form: formats.Format) -> None:
        where = f"operand {index + 1} of {insn.opcode}"
        if slot.kind == "d":
            self.check_destination(insn, operand, wanted, where)
            return
        if isinstance(operand, ir.Negated):
            if slot.kind != "n":
                self.operand_error(insn, f"{where} cannot be negated: only the predicate of setp with .and/.or/.xor can", "!")
                return
            operand = operand.operand
        if slot.kind == "i" and not isinstance(operand, ir.Immediate):
            self.operand_error(insn, f"{where} must be a constant", str(operand))
            return
        if isinstance(operand, ir.Immediate):
            problem = formats.immediate_problem(operand, wanted)
            for slot_index, low, high in form.immediates:
                if slot_index == index and problem is None and not low <= (operand.value or 0) <= high:
                    problem = f"constant {operand} of {insn.opcode} must lie in {low}..{high}"
            if problem:
                self.operand_error(insn, problem, operand.text)
        elif isinstance(operand, ir.Register):
            if self.check_declared(insn, operand):
                self.check_fits(insn, operand, self.probe_file.registers[operand.name], wanted)
        elif isinstance(operand, ir.SpecialRegister):
            self.check_special(insn, operand, wanted)
        elif isinstance(operand, ir.Symbol):
            self.check_helper(insn, operand.name, False)
            if operand.name in HELPER_TYPES:
                self.check_fits(insn, operand, HELPER_TYPES[operand.name], wanted)
        else:
            self.operand_error(insn, f"{where} cannot be {operand}", str(operand), hint="operands are registers, constants, special registers and helpers")

    def check_destination(self, insn: ir.Instruction, operand: ir.Operand, wanted: str, where: str) -> None:
        if isinstance(operand, ir.Register):
            if self.check_declared(insn, operand):
                self.check_fits(insn, operand, self.probe_file.registers[operand.name], wanted)
        elif isinstance(operand, ir.SpecialRegister):
            self.operand_error(insn, f"special register {operand.name} is read-only", operand.name)
        elif isinstance(operand, ir.Symbol):
            self.check_helper(insn, operand.name, True)
        else:
            self.operand_error(insn, f"{where} is its destination: it must be a register, not {operand}", str(operand))

    def check_declared(self, insn: ir.Instruction, register: ir.Register) -> bool:
        if register.name in self.probe_file.registers:
            return True
        self.error(
            insn.line,
            f"undeclared register {register.name}",
            register.name,
            hint="declare it with .reg in a snippet of this file; kernel registers are reachable only through OUT/IN1/IN2/IN3/ADDR",
        )
        return False

    def check_fits(self, insn: ir.Instruction, operand: ir.Operand, have: str, wanted: str) -> None:
        if have not in REGISTER_TYPES:
            return  # its declaration is refused already ("register type .T is not allowed")
        if formats.register_fits(have, wanted):
            return
        if have == "pred" or wanted == "pred" or formats.bits_of(have) == formats.bits_of(wanted):
            have_text, want_text = f".{have}", f"a .{wanted}"
        else:
            have_text, want_text = f"{formats.bits_of(have)}-bit", f"a {formats.bits_of(wanted)}-bit"
        self.operand_error(insn, f"type mismatch: {operand} is {have_text} but {insn.opcode} expects {want_text} operand", str(operand))

    def check_special(self, insn: ir.Instruction, operand: ir.SpecialRegister, wanted: str) -> None:
        problem = formats.special_problem(operand.name)
        if problem:
            self.operand_error(insn, problem, operand.name)
            return
        bits = formats.special_bits(operand.name)
        # Only mov reads special registers (resolve-operands reads them into .bN registers for
        # other instructions), and mov reads them only as integers of their own width.
        integer_only = insn.opcode.base == "mov" and formats.type_class(wanted) == "f"
        if wanted == "pred" or integer_only or formats.bits_of(wanted) != bits:
            self.operand_error(insn, f"type mismatch: {operand.name} is a {bits}-bit integer but {insn.opcode} expects a .{wanted} operand", operand.name)

    def check_ascii(self, insn: ir.Instruction) -> bool:
        """PTX is ASCII: a digit of another script (`٣`, `１２`) is refused, not copied into the kernel.

        Python's int() and str.isdigit() take any script's digits, so this is checked
        before any operand is read as a number. Returns True when it reported a problem.
        """
        text = "".join(map(str, insn.operands)) + (str(insn.guard.register) if insn.guard else "")
        if text.isascii():
            return False
        bad = next(c for c in text if not c.isascii())
        kind = "digit" if bad.isdigit() else "character"
        hint = "write numbers with the ASCII digits 0-9" if bad.isdigit() else "PTX names and numbers are ASCII"
        self.operand_error(insn, f"non-ASCII {kind} {bad!r} (U+{ord(bad):04X}) in {insn.opcode}: PTX is ASCII", bad, hint)
        return True

    def check_guard(self, insn: ir.Instruction) -> None:
        name = insn.guard.register.name
        t = self.probe_file.registers.get(name)
        if t is None:
            self.operand_error(insn, f"guard {name} is not a probe register", name)
        elif t != "pred":
            self.operand_error(insn, f"guard {name} is .{t}, not .pred", name)

    def check_operand(self, insn: ir.Instruction, operand: ir.Operand) -> None:
        """A SAVE value: a declared register, a readable special register, a helper or a constant."""
        if isinstance(operand, ir.Negated):
            self.operand_error(insn, f"SAVE operand {operand} cannot be negated", "!")
        elif isinstance(operand, ir.Register):
            self.check_declared(insn, operand)
        elif isinstance(operand, ir.SpecialRegister):
            problem = formats.special_problem(operand.name)
            if problem:
                self.operand_error(insn, problem, operand.name)
        elif isinstance(operand, ir.Symbol):
            self.check_helper(insn, operand.name, False)
        elif isinstance(operand, ir.Immediate) and formats.immediate_problem(operand, "b64"):
            self.operand_error(insn, formats.immediate_problem(operand, "b64"), operand.text)

    def check_helper(self, insn: ir.Instruction, name: str, is_def: bool) -> None:
        if name not in HELPERS:
            self.operand_error(insn, f"unknown name {name}", name, hint="helpers: " + ", ".join(HELPERS))
        elif is_def:
            self.operand_error(insn, f"helper {name} is read-only", name)
        elif self.probe.at_kernel:
            self.operand_error(insn, f"helper {name} is only available at instruction positions", name)
        elif name == "OUT" and self.snippet.where == "before":
            self.operand_error(insn, "OUT is only available in `after`: the instruction has not written it yet", name)

    def check_save(self, insn: ir.Instruction) -> None:
        maps = self.probe_file.maps
        explicit = len(insn.operands) == 2 and isinstance(insn.operands[0], ir.Address)
        if explicit:
            target = insn.operands[0].base
            values = insn.operands[1]
            name = getattr(target, "name", str(target))
            spec = maps.get(name)
            if self.probe.map is not None or spec is None:
                self.operand_error(insn, f"SAVE [ {name} ] names no map of this file", name)
                return
            if spec.level != self.probe.level:
                self.operand_error(insn, f"map {name} is at level {spec.level} but the probe runs at level {self.probe.level}", name)
            if not isinstance(values, ir.Vector) or len(values.items) != len(spec.fields):
                count = len(values.items) if isinstance(values, ir.Vector) else 1
                self.operand_error(insn, f"SAVE [ {name} ] gives {count} values but the map has {len(spec.fields)} fields", "SAVE")
                return
        else:
            width = insn.opcode.modifiers
            if width not in (("u32",), ("u64",)) or len(insn.operands) != 1 or not isinstance(insn.operands[0], ir.Vector):
                self.operand_error(insn, "malformed SAVE", "SAVE", hint="write SAVE.u32 {a, b} / SAVE.u64 {a}, or SAVE [ MAP ] {a, b} with [map.MAP]")
                return
            if self.probe.map is None:
                if not self.probe.datamodel_reported:
                    self.operand_error(insn, "SAVE needs a datamodel (or SAVE [ MAP ] in the explicit form)", "SAVE")
                return
            values = insn.operands[0]
        if not values.items:
            self.operand_error(insn, "SAVE of nothing", "SAVE")
        for item in values.items:
            if isinstance(item, (ir.Address, ir.BracketList, ir.Vector, ir.Pair, ir.ParenList, ir.Sink)):
                self.operand_error(insn, f"SAVE operand {item} must be a register, a special register, a helper or a constant", "{")
            else:
                self.check_operand(insn, item)


def shape_of(form: formats.Format) -> str:
    """`d, a, b, c`: the operand list of a form, for hints."""
    names = iter("abce")
    return ", ".join("d" if slot.kind == "d" else ("{!}" if slot.kind == "n" else "") + next(names) for slot in form.operands)


def verify_probe_file(probe_file: "ProbeFile") -> list[Diagnostic]:  # noqa: F821
    """Every problem of every snippet of the file, in file order."""
    problems: list[Diagnostic] = []
    for probe in probe_file.probes:
        for snippet in probe.snippets():
            _SnippetChecker(probe_file, probe, snippet, problems).check()
    problems.sort(key=lambda d: (d.location.line, d.location.column))
    return problems


@attrs.frozen
class PtxVerifier:
    """Re-checks the probe file and the instrumented kernels' invariants.

    Runs after SAVE lowering so that what it checks is what will be printed:
    original instructions all present and in order, and every instruction a
    probe contributed is an allowed one writing only registers of ours.
    """

    name: ClassVar[str] = "verify"
    requires: ClassVar[tuple[str, ...]] = ("match-tracepoints", "virtualize-registers")

    def run(self, module: ir.Module, ctx: Context) -> None:
        # Files from parse_probes were verified when loaded; check again only what was built by hand.
        problems = [] if ctx.probes.verified else verify_probe_file(ctx.probes)
        if problems:
            raise ProbeError(problems)
        for name, state in ctx.kernels.items():
            self.check_kernel(name, state)
            check_engine_atomics(name, state, ctx.probes)

    @staticmethod
    def check_kernel(name: str, state, lowered: bool = True) -> None:
        insns = ir.instructions(state.function.body)
        labels = None  # the function's labels, gathered at the first probe branch
        if [id(i) for i in insns if i.origin is None] != state.original_ids:
            raise InstrumentError(f"{name}: the original instructions were changed by a pass")
        for insn in insns:
            if insn.origin is None or not insn.origin.startswith("probe "):
                continue
            if insn.opcode.base == SAVE and not lowered:
                continue
            if insn.opcode.base == "bra":
                labels = labels if labels is not None else {s.name for _, _, s in ir.walk(state.function.body) if isinstance(s, ir.Label)}
                check_probe_branch(name, state, insn, labels)
                continue
            if insn.opcode.base not in ALLOWED_OPCODES:
                raise InstrumentError(f"{name}: probe code contains {insn.opcode} after lowering")
            # Helper and special-register reads are the engine's own code: it must fit the table too.
            match = formats.match_opcode(insn.opcode)
            if match.format is None or len(insn.operands) != len(match.format.operands):
                problem = match.problem or f"{len(insn.operands)} operands"
                raise InstrumentError(f"{name}: probe code contains a malformed {insn.opcode} ({problem}, from {insn.origin})")
            for reg in defined_registers(insn):
                if not reg.name.startswith(state.prefix):
                    raise InstrumentError(f"{name}: probe code writes kernel register {reg.name}")


def check_probe_branch(name: str, state, insn: ir.Instruction, labels: set[str]) -> None:
    """A probe's branch is a bounded loop's (phase 1 proved it): `bra`/`bra.uni`, guarded, back to a label of ours."""
    target = insn.operands[0] if len(insn.operands) == 1 else None
    if insn.opcode.text not in ("bra", "bra.uni") or insn.guard is None or not isinstance(target, ir.Symbol) \
            or not target.name.startswith(state.prefix) or target.name not in labels:
        raise InstrumentError(f"{name}: probe code contains {insn.opcode} {', '.join(map(str, insn.operands))}, "
                              "which is not the backward branch of a bounded loop")


ATOMIC_OPCODES = frozenset({"atom", "red"})


def check_engine_atomics(name: str, state, probe_file: "ProbeFile") -> None:
    """Atomics are admitted only where SAVE lowering put them: into a sum/hist map's counters, or
    the head of a count-sized map's ring (passes/ring.py).

    A probe snippet cannot contain `atom`/`red` (the snippet rules refuse them,
    located); this checks the lowered kernel: every atomic we added must come
    from SAVE lowering and address the counters of one of this kernel's
    aggregation maps, through the pointer registers the engine computes.
    """
    allowed = set()
    for map_name in state.maps:
        spec = probe_file.maps[map_name]
        if spec.type != "array":
            allowed.add(f"{state.prefix}buf_{spec.name}")
            allowed.add(f"{state.prefix}hoff_{spec.name}")
        elif spec.cap == "count" and not state.counting:  # the ring's head, at the buffer's start
            allowed.add(f"{state.prefix}buf_{spec.name}")
    for insn in ir.instructions(state.function.body):
        if insn.origin is None or insn.opcode.base not in ATOMIC_OPCODES:
            continue
        address = insn.operands[0] if insn.opcode.base == "red" else insn.operands[1]
        base = address.base.name if isinstance(address, ir.Address) and isinstance(address.base, ir.Register) else None
        if insn.origin == STAGING_ORIGIN and base in {state.prefix + r for r in STAGING_REGISTERS}:
            continue  # the staging step's exit counter and its copy of a staged map's counters into that map's row
        if insn.origin != LOWERING_ORIGIN or base not in allowed:  # only SAVE lowering emits atomics
            raise InstrumentError(f"{name}: {insn.opcode} from {insn.origin} writes {address}, which is not the counters of a sum or hist map nor a ring's head")


def expected_widths(insn: ir.Instruction) -> list[tuple[ir.Operand, int | str | None]]:
    """(operand, width it must have) for the instruction shapes probes may use."""
    types = insn.opcode.types
    if not types:
        return []
    ops = list(insn.operands)
    base, mods = insn.opcode.base, insn.opcode.modifiers
    t = type_bits(types[-1])
    first = type_bits(types[0])

    def flat(o):
        return [o.first, o.second] if isinstance(o, ir.Pair) else [o]

    if base == "cvt" and len(types) >= 2:
        return [(ops[0], first)] + [(o, type_bits(types[1])) for o in ops[1:]]
    if base == "setp":
        return [(o, "pred") for o in flat(ops[0])] + [(o, t) for o in ops[1:3]] + [(o, "pred") for o in ops[3:]]
    if base == "set" and len(types) >= 2:
        return [(ops[0], first)] + [(o, type_bits(types[1])) for o in ops[1:3]] + [(o, "pred") for o in ops[3:]]
    if base == "selp":
        return [(o, t) for o in ops[:3]] + [(o, "pred") for o in ops[3:]]
    if base == "slct" and len(types) >= 2:
        return [(o, first) for o in ops[:3]] + [(o, type_bits(types[1])) for o in ops[3:]]
    if base in ("mul", "mad") and "wide" in mods and isinstance(t, int):
        wide = [(ops[0], 2 * t)] + [(o, t) for o in ops[1:3]]
        return wide + [(o, 2 * t) for o in ops[3:]]
    if base in ("shl", "shr"):
        return [(o, t) for o in ops[:2]] + [(o, 32) for o in ops[2:]]
    if base == "bfe":
        return [(o, t) for o in ops[:2]] + [(o, 32) for o in ops[2:]]
    if base == "bfi":
        return [(o, t) for o in ops[:3]] + [(o, 32) for o in ops[3:]]
    if base in ("popc", "clz"):
        return [(ops[0], 32)] + [(o, t) for o in ops[1:]]
    if base == "testp":
        return [(ops[0], "pred")] + [(o, t) for o in ops[1:]]
    if base in ("mul24", "mad24", "prmt", "lop3"):
        return [(o, 32) for o in ops]
    return [(o, t) for op in ops for o in flat(op)]
