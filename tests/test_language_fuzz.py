"""hypothesis: generated DSL programs compile, verify and assemble; anything else is a located DslError.

Quick by default; NEUTRINO_FUZZ=long runs many more examples.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import tomlkit
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from neutrino.language import DslError, compile_source

LONG = os.environ.get("NEUTRINO_FUZZ") == "long"
FAST = settings(max_examples=1000 if LONG else 80, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
SLOW = settings(max_examples=200 if LONG else 12, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

HEADER = "from neutrino import probe, Map\nimport neutrino.language as nl\n"
LOCALS = ["a", "b", "c", "smid", "_x", "tid", "ADDR", "clock", "_r0"]  # includes names that need mangling
POSITIONS = ["kernel", "ld.global", "st.global", "ld.global:st.global", "bra"]
#: what a generated program may legitimately be refused for (constant folding finds these)
ACCEPTABLE = ("division by zero", "does not fit in", "path too long")


class _Gen:
    """Draws one program within the supported syntax."""

    def __init__(self, draw):
        self.draw = draw
        self.regs: dict[str, str] = {}
        self.locals: list[str] = []
        self.loop_vars: list[str] = []  # readable in the loop body, never assigned
        self.loops = 0

    def const(self):
        return str(self.draw(st.integers(0, 1000) | st.sampled_from([0, 1, 31, 255, 4096])))

    def leaf(self, probe):
        d = self.draw
        options = ["const", "helper"]
        if self.regs or self.locals:
            options += ["var", "var"]
        if probe["pos"] != "kernel":
            options.append("field")
        kind = d(st.sampled_from(options))
        if kind == "const":
            return self.const()
        if kind == "var":
            return d(st.sampled_from(sorted(self.regs) + self.locals + self.loop_vars))
        if kind == "helper":
            return d(st.sampled_from(["nl.clock()", "nl.time()", "nl.cuid()", "nl.smid()"]))
        fields = ["nl.addr", "nl.bytes", "nl.in1"] + (["nl.out"] if probe["when"] == "after" else [])
        return d(st.sampled_from(fields))

    def expr(self, probe, depth=0):
        d = self.draw
        if depth >= 3 or d(st.integers(0, 2)) == 0:
            return self.leaf(probe)
        kind = d(st.sampled_from(["bin", "bin", "bin", "shift", "unary", "conv", "ifexp"]))
        if kind == "bin":
            op = d(st.sampled_from(["+", "-", "*", "&", "|", "^", "/", "//", "%"]))
            right = self.expr(probe, depth + 1)
            if op in ("/", "//", "%"):
                right = f"({right} | 1)"  # never a constant zero
            return f"({self.expr(probe, depth + 1)} {op} {right})"
        if kind == "shift":
            return f"({self.expr(probe, depth + 1)} {d(st.sampled_from(['<<', '>>']))} {d(st.integers(0, 31))})"
        if kind == "unary":
            return f"{d(st.sampled_from(['-', '~', '+']))}{self.expr(probe, depth + 1)}"
        if kind == "conv":
            return f"nl.{d(st.sampled_from(['u32', 'u64']))}({self.expr(probe, depth + 1)})"
        return f"({self.expr(probe, depth + 1)} if {self.cond(probe)} else {self.expr(probe, depth + 1)})"

    def cond(self, probe, depth=0):
        d = self.draw
        kind = d(st.sampled_from(["cmp", "cmp", "cmp", "bool", "not", "truth"] if depth < 2 else ["cmp"]))
        if kind == "cmp":
            op = d(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
            return f"{self.expr(probe, 2)} {op} {self.expr(probe, 2)}"
        if kind == "bool":
            return f"({self.cond(probe, depth + 1)}) {d(st.sampled_from(['and', 'or']))} ({self.cond(probe, depth + 1)})"
        if kind == "not":
            return f"not ({self.cond(probe, depth + 1)})"
        return self.expr(probe, 2)

    def value_for(self, name, probe):
        e = self.expr(probe)
        return f"nl.u32({e})" if self.regs.get(name) == "u32" else e

    def statements(self, probe, indent, depth, out, mp):
        d = self.draw
        for _ in range(d(st.integers(1, 4))):
            kinds = ["assign", "assign", "aug"] + (["if"] if depth < 2 else []) + (["for", "while"] if depth == 0 else [])
            if mp and mp["level"] == probe["level"]:
                kinds.append("save")
            kind = d(st.sampled_from(kinds))
            pad = " " * indent
            if kind == "assign":
                name = d(st.sampled_from(LOCALS + sorted(self.regs)))
                out.append(f"{pad}{name} = {self.value_for(name, probe)}")
                if name not in self.regs and name not in self.locals:
                    self.locals.append(name)
            elif kind == "aug" and (self.regs or self.locals):
                name = d(st.sampled_from(sorted(self.regs) + self.locals))
                op = d(st.sampled_from(["+=", "-=", "*=", "&=", "|=", "^=", "<<=", ">>="]))
                rhs = str(d(st.integers(0, 31))) if op in ("<<=", ">>=") else self.value_for(name, probe)
                out.append(f"{pad}{name} {op} {rhs}")
            elif kind == "if":
                out.append(f"{pad}if {self.cond(probe)}:")
                self.statements(probe, indent + 4, depth + 1, out, mp)
                if d(st.booleans()):
                    out.append(f"{pad}else:")
                    self.statements(probe, indent + 4, depth + 1, out, mp)
            elif kind in ("for", "while"):  # bounded loops: unrolled (<= 8 trips) or loops
                self.loops += 1
                trips = d(st.sampled_from([0, 2, 9, 16]))
                var = f"i{self.loops}"
                if kind == "for":
                    out.append(f"{pad}for {var} in range({trips}):")
                    self.loop_vars.append(var)
                else:
                    out += [f"{pad}{var} = 0", f"{pad}while {var} < {trips}:", f"{pad}    {var} += 1"]
                self.statements(probe, indent + 4, depth + 1, out, mp)
                if kind == "for":
                    self.loop_vars.remove(var)
            elif kind == "save":
                args = ", ".join(self.expr(probe) for _ in mp["fields"])
                out.append(f"{pad}m.save({args})")
            else:
                out.append(f"{pad}pass")

    def program(self) -> str:
        d = self.draw
        out = [HEADER]
        for i in range(d(st.integers(0, 2))):
            ty = d(st.sampled_from(["u32", "u64"]))
            self.regs[f"g{i}"] = ty
            out.append(f"g{i}: nl.{ty} = {d(st.integers(0, 1000))}")
        mp = None
        if d(st.booleans()):
            fields = d(st.lists(st.sampled_from(["u32", "u64"]), min_size=1, max_size=3))
            mp = {"level": d(st.sampled_from(["thread", "warp", "block"])), "fields": fields}
            cap = d(st.sampled_from(["1", "4", '"dynamic"']))
            out.append(f'@Map(level="{mp["level"]}", type="array", cap={cap})\nclass m:')
            out += [f"    f{j}: nl.{t}" for j, t in enumerate(fields)]
        for i in range(d(st.integers(1, 3))):
            level = mp["level"] if mp and d(st.booleans()) else d(st.sampled_from(["thread", "warp", "block"]))
            probe = {"pos": d(st.sampled_from(POSITIONS)), "when": d(st.sampled_from(["before", "after"])), "level": level}
            out.append(f'@probe(pos="{probe["pos"]}", level="{level}", {probe["when"]}=True)')
            out.append(f"def p{i}():")
            body: list[str] = []
            self.statements(probe, 4, 0, body, mp)
            if d(st.booleans()):
                items = ", ".join(self.expr(probe) for _ in range(d(st.integers(1, 3))))
                body.append(f"    nl.save(({items},), dtype=nl.{d(st.sampled_from(['u32', 'u64']))})")
            out += body
        return "\n".join(out) + "\n"


@st.composite
def programs(draw):
    return _Gen(draw).program()


def compile_or_skip(text: str) -> str:
    try:
        return compile_source(text, "gen.py")
    except DslError as e:
        messages = [d.message for d in e.diagnostics]
        assert all(any(a in m for a in ACCEPTABLE) for m in messages), f"{e}\n--- program ---\n{text}"
        assume(False)


@FAST
@given(programs())
def test_generated_programs_compile(text):
    out = compile_or_skip(text)
    doc = tomlkit.parse(out).unwrap()
    assert doc["probe"] or True
    for p in doc["probe"].values():
        assert set(p) <= {"position", "level", "before", "after"}


HAVE_PTXAS = shutil.which("ptxas") is not None
KERNEL = Path(__file__).parent / "data" / "corpus" / "nvcc" / "vec.sm90.ptx"


@pytest.mark.skipif(not HAVE_PTXAS or not KERNEL.exists(), reason="needs ptxas and the corpus")
@SLOW
@given(programs())
def test_generated_programs_verify_instrument_and_assemble(text):
    """Through the engine: its verifier accepts the TOML, and the instrumented kernel assembles."""
    from neutrino.engine import instrument
    from neutrino.probefile import parse_probes

    out = compile_or_skip(text)
    probes = parse_probes(out, "gen.toml")
    result = instrument(KERNEL.read_text(), probes, source=str(KERNEL))
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "k.ptx"
        f.write_text(result.ptx)
        r = subprocess.run(["ptxas", "-arch=sm_90", str(f), "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n--- program ---\n" + text + "\n--- toml ---\n" + out


BAD_STATEMENTS = [
    "for i in range(a):\n        pass", "while a:\n        pass", "while a < 3:\n        pass",
    "for i in range(2000):\n        pass", "for i in x:\n        pass", "a = [1, 2]", "a = 1 < 2 < nl.clock()", "return 1",
    "a = nl.bogus()", "a = foo(1)", "a.y = 1", "a = 1.5", "a = 'str'", "import os", "a = lambda: 1",
    "del a", "a = 2 ** 3", "nl.save()", "a = (1, 2)", "assert a", "a, b = 1, 2",
    "a = b = 1", "m.save(1, 2, 3, 4, 5)", "nl.clock()", "a = {}",
    "a = not nl.clock()", "a = -1.0", "a = x[0]", "with a:\n        pass", "a = f'{1}'", "a = nl.u32(1, 2)",
    "a = nl.save(1)", "a = nl.clock(1)", "nope.save(1)", "a @= 1", "a = 1 if a in b else 2", "a = nl.u8(1)",
    "global a", "try:\n        pass\n    except Exception:\n        pass", "a: int = 1", "a = 1 <<",
]


@FAST
@given(programs(), st.sampled_from(BAD_STATEMENTS), st.data())
def test_unsupported_constructs_give_located_errors(text, bad, data):
    lines = text.splitlines()
    defs = [i for i, l in enumerate(lines) if l.startswith("def p")]
    at = data.draw(st.sampled_from(defs)) + 1
    lines.insert(at, "    " + bad)
    text = "\n".join(lines) + "\n"
    with pytest.raises(DslError) as info:
        compile_source(text, "bad.py")
    for d in info.value.diagnostics:
        assert d.location.file == "bad.py" and d.location.line > 0, str(info.value)
        assert "internal compiler error" not in d.message, str(info.value) + "\n" + text
    assert any(d.location.line == at + 1 for d in info.value.diagnostics) or len(info.value.diagnostics) >= 1


@FAST
@given(programs(), st.data())
def test_mutated_programs_never_raise_anything_else(text, data):
    """Delete a slice or replace a character: the result compiles or is a located DslError."""
    i = data.draw(st.integers(0, len(text) - 1))
    j = data.draw(st.integers(i, min(len(text), i + 12)))
    mutated = text[:i] + data.draw(st.sampled_from(["", "(", ":", " ", "x", "\n", "0", "nl.", "@"])) + text[j:]
    try:
        compile_source(mutated, "m.py")
    except DslError as e:
        assert "internal compiler error" not in str(e), str(e) + "\n--- program ---\n" + mutated


@FAST
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises_anything_else(text):
    try:
        compile_source(text, "t.py")
    except DslError as e:
        assert "internal compiler error" not in str(e), str(e)
