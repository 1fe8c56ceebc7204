"""The verifier: probes are untrusted code running inside someone else's kernel.

Two phases, as in the eBPF verifier. `verify_probe_file` checks every snippet
of a probe file against the rules of spec/verifier.md and returns every
problem, located. The `Verifier` pass then checks, on the instrumented kernel,
that the original instructions are all still there in their order and that
everything a probe contributed obeys the same rules after renaming.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from neutrino.errors import Diagnostic, InstrumentError, ProbeError
from neutrino.isa.ptx import ir
from neutrino.isa.ptx.semantics import defined_registers, effects, lookup
from neutrino.passes.manager import Context
from neutrino.probefile import HELPERS, SAVE, Probe, ProbeFile, Snippet

LOWERING_ORIGIN = "save-lowering"  # lower_save.ORIGIN (not imported: lower_save imports resolve, which imports us)

ALLOWED_OPCODES = frozenset(
    """mov add sub mul mad mul24 mad24 sad div rem abs neg min max and or xor not cnot
    shl shr bfe bfi brev popc clz prmt lop3 cvt setp set selp slct testp copysign""".split()
)
READABLE_SPECIAL = frozenset(
    """%clock %clock64 %globaltimer %globaltimer_lo %globaltimer_hi %smid %nsmid %warpid %nwarpid
    %laneid %lanemask_eq %lanemask_le %lanemask_lt %lanemask_ge %lanemask_gt %tid %ntid %ctaid
    %nctaid %gridid %dynamic_smem_size %total_smem_size""".split()
)
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
# ADDR is always a 64-bit address; OUT, IN1-3 and BYTES have the type of what they stand for at
# each site, so their uses are checked per site when the snippet is spliced in (passes/resolve.py).
HELPER_BITS = {"ADDR": 64}


def type_bits(t: str) -> int | str:
    t = t.split()[-1]
    return "pred" if t == "pred" else ir.TYPE_BYTES.get(t, 0) * 8


@attrs.define
class _SnippetChecker:
    probe_file: ProbeFile
    probe: Probe
    snippet: Snippet
    problems: list[Diagnostic]

    def error(self, line: int, message: str, token: str | None = None, hint: str = "") -> None:
        loc = self.probe_file.location(line, token)
        self.problems.append(Diagnostic(loc, f"[probe {self.probe.name}] {message}", hint=hint))

    def check(self) -> None:
        for stmt in self.snippet.statements:
            self.check_statement(stmt)

    def check_statement(self, stmt: ir.Statement) -> None:
        if isinstance(stmt, ir.Comment):
            return
        if isinstance(stmt, ir.Scope):
            self.error(stmt.line, "nested { } scopes are not allowed in probes", "{")
        elif isinstance(stmt, ir.Label):
            self.error(stmt.line, f"label {stmt.name} is not allowed: probes have no control flow", stmt.name)
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
        if insn.guard is not None:
            self.check_guard(insn)
        if insn.opcode.base == SAVE:
            self.check_save(insn)
            return
        if insn.opcode.base not in ALLOWED_OPCODES:
            row = lookup(insn.opcode)
            if row.control:
                reason = CONTROL_REASONS[row.control]
            elif row.addresses or insn.opcode.base in ("ld", "st", "atom", "red", "cp", "ldu", "prefetch"):
                reason = f"{insn.opcode.base} accesses memory: probes may only write memory through SAVE"
            else:
                reason = f"instruction {insn.opcode.text} is not allowed in probes"
            self.error(insn.line, reason, token, hint="allowed: arithmetic, logic, cvt, setp/selp and SAVE")
            return
        for operand in insn.operands:
            if isinstance(operand, (ir.Address, ir.BracketList)):
                self.error(insn.line, "memory operands are not allowed: probes may only write memory through SAVE", "[")
                return
            if isinstance(operand, ir.ParenList):
                self.error(insn.line, "parenthesised operand lists are not allowed in probes", "(")
                return
        fx = effects(insn)
        defs = set(fx.defs)
        for index, operand in enumerate(insn.operands):
            is_def = index == 0 and (defs or isinstance(operand, (ir.SpecialRegister, ir.Symbol)))
            self.check_operand(insn, operand, is_def)
        self.check_types(insn)

    def check_guard(self, insn: ir.Instruction) -> None:
        name = insn.guard.register.name
        t = self.probe_file.registers.get(name)
        if t is None:
            self.error(insn.line, f"guard {name} is not a probe register", name)
        elif t != "pred":
            self.error(insn.line, f"guard {name} is .{t}, not .pred", name)

    def check_operand(self, insn: ir.Instruction, operand: ir.Operand, is_def: bool) -> None:
        if isinstance(operand, (ir.Vector, ir.Pair)):
            items = operand.items if isinstance(operand, ir.Vector) else (operand.first, operand.second)
            for item in items:
                self.check_operand(insn, item, is_def)
            return
        if isinstance(operand, ir.Negated):
            self.check_operand(insn, operand.operand, False)
            return
        if isinstance(operand, ir.Register):
            if operand.name not in self.probe_file.registers:
                self.error(
                    insn.line,
                    f"undeclared register {operand.name}",
                    operand.name,
                    hint="declare it with .reg in a snippet of this file; kernel registers are reachable only through OUT/IN1/IN2/IN3/ADDR",
                )
        elif isinstance(operand, ir.SpecialRegister):
            if is_def:
                self.error(insn.line, f"special register {operand.name} is read-only", operand.name)
            elif operand.base not in READABLE_SPECIAL:
                self.error(insn.line, f"special register {operand.name} cannot be read by probes", operand.name)
        elif isinstance(operand, ir.Symbol):
            self.check_helper(insn, operand.name, is_def)

    def check_helper(self, insn: ir.Instruction, name: str, is_def: bool) -> None:
        if name not in HELPERS:
            self.error(insn.line, f"unknown name {name}", name, hint="helpers: " + ", ".join(HELPERS))
        elif is_def:
            self.error(insn.line, f"helper {name} is read-only", name)
        elif self.probe.at_kernel:
            self.error(insn.line, f"helper {name} is only available at instruction positions", name)
        elif name == "OUT" and self.snippet.where == "before":
            self.error(insn.line, "OUT is only available in `after`: the instruction has not written it yet", name)

    def check_save(self, insn: ir.Instruction) -> None:
        maps = self.probe_file.maps
        explicit = len(insn.operands) == 2 and isinstance(insn.operands[0], ir.Address)
        if explicit:
            target = insn.operands[0].base
            values = insn.operands[1]
            name = getattr(target, "name", str(target))
            spec = maps.get(name)
            if self.probe.map is not None or spec is None:
                self.error(insn.line, f"SAVE [ {name} ] names no map of this file", name)
                return
            if spec.level != self.probe.level:
                self.error(insn.line, f"map {name} is at level {spec.level} but the probe runs at level {self.probe.level}", name)
            if not isinstance(values, ir.Vector) or len(values.items) != len(spec.fields):
                count = len(values.items) if isinstance(values, ir.Vector) else 1
                self.error(insn.line, f"SAVE [ {name} ] gives {count} values but the map has {len(spec.fields)} fields", "SAVE")
                return
        else:
            width = insn.opcode.modifiers
            if width not in (("u32",), ("u64",)) or len(insn.operands) != 1 or not isinstance(insn.operands[0], ir.Vector):
                self.error(insn.line, "malformed SAVE", "SAVE", hint="write SAVE.u32 {a, b} / SAVE.u64 {a}, or SAVE [ MAP ] {a, b} with [map.MAP]")
                return
            if self.probe.map is None:
                self.error(insn.line, "SAVE needs a datamodel (or SAVE [ MAP ] in the explicit form)", "SAVE")
                return
            values = insn.operands[0]
        if not values.items:
            self.error(insn.line, "SAVE of nothing", "SAVE")
        for item in values.items:
            if isinstance(item, (ir.Address, ir.BracketList, ir.Vector, ir.Pair, ir.ParenList, ir.Sink)):
                self.error(insn.line, f"SAVE operand {item} must be a register, a special register, a helper or a constant", "{")
            else:
                self.check_operand(insn, item, False)

    # -- widths
    def width_of(self, operand: ir.Operand) -> int | str | None:
        if isinstance(operand, ir.Register):
            t = self.probe_file.registers.get(operand.name)
            return type_bits(t) if t else None
        if isinstance(operand, ir.SpecialRegister):
            return 64 if operand.name in WIDE_SPECIAL else 32
        if isinstance(operand, ir.Symbol):
            return HELPER_BITS.get(operand.name)
        if isinstance(operand, ir.Negated):
            return self.width_of(operand.operand)
        return None  # immediates fit any width

    def check_types(self, insn: ir.Instruction) -> None:
        for operand, expected in expected_widths(insn):
            actual = self.width_of(operand)
            if actual is None or expected is None or actual == expected:
                continue
            want = ".pred" if expected == "pred" else f"a {expected}-bit"
            have = ".pred" if actual == "pred" else f"{actual}-bit"
            self.error(insn.line, f"type mismatch: {operand} is {have} but {insn.opcode} expects {want} operand", str(operand))


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
    if base in ("mul24", "mad24", "prmt", "lop3", "sad"):
        return [(o, 32) for o in ops]
    return [(o, t) for op in ops for o in flat(op)]


def verify_probe_file(probe_file: ProbeFile) -> list[Diagnostic]:
    """Every problem of every snippet of the file, in file order."""
    problems: list[Diagnostic] = []
    for probe in probe_file.probes:
        for snippet in probe.snippets():
            _SnippetChecker(probe_file, probe, snippet, problems).check()
    problems.sort(key=lambda d: (d.location.line, d.location.column))
    return problems


@attrs.frozen
class Verifier:
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
        if [id(i) for i in insns if i.origin is None] != state.original_ids:
            raise InstrumentError(f"{name}: the original instructions were changed by a pass")
        for insn in insns:
            if insn.origin is None or not insn.origin.startswith("probe "):
                continue
            if insn.opcode.base not in ALLOWED_OPCODES and (lowered or insn.opcode.base != SAVE):
                raise InstrumentError(f"{name}: probe code contains {insn.opcode} after lowering")
            for reg in defined_registers(insn):
                if not reg.name.startswith(state.prefix):
                    raise InstrumentError(f"{name}: probe code writes kernel register {reg.name}")


ATOMIC_OPCODES = frozenset({"atom", "red"})


def check_engine_atomics(name: str, state, probe_file: ProbeFile) -> None:
    """Atomics are admitted only where SAVE lowering put them: into a sum/hist map's counters.

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
    for insn in ir.instructions(state.function.body):
        if insn.origin is None or insn.opcode.base not in ATOMIC_OPCODES:
            continue
        address = insn.operands[0] if insn.opcode.base == "red" else insn.operands[1]
        base = address.base.name if isinstance(address, ir.Address) and isinstance(address.base, ir.Register) else None
        if insn.origin != LOWERING_ORIGIN or base not in allowed:  # only SAVE lowering emits atomics
            raise InstrumentError(f"{name}: {insn.opcode} from {insn.origin} writes {address}, which is not the counters of a sum or hist map")
