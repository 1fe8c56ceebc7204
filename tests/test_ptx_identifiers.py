"""PTX as real compilers write it: the ISA's identifier grammar, spacing, operand shapes, -lineinfo/-G pruning.

Hand-written minimal modules, one per shape (each must round-trip exactly,
assemble, and instrument into PTX ptxas accepts), and nvcc output of small
CUDA kernels (tests/data/ptx_features, rebuilt by its build.sh).
"""

import re
from pathlib import Path

import pytest

from neutrino.errors import InstrumentError

from neutrino.engine import instrument, prune
from neutrino.errors import ParseError
from neutrino.isa.ptx import ir, parse_module, parse_statements, print_module
from neutrino.isa.ptx.semantics import defined_registers, effects
from neutrino.passes.build import splice
from neutrino.passes.prune import prune_module
from neutrino.passes.virtualize import probe_register_suffixes
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probes

from helpers import HAVE_PTXAS, PROBES, assert_keeps_original, ptxas

FEATURES = sorted((Path(__file__).parent / "data" / "ptx_features").glob("*.ptx"))
BUILTINS = ["block_sched", "gmem_bytes"]

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"


def kernel(body: str, globals_: str = "") -> str:
    return f"{HEAD}{globals_}.visible .entry k(\n\t.param .u64 k_p0\n)\n{{\n\t.reg .b64 %rd<4>;\n\t.reg .b32 %r<8>;\n\t.reg .f32 %f<4>;\n\tld.param.u64 %rd1, [k_p0];\n\tcvta.to.global.u64 %rd2, %rd1;\n{body}\n\tret;\n}}\n"


def roundtrips(text: str) -> ir.Module:
    """Parses lazily and eagerly to the same structure; printing is the parser's inverse and idempotent."""
    module = parse_module(text, "k.ptx")
    assert parse_module(text, "k.ptx", lazy=False).structure() == module.structure()
    printed = print_module(module)
    assert printed == text
    for stmt in (s for f in module.functions() for _, _, s in ir.walk(f.body or [])):
        ir.drop_spelling(stmt)  # as if every statement were edited: the canonical forms
    canonical = print_module(module)
    again = parse_module(canonical)
    assert again.structure() == module.structure()
    assert print_module(again) == canonical
    return module


def assembles_probed(text: str) -> None:
    """The module, and every built-in tool's instrumentation of it (whole and pruned to each entry), assemble."""
    if not HAVE_PTXAS:
        return
    ptxas(text)
    entries = [f.name for f in parse_module(text).entries()]
    for tool in BUILTINS:
        probes = load_probes(tool)
        result = instrument(text, probes)
        assert_keeps_original(text, result.ptx, entries)
        ptxas(result.ptx)
        for entry in entries:
            ptxas(instrument(text, probes, kernel=entry).ptx)


def instruction(module: ir.Module, opcode: str, nth: int = 0) -> ir.Instruction:
    found = [i for i in ir.instructions(module.function("k").body) if i.opcode.text == opcode]
    return found[nth]


# ---------------------------------------------------------------- class 1: registers without '%'

PLAIN_REGISTERS = kernel(
    """\t{
\t.reg .b32 temp_param_reg;
\t.reg .pred p;
\t.reg .pred P1;
\t.reg .b32 tmp, __$1;
\tld.global.u32 tmp, [%rd2];
\tsetp.ne.u32 p, tmp, 0;
\tselp.u32 __$1, 1, 0, p;
\tsetp.eq.u32 P1, __$1, 1;
\t@!P1 add.u32 tmp, tmp, __$1;
\tshfl.sync.up.b32 temp_param_reg|P1, tmp, 1, 0, 0xffffffff;
\t@p st.global.u32 [%rd2], temp_param_reg;
\t@P1 bra $L_done;
\tmov.u32 %r1, tmp;
\t}
$L_done:"""
)


