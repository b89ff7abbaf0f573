"""The power of an evaluation set against statsmodels' TTestPower and against resampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.power import TTestPower

from irflow.tasks.compare.power import (
    minimum_detectable_effect,
    queries_needed,
    resampled_power,
    set_power,
    t_power,
)
from irflow.tasks.core.schema import InputError


@pytest.mark.parametrize("effect", [0.05, 0.1, 0.2, 0.35, 0.8])
def test_queries_needed_agrees_with_statsmodels(effect):
    expected = TTestPower().solve_power(effect_size=effect, alpha=0.05, power=0.8)
    assert queries_needed(effect) == math.ceil(expected)
    assert queries_needed(-effect) == math.ceil(expected)  # two-sided
    assert t_power(effect, 50) == pytest.approx(TTestPower().power(effect, 50, 0.05), rel=1e-9)
    other = TTestPower().solve_power(effect_size=effect, alpha=0.01, power=0.9)
    assert queries_needed(effect, alpha=0.01, power=0.9) == math.ceil(other)


@pytest.mark.parametrize("n", [10, 50, 300, 5000])
def test_minimum_detectable_effect_agrees_with_statsmodels(n):
    expected = TTestPower().solve_power(nobs=n, alpha=0.05, power=0.8)
    found = minimum_detectable_effect(n)
    assert found == pytest.approx(expected, rel=1e-4)  # statsmodels' own solver stops at ~1e-4 for large n
    assert TTestPower().power(found, n, 0.05) == pytest.approx(0.8, abs=1e-9)


def _ndcg_like_differences(n: int, seed: int) -> np.ndarray:
    """Per-query differences shaped like two retrieval systems': mostly 0, some large either way."""
    rng = np.random.default_rng(seed)
    moved = rng.random(n) < 0.45
    return np.where(moved, rng.normal(0.02, 0.3, n).clip(-1, 1), 0.0)


def test_set_power_checks_the_approximation_by_resampling_within_ten_percent():
    d = _ndcg_like_differences(300, 4)
    found = set_power(d, 0.03, resamples=2000, seed=1)
    sd = d.std(ddof=1)
    assert found.queries == 300 and found.sd_difference == pytest.approx(sd)
    assert found.queries_needed == math.ceil(TTestPower().solve_power(effect_size=0.03 / sd, alpha=0.05, power=0.8))
    assert found.queries_needed_resampled == pytest.approx(found.queries_needed, rel=0.10)
    mdd = TTestPower().solve_power(nobs=300, alpha=0.05, power=0.8) * sd
    assert found.minimum_detectable_difference == pytest.approx(mdd, rel=1e-4)
    simulated = resampled_power(d, 300, found.minimum_detectable_difference, resamples=4000, seed=2)
    assert simulated == pytest.approx(0.8, abs=0.08)  # 10 % of the target power
    assert found.power_now == pytest.approx(TTestPower().power(0.03 / sd, 300, 0.05))


def test_observed_difference_is_the_default_and_bad_input_fails():
    d = _ndcg_like_differences(200, 9)
    assert set_power(d).delta == pytest.approx(d.mean())
    assert set_power(np.zeros(20)).queries_needed is None  # nothing to detect
    with pytest.raises(InputError, match="at least 2 queries"):
        set_power(np.array([0.1]))
    with pytest.raises(InputError, match="alpha and power"):
        queries_needed(0.2, power=1.5)
