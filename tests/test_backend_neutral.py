"""The DSL's IR in the neutral operations (language/backend_neutral.py) computes what the IR computes.

Two small interpreters, for one lane: one runs a probe's IR (spec/ir.md), the
other the neutral operations the backend writes for it (spec/pipeline.md, "The
neutral operations"), from the same registers, helpers and special values;
every record saved, and whether it is saved, must agree. Programs: the DSL
fuzzer's (tests/test_language_fuzz.py) and a fixed one using every operation.
"""

from __future__ import annotations

import random
import re

import attrs
from hypothesis import given

from neutrino.language import DslError
from neutrino.language.backend_neutral import NeutralBackend, NeutralEmitter
from neutrino.language.compiler import compile_to_ir
from neutrino.language.ir import BITS, PRED, U64, Field, Imm, Reg
from neutrino.language.loops import loop_tree
from neutrino.passes.neutral_ops import ACTIVE, Pred, Val
from test_gcn import EVERY_DSL_OPERATION
from test_language_fuzz import FAST, programs

SPECIALS = {"clock": (1 << 40) + 12345, "time": 987654321012, "cuid": 17, "laneid": 5}
COMPARE = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
           "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def ir_run(body: list, env: dict, fields: dict) -> list:
    """The records one lane saves running `body` (loops unrolled as the backend does): (map, values) each."""
    saved: list = []
    for item in loop_tree(body):
        _ir_items([item], env, fields, saved)
    return saved


def _ir_items(items: list, env: dict, fields: dict, saved: list) -> None:
    for item in items:
        if isinstance(item, tuple):
            for _ in range(item[0]):
                _ir_items(item[1], env, fields, saved)
            continue
        ins = item
        if ins.guard is not None and env[ins.guard.reg.name] == ins.guard.negated:
            continue
        value = (lambda x: env[x.name] if isinstance(x, Reg) else fields[x.name] if isinstance(x, Field) else x.value)
        srcs = [value(s) for s in ins.srcs]
        if ins.op == "save":
            saved.append((ins.map, tuple(srcs)))
            continue
        env[ins.dst.name] = _ir_value(ins, srcs)


