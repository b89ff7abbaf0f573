"""Team-draft interleaving of two rankings, credit from clicks, and the test of the preference.

Team draft (Radlinski, Kurup & Joachims, CIKM 2008, Algorithm 2): like captains choosing teams, the
system with fewer picks so far (a coin flip on a tie) adds its highest-ranked result not yet shown, and
the result joins its team; picking stops at ``k`` results or when either ranking has nothing new left.
Each team's results keep their ranking's order and the teams never differ by more than one pick at any
prefix, so a user who clicks at random favours neither system.

Credit: the team with more clicked results wins the impression; equal counts (none included) tie.
Over impressions (Chapelle, Joachims, Radlinski & Yue, TOIS 2012, §4):

    Δ_AB = (wins_A + ½ · ties) / (wins_A + wins_B + ties) − ½

and the two-sided sign test of wins_A against wins_B (ties dropped; exact binomial, p = ½).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.online.clickmodels import ClickModel

A, B = 1, -1  # team labels in the arrays (0: no result)


def team_draft(a: Sequence[str], b: Sequence[str], k: int, rng: np.random.Generator) -> tuple[list[str], list[int]]:
    """One team-draft interleaving of rankings ``a`` and ``b``: the shown list (at most ``k``) and each
    result's team (:data:`A` or :data:`B`)."""
    shown: list[str] = []
    teams: list[int] = []
    seen: set[str] = set()
    i = j = picks_a = picks_b = 0
    while len(shown) < k:
        while i < len(a) and a[i] in seen:
            i += 1
        while j < len(b) and b[j] in seen:
            j += 1
        if i >= len(a) or j >= len(b):
            break
        if picks_a < picks_b or (picks_a == picks_b and rng.random() < 0.5):
            doc, team, picks_a = a[i], A, picks_a + 1
        else:
            doc, team, picks_b = b[j], B, picks_b + 1
        shown.append(doc)
        teams.append(team)
        seen.add(doc)
    return shown, teams


def credit(teams: np.ndarray, clicks: np.ndarray) -> np.ndarray:
    """Per impression (rows): +1 when team A's results got more clicks, −1 when B's did, 0 a tie."""
    teams = np.asarray(teams)
    clicks = np.asarray(clicks, dtype=bool)
    return np.sign((clicks & (teams == A)).sum(axis=1) - (clicks & (teams == B)).sum(axis=1)).astype(np.int64)


@dataclass(frozen=True)
class Outcome:
    """Wins, ties and losses of A against B over impressions, Δ_AB and the sign test."""

    impressions: int
    wins: int  # A won
    ties: int
    losses: int  # B won
    delta_ab: float
    p_value: float
    prefers: str | None  # "A", "B" or None (not significant at alpha)
    alpha: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def outcome(credits: np.ndarray, alpha: float = 0.05) -> Outcome:
    """The interleaving result of per-impression credits (+1, 0, −1)."""
    from scipy import stats

    c = np.asarray(credits)
    wins, losses = int((c > 0).sum()), int((c < 0).sum())
    ties = len(c) - wins - losses
    delta = (wins + 0.5 * ties) / len(c) - 0.5 if len(c) else 0.0
    p = float(stats.binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0
    prefers = ("A" if wins > losses else "B") if p < alpha else None
    return Outcome(len(c), wins, ties, losses, float(delta), p, prefers, alpha)


def credit_table(queries: Sequence[str] | np.ndarray | pd.Series, credits: np.ndarray | pd.Series) -> pd.DataFrame:
    """Per query (``query_id``): impressions, wins, ties and losses of A against B."""
    c = np.asarray(credits)
    table = pd.DataFrame({"query_id": np.asarray(queries, dtype=object), "win": c > 0, "tie": c == 0, "loss": c < 0})
    grouped = table.groupby("query_id", sort=True)
    out = grouped[["win", "tie", "loss"]].sum().astype(np.int64)
    out.columns = ["wins", "ties", "losses"]
    return out.assign(impressions=grouped.size()).reset_index()[["query_id", "impressions", "wins", "ties", "losses"]]


@dataclass
class Simulation:
    """Simulated users of one query each: the interleaved impression and, for an A/B test on the same
    users, the clicks each would give system A's and system B's own list."""

    queries: np.ndarray  # query id per user
    credits: np.ndarray  # interleaving credit per user
    clicks_a: np.ndarray  # clicks on A's list per user
    clicks_b: np.ndarray  # clicks on B's list per user

    def per_query(self) -> pd.DataFrame:
        """Per query: impressions, wins, ties, losses (A against B)."""
        return credit_table(self.queries, self.credits)

    def ctr(self) -> dict[str, float]:
        """Click-through rate of A's and B's own lists over these users: clicks per query shown."""
        return {"A": float(self.clicks_a.mean()), "B": float(self.clicks_b.mean())}


def simulate(
    rankings: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    grades: Mapping[tuple[str, str], int],
    model: ClickModel,
    users: int,
    *,
    k: int = 10,
    seed: int = 0,
) -> Simulation:
    """``users`` simulated users, each issuing a query drawn uniformly from ``rankings`` (query →
    (A's ranking, B's ranking)); ``grades``: (query, doc) → house grade (unjudged: 0)."""
    rng = np.random.default_rng(seed)
    ids = sorted(rankings)
    drawn = rng.integers(0, len(ids), size=users)
    lists = np.full((3, users, k), -1, dtype=np.int64)  # grades of interleaved, A's and B's lists
    teams = np.zeros((users, k), dtype=np.int64)
    for u, qi in enumerate(drawn):
        q = ids[qi]
        a, b = rankings[q]
        shown, team = team_draft(a, b, k, rng)
        for row, docs in enumerate((shown, a[:k], b[:k])):
            lists[row, u, : len(docs)] = [grades.get((q, d), 0) for d in docs]
        teams[u, : len(team)] = team
    clicks = [model.clicks(lists[row], rng) for row in range(3)]
    return Simulation(
        np.asarray(ids, dtype=object)[drawn],
        credit(teams, clicks[0]),
        clicks[1].sum(axis=1),
        clicks[2].sum(axis=1),
    )


__all__ = ["A", "B", "Outcome", "Simulation", "credit", "credit_table", "outcome", "simulate", "team_draft"]
