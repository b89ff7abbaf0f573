"""zELO annotation, pure parts: pairs, Bradley–Terry (simulated judges), ensemble, store, benchmark measures,
and the zbench round trip of the outputs."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import pearsonr, spearmanr

from irflow.tasks.annotate import benchmark as bench
from irflow.tasks.annotate import bradley_terry, ensemble, outputs
from irflow.tasks.annotate.battle import Battle, Verdict
from irflow.tasks.annotate.candidates import Texts
from irflow.tasks.annotate.pairs import cycle_pairs, load_or_make_pairs, make_pairs
from irflow.tasks.annotate.runner import run_judges
from irflow.tasks.annotate.store import VoteStore, read_votes
from irflow.tasks.core.schema import InputError


def candidates_table(k_per_query: dict[str, int]) -> pd.DataFrame:
    rows = [(q, f"{q}-d{i:02d}", i + 1) for q, k in k_per_query.items() for i in range(k)]
    return pd.DataFrame(rows, columns=["query_id", "doc_id", "rank"])


# ----------------------------------------------------------------------------- pairs


def test_cycles_give_each_document_two_opponents_per_cycle_without_repeats() -> None:
    docs = [f"d{i}" for i in range(25)]
    pairs = cycle_pairs(docs, 4, np.random.default_rng(1))
    unordered = [frozenset(p[:2]) for p in pairs]
    assert len(set(unordered)) == len(unordered) and all(len(p) == 2 for p in unordered)
    first_cycle = [p for p in pairs if p[2] == 0]
    assert len(first_cycle) == 25
    assert all(sum(d in p[:2] for p in first_cycle) == 2 for d in docs)  # a cycle: two neighbours each
    degree = pd.Series([d for p in pairs for d in p[:2]]).value_counts()
    assert 95 <= len(pairs) <= 100 and degree.min() >= 6 and abs(degree.mean() - 2 * len(pairs) / 25) < 1e-9
    assert cycle_pairs(["only"], 4, np.random.default_rng(0)) == []
    assert cycle_pairs([], 4, np.random.default_rng(0)) == []
    assert [p[:2] for p in cycle_pairs(["a", "b"], 4, np.random.default_rng(0))] in ([("a", "b")], [("b", "a")])
    assert len(cycle_pairs(["a", "b", "c"], 4, np.random.default_rng(0))) == 3  # K = 3: every cycle is all pairs
    with pytest.raises(InputError):
        cycle_pairs(docs, 0, np.random.default_rng(0))


def test_pairs_are_seeded_per_query_unique_and_persisted(tmp_path: Path) -> None:
    cands = candidates_table({"q1": 10, "q2": 6, "q3": 1})
    pairs = make_pairs(cands, cycles=4, seed=7)
    assert pairs["pair_id"].is_unique and set(pairs["query_id"]) == {"q1", "q2"}  # K < 2: no pairs
    assert pairs.equals(make_pairs(cands, cycles=4, seed=7))
    assert not pairs.equals(make_pairs(cands, cycles=4, seed=8))
    # a query's pairs do not depend on which other queries are annotated
    alone = make_pairs(cands[cands["query_id"] == "q2"], cycles=4, seed=7)
    assert alone.reset_index(drop=True).equals(pairs[pairs["query_id"] == "q2"].reset_index(drop=True))

    stored = load_or_make_pairs(tmp_path, cands, cycles=4, seed=7)
    assert stored.equals(pairs) and (tmp_path / "pairs.parquet").is_file()
    assert load_or_make_pairs(tmp_path, cands, cycles=4, seed=7).equals(pairs)
    with pytest.raises(InputError, match="other settings"):
        load_or_make_pairs(tmp_path, cands, cycles=4, seed=8)


# ----------------------------------------------------------------------------- Bradley–Terry


def test_bradley_terry_prior_keeps_unanimous_votes_finite_and_scores_zero_mean() -> None:
    wins = np.zeros((3, 3))
    wins[0, 1] = wins[1, 2] = wins[0, 2] = 3.0  # 0 beats everyone, 2 loses everything: the MLE diverges
    result = bradley_terry.fit(wins)
    assert result.converged and np.isfinite(result.scores).all()
    assert abs(result.scores.sum()) < 1e-9 and result.scores[0] > result.scores[1] > result.scores[2]
    weak = bradley_terry.fit(wins, prior=0.1)
    assert weak.scores[0] - weak.scores[2] > result.scores[0] - result.scores[2]  # a weaker prior spreads more
    # known answer: 2 of 3 wins for A against B, and no prior worth mentioning -> s_A - s_B = log 2
    two = bradley_terry.fit(np.array([[0.0, 2.0], [1.0, 0.0]]), prior=1e-6)
    assert two.scores[0] - two.scores[1] == pytest.approx(math.log(2), abs=1e-4)
    capped = bradley_terry.fit(wins, max_iter=2)
    assert not capped.converged and capped.iterations == 2
    with pytest.raises(ValueError):
        bradley_terry.fit(wins, prior=0)


class SimulatedJudge:
    """A noisy judge: prefers the stronger document of the pair it is shown with logistic probability."""

    provider = "sim"
    concurrency = 1
    price_per_1k = 0.0
    local = True
    version = "sim-v1"

    def __init__(self, name: str, strength: dict[str, float], seed: int) -> None:
        self.name, self.strength, self.rng = name, strength, np.random.default_rng(seed)
        self.shown: list[tuple[str, str]] = []

    def prepare(self) -> None:
        pass

    async def judge(self, battle: Battle) -> Verdict:
        self.shown.append((battle.doc_a_id, battle.doc_b_id))
        diff = self.strength[battle.doc_b_id] - self.strength[battle.doc_a_id]
        return Verdict(1.0 if self.rng.random() < 1 / (1 + math.exp(-diff)) else -1.0, "simulated")

    def describe(self) -> dict[str, str]:
        return {"kind": "sim"}

    async def aclose(self) -> None:
        pass


def test_simulation_recovers_hidden_strengths_and_sparse_fit_is_close_to_dense(tmp_path: Path) -> None:
    n_queries, k = 40, 25
    cands = candidates_table({f"q{i:02d}": k for i in range(n_queries)})
    rng = np.random.default_rng(2024)
    strength = dict(zip(cands["doc_id"], rng.normal(0.0, 2.0, len(cands))))
    texts = Texts({q: f"query {q}" for q in cands["query_id"]}, {d: f"text {d}" for d in cands["doc_id"]})
    sparse = make_pairs(cands, cycles=4, seed=0)
    dense = pd.DataFrame(
        [
            (f"{q}:{a}:{b}", q, a, b, 0)
            for q, g in cands.groupby("query_id")
            for a, b in itertools.combinations(g["doc_id"], 2)
        ],
        columns=sparse.columns,
    )
    fitted = {}
    for label, pairs in (("sparse", sparse), ("dense", dense)):
        judges = [SimulatedJudge(f"judge{j}", strength, seed=j + (10 if label == "dense" else 0)) for j in range(3)]
        with VoteStore(tmp_path / label / "votes.jsonl") as store:
            stats = run_judges(pairs, texts, judges, store, seed=0)
        assert sum(stats.calls.values()) == 3 * len(pairs) and not stats.missing
        votes = read_votes(tmp_path / label / "votes.jsonl")
        # the judges saw both orders, and the store holds each vote in the pair's own order
        assert 0.4 < votes["swapped"].mean() < 0.6
        assert (votes["score"] == np.where(votes["swapped"], -votes["raw_score"], votes["raw_score"])).all()
        combined = ensemble.combine(pairs, votes, [j.name for j in judges], "vote")
        scores, convergence = bradley_terry.fit_queries(cands, combined)
        assert convergence["converged"].all()
        assert np.allclose(scores.groupby("query_id")["score"].mean(), 0.0, atol=1e-9)
        fitted[label] = scores.set_index("doc_id")["score"]

    def per_query(fn, x: pd.Series, y: pd.Series) -> float:
        return float(np.mean([fn(x[g["doc_id"]], y[g["doc_id"]])[0] for _, g in cands.groupby("query_id")]))

    truth = pd.Series(strength)
    sparse_truth = per_query(spearmanr, fitted["sparse"], truth)
    dense_truth = per_query(spearmanr, fitted["dense"], truth)
    assert sparse_truth >= 0.9, sparse_truth
    assert dense_truth >= sparse_truth  # three times the battles do help, but ...
    assert dense_truth - sparse_truth < 0.06  # ... O(K) battles come close to O(K^2)
    assert per_query(spearmanr, fitted["sparse"], fitted["dense"]) >= 0.88
    assert per_query(pearsonr, fitted["sparse"], fitted["dense"]) >= 0.88


# ----------------------------------------------------------------------------- ensemble


def test_ensemble_vote_and_mean_with_missing_votes() -> None:
    pairs = pd.DataFrame(
        {"pair_id": ["p1", "p2", "p3"], "query_id": "q", "doc_a": ["a", "a", "b"], "doc_b": ["b", "c", "c"], "cycle": 0}
    )
    votes = pd.DataFrame(
        {
            "pair_id": ["p1", "p1", "p1", "p2", "p2", "p3"],
            "judge": ["x", "y", "z", "x", "y", "x"],
            "score": [0.9, -0.3, 0.0, np.nan, np.nan, -0.5],
        }
    )
    vote = ensemble.combine(pairs, votes, ["x", "y", "z"], "vote")
    assert vote["p_b"].iloc[0] == pytest.approx((1 + 0 + 0.5) / 3)  # an exact 0 is half a vote
    assert np.isnan(vote["p_b"].iloc[1]) and vote["missing"].tolist() == [0, 3, 2]
    assert vote["p_b"].iloc[2] == 0.0 and vote["votes"].tolist() == [3, 0, 1]
    mean = ensemble.combine(pairs, votes, ["x", "y", "z"], "mean")
    assert mean["p_b"].iloc[0] == pytest.approx((1 + 0.2) / 2)
    agree = ensemble.inter_judge_agreement(vote, ["x", "y", "z"])
    assert agree["x | y"] == {"agreement": 0.0, "pairs": 1} and agree["x | z"]["pairs"] == 0
    qrels = pd.DataFrame({"query_id": "q", "doc_id": ["a", "b", "c"], "relevance": [2, 1, 1]})
    human = ensemble.agreement_with_grades(vote, qrels, ["x", "y", "z"])
    assert human["x"] == {"agreement": 0.0, "pairs": 1}  # x preferred b to a; a has the higher grade
    assert human["y"] == {"agreement": 1.0, "pairs": 1} and human["z"] == {"agreement": 0.5, "pairs": 1}
    with pytest.raises(ValueError):
        ensemble.combine(pairs, votes, ["x"], "median")


# ----------------------------------------------------------------------------- store


def test_store_survives_a_torn_line_resumes_and_refuses_a_second_writer(tmp_path: Path) -> None:
    path = tmp_path / "votes.jsonl"
    record = {
        "pair_id": "p1",
        "query_id": "q",
        "doc_a": "a",
        "doc_b": "b",
        "judge": "j",
        "version": "v",
        "swapped": True,
        "raw_score": 0.5,
        "score": -0.5,
        "reasoning": "r",
        "error": None,
        "attempts": 1,
        "seconds": 0.1,
    }
    with VoteStore(path) as store:
        store.append([record, {**record, "pair_id": "p2", "score": None, "raw_score": None, "error": "boom"}])
        with pytest.raises(Exception, match="another annotation"):
            VoteStore(path).__enter__()
    with open(path, "ab") as fh:
        fh.write(b'{"pair_id": "p3", "jud')  # a crash in the middle of a write
    assert len(read_votes(path)) == 2
    with VoteStore(path) as store:
        store.append([{**record, "pair_id": "p2"}])  # the missing vote, asked again, now answered
    votes = read_votes(path)
    assert path.read_text().count("\n") == 3 and votes["pair_id"].tolist() == ["p1", "p2"]
    assert votes["score"].tolist() == [-0.5, -0.5]  # the later record of p2 wins
    path.write_text('{"pair_id": "p1"}\nnot json\n{"pair_id": "p2"}\n')
    with pytest.raises(InputError, match=":2:"):
        read_votes(path)


# ----------------------------------------------------------------------------- benchmark measures


def test_ndcg_exp_gains_ties_and_cutoff() -> None:
    truth = np.array([2.0, 0.0, -1.0])
    gains = np.exp(truth)
    assert bench.ndcg(gains, np.array([3.0, 2.0, 1.0])) == pytest.approx(1.0)
    reverse = (gains[2] + gains[1] / math.log2(3) + gains[0] / 2) / (gains[0] + gains[1] / math.log2(3) + gains[2] / 2)
    assert bench.ndcg(gains, np.array([1.0, 2.0, 3.0])) == pytest.approx(reverse)
    # a full tie: every position gets the mean gain (McSherry & Najork), whatever the input order
    tie = gains.mean() * (1 + 1 / math.log2(3) + 0.5) / (gains[0] + gains[1] / math.log2(3) + gains[2] / 2)
    assert bench.ndcg(gains, np.zeros(3)) == pytest.approx(tie)
    assert bench.ndcg(gains[::-1], np.zeros(3)) == pytest.approx(tie)
    assert bench.ndcg(gains, np.array([1.0, 2.0, 3.0]), k=1) == pytest.approx(gains[2] / gains[0])


def test_pairwise_accuracy_tie_policy() -> None:
    truth = np.array([3.0, 2.0, 2.0, 0.0])  # the pair of 2s carries no preference: 5 pairs count
    assert bench.pairwise_accuracy(truth, np.array([4.0, 3.0, 2.0, 1.0])) == 1.0
    assert bench.pairwise_accuracy(truth, np.array([1.0, 2.0, 3.0, 4.0])) == 0.0
    assert bench.pairwise_accuracy(truth, np.zeros(4)) == 0.5  # a ranker's tie counts half
    assert bench.pairwise_accuracy(truth, np.array([4.0, -np.inf, -np.inf, -np.inf])) == pytest.approx((3 + 1) / 5)
    assert math.isnan(bench.pairwise_accuracy(np.ones(3), np.arange(3.0)))


def test_recall_uses_min_k_gt_n_and_expected_ties() -> None:
    truth, predicted = np.array([5.0, 4.0, 3.0]), np.array([3.0, 2.0, 1.0])
    assert bench.recall_at_k(truth, predicted, k=5, k_gt=5) == 1.0  # zbench: 3 / 5
    assert bench.recall_at_k(truth, predicted, k=1, k_gt=2) == 0.5
    assert bench.recall_at_k(truth, np.array([1.0, 2.0, 3.0]), k=1) == 0.0
    # the truth's top 1 is in a three-way tie for the predicted top 1: found with probability 1/3
    assert bench.recall_at_k(truth, np.zeros(3), k=1) == pytest.approx(1 / 3)
    assert bench.top_probability(np.array([3.0, 2.0, 2.0, 1.0]), 2).tolist() == [1.0, 0.5, 0.5, 0.0]


def test_benchmark_table_and_custom_reranker() -> None:
    truth = pd.DataFrame(
        {"query_id": ["q1"] * 3 + ["q2"] * 2, "doc_id": ["a", "b", "c", "d", "e"], "score": [1.0, 0.0, -1.0, 0.5, -0.5]}
    )
    perfect = truth.assign(score=truth["score"] * 10)
    means = bench.summarise(bench.benchmark(truth, perfect, ks=(1, 2)))
    assert means == {"nDCG": 1.0, "nDCG@1": 1.0, "nDCG@2": 1.0, "accuracy": 1.0, "R@1": 1.0, "R@2": 1.0}
    partial = pd.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["c", "d"], "score": [1.0, 1.0]})  # rest: -inf
    per_query = bench.benchmark(truth, partial, ks=(1,))
    q1 = per_query[per_query["query_id"] == "q1"].set_index("metric")["value"]
    assert q1["R@1"] == 0.0 and q1["accuracy"] == pytest.approx((0 + 0 + 0.5) / 3)

    class Backwards:
        async def score(self, query: str, documents: list[str]) -> list[float]:
            return [-float(len(d)) for d in documents]

    import asyncio

    texts = Texts({"q1": "x", "q2": "y"}, {"a": "1", "b": "22", "c": "333", "d": "4", "e": "55"})
    assert isinstance(Backwards(), bench.Reranker)
    predicted = asyncio.run(bench.reranker_predictions(Backwards(), truth, texts))
    assert bench.summarise(bench.benchmark(truth, predicted))["accuracy"] == 1.0


# ----------------------------------------------------------------------------- outputs


def test_annotated_jsonl_round_trips_through_the_zbench_import(tmp_path: Path) -> None:
    from irflow.tasks.ingest import import_dataset, load_dataset

    scores = pd.DataFrame(
        {
            "query_id": ["q1"] * 4 + ["q2"] * 2,
            "doc_id": ["a", "b", "c", "d", "b", "e"],
            "rank": [1, 2, 3, 4, 1, 2],
            "score": [1.3, 0.9, -0.2, -2.0, 0.25, -0.25],
        }
    )
    texts = Texts({"q1": "first query", "q2": "second query"}, {d: f"text of {d}" for d in "abcde"})
    path = outputs.write_annotated(tmp_path / "annotated.jsonl", scores, texts)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [d["id"] for d in lines[0]["documents"]] == ["a", "b", "c", "d"] and lines[0]["documents"][1]["score"] == 0.9
    qrels = outputs.graded_qrels(path)
    # p = exp(s - best): q1 1.0, 0.67, 0.22, 0.037 -> 3, 3, 1, 0; q2 1.0, 0.61 -> 3, 3
    assert dict(zip(zip(qrels["query_id"], qrels["doc_id"]), qrels["relevance"])) == {
        ("q1", "a"): 3,
        ("q1", "b"): 3,
        ("q1", "c"): 1,
        ("q1", "d"): 0,
        ("q2", "b"): 3,
        ("q2", "e"): 3,
    }
    import_dataset(path, "zbench", "zelo-roundtrip")
    imported = load_dataset("zelo-roundtrip").qrels.sort_values(["query_id", "doc_id"]).reset_index(drop=True)
    assert (
        imported[["query_id", "doc_id", "relevance"]]
        .astype({"relevance": "int64"})
        .equals(qrels.sort_values(["query_id", "doc_id"]).reset_index(drop=True))
    )
    table, read_texts = bench.load_annotated(path)
    assert table["score"].tolist() == scores["score"].tolist() and read_texts.documents["e"] == "text of e"
