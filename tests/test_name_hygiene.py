"""Issue 30 §2 and §5: the names the engine adds meet none of the program's, and limits are checked
where the input is read (parameter space, map and field names, ASCII digits), with located errors."""

from __future__ import annotations

import functools
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import neutrino.trace as nt
import fuzzing as fz
from helpers import HAVE_PTXAS, ptxas
from neutrino.engine import instrument
from neutrino.errors import InstrumentError, ProbeError
from neutrino.isa.ptx import ir, parse_module
from neutrino.isa.ptx.symbols import NameAllocator
from neutrino.language import compile_source
from neutrino.probefile import parse_probes
from neutrino.toolbox import load_probes

REPO = Path(__file__).resolve().parent.parent
HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"
TOOLS = ("block_sched", "dmat")
needs_ptxas = pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")


def kernel(params=(".param .u64 k_param_0",), body="", before="", name="k") -> str:
    """An entry that loads its output pointer, runs `body` (which sets %rd2) and stores %rd2."""
    plist = ",\n\t".join(params)
    return (f"{before}\n.visible .entry {name}(\n\t{plist}\n)\n{{\n\t.reg .b64 %rd<4>;\n\t.reg .b32 %r<3>;\n"
            f"\tld.param.u64 %rd1, [k_param_0];\n\tcvta.to.global.u64 %rd3, %rd1;\n{body}\n"
            f"\tst.global.u64 [%rd3], %rd2;\n\tret;\n}}\n")


REPRODUCERS = {
    "global_nt_lane": HEAD + kernel(before=".global .u32 %nt_lane;",
                                    body="\tld.global.u32 %r1, [%nt_lane];\n\tcvt.u64.u32 %rd2, %r1;"),
    "shared_nt_warp": HEAD + kernel(before=".shared .u32 %nt_warp;",
                                    body="\tld.shared.u32 %r1, [%nt_warp];\n\tcvt.u64.u32 %rd2, %r1;"),
    "param_nt_tid_x": HEAD + kernel(params=(".param .u64 k_param_0", ".param .u32 %nt_tid_x"),
                                    body="\tld.param.u32 %r1, [%nt_tid_x];\n\tcvt.u64.u32 %rd2, %r1;"),
    "label_nt_lane": HEAD + kernel(body="\tmov.u64 %rd2, 7;\n\tbra.uni %nt_lane;\n%nt_lane:\n\tadd.u64 %rd2, %rd2, 1;"),
    "param_buffer_name": HEAD + kernel(
        params=(".param .u64 k_param_0", ".param .u64 k__nt_buf_block_sched", ".param .u64 k__nt_buf_dmat",
                ".param .u32 k__nt_cap_dmat"),
        body="\tld.param.u64 %rd2, [k__nt_buf_block_sched];"),
    "entry_k__nt_count": HEAD + ".visible .entry k__nt_count(\n\t.param .u64 x\n)\n{\n\tret;\n}\n"
                         + kernel(body="\tmov.u64 %rd2, 3;"),
    "global_nt_blin": HEAD + kernel(before=".global .u64 %nt_blin;", body="\tld.global.u64 %rd2, [%nt_blin];"),
    "register_range_nt_": HEAD + kernel(body="\t.reg .b32 %nt_<2>;\n\tmov.u32 %nt_1, 9;\n\tcvt.u64.u32 %rd2, %nt_1;"),
}


@functools.cache
def tool(name: str):
    return load_probes(name)


@pytest.mark.parametrize("probe", TOOLS)
@pytest.mark.parametrize("case", sorted(REPRODUCERS))
def test_engine_names_meet_none_of_the_programs(case, probe):
    ptx = REPRODUCERS[case]
    module, kernels, text = fz.instrument_in_memory(ptx, tool(probe))
    assert "k" in kernels
    assert not fz.name_clashes(ptx, module, kernels)  # no shared name; the original instructions all kept, in order
    result = instrument(ptx, tool(probe), source=f"{case}.ptx")
    assert result.ptx == text and result.kernels == kernels
    probed = parse_module(result.ptx)
    for name, desc in result.kernels.items():  # what kernel.json tells the runtime is what the module has
        params = [p.name for p in probed.function(name).params]
        assert params[desc["original_params"]:] == [p["name"] for p in desc["params"]]
        if desc["count_kernel"]:
            counting = probed.function(desc["count_kernel"])
            assert counting is not None and counting.is_entry
            assert [p.name for p in counting.params] == params
    if HAVE_PTXAS:
        ptxas(result.ptx)


