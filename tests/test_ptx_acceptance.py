"""Valid PTX that ptxas takes in forms compilers rarely write (issue 30 §4).

Each input is checked three ways: ptxas accepts it (the reason to accept it),
the parser reads it and prints it back byte for byte, and the canonical form
(as if every statement had been edited) reparses to the same structure and
still assembles. A form ptxas refuses stays refused here, with a location.
"""

import pytest

from neutrino.engine import instrument
from neutrino.errors import ParseError
from neutrino.isa.ptx import ir, parse_module, print_module
from neutrino.isa.ptx.printer import print_statement
from neutrino.toolbox import load_probes

from helpers import HAVE_PTXAS, ptxas
from test_ptx_roundtrip import canonical

HEADER = ".version 8.0\n.target sm_75\n.address_size 64\n"


def kernel(body: str, head_tail: str = "") -> str:
    return (
        f"{HEADER}.file 1 \"k.cu\"\n.visible .entry k(\n\t.param .u64 k_out\n){head_tail}\n{{\n"
        "\t.reg .pred %p<2>;\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<3>;\n"
        "\tld.param.u64 %rd1, [k_out];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.u32 %r1, %tid.x;\n"
        f"\tsetp.eq.u32 %p1, %r1, 0;\n{body}\tst.global.u32 [%rd2], %r1;\n\tret;\n}}\n"
    )


GUARDS = {
    "space after @": "\t@ %p1 add.u32 %r1, %r1, 1;\n",
    "space before !": "\t@ !%p1 add.u32 %r1, %r1, 2;\n",
    "space after !": "\t@! %p1 add.u32 %r1, %r1, 3;\n",
    "spaces around !": "\t@ ! %p1 add.u32 %r1, %r1, 4;\n",
    "tab after @": "\t@\t%p1 add.u32 %r1, %r1, 5;\n",
}
CASES = {
    **{f"guard, {name}": kernel(body) for name, body in GUARDS.items()},
    "pragma before an entry's {": kernel("", '\n.pragma "nounroll";'),
    "pragmas among performance directives": kernel("", '\n.maxntid 128, 1, 1\n.pragma "nounroll"; // why\n.minnctapersm 1'),
    ".loc split over two lines": kernel("\t.loc 1\n\t\t12 3\n"),
    ".loc split over three lines": kernel("\t.loc\n\t1 12\n\t3 // a comment\n"),
    "trailing Ctrl-Z": kernel("") + "\x1a",
    "Ctrl-Z bytes and a newline after the last item": kernel("") + "\x1a\x1a\n",
}


def structure(module: ir.Module) -> list:
    """What the module means, without spelling: heads and statements in canonical text."""
    out = []
    for item in module.items:
        if isinstance(item, ir.Function):
            out.append((item.kind, item.name, tuple(item.directives), tuple(p.text for p in item.params or ())))
            out += [print_statement(stmt) for _, _, stmt in ir.walk(item.body or []) if not isinstance(stmt, ir.Scope)]
        else:
            out.append(item.text)
    return out


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_ptxas_accepts_and_so_do_we(text):
    if HAVE_PTXAS:
        ptxas(text, "sm_75")
    module = parse_module(text, "k.ptx")
    assert print_module(module) == text
    printed = print_module(canonical(parse_module(text, "k.ptx")))
    assert structure(parse_module(printed)) == structure(module)
    if HAVE_PTXAS:
        ptxas(printed, "sm_75")


@pytest.mark.parametrize("body", GUARDS.values(), ids=GUARDS.keys())
def test_spaced_guards_mean_what_they_say(body):
    (insn,) = [i for i in ir.instructions(parse_module(kernel(body)).items[-1].body) if i.guard is not None]
    assert insn.guard.register.name == "%p1"
    assert insn.guard.negated == ("!" in body)
    assert print_module(canonical(parse_module(kernel(body)))).count("@!%p1" if "!" in body else "@%p1") == 1


def test_pragmas_before_the_body_are_directives_of_the_entry():
    module = parse_module(kernel("", '\n.maxntid 128, 1, 1\n.pragma "nounroll"; // why\n.minnctapersm 1'))
    assert module.items[-1].directives == [".maxntid 128, 1, 1", '.pragma "nounroll";', ".minnctapersm 1"]


def test_split_loc_is_one_directive():
    body = parse_module(kernel("\t.loc\n\t1 12\n\t3 // a comment\n")).items[-1].body
    assert [s.text for s in body if isinstance(s, ir.Directive)] == [".loc 1 12 3"]


@pytest.mark.parametrize("name", ["pragma before an entry's {", "guard, spaces around !", ".loc split over two lines", "trailing Ctrl-Z"])
@pytest.mark.parametrize("tool", ["block_sched", "gmem_bytes", "program_progress"])  # the last: a counting copy of the head
def test_instrumented_forms_assemble(name, tool):
    out = instrument(CASES[name], load_probes(tool), source="k.ptx").ptx
    if name == "pragma before an entry's {":
        assert '.pragma "nounroll";\n{' in out  # the head was reprinted with its new parameter, pragma kept
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


REFUSED = {
    # ptxas: "Parsing error near '{'": a .func takes no .pragma before its body
    "pragma before a .func's {": (HEADER + '.func f()\n.pragma "nounroll";\n{\n\tret;\n}\n', "k.ptx:6:1: error"),
    "ctrl-z before more text": (kernel("") + "\x1a.global .u32 g;\n", "k.ptx:"),
    "guard without a predicate": (kernel("\t@ add.u32 %r1, %r1, 1;\n"), "k.ptx:"),
}


@pytest.mark.parametrize("text, where", REFUSED.values(), ids=REFUSED.keys())
def test_what_we_still_refuse_is_located(text, where):
    with pytest.raises(ParseError) as e:
        parse_module(text, "k.ptx")
    assert str(e.value).startswith(where)
