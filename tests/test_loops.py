"""Bounded loops in probes (issue 28): the DSL's `for`/`while`, the verifier's loop rule, the engine's splicing.

Accepted loops instrument into PTX that ptxas assembles for sm_80 and sm_90 (and GCN that
llvm-mc-19 assembles); what they compute is checked by running the emitted PTX snippet in a
small interpreter written here (`run_snippet`), independent of the compiler and the verifier;
hostile loops are refused through the real CLI with their line, a non-zero exit and no traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomlkit
from hypothesis import given, settings, strategies as st

from neutrino.isa.ptx import ir, parse_statements
from neutrino.language import compile_source
from neutrino.language.loops import UNROLL_MAX_TRIPS
from neutrino.llvm_mc import find_llvm_mc
from neutrino.passes.probe_loops import MAX_PATH_LENGTH, MAX_TRIP_COUNT, analyse

ROOT = Path(__file__).resolve().parents[1]
PTXAS = shutil.which("ptxas")
KERNELS = {"sm_80": ROOT / "tests/data/ptx_features/calls.sm80.ptx", "sm_90": ROOT / "tests/data/ptx_features/calls.sm90.ptx"}
GCN_KERNEL = ROOT / "tests/data/gcn/vadd.gfx90a.s"
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not on PATH")
needs_mc = pytest.mark.skipif(find_llvm_mc() is None, reason="llvm-mc-19 not installed (apt-get install llvm-19)")

DSL_HEAD = "from neutrino import probe, Map\nimport neutrino.language as nl\n\n"


def dsl(body: str) -> str:
    return DSL_HEAD + textwrap.dedent(body).lstrip("\n")


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "neutrino", *args], capture_output=True, text=True, env=env, timeout=300)


# ---------------------------------------------------------------- a PTX snippet interpreter (for semantics)

_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) else v


def run_snippet(text: str, max_steps: int = 200_000) -> tuple[list[tuple], int]:
    """Run the integer subset the DSL emits (mov add sub mul.lo cvt setp selp and/or/not.pred bra SAVE) in one lane.

    Returns (the SAVEd records, instructions executed); raises on anything else."""
    statements = [s for s in parse_statements(text) if isinstance(s, (ir.Instruction, ir.Label))]
    labels = {s.name: i for i, s in enumerate(statements) if isinstance(s, ir.Label)}
    regs: dict[str, int] = {}
    saves, steps, pc = [], 0, 0

    def val(op, bits=64):
        if isinstance(op, ir.Immediate):
            return op.value & ((1 << bits) - 1)
        return regs[op.name] & ((1 << bits) - 1)

    while pc < len(statements):
        s = statements[pc]
        pc += 1
        if isinstance(s, ir.Label):
            continue
        steps += 1
        assert steps <= max_steps, "the snippet does not stop"
        if s.guard is not None and bool(regs[s.guard.register.name]) == s.guard.negated:
            continue
        base, types, ops = s.opcode.base, s.opcode.types, s.operands
        if base == "SAVE":
            saves.append((ops[0].base.name, tuple(val(o) for o in ops[1].items)))
            continue
        if base == "bra":
            pc = labels[ops[0].name]
            continue
        bits = int(types[-1][1:]) if types and types[-1] != "pred" else 1
        mask = (1 << bits) - 1
        if s.opcode.text in ("and.pred", "or.pred"):
            a, b = val(ops[1]), val(ops[2])
            regs[ops[0].name] = (a and b) if base == "and" else (a or b)
        elif s.opcode.text == "not.pred":
            regs[ops[0].name] = int(not val(ops[1]))
        elif base == "mov" or base == "cvt":
            regs[ops[0].name] = val(ops[1], bits)
        elif base in ("add", "sub", "mul"):
            a, b = val(ops[1], bits), val(ops[2], bits)
            regs[ops[0].name] = {"add": a + b, "sub": a - b, "mul": a * b}[base] & mask
        elif base == "setp":
            a, b = val(ops[1], bits), val(ops[2], bits)
            if types[-1].startswith("s"):
                a, b = _signed(a, bits), _signed(b, bits)
            regs[ops[0].name] = int(_CMP[s.opcode.modifiers[0]](a, b))
        elif base == "selp":
            regs[ops[0].name] = val(ops[1], bits) if regs[ops[3].name] else val(ops[2], bits)
        elif base in ("rem", "div"):
            a, b = val(ops[1], bits), val(ops[2], bits)
            regs[ops[0].name] = a % b if base == "rem" else a // b
        else:
            raise AssertionError(f"the interpreter does not know {s.opcode}")
    return saves, steps


def snippet_of(toml_text: str, probe: str) -> str:
    table = tomlkit.parse(toml_text).unwrap()["probe"][probe]
    return table.get("before", table.get("after"))


# ---------------------------------------------------------------- DSL: semantics

SUMS = dsl('''
    @Map(level="thread", type="array", cap=1)
    class out:
        a: nl.u64
        b: nl.u64
        c: nl.u64
        d: nl.u64
        e: nl.u64
        f: nl.u64

    @probe(pos="kernel", level="thread", after=True)
    def sums():
        a: nl.u64 = 0
        for i in range(100):          # a loop (more than 8 trips)
            a += i * i
        b: nl.u64 = 0
        for k in range(1, 4):         # unrolled: k is a constant in each copy
            b += k << 4
        c: nl.u64 = 0
        j: nl.u32 = 0
        while j < 40:                 # a counted while: 20 trips
            c += j
            if j % 4 == 0:
                c += 1000
            j += 2
        d: nl.u64 = 0
        for x in range(30, 0, -3):    # counting down, 10 trips
            for y in range(12):       # nested: 120 trips of the body
                d += x * y + 1
        e: nl.u64 = 0
        for w in range(4294967290, 4294967300):  # a u64 loop variable
            e += w
        f: nl.u64 = 0
        n: nl.u32 = 50
        while n >= 5:
            f += n
            n -= 5
        out.save(a, b, c, d, e, f)
''')


def sums_expected() -> tuple:
    a = sum(i * i for i in range(100))
    b = sum(k << 4 for k in range(1, 4))
    c = sum(j + (1000 if j % 4 == 0 else 0) for j in range(0, 40, 2))
    d = sum(x * y + 1 for x in range(30, 0, -3) for y in range(12))
    e = sum(range(4294967290, 4294967300))
    f = sum(range(50, 4, -5))
    return a, b, c, d, e, f


def test_dsl_loops_compute_what_python_computes():
    text = compile_source(SUMS, "sums.py")
    snippet = snippet_of(text, "sums")
    saves, steps = run_snippet(snippet)
    assert saves == [("out", sums_expected())]
    # the long loops are loops, the 3-trip one is unrolled: three folded adds of 16, 32, 48
    assert snippet.count("bra.uni") == 6
    assert all(f"add.u64 %b, %b, {v};" in snippet for v in (16, 32, 48))
    # the verifier proves the same trip counts and bounds the path by what actually ran
    analysis = analyse(parse_statements(snippet))
    assert not analysis.problems
    assert sorted(loop.trips for loop in analysis.loops) == [10, 10, 10, 12, 20, 100]
    assert steps <= analysis.path_length <= MAX_PATH_LENGTH


@pytest.mark.parametrize("trips", [UNROLL_MAX_TRIPS, UNROLL_MAX_TRIPS + 1])
def test_unroll_threshold(trips):
    text = compile_source(dsl(f'''
        @Map(level="thread", type="sum")
        class acc:
            t: nl.u64

        @probe(pos="kernel", level="thread", after=True)
        def p():
            t: nl.u64 = 5
            for i in range({trips}):
                t += i + 7
            acc.add(t)
    '''), "u.py")
    snippet = snippet_of(text, "p")
    assert ("bra.uni" in snippet) == (trips > UNROLL_MAX_TRIPS)
    assert run_snippet(snippet)[0] == [("acc", (5 + sum(i + 7 for i in range(trips)),))]


def test_zero_trip_loops_emit_nothing_but_are_checked():
    text = compile_source(dsl('''
        @Map(level="thread", type="sum")
        class acc:
            t: nl.u64

        @probe(pos="kernel", level="thread", after=True)
        def p():
            t: nl.u64 = 1
            for i in range(5, 5):
                t += 100
            j: nl.u32 = 9
            while j < 3:
                j += 1
            acc.add(t)
    '''), "z.py")
    assert run_snippet(snippet_of(text, "p"))[0] == [("acc", (1,))]
    with pytest.raises(Exception, match="undefined variable 'nope'"):
        compile_source(dsl('''
            @probe(pos="kernel", level="thread")
            def p():
                for i in range(0):
                    x = nope
        '''), "z.py")


# ---------------------------------------------------------------- TOML: the verifier's trip count against a run

@settings(max_examples=150, deadline=None)
@given(init=st.integers(-40, 40), step=st.integers(-6, 6), bound=st.integers(-40, 40),
       cmp=st.sampled_from(sorted(_CMP)), ty=st.sampled_from(["u32", "s32", "u64", "s64"]),
       update_first=st.booleans(), negated=st.booleans())
def test_verifier_trip_count_is_the_run(init, step, bound, cmp, ty, update_first, negated):
    bits = int(ty[1:])
    update = f"add.{ty} %c, %c, {step};"
    compare = f"setp.{cmp}.{ty} %p, %c, {bound};"
    body = [update, compare] if update_first else [compare, update]
    text = (f".reg .b{bits} %c;\n.reg .b64 %t;\n.reg .pred %p;\nmov.u64 %t, 0;\nmov.{ty} %c, {init};\nL:\n"
            "add.u64 %t, %t, 1;\n" + "\n".join(body) + f"\n@{'!' if negated else ''}%p bra L;\nSAVE [ m ] {{%t}};\n")
    analysis = analyse(parse_statements(text))
    try:  # 4 instructions per trip: a run of more than MAX_TRIP_COUNT trips is cut short
        saves, _ = run_snippet(text, max_steps=4 * MAX_TRIP_COUNT + 3)
    except AssertionError:
        saves = None
    if saves is not None:
        assert not analysis.problems and analysis.loops[0].trips == saves[0][1][0]
    else:
        assert "trip count not bounded" in analysis.problems[0].message


# ---------------------------------------------------------------- accepted loops assemble

TOML_LOOPS = '''
[map.recs]
level = "warp"
cap = 4
fields = ["addr:u64", "i:u32", "k:u32"]

[map.acc]
type = "sum"
level = "thread"
fields = ["total:u64"]

[probe.walk]
position = "ld.global:st.global"
level = "warp"
after = """
.reg .b32 %i, %j, %k;
.reg .b64 %a;
.reg .pred %go, %in;
mov.u32 %i, 0;
OUTER:
  mov.u32 %j, 3;
  INNER:
    mul.wide.u32 %a, %j, 4;
    add.u64 %a, %a, ADDR;
    add.u32 %k, %i, %j;
    sub.u32 %j, %j, 1;
    setp.gt.s32 %in, %j, 0;
  @%in bra INNER;
  SAVE [ recs ] {%a, %i, %k};
  add.u32 %i, %i, 2;
  setp.lt.u32 %go, %i, 8;
