"""The printer is the exact inverse of the parser, on every corpus file and on generated text."""

import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from neutrino.errors import ParseError
from neutrino.isa.ptx import ir, parse_module, parse_statements, print_module
from neutrino.passes import PassManager, default_pipeline
from neutrino.passes.manager import Context
from neutrino.probefile import parse_probes

from helpers import CORPUS, HAVE_PTXAS, ptxas


def canonical(module: ir.Module) -> ir.Module:
    """The module as if a pass had edited every statement: it prints in canonical form."""
    for item in module.items:
        if isinstance(item, ir.Function):
            item.written_head = None
            for _, _, stmt in ir.walk(item.body or []):
                ir.drop_spelling(stmt)
        else:
            ir.drop_spelling(item)
    return module


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_roundtrip(path):
    text = path.read_text()
    module = parse_module(text, str(path))
    assert print_module(module) == text
    assert module.entries(), "every corpus file has an entry"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_canonical_form_reparses_to_the_same_structure(path):
    module = canonical(parse_module(path.read_text(), str(path)))
    printed = print_module(module)
    again = parse_module(printed)
    assert again.structure() == module.structure()
    assert print_module(again) == printed  # a parsed canonical text is its own spelling
    assert print_module(canonical(again)) == printed  # canonical printing is idempotent


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_original_instructions_print_unchanged_but_whitespace(path):
    text = path.read_text()
    module = parse_module(text)
    source_lines = text.splitlines()
    for fn in module.functions():
        for insn in ir.instructions(fn.body or []):
            original = source_lines[insn.line - 1]
            squash = lambda s: "".join(s.split("//")[0].split())  # noqa: E731
            printed = squash(print_module(ir.Module([ir.Function("func", "f", body=[insn])])).split("{", 1)[1].rsplit("}", 1)[0])
            assert printed in squash(original) or squash(original).startswith(printed.split(";")[0]), (original, printed)


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_printed_assembles(path):
    ptxas(print_module(parse_module(path.read_text())))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_empty_pipeline_roundtrip(path):
    text = path.read_text()
    module = parse_module(text)
    before = module.structure()
    PassManager([]).run(module, Context(parse_probes('[p]\nposition="kernel"\nbefore="mov.u32 %x, 1; .reg .b32 %x;"')))
    assert module.structure() == before
    assert print_module(module) == text


def test_operand_kinds():
    (insn,) = parse_statements("@!%p1 ld.global.nc.v4.f32 {%f1, %f2, _, %f4}, [%rd1+-16];")
    assert insn.guard == ir.Guard(ir.Register("%p1"), negated=True)
    assert insn.opcode.base == "ld" and insn.opcode.space == "global" and insn.opcode.vector == 4
    assert insn.opcode.types == ("f32",)
    vec, addr = insn.operands
    assert vec.items[2] == ir.Sink()
    assert addr == ir.Address(ir.Register("%rd1"), ir.Immediate("-16"))
    (insn,) = parse_statements("setp.lt.s32 %p1|%p2, %tid.x, 0x10;")
    assert insn.operands[0] == ir.Pair(ir.Register("%p1"), ir.Register("%p2"))
    assert insn.operands[1] == ir.SpecialRegister("%tid.x")
    assert insn.operands[2].value == 16
    (insn,) = parse_statements("mov.f32 %f1, 0f3F800000;")
    assert insn.operands[1].value is None


def test_register_ranges_and_types():
    module = parse_module(".version 8.0\n.target sm_80\n.address_size 64\n.entry k()\n{\n.reg .b32 %r<4>;\n.reg .pred %p;\nret;\n}\n")
    types = ir.register_types(module.function("k"))
    assert types.type_of("%r3") == "b32"
    assert types.type_of("%r4") is None
    assert types.type_of("%p") == "pred"


