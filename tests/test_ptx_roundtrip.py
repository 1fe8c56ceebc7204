"""The printer is the inverse of the parser, on every corpus file."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neutrino.errors import ParseError
from neutrino.isa.ptx import ir, parse_module, parse_statements, print_module
from neutrino.passes import PassManager, default_pipeline
from neutrino.passes.manager import Context
from neutrino.probefile import parse_probes

from helpers import CORPUS, HAVE_PTXAS, ptxas


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_roundtrip(path):
    text = path.read_text()
    module = parse_module(text, str(path))
    printed = print_module(module)
    again = parse_module(printed)
    assert again.structure() == module.structure()
    assert print_module(again) == printed  # idempotent
    assert module.entries(), "every corpus file has an entry"


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


@pytest.mark.parametrize("path", CORPUS[:6], ids=lambda p: p.name)
def test_empty_pipeline_roundtrip(path):
    module = parse_module(path.read_text())
    before = module.structure()
    PassManager([]).run(module, Context(parse_probes('[p]\nposition="kernel"\nbefore="mov.u32 %x, 1; .reg .b32 %x;"')))
    assert module.structure() == before


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
        (".version 8.0\n.entry k()\n{\nmov.u32 %r1, %foo.x;\n}\n", "unknown special register"),
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
    assert parse_module(print_module(module)).structure() == module.structure()