@%go bra.uni OUTER;
"""

[probe.total]
position = "kernel"
level = "thread"
after = """
.reg .b32 %c;
.reg .b64 %t;
.reg .pred %p;
mov.u64 %t, 0;
mov.u32 %c, 10;
LOOP:
add.u64 %t, %t, 3;
sub.u32 %c, %c, 1;
setp.ne.u32 %p, %c, 0;
@%p bra.uni LOOP;
SAVE [ acc ] {%t};
"""
'''


def _ptxas(path: Path, arch: str) -> None:
    proc = subprocess.run([PTXAS, f"-arch={arch}", "-c", str(path), "-o", str(path.with_suffix(".o"))], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@needs_ptxas
@pytest.mark.parametrize("arch", sorted(KERNELS))
def test_toml_loops_instrument_into_ptx_ptxas_accepts(tmp_path, arch):
    probe = tmp_path / "loops.toml"
    probe.write_text(TOML_LOOPS)
    out = tmp_path / "out.ptx"
    proc = cli("instrument", str(KERNELS[arch]), "-p", str(probe), "-o", str(out), "--check")
    assert proc.returncode == 0, proc.stderr
    _ptxas(out, arch)
    text = out.read_text()
    # per site, its own labels; the loop control is not predicated by the site (uniform branch); the body's register
    # arithmetic is not either (only warp-level code reads it: resolve.leader_free), its SAVE's stores are
    labels = re.findall(r"^(%nt\w*_L_\d+_\d+):", text, re.M)
    assert len(labels) == len(set(labels)) >= 4
    assert re.search(r"^\s*setp\.gt\.s32\s+%nt\w*_p_in, %nt\w*_p_j, 0;", text, re.M)
    assert re.search(r"^\s*mul\.wide\.u32\s+%nt\w*_p_a, %nt\w*_p_j, 4;", text, re.M)
    assert not re.search(r"^\s*@\S+\s+mul\.wide\.u32\s+%nt\w*_p_a", text, re.M)
    assert re.search(r"^\s*and\.pred\s+%nt\w*_ok_recs, %nt\w*_ok_recs, %nt\w*_lead_warp;", text, re.M)
    assert re.search(r"^\s*@%nt\w*_p_go bra\.uni\s+%nt\w*_L_\d+_0;", text, re.M)


@needs_ptxas
@pytest.mark.parametrize("arch", sorted(KERNELS))
def test_dsl_loops_instrument_into_ptx_ptxas_accepts(tmp_path, arch):
    probe = tmp_path / "sums.py"
    probe.write_text(SUMS)
    out = tmp_path / "out.ptx"
    proc = cli("instrument", str(KERNELS[arch]), "-p", str(probe), "-o", str(out), "--check")
    assert proc.returncode == 0, proc.stderr
    _ptxas(out, arch)
    assert out.read_text().count("bra.uni") >= 5


def test_dsl_loops_with_count_maps_and_conditions_instrument(tmp_path):
    """A loop under `if`, saving into a cap="dynamic" map: the counting copy gets the same loop."""
    probe = tmp_path / "cnt.py"
    probe.write_text(dsl('''
        @Map(level="warp", type="array", cap="dynamic")
        class rec:
            i: nl.u32
            a: nl.u64

        @probe(pos="ld.global", level="warp", after=True)
        def p():
            if nl.laneid() < 16:
                for i in range(0, 40, 3):
                    if i % 2 == 0:
                        rec.save(i, nl.addr + i)
    '''))
    out = tmp_path / "out.ptx"
    proc = cli("instrument", str(KERNELS["sm_90"]), "-p", str(probe), "-o", str(out), *(["--check"] if PTXAS else []))
    assert proc.returncode == 0, proc.stderr
    assert "__nt_count" in out.read_text() and out.read_text().count("bra.uni") >= 2


@needs_mc
def test_dsl_loops_compile_to_gcn_llvm_mc_accepts(tmp_path):
    probe = tmp_path / "sums.py"
    probe.write_text(SUMS)
    out = tmp_path / "out.s"
    proc = cli("instrument", str(GCN_KERNEL), "-p", str(probe), "-o", str(out), "--check")
    assert proc.returncode == 0, proc.stderr
    assert "llvm-mc: ok" in proc.stderr + proc.stdout


def test_gcn_backend_unrolls_every_trip():
    text = compile_source(SUMS, "sums.py", backend="gcn")
    snippet = snippet_of(text, "sums")
    assert "s_cbranch" not in snippet and "s_branch" not in snippet
    # `j += 2` runs once per trip of the 20-trip while; the 100-trip loop steps its u32 variable 100 times
    assert snippet.count("v_add_u32_e64 %j, %j, 2") == 20
    assert snippet.count("v_add_u32_e64 %_r0, %_r0, 1\n") == 100  # %_r0: the first for's variable
    # the backend's temporaries are reused from trip to trip: a few, not one per trip
    assert len(set(re.findall(r"%_gcn_v32_\d+", snippet))) < 30


# ---------------------------------------------------------------- path length: the limit, exactly

@pytest.mark.parametrize("trips, adds", [(1023, 1), (600, 4)])
def test_path_length_bound(trips, adds):
    body = "add.u64 %t, %t, 1;\n" * adds
    text = (f".reg .b32 %c;\n.reg .b64 %t;\n.reg .pred %p;\nmov.u64 %t, 0;\nmov.u32 %c, {trips};\nL:\n{body}"
            "sub.u32 %c, %c, 1;\nsetp.ne.u32 %p, %c, 0;\n@%p bra.uni L;\n")
    length = 2 + trips * (adds + 3)
    analysis = analyse(parse_statements(text))
    assert analysis.path_length == length if length <= MAX_PATH_LENGTH else True
    if length <= MAX_PATH_LENGTH:
        assert not analysis.problems
    else:
        assert analysis.problems[0].message.startswith(f"path too long: one run of this probe executes up to {length} instructions")


# ---------------------------------------------------------------- hostile loops, through the CLI

TOML_HEAD = '''[map.acc]
type = "sum"
level = "thread"
fields = ["total:u64"]

[probe.p]
position = "kernel"
level = "thread"
after = """
.reg .b32 %c, %d, %e, %f, %n;
.reg .b64 %t;
.reg .pred %p, %q, %r, %s;
mov.u64 %t, 0;
'''
NESTED = "".join(f"mov.u32 %{r}, 2;\nL{r}:\n" for r in "cdef") + "add.u64 %t, %t, 1;\n" + "".join(
    f"sub.u32 %{r}, %{r}, 1;\nsetp.ne.u32 %{q}, %{r}, 0;\n@%{q} bra L{r};\n" for r, q in zip("fedc", "srqp"))
# (name, loop text after the head, line of the refusal (file line), message fragment)
TOML_HOSTILE = [
    ("unconditional", "mov.u32 %c, 4;\nL:\nadd.u64 %t, %t, 1;\nbra.uni L;\n", 17, "unbounded loop: the branch back to L is unconditional"),
    ("data_dependent", "mov.u32 %n, %laneid;\nmov.u32 %c, 0;\nL:\nadd.u32 %c, %c, 1;\nsetp.lt.u32 %p, %c, %n;\n@%p bra L;\n", 18,
     "loop L: data-dependent bound: setp.lt.u32 compares %c with %n"),
    ("counter_written", "mov.u32 %c, 0;\nL:\nadd.u32 %c, %c, 1;\nmov.u32 %c, 0;\nsetp.lt.u32 %p, %c, 8;\n@%p bra L;\n", 17,
     "loop L: counter %c must be written exactly once in the loop"),
    ("guarded_update", "mov.u32 %c, 0;\nsetp.eq.u32 %q, %c, 0;\nL:\n@%q add.u32 %c, %c, 1;\nsetp.lt.u32 %p, %c, 8;\n@%p bra L;\n", 17,
     "loop L: counter %c must be updated unguarded"),
    ("no_init", "L:\nadd.u32 %c, %c, 1;\nsetp.lt.u32 %p, %c, 8;\n@%p bra L;\n", 14, "loop L: counter %c is not set to a constant before the loop"),
    ("never_stops", "mov.u32 %c, 1;\nL:\nadd.u32 %c, %c, 2;\nsetp.ne.u32 %p, %c, 0;\n@%p bra L;\n", 18,
     "loop L: trip count not bounded: counter %c from 1 by +2 while ne 0 runs more than 1024 trips"),
    ("forward", "setp.eq.u32 %q, %t, 0;\n@%q bra SKIP;\nadd.u64 %t, %t, 1;\nSKIP:\n", 15, "forward branch to SKIP"),
    ("nested_too_deep", NESTED, 21, "loop Lf is nested 4 deep; the limit is 3"),
    ("too_long", "mov.u32 %c, 1000;\nL:\nmov.u32 %d, 10;\nM:\nadd.u64 %t, %t, 1;\nsub.u32 %d, %d, 1;\nsetp.ne.u32 %q, %d, 0;\n"
     "@%q bra M;\nsub.u32 %c, %c, 1;\nsetp.ne.u32 %p, %c, 0;\n@%p bra L;\n", 15,
     "path too long: one run of this probe executes up to 44003 instructions with its loops (trip counts L: 1000, M: 10); the limit is 4096"),
]


@pytest.mark.parametrize("name, loop, line, message", TOML_HOSTILE, ids=[c[0] for c in TOML_HOSTILE])
def test_hostile_toml_loops_refused_through_the_cli(tmp_path, name, loop, line, message):
    probe = tmp_path / f"{name}.toml"
    probe.write_text(TOML_HEAD + loop + 'SAVE [ acc ] {%t};\n"""\n')
    proc = cli("instrument", str(KERNELS["sm_80"]), "-p", str(probe), "-o", str(tmp_path / "o.ptx"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(rf"{re.escape(str(probe))}:{line}:\d+: error: \[probe p\] {re.escape(message)}", proc.stderr), proc.stderr
    assert not (tmp_path / "o.ptx").exists()


def test_compact_save_in_a_loop_refused(tmp_path):
    probe = tmp_path / "compact.toml"
    probe.write_text('[p]\nposition = "kernel"\ndatamodel = "thread:8"\nafter = """\n.reg .b32 %c;\n.reg .pred %p;\n'
                     'mov.u32 %c, 3;\nL:\nSAVE.u32 {%c};\nsub.u32 %c, %c, 1;\nsetp.ne.u32 %p, %c, 0;\n@%p bra L;\n"""\n')
    proc = cli("instrument", str(KERNELS["sm_80"]), "-p", str(probe))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{probe}:9:1: error: [probe p] loop L: SAVE.u32 builds one record per probe run" in proc.stderr


DSL_PROBE_HEAD = '''
@Map(level="thread", type="sum")
class acc:
    t: nl.u64