def _ir_value(ins, srcs: list):
    mask = (1 << BITS.get(ins.type, 64)) - 1
    op = ins.op
    if op in SPECIALS:
        return SPECIALS[op] & ((1 << BITS[ins.dst.type]) - 1)
    if op == "setp":
        return COMPARE[ins.cmp](srcs[0], srcs[1])
    if op in ("pand", "por", "pnot"):
        return {"pand": lambda: srcs[0] and srcs[1], "por": lambda: srcs[0] or srcs[1], "pnot": lambda: not srcs[0]}[op]()
    if op == "selp":
        return srcs[0] if srcs[2] else srcs[1]
    a, b = srcs[0], srcs[1] if len(srcs) > 1 else 0
    return {"mov": a, "cvt": a, "add": a + b, "sub": a - b, "mul": a * b, "neg": -a, "not": ~a, "and": a & b,
            "or": a | b, "xor": a ^ b, "shl": a << b if b < 64 else 0, "shr": a >> b,
            "div": a // b if b else 0, "rem": a % b if b else 0}[op] & mask


class _Events(list):
    """The emitter's snippet lines (SAVEs) as events, in order among the operations."""

    def __init__(self, events: list):
        super().__init__()
        self.events = events

    def append(self, line: str) -> None:
        self.events.append(("save", line))


class _Recorder(NeutralEmitter):
    """The backend's neutral operations, special values and SAVEs, in order, for `neutral_run`; names are tokens."""

    isa = "TEST"

    def __init__(self):
        self.events, self.named = [], {}
        self.lines = _Events(self.events)

    def run(self, *ops) -> None:
        self.events += [("op", op) for op in ops]

    def name(self, x) -> str:
        token = f"#{len(self.named)}"
        self.named[token] = x
        return token

    def special(self, op: str, d: str) -> None:
        self.events.append(("special", op, self.named[d]))

    def clock(self, d):
        self.special("clock", d)

    def time(self, d):
        self.special("time", d)

    def cuid(self, d):
        self.special("cuid", d)

    def laneid(self, d):
        self.special("laneid", d)

    def text(self) -> str:
        return ""


class _Backend(NeutralBackend):
    name = "test"

    def emitter(self):
        return _Recorder()


def neutral_run(body: list, env: dict, fields: dict) -> list:
    """The records one lane saves running the neutral operations the backend writes for `body`."""
    emitter = _Recorder()
    _Backend().emit_items(emitter, loop_tree(body))
    state = _Lane({("%" + k): v for k, v in env.items()}, fields)
    saved = []
    for event in emitter.events:
        if event[0] == "op":
            state.op(event[1])
        elif event[0] == "special":
            state.set(event[2], SPECIALS[event[1]])
        else:
            saved += state.save(event[1], emitter.named)
    return saved


class _Lane:
    """One lane's registers of the neutral operations: a Val's value (an int of its words), a Pred's (a bool)."""

    def __init__(self, regs: dict, fields: dict):
        self.regs, self.fields = regs, fields

    def get(self, x):
        if type(x) is int:
            return x
        if x is ACTIVE:
            return True
        if type(x) is Pred:
            return self.regs.get(x.role, False)
        whole = self.fields[x.role] if x.role in self.fields else self.regs.get(x.role, 0)
        return (whole >> 32 * x.part) & 0xFFFFFFFF if x.part is not None else whole & ((1 << 32 * x.words) - 1)

    def set(self, x, value) -> None:
        if type(x) is Pred:
            self.regs[x.role] = bool(value)
        elif x.part is not None:
            old = self.regs.get(x.role, 0) & ~(0xFFFFFFFF << 32 * x.part)
            self.regs[x.role] = old | (value & 0xFFFFFFFF) << 32 * x.part
        else:
            self.regs[x.role] = value & ((1 << 32 * x.words) - 1)

    def op(self, op) -> None:
        name, d, *args = op
        v = [self.get(a) if type(a) is not str else a for a in args if a is not None]
        if name == "cmp":
            return self.set(d, COMPARE[v[0]](v[1] & ((1 << 64) - 1), v[2] & ((1 << 64) - 1)))
        result = {"mov": lambda: v[0], "add": lambda: v[0] + v[1], "sub": lambda: v[0] - v[1], "mul": lambda: v[0] * v[1],
                  "shl": lambda: v[0] << v[1] if v[1] < 64 else 0, "shr": lambda: v[0] >> v[1], "and": lambda: v[0] & v[1],
                  "or": lambda: v[0] | v[1], "xor": lambda: v[0] ^ v[1], "not": lambda: ~v[0],
                  "select": lambda: v[1] if v[0] else v[2], "pand": lambda: v[0] and v[1], "por": lambda: v[0] or v[1],
                  "pandn": lambda: v[0] and not v[1]}[name]()
        self.set(d, result)

    def save(self, line: str, named: dict) -> list:
        m = re.fullmatch(r"(?:@(#\d+) )?SAVE \[ (\w+) \] \{(.*)\}", line)
        guard, map_name, values = m.group(1), m.group(2), [named[t] for t in m.group(3).split(", ")]
        if guard is not None and not self.get(named[guard]):
            return []
        return [(map_name, tuple(self.get(v) for v in values))]


def check_program(text: str, seed: int) -> None:
    try:
        module = compile_to_ir(text, "gen.py")
    except DslError:
        return  # refused programs are test_language_fuzz's
    rng = random.Random(seed)
    for probe in module.probes:
        regs = {r.name: r for ins in probe.body for r in ins.regs()} | dict(module.registers)
        env = {name: rng.random() < 0.5 if r.type == PRED else rng.getrandbits(BITS[r.type]) for name, r in regs.items()}
        fields = {f: rng.getrandbits(32 if f == "BYTES" else 64) for f in ("ADDR", "BYTES", "OUT", "IN1", "IN2", "IN3")}
        ir_fields = {name: value for name, value in fields.items()}
        for ins in probe.body:  # a field read as u32 is its low word
            for src in ins.srcs:
                if isinstance(src, Field) and src.type != U64:
                    ir_fields[src.name] = fields[src.name] & 0xFFFFFFFF
        expected = ir_run(probe.body, dict(env), ir_fields)
        try:
            got = neutral_run(probe.body, dict(env), fields)
        except DslError as e:  # division by what is not a constant power of two: refused, located
            assert "power of two" in str(e)
            continue
        assert got == expected, f"probe {probe.name}\n{text}"


def test_every_operation_computes_what_the_ir_computes():
    for seed in range(20):
        check_program(EVERY_DSL_OPERATION, seed)


@FAST
@given(programs())
def test_generated_programs_compute_what_the_ir_computes(text):
    check_program(text, len(text))


def test_the_interpreters_tell_a_wrong_lowering():
    """The check can fail: a backend that swaps select's operands (selp's a and b) is caught."""
    original = NeutralEmitter.compute

    def swapped(self, ins, d):
        if ins.op == "selp":
            ins = attrs.evolve(ins, srcs=(ins.srcs[1], ins.srcs[0], ins.srcs[2]))
        return original(self, ins, d)

    source = EVERY_DSL_OPERATION.replace("rec.save(n >> 2, nl.laneid())", "rec.save(n if m < 3 else k, m)")
    NeutralEmitter.compute = swapped
    try:
        failures = 0
        for seed in range(10):
            try:
                check_program(source, seed)
            except AssertionError:
                failures += 1
        assert failures
    finally:
        NeutralEmitter.compute = original
