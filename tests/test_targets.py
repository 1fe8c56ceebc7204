"""Old targets and relocatable PTX: `.version` raised when legal, refusals located, `--check` without false failures.

The modules are under tests/data/targets/: hand-written sm_1x/sm_2x-era PTX and
nvcc -rdc=true output (its .cu source beside it).
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import assume, event, given, note, settings
from hypothesis import strategies as st

from helpers import DATA, HAVE_PTXAS, ptxas
from neutrino import ptxas as assembler
from neutrino.engine import instrument
from neutrino.errors import InstrumentError, ProbeError
from neutrino.isa.ptx import formats, ir, parse_module
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probes

TARGETS = DATA / "targets"
LONG = os.environ.get("NEUTRINO_HYPOTHESIS") == "long"
TIMER = '[timer]\nposition = "kernel"\ndatamodel = "thread:8"\nbefore = """.reg .b64 %t0; mov.u64 %t0, %globaltimer;"""\nafter = """SAVE.u64 {%t0};"""\n'
DSMEM = '[dsmem]\nposition = "kernel"\ndatamodel = "thread:8"\nbefore = """.reg .b32 %s; mov.u32 %s, %dynamic_smem_size;"""\nafter = """SAVE.u32 {%s, %smid};"""\n'
COUNT = '[count]\nposition = "ld.global"\nbefore = """.reg .b32 %n; add.u32 %n, %n, 1;"""\n'


def cli(*args):
    return subprocess.run([sys.executable, "-m", "neutrino.cli", *map(str, args)], capture_output=True, text=True)


def probed(name: str, probe_text: str) -> str:
    return instrument((TARGETS / name).read_text(), parse_probes(probe_text, "probe.toml"), source=name).ptx


# ---------------------------------------------------------------- .version and .target


def test_version_is_raised_to_what_the_probe_needs():
    out = probed("sm20_v30.ptx", DSMEM)
    module = parse_module(out)
    assert (module.version, module.target) == ("4.1", "sm_20")  # %dynamic_smem_size: PTX 4.1; the target is kept
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


def test_version_is_kept_when_nothing_newer_is_used():
    out = probed("sm20_v30.ptx", COUNT)
    assert parse_module(out).version == "3.0"
    out = instrument((TARGETS / "sm20_v30.ptx").read_text(), load_probes("block_sched")).ptx
    assert parse_module(out).version == "3.0"  # %clock64 is PTX 2.0
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


def test_version_is_not_raised_over_a_retired_form_in_the_original():
    with pytest.raises(InstrumentError) as e:
        probed("sm20_v30_mad.ptx", DSMEM)
    message = str(e.value)
    assert message.startswith("sm20_v30_mad.ptx:37: error: the probes need PTX 4.1 and sm_20")
    assert "cannot be raised to 4.1: mad.f32" in message
    if HAVE_PTXAS:  # the reason is real: the raised module does not assemble
        raised = (TARGETS / "sm20_v30_mad.ptx").read_text().replace(".version 3.0", ".version 4.1")
        with pytest.raises(AssertionError, match="Rounding modifier required"):
            ptxas(raised, "sm_75")


def test_the_target_is_raised_to_what_a_probe_needs():
    """%globaltimer needs sm_30 and PTX 3.1: the driver JIT-compiles for a newer GPU anyway, so .target follows."""
    out = probed("sm20_v30.ptx", TIMER)
    assert (parse_module(out).version, parse_module(out).target) == ("3.1", "sm_30")
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


def test_special_registers_saved_directly_raise_the_target_too():
    text = '[t]\nposition = "kernel"\ndatamodel = "thread:8"\nafter = """SAVE.u64 {%globaltimer};"""\n'
    out = probed("sm20_v30.ptx", text)
    assert parse_module(out).target == "sm_30"
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


def test_engine_code_raises_an_sm1x_target():
    out = instrument((TARGETS / "sm13_v23.ptx").read_text(), load_probes("gmem_bytes"), source="sm13_v23.ptx").ptx
    assert (parse_module(out).version, parse_module(out).target) == ("2.3", "sm_20")  # cvta needs sm_20
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


def test_sm1x_module_with_a_probe_it_can_run():
    out = probed("sm13_v23.ptx", COUNT)
    assert parse_module(out).target == "sm_13"
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


def test_32_bit_module_is_refused():
    text = (TARGETS / "sm20_v30.ptx").read_text().replace(".address_size 64", ".address_size 32")
    with pytest.raises(InstrumentError, match=r"^m.ptx:7: error: 32-bit PTX \(.address_size 32\) cannot be instrumented"):
        instrument(text, parse_probes(COUNT, "p.toml"), source="m.ptx")


@pytest.mark.parametrize(
    "snippet, need",
    [
        ("mov.u64 %d, %globaltimer;", formats.Requirement((3, 1), 30)),
        ("mov.u32 %w, %dynamic_smem_size;", formats.Requirement((4, 1), 20)),
        ("popc.b32 %w, %w;", formats.Requirement((2, 0), 20)),
        ("lop3.b32 %w, %w, %w, %w, 0xff;", formats.Requirement((4, 3), 50)),
        ("add.u32 %w, %w, 1;", formats.ANY),
    ],
)
def test_requirements(snippet, need):
    from neutrino.isa.ptx import parse_statements

    (insn,) = parse_statements(snippet)
    assert formats.requirement(insn) == need


# ---------------------------------------------------------------- ptxas: arch, -c, skipped checks


ARCHS = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_103", "sm_103f", "sm_120")


@pytest.mark.parametrize(
    "target, arch",
    [("sm_52", "sm_75"), ("sm_20", "sm_75"), ("sm_80", "sm_80"), ("sm_89", "sm_90"), ("sm_90a", "sm_90a"),
     ("sm_100f", "sm_100"), ("sm_101f", "sm_103"), ("sm_101a", None), ("sm_130", None), ("compute_80", None)],
)
def test_choose_arch(target, arch):
    assert assembler.choose_arch(target, ARCHS) == arch


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
def test_supported_archs_are_read_from_ptxas():
    import shutil

    archs = assembler.supported_archs(shutil.which("ptxas"))
    assert "sm_90a" in archs and all(a.startswith("sm_") for a in archs)


def test_relocatable_modules_are_recognised():
    assert assembler.is_relocatable(parse_module((TARGETS / "rdc_extern_var.sm80.ptx").read_text()))
    assert not assembler.is_relocatable(parse_module((TARGETS / "sm52_v50.ptx").read_text()))
    shared = (TARGETS / "sm52_v50.ptx").read_text().replace(".address_size 64", ".address_size 64\n.extern .shared .align 16 .b8 smem[];")
    assert not assembler.is_relocatable(parse_module(shared))


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
def test_check_assembles_relocatable_ptx_with_c():
    proc = cli("instrument", TARGETS / "rdc_extern_var.sm80.ptx", "-p", "gmem_bytes", "--check", "-o", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    assert "ptxas: ok for sm_80, relocatable (-c)" in proc.stderr


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
def test_check_of_an_rdc_module_with_calls():
    text = (TARGETS / "rdc.sm80.ptx").read_text()
    try:
        parse_module(text)
    except Exception as e:  # registers without '%' (issue 10, class 1) are the parser's part
        pytest.skip(f"the parser does not read this nvcc output yet: {str(e).splitlines()[0]}")
    proc = cli("instrument", TARGETS / "rdc.sm80.ptx", "-p", "block_sched", "--check", "-o", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    assert "relocatable (-c)" in proc.stderr


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
def test_check_of_a_target_ptxas_no_longer_builds():
    proc = cli("instrument", TARGETS / "sm52_v50.ptx", "-p", "block_sched", "--check", "-o", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    assert "ptxas: ok for sm_75" in proc.stderr


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
def test_check_is_skipped_when_ptxas_refuses_the_unprobed_module(tmp_path):
    probe = tmp_path / "count.toml"
    probe.write_text(COUNT)
    proc = cli("instrument", TARGETS / "sm10_v14_32bit.ptx", "-p", probe, "--check", "-o", tmp_path / "o.ptx")
    assert proc.returncode == 1, proc.stderr  # a check that could not be made is not a pass (issue 26)
    assert "ptxas: check skipped: ptxas refuses the unprobed module as well" in proc.stderr
    assert "32-Bit compilation is no longer supported" in proc.stderr


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
def test_check_still_fails_on_bad_probed_code(tmp_path):
    """A skipped check is only for modules ptxas refuses anyway: our own errors are still errors."""
    module = parse_module((TARGETS / "sm52_v50.ptx").read_text())
    bad = (TARGETS / "sm52_v50.ptx").read_text().replace("\tret;", "\tmul.u32 %r2, %r1, %r1;\n\tret;")
    result = assembler.check(bad, module, original=(TARGETS / "sm52_v50.ptx").read_text())
    assert not result.ok and result.skipped is None and result.arch == "sm_75"
    assert "mul" in result.stderr


def test_module_without_target_is_named_clearly():
    proc = cli("instrument", TARGETS / "no_target.ptx", "-p", "block_sched")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"neutrino: {TARGETS / 'no_target.ptx'}:5: error: PTX module without a .target directive")
    assert "unrecognised image" not in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- generated: old modules never come out broken

VERSIONS = ["1.4", "2.0", "2.3", "3.0", "3.1", "3.2", "4.0", "4.1", "4.3", "5.0", "6.0"]
FIRST_VERSION = {"sm_10": "1.4", "sm_11": "1.4", "sm_13": "2.3", "sm_20": "2.3", "sm_30": "3.0", "sm_35": "3.1", "sm_50": "4.0"}  # that knows the target
OLD_MODULES = [
    (base, version, target)
    for base, targets in (("sm10_v14.ptx", ["sm_10", "sm_11"]), ("sm13_v23.ptx", ["sm_13"]), ("sm20_v30.ptx", ["sm_20", "sm_30", "sm_35", "sm_50"]),
                          ("sm20_v30_mad.ptx", ["sm_20", "sm_30", "sm_35", "sm_50"]))
    for target in targets
    for version in VERSIONS
    if formats.parse_version(version) >= formats.parse_version(FIRST_VERSION[target])
    # mad.f32 without rounding: PTX before 3.2 only
    and (base != "sm20_v30_mad.ptx" or formats.parse_version(version) < (3, 2))
]
NEEDY = ["popc.b32 %w, %w;", "lop3.b32 %w, %w, %w, %w, 0x96;", "bfe.u32 %w, %w, 1, 4;", "add.u32 %w, %w, 1;",
         "testp.finite.f32 %q, %f;", "mad.rn.f32 %f, %f, %f, %f;"]


def _special_reads() -> list[str]:
    reads = []
    for name, spec in formats.SPECIAL.items():
        register = "%d" if spec.bits == 64 else "%w"
        full = f"{name}.x" if spec.components else name
        reads.append(f"mov.{'u64' if spec.bits == 64 else 'u32'} {register}, {full};")
    return reads


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
@settings(max_examples=150 if LONG else 20, deadline=None)
@given(
    module=st.sampled_from(OLD_MODULES),
    reads=st.lists(st.sampled_from(_special_reads()), min_size=1, max_size=3),
    needy=st.lists(st.sampled_from(NEEDY), max_size=2),
    saves=st.booleans(),
)
def test_old_modules_are_refused_or_assemble(module, reads, needy, saves):
    base, version, target = module
    text = re.sub(r"(?m)^(\s*)\.version .*$", rf"\g<1>.version {version}", (TARGETS / base).read_text())
    text = re.sub(r"(?m)^(\s*)\.target .*$", rf"\g<1>.target {target}", text)
    try:
        ptxas(text, "sm_75")
    except AssertionError:
        assume(False)  # not a module ptxas takes in the first place
    body = ".reg .b32 %w; .reg .b64 %d; .reg .f32 %f; .reg .pred %q; " + " ".join(reads + needy)
    after = '\nafter = """SAVE.u64 {%d, %clock};"""' if saves else ""
    probe = f'[old]\nposition = "kernel"\n{"datamodel = " + chr(34) + "thread:16" + chr(34) if saves else ""}\nbefore = """{body}"""{after}\n'
    note(probe)
    try:
        out = instrument(text, parse_probes(probe, "old.toml"), source=base).ptx
    except (ProbeError, InstrumentError) as e:
        assert "error:" in str(e) and ("old.toml:" in str(e) or f"{base}:" in str(e)), str(e)
        event("refused")
        return
    event("raised .version" if parse_module(out).version != version else "kept .version")
    event("raised .target" if parse_module(out).target != target else "kept .target")
    ptxas(out, "sm_75")


# ---------------------------------------------------------------- sum maps on targets without warp operations


@pytest.mark.parametrize("tool", ["gmem_bytes", "tensorop"])
@pytest.mark.parametrize("name", ["sm20_v30.ptx", "sm20_v30_mad.ptx"])
def test_sum_maps_add_lane_by_lane_before_sm_30(tool, name):
    """activemask/shfl.sync need sm_30: an sm_2x module's sum map adds per lane, and .target/.version stay."""
    original = parse_module((TARGETS / name).read_text())
    out = instrument((TARGETS / name).read_text(), load_probes(tool), source=name).ptx
    module = parse_module(out)
    assert (module.version, module.target) == (original.version, original.target)
    assert "activemask" not in out and "shfl.sync" not in out
    assert "red.global.add.u64" in out
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


