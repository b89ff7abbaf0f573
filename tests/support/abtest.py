"""Simulated A/B tests with a known effect: users of different activity and click propensity.

Each user u issues N_u = 1 + Poisson(λ_u) queries (λ_u log-normal: a few heavy users, many light ones)
and clicks each result page with probability p_u (logit-normal, lower for heavy users); the treatment
adds ``effect`` to every p_u. So the true difference of every user-weighted ratio E[N p]/E[N] is exactly
``effect``, while queries of one user are correlated: the per-query variance is too small.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MEAN_ACTIVITY = 8.0


def _users(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per user: expected queries λ_u and click probability p_u (correlated: heavy users click less)."""
    z = rng.standard_normal(shape)
    activity = MEAN_ACTIVITY * np.exp(1.0 * z - 0.5)
    logit = -0.9 + 0.9 * rng.standard_normal(shape) - 0.3 * z
    return activity, 1 / (1 + np.exp(-logit))


def simulate_units(
    seeds: int, users: int, effect: float, rng: np.random.Generator
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per arm, ``(queries, clicks)`` arrays of shape (seeds, users): many experiments at once."""
    out = {}
    for arm, delta in (("control", 0.0), ("treatment", effect)):
        activity, p = _users(rng, (seeds, users))
        queries = 1 + rng.poisson(activity)
        out[arm] = (queries, rng.binomial(queries, np.clip(p + delta, 0, 1)))
    return out


def simulate_daily(
    seeds: int, users: int, days: int, effect: float, rng: np.random.Generator
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per arm, cumulative ``(queries, clicks)`` through each day, shape (seeds, users, days)."""
    out = {}
    for arm, delta in (("control", 0.0), ("treatment", effect)):
        activity, p = _users(rng, (seeds, users))
        queries = rng.poisson(activity[..., None] / days * 2, size=(seeds, users, days))
        clicks = rng.binomial(queries, np.clip(p + delta, 0, 1)[..., None])
        out[arm] = (queries.cumsum(-1), clicks.cumsum(-1))
    return out


def simulate_log(
    seed: int,
    users: int = 600,
    effect: float = 0.03,
    treatment_share: float = 0.5,
    days: int = 7,
    arms: tuple[str, str] = ("control", "treatment"),
) -> pd.DataFrame:
    """One log, one row per query shown: user_id, arm, query, clicked, position (of the click), dwell,
    converted, day. Users are assigned to the treatment with probability ``treatment_share``."""
    rng = np.random.default_rng(seed)
    treated = rng.random(users) < treatment_share
    activity, p = _users(rng, (users,))
    queries = 1 + rng.poisson(activity)
    user = np.repeat(np.arange(users), queries)
    p_click = np.clip(p + effect * treated, 0, 1)[user]
    rows = len(user)
    clicked = rng.random(rows) < p_click
    position = np.where(clicked, rng.geometric(0.45 + 0.1 * treated[user]), 0)
    dwell = np.where(clicked, rng.exponential(40.0, rows).round(1), 0.0)
    return pd.DataFrame(
        {
            "user_id": np.char.add("u", user.astype(str)),
            "arm": np.where(treated[user], arms[1], arms[0]),
            "query": np.char.add("query ", rng.integers(0, 500, rows).astype(str)),
            "clicked": clicked.astype(int),
            "position": pd.array(np.where(clicked, position, 0), dtype="Int64").astype(object),
            "dwell": dwell,
            "converted": (clicked & (rng.random(rows) < 0.2)).astype(int),
            "day": rng.integers(1, days + 1, rows),
        }
    ).assign(position=lambda t: t["position"].where(t["clicked"] == 1, None))