def test_global_variable_is_not_shadowed_by_our_register():
    """The program's `ld.global.u64 %rd2, [%nt_blin]` must still read the variable, not the block index."""
    result = instrument(REPRODUCERS["global_nt_blin"], tool("block_sched"))
    module = parse_module(result.ptx)
    k = module.function("k")
    declared = {n for _, _, s in ir.walk(k.body) if type(s) is ir.RegDecl for n in s.names}
    assert "%nt_blin" not in declared and "%nt1_blin" in declared  # our family moved to %nt1_
    loads = [i for i in ir.instructions(k.body) if i.origin is None and i.opcode.text == "ld.global.u64"]
    assert [str(o) for o in loads[0].operands] == ["%rd2", "[%nt_blin]"]
    assert any(type(i) is ir.Directive and i.text.startswith(".global .u64 %nt_blin") for i in module.items)


def test_buffer_parameter_and_counting_entry_get_fresh_names():
    result = instrument(REPRODUCERS["param_buffer_name"], tool("dmat"))
    desc = result.kernels["k"]
    assert [p["name"] for p in desc["params"]] == ["k__nt_buf_dmat_1", "k__nt_cap_dmat_1"]
    text = re.sub(r"[ \t]+", " ", result.ptx)
    assert "ld.param.u64 %nt_buf_dmat, [k__nt_buf_dmat_1];" in text
    assert "ld.param.u32 %nt_cap_dmat, [k__nt_cap_dmat_1];" in text
    assert "ld.param.u64 %rd2, [k__nt_buf_block_sched];" in text  # the program's own read, unchanged
    counted = instrument(REPRODUCERS["entry_k__nt_count"], tool("dmat"), kernel="k")
    assert counted.kernels["k"]["count_kernel"] == "k__nt_count_1"
    assert {f.name for f in parse_module(counted.ptx).entries()} == {"k", "k__nt_count_1"}  # -k prunes the other


def test_allocator_uniques_against_every_table():
    module = parse_module(REPRODUCERS["entry_k__nt_count"] + ".global .u32 k__nt_count_1;\n")
    names = NameAllocator.of(module)
    assert names.fresh_global("k__nt_count") == "k__nt_count_2"
    assert names.fresh_global("k__nt_count") == "k__nt_count_3"  # what it handed out is taken
    k = module.function("k")
    assert names.fresh_local(k, "%rd1") == "%rd1_1"  # `%rd<4>` declares %rd0..%rd3
    assert names.fresh_local(k, "%rd4") == "%rd4"
    assert names.fresh_local(k, "%nt_x") == "%nt_x"
    assert names.fresh_prefix(k) == "%nt1_"  # %nt_x is taken now
    assert names.fresh_prefix(k) == "%nt2_"  # and so is the family just handed out
    with pytest.raises(InstrumentError, match="internal"):  # a name inside our own family: a bug, not a loop
        names.fresh_local(k, "%nt1_y")


# ---------------------------------------------------------------- parameter space


def big_param_kernel(version: str, nbytes: int) -> str:
    head = f".version {version}\n.target sm_80\n.address_size 64\n"
    return head + kernel(params=(".param .u64 k_param_0", f".param .align 8 .b8 k_param_1[{nbytes}]"),
                         body="\tld.param.u64 %rd2, [k_param_1];")


# (version, limit, the largest array that still fits): the kernel's own parameters take 8 + nbytes,
# our 8-byte pointer goes at the next multiple of 8.
LIMITS = [("8.0", 4352, 4336), ("8.1", 32764, 32744)]


@pytest.mark.parametrize("version,limit,fits", LIMITS)
def test_parameter_space_just_fits(version, limit, fits):
    ptx = big_param_kernel(version, fits)
    result = instrument(ptx, tool("block_sched"))
    assert [p["name"] for p in result.kernels["k"]["params"]] == ["k__nt_buf_block_sched"]
    if HAVE_PTXAS:
        ptxas(result.ptx)


