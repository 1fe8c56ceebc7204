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
MAX_COUNT = 20000 if LONG else 3000  # repetitions and nesting depth a mutation may use
TRACE_MAX_COUNT = 2000 if LONG else 48  # in a trace, each repeated launch is read and analysed: linear, but slow
PTXAS_SAMPLE = None if LONG else 24  # probed modules given to ptxas per test (all of them when long)


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


def test_fuzz_toml_probe_files(tmp_path, fast_argparse):
    seeds = fz.toml_seeds()
    texts = [text for _, text in seeds]
    accepted: list[tuple[str, str]] = []
    cases = []

    @fuzz_settings(400)
    @given(st.sampled_from(range(len(seeds))), mutations(fz.TOML_OPS), st.sampled_from(fz.TARGET_PTX))
    def case(seed, muts, target):
        text = texts[seed]
        for m in muts:
            text = fz.mutate_text(text, m, texts)
        probe = tmp_path / "probe.toml"
        probe.write_bytes(text.encode("utf-8", "surrogatepass"))
        outcome = fz.run_instrument(target, probe)
        cases.append(1)
        assert_clean([("instrument", outcome)])
        if outcome.status == "ok":
            accepted.append((outcome.stdout, target.read_text()))

    case()
    assert len(cases) >= 400 * SCALE // 2
    assert_ptxas_accepts(accepted)


def test_fuzz_dsl_probe_files(tmp_path, fast_argparse):
    seeds = [text for _, text in fz.dsl_seeds()]
    accepted: list[tuple[str, str]] = []

    @fuzz_settings(120)
    @given(st.sampled_from(range(len(seeds))), mutations(fz.TEXT_OPS), st.sampled_from(fz.TARGET_PTX[:2]))
    def case(seed, muts, target):
        text = seeds[seed]
        for m in muts:
            text = fz.mutate_text(text, m, seeds)
        probe = tmp_path / "probe.py"
        probe.write_bytes(text.encode("utf-8", "surrogatepass"))
        outcome = fz.run_instrument(target, probe)
        assert_clean([("instrument", outcome)])
        if outcome.status == "ok":
            accepted.append((outcome.stdout, target.read_text()))

    case()
    assert_ptxas_accepts(accepted)


# ---------------------------------------------------------------- PTX


def test_fuzz_ptx_modules(tmp_path, fast_argparse):
    seeds = fz.ptx_seeds()
    texts = [text for _, text in seeds]
    accepted: list[tuple[str, str]] = []

    @fuzz_settings(400)
    @given(st.sampled_from(range(len(seeds))), mutations(fz.TEXT_OPS), st.sampled_from(fz.PTX_PROBES), st.booleans())
    def case(seed, muts, probe, also_print):
        text = texts[seed]
        for m in muts:
            text = fz.mutate_text(text, m, texts)
        ptx = tmp_path / "kernel.ptx"
        ptx.write_bytes(text.encode("utf-8", "surrogatepass"))
        outcomes = [("instrument", fz.run_instrument(ptx, probe))]
        if also_print:
            outcomes.append(("print", fz.run_entry(fz.cli, "print", str(ptx))))
        assert_clean(outcomes)
        if outcomes[0][1].status == "ok":
            accepted.append((outcomes[0][1].stdout, text))

    case()
    assert_ptxas_accepts(accepted)


# ---------------------------------------------------------------- traces


@pytest.fixture(scope="module")
def base_trace(tmp_path_factory):
    return fz.write_base_trace(tmp_path_factory.mktemp("base"))


def test_fuzz_result_files(base_trace, tmp_path, fast_argparse):
    """Result frames, the launch index and the probe copy, mutated bytewise and linewise."""

    @fuzz_settings(60)
    @given(st.sampled_from(fz.TRACE_FILES[1:]), mutations(fz.BYTE_OPS + ("truncate", "dup_line", "flip"), TRACE_MAX_COUNT))
    def case(target, muts):
        assert_clean(fz.run_trace_case(base_trace, tmp_path / "work", target, muts))

    case()


def test_fuzz_event_logs(base_trace, tmp_path, fast_argparse):
    """event.log: JSON values of other types, dropped keys, spliced, cut and binary lines."""

    @fuzz_settings(60)
    @given(mutations(fz.JSON_OPS + fz.BYTE_OPS, TRACE_MAX_COUNT))
    def case(muts):
        assert_clean(fz.run_trace_case(base_trace, tmp_path / "work", "event.log", muts))

    case()


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
