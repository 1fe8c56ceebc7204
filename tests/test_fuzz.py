"""Fuzzing every input Neutrino reads: no traceback, no hang, and ptxas accepts what we accept.

Mutations of the project's own files (tests/fuzzing.py says which and how) go
through the real entry points in-process, each under a time limit
(NEUTRINO_FUZZ_CASE_SECONDS, default 5 s; a hang fails the test). Every case
must end in our own message and a non-zero exit, or be accepted; every probed
module `instrument` accepts is assembled by ptxas (in parallel, after the
cases; in the default profile a sample of them) unless ptxas refuses the
unprobed module too.

The default profile is deterministic and bounded for CI; NEUTRINO_FUZZ=long
runs twenty times more cases, with random seeds (tests/fuzz_campaign.py runs an
open-ended campaign and counts outcomes instead of stopping at the first).
"""

from __future__ import annotations

import argparse
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzzing as fz

LONG = os.environ.get("NEUTRINO_FUZZ") == "long"
SCALE = 20 if LONG else 1
MAX_COUNT = 20000 if LONG else 400  # repetitions and nesting depth a mutation may use (larger ones: test_hardening*.py)
TRACE_MAX_COUNT = 2000 if LONG else 48  # in a trace, each repeated launch is read and analysed: linear, but slow
PTXAS_SAMPLE = None if LONG else 24  # probed modules given to ptxas per test (all of them when long)
# Cases per test in the default profile (times SCALE): 8,200 cases in all (the trace cases twice, one
# per parametrization), about 25 s on a 2-core machine; a case costs a few milliseconds, most of them
# refused early, so thousands of cases fit in CI.
TOML_CASES, PTX_CASES, DSL_CASES, TRACE_CASES = 3000, 3000, 1000, 600
BATCH = 5
# One case in eight runs the command itself (argument parsing, file output, the CLI's own error
# handling); the others call the same functions without the argument parser, which costs more than the case.
VIA_CLI = st.integers(0, 7).map(lambda n: n == 0)


def fuzz_settings(examples: int):
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=not LONG, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


def mutations(ops, max_count: int = MAX_COUNT) -> st.SearchStrategy:
    """One to four mutations; counts (repetitions, nesting depth) are mostly small, one draw in four up to max_count."""
    count = st.one_of(st.integers(0, 8), st.integers(0, 64), st.integers(0, 8), st.integers(0, max_count))
    one = st.tuples(st.sampled_from(ops), st.floats(0, 1), st.floats(0, 1), count, st.integers(0, 1000))
    return st.lists(one, min_size=1, max_size=4)


@pytest.fixture
def fast_argparse(monkeypatch):
    """argparse looks up a translation catalogue for every string of every parser (half of a case's time)."""
    monkeypatch.setattr(argparse, "_", lambda text: text)
    monkeypatch.setattr(argparse, "ngettext", lambda one, many, n: one if n == 1 else many)


def assert_clean(outcomes: list[tuple[str, fz.Outcome]]) -> None:
    bad = [(what, o) for what, o in outcomes if o.status not in ("ok", "refused")]
    assert not bad, "\n\n".join(f"[{what}] {o.status}: {o.detail}" for what, o in bad[:3])


