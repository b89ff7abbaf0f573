"""Team-draft interleaving: its properties (order kept, balanced picks, fair to random clicks), credit,
the sign test against scipy, and the click models' rates against their definitions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from irflow.tasks.core.schema import InputError
from irflow.tasks.online.clickmodels import ClickModel, default_attractiveness, house_grades, parse_click_model
from irflow.tasks.online.interleave import A, B, credit, outcome, simulate, team_draft


def _rankings(rng: np.random.Generator, pool: int = 30, k: int = 10) -> tuple[list[str], list[str]]:
    docs = [f"d{i}" for i in range(pool)]
    return list(rng.permutation(docs)[:k]), list(rng.permutation(docs)[:k])


def test_each_team_keeps_its_ranking_order_and_picks_stay_balanced():
    rng = np.random.default_rng(7)
    for _ in range(500):
        a, b = _rankings(rng)
        shown, teams = team_draft(a, b, 10, rng)
        assert len(shown) == 10 and len(set(shown)) == 10
        for team, ranking in ((A, a), (B, b)):
            mine = [d for d, t in zip(shown, teams, strict=True) if t == team]
            assert all(d in ranking for d in mine)
            assert [ranking.index(d) for d in mine] == sorted(ranking.index(d) for d in mine)
        lead = np.cumsum(teams)  # picks of A minus picks of B at every prefix
        assert np.abs(lead).max() <= 1
        for prefix in range(1, 11):  # each pick is the picking system's best result not yet shown
            team, doc = teams[prefix - 1], shown[prefix - 1]
            ranking = a if team == A else b
            assert doc == next(d for d in ranking if d not in shown[: prefix - 1])


def test_the_coin_decides_who_picks_first_half_of_the_time():
    rng = np.random.default_rng(3)
    firsts = [team_draft(["x", "y"], ["y", "x"], 2, rng)[1][0] for _ in range(4000)]
    assert stats.binomtest(firsts.count(A), 4000, 0.5).pvalue > 0.001
    assert team_draft(["x", "y"], ["y", "x"], 2, rng)[0] in (["x", "y"], ["y", "x"])


def test_picking_stops_when_a_ranking_has_nothing_new():
    shown, teams = team_draft(["a", "b"], ["a", "b", "c", "d"], 10, np.random.default_rng(0))
    assert len(shown) <= 3 and set(shown) <= {"a", "b", "c"}
    assert team_draft([], ["a"], 5, np.random.default_rng(0)) == ([], [])


def test_credit_counts_clicks_per_team():
    teams = np.array([[A, B, A, B], [B, A, 0, 0], [A, B, B, A], [A, B, 0, 0]])
    clicks = np.array([[1, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=bool)
    assert credit(teams, clicks).tolist() == [1, -1, 0, 0]


def test_outcome_matches_the_definition_and_scipys_sign_test():
    credits = np.array([1] * 30 + [0] * 50 + [-1] * 20)
    out = outcome(credits)
    assert (out.wins, out.ties, out.losses) == (30, 50, 20)
    assert out.delta_ab == pytest.approx((30 + 25) / 100 - 0.5)
    assert out.p_value == pytest.approx(stats.binomtest(30, 50, 0.5).pvalue)
    assert out.prefers is None  # p ≈ 0.2
    assert outcome(np.array([1] * 40 + [-1] * 10)).prefers == "A"
    assert outcome(np.array([0, 0])).p_value == 1.0


def test_random_clicks_favour_neither_system():
    """Fidelity (Hofmann et al., TOIS 2013): clicks that ignore the documents give no preference."""
    rng = np.random.default_rng(11)
    rankings = {f"q{i}": _rankings(rng) for i in range(50)}
    sim = simulate(rankings, {}, ClickModel("pbm", attractiveness=(0.3,) * 4), 20000, seed=5)
    out = outcome(sim.credits)
    assert abs(out.delta_ab) < 0.01 and out.p_value > 0.001


def test_the_better_ranking_wins():
    rng = np.random.default_rng(2)
    rankings, grades = {}, {}
    for i in range(40):
        good, bad = _rankings(rng)
        grades.update({(f"q{i}", d): 1 for d in good[:3]})
        rankings[f"q{i}"] = (good, bad)
    for model in ("pbm", "cascade"):
        sim = simulate(rankings, grades, parse_click_model(model), 3000, seed=1)
        assert outcome(sim.credits).prefers == "A"
        assert sim.ctr()["A"] > sim.ctr()["B"]


def test_pbm_and_cascade_click_rates_follow_their_definitions():
    rng = np.random.default_rng(0)
    grades = np.tile([3, 0, 1, -1], (200000, 1))
    pbm = ClickModel("pbm", eta=1.0)
    gamma = default_attractiveness()
    rates = pbm.clicks(grades, rng).mean(axis=0)
    assert rates == pytest.approx([gamma[3], gamma[0] / 2, gamma[1] / 3, 0], abs=0.004)
    cascade = ClickModel("cascade")  # stop after the first click
    clicks = cascade.clicks(grades, rng)
    assert clicks.sum(axis=1).max() == 1
    reach = [1, 1 - gamma[3], (1 - gamma[3]) * (1 - gamma[0])]  # no click above: still reading
    assert clicks.mean(axis=0) == pytest.approx([gamma[3], reach[1] * gamma[0], reach[2] * gamma[1], 0], abs=0.004)


def test_default_attractiveness_is_graded_back_by_the_click_log_module():
    from irflow.tasks.ingest.clicks import THRESHOLDS

    gamma = default_attractiveness()
    grade = [int(np.select([g >= t for t in THRESHOLDS], [3, 2, 1], default=0)) for g in gamma]
    assert grade == [0, 1, 2, 3]


def test_click_model_specs_and_errors(tmp_path):
    model = parse_click_model("cascade:gamma=0.1/0.2/0.3/0.9,stop=0.5")
    assert model.attractiveness == (0.1, 0.2, 0.3, 0.9) and model.stop == (0.5,) * 4
    assert parse_click_model("pbm:eta=0.5").theta(4) == pytest.approx(1 / np.arange(1, 5) ** 0.5)
    for bad in ("dbn", "pbm:stop=0.5", "pbm:gamma=0.1/2", "pbm:eta=x", "cascade:gamma"):
        with pytest.raises(InputError, match="--clicks"):
            parse_click_model(bad)
    log = tmp_path / "clicks.csv"
    rows = ["query_id,doc_id,position,clicked"]
    rows += [
        f"q,d{p},{p},{int(np.random.default_rng(p * 100 + s).random() < 0.6 / p)}" for s in range(60) for p in (1, 2, 3)
    ]
    log.write_text("\n".join(rows) + "\n")
    fitted = parse_click_model(f"pbm:log={log}")
    assert fitted.theta(5)[0] == 1.0 and fitted.theta(5)[3] == fitted.theta(5)[2]


def test_house_grades_scale_to_the_datasets_top_grade():
    import pandas as pd

    binary = pd.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", "b"], "relevance": [1, 0]})
    assert house_grades(binary) == {("q", "a"): 3, ("q", "b"): 0}
    graded = pd.DataFrame({"query_id": ["q"] * 3, "doc_id": ["a", "b", "c"], "relevance": [2, 1, 0]})
    assert house_grades(graded) == {("q", "a"): 3, ("q", "b"): 2, ("q", "c"): 0}


def test_a_seed_gives_the_same_users_and_the_same_sample_sizes():
    from irflow.tasks.online.interleave_power import queries_to_detect

    rng = np.random.default_rng(2)
    rankings = {f"q{i}": _rankings(rng) for i in range(20)}
    grades = {(q, a[0]): 3 for q, (a, _) in rankings.items()}
    runs = [simulate(rankings, grades, ClickModel("cascade"), 1500, seed=4) for _ in range(2)]
    assert np.array_equal(runs[0].credits, runs[1].credits) and np.array_equal(runs[0].clicks_a, runs[1].clicks_a)
    sizes = [queries_to_detect(run, replicates=100, seed=1) for run in runs]
    assert sizes[0] == sizes[1] and sizes[0]["interleaving"]["queries"] is not None