@pytest.mark.parametrize(
    "text, message",
    [
        (".version 8.0\n.entry k()\n{\nmov.u32 %r1, 1\n}\n", "missing its ';'"),
        (".version 8.0\n.entry k()\n{\nmov.u32 %r1, [%r2;\n}\n", "unclosed bracket"),
        (".version 8.0\n.entry k()\n{\nret;\n", "never closed"),
        (".version 8.0\n.entry k()\n{\nmov.u32 %r1, %foo.q;\n}\n", "element is .x .y .z .w"),
        (".version 8.0\n.entry k()\n{\nmov.u32 %r1, %tid.w;\n}\n", "malformed special register"),
        (".version 8.0\n.entry k()\n{\n.reg .b32 1r;\n}\n", "malformed register name"),
        (".version 8.0\n.entry k()\n{\n.global .u32 t[2] = {1, 2}\n}\n", "missing its ';'"),
        ("garbage here;", "expected a directive"),
    ],
)
def test_parse_errors_are_located(text, message):
    with pytest.raises(ParseError) as e:
        parse_module(text, "k.ptx")
    assert message in str(e.value)
    assert str(e.value).startswith("k.ptx:")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(".%@!{}[]();:,+-_ \n\tabcdefglmnoprstuvxyz0123456789/*\"$<>|")), max_size=120))
def test_arbitrary_text_parses_or_raises_parse_error(text):
    try:
        module = parse_module(text)
    except ParseError:
        return
    assert print_module(module) == text
    printed = print_module(canonical(module))
    assert parse_module(printed).structure() == module.structure()


# ---------------------------------------------------------------- lazy operands


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_lazy_operands_parse_as_eager_ones(path):
    text = path.read_text()
    lazy, eager = parse_module(text), parse_module(text, lazy=False)
    lazy_insns = [i for f in lazy.functions() for i in ir.instructions(f.body or [])]
    assert any(i.source_operands is not None for i in lazy_insns), "the corpus exercises the lazy path"
    # symbol names read from unparsed text agree with those of parsed operands
    eager_insns = [i for f in eager.functions() for i in ir.instructions(f.body or [])]
    assert [list(i.symbol_names()) for i in lazy_insns] == [list(i.symbol_names()) for i in eager_insns]
    assert all(i.source_operands is not None for i in lazy_insns if i.source_operands is not None)
    assert lazy.structure() == eager.structure()


def test_assigning_operands_drops_the_source_text():
    module = parse_module(".version 8.0\n.target sm_90\n.entry k()\n{\nadd.s32 %r1, %r2, 4;\n}\n")
    (insn,) = ir.instructions(module.function("k").body)
    assert insn.source_operands == "%r1, %r2, 4"
    insn.operands = (ir.Register("%r1"), ir.Register("%r2"), ir.Immediate("8"))
    assert insn.source_operands is None
    assert "add.s32 \t%r1, %r2, 8;" in print_module(module)


_names = st.sampled_from(["%r1", "%clock64", "%tid", "%tid.x", "x", "_", "$L", "a.b", "%1"])
_numbers = st.sampled_from(["4", "-4", "09", "0x1F", "0f3F800000", "1.5", "16U", "0b1"])
_atoms = st.one_of(_names, _numbers)
_addresses = st.builds(
    lambda base, sign, off, sp: f"[{sp}{base}{sp}{sign}{sp}{off}{sp}]" if sign else f"[{sp}{base}{sp}]",
    _atoms, st.sampled_from(["", "+", "-", "+-", "*"]), _numbers, st.sampled_from(["", " ", "\n"]),
)
_operands = st.one_of(
    _atoms,
    _addresses,
    st.builds(lambda a: "!" + a, _atoms),
    st.builds(lambda a, b: f"{a}|{b}", _atoms, _atoms),
    st.builds(lambda items: "{" + ", ".join(items) + "}", st.lists(_atoms, max_size=4)),
    st.builds(lambda items: "(" + ", ".join(items) + ")", st.lists(_atoms, max_size=3)),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_operands, min_size=1, max_size=4), st.sampled_from([", ", ",", " ,\n  "]))
@example(["[%tid]"], ", ")  # a special register is no address base
@example(["[_]"], ", ")
@example(["[x+09]"], ", ")  # not an octal number
@example(["{%r1, 4}", "!%p", "%a|%b", "[x+-4]"], ", ")
def test_lazy_and_eager_parsing_agree(operands, separator):
    """Operand text kept for later either parses later exactly as it would have at once, or is refused at once."""
    text = f".version 8.0\n.target sm_90\n.entry k()\n{{\nmov.u32 {separator.join(operands)};\n}}\n"
    outcomes = []
    for lazy in (True, False):
        try:
            outcomes.append(parse_module(text, lazy=lazy).structure())
        except ParseError as e:
            outcomes.append(("error", e.diagnostics[0].message if hasattr(e, "diagnostics") else str(e)))
    assert outcomes[0] == outcomes[1]



# ---------------------------------------------------------------- trivia: whitespace and comments

