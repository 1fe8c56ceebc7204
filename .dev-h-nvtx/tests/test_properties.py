"""Generated probes on corpus kernels: ptxas-valid and keeping every original instruction, or refused.

Set NEUTRINO_HYPOTHESIS=long for a longer run.
"""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neutrino.engine import instrument
from neutrino.errors import ProbeError
from neutrino.isa.ptx import parse_module
from neutrino.probefile import parse_probes

from helpers import CORPUS, HAVE_PTXAS, assert_keeps_original, ptxas

LONG = os.environ.get("NEUTRINO_HYPOTHESIS") == "long"
EXAMPLES = 200 if LONG else 25

REGS = {"%a": "b32", "%b": "b32", "%c": "b64", "%d": "b64", "%q": "pred"}
SOURCES32 = ["%a", "%b", "%smid", "%laneid", "%tid.x", "7", "0x10"]
SOURCES64 = ["%c", "%d", "%clock64", "%globaltimer", "-1"]
HELPER64 = ["ADDR", "IN1", "OUT"]


@st.composite
def instruction(draw, at_instruction: bool, where: str):
    src64 = SOURCES64 + ([h for h in HELPER64 if h != "OUT" or where == "after"] if at_instruction else [])
    kind = draw(st.sampled_from(["alu32", "alu64", "cvt", "setp", "selp", "guarded"]))
    if kind == "alu32":
        op = draw(st.sampled_from(["add.u32", "sub.u32", "mul.lo.u32", "and.b32", "or.b32", "xor.b32", "min.u32", "max.u32", "rem.u32", "div.u32"]))
        dst = draw(st.sampled_from(["%a", "%b"]))
        return f"{op} {dst}, {draw(st.sampled_from(SOURCES32))}, {draw(st.sampled_from(SOURCES32))};"
    if kind == "alu64":
        op = draw(st.sampled_from(["add.u64", "sub.u64", "mul.lo.u64", "and.b64", "xor.b64", "shr.u64", "shl.b64"]))
        b = draw(st.sampled_from(SOURCES32 if op.startswith("sh") else src64))
        if op.startswith("sh") and b.startswith("%") and b not in ("%a", "%b"):
            b = "%a"
        return f"{op} {draw(st.sampled_from(['%c', '%d']))}, {draw(st.sampled_from(src64))}, {b};"
    if kind == "cvt":
        return draw(st.sampled_from(["cvt.u64.u32 %c, %a;", "cvt.u32.u64 %b, %d;", "mov.u32 %a, %smid;", "mov.u64 %d, %clock64;"]))
    if kind == "setp":
        return f"setp.lt.u32 %q, {draw(st.sampled_from(SOURCES32))}, {draw(st.sampled_from(SOURCES32))};"
    if kind == "selp":
        return "selp.u64 %c, %c, %d, %q;"
    return f"@{draw(st.sampled_from(['%q', '!%q']))} add.u64 %c, %c, 1;"


@st.composite
def probe_file(draw):
    position = draw(st.sampled_from(["kernel", "ld.global", "st.global", "ld.global:st.global", "add:mul", "bar", "cvt", "setp", "bra"]))
    where = draw(st.sampled_from(["before", "after"]))
    at_instruction = position != "kernel"
    body = [draw(instruction(at_instruction, where)) for _ in range(draw(st.integers(0, 6)))]
    level = draw(st.sampled_from(["thread", "warp", "block"]))
    width = draw(st.sampled_from(["u32", "u64"]))
    saved = draw(st.lists(st.sampled_from(["%a", "%c", "%smid", "%clock64", "%q"] + (["ADDR", "BYTES"] if at_instruction else [])), min_size=1, max_size=4))
    cap = draw(st.sampled_from(["", ":1", ":3", ":count"]))
    record = draw(st.sampled_from([8, 16, 32]))
    body.append(f"SAVE.{width} {{{', '.join(saved)}}};")
    decls = " ".join(f".reg .{t} {r};" for r, t in REGS.items())
    snippet = decls + "\n" + "\n".join(body)
    return f'[gen]\nposition = "{position}"\ndatamodel = "{level}:{record}{cap}"\n{where} = """{snippet}"""\n'


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=probe_file(), path=st.sampled_from(CORPUS))
def test_generated_probes_instrument_or_are_refused(text, path):
    try:
        probes = parse_probes(text, "gen.toml")
    except ProbeError as e:
        assert "gen.toml:" in str(e) and "[probe gen]" in str(e)
        return
    ptx = path.read_text()
    result = instrument(ptx, probes, source=str(path))
    entries = [f.name for f in parse_module(ptx).entries()]
    assert_keeps_original(ptx, result.ptx, entries)
    ptxas(result.ptx)
