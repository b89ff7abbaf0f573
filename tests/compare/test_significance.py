"""Paired significance tests: exact agreement with scipy, exact enumeration, CI coverage, Holm."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from irflow.tasks.compare.significance import (
    COMPARISON_COLUMNS,
    bootstrap_ci,
    compare,
    compare_systems,
    correct,
    effect_size,
    randomization_test,
)
from irflow.tasks.core.schema import InputError, UnknownNameError


def series(values: np.ndarray | list[float], prefix: str = "q") -> pd.Series:
    return pd.Series(np.asarray(values, dtype=float), index=[f"{prefix}{i:03d}" for i in range(len(values))])


def graded_pair(seed: int, n: int = 60) -> tuple[pd.Series, pd.Series]:
    """Metric-like per-query values with ties and zero differences (coarse steps, as P@10 has)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 11, n) / 10
    b = np.clip(a + rng.choice([-0.2, -0.1, 0.0, 0.0, 0.1, 0.2, 0.3], n), 0, 1)
    return series(a), series(b)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_t_test_and_wilcoxon_equal_scipy_exactly(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.random(50)
    b = np.clip(a + rng.normal(0.03, 0.15, 50), 0, 1)
    for base, cand in [(series(a), series(b)), graded_pair(seed)]:
        c = compare(base, cand, permutations=200, bootstrap=200)
        t = stats.ttest_rel(cand.to_numpy(), base.to_numpy())
        w = stats.wilcoxon(cand.to_numpy(), base.to_numpy())  # scipy's defaults: zero_method="wilcox"
        assert (c.t_stat, c.p_ttest) == (float(t.statistic), float(t.pvalue))
        assert (c.w_stat, c.p_wilcoxon) == (float(w.statistic), float(w.pvalue))
        d = cand.to_numpy() - base.to_numpy()
        assert c.delta == pytest.approx(d.mean(), abs=1e-15)
        assert c.effect_size == pytest.approx(d.mean() / d.std(ddof=1), rel=1e-12)
        assert (c.wins, c.ties, c.losses) == ((d > 0).sum(), (d == 0).sum(), (d < 0).sum())
        assert c.n == 50 if len(base) == 50 else c.n == 60


def test_order_of_queries_does_not_matter() -> None:
    base, cand = graded_pair(3)
    shuffled = cand.sample(frac=1.0, random_state=7)
    assert compare(base, cand, permutations=500) == compare(base, shuffled, permutations=500)


def exact_randomization_p(d: np.ndarray) -> float:
    """Two-sided p over all 2^n sign assignments (the exact permutation distribution)."""
    signs = np.array(list(itertools.product([1.0, -1.0], repeat=d.size)))
    sums = np.abs(signs @ d)
    return float(np.mean(sums >= abs(d.sum()) - 1e-12))


@pytest.mark.parametrize(
    "d",
    [
        [0.31, -0.12, 0.25, 0.08, -0.05, 0.4, 0.17, -0.22, 0.11, 0.09, 0.02, -0.01],  # p around 0.1
        [0.5, 0.2, 0.1, 0.3, -0.1, 0.25, 0.15, 0.05, 0.35, -0.05],  # p around 0.01
        [0.1, -0.1, 0.2, -0.2, 0.05, 0.0, -0.05, 0.3],  # p = 1-ish, with a zero
    ],
)
def test_randomization_matches_exact_enumeration(d: list[float]) -> None:
    diff = np.asarray(d)
    exact = exact_randomization_p(diff)
    permutations = 20_000
    p = randomization_test(diff, permutations, np.random.default_rng(11))
    sigma = math.sqrt(exact * (1 - exact) / permutations)
    assert abs(p - exact) <= 4 * sigma + 2 / permutations, (p, exact)
    # reproducible for a fixed seed, through compare() as well
    assert randomization_test(diff, permutations, np.random.default_rng(11)) == p
    base = series(np.full(diff.size, 0.5))
    cand = series(0.5 + diff)
    assert compare(base, cand, seed=5).p_randomization == compare(base, cand, seed=5).p_randomization


def test_randomization_p_is_smoothed_and_two_sided() -> None:
    d = np.full(20, 0.3)  # every sign flip but the identity has a smaller |sum|
    assert randomization_test(d, 999, np.random.default_rng(0)) == pytest.approx(1 / 1000)
    assert randomization_test(-d, 999, np.random.default_rng(0)) == pytest.approx(1 / 1000)
    assert randomization_test(np.zeros(20), 999, np.random.default_rng(0)) == 1.0


SKEWED = {
    # centred exponential: skewness 2, the shape of "a few queries improve a lot" differences
    "exponential": (lambda rng, n: rng.exponential(1.0, n) - 1.0, 0.0),
    # metric-like: most queries unchanged, 30 % gain 0.2-1, 20 % lose 0-0.3
    "per-query metric": (
        lambda rng, n: (
            np.where(rng.random(n) < 0.3, rng.uniform(0.2, 1.0, n), 0.0)
            - np.where(rng.random(n) < 0.2, rng.uniform(0.0, 0.3, n), 0.0)
        ),
        0.3 * 0.6 - 0.2 * 0.15,
    ),
}


@pytest.mark.parametrize("shape", list(SKEWED))
def test_bca_interval_covers_skewed_differences_where_the_percentile_interval_does_not(shape: str) -> None:
    """Coverage of a nominal 95 % interval over 1,000 simulated samples of n skewed differences:
    BCa (expanded) >= 92 % at n >= 10; the percentile interval stays below it (88 % at n = 10)."""
    draw, true_mean = SKEWED[shape]
    rng = np.random.default_rng(2024)
    coverage = {}
    for n in (5, 10, 30):
        hits = {"bca": 0, "percentile": 0}
        for _ in range(1000):
            d = draw(rng, n)
            for method in hits:
                low, high = bootstrap_ci(d, 1000, 0.05, rng, method=method)
                hits[method] += low <= true_mean <= high
        coverage[n] = {method: count / 1000 for method, count in hits.items()}
    assert coverage[10]["bca"] >= 0.92 and coverage[30]["bca"] >= 0.92, coverage
    assert coverage[10]["percentile"] < coverage[10]["bca"] and coverage[5]["percentile"] < coverage[5]["bca"], coverage


def test_bca_equals_scipy_on_the_same_resamples() -> None:
    """The BCa core (without the small-sample expansion) is scipy's BCa: same resamples, same interval."""
    from scipy import special

    from irflow.tasks.compare.paired_statistics import bca_interval

    d = np.random.default_rng(3).exponential(1.0, 25) - 0.8
    means = d[np.random.default_rng(7).integers(0, d.size, size=(5000, d.size))].mean(axis=1)
    ours = bca_interval(means, d, float(special.ndtri(0.025)))
    reference = stats.bootstrap(
        (d,), np.mean, n_resamples=5000, method="BCa", confidence_level=0.95, rng=np.random.default_rng(7)
    ).confidence_interval
    assert ours == pytest.approx((reference.low, reference.high), rel=1e-12)


def test_wilcoxon_method_is_explicit_and_named() -> None:
    """Exact without zeros or ties at n <= 50; every sign flip with ties at n <= 13; else the normal
    approximation (tie-corrected, no continuity correction) -- each equal to scipy called that way."""
    rng = np.random.default_rng(5)
    exact = compare(series(np.zeros(20)), series(rng.normal(0.1, 1.0, 20)))
    assert exact.wilcoxon_method == "exact"
    tied = compare(
        series(np.zeros(12)), series(np.array([0.1, 0.1, -0.2, 0.3, 0.0, 0.1, 0.2, 0.2, -0.1, 0.4, 0.1, 0.3]))
    )
    assert tied.wilcoxon_method == "permutation"
    d = np.array([0.1, 0.1, -0.2, 0.3, 0.0, 0.1, 0.2, 0.2, -0.1, 0.4, 0.1, 0.3])
    every_flip = stats.wilcoxon(d, zero_method="wilcox", method=stats.PermutationMethod(n_resamples=2**13))
    assert tied.p_wilcoxon == pytest.approx(float(every_flip.pvalue), abs=1e-15)
    base, cand = graded_pair(1)  # n = 60 with ties and zeros
    normal = compare(base, cand)
    reference = stats.wilcoxon(cand.to_numpy(), base.to_numpy(), correction=False, method="asymptotic")
    assert normal.wilcoxon_method == "normal" and normal.p_wilcoxon == float(reference.pvalue)


def test_bootstrap_ci_is_seeded_and_brackets_the_mean() -> None:
    base, cand = graded_pair(4)
    one, two = compare(base, cand, seed=9), compare(base, cand, seed=9)
    assert (one.ci_low, one.ci_high) == (two.ci_low, two.ci_high)
    assert one.ci_low < one.delta < one.ci_high


def test_holm_textbook_example() -> None:
    # Wikipedia, "Holm–Bonferroni method", section "Example": four hypotheses at alpha = 0.05 with
    # p = 0.01, 0.04, 0.03, 0.005; H1 and H4 are rejected, H2 and H3 are not.
    # Adjusted p (Wright 1992, "Adjusted P-values for simultaneous inference"):
    # 4*0.005, 3*0.01, 2*0.03, max(1*0.04, 0.06).
    p = [0.01, 0.04, 0.03, 0.005]
    holm = correct(p, "holm")
    assert holm == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert [q < 0.05 for q in holm] == [True, False, False, True]
    assert correct(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert correct([0.5, 0.9], "bonferroni") == [1.0, 1.0]  # capped at 1
    assert correct([], "holm") == []
    with pytest.raises(UnknownNameError):
        correct(p, "bh")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        correct([0.2, float("nan")], "holm")


def test_holm_is_never_less_powerful_than_bonferroni() -> None:
    p = np.random.default_rng(0).random(12) ** 3
    holm, bonf = np.array(correct(p, "holm")), np.array(correct(p, "bonferroni"))
    assert np.all(holm <= bonf + 1e-15) and np.all(holm >= p)
    order = np.argsort(p)
    assert np.all(np.diff(holm[order]) >= 0)  # monotone in the raw p-values


def test_missing_queries_score_zero_and_nan_values_are_an_error_unless_asked() -> None:
    base = pd.Series([0.5, 0.5, 0.5, 0.5], index=["a", "b", "c", "d"])
    cand = pd.Series([1.0, 1.0, 0.0], index=["a", "b", "c"])  # did not answer d (absent): scores 0
    c = compare(base, cand, permutations=100, bootstrap=100)
    assert c.n == 4 and c.candidate_mean == pytest.approx(0.5) and (c.wins, c.ties, c.losses) == (2, 0, 2)
    with_nan = pd.Series([1.0, 1.0, np.nan], index=["a", "b", "c"])
    with pytest.raises(InputError, match=r"candidate: 1 per-query values are NaN \(queries 'c'\).*nan_as_zero"):
        compare(base, with_nan)
    assert compare(base, with_nan, permutations=100, bootstrap=100, nan_as_zero=True) == c


def test_fewer_than_two_shared_queries_is_an_error_not_nan() -> None:
    with pytest.raises(InputError, match="at least 2 queries"):
        compare(pd.Series([0.5], index=["a"]), pd.Series([0.7], index=["a"]))
    with pytest.raises(InputError, match="at least 2 queries"):
        compare(pd.Series([0.5, 0.1], index=["a", "b"]), pd.Series([0.7, 0.2], index=["c", "d"]))
    with pytest.raises(InputError, match="more than once"):
        compare(pd.Series([0.5, 0.1], index=["a", "a"]), pd.Series([0.7, 0.2], index=["a", "b"]))


def test_identical_systems_and_constant_shifts_give_defined_numbers() -> None:
    base = series([0.2, 0.4, 0.6, 0.8])
    same = compare(base, base.copy())
    assert (same.t_stat, same.p_ttest, same.w_stat, same.p_wilcoxon, same.p_randomization) == (0.0, 1.0, 0.0, 1.0, 1.0)
    assert (same.effect_size, same.ci_low, same.ci_high, same.ties) == (0.0, 0.0, 0.0, 4)
    shifted = compare(series([0.0, 0.0, 0.0]), series([0.25, 0.25, 0.25]))  # sd of differences exactly 0
    assert shifted.effect_size == math.inf and shifted.t_stat == math.inf and shifted.p_ttest == 0.0
    assert effect_size(np.array([-0.25, -0.25])) == -math.inf
    assert not any(isinstance(v, float) and math.isnan(v) for v in same.as_dict().values())


def long_table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    base = rng.random(40)
    rows = []
    for system, shift in [("bm25", 0.0), ("dense", 0.15), ("hybrid", 0.02)]:
        values = np.clip(base + shift + rng.normal(0, 0.1, 40), 0, 1)
        rows += [
            {"system": system, "query_id": f"q{i}", "metric": m, "value": v * (1 if m == "nDCG@10" else 0.5)}
            for i, v in enumerate(values)
            for m in ("nDCG@10", "P@10")
        ]
    return pd.DataFrame(rows)


def test_compare_systems_against_the_first_system_with_holm() -> None:
    table = long_table()
    out = compare_systems(table, "nDCG@10", permutations=2000, bootstrap=500)
    assert list(out.columns) == list(COMPARISON_COLUMNS)
    assert list(out["baseline"]) == ["bm25", "bm25"] and list(out["candidate"]) == ["dense", "hybrid"]
    assert out["p_adjusted"].tolist() == pytest.approx(correct(out["p_randomization"].tolist(), "holm"))
    assert out["significant"].tolist() == [True, False]
    single = compare(
        table.query("system == 'bm25' and metric == 'nDCG@10'").set_index("query_id")["value"],
        table.query("system == 'dense' and metric == 'nDCG@10'").set_index("query_id")["value"],
        permutations=2000,
        bootstrap=500,
    )
    assert out.iloc[0]["delta"] == single.delta and out.iloc[0]["p_randomization"] == single.p_randomization

    pairs = compare_systems(
        table, "P@10", "hybrid", all_pairs=True, correction="bonferroni", permutations=500, bootstrap=100
    )
    assert list(zip(pairs["baseline"], pairs["candidate"])) == [
        ("hybrid", "bm25"),
        ("hybrid", "dense"),
        ("bm25", "dense"),
    ]
    assert pairs["p_adjusted"].tolist() == pytest.approx(correct(pairs["p_randomization"].tolist(), "bonferroni"))


def test_compare_systems_rejects_unknown_names() -> None:
    table = long_table()
    with pytest.raises(UnknownNameError, match="available: nDCG@10, P@10"):
        compare_systems(table, "MAP")
    with pytest.raises(UnknownNameError, match="bm26"):
        compare_systems(table, "nDCG@10", "bm26")
    with pytest.raises(InputError, match="lacks columns"):
        compare_systems(table.drop(columns="value"), "nDCG@10")


def test_wilcoxon_distribution_is_chosen_on_the_non_zero_differences() -> None:
    """5 non-zero differences among 14 queries: the exact distribution of n = 5 (p 0.0625, as scipy's exact),
    not the normal approximation chosen on all 14 (p 0.0431); zeros do not push the sign flips past 2^13."""
    d = np.array([0.1, 0.2, 0.3, 0.4, 0.5] + [0.0] * 9)
    five = compare(series(np.zeros(14)), series(d))
    reference = stats.wilcoxon(d, zero_method="wilcox", correction=False, method="exact")
    assert five.wilcoxon_method == "exact" and five.p_wilcoxon == float(reference.pvalue) == 0.0625
    tied = np.array([0.1, 0.1, -0.2, 0.3, 0.2, 0.2, 0.4] + [0.0] * 30)  # 7 non-zero with ties among 37
    flips = compare(series(np.zeros(37)), series(tied))
    every_flip = stats.wilcoxon(tied[:7], method=stats.PermutationMethod(n_resamples=2**7))
    assert flips.wilcoxon_method == "permutation" and flips.p_wilcoxon == pytest.approx(float(every_flip.pvalue))