LONG = os.environ.get("NEUTRINO_HYPOTHESIS") == "long"
REALWORLD = sorted((CORPUS[0].parent.parent.parent / "realworld").glob("*/*.ptx"))
MUTATED_FILES = CORPUS + (REALWORLD if LONG else [])
TRIVIA = [" ", "\t", "\n", "\n\n", " \t ", "\r\n", "\n\t\t", " /* note */ ", "/**/", "\n// note\n", " // note\n", "\n/* two\n lines */\n"]


@settings(max_examples=400 if LONG else 40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_whitespace_and_comment_mutations_of_corpus_files_round_trip(data):
    """Where one whitespace character stood, other whitespace or a comment: whatever still parses prints back exactly."""
    text = data.draw(st.sampled_from(MUTATED_FILES), label="file").read_text()
    spaces = [i for i, c in enumerate(text) if c in " \t\n"]
    picks = data.draw(st.lists(st.tuples(st.integers(0, len(spaces) - 1), st.sampled_from(TRIVIA)), min_size=1, max_size=12))
    chars = list(text)
    for index, trivia in picks:
        chars[spaces[index]] = trivia
    mutated = data.draw(st.sampled_from(["", "\n", "  "])) + "".join(chars) + data.draw(st.sampled_from(["", "\n\n", "// end"]))
    try:
        module = parse_module(mutated)
    except ParseError:
        return
    assert print_module(module) == mutated


def body_of(module: ir.Module, name: str) -> list:
    return module.function(name).body


def test_an_edited_statement_prints_canonically_where_it_stood():
    text = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k()\n{\n\t.reg .b32 %r<4>;   // regs\n\n\tadd.s32   %r1,%r2, 4; // sum\n\t  ret;\n}\n"
    module = parse_module(text)
    body = body_of(module, "k")
    add = ir.instructions(body)[0]
    add.operands = (ir.Register("%r1"), ir.Register("%r2"), ir.Immediate("8"))
    ir.edit(body[0], count=8)
    assert print_module(module) == text.replace(".reg .b32 %r<4>;", ".reg .b32 %r<8>;").replace(
        "add.s32   %r1,%r2, 4;", "add.s32 \t%r1, %r2, 8;"
    )


def test_inserted_statements_take_lines_of_their_own_at_their_depth():
    text = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\t.reg .b32 %r<4>;\n\n\tadd.s32 %r1, %r2, 4;\n\tret;\n}\n"
    module = parse_module(text)
    body = body_of(module, "k")
    body.insert(2, parse_statements("mov.u32 %r3, 1;")[0])
    body.insert(len(body), parse_statements("mov.u32 %r3, 2;")[0])  # after ret, before '}'
    assert print_module(module) == text.replace("\n\tret;", "\n\tmov.u32 \t%r3, 1;\n\tret;\n\tmov.u32 \t%r3, 2;")


def test_a_changed_function_head_prints_canonically_and_its_body_as_written():
    text = ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(.param .u64 k_p0)  // head\n{\n\tret;  // done\n}\n"
    module = parse_module(text)
    module.function("k").params.append(ir.Param(".param .u64 k_p1"))
    printed = print_module(module)
    assert printed.endswith("\n\n.visible .entry k(\n\t.param .u64 k_p0,\n\t.param .u64 k_p1\n)\n{\n\tret;  // done\n}\n")


def test_probe_snippets_carry_no_spelling():
    """Probe code is new wherever it goes: it prints in canonical form, not with the probe file's spacing."""
    stmts = parse_statements("  add.s32   %r1,  %r2, 1;\n\n  done:  // x\n")
    assert all(s.written is None and s.leading is None for s in stmts)


@pytest.mark.parametrize("path", CORPUS[::4], ids=lambda p: p.name)
def test_instrumented_kernels_keep_their_original_text(path):
    """Every line of an instrumented kernel's body that the passes did not edit prints as it came in, in order."""
    from neutrino.engine import instrument
    from neutrino.toolbox import load_probes

    text = path.read_text()
    out = instrument(text, load_probes("block_sched")).ptx
    printed_lines = iter(out.splitlines())
    for function in parse_module(text).entries():
        start = text.index("{", text.index(function.name + "("))
        body_lines = text[start:].split("\n}", 1)[0].splitlines()[1:]  # from the line after '{' to the '}'
        for line in body_lines:
            assert any(printed == line for printed in printed_lines), f"{function.name}: {line!r} missing or out of order"
