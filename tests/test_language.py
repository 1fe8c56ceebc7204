"""The probe language: frontend -> IR, IR -> PTX, TOML output, located errors, built-in tools."""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import tomlkit

import neutrino.language as nl
from neutrino.errors import DiagnosticError
from neutrino.language import DslError, compile_source, compile_to_ir
from neutrino.language.backend import Backend, PTXBackend
from neutrino.language.ir import Field, Imm, Instr, Reg, record_bytes

TOOLS_DIR = Path(nl.__file__).resolve().parent.parent / "tools"
TOOLS = ("block_sched", "gmem_bytes", "dmat", "tensorop", "program_progress", "gmem_bytes_thread", "tensorop_thread")

HEADER = "from neutrino import probe, Map\nimport neutrino.language as nl\n"


def src(body: str) -> str:
    return HEADER + textwrap.dedent(body).lstrip("\n")


def ir_lines(text: str, probe: str) -> list[str]:
    module = compile_to_ir(src(text), "t.py")
    p = next(p for p in module.probes if p.name == probe)
    return [str(i) for i in p.body]


def ptx_lines(text: str, probe: str) -> list[str]:
    doc = tomlkit.parse(compile_source(src(text), "t.py")).unwrap()
    table = doc["probe"][probe]
    snippet = table.get("before", table.get("after"))
    return [line for line in snippet.splitlines() if not line.startswith(".reg")]


def error_of(text: str, filename: str = "t.py") -> str:
    with pytest.raises(DslError) as info:
        compile_source(src(text), filename)
    return str(info.value)


# ---------------------------------------------------------------- issue 4 examples

EXPLICIT = src('''
    @Map(level="warp", type="array", size=16, cap=1)
    class block_sched:
        start: nl.u64
        elapsed: nl.u32
        cuid: nl.u32

    start: nl.u64 = 0          # registers shared by the probes of this file
    elapsed: nl.u64 = 0

    @probe(pos="kernel", level="warp", before=True)
    def thread_start():
        start = nl.clock()

    @probe(pos="kernel", level="warp")
    def thread_end():
        elapsed = nl.clock() - start
        block_sched.save(start, elapsed, nl.cuid())
''')

SHORT = '''import neutrino.language as nl
@nl.probe(pos="kernel", level="warp")              # before the kernel body
def block_start():
    gstart = nl.time()
@nl.probe(pos="kernel", after=True, level="warp", size=16)
def block_sched():
    gend = nl.time(); elapsed = gend - gstart
    nl.save(gstart, dtype=nl.u64)
    nl.save((elapsed, nl.smid()), dtype=nl.u32)     # auto-cast
'''


def test_explicit_form_toml():
    doc = tomlkit.parse(compile_source(EXPLICIT, "bs.py")).unwrap()
    assert doc["map"] == {"block_sched": {"level": "warp", "cap": 1,
                                          "fields": ["start:u64", "elapsed:u32", "cuid:u32"]}}
    assert list(doc["probe"]) == ["__init", "thread_start", "thread_end"]
    init = doc["probe"]["__init"]
    assert init == {"position": "kernel", "level": "thread", "before": init["before"]}
    assert init["before"].splitlines() == [".reg .b64 %start, %elapsed;", "mov.u64 %start, 0;", "mov.u64 %elapsed, 0;"]
    assert doc["probe"]["thread_start"] == {
        "position": "kernel", "level": "warp", "before": ".reg .b64 %start;\nmov.u64 %start, %clock64;"}
    end = doc["probe"]["thread_end"]
    assert set(end) == {"position", "level", "after"}
    assert end["after"].splitlines() == [
        ".reg .b64 %_d0, %elapsed, %start;",
        ".reg .b32 %_r0, %_r1;",
        "mov.u64 %_d0, %clock64;",
        "sub.u64 %elapsed, %_d0, %start;",
        "cvt.u32.u64 %_r0, %elapsed;",
        "mov.u32 %_r1, %smid;",
        "SAVE [ block_sched ] {%start, %_r0, %_r1};",
    ]