@pytest.mark.parametrize("version,limit,fits", LIMITS)
def test_parameter_space_exceeded_is_a_located_refusal(version, limit, fits):
    ptx = big_param_kernel(version, fits + 1)  # one byte more: the pointer moves by 8
    with pytest.raises(InstrumentError) as e:
        instrument(ptx, tool("block_sched"), source="big.ptx")
    message = str(e.value)
    assert message.startswith("big.ptx:5: error: entry k:") and f"over the {limit}-byte parameter space" in message
    total = (8 + fits + 1 + 7) // 8 * 8 + 8
    assert f"take {8 + fits + 1} bytes" in message and f"make {total}" in message and total > limit
    if HAVE_PTXAS:  # the limit is ptxas's: with our parameter appended by hand, it refuses too
        by_hand = ptx.replace(f"k_param_1[{fits + 1}]", f"k_param_1[{fits + 1}],\n\t.param .u64 extra")
        proc = _ptxas_proc(by_hand)
        assert proc.returncode != 0 and "parameter space" in proc.stderr
        assert _ptxas_proc(ptx).returncode == 0


def _ptxas_proc(ptx: str) -> subprocess.CompletedProcess:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        return subprocess.run(["ptxas", "-arch=sm_80", str(src), "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True)


def test_parameter_space_counts_the_cap_parameter_too():
    """dmat adds a u64 pointer and a u32 cap: 12 bytes after 8-byte alignment."""
    fits = instrument(big_param_kernel("8.0", 4328), tool("dmat"))  # 8 + 4328 = 4336, + 8 + 4 = 4348
    assert len(fits.kernels["k"]["params"]) == 2
    if HAVE_PTXAS:
        ptxas(fits.ptx)
    with pytest.raises(InstrumentError, match="make 4356, over the 4352-byte"):  # 4337 → 4344, + 8 + 4
        instrument(big_param_kernel("8.0", 4329), tool("dmat"))


def cli(*args):
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin:/usr/local/bin:" + __import__("os").environ.get("PATH", "")}
    return subprocess.run([sys.executable, "-m", "neutrino.cli", *map(str, args)], capture_output=True, text=True, env=env)


def test_cli_refuses_parameter_space_located(tmp_path):
    src = tmp_path / "big.ptx"
    src.write_text(big_param_kernel("8.0", 4352))
    proc = cli("instrument", src, "-p", "block_sched", "-o", tmp_path / "o.ptx")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{src}:5: error: entry k:" in proc.stderr and "parameter space" in proc.stderr


def test_runtime_falls_back_when_parameters_do_not_fit(tmp_path):
    """At run time the launch runs the original kernel, with one fallback line in the event log."""
    from test_runtime_core import NOT_HANDLED, events, finish, make_runtime, req

    rt, drv, shim = make_runtime(tmp_path)
    ptx = big_param_kernel("8.0", 4352 - 8).replace(".entry k(", ".entry saxpy4(").replace("[k_param_", "[saxpy4_param_")
    ptx = ptx.replace("k_param_0,", "saxpy4_param_0,").replace("k_param_1[", "saxpy4_param_1[")
    rt.on_module("cuModuleLoadData", 0x100, ptx.encode())
    assert rt.on_function("module_function", 0x100, "saxpy4", 0x200)
    r, keep = req()
    assert rt.on_launch(r) == NOT_HANDLED and not drv.launches
    finish(rt)
    (fallback,) = events(rt, "fallback")
    assert fallback["stage"] == "instrument" and "parameter space" in fallback["reason"]
    assert "\n" not in fallback["reason"]


@pytest.mark.parametrize("taken_by", ["global", "entry"])
def test_runtime_launches_the_counting_entry_it_was_told(tmp_path, monkeypatch, taken_by):
    """The module already has a `saxpy4__nt_count`: ours is `saxpy4__nt_count_1`, found through kernel.json.
    An entry of that name is left out of the text instrumented for saxpy4 (entry_only): ours may
    then take the name, and is still the one launched (code of the counting protocol: kernel.json
    without the ring layout)."""
    from test_runtime_core import COUNT_PROBE, VEC_PTX, finish, make_runtime, req, without_ring_layout

    without_ring_layout(monkeypatch)

    rt, drv, _ = make_runtime(tmp_path, probe=COUNT_PROBE)
    if taken_by == "global":
        ptx = VEC_PTX + "\n.visible .global .u32 saxpy4__nt_count;\n"
    else:
        ptx = VEC_PTX + "\n.visible .entry saxpy4__nt_count(\n\t.param .u64 x\n)\n{\n\tret;\n}\n"
    rt.on_module("cuModuleLoadData", 0x100, ptx.encode())
    assert rt.on_function("module_function", 0x100, "saxpy4", 0x200)
    r, keep = req()
    assert rt.on_launch(r) == 0
    finish(rt)
    counting, probed = (drv.functions[f] for _, f, *_ in drv.launches)
    assert probed[1] == "saxpy4" and counting[0] == probed[0] != 0x100  # both from our module, never the program's
    if taken_by == "global":
        assert counting[1] == "saxpy4__nt_count_1"
    else:  # the program's entry of that name is not in the text instrumented for saxpy4
        assert counting[1] in ("saxpy4__nt_count", "saxpy4__nt_count_1")


# ---------------------------------------------------------------- map and field names

ARRAY_MAP = '''[map.{map}]
level = "thread"
cap = 1
fields = ["{field}:u32"]

[probe.p]
position = "ld.global"
after = """SAVE [ m ] {{%laneid}};"""
'''
VEC = (REPO / "tests/data/corpus/nvcc/vec.sm90.ptx").read_text()


@pytest.mark.parametrize("map_key,problem", [
    ('"%m"', "map name '%m' is not an identifier"),
    ('"m\\u0000x"', "map name 'm\\x00x' is not an identifier"),
    ('"m-x"', "map name 'm-x' is not an identifier"),
    ('"é"', "map name 'é' is not an identifier"),
    ("m" * 64, "is 64 bytes long: a result file holds at most 63"),
])
def test_map_names_refused_where_read(map_key, problem):
    text = ARRAY_MAP.format(map=map_key, field="a")
    with pytest.raises(ProbeError) as e:
        parse_probes(text, "probe.toml")
    first = str(e.value).splitlines()[0]
    assert first.startswith("probe.toml:1:") and problem in first


def test_field_name_length_refused_where_read():
    with pytest.raises(ProbeError) as e:
        parse_probes(ARRAY_MAP.format(map="m", field="f" * 32), "probe.toml")
    assert str(e.value).startswith("probe.toml:4:") and "field name 'ffff" in str(e.value) and "at most 31" in str(e.value)


def test_longest_names_are_accepted_and_writable():
    """63-byte map and 31-byte field names instrument, and the runtime's writer takes them."""
    text = ARRAY_MAP.format(map="m" * 63, field="f" * 31).replace("SAVE [ m ]", "SAVE [ " + "m" * 63 + " ]")
    probes = parse_probes(text, "probe.toml")
    result = instrument(VEC, probes, kernel="saxpy4")
    if HAVE_PTXAS:
        ptxas(result.ptx)
    (map_info,) = result.kernels["saxpy4"]["maps"]
    units, nbytes = nt.map_buffer_bytes(map_info, (1, 1, 1), (32, 1, 1))
    section = nt.MapSection.of(map_info, units, 1, np.zeros(nbytes, np.uint8))
    nt.append_frame(io.BytesIO(), grid=(1, 1, 1), block=(32, 1, 1), shared_bytes=0, maps=[section])


def test_compact_form_names_checked():
    long_register = "%" + "r" * 40
    compact = f'["mem-trace"]\nposition = "ld.global"\ndatamodel = "thread:8"\nafter = """SAVE.u32 {{%laneid, %smid}};"""\n'
    with pytest.raises(ProbeError) as e:
        parse_probes(compact, "c.toml")
    assert str(e.value).startswith("c.toml:1:") and "[probe mem-trace] map name 'mem-trace'" in str(e.value)
    field = f'[p]\nposition = "ld.global"\ndatamodel = "thread:4"\nafter = """.reg .b32 {long_register}; mov.u32 {long_register}, 1; SAVE.u32 {{{long_register}}};"""\n'
    with pytest.raises(ProbeError) as e:
        parse_probes(field, "c.toml")
    assert str(e.value).startswith("c.toml:4:") and "field name 'rrrr" in str(e.value) and "40 bytes" in str(e.value)
    dollar = field.replace(long_register, "%a$b")
    with pytest.raises(ProbeError, match=r"c.toml:4:\d+: error: \[probe p\] field name 'a\$b' is not an identifier"):
        parse_probes(dollar, "c.toml")


DSL = '''from neutrino import Map, probe
import neutrino.language as nl


@Map(level="thread", type="array", size=8, cap=1)
class {map}:
    {field}: nl.u32
    b: nl.u32


@probe(pos="ld.global", level="thread", after=True)
def p():
    {map}.save(nl.clock(), nl.clock())
'''


@pytest.mark.parametrize("map_name,field,line,problem", [
    ("café", "a", 6, "map name 'café' is not an identifier"),
    ("m" * 64, "a", 6, "is 64 bytes long"),
    ("m", "a" * 32, 7, "field name 'aaaa"),
])
def test_dsl_names_checked_at_the_python_line(map_name, field, line, problem):
    from neutrino.language.errors import DslError

    with pytest.raises(DslError) as e:
        compile_source(DSL.format(map=map_name, field=field), "t.py")
    assert str(e.value).startswith(f"t.py:{line}:") and problem in str(e.value)


def test_cli_refuses_bad_map_name_located(tmp_path):
    probe = tmp_path / "p.toml"
    probe.write_text(ARRAY_MAP.format(map='"%m"', field="a"))
    proc = cli("instrument", REPO / "tests/data/corpus/nvcc/vec.sm90.ptx", "-p", probe, "-o", tmp_path / "o.ptx")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{probe}:1:" in proc.stderr and "is not an identifier" in proc.stderr


# ---------------------------------------------------------------- ASCII digits


@pytest.mark.parametrize("text,where,problem", [
    ('[probe.p]\nposition = "kernel"\nbefore = """.reg .b32 %a; add.u32 %a, %a, ٣;"""\n', "p.toml:3:", "non-ASCII digit '٣'"),
    ('[probe.p]\nposition = "kernel"\nbefore = """.reg .b32 %a; mov.u32 %a, １２;"""\n', "p.toml:3:", "non-ASCII digit '１'"),
    ('[p]\nposition = "ld.global"\ndatamodel = "thread:８"\nafter = "SAVE.u32 {%smid};"\n', "p.toml:3:", "ASCII digits 0-9"),
    ('[map.m]\nlevel = "thread"\ncap = "１２"\nfields = ["a:u32"]\n[probe.p]\nposition = "ld.global"\n'
     'after = """SAVE [ m ] {%laneid};"""\n', "p.toml:3:", "cap must be a positive integer"),
    ('[p]\nposition = "ld.global"\ndatamodel = "hist:linear:0:１２:1"\nafter = "SAVE.u64 {%clock64};"\n', "p.toml:3:",
     "malformed buckets"),
])
def test_non_ascii_digits_refused(text, where, problem):
    with pytest.raises(ProbeError) as e:
        parse_probes(text, "p.toml")
    first = str(e.value).splitlines()[0]
    assert first.startswith(where) and problem in first


def test_immediate_value_takes_ascii_digits_only():
    assert ir.Immediate("12").value == 12 and ir.Immediate("012").value == 10
    assert ir.Immediate("٣").value is None and ir.Immediate("１２").value is None
    with pytest.raises(ValueError):
        nt.Buckets.parse("linear:0:１２:1")


@needs_ptxas
def test_ascii_digits_still_accepted():
    probes = parse_probes('[probe.p]\nposition = "kernel"\nbefore = """.reg .b32 %a; add.u32 %a, %a, 3;"""\n', "p.toml")
    ptxas(instrument(VEC, probes).ptx)


def test_kernel_json_records_chosen_names(tmp_path):
    src = tmp_path / "k.ptx"
    src.write_text(REPRODUCERS["entry_k__nt_count"])
    info = tmp_path / "i.json"
    proc = cli("instrument", src, "-p", "dmat", "-o", tmp_path / "o.ptx", "--info", info)
    assert proc.returncode == 0, proc.stderr
    kernels = json.loads(info.read_text())["kernels"]
    assert kernels["k"]["count_kernel"] == "k__nt_count_1"
    assert kernels["k__nt_count"]["count_kernel"] == "k__nt_count__nt_count"
