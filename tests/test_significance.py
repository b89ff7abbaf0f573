"""Paired significance tests: exact agreement with scipy, exact enumeration, CI coverage, Holm."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from irflow.tasks.schema import InputError, UnknownNameError
from irflow.tasks.significance import (
    COMPARISON_COLUMNS,
    bootstrap_ci,
    compare,
    compare_systems,
    correct,
    effect_size,
    randomization_test,
)


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


def test_bootstrap_ci_covers_the_true_difference_at_about_the_nominal_rate() -> None:
    rng = np.random.default_rng(2024)
    true_delta, covered, trials = 0.05, 0, 200
    for _ in range(trials):
        a = rng.beta(2, 3, 60)  # skewed, bounded per-query values
        b = np.clip(a + rng.normal(true_delta, 0.15, 60), -1, 2)  # no clipping in practice: keeps the true mean
        low, high = bootstrap_ci(b - a, 2000, 0.05, rng)
        covered += low <= true_delta <= high
    assert 0.90 <= covered / trials <= 0.99, covered / trials


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


def test_missing_queries_score_zero() -> None:
    base = pd.Series([0.5, 0.5, 0.5, 0.5], index=["a", "b", "c", "d"])
    cand = pd.Series([1.0, 1.0, np.nan], index=["a", "b", "c"])  # did not answer c (NaN) nor d (absent)
    c = compare(base, cand, permutations=100, bootstrap=100)
    assert c.n == 4 and c.candidate_mean == pytest.approx(0.5) and (c.wins, c.ties, c.losses) == (2, 0, 2)


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