def test_short_form_implied_map():
    doc = tomlkit.parse(compile_source(SHORT, "short.py")).unwrap()
    assert doc["map"]["block_sched"] == {"level": "warp", "cap": 1, "fields": ["gstart:u64", "elapsed:u32", "smid:u32"]}
    assert "before" in doc["probe"]["block_start"] and "after" in doc["probe"]["block_sched"]
    assert "__init" not in doc["probe"]
    module = compile_to_ir(SHORT, "short.py")
    assert [str(i) for i in module.probes[1].body] == [
        "time %gend",
        "sub.u64 %elapsed, %gend, %gstart",
        "mov.u64 %_d0, %gstart",  # snapshot: nl.save takes the value at the call
        "cvt.u32.u64 %_r0, %elapsed",
        "cuid %_r1",
        "save block_sched, %_d0, %_r0, %_r1",
    ]


def test_runtime_markers_import_and_lint():
    """The probe file is ordinary Python: it imports, decorators are no-ops."""
    import neutrino.probefile  # noqa: F401 - the submodule must not shadow the decorator
    ns: dict = {}
    exec(compile(EXPLICIT, "bs.py", "exec"), ns)
    assert callable(ns["thread_end"]) and ns["block_sched"].__name__ == "block_sched"
    assert nl.u32(-1) == 0xFFFFFFFF
    from neutrino import Map, probe  # lazily exported by the package
    assert probe is nl.probe and Map is nl.Map
    with pytest.raises(RuntimeError, match="only has a meaning inside a probe body"):
        nl.clock()


# ---------------------------------------------------------------- frontend -> IR


def test_arithmetic_and_types():
    lines = ir_lines('''
        x: nl.u32 = 3
        @probe(pos="kernel")
        def p():
            a = nl.clock() * 3 + x
            b = a / 7 % 5
            c = -b
            d = ~c ^ (a << x) | (a >> 2) & 255
            x = nl.u32(d)
            x += 1
            x <<= 2
    ''', "p")
    assert lines == [
        "clock %_d0",
        "mul.u64 %_d1, %_d0, 3",
        "cvt.u64.u32 %_d2, %x",
        "add.u64 %a, %_d1, %_d2",
        "div.u64 %_d3, %a, 7",
        "rem.u64 %b, %_d3, 5",
        "neg.u64 %c, %b",
        "not.u64 %_d4, %c",
        "shl.u64 %_d5, %a, %x",
        "xor.u64 %_d6, %_d4, %_d5",
        "shr.u64 %_d7, %a, 2",
        "and.u64 %_d8, %_d7, 255",
        "or.u64 %d, %_d6, %_d8",
        "cvt.u32.u64 %x, %d",
        "add.u32 %x, %x, 1",
        "shl.u32 %x, %x, 2",
    ]


def test_constants_fold_and_module_constants():
    lines = ir_lines('''
        N = 1 << 4
        @probe(pos="kernel")
        def p():
            a = N * 2 - 1 + nl.cuid()
            b = -1 + a
    ''', "p")
    # a is u32 (cuid), constants take its type; -1 wraps in u32
    assert lines == ["cuid %_r0", "add.u32 %a, 31, %_r0", "add.u32 %b, 4294967295, %a"]


def test_widest_type_wins_across_probes():
    module = compile_to_ir(src('''
        @probe(pos="kernel")
        def p():
            v = nl.cuid()
        @probe(pos="kernel", after=True)
        def q():
            v = nl.clock()
    '''))
    assert str(module.probes[0].body[1]) == "cvt.u64.u32 %v, %_r0"
    assert str(module.probes[1].body[0]) == "clock %v"


def test_empty_probe_is_kept_as_a_comment():
    from neutrino.probefile import parse_probes

    text = compile_source(src('''
        @probe(pos="kernel")
        def p():
            if 1 > 2:
                x = 1
    '''))
    assert tomlkit.parse(text).unwrap()["probe"]["p"]["before"] == "// empty probe"
    assert [p.name for p in parse_probes(text, "t.toml").probes] == ["p"]


def test_if_else_predication():
    lines = ir_lines('''
        n: nl.u64 = 0
        @probe(pos="ld.global", level="thread", before=True)
        def p():
            n += 1
            if n % 64 == 0:
                k = nl.addr
            else:
                k = 0
            if n > 3 and not n == 9:
                if n < 100:
                    k = k + nl.bytes
    ''', "p")
    assert lines == [
        "add.u64 %n, %n, 1",
        "rem.u64 %_d0, %n, 64",
        "setp.eq.u64 %_p0, %_d0, 0",
        "@%_p0 mov.u64 %k, ADDR",
        "@!%_p0 mov.u64 %k, 0",
        "setp.gt.u64 %_p1, %n, 3",
        "setp.eq.u64 %_p2, %n, 9",
        "pnot %_p3, %_p2",
        "pand %_p4, %_p1, %_p3",
        "setp.lt.u64 %_p5, %n, 100",
        "pand %_p6, %_p4, %_p5",
        "@%_p6 cvt.u64.u32 %_d1, BYTES",
        "@%_p6 add.u64 %k, %k, %_d1",
    ]