def test_registers_without_percent_are_registers_in_their_scope():
    module = roundtrips(PLAIN_REGISTERS)
    load = instruction(module, "ld.global.u32")
    assert load.operands[0] == ir.Register("tmp")
    selp = instruction(module, "selp.u32")
    assert selp.operands == (ir.Register("__$1"), ir.Immediate("1"), ir.Immediate("0"), ir.Register("p"))
    assert instruction(module, "add.u32").guard == ir.Guard(ir.Register("P1"), negated=True)
    shfl = instruction(module, "shfl.sync.up.b32")
    assert shfl.operands[0] == ir.Pair(ir.Register("temp_param_reg"), ir.Register("P1"))
    assert defined_registers(shfl) == [ir.Register("temp_param_reg"), ir.Register("P1")]
    store = instruction(module, "st.global.u32")
    assert effects(store).uses == (ir.Register("%rd2"), ir.Register("temp_param_reg"), ir.Register("p"))
    branch = instruction(module, "bra")
    assert branch.guard.register == ir.Register("P1") and branch.operands == (ir.Symbol("$L_done"),)
    assert ir.register_types(module.function("k")).type_of("__$1") == "b32"
    assembles_probed(PLAIN_REGISTERS)


def test_a_name_is_a_register_only_where_a_reg_declares_it():
    text = kernel(
        "\t{\n\t.reg .b64 mt;\n\tmov.u64 mt, 1;\n\t}\n\tmov.u64 %rd3, mt;",
        globals_=".global .align 8 .b8 mt[8];\n",
    )
    module = roundtrips(text)
    inner, outer = (i for i in ir.instructions(module.function("k").body) if i.opcode.text == "mov.u64")
    assert inner.operands[0] == ir.Register("mt")  # the scope's register
    assert outer.operands[1] == ir.Symbol("mt")  # the global variable
    assembles_probed(text)


@pytest.mark.parametrize("name", ["%1", "$x", "_a", "__$1", "a$", "P1", "%_", "%$"])
def test_identifier_grammar_names(name):
    """[a-zA-Z]{followsym}* | {[_$%]}{followsym}+, followsym = [a-zA-Z0-9_$]."""
    (decl, insn) = parse_statements(f".reg .b32 {name};\nmov.u32 {name}, 1;")
    assert decl.names == (name,)
    assert insn.operands[0] == ir.Register(name)


@pytest.mark.parametrize("name", ["_", "$", "%", "1a", "a-b"])
def test_identifier_grammar_rejects(name):
    with pytest.raises(ParseError, match="malformed register name|malformed .reg"):
        parse_statements(f".reg .b32 {name};")


def test_ranged_names_without_percent_and_with_digit_prefixes():
    (decl, insn) = parse_statements(".reg .u64 t<2>;\nmov.u64 t1, t0;")
    assert decl.count == 2 and insn.operands == (ir.Register("t1"), ir.Register("t0"))
    types = ir.RegisterTypes()
    types.add(ir.RegDecl("b32", ("%r1",), 3))
    assert types.type_of("%r12") == "b32" and types.type_of("%r13") is None and types.type_of("%r1") is None


def test_probe_registers_without_percent_get_their_own_names():
    suffixes = probe_register_suffixes(["%tmp", "tmp", "%a_b", "a$b", "a_b"])
    assert suffixes["%tmp"] == "p_tmp" and suffixes["%a_b"] == "p_a_b"
    assert len(set(suffixes.values())) == 5
    probes = parse_probes(
        '[p]\nposition = "ld.global"\nlevel = "thread"\nbefore = """\n.reg .b32 tmp;\n.reg .b32 %tmp;\n'
        'mov.u32 tmp, 1;\nadd.u32 %tmp, tmp, 2;\n"""\n'
    )
    result = instrument(PLAIN_REGISTERS, probes)
    probed = result.ptx
    plain = re.search(r"mov.u32 \t(%nt_q\d+_tmp), 1;", probed).group(1)
    assert f"add.u32 \t%nt_p_tmp, {plain}, 2;" in probed
    if HAVE_PTXAS:
        ptxas(probed)


# ---------------------------------------------------------------- class 2: spacing


