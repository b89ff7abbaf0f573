"""How many queries an interleaving test and a CTR A/B test each need to detect a preference, on the
same simulated users.

The procedure (seeded, so the same inputs give the same numbers):

1. The simulated users of :func:`irflow.tasks.online.interleave.simulate` are the population: each has an
   interleaving credit (+1/0/−1) and the clicks it would give A's own list and B's own list (its CTR:
   clicks per query shown; per result shown would reward a system for returning short lists).
   The preference to detect is the population's: the sign of wins − losses for interleaving, of
   CTR_A − CTR_B for the A/B test (if the two disagree, both are reported as found).
2. For n queries (users) on a grid growing by 2^(1/4) (≈ 19 %) from 16, ``replicates`` experiments are
   drawn with replacement from the population: interleaving shows each of the n users the interleaved
   list, and the sign test (exact binomial, ties dropped) is run at α; the A/B test splits the n users
   between A and B by a fair coin each and runs Welch's t-test on the per-user CTR at α.
3. The power at n is the share of experiments significant at α *in the population's direction*; the queries
   needed is the smallest grid n with power ≥ ``power`` (None past ``max_queries``).

Drawing from the users' empirical distribution (multinomial counts of their outcomes) is a bootstrap of
the population, so n may exceed the users simulated; the users' number bounds how well the small
A/B effect is known (Chapelle et al., TOIS 2012, §6 compare the two the same way, on real logs).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from irflow.tasks.online.interleave import Simulation

START = 16
STEP = 2**0.25
MAX_QUERIES = 10_000_000


def _interleaving_power(credits: np.ndarray, n: int, alpha: float, rng: np.random.Generator, r: int) -> float:
    from scipy import stats

    p = np.array([(credits > 0).mean(), (credits == 0).mean(), (credits < 0).mean()])
    direction = np.sign(p[0] - p[2])
    if direction == 0:
        return 0.0
    w, _, lo = rng.multinomial(n, p, size=r).T
    decided = w + lo
    pv = np.where(decided > 0, np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(w, lo), decided, 0.5)), 1.0)
    return float(np.mean((pv < alpha) & (np.sign(w - lo) == direction)))


def _ab_power(ctr_a: np.ndarray, ctr_b: np.ndarray, n: int, alpha: float, rng: np.random.Generator, r: int) -> float:
    from scipy import stats

    direction = np.sign(ctr_a.mean() - ctr_b.mean())
    if direction == 0:
        return 0.0
    n_a = rng.binomial(n, 0.5, size=r)
    moments = []
    for values, size in ((ctr_a, n_a), (ctr_b, n - n_a)):
        levels, freq = np.unique(values, return_counts=True)
        counts = rng.multinomial(size, freq / freq.sum())  # size: one n per experiment
        m = counts @ levels / np.maximum(size, 1)
        ss = counts @ levels**2 - size * m**2
        moments.append((m, np.maximum(ss, 0) / np.maximum(size - 1, 1), size))
    (ma, va, na), (mb, vb, nb) = moments
    se2 = va / np.maximum(na, 1) + vb / np.maximum(nb, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (ma - mb) / np.sqrt(se2)
        df = se2**2 / ((va / na) ** 2 / np.maximum(na - 1, 1) + (vb / nb) ** 2 / np.maximum(nb - 1, 1))
    pv = np.where((se2 > 0) & (na > 1) & (nb > 1), 2 * stats.t.sf(np.abs(t), np.nan_to_num(df, nan=1.0)), 1.0)
    return float(np.mean((pv < alpha) & (np.sign(ma - mb) == direction)))


def queries_to_detect(
    sim: Simulation,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    replicates: int = 500,
    seed: int = 0,
    max_queries: int = MAX_QUERIES,
) -> dict[str, Any]:
    """The queries the interleaving test and the CTR A/B test each need (see the module), their power
    curves and the ratio A/B ÷ interleaving."""
    rng = np.random.default_rng(seed)
    ctr_a, ctr_b = sim.clicks_a.astype(np.float64), sim.clicks_b.astype(np.float64)
    tests = {
        "interleaving": lambda n: _interleaving_power(sim.credits, n, alpha, rng, replicates),
        "ab_ctr": lambda n: _ab_power(ctr_a, ctr_b, n, alpha, rng, replicates),
    }
    found: dict[str, dict[str, Any]] = {name: {"queries": None, "curve": []} for name in tests}
    step = 0
    while True:
        n = math.ceil(START * STEP**step)
        if n > max_queries or all(f["queries"] is not None for f in found.values()):
            break
        for name, test in tests.items():
            if found[name]["queries"] is None:
                reached = test(n)
                found[name]["curve"].append([n, reached])
                if reached >= power:
                    found[name]["queries"] = n
        step += 1
    credits = sim.credits
    found["interleaving"]["prefers"] = _side(int((credits > 0).sum()) - int((credits < 0).sum()))
    found["ab_ctr"]["prefers"] = _side(float(ctr_a.mean() - ctr_b.mean()))
    il, ab = found["interleaving"]["queries"], found["ab_ctr"]["queries"]
    return {
        **found,
        "alpha": alpha,
        "power": power,
        "replicates": replicates,
        "seed": seed,
        "grid_step": STEP,
        "ratio": ab / il if il and ab else None,
    }


def _side(difference: float) -> str | None:
    return "A" if difference > 0 else "B" if difference < 0 else None


__all__ = ["queries_to_detect"]