def test_elif_chain_or_and_chained_comparison():
    lines = ir_lines('''
        @probe(pos="kernel")
        def p():
            a = nl.clock()
            if a < 5 or 10 < a <= 20:
                b = 1
            elif a == 7:
                b = nl.u32(0x1ffffffff)
            else:
                b = 3
    ''', "p")
    assert lines == [
        "clock %a",
        "setp.lt.u64 %_p0, %a, 5",
        "setp.lt.u64 %_p1, 10, %a",
        "setp.le.u64 %_p2, %a, 20",
        "pand %_p3, %_p1, %_p2",
        "por %_p4, %_p0, %_p3",
        "@%_p4 mov.u32 %b, 1",
        "setp.eq.u64 %_p5, %a, 7",
        "pnot %_p6, %_p4",
        "pand %_p7, %_p6, %_p5",
        "@%_p7 mov.u32 %b, 4294967295",  # an explicit conversion truncates
        "pnot %_p8, %_p5",
        "pand %_p9, %_p6, %_p8",  # the negation of %_p4 is computed once
        "@%_p9 mov.u32 %b, 3",
    ]


def test_conditional_expression_and_constant_condition():
    lines = ir_lines('''
        @probe(pos="kernel")
        def p():
            a = nl.clock()
            b = 1 if a >= 10 else 2
            if 1 < 2:
                c = 5
            else:
                c = 6
    ''', "p")
    assert lines == ["clock %a", "setp.ge.u64 %_p0, %a, 10", "selp.u64 %b, 1, 2, %_p0", "mov.u64 %c, 5"]


def test_guarded_save_and_fields():
    lines = ir_lines('''
        @Map(level="thread", type="array", size=16, cap="dynamic")
        class m:
            a: nl.u64
            b: nl.u32
        @probe(pos="ld.global", after=True)
        def p():
            if nl.in1 != 0:
                m.save(nl.out, 7)
    ''', "p")
    assert lines == [
        "setp.ne.u64 %_p0, IN1, 0",
        "@%_p0 mov.u64 %_d0, OUT",
        "@%_p0 mov.u32 %_r0, 7",
        "@%_p0 save m, %_d0, %_r0",
    ]
    doc = tomlkit.parse(compile_source(src('''
        @Map(level="thread", cap="dynamic")
        class m:
            a: nl.u64
        @probe(pos="ld.global", after=True)
        def p():
            m.save(nl.out)
    '''))).unwrap()
    assert doc["map"]["m"]["cap"] == "count"


def test_name_mangling_never_collides():
    lines = ir_lines('''
        @probe(pos="kernel")
        def p():
            smid = nl.cuid()
            _r0 = smid + 1
            tid = _r0
            ADDR = 1
    ''', "p")
    assert lines == ["cuid %_v_smid", "add.u32 %__r0, %_v_smid, 1", "mov.u32 %_v_tid, %__r0", "mov.u64 %_v_ADDR, 1"]


def test_default_placement():
    module = compile_to_ir(src('''
        @Map(level="thread")
        class m:
            a: nl.u64
        @probe(pos="kernel")
        def starts():
            t = nl.clock()
        @probe(pos="kernel")
        def ends():
            m.save(t)
        @probe(pos="ld.global")
        def reads_out():
            t = nl.out
        @probe(pos="ld.global", before=False)
        def explicit():
            t = 1
    '''))
    assert {p.name: p.when for p in module.probes} == {
        "starts": "before", "ends": "after", "reads_out": "after", "explicit": "after"}


def test_import_styles():
    text = textwrap.dedent('''
        import neutrino
        from neutrino.language import clock as clk, Map, u64
        from neutrino import language as L
        @Map(level="thread")
        class m:
            a: u64
        @neutrino.probe(pos="kernel", after=True)
        def p():
            m.save(clk() + L.time())
    ''')
    assert "SAVE [ m ]" in compile_source(text)


# ---------------------------------------------------------------- IR -> PTX