def test_tokens_need_no_spacing():
    text = kernel("\t.reg.u64 %x<2>;\n\t.reg .v2.f32 %mv;\n\tld.global.v2.b32{%r1, %r2}, [%rd2];\n\tmov.u64 %x1, %rd2;")
    module = roundtrips(text)
    decls = [s for s in module.function("k").body if isinstance(s, ir.RegDecl)]
    assert (decls[-2].type, decls[-2].names, decls[-2].count) == ("u64", ("%x",), 2)
    assert decls[-1].type == "v2 f32"
    load = instruction(module, "ld.global.v2.b32")
    assert load.operands[0] == ir.Vector((ir.Register("%r1"), ir.Register("%r2")))
    assert "ld.global.v2.b32 \t{%r1, %r2}, [%rd2];" in print_module(module)  # roundtrips() dropped the spellings
    assembles_probed(text)


# ---------------------------------------------------------------- class 3: operands


def test_symbol_and_register_plus_constant():
    text = kernel(
        "\tmov.u64 %rd3, mt+4;\n\tmov.u64 %rd3, mt + -4;\n\tmov.u64 %rd3, mt - 8;\n\tadd.u32 %r1, %r2+4, 1;",
        globals_=".global .align 4 .b8 mt[16];\n",
    )
    module = roundtrips(text)
    plus, minus, minus8 = (i.operands[1] for i in ir.instructions(module.function("k").body) if i.opcode.text == "mov.u64")
    assert plus == ir.Offset(ir.Symbol("mt"), ir.Immediate("4"))
    assert minus == ir.Offset(ir.Symbol("mt"), ir.Immediate("-4")) and str(minus) == "mt+-4"
    assert minus8 == ir.Offset(ir.Symbol("mt"), ir.Immediate("-8"))
    add = instruction(module, "add.u32")
    assert add.operands[1] == ir.Offset(ir.Register("%r2"), ir.Immediate("4"))
    assert ir.Register("%r2") in effects(add).uses
    assert "mt" in set(module.function("k").body[-2].symbol_names()) or any("mt" in i.symbol_names() for i in ir.instructions(module.function("k").body))
    # the printed form is what ptxas reads (it rejects `mt-8`)
    assembles_probed(print_module(module))
    pruned = parse_module(prune(text, "k"))
    assert any(isinstance(d, ir.Directive) and "mt[16]" in d.text for d in pruned.items)


def test_vector_registers_and_their_elements():
    text = kernel("\t.reg .v2 .f32 %mx;\n\tmov.f32 %mx.x, 0f3F800000;\n\tmov.f32 %mx.y, %mx.x;\n\tadd.f32 %f1, %mx.x, %mx.y;\n\tst.global.f32 [%rd2], %f1;")
    module = roundtrips(text)
    move = instruction(module, "mov.f32", 1)
    assert move.operands == (ir.VectorElement(ir.Register("%mx"), "y"), ir.VectorElement(ir.Register("%mx"), "x"))
    assert defined_registers(move) == [ir.Register("%mx")]
    plain = parse_statements(".reg .v4 .b32 vr;\nmov.b32 vr.w, 1;")[1]
    assert plain.operands[0] == ir.VectorElement(ir.Register("vr"), "w")
    assembles_probed(text)


def test_data_directives_inside_bodies():
    text = kernel(
        "\t{\n\t.global .align 4 .u32 inner[2] = {5, 6};\n\t.const .align 4 .u32 konst[2] = {1, 2};\n"
        "\t.shared .align 4 .u32 scratch[2];\n\t.local .align 4 .u32 mine[2];\n"
        "\tld.global.u32 %r1, [inner+4];\n\tld.const.u32 %r2, [konst];\n\tst.shared.u32 [scratch], %r1;\n\tst.local.u32 [mine], %r2;\n\t}"
    )
    module = roundtrips(text)
    (scope,) = [s for s in module.function("k").body if isinstance(s, ir.Scope)]
    directives = [s.text for s in scope.body if isinstance(s, ir.Directive)]
    assert directives[0] == ".global .align 4 .u32 inner[2] = {5, 6};"
    assert len(directives) == 4
    assembles_probed(text)


# ---------------------------------------------------------------- nvcc output


@pytest.mark.parametrize("path", FEATURES, ids=lambda p: p.name)
def test_nvcc_output_roundtrips(path):
    roundtrips(path.read_text())