def test_sum_maps_add_lane_by_lane_when_the_version_cannot_be_raised():
    """sm_30 has warp operations, but raising .version 3.0 to 6.2 would retire mad.f32: no warp code then."""
    text = (TARGETS / "sm20_v30_mad.ptx").read_text().replace(".target sm_20", ".target sm_30")
    out = instrument(text, load_probes("gmem_bytes"), source="m.ptx").ptx
    assert parse_module(out).version == "3.0"
    assert "activemask" not in out
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


def test_sum_maps_reduce_across_the_warp_from_sm_30():
    text = (TARGETS / "sm20_v30.ptx").read_text().replace(".target sm_20", ".target sm_30")
    out = instrument(text, load_probes("gmem_bytes"), source="m.ptx").ptx
    assert parse_module(out).version == "6.2"  # activemask's version
    assert "activemask.b32" in out and "shfl.sync.bfly.b32" in out
    if HAVE_PTXAS:
        ptxas(out, "sm_75")


# ---------------------------------------------------------------- raising an sm_1x target keeps the machine code


def text_sections(cubin: bytes) -> dict[str, bytes]:
    """The `.text.*` sections of an ELF64 cubin: the machine code, kernel by kernel."""
    import struct

    (table,) = struct.unpack_from("<Q", cubin, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, table + i * entry_size) for i in range(count)]
    names = sections[names_index][4]

    def name(offset: int) -> str:
        return cubin[names + offset : cubin.index(b"\0", names + offset)].decode()

    return {name(s[0]): cubin[s[4] : s[4] + s[5]] for s in sections if name(s[0]).startswith(".text")}