def test_ptx_backend_instruction_list():
    b = PTXBackend()
    x, y, p = Reg("x", "u64"), Reg("y", "u32"), Reg("_p0", "pred")
    from neutrino.language.ir import Guard
    body = [
        Instr("mul", "u64", x, (x, Imm(3, "u64"))),
        Instr("shl", "u32", y, (y, Imm(2, "u32"))),
        Instr("neg", "u64", x, (x,)),
        Instr("setp", "u64", p, (x, Imm(1 << 40, "u64")), cmp="lt"),
        Instr("cvt", "u32", y, (x,), src_type="u64", guard=Guard(p, negated=True)),
        Instr("mov", "u64", x, (Field("ADDR", "u64"),), guard=Guard(p)),
        Instr("time", "u64", x),
        Instr("pnot", "pred", p, (p,)),
        Instr("save", srcs=(x, y), map="m"),
    ]
    assert b.snippet(body).splitlines() == [
        ".reg .b64 %x;", ".reg .b32 %y;", ".reg .pred %_p0;",
        "mul.lo.u64 %x, %x, 3;",
        "shl.b32 %y, %y, 2;",
        "neg.s64 %x, %x;",
        "setp.lt.u64 %_p0, %x, 0x10000000000;",
        "@!%_p0 cvt.u32.u64 %y, %x;",
        "@%_p0 mov.u64 %x, ADDR;",
        "mov.u64 %x, %globaltimer;",
        "not.pred %_p0, %_p0;",
        "SAVE [ m ] {%x, %y};",
    ]


def test_backend_interface_is_abstract():
    with pytest.raises(TypeError):
        Backend()  # a target must implement snippet()

    class Echo(Backend):
        name = "echo"

        def snippet(self, body):
            return "\n".join(str(i) for i in body)

    module = compile_to_ir(EXPLICIT, "bs.py")
    from neutrino.language.toml_emit import emit_toml
    doc = tomlkit.parse(emit_toml(module, Echo())).unwrap()
    assert doc["probe"]["thread_start"]["before"] == "clock %start"


def test_record_layout():
    assert record_bytes([("a", "u32")]) == 4
    assert record_bytes([("a", "u32"), ("b", "u64")]) == 16
    assert record_bytes([("a", "u64"), ("b", "u32")]) == 16
    assert record_bytes([("a", "u32"), ("b", "u32"), ("c", "u32")]) == 12


# ---------------------------------------------------------------- TOML schema (spec/probe-toml.md, explicit form)

FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*:(u32|u64)$")
SAVE_RE = re.compile(r"SAVE \[ (\w+) \] \{([^}]*)\};")


def check_explicit_schema(text: str) -> dict:
    doc = tomlkit.parse(text).unwrap()
    assert set(doc) <= {"map", "probe", "description", "analyze_hook"}
    maps = doc.get("map", {})
    for name, m in maps.items():
        kind = m.get("type", "array")
        assert m["level"] in ("thread", "warp", "block")
        if kind == "hist":
            assert set(m) == {"type", "level", "buckets"}
            m["fields"] = ["value:u64"]  # what a SAVE into it gives
            continue
        assert set(m) <= {"level", "fields", "cap"} | ({"type"} if kind == "sum" else set())
        assert m["fields"] and all(FIELD_RE.match(f) for f in m["fields"])
        assert kind == "array" or all(f.endswith(":u64") for f in m["fields"])
        names = [f.split(":")[0] for f in m["fields"]]
        assert len(set(names)) == len(names)
        assert m.get("cap", 1) == "count" or (isinstance(m.get("cap", 1), int) and m.get("cap", 1) >= 1)
    assert doc["probe"]
    for name, p in doc["probe"].items():
        assert set(p) <= {"position", "level", "before", "after"} and ("before" in p or "after" in p)
        assert p["level"] in ("thread", "warp", "block")
        assert p["position"] == "kernel" or re.fullmatch(r"#?[a-z][a-z0-9_.]*(::[a-z0-9_]+[a-z0-9_.]*)*(:#?[a-z][a-z0-9_.]*(::[a-z0-9_]+[a-z0-9_.]*)*)*", p["position"])
        for snippet in (p.get("before"), p.get("after")):
            for save in SAVE_RE.finditer(snippet or ""):
                m = maps[save.group(1)]
                assert m["level"] == p["level"]
                assert len(save.group(2).split(",")) == len(m["fields"])
    return doc


@pytest.mark.parametrize("tool", TOOLS)
def test_builtin_tool_compiles_to_explicit_form(tool):
    text = nl.compile_file(TOOLS_DIR / tool / "probe.py")
    doc = check_explicit_schema(text)
    assert tool in doc["map"]