@probe(pos="kernel", level="thread", after=True)
def p():
    t: nl.u64 = 0
'''
# (name, body lines (indented 4), line of the refusal relative to the first body line, message fragment)
DSL_HOSTILE = [
    ("unbounded", "i: nl.u32 = 0\nwhile i < 10:\n    t += 1", 1, "unbounded loop: the counter 'i' never changes in the loop body"),
    ("data_dependent", "n: nl.u32 = nl.laneid()\nfor i in range(n):\n    t += 1", 1,
     "loop bound not a compile-time constant: 'n' is not an integer constant"),
    ("data_dependent_while", "n: nl.u32 = nl.laneid()\ni: nl.u32 = 0\nwhile i < n:\n    i += 1", 2,
     "loop bound not a compile-time constant: 'n' is not an integer constant"),
    ("counter_written", "i: nl.u32 = 0\nwhile i < 100:\n    i += 1\n    if t > 3:\n        i -= 1", 4,
     "counter written in the loop body: 'i' must change exactly once per trip"),
    ("counter_not_constant", "i: nl.u32 = nl.laneid()\nwhile i < 100:\n    i += 1", 1, "counter 'i' is not set to a constant before the loop"),
    ("loop_variable_written", "for i in range(10):\n    i = 3", 1, "loop variable 'i' is written in the loop body"),
    ("never_stops", "i: nl.u32 = 5\nwhile i != 0:\n    i -= 2", 1,
     "trip count not bounded: 'i' from 5 by -2 while i != 0 makes more than 1024 trips"),
    ("too_many_trips", "for i in range(5000):\n    t += i", 0, "trip count 5000 exceeds the limit of 1024 trips per loop"),
    ("nested_too_deep", "for a in range(2):\n    for b in range(2):\n        for c in range(2):\n            for d in range(2):\n"
     "                t += 1", 3, "loops nested 4 deep; the limit is 3"),
    ("too_long", "for a in range(1000):\n    for b in range(100):\n        t += b", 0,
     "path too long: with this loop one run of the probe executes up to"),
    ("short_save_in_loop", "for a in range(3):\n    nl.save(t)", 1, "nl.save(...) builds one record per probe run"),
    ("not_range", "for a in acc:\n    pass", 0, "a probe loops only over range() of constants"),
]


@pytest.mark.parametrize("name, body, offset, message", DSL_HOSTILE, ids=[c[0] for c in DSL_HOSTILE])
def test_hostile_dsl_loops_refused_through_the_cli(tmp_path, name, body, offset, message):
    text = dsl(DSL_PROBE_HEAD) + textwrap.indent(body, "    ") + "\n    acc.add(t)\n"
    probe = tmp_path / f"{name}.py"
    probe.write_text(text)
    first = text.splitlines().index("    t: nl.u64 = 0") + 2  # 1-based line of the first body line
    proc = cli("instrument", str(KERNELS["sm_80"]), "-p", str(probe), "-o", str(tmp_path / "o.ptx"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(rf"{re.escape(str(probe))}:{first + offset}:\d+: error: \[probe p\] {re.escape(message)}", proc.stderr), proc.stderr


# ---------------------------------------------------------------- phase 2: a probe branch must be a loop's, to our label

def test_phase_two_refuses_a_probe_branch_to_a_kernel_label():
    from neutrino.engine import instrument_module
    from neutrino.errors import InstrumentError
    from neutrino.isa.ptx import parse_module
    from neutrino.passes.verify import PtxVerifier as Verifier
    from neutrino.probefile import parse_probes

    probes = parse_probes(TOML_LOOPS, "loops.toml")
    module = parse_module(KERNELS["sm_80"].read_text())
    ctx = instrument_module(module, probes)
    name, state = next(iter(ctx.kernels.items()))
    Verifier.check_kernel(name, state)  # as instrumented: accepted
    body = state.function.body
    kernel_label = next(s.name for s in body if isinstance(s, ir.Label) and not s.name.startswith(state.prefix))
    branch = next(s for s in ir.instructions(body) if s.origin and s.origin.startswith("probe ") and s.opcode.base == "bra")
    branch.operands = (ir.Symbol(kernel_label),)
    with pytest.raises(InstrumentError, match="which is not the backward branch of a bounded loop"):
        Verifier.check_kernel(name, state)
    branch.operands = (ir.Symbol(f"{state.prefix}L_0_0"),)
    branch.guard = None  # unconditional: refused too
    with pytest.raises(InstrumentError, match="not the backward branch of a bounded loop"):
        Verifier.check_kernel(name, state)


# ---------------------------------------------------------------- loops at sites inside { } scopes and across a corpus

PARAM_LOOP = TOML_LOOPS.split("[probe.walk]")[0] + '''
[probe.params]
position = "ld.param:st.param"
level = "thread"
after = """
.reg .b32 %c;
.reg .b64 %t;
.reg .pred %p;
mov.u64 %t, 0;
mov.u32 %c, 10;
LOOP:
add.u64 %t, %t, 3;
sub.u32 %c, %c, 1;
setp.ne.u32 %p, %c, 0;
@%p bra.uni LOOP;
SAVE [ acc ] {%t};
"""
'''


@needs_ptxas
@pytest.mark.parametrize("arch", sorted(KERNELS))
def test_loops_at_sites_inside_call_scopes(tmp_path, arch):
    """st.param/ld.param sit in the `{ // callseq }` scopes: the loop's labels land there, and phase 2 finds them."""
    probe = tmp_path / "params.toml"
    probe.write_text(PARAM_LOOP)
    out = tmp_path / "out.ptx"
    proc = cli("instrument", str(KERNELS[arch]), "-p", str(probe), "-o", str(out), "--check")
    assert proc.returncode == 0, proc.stderr
    _ptxas(out, arch)


CORPUS = sorted((ROOT / "tests/data/corpus/nvcc").glob("*.ptx"))


@needs_ptxas
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_loops_across_the_nvcc_corpus(tmp_path, path):
    from neutrino.engine import instrument
    from neutrino.probefile import parse_probes

    result = instrument(path.read_text(), parse_probes(TOML_LOOPS, "loops.toml"), source=str(path))
    out = tmp_path / "out.ptx"
    out.write_text(result.ptx)
    assert result.ptx.count("bra.uni") >= 1
    _ptxas(out, "sm_80" if ".sm80." in path.name else "sm_90")


def test_ir_verify_checks_loop_markers():
    from neutrino.language import compile_to_ir
    from neutrino.language.ir import IRVerifyError, verify

    module = compile_to_ir(SUMS, "sums.py")
    body = next(p for p in module.probes if p.name == "sums").body
    assert str(next(i for i in body if i.op == "loop")).startswith("loop.u32 %_r")
    verify(module)
    last_end = max(i for i, ins in enumerate(body) if ins.op == "endloop")
    removed = body.pop(last_end)
    with pytest.raises(IRVerifyError, match="is not closed"):
        verify(module)
    body.insert(0, removed)
    with pytest.raises(IRVerifyError, match="endloop without its loop"):
        verify(module)