def assert_ptxas_accepts(accepted: list[tuple[str, str]]) -> None:
    sample = accepted if PTXAS_SAMPLE is None else accepted[:: max(1, len(accepted) // PTXAS_SAMPLE)][:PTXAS_SAMPLE]
    rejected = fz.ptxas_rejections(sample)
    assert not rejected, f"ptxas rejected {len(rejected)} probed module(s) we accepted:\n" + rejected[0]


# ---------------------------------------------------------------- probe files


def batches(*case_strategies) -> st.SearchStrategy:
    """BATCH cases per hypothesis example: hypothesis's own cost per example is several cases' worth."""
    return st.lists(st.tuples(*case_strategies), min_size=BATCH, max_size=BATCH)


def check_batch(runs, accepted: list, count: list) -> None:
    """runs: (outcomes, original PTX) per case; the accepted probed modules are kept for ptxas."""
    for outcomes, original in runs:
        count.append(1)
        assert_clean(outcomes)
        first = outcomes[0][1]
        if first.status == "ok":
            accepted.append((first.stdout, original))


@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # Python's own, on mutated DSL source (`1x`): not ours
@pytest.mark.parametrize("suffix,cases", [(".toml", TOML_CASES), (".py", DSL_CASES)])
def test_fuzz_probe_files(tmp_path, fast_argparse, suffix, cases):
    """TOML probe files (built-in, tests/data, the DSL tools compiled) and DSL probe files, mutated, instrumented."""
    texts = [text for _, text in (fz.toml_seeds() if suffix == ".toml" else fz.dsl_seeds())]
    ops = fz.TOML_OPS if suffix == ".toml" else fz.TEXT_OPS
    accepted: list[tuple[str, str]] = []
    count: list[int] = []

    @fuzz_settings(cases // BATCH)
    @given(batches(st.sampled_from(range(len(texts))), mutations(ops), st.sampled_from(fz.TARGET_PTX), VIA_CLI))
    def batch(drawn):
        runs = []
        for seed, muts, target, via_cli in drawn:
            text = texts[seed]
            for m in muts:
                text = fz.mutate_text(text, m, texts)
            runs.append(([("instrument", fz.run_probe_text(text, suffix, target, via_cli, tmp_path))], fz.target_text(target)))
        check_batch(runs, accepted, count)

    batch()
    assert len(count) >= cases * SCALE // 2
    assert_ptxas_accepts(accepted)


# ---------------------------------------------------------------- PTX


def test_fuzz_ptx_modules(tmp_path, fast_argparse):
    """PTX of the corpora (tests/data), mutated, instrumented with built-in and test probes, printed."""
    texts = [text for _, text in fz.ptx_seeds(max_bytes=None if LONG else 6000)]
    accepted: list[tuple[str, str]] = []
    count: list[int] = []

    @fuzz_settings(PTX_CASES // BATCH)
    @given(batches(st.sampled_from(range(len(texts))), mutations(fz.TEXT_OPS), st.sampled_from(fz.PTX_PROBES), VIA_CLI))
    def batch(drawn):
        runs = []
        for seed, muts, probe, via_cli in drawn:
            text = texts[seed]
            for m in muts:
                text = fz.mutate_text(text, m, texts)
            runs.append((fz.run_ptx_text(text, probe, via_cli, tmp_path), text))
        check_batch(runs, accepted, count)

    batch()
    assert len(count) >= PTX_CASES * SCALE // 2
    assert_ptxas_accepts(accepted)


# ---------------------------------------------------------------- traces


@pytest.fixture(scope="module")
def base_trace(tmp_path_factory):
    return fz.write_base_trace(tmp_path_factory.mktemp("base"))


TRACE_BYTE_OPS = fz.BYTE_OPS + ("truncate", "dup_line", "flip")


@pytest.mark.parametrize("files,ops", [
    (fz.TRACE_FILES[1:], TRACE_BYTE_OPS),  # result frames, the launch index, the probe copy: bytewise and linewise
    (("event.log",), fz.JSON_OPS + fz.BYTE_OPS),  # JSON values of other types, dropped keys, spliced, cut, binary lines
], ids=["result-files", "event-log"])
def test_fuzz_trace_directories(base_trace, tmp_path, fast_argparse, files, ops):
    count: list[int] = []

    @fuzz_settings(TRACE_CASES // BATCH)
    @given(batches(st.sampled_from(files), mutations(ops, TRACE_MAX_COUNT), VIA_CLI))
    def batch(drawn):
        runs = [(fz.run_trace_case(base_trace, tmp_path / "work", target, muts, via_cli), "") for target, muts, via_cli in drawn]
        check_batch(runs, [], count)

    batch()
    assert len(count) >= TRACE_CASES * SCALE // 2


# ---------------------------------------------------------------- the harness itself


def test_the_harness_sees_tracebacks_and_hangs():
    """A fuzzer that cannot fail proves nothing: an escaping exception and a hang are both caught."""
    def crash():
        return [][1]

    def spin():
        while True:
            pass

    assert fz.run_entry(crash).status == "traceback"
    assert fz.run_entry(spin, seconds=0.2).status == "hang"
    assert fz.run_entry(lambda: 1).status == "unlocated"  # a non-zero exit must say why


def test_mutations_change_their_input():
    text = "[p]\nposition = \"kernel\"\nafter = \"mov.u32 %r, 1;\"\n"
    for op in fz.TOML_OPS:
        assert fz.mutate_text(text, (op, 0.5, 0.2, 3, 1), [text]) != text or op == "swap_lines", op
    data = bytes(range(64))
    for op in fz.BYTE_OPS:
        assert fz.mutate_bytes(data, (op, 0.5, 0.2, 3, 1)) != data, op


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="needs ptxas")
def test_the_ptxas_oracle_reports_a_rejection():
    original = fz.TARGET_PTX[0].read_text()
    broken = original.replace("ret;", "add.u32 %nosuch, 1, 2;\n\tret;", 1)
    assert fz.ptxas_rejections([(broken, original)])
    assert not fz.ptxas_rejections([(original, original)])


# ---------------------------------------------------------------- name collisions (issue 30 §2)

NAME_CASES = 12  # modules per run (times SCALE), each instrumented with every COLLISION_TOOLS tool


def test_fuzz_name_collisions():
    """Modules declaring engine-like names in random symbol tables: every tool accepts them, ptxas accepts
    the result, and the program's own symbol references are unchanged."""
    from neutrino.toolbox import load_probes

    tools = {name: load_probes(name) for name in fz.COLLISION_TOOLS}
    accepted: list[tuple[str, str]] = []
    symbol = st.tuples(st.sampled_from(fz.ENGINE_LIKE_NAMES), st.sampled_from(fz.SYMBOL_TABLES))

    @fuzz_settings(NAME_CASES)
    @given(st.lists(symbol, min_size=1, max_size=8, unique_by=lambda s: s[0]))
    def case(symbols):
        ptx = fz.name_collision_module(symbols)
        for name, probes in tools.items():
            module, kernels, probed = fz.instrument_in_memory(ptx, probes, kernel="k")
            problems = fz.name_clashes(ptx, module, kernels)
            assert not problems, f"{name} on {symbols}: {problems}"
            accepted.append((probed, ptx))

    case()
    assert len(accepted) >= NAME_CASES * len(fz.COLLISION_TOOLS)
    rejected = fz.ptxas_rejections(accepted)  # all of them: the generated modules are small
    assert not rejected, f"ptxas rejected {len(rejected)} probed module(s):\n" + rejected[0]


# ---------------------------------------------------------------- counting variants (issue 30, section 1)

SIDE_EFFECT_CASES = 60


@pytest.mark.parametrize("tool", ["dmat", "program_progress"])
def test_fuzz_counting_variants_have_no_side_effects(tool):
    """Generated kernels whose calls (random depth, cycles) store, update atomics, printf and trap: the
    counting variant reaches none of it, or the kernel is refused when it cannot be made so; ptxas
    accepts what we accept, and the real kernel keeps its calls."""
    import random

    from neutrino.engine import instrument_module
    from neutrino.errors import InstrumentError
    from neutrino.isa.ptx import ir, parse_module, print_module
    from neutrino.passes.counting import is_call
    from neutrino.toolbox import load_probes

    probes = load_probes(tool)
    accepted: list[tuple[str, str]] = []
    outcomes = {True: 0, False: 0}

    @fuzz_settings(SIDE_EFFECT_CASES)
    @given(st.integers(0, 2**32 - 1), st.booleans())
    def case(seed, poison):
        plan = fz.side_effect_plan(random.Random(seed), poison)
        text = fz.side_effect_module(plan)
        module = parse_module(text, "generated.ptx")
        calls_before = sum(map(is_call, ir.instructions(module.function("k").body)))
        try:
            instrument_module(module, probes, "k")
        except InstrumentError as e:
            assert plan.refused(), f"refused a kernel that can be counted: {e}\n{text}"
            assert str(e).startswith("generated.ptx:") and "no counting variant" in str(e)
            outcomes[True] += 1
            return
        assert not plan.refused(), f"accepted a kernel that cannot be counted safely:\n{text}"
        assert fz.counting_violations(module, "k") == [], text
        assert sum(map(is_call, ir.instructions(module.function("k").body))) == calls_before
        accepted.append((print_module(module), text))
        outcomes[False] += 1

    case()
    assert outcomes[True] and outcomes[False], outcomes  # both kinds of kernel were seen
    rejected = fz.ptxas_rejections(accepted)
    assert not rejected, f"ptxas rejected {len(rejected)} counting variant(s):\n" + rejected[0]
