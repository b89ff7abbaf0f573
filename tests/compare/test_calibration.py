"""PPI++ calibrated means: equal to ppi_py, valid coverage under a biased judge, label counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from irflow.tasks.compare.calibration import calibrate_systems, calibrated_mean, labels_needed, power_tuning
from irflow.tasks.core.schema import InputError

ppi = pytest.importorskip("ppi_py")


def _judged(rng: np.random.Generator, n: int, bias: float) -> tuple[np.ndarray, np.ndarray]:
    human = rng.beta(2, 5, size=n)
    return human, np.clip(human + bias + rng.normal(0, 0.1, size=n), 0, 1)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("n", "big_n", "bias"), [(20, 200, 0.15), (50, 60, -0.05), (5, 1000, 0.3)])
def test_equals_ppi_py_with_power_tuning(seed: int, n: int, big_n: int, bias: float) -> None:
    rng = np.random.default_rng(seed)
    y, yhat = _judged(rng, n, bias)
    _, unlabelled = _judged(rng, big_n, bias)
    result = calibrated_mean(y, yhat, unlabelled, alpha=0.05)
    expected = float(ppi.ppi_mean_pointestimate(y, yhat, unlabelled, lam=None)[0])
    assert result.estimate == pytest.approx(expected, abs=1e-6)
    low, high = ppi.ppi_mean_ci(y, yhat, unlabelled, alpha=0.05, lam=None)
    assert result.ci == pytest.approx((float(low[0]), float(high[0])), abs=1e-6)
    assert 0.0 <= result.lam <= 1.0
    assert result.judge_only == pytest.approx(np.concatenate([yhat, unlabelled]).mean())


def test_fixed_lambda_zero_is_the_human_mean_and_one_is_plain_ppi() -> None:
    rng = np.random.default_rng(1)
    y, yhat = _judged(rng, 30, 0.2)
    _, unlabelled = _judged(rng, 300, 0.2)
    human_only = calibrated_mean(y, yhat, unlabelled, lam=0.0)
    assert human_only.estimate == pytest.approx(y.mean())
    assert human_only.se == pytest.approx(y.std() / np.sqrt(y.size))
    plain = calibrated_mean(y, yhat, unlabelled, lam=1.0)
    low, high = ppi.ppi_mean_ci(y, yhat, unlabelled, alpha=0.05, lam=1.0)
    assert plain.ci == pytest.approx((float(low[0]), float(high[0])), abs=1e-9)


def test_a_constant_judge_gets_no_weight() -> None:
    y = np.array([0.1, 0.5, 0.9, 0.3])
    assert power_tuning(y, np.ones(4), np.ones(10)) == 0.0
    assert calibrated_mean(y, np.ones(4), np.ones(10)).estimate == pytest.approx(y.mean())


@pytest.mark.parametrize(
    ("y", "yhat", "unlabelled", "match"),
    [
        ([0.1, 0.2], [0.1], [0.3], "pair up"),
        ([0.1], [0.1], [0.3], "at least 2 human"),
        ([0.1, 0.2], [0.1, 0.2], [], "at least 1 judge-only"),
        ([0.1, np.nan], [0.1, 0.2], [0.3], "finite"),
    ],
)
def test_bad_input_is_named(y: list[float], yhat: list[float], unlabelled: list[float], match: str) -> None:
    with pytest.raises(InputError, match=match):
        calibrated_mean(y, yhat, unlabelled)


def test_a_judge_that_inflates_grades_is_corrected_over_500_seeds() -> None:
    """A judge calls a third of the irrelevant documents relevant. Per query, P@10 under human qrels (Y)
    and under the judge's (Ŷ); 100 queries human-labelled, 500 judge-only. The calibrated 95% interval
    covers the true human mean >= 93% of the time; the judge-only interval almost never does."""
    seeds, queries, labelled, depth = 500, 600, 100, 10
    rng = np.random.default_rng(26)
    relevance = rng.beta(2, 5, size=(seeds, queries, 1))  # true P@10 mean: 2/7
    human = rng.random((seeds, queries, depth)) < relevance
    judge = human | (rng.random((seeds, queries, depth)) < 1 / 3)
    y, yhat = human.mean(axis=2), judge.mean(axis=2)
    truth = 2 / 7
    z = stats.norm.ppf(0.975)
    calibrated = judge_only = 0
    for s in range(seeds):
        result = calibrated_mean(y[s, :labelled], yhat[s, :labelled], yhat[s, labelled:])
        calibrated += result.ci[0] <= truth <= result.ci[1]
        half = z * yhat[s].std(ddof=1) / np.sqrt(queries)
        judge_only += abs(yhat[s].mean() - truth) <= half
    assert calibrated / seeds >= 0.93
    assert judge_only / seeds < 0.50


def test_labels_needed_reaches_the_target_width() -> None:
    rng = np.random.default_rng(3)
    y, yhat = _judged(rng, 40, 0.1)
    _, unlabelled = _judged(rng, 2000, 0.1)
    result = calibrated_mean(y, yhat, unlabelled)
    needed = labels_needed(result, 0.02)
    assert needed is not None and needed > result.n_human  # 40 labels give a wider interval than ±0.02
    z = stats.norm.ppf(0.975)
    width = z * np.sqrt(result.lam**2 * result.judge_var / result.n_judge_only + result.residual_var / needed)
    assert width <= 0.02 < z * np.sqrt(result.lam**2 * result.judge_var / 2000 + result.residual_var / (needed - 1))
    assert labels_needed(result, 1e-6) is None  # the judge term alone is wider
    with pytest.raises(InputError, match="half-width"):
        labels_needed(result, 0.0)


def _long(values: dict[str, np.ndarray], queries: list[str]) -> pd.DataFrame:
    rows = [(s, q, "P@10", float(v)) for s, vs in values.items() for q, v in zip(queries, vs, strict=True)]
    return pd.DataFrame(rows, columns=["system", "query_id", "metric", "value"])


def test_calibrate_systems_labels_the_human_judged_queries_and_notes_a_flipped_conclusion() -> None:
    """The judge favours system b (it inflates b's scores); humans find b no better than a."""
    rng = np.random.default_rng(7)
    queries = [f"q{i:03d}" for i in range(300)]
    a = rng.beta(2, 5, size=300)
    b = np.clip(a + rng.normal(0, 0.05, size=300), 0, 1)
    judge = _long({"a": a, "b": np.clip(b + 0.1, 0, 1)}, queries)
    human = _long({"a": a[:40], "b": b[:40]}, queries[:40])
    blocks, notes = calibrate_systems(judge, human, "a")
    block = blocks["b"]["P@10"]
    expected = calibrated_mean(b[:40], np.clip(b + 0.1, 0, 1)[:40], np.clip(b + 0.1, 0, 1)[40:])
    assert block["estimate"] == pytest.approx(expected.estimate)
    assert (block["n_human"], block["n_judge_only"]) == (40, 260)
    assert block["ci"][0] <= b.mean() <= block["ci"][1] < block["judge_only"]
    diff = block["difference"]
    assert diff["judge_only_conclusion"] == "better" and diff["conclusion"] == "no difference"
    assert len(notes) == 1 and "b against a" in notes[0] and "the judge alone says better" in notes[0]
    assert "difference" not in blocks["a"]["P@10"]
    assert isinstance(block["labels_needed"], int)


def test_calibrate_systems_needs_shared_queries() -> None:
    judge = _long({"a": np.ones(3)}, ["q1", "q2", "q3"])
    with pytest.raises(InputError, match="at least 2 queries judged by both"):
        calibrate_systems(judge, _long({"a": np.ones(2)}, ["x1", "x2"]))