def machine_code(ptx: str) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        proc = subprocess.run(["ptxas", "-arch=sm_75", str(Path(tmp) / "k.ptx"), "-o", str(Path(tmp) / "k.cubin")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return text_sections((Path(tmp) / "k.cubin").read_bytes())


def raised(text: str, sm: int) -> str:
    """The module with only its target raised (no probes): what fit-target does to the original code."""
    from neutrino.isa.ptx import print_module
    from neutrino.passes.target import TARGET_VERSION, raise_target, raise_version

    module = parse_module(text, "m.ptx")
    need = formats.Requirement(TARGET_VERSION[sm], sm)
    raise_target(module, need, [])
    raise_version(module, need)
    return print_module(module)


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
@pytest.mark.parametrize("name, sm", [("sm10_v14.ptx", 20), ("sm10_v14.ptx", 30), ("sm13_v23.ptx", 20), ("sm20_v30.ptx", 30)])
def test_raising_the_target_keeps_the_machine_code(name, sm):
    text = (TARGETS / name).read_text()
    out = raised(text, sm)
    assert parse_module(out).target == f"sm_{sm}"
    assert machine_code(out) == machine_code(text)


def test_sm1x_flush_to_zero_is_written_out():
    out = raised((TARGETS / "sm10_v14.ptx").read_text(), 20)
    module = parse_module(out)
    assert (module.version, module.target) == ("2.0", "sm_20")
    assert ".target sm_20\n" in out  # map_f64_to_f32: refused from sm_13 on, and ptxas 13 keeps f64 anyway
    opcodes = [str(i.opcode) for f in module.functions() for i in ir.instructions(f.body)]
    for expected in ("mul.ftz.f32", "abs.ftz.f32", "mad.rn.ftz.f32", "sub.ftz.f32", "neg.ftz.f32", "min.ftz.f32",
                     "div.full.ftz.f32", "sin.approx.ftz.f32", "setp.gt.ftz.f32", "cvt.rni.ftz.s32.f32"):
        assert expected in opcodes
    # PTX 1.4's cvt between f32 and f64 did not flush; cvt from an integer has nothing to flush
    assert {"cvt.f64.f32", "cvt.rn.f32.f64", "cvt.rn.f32.s32", "selp.f32", "ld.global.f32"} <= set(opcodes)


@pytest.mark.parametrize(
    "opcode, legacy, expected",
    [("add.f32", False, "add.ftz.f32"), ("add.rn.sat.f32", False, "add.rn.ftz.sat.f32"), ("mad.f32", False, "mad.rn.ftz.f32"),
     ("mad.sat.f32", False, "mad.rn.ftz.sat.f32"), ("setp.lt.and.f32", False, "setp.lt.and.ftz.f32"),
     ("set.gt.u32.f32", False, "set.gt.ftz.u32.f32"), ("slct.f32.f32", False, "slct.ftz.f32.f32"), ("slct.f32.s32", False, "slct.f32.s32"),
     ("cvt.f64.f32", True, "cvt.f64.f32"), ("cvt.f64.f32", False, "cvt.ftz.f64.f32"), ("cvt.rzi.s32.f32", True, "cvt.rzi.ftz.s32.f32"), ("cvt.rn.f32.s32", False, "cvt.rn.f32.s32"),
     ("add.ftz.f32", False, "add.ftz.f32"), ("add.f64", False, "add.f64"), ("mov.f32", False, "mov.f32"), ("add.s32", False, "add.s32")],
)
def test_explicit_f32_forms(opcode, legacy, expected):
    from neutrino.isa.ptx import ir as ptx_ir
    from neutrino.passes.target import _explicit_f32

    assert _explicit_f32(ptx_ir.opcode(opcode), legacy) == expected


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
@pytest.mark.parametrize("opcode", ["add.f32", "mad.f32", "setp.lt.and.f32", "set.gt.u32.f32", "slct.f32.f32", "cvt.rzi.s32.f32"])
def test_explicit_f32_forms_assemble_alike(opcode):
    """Each rewritten form compiles for sm_20 to what the plain one compiled to for sm_10."""
    operands = {"add": "%f3, %f1, %f2", "mad": "%f3, %f1, %f2, %f1", "setp": "%p1, %f1, %f2, %p2", "set": "%r1, %f1, %f2",
                "slct": "%f3, %f1, %f2, %f1", "cvt": "%r1, %f1"}[opcode.split(".")[0]]
    text = (".version 2.3\n.target sm_10\n.address_size 64\n.entry k(.param .u64 p)\n{\n"
            "\t.reg .f32 %f<4>; .reg .u64 %rd<2>; .reg .u32 %r<2>; .reg .pred %p<3>;\n"
            "\tld.param.u64 %rd1, [p];\n\tld.global.f32 %f1, [%rd1];\n\tld.global.f32 %f2, [%rd1+4];\n\tmov.f32 %f3, 0f00000000;\n"
            "\tmov.u32 %r1, 0;\n\tsetp.eq.u32 %p2, %r1, 0;\n"
            f"\t{opcode} {operands};\n\tselp.f32 %f3, %f3, %f2, %p1;\n\tst.global.f32 [%rd1], %f3;\n\tst.global.u32 [%rd1+8], %r1;\n\texit;\n}}\n")
    out = raised(text, 20)
    assert machine_code(out) == machine_code(text)


def test_a_tex_variable_blocks_raising_an_sm1x_target():
    text = (TARGETS / "sm10_v14.ptx").read_text().replace("\t.func (.reg", "\t.tex .u64 tex_ref;\n\n\t.func (.reg", 1)
    with pytest.raises(InstrumentError, match=r"^m\.ptx:9: error: the instrumentation needs sm_20, but this sm_10 module "
                                              r"cannot be raised to it: its \.tex variables"):
        instrument(text, load_probes("block_sched"), source="m.ptx")


def test_a_module_scoped_local_blocks_raising_the_version_past_the_abi():
    text = (TARGETS / "sm20_v30.ptx").read_text().replace(".version 3.0", ".version 2.3").replace(
        ".address_size 64\n", ".address_size 64\n.local .u32 scratch;\n", 1)
    if HAVE_PTXAS:  # ptxas agrees: fine under 2.3, refused under 3.0
        ptxas(text, "sm_75")
        with pytest.raises(AssertionError, match="not allowed with ABI"):
            ptxas(text.replace(".version 2.3", ".version 3.0"), "sm_75")
    with pytest.raises(InstrumentError, match=r"cannot be raised to 3\.1: a module-scoped \.local variable"):
        instrument(text, parse_probes(TIMER, "probe.toml"), source="m.ptx")
    out = instrument(text, load_probes("gmem_bytes"), source="m.ptx").ptx  # sum maps need nothing newer: kept as is
    assert parse_module(out).version == "2.3"


# ---------------------------------------------------------------- real old-target PTX (issue 30 §3)

OLD_CORPUS = Path(os.environ.get("NEUTRINO_OLD_TARGET_CORPUS", "/work/shared/corpus/old_targets"))
OLD_FILES = sorted(OLD_CORPUS.glob("*.ptx")) if OLD_CORPUS.is_dir() else []
# Files whose target cannot be raised, with the reason the refusal must give.
OLD_REFUSED = {"tests_cuda3.2_data_simpleTexture_kernel.ptx": "its .tex variables are refused from PTX 1.5 on"}


@pytest.mark.skipif(not OLD_FILES or not HAVE_PTXAS, reason="needs the old-target sample (README there) and ptxas")
@pytest.mark.parametrize("tool", ["gmem_bytes", "tensorop", "block_sched", "dmat"])
@pytest.mark.parametrize("path", OLD_FILES, ids=lambda p: p.name)
def test_old_target_corpus_sample(path, tool):
    """sm_10/sm_20 modules of nvcc 2.x-4.x instrument into PTX that ptxas accepts (sum maps included)."""
    text = path.read_text()
    if path.name in OLD_REFUSED:
        with pytest.raises(InstrumentError, match=OLD_REFUSED[path.name]):
            instrument(text, load_probes(tool), source=path.name)
        return
    out = instrument(text, load_probes(tool), source=path.name).ptx
    ptxas(out, "sm_75")
    before, after = formats.parse_target(parse_module(text).target), formats.parse_target(parse_module(out).target)
    assert after == max(before, 20)  # sm_1x raised to what cvta/%clock64 need; sm_2x kept (sum maps add per lane)