def test_builtin_tool_maps_match_spec_tools_md():
    expect = {
        "block_sched": ("array", "warp", 1, ["start:u64", "elapsed:u32", "cuid:u32"]),
        "gmem_bytes": ("sum", "thread", None, ["bytes:u64", "active_threads:u64"]),
        "gmem_bytes_thread": ("array", "thread", 1, ["bytes:u64"]),
        "dmat": ("array", "thread", "count", ["gtime:u64", "addr:u64"]),
        "tensorop": ("sum", "thread", None, ["count:u64", "warp_count:u64", "active_warps:u64"]),
        "tensorop_thread": ("array", "thread", 1, ["count:u64"]),
        "program_progress": ("array", "thread", "count", ["clock:u64", "branch:u32", "cuid:u32"]),
    }
    for tool, (kind, level, cap, fields) in expect.items():
        m = tomlkit.parse(nl.compile_file(TOOLS_DIR / tool / "probe.py")).unwrap()["map"][tool]
        assert (m.get("type", "array"), m["level"], m.get("cap"), m["fields"]) == (kind, level, cap, fields), tool


PTXAS = shutil.which("ptxas")


def assemble_snippets(toml_text: str, tmp_path: Path) -> None:
    """Wrap every snippet (SAVE removed, helpers as registers) in a kernel and run ptxas."""
    doc = tomlkit.parse(toml_text).unwrap()
    entries = []
    for i, (name, p) in enumerate(doc["probe"].items()):
        for where in ("before", "after"):
            if where not in p:
                continue
            body = "\n".join(l for l in p[where].splitlines() if not re.match(r"(@!?%\w+\s+)?SAVE\b", l))
            body = re.sub(r"(?<![%\w])(ADDR|OUT|IN1|IN2|IN3)\b", "%h64", body)
            body = re.sub(r"(?<![%\w])BYTES\b", "%h32", body)
            entries.append(f".visible .entry k_{i}_{where}()\n{{\n.reg .b64 %h64; .reg .b32 %h32;\n"
                           f"mov.u64 %h64, %clock64; mov.u32 %h32, %smid;\n{body}\nret;\n}}\n")
    ptx = ".version 8.7\n.target sm_90\n.address_size 64\n" + "\n".join(entries)
    f = tmp_path / "k.ptx"
    f.write_text(ptx)
    r = subprocess.run([PTXAS, "-arch=sm_90", str(f), "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n" + ptx


@pytest.mark.skipif(PTXAS is None, reason="ptxas not on PATH")
def test_builtin_tool_snippets_assemble(tmp_path):
    texts = [nl.compile_file(TOOLS_DIR / t / "probe.py") for t in TOOLS]
    for i, text in enumerate(texts):
        d = tmp_path / str(i)
        d.mkdir()
        assemble_snippets(text, d)


@pytest.mark.skipif(PTXAS is None, reason="ptxas not on PATH")
def test_examples_assemble(tmp_path):
    assemble_snippets(compile_source(EXPLICIT), tmp_path)
    assemble_snippets(compile_source(SHORT), tmp_path)


# ---------------------------------------------------------------- located errors (exact messages)

ERRORS = [
    # (body, expected rendering without the file prefix)
    ('''
     @probe(pos="kernel")
     def p():
         for i in x:
             pass
     ''', "t.py:5:14: error: [probe p] a probe loops only over range() of constants, not over 'x'\n"
          "        for i in x:\n                 ^\n"
          "    hint: for i in range(N), range(A, B) or range(A, B, STEP) with integer constants"),
    ('''
     @probe(pos="kernel")
     def p():
         x = nl.clocks()
     ''', "t.py:5:9: error: [probe p] unknown helper 'nl.clocks'\n        x = nl.clocks()\n            ^\n"
          "    hint: known: Map, addr, block, bytes, clock, cuid, in1, in2, in3, laneid, line, out, probe, save, smid, time, u32, u64"),
    ('''
     @probe(pos="kernel")
     def p():
         x = nl.addr
     ''', 't.py:5:9: error: [probe p] nl.addr is not available at pos="kernel"\n        x = nl.addr\n            ^\n'
          '    hint: field helpers describe the matched instruction; use an instruction position such as pos="ld.global"'),
    ('''
     @Map(level="thread")
     class m:
         a: nl.u64
         b: nl.u32
     @probe(pos="kernel", after=True)
     def p():
         m.save(nl.clock())
     ''', "t.py:9:5: error: [probe p] save of map 'm' needs 2 values (a:u64, b:u32), got 1\n"
          "        m.save(nl.clock())\n        ^"),
    ('''
     @probe(pos="kernel")
     def p():
         x = y + 1
     ''', "t.py:5:9: error: [probe p] undefined variable 'y'\n        x = y + 1\n            ^"),
    ('''
     x: nl.u32 = 0
     @probe(pos="kernel")
     def p():
         x = nl.clock()
     ''', "t.py:6:9: error: [probe p] wrong types: cannot assign a u64 value to u32 variable 'x'\n"
          "        x = nl.clock()\n            ^\n    hint: convert explicitly: nl.u32(...)"),
    ('''
     @probe(pos="kernel")
     def p():
         x = 1 < nl.clock()
     ''', "t.py:5:9: error: [probe p] wrong types: a condition is not a value\n        x = 1 < nl.clock()\n"
          "            ^\n    hint: use it in an if statement, or write `1 if cond else 0`"),
    ('''
     @probe(pos="ld.global", before=True)
     def p():
         x = nl.out
     ''', "t.py:5:9: error: [probe p] nl.out is only available after the instruction\n        x = nl.out\n"
          "            ^\n    hint: use after=True"),
    ('''
     @Map(level="warp")
     class m:
         a: nl.u64
     @probe(pos="kernel")
     def p():
         m.save(1)
     ''', "t.py:8:5: error: [probe p] probe 'p' has level thread but map 'm' has level warp\n        m.save(1)\n"
          "        ^\n    hint: a probe saves only into maps of its own level"),
    ('''
     @Map(level="warp", size=12)
     class m:
         a: nl.u64
         b: nl.u32
     ''', "t.py:3:25: error: size=12 does not match the record layout (a:u64, b:u32: 16 bytes)\n"
          '    @Map(level="warp", size=12)\n                            ^'),
    ('''
     @probe(pos="kernel", level="lane")
     def p():
         pass
     ''', "t.py:3:28: error: bad level 'lane': expected \"thread\", \"warp\" or \"block\"\n"
          '    @probe(pos="kernel", level="lane")\n                               ^'),
    ('''
     @probe(pos="kernel")
     def p():
         n += 1
     ''', "t.py:5:5: error: [probe p] undefined variable 'n': it is never assigned\n        n += 1\n        ^\n"
          "    hint: declare it at module level with an initial value: n: nl.u64 = 0"),
    ('''
     @probe(pos="kernel")
     def p():
         x = 5 // 0
     ''', "t.py:5:14: error: [probe p] division by zero\n        x = 5 // 0\n                 ^"),
    ('''
     @probe(pos="kernel", after=True, size=8)
     def p():
         nl.save((nl.clock(), nl.cuid()))
     ''', "t.py:3:39: error: [probe p] size=8 does not match the record layout (clock:u64, cuid:u32: 16 bytes)\n"
          '    @probe(pos="kernel", after=True, size=8)\n                                          ^'),
    ('''
     x = nl.clock()
     ''', "t.py:3:5: error: module-level 'x' must be an integer constant\n    x = nl.clock()\n        ^\n"
          "    hint: declare a register with a type instead: x: nl.u64 = 0"),
]


@pytest.mark.parametrize("body,expected", ERRORS)
def test_located_errors(body, expected):
    assert error_of(body) == expected


def test_every_error_is_reported():
    err = error_of('''
        @probe(pos="kernel")
        def p():
            a = b
            while True:
                pass
            c = nl.nothing
    ''')
    assert [line.split(": error: ")[1] for line in err.splitlines() if ": error: " in line] == [
        "[probe p] undefined variable 'b'",
        "[probe p] a while loop's condition compares a counter with a constant: while i < N",
        "[probe p] unknown helper 'nl.nothing'",
    ]


def test_errors_are_diagnostic_errors_with_locations():
    with pytest.raises(DiagnosticError) as info:
        compile_source("def (:\n", "bad.py")
    d = info.value.diagnostics[0]
    assert (d.location.file, d.location.line, d.message) == ("bad.py", 1, "syntax error: invalid syntax")


def test_compile_file_errors_name_the_file(tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(src('''
        @probe(pos="kernel")
        def p():
            return 1
    '''))
    with pytest.raises(DslError, match=re.escape(f"{f}:5:5: error: [probe p] unsupported construct: return statement")):
        nl.compile_file(f)
    with pytest.raises(DslError, match="cannot read probe file"):
        nl.compile_file(tmp_path / "missing.py")