def _assemble(ptx: str, path: Path) -> None:
    if ".rdc." in path.name:  # relocatable: ptxas needs -c for the unresolved externs
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "k.ptx"
            src.write_text(ptx)
            proc = subprocess.run(["ptxas", f"-arch={parse_module(ptx).target}", "-c", str(src), "-o", str(Path(tmp) / "k.o")], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    else:
        ptxas(ptx)


def _refused_for_counting_alone(text, probes, path, entries, error):
    """A kernel calling through a function pointer gets no counting variant (spec/pipeline.md, "The counting
    variant"): the module is refused as a whole, that kernel alone too, and every other kernel instruments."""
    found = re.search(r"kernel (\S+): no counting variant .*an indirect call", str(error))
    assert found, error
    refused = found.group(1)
    for entry in entries:
        if entry == refused:
            with pytest.raises(InstrumentError, match="no counting variant"):
                instrument(text, probes, kernel=entry, source=str(path))
        else:
            _assemble(instrument(text, probes, kernel=entry, source=str(path)).ptx, path)


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize("probe", BUILTINS + [str(p) for p in PROBES], ids=lambda p: p.rsplit("/", 1)[-1])
@pytest.mark.parametrize("path", FEATURES, ids=lambda p: p.name)
def test_nvcc_output_instruments_with_every_probe(path, probe):
    if probe not in BUILTINS and ".sm90." not in path.name:
        pytest.skip("test probes run on the sm_90 builds only (time)")
    text = path.read_text()
    entries = [f.name for f in parse_module(text).entries()]
    probes = load_probes(probe)
    try:
        result = instrument(text, probes, source=str(path))
    except InstrumentError as e:
        _refused_for_counting_alone(text, probes, path, entries, e)
        return
    assert set(entries) <= set(result.kernels)
    assert_keeps_original(text, result.ptx, entries)
    _assemble(result.ptx, path)
    if probe in BUILTINS:
        for entry in entries:  # the runtime's path: one kernel, pruned
            pruned = instrument(text, probes, kernel=entry, source=str(path))
            _assemble(pruned.ptx, path)
            _assemble(prune(text, entry), path)


def test_nvcc_call_sequences_and_inline_asm_bind_registers():
    module = parse_module((Path(__file__).parent / "data" / "ptx_features" / "calls.sm90.ptx").read_text())
    body = module.function("_Z5callsPfPKfP6__halfi").body
    scopes = [s for s in body if isinstance(s, ir.Scope)]
    assert any(isinstance(d, ir.RegDecl) and d.names == ("temp_param_reg",) for s in scopes for d in s.body)
    shfl = next(i for i in ir.instructions(body) if i.opcode.base == "shfl")
    assert shfl.operands[0] == ir.Pair(ir.Register("%r9"), ir.Register("P1"))
    guarded = next(i for i in ir.instructions(body) if i.guard is not None and i.guard.register.name == "P1")
    assert guarded.guard.negated


# ---------------------------------------------------------------- class 6: pruning -lineinfo and -G


def test_pruning_lineinfo_keeps_the_strings_that_loc_names():
    text = (Path(__file__).parent / "data" / "ptx_features" / "lines.lineinfo.sm90.ptx").read_text()
    assert "function_name $L__info_string" in text
    for entry in ("_Z5firstPii", "_Z6secondPii"):
        pruned = prune(text, entry)
        module = parse_module(pruned)
        assert [f.name for f in module.entries()] == [entry]
        assert "function_name $L__info_string0" in pruned  # inlining info kept ...
        assert re.search(r"\.section\s+\.debug_str", pruned)  # ... with what defines its labels, as written
        if HAVE_PTXAS:
            ptxas(pruned)


def test_pruning_drops_loc_attributes_whose_labels_are_gone():
    text = kernel("\t.loc 1 3 7, function_name $L__info_string0, inlined_at 1 4 2\n\tmov.u32 %r1, 1;") + (
        ".visible .entry other()\n{\n\tret;\n}\n"
        ".section .debug_info\n{\n.b32 $L__info_string0\n$L__info_string0:\n.b8 0\n.b64 other\n}\n"
    )
    module = parse_module(text)
    prune_module(module, {"k"})
    printed = print_module(module)
    assert ".section" not in printed and ".entry other" not in printed
    assert "\t.loc 1 3 7\n" in printed and "function_name" not in printed


def test_pruning_a_debug_build_drops_debug_from_the_target():
    text = (Path(__file__).parent / "data" / "ptx_features" / "lines.G.sm90.ptx").read_text()
    assert ".target sm_90, debug" in text
    pruned = prune(text, "_Z6secondPii")
    assert parse_module(pruned).target == "sm_90" and "debug" not in pruned.split(".address_size")[0].split(".target")[1]
    assert ".section" not in pruned
    if HAVE_PTXAS:
        ptxas(pruned)


def test_pruning_keeps_the_functions_a_kept_table_names():
    text = (Path(__file__).parent / "data" / "ptx_features" / "lines.sm90.ptx").read_text()
    pruned = parse_module(prune(text, "_Z5thirdPii"))
    defined = {f.name for f in pruned.functions() if f.body is not None}
    assert {"_Z3inci", "_Z3deci"} <= defined and "_Z6thricei" not in defined
    assert [f.name for f in pruned.entries()] == ["_Z5thirdPii"]
    if HAVE_PTXAS:
        ptxas(print_module(pruned))
    first = parse_module(prune(text, "_Z5firstPii"))
    assert not any(isinstance(d, ir.Directive) and "ops[2]" in d.text for d in first.items)
    assert "_Z3inci" not in {f.name for f in first.functions()}


def test_pruning_a_module_with_nothing_to_drop_leaves_it_whole():
    text = (Path(__file__).parent / "data" / "ptx_features" / "calls.G.sm90.ptx").read_text()
    module = parse_module(text)
    before = module.structure()
    prune_module(module, {"_Z5callsPfPKfP6__halfi"})  # its .func and vprintf are used: the DWARF stays valid
    assert module.structure() == before


# ---------------------------------------------------------------- class 10: splice


def test_splice_edits_every_site_in_order_in_one_pass():
    body = parse_statements("{\nmov.u32 %r1, 1;\n}\nmov.u32 %r2, 2;\nmov.u32 %r3, 3;")
    scope, second, third = body
    (first,) = scope.body
    mark = lambda n: ir.Instruction(ir.opcode("nop"), (ir.Immediate(str(n)),))  # noqa: E731
    splice(body, {id(first): ([mark(0)], None, [mark(1)]), id(third): ([], [mark(3)], [mark(4)])})
    texts = lambda stmts: [print_module(ir.Module([ir.Function("func", "f", body=[s])])).split("\n")[2].strip() for s in stmts]  # noqa: E731
    assert texts(scope.body) == ["nop \t0;", "mov.u32 \t%r1, 1;", "nop \t1;"]
    assert body[1] is second and texts(body[2:]) == ["nop \t3;", "nop \t4;"]


# ---------------------------------------------------------------- the grammar, generated

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

IDENTIFIER = r"\A(?:[a-zA-Z][a-zA-Z0-9_$]{0,6}|[_$%][a-zA-Z0-9_$]{1,6})\Z"


@settings(max_examples=200, deadline=None)
@given(st.from_regex(IDENTIFIER), st.from_regex(IDENTIFIER))
def test_any_identifier_declares_and_names_a_register(first, second):
    if first == second or first in ir.SPECIAL_REGISTERS or second in ir.SPECIAL_REGISTERS or second == first + "0":
        return
    text = kernel(f"\t{{\n\t.reg .pred {first};\n\t.reg .b32 {second};\n\tsetp.ne.u32 {first}, %r1, 0;\n\t@!{first} selp.u32 {second}, 1, 0, {first};\n\tmov.u32 %r2, {second};\n\t}}")
    module = roundtrips(text)
    selp = instruction(module, "selp.u32")
    assert selp.guard == ir.Guard(ir.Register(first), negated=True)
    assert selp.operands[0] == ir.Register(second) and selp.operands[3] == ir.Register(first)
    assert effects(selp).defs == (ir.Register(second),)
