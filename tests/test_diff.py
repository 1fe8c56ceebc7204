"""`neutrino diff`: the statistics against known answers, injected shifts found, no false alarms,
the --fail-above gate, jobs per rank and pooled, timeline GPU times."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("scipy")

from neutrino import cli  # noqa: E402
from neutrino.analysis import diff as D  # noqa: E402
from neutrino.analysis import synthetic as S  # noqa: E402


def test_benjamini_hochberg_known_values():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04 -> p*m/rank = 0.02, 0.02, 0.04, 0.04 (then running minimum from the top)
    assert D.benjamini_hochberg(p).tolist() == pytest.approx([0.02, 0.04, 0.04, 0.02])
    from scipy.stats import false_discovery_control

    p = np.random.default_rng(1).uniform(size=200) ** 3
    assert D.benjamini_hochberg(p) == pytest.approx(false_discovery_control(p))


def test_known_shift_and_its_interval():
    rng = np.random.default_rng(3)
    a = rng.lognormal(np.log(1000), 0.015, 60)
    b = rng.lognormal(np.log(1050), 0.015, 60)
    c = D.compare_samples(("all", "k", (1, 1, 1), (32, 1, 1)), "block_span", a, b)
    assert c.ci_low < 5.0 < c.ci_high and c.change == pytest.approx(5.0, abs=0.8)
    assert c.p < 1e-15 and c.auc > 0.97 and (c.n_a, c.n_b) == (60, 60)
    c = D.compare_samples(("all", "k", (1, 1, 1), (32, 1, 1)), "tail_share", np.full(10, 0.10), np.full(10, 0.13))
    assert c.change == pytest.approx(3.0) and c.change_unit == "pp" and c.p < 1e-3
    same = D.compare_samples(("all", "k", (1, 1, 1), (32, 1, 1)), "gmem_bytes", np.full(5, 7.0), np.full(5, 7.0))
    assert same.p == 1.0 and same.change == 0.0


def _seed_of_kernels(seed: int, *, shifted: int | None, scale_b: float, kernels: int = 100):
    """One run per side of `kernels` kernels (30 launches, 1.5% lognormal noise); every value of B
    times scale_b (a run-level factor: clocks), the kernel `shifted` by 3% more."""
    rng = np.random.default_rng(seed)
    items = []
    for k in range(kernels):
        base = 1e4 * (1 + k % 13)
        a = rng.lognormal(np.log(base), 0.015, 30)
        b = rng.lognormal(np.log(base * scale_b * (1.03 if k == shifted else 1.0)), 0.015, 30)
        items.append((("all", f"k{k}", (1, 1, 1), (1, 1, 1)), "duration_ns", [a], [b]))
    return D.compare_many(items, resamples=200)


def test_a_three_percent_shift_in_one_kernel_of_many_with_defaults():
    """The statistics layer alone (benchmarks/diff_power.py runs 1,000 kernels x 20 seeds): 100
    kernels, one shifted by 3%, 5 seeds, one run per side, the defaults: the run-to-run variation
    comes from the kernels, so the shift is found, with B's run as is and with B's run 15% slower
    for every kernel (the common shift is a note, not a kernel's change)."""
    for scale_b in (1.0, 1.15):
        found, false = 0, 0
        for seed in range(5):
            comparisons = D.decide(_seed_of_kernels(seed, shifted=7, scale_b=scale_b), 0.05)
            assert all(c.common is not None and c.min_effect == 0 for c in comparisons)
            sig = {c.kernel for c in comparisons if c.significant}
            found += "k7" in sig
            false += len(sig - {"k7"})
            assert comparisons[0].common.as_change(comparisons[0].common.centre) == pytest.approx(
                (scale_b - 1) * 100, abs=0.5)
        # each seed finds the shift with probability about 0.98 (6.1 standard deviations of a kernel's
        # log ratio against z = 3.8 for 100 kernels); <= 1% of the 495 unshifted comparisons flagged
        assert found >= 4 and false <= 5, scale_b


def test_a_a_with_a_global_run_scale_finds_nothing():
    """Every kernel of B's run 15% slower (GPU clocks): the launch test alone calls every kernel
    significant; the default (against the kernels' common shift) calls none, and z is the normal
    quantile at alpha / (2 kernels)."""
    comparisons = _seed_of_kernels(11, shifted=None, scale_b=1.15)
    launch_test_alone = [c for c in comparisons if c.p < 1e-6]
    assert len(launch_test_alone) < 5  # the test sees B without the common shift
    decided = D.decide(comparisons, 0.05)
    assert not [c for c in decided if c.significant]
    common = decided[0].common
    from scipy.stats import t as student_t

    assert common.kernels == 100 and common.z(0.05) == pytest.approx(student_t.ppf(1 - 0.05 / 200, 0.37 * 99))
    lo, hi = common.band(0.05)
    assert lo < 15 < hi and hi - lo < 10


def test_trace_diff_names_the_shifted_kernel(tmp_path, capsys):
    a = S.kernel_runs(tmp_path / "a", seed=1, kernels=4)
    b = S.kernel_runs(tmp_path / "b", seed=2, kernels=4, shift={"k3": 1.03})
    result = D.diff(a, b, min_effect=0)
    sig = result.significant
    assert sig and {c.kernel for c in sig} == {"k3"}
    assert {c.metric for c in sig} >= {"block_span", "warp_span", "duration_ns"}
    top = sig[0]
    assert top.reason.startswith("slower: median") and 1.5 < top.change < 4.5 and top.ci_low < 3.0 < top.ci_high + 0.5
    assert not any(c.significant for c in result.comparisons if c.metric == "gmem_bytes")
    assert cli.main(["diff", str(a), str(b), "--min-effect", "0"]) == 0
    out = capsys.readouterr().out
    assert "k3" in out and "slower: median block span +" in out and "significant (Benjamini-Hochberg" in out
    # by default one run per side and fewer than 8 kernels need a change of 20%: the 3% is reported,
    # but not called significant
    default = D.diff(a, b)
    assert not default.significant and default.notes and "one run on a side" in default.notes[0]
    k3 = [c for c in default.comparisons if c.kernel == "k3" and c.metric == "block_span"][0]
    assert k3.q < 0.05 and k3.min_effect == D.ONE_RUN_MIN_EFFECT and k3.reason == "below --min-effect 20%"
    assert cli.main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "0 significant" in out and "runs A/B: 1/1" in out and "note: one run on a side" in out


def test_trace_diff_with_a_global_run_scale(tmp_path, capsys):
    """Ten kernels, B's run 15% slower for all of them (clocks) and k3 8% more: k3 alone is
    significant, the common shift is a note; A/A with that scale: nothing significant."""
    a = S.kernel_runs(tmp_path / "a", seed=1, kernels=10)
    everything = {f"k{i}": 1.15 for i in range(10)}
    b = S.kernel_runs(tmp_path / "b", seed=2, kernels=10, shift={**everything, "k3": 1.15 * 1.08})
    result = D.diff(a, b)
    assert {c.kernel for c in result.significant} == {"k3"}
    assert {c.metric for c in result.significant} >= {"block_span", "duration_ns"}
    assert [n for n in result.notes if "all 10 kernels moved by +15" in n and "block_span" in n]
    same = D.diff(a, S.kernel_runs(tmp_path / "aa", seed=3, kernels=10, shift=everything))
    assert not same.significant
    # each kernel moved by its own 4% (per-kernel run noise): the launch test flags them, the band does not
    noisy = D.diff(*(S.kernel_runs(tmp_path / f"n{i}", seed=30 + i, kernels=10, run_spread=0.04) for i in (0, 1)))
    within = [c for c in noisy.comparisons if c.reason.startswith("within the run-to-run variation of all kernels")]
    assert not noisy.significant and len({c.kernel for c in within}) >= 3 and all(c.q < 0.05 for c in within)
    assert cli.main(["diff", str(a), str(b), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    shifts = {s["metric"]: s for s in doc["common_shifts"] if s["rank"] == "all"}
    assert shifts["duration_ns"]["kernels"] == 10 and 13 < shifts["duration_ns"]["shift"] < 17
    assert shifts["duration_ns"]["band_low"] < shifts["duration_ns"]["shift"] < shifts["duration_ns"]["band_high"]


def test_one_kernel_a_a_with_15_percent_falls_back_to_the_minimum_effect(tmp_path):
    """One kernel cannot show the run-to-run variation: a 15% difference between two runs of it is
    below the one-run default of 20%."""
    a = S.kernel_runs(tmp_path / "a", seed=1, kernels=1)
    b = S.kernel_runs(tmp_path / "b", seed=2, kernels=1, shift={"k0": 1.15})
    result = D.diff(a, b)
    assert not result.significant and all(c.common is None for c in result.comparisons)
    span = [c for c in result.comparisons if c.metric == "block_span"][0]
    assert span.q < 0.05 and span.reason == "below --min-effect 20%" and 13 < span.change < 17
    assert {c.kernel for c in D.diff(a, b, min_effect=10).significant} == {"k0"}


def test_same_distribution_and_same_trace_show_nothing(tmp_path):
    a = S.kernel_runs(tmp_path / "a", seed=1, kernels=8)
    b = S.kernel_runs(tmp_path / "b", seed=5, kernels=8)
    assert not D.diff(a, b).significant
    same = D.diff(a, a)
    assert not same.significant and all(c.p == 1.0 for c in same.comparisons)


def test_fail_above_is_a_gate(tmp_path, capsys):
    a = S.kernel_runs(tmp_path / "a", seed=1, kernels=4)
    slower = S.kernel_runs(tmp_path / "slow", seed=2, kernels=4, shift={"k1": 1.05})
    faster = S.kernel_runs(tmp_path / "fast", seed=3, kernels=4, shift={"k1": 0.95})
    assert cli.main(["diff", str(a), str(slower), "--fail-above", "2", "--min-effect", "0"]) == 1
    assert "regression above 2%" in capsys.readouterr().err
    assert cli.main(["diff", str(a), str(slower), "--fail-above", "10", "--min-effect", "0"]) == 0
    # faster is no regression
    assert cli.main(["diff", str(a), str(faster), "--fail-above", "2", "--min-effect", "0"]) == 0
    assert cli.main(["diff", str(a), str(slower), "--fail-above", "2"]) == 0  # one run per side: 5% < 20%
    capsys.readouterr()
    assert cli.main(["diff", str(a), str(tmp_path / "missing")]) == 1
    assert "missing" in capsys.readouterr().err


def test_jobs_per_rank_and_pooled(tmp_path, capsys):
    for side, shift in (("a", {}), ("b", {"k2": 1.04})):
        job = tmp_path / side / "20261126-120000_7"
        for rank in (0, 1):
            S.kernel_runs(job / f"rank{rank}", seed=10 * rank + (side == "b"), kernels=4, rank=rank,
                          shift=shift if rank == 1 else {})
    result = D.diff(tmp_path / "a", tmp_path / "b", min_effect=0)
    ranks = {c.rank for c in result.comparisons}
    assert ranks == {"0", "1", "all"}
    sig = {(c.rank, c.kernel) for c in result.significant}
    assert ("1", "k2") in sig and ("0", "k2") not in sig and all(k == "k2" for _, k in sig)
    assert {(c.rank, c.runs_a, c.runs_b, c.test) for c in result.comparisons if c.metric == "block_span"} == {
        ("0", 1, 1, "mwu"), ("1", 1, 1, "mwu"), ("all", 2, 2, "runs")}  # pooled: each rank's process is a run
    assert cli.main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["rank"] for r in doc["comparisons"]} == {"0", "1", "all"} and doc["runs"] == [1, 1] and doc["notes"]
    assert cli.main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ",".join(D.COLUMNS) and len(lines) == len(doc["comparisons"]) + 1


def test_timeline_gpu_times_are_compared(tmp_path):
    rng = np.random.default_rng(0)
    runs = []
    for side, scale in (("a", 1.0), ("b", 1.06)):
        run = S.kernel_runs(tmp_path / side, seed=len(runs), kernels=2, launches=5)
        starts = np.arange(40) * 10_000
        ends = starts + rng.lognormal(np.log(3000 * scale), 0.01, 40).astype(np.uint64)
        S.write_timeline(run, [{"kind": 1, "start_ns": s, "end_ns": e, "name_id": 0, "grid": (8, 1, 1),
                                "block": (128, 1, 1)} for s, e in zip(starts, ends)], ["cublas_gemm"])
        runs.append(run)
    sig = [c for c in D.diff(*runs, min_effect=0).significant if c.metric == "gpu_time_ns"]
    assert [(c.kernel, c.grid) for c in sig] == [("cublas_gemm", (8, 1, 1))] and 4 < sig[0].change < 8


def test_kernels_of_one_side_only_are_listed(tmp_path, capsys):
    a = S.kernel_runs(tmp_path / "a", seed=1, kernels=2, launches=4)
    b = S.kernel_runs(tmp_path / "b", seed=2, kernels=3, launches=4, grid=(8, 1, 1))
    result = D.diff(a, b)
    assert not result.comparisons  # no shape in common: the grids differ
    assert [k for k, _, _ in result.only_a] == ["k0", "k1"] and [k for k, _, _ in result.only_b] == ["k0", "k1", "k2"]
    assert cli.main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "only in A: k0 16x1x1/64x1x1" in out and "only in B: k2 8x1x1/64x1x1" in out


def test_more_bytes_per_launch(tmp_path):
    a = S.kernel_runs(tmp_path / "a", seed=1, kernels=3, launches=10)
    b = S.kernel_runs(tmp_path / "b", seed=2, kernels=3, launches=10, bytes_shift={"k2": 1.25})
    sig = [c for c in D.diff(a, b).significant]  # 25%: above the one-run minimum of 20%
    assert [(c.kernel, c.metric) for c in sig] == [("k2", "gmem_bytes")]
    assert sig[0].change == pytest.approx(25.0) and sig[0].median_a == 3 * 4096
    assert sig[0].reason.startswith("more bytes per launch: median bytes per launch +25.0%")


def test_welch_on_logs_is_stronger_and_falls_back():
    rng = np.random.default_rng(11)
    a = rng.lognormal(np.log(1e4), 0.02, 30)
    b = rng.lognormal(np.log(1.03e4), 0.02, 30)
    key = ("all", "k", (1, 1, 1), (1, 1, 1))
    mwu, logt = D.compare_samples(key, "duration_ns", a, b), D.compare_samples(key, "duration_ns", a, b, test="welch-log")
    assert logt.test == "welch-log" and mwu.test == "mwu" and logt.p < mwu.p and logt.change == mwu.change
    from scipy.stats import ttest_ind

    assert logt.p == pytest.approx(ttest_ind(np.log(b), np.log(a), equal_var=False).pvalue)
    zeros = D.compare_samples(key, "tail_share", np.r_[0.0, a[1:] / 1e5], b / 1e5, test="welch-log")
    assert zeros.test == "mwu"  # a value of 0: no logarithm, Mann-Whitney answers


def test_a_corrupt_launch_event_is_a_warning_not_a_traceback(tmp_path, capsys):
    a = S.kernel_runs(tmp_path / "a", seed=1, kernels=2, launches=4)
    with open(a / "event.log", "a") as fh:
        fh.write('{"event": "launch", "index": "x", "kernel": "k0", "grid": [16, 1, 1], "block": [64, 1, 1], '
                 '"result": "result/nope.bin", "duration_ns": 5}\n')
    assert cli.main(["diff", str(a), str(a), "--warmup", "0"]) == 0  # index "x" sorts first: a warm-up launch
    assert "warning" in capsys.readouterr().err
    assert cli.main(["export", str(a), "--parquet", str(tmp_path / "ds")]) == 0
    assert "launch x of k0" in capsys.readouterr().err


def test_maps_of_other_names_are_not_compared(tmp_path):
    """A user's own array map beside the tools' maps: found by name only, it is left out."""
    wide = {"name": "wide", "level": "warp", "type": "array", "record_bytes": 16, "cap": 1,
            "fields": [{"name": "start", "type": "u64", "offset": 0}, {"name": "elapsed", "type": "u32", "offset": 8},
                       {"name": "cuid", "type": "u32", "offset": 12}]}
    runs = []
    for side in ("a", "b"):
        b = S.RunBuilder(tmp_path / side)
        b.add_kernel("k", [wide])
        rng = np.random.default_rng(len(runs))
        for _ in range(5):
            st, el, cu = S.lognormal_warps(rng, (4, 1, 1), (32, 1, 1))
            sec = S.block_sched_section((4, 1, 1), (32, 1, 1), st, el, cu)
            sec = type(sec)("wide", sec.level, sec.record_bytes, sec.cap, sec.units, sec.fields, sec.data)
            b.launch("k", (4, 1, 1), (32, 1, 1), [sec], duration_ns=float(rng.lognormal(10, 0.01)))
        runs.append(b.close())
    result = D.diff(*runs)
    assert {c.metric for c in result.comparisons} == {"duration_ns"}


# --------------------------------------------------------------------- several runs per side


def test_runs_test_is_welch_on_the_run_medians():
    """Runs that differ far more than their launches: p is Welch's t on the log run medians."""
    rng = np.random.default_rng(4)
    runs_a = [rng.lognormal(np.log(1000 * f), 0.001, 41) for f in (1.00, 1.05, 0.97, 1.02)]
    runs_b = [rng.lognormal(np.log(1000 * f), 0.001, 41) for f in (1.08, 1.12, 1.03)]
    from scipy.stats import ttest_ind

    want = ttest_ind([np.log(np.median(v)) for v in runs_b], [np.log(np.median(v)) for v in runs_a], equal_var=False)
    assert D.runs_test(D.METRICS["block_span"], runs_a, runs_b) == pytest.approx(want.pvalue, rel=1e-9)
    c = D.compare_runs(("all", "k", (1, 1, 1), (1, 1, 1)), "block_span", runs_a, runs_b)
    assert (c.test, c.runs_a, c.runs_b, c.n_a, c.n_b) == ("runs", 4, 3, 164, 123)
    assert c.ci_low < c.change < c.ci_high
    # the launch test on the pooled launches calls the same data overwhelmingly significant
    assert D.compare_samples(("all", "k", (1, 1, 1), (1, 1, 1)), "block_span", np.concatenate(runs_a),
                             np.concatenate(runs_b)).p < 1e-10 < c.p


def test_runs_that_agree_closer_than_their_launches_allow_are_not_believed():
    """Two runs per side with identical medians: the within-run variance of the median is the floor."""
    base = np.linspace(0.9, 1.1, 31)
    runs_a, runs_b = [base * 100, base[::-1] * 100], [base * 101, base[::-1] * 101]
    p = D.runs_test(D.METRICS["block_span"], runs_a, runs_b)
    x = np.log(base)
    sigma = 1.4826 * np.median(np.abs(x - np.median(x)))
    var = 2 * (np.pi / 2 * sigma**2 / 31 * 2 / 4)  # per side: two runs' variances / 2^2
    from scipy.stats import t

    assert p == pytest.approx(2 * t.sf(np.log(1.01) / np.sqrt(var), 2), rel=1e-9)
    assert D.runs_test(D.METRICS["block_span"], runs_a, runs_a) == 1.0
    assert D.runs_test(D.METRICS["tail_share"], [np.full(4, 0.1)] * 2, [np.full(4, 0.2)] * 2) == 0.0


def test_one_run_per_side_falls_back_to_the_launches():
    rng = np.random.default_rng(2)
    one, two = [rng.lognormal(5, 0.01, 20)], [rng.lognormal(5, 0.01, 20) for _ in range(2)]
    c = D.compare_runs(("all", "k", (1, 1, 1), (1, 1, 1)), "block_span", one, two)
    assert (c.test, c.runs_a, c.runs_b, c.n_b) == ("mwu", 1, 2, 40)
    assert D.default_min_effect(c) == D.ONE_RUN_MIN_EFFECT
    assert D.default_min_effect(D.compare_runs(("all", "k", (1, 1, 1), (1, 1, 1)), "block_span", two, two)) == 0


def _runs(tmp_path, side, count, *, seed, run_spread, shift=None, kernels=6):
    return [S.kernel_runs(tmp_path / f"{side}{r}", seed=100 * seed + r, kernels=kernels, launches=12,
                          run_spread=run_spread, shift=shift) for r in range(count)]


def test_a_a_with_run_to_run_noise_finds_nothing_with_several_runs(tmp_path, capsys):
    """Runs drawn with a 4% per-run scale: several runs per side find nothing; one run per side,
    launch test alone (--min-effect 0), calls the process noise significant; its default does not."""
    a = _runs(tmp_path, "a", 4, seed=1, run_spread=0.04)
    b = _runs(tmp_path, "b", 4, seed=2, run_spread=0.04)
    several = D.diff(a, b)
    assert several.comparisons and not several.significant and several.runs == (4, 4)
    assert {c.test for c in several.comparisons} == {"runs"} and all(c.min_effect == 0 for c in several.comparisons)
    alone = D.diff(a[0], b[0], min_effect=0)
    assert len({c.kernel for c in alone.significant}) >= 3  # the failure several runs per side fixes
    assert not D.diff(a[0], b[0]).significant
    assert cli.main(["diff", *map(str, a), "--vs", *map(str, b), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] == [4, 4] and not any(r["significant"] for r in doc["comparisons"])
    assert {(r["runs_a"], r["runs_b"]) for r in doc["comparisons"]} == {(4, 4)}
    assert not [n for n in doc["notes"] if "one run" in n]


def test_a_real_shift_is_found_with_several_runs(tmp_path, capsys):
    a = _runs(tmp_path, "a", 5, seed=3, run_spread=0.01)
    b = _runs(tmp_path, "b", 5, seed=4, run_spread=0.01, shift={"k2": 1.08})
    result = D.diff(a, b)
    sig = result.significant
    assert sig and {c.kernel for c in sig} == {"k2"} and "block_span" in {c.metric for c in sig}
    top = [c for c in sig if c.metric == "block_span"][0]
    assert 5 < top.change < 11 and top.ci_low < 8 < top.ci_high and top.reason.startswith("slower")
    assert cli.main(["diff", *map(str, a), "--vs", *map(str, b), "--fail-above", "3"]) == 1
    captured = capsys.readouterr()
    assert "runs A/B: 5/5" in captured.out and "k2" in captured.err
    assert cli.main(["diff", str(a[0]), str(a[1]), str(b[0])]) == 2  # three paths without --vs
    assert "--vs" in capsys.readouterr().err


def test_warmup_leaves_out_each_shapes_first_launches(tmp_path):
    a = S.kernel_runs(tmp_path / "a", seed=1, kernels=2, launches=6)
    counts = {w: {c.n_a for c in D.diff(a, a, warmup=w).comparisons} for w in (0, 1, 2)}
    assert counts == {0: {6}, 1: {5}, 2: {4}}
    with pytest.raises(D.DiffError, match="--warmup"):
        D.diff(a, a, warmup=-1)
    with pytest.raises(D.DiffError, match="--min-effect"):
        D.diff(a, a, min_effect=-3)
