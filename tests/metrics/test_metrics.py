"""irflow.tasks.metrics against pytrec_eval (trec_eval 9) and against hand-computed values.

* hand-built edge cases and a seeded randomized property test, compared per query and in the
  mean with pytrec_eval to 1e-9 (pytrec_eval leaves judged queries that are absent from the run
  out of its result; trec_eval -c counts them as 0, so the reference adds those zeros);
* real BEIR data (SciFact, NFCorpus test) with a bm25s top-100 run, when ../shared is present;
* unit tests of names, keys, errors and the seed documents' worked examples.
"""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError

import numpy as np
import pandas as pd
import pytest

pytrec_eval = pytest.importorskip("pytrec_eval")

from irflow.tasks.core.schema import InputError, UnknownNameError  # noqa: E402
from irflow.tasks.metrics import (  # noqa: E402
    Measure,
    evaluate,
    expand,
    mean,
    parse_measure,
    parse_measures,
)

TOL = 1e-9


# --------------------------------------------------------------------------- reference side


def trec_sorted(docs: dict[str, float]) -> list[tuple[str, float]]:
    """trec_eval order written independently: score descending, then doc id descending."""
    return sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)


def to_dicts(run: pd.DataFrame, qrels: pd.DataFrame) -> tuple[dict, dict]:
    run_d: dict[str, dict[str, float]] = {}
    for q, d, s in zip(run["query_id"], run["doc_id"], run["score"]):
        run_d.setdefault(str(q), {})[str(d)] = float(s)
    qrels_d: dict[str, dict[str, int]] = {}
    for q, d, g in zip(qrels["query_id"], qrels["doc_id"], qrels["relevance"]):
        qrels_d.setdefault(str(q), {})[str(d)] = int(g)
    return run_d, qrels_d


def _pytrec(qrels_d: dict, run_d: dict, names: set[str], level: int) -> dict:
    if not names:
        return {}
    return pytrec_eval.RelevanceEvaluator(qrels_d, names, relevance_level=level).evaluate(run_d)


def reference(
    run: pd.DataFrame, qrels: pd.DataFrame, measures: list[Measure], relevance_level: int = 1
) -> pd.DataFrame:
    """Expected per-query values from pytrec_eval, wide (query_id × measure name).

    Judged queries missing from pytrec_eval's answer (absent from the run) get 0, as trec_eval -c.
    RR@k: pytrec_eval's recip_rank on the run cut to its top k in trec order.
    R_cap@k: pytrec_eval's P_k * k / min(k, num_rel).
    nDCG(dcg='exp-log2'): pytrec_eval's ndcg_cut with every grade g replaced by 2^g - 1.
    Bpref: pytrec_eval's bpref. Judged@k: counted by hand over the top k in trec order (grade >= 0).
    judged_only=True: the same reference on the run with its unjudged documents removed.
    """
    run_d, qrels_d = to_dicts(run, qrels)
    judged = sorted(qrels_d)
    out = pd.DataFrame(0.0, index=pd.Index(judged, name="query_id"), columns=[m.name for m in measures])

    def put(name: str, res: dict, key):
        for q, vals in res.items():
            if q in out.index:
                v = vals[key] if not callable(key) else key(vals)
                out.loc[q, name] = v

    def judged(q: str, d: str) -> bool:  # a negative grade is trec_eval's "in the pool but unjudged"
        return qrels_d.get(q, {}).get(d, -1) >= 0

    condensed_d = {q: {d: v for d, v in ds.items() if judged(q, d)} for q, ds in run_d.items()}
    for m in measures:
        rel = relevance_level if m.rel is None else m.rel
        k = m.cutoff
        run_d = condensed_d if m.judged_only else to_dicts(run, qrels)[0]
        if m.family == "Judged":  # no trec_eval measure: counted here by hand, in trec order
            for q, ds in run_d.items():
                if q in out.index:
                    out.loc[q, m.name] = sum(judged(q, d) for d, _ in trec_sorted(ds)[:k]) / k
        elif m.family == "Bpref":
            put(m.name, _pytrec(qrels_d, run_d, {"bpref"}, rel), "bpref")
        elif m.family == "nDCG":
            q_d = qrels_d
            if m.dcg == "exp-log2":
                q_d = {q: {d: (2**g - 1 if g > 0 else g) for d, g in ds.items()} for q, ds in qrels_d.items()}
            name = "ndcg" if k is None else f"ndcg_cut.{k}"
            key = "ndcg" if k is None else f"ndcg_cut_{k}"
            put(m.name, _pytrec(q_d, run_d, {name}, 1), key)
        elif m.family == "RR":
            r_d = run_d if k is None else {q: dict(trec_sorted(ds)[:k]) for q, ds in run_d.items()}
            put(m.name, _pytrec(qrels_d, r_d, {"recip_rank"}, rel), "recip_rank")
        elif m.family == "R_cap":
            res = _pytrec(qrels_d, run_d, {f"P.{k}", "num_rel"}, rel)
            put(m.name, res, lambda v, k=k: (v[f"P_{k}"] * k / min(k, v["num_rel"])) if v["num_rel"] else 0.0)
        else:
            te = {
                "P": ("P", "P"),
                "R": ("recall", "set_recall"),
                "AP": ("map_cut", "map"),
                "Success": ("success", None),
                "Rprec": (None, "Rprec"),
            }[m.family]
            if k is None:
                put(m.name, _pytrec(qrels_d, run_d, {te[1]}, rel), te[1])
            else:
                put(m.name, _pytrec(qrels_d, run_d, {f"{te[0]}.{k}"}, rel), f"{te[0]}_{k}")
    return out


def assert_matches(
    run: pd.DataFrame, qrels: pd.DataFrame, measures: list[Measure], relevance_level: int = 1
) -> pd.DataFrame:
    per_query = evaluate(run, qrels, measures, relevance_level=relevance_level)
    got = per_query.pivot(index="query_id", columns="metric", values="value")
    want = reference(run, qrels, measures, relevance_level)
    assert list(per_query.columns) == ["query_id", "metric", "value"]
    assert per_query["value"].dtype == np.float64
    assert len(per_query) == len(want) * len(measures), "one row per judged query × measure"
    assert sorted(got.index) == sorted(want.index)
    got = got.reindex(index=want.index, columns=want.columns)
    diff = (got - want).abs()
    worst = diff.stack().idxmax() if diff.size else None
    assert float(diff.to_numpy().max(initial=0.0)) <= TOL, (
        f"per-query mismatch at {worst}: irflow {got.loc[worst]} vs pytrec_eval {want.loc[worst]}"
    )
    means = mean(per_query)
    for name in want.columns:
        assert abs(means[name] - float(want[name].mean())) <= TOL, name
    return got


ALL_FAMILIES = ["nDCG", "P", "R", "R_cap", "RR", "AP", "Success", "Judged"]


def all_measures(cutoffs=(1, 2, 3, 5, 10, 100)) -> list[Measure]:
    return expand(ALL_FAMILIES, list(cutoffs)) + parse_measures(
        [
            "RR",
            "AP",
            "R",
            "nDCG",
            "Rprec",
            "nDCG(dcg='exp-log2')@5",
            "nDCG(dcg='exp-log2')@10",
            "P(rel=2)@5",
            "R(rel=2)@10",
            "AP(rel=2)@10",
            "AP(rel=2)",
            "RR(rel=2)@3",
            "Success(rel=2)@5",
            "Rprec(rel=2)",
            "R_cap(rel=2)@5",
            "Bpref",
            "Bpref(rel=2)",
            "nDCG(judged_only=True)@10",
            "P(judged_only=True)@5",
            "AP(judged_only=True)",
            "RR(judged_only=True,rel=2)@10",
        ]
    )


def frame(rows: list[tuple], cols: tuple[str, ...]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(cols))
    if len(df) == 0:
        df = df.astype({cols[0]: "str", cols[1]: "str", cols[2]: "float64" if cols[2] == "score" else "int64"})
    return df


def run_df(rows) -> pd.DataFrame:
    return frame(rows, ("query_id", "doc_id", "score"))


def qrels_df(rows) -> pd.DataFrame:
    return frame(rows, ("query_id", "doc_id", "relevance"))


# --------------------------------------------------------------------------- (a) edge cases

EDGE_QRELS = qrels_df(
    [
        # ties: a, b, c all score 1.0 -> trec order c, b, a (doc id descending)
        ("ties", "a", 1),
        ("ties", "b", 0),
        ("ties", "c", 0),
        ("ties", "z", 2),
        # numeric-looking ids tie: strcmp puts "9" above "10" above "1"
        ("num", "10", 1),
        ("num", "9", 0),
        ("num", "1", 2),
        # no relevant judgement at all (every grade 0)
        ("norel", "x", 0),
        ("norel", "y", 0),
        # judged but missing from the run
        ("missing", "m1", 1),
        ("missing", "m2", 2),
        # graded, with a run shorter than most cutoffs, an unjudged doc and a negative grade
        ("graded", "g1", 3),
        ("graded", "g2", 2),
        ("graded", "g3", 1),
        ("graded", "g4", 0),
        ("graded", "g5", 2),
        ("graded", "neg", -1),
        # non-ASCII ids in a tie (UTF-8 byte order == code point order)
        ("utf", "é", 1),
        ("utf", "z", 0),
        ("utf", "e", 1),
    ]
)

EDGE_RUN = run_df(
    [
        ("ties", "a", 1.0),
        ("ties", "b", 1.0),
        ("ties", "c", 1.0),
        ("ties", "d", 0.5),
        ("ties", "z", 0.5),
        ("num", "1", 3.0),
        ("num", "10", 3.0),
        ("num", "9", 3.0),
        ("norel", "x", 2.0),
        ("norel", "w", 1.0),
        ("graded", "g4", 9.5),
        ("graded", "neg", 9.0),
        ("graded", "u1", 8.0),
        ("graded", "g2", 7.0),
        ("graded", "g1", -1.0),
        ("utf", "e", 0.0),
        ("utf", "é", 0.0),
        ("utf", "z", 0.0),
        ("unjudged-query", "a", 5.0),
        ("unjudged-query", "b", 4.0),
    ]
)


def test_edge_cases_match_pytrec_eval():
    assert_matches(EDGE_RUN, EDGE_QRELS, all_measures())


def test_edge_cases_relevance_level_2_match_pytrec_eval():
    assert_matches(EDGE_RUN, EDGE_QRELS, all_measures(), relevance_level=2)


def test_ties_are_broken_by_doc_id_descending():
    got = evaluate(EDGE_RUN, EDGE_QRELS, ["RR", "P@1", "P@3"]).set_index(["query_id", "metric"])["value"]
    assert got[("ties", "RR")] == pytest.approx(1 / 3)  # c, b, a: the relevant 'a' is third
    assert got[("num", "RR")] == pytest.approx(1 / 2)  # "9" > "10" > "1": '10' second
    assert got[("num", "P@3")] == pytest.approx(2 / 3)
    assert got[("utf", "RR")] == pytest.approx(1.0)  # 'é' (0xC3 0xA9) sorts above 'z' and 'e'
    # the same with the tie order reversed in the input rows
    rev = EDGE_RUN.iloc[::-1].reset_index(drop=True)
    pd.testing.assert_frame_equal(
        evaluate(rev, EDGE_QRELS, all_measures()), evaluate(EDGE_RUN, EDGE_QRELS, all_measures())
    )


def test_rank_column_is_ignored():
    with_rank = EDGE_RUN.assign(rank=np.arange(len(EDGE_RUN), 0, -1))  # contradicts the scores
    pd.testing.assert_frame_equal(
        evaluate(with_rank, EDGE_QRELS, all_measures()), evaluate(EDGE_RUN, EDGE_QRELS, all_measures())
    )


def test_missing_query_scores_zero_and_counts_in_mean():
    per_query = evaluate(EDGE_RUN, EDGE_QRELS, ["nDCG@10", "RR", "R@100"])
    missing = per_query[per_query["query_id"] == "missing"]
    assert len(missing) == 3 and (missing["value"] == 0.0).all()
    assert "unjudged-query" not in set(per_query["query_id"])
    judged = EDGE_QRELS["query_id"].nunique()
    m = mean(per_query)
    assert m["RR"] == pytest.approx(per_query.loc[per_query["metric"] == "RR", "value"].sum() / judged)
    # pytrec_eval itself leaves the query out: its plain mean is over fewer queries
    run_d, qrels_d = to_dicts(EDGE_RUN, EDGE_QRELS)
    res = pytrec_eval.RelevanceEvaluator(qrels_d, {"recip_rank"}).evaluate(run_d)
    assert "missing" not in res and len(res) == judged - 1


def test_query_without_relevant_judgements_is_kept_with_zeros():
    """trec_eval/pytrec_eval evaluate an all-grade-0 query (num_rel = 0) and report 0 for every
    measure; it is averaged in. irflow does exactly the same."""
    run_d, qrels_d = to_dicts(EDGE_RUN, EDGE_QRELS)
    names = {"ndcg_cut.10", "P.5", "recall.5", "recip_rank", "map", "Rprec", "success.5"}
    res = pytrec_eval.RelevanceEvaluator(qrels_d, names).evaluate(run_d)
    assert "norel" in res and all(v == 0.0 for v in res["norel"].values())
    per_query = evaluate(EDGE_RUN, EDGE_QRELS, all_measures())
    norel = per_query[per_query["query_id"] == "norel"]
    judged = norel["metric"].str.startswith("Judged")  # its documents are judged (grade 0): not a zero
    assert len(norel) == len(all_measures()) and (norel.loc[~judged, "value"] == 0.0).all()
    assert (norel.loc[judged, "value"] > 0).all()


def test_empty_run_scores_zero_everywhere():
    empty = run_df([])
    got = assert_matches(empty, EDGE_QRELS, all_measures())
    assert (got.to_numpy() == 0.0).all()
    assert set(mean(evaluate(empty, EDGE_QRELS, ["nDCG@10"])).values()) == {0.0}


def test_cutoff_deeper_than_run():
    run = run_df([("q", "a", 3.0), ("q", "b", 2.0)])
    qrels = qrels_df([("q", "a", 1), ("q", "b", 1), ("q", "c", 1)])
    got = evaluate(run, qrels, ["P@10", "R@1000", "AP@100", "nDCG@100", "Success@50", "R_cap@100"])
    v = dict(zip(got["metric"], got["value"]))
    assert v["P@10"] == pytest.approx(2 / 10)  # divides by k, not by the run length
    assert v["R@1000"] == pytest.approx(2 / 3)
    assert v["AP@100"] == pytest.approx((1 + 1) / 3)
    assert v["nDCG@100"] == pytest.approx((1 + 1 / math.log2(3)) / (1 + 1 / math.log2(3) + 1 / math.log2(4)))
    assert v["R_cap@100"] == pytest.approx(2 / 3)
    assert_matches(run, qrels, all_measures((1, 5, 10, 100, 1000)))


def test_graded_relevance_threshold_two():
    run = run_df([("q", "a", 5.0), ("q", "b", 4.0), ("q", "c", 3.0), ("q", "d", 2.0)])
    qrels = qrels_df([("q", "a", 1), ("q", "b", 2), ("q", "c", 0), ("q", "d", 3), ("q", "e", 2)])
    got = evaluate(run, qrels, ["P(rel=2)@4", "P@4", "RR(rel=2)", "R(rel=2)@4", "Rprec(rel=2)"])
    v = dict(zip(got["metric"], got["value"]))
    assert v["P(rel=2)@4"] == pytest.approx(2 / 4)
    assert v["P@4"] == pytest.approx(3 / 4)
    assert v["RR(rel=2)"] == pytest.approx(1 / 2)
    assert v["R(rel=2)@4"] == pytest.approx(2 / 3)
    assert v["Rprec(rel=2)"] == pytest.approx(1 / 3)  # top 3 = a, b, c: only b has grade >= 2
    # evaluate(relevance_level=2) applies to measures without their own rel
    lvl2 = evaluate(run, qrels, ["P@4"], relevance_level=2)
    assert lvl2["value"].iloc[0] == pytest.approx(2 / 4)
    assert_matches(run, qrels, all_measures(), relevance_level=2)


def test_ndcg_ignores_relevance_level_like_trec_eval():
    a = evaluate(EDGE_RUN, EDGE_QRELS, ["nDCG@10"], relevance_level=1)
    b = evaluate(EDGE_RUN, EDGE_QRELS, ["nDCG@10"], relevance_level=3)
    pd.testing.assert_frame_equal(a, b)


# --------------------------------------------------------------------------- (b) randomized


def random_case(seed: int, n_queries: int = 300) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Random graded qrels and a run with many score ties, missing and unjudged queries."""
    rng = np.random.default_rng(seed)
    run_rows, qrels_rows = [], []
    for qi in range(n_queries):
        q = f"q{qi}"
        pool = [f"d{j}" for j in rng.choice(200, size=60, replace=False)]
        kind = rng.random()
        if kind > 0.05:  # 5% of the queries have no judgements (their run rows must be ignored)
            n_j = int(rng.integers(1, 30))
            grades = rng.choice([0, 1, 2, 3, 4], size=n_j, p=[0.45, 0.25, 0.15, 0.1, 0.05])
            if rng.random() < 0.08:
                grades[:] = 0  # a query with no relevant judgement
            judged = rng.choice(60, size=n_j, replace=False)
            qrels_rows += [(q, pool[j], int(g)) for j, g in zip(judged, grades)]
        if rng.random() > 0.07:  # 7% of the queries are absent from the run
            depth = int(rng.integers(0, 60))
            levels = int(rng.integers(1, 8))  # few distinct scores -> many ties
            scores = rng.integers(0, levels, size=depth) / 2.0 - 1.0
            run_rows += [(q, pool[j], float(s)) for j, s in zip(range(depth), scores)]
    run = run_df(run_rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)
    return run, qrels_df(qrels_rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_randomized_against_pytrec_eval(seed):
    run, qrels = random_case(seed)
    ms = all_measures((1, 2, 3, 5, 7, 10, 20, 50, 100))
    assert_matches(run, qrels, ms)
    assert_matches(run, qrels, ms, relevance_level=2)


def test_randomized_long_runs_and_many_queries_use_the_global_sort():
    """Very unequal run lengths take the other ordering path of the core; same answers."""
    rng = np.random.default_rng(7)
    run_rows = [("long", f"d{j}", float(rng.integers(0, 50))) for j in range(3000)]
    qrels_rows = [("long", f"d{j}", int(rng.integers(0, 3))) for j in rng.choice(3000, 300, replace=False)]
    for qi in range(40):
        qrels_rows.append((f"s{qi}", "d1", 1))
        run_rows += [(f"s{qi}", f"d{j}", float(rng.integers(0, 3))) for j in range(3)]
    assert_matches(run_df(run_rows), qrels_df(qrels_rows), all_measures((1, 10, 100, 1000, 5000)))


# --------------------------------------------------------------------------- (c) real data


def dense_subset(dataset, n_queries: int = 30, n_judged: int = 120, n_distractors: int = 80):
    """A real, smaller retrieval problem: some test queries, (up to ``n_judged`` of) their judged
    documents and distractors; all their judgements stay, so some relevant documents are unretrievable.

    Keeps a full dense encode out of the default test run while still checking real model output.
    """
    import dataclasses

    queries = dataset.queries.sort_values("query_id").head(n_queries)
    qrels = dataset.qrels[dataset.qrels["query_id"].isin(set(queries["query_id"]))]
    judged = set(sorted(set(qrels["doc_id"]))[:n_judged])
    others = dataset.corpus[~dataset.corpus["doc_id"].isin(set(qrels["doc_id"]))].head(n_distractors)
    corpus = pd.concat([dataset.corpus[dataset.corpus["doc_id"].isin(judged)], others], ignore_index=True)
    manifest = {
        **dataset.manifest,
        "fingerprint": dataset.fingerprint[:40] + f"-sub-{n_queries}-{n_judged}-{n_distractors}",
    }
    return dataclasses.replace(
        dataset,
        corpus=corpus,
        queries=queries.reset_index(drop=True),
        qrels=qrels.reset_index(drop=True),
        manifest=manifest,
    )


@pytest.mark.shared
@pytest.mark.parametrize("name", ["scifact", "nfcorpus"])
@pytest.mark.parametrize("system", ["bm25", "dense:minilm"])
def test_real_irflow_runs_match_pytrec_eval(beir_dataset, name, system):
    """irflow's own BM25 (full corpus) and dense runs (a real subset) against pytrec_eval, every measure."""
    from irflow.tasks.retrieve.searchers import retrieve

    dataset = beir_dataset(name)
    if system.startswith("dense"):
        dataset = dense_subset(dataset)
    run = retrieve(dataset, system, depth=100).run
    assert run.groupby("query_id").size().max() == 100
    ms = all_measures((1, 3, 5, 10, 20, 100))
    assert_matches(run, dataset.qrels, ms)
    if name == "nfcorpus":  # graded: also at level 2
        assert_matches(run, dataset.qrels, ms, relevance_level=2)


# --------------------------------------------------------------------------- unit tests

NAMES_AND_KEYS = {
    "nDCG@10": "ndcg_at_10",
    "P@10": "p_at_10",
    "R@100": "r_at_100",
    "RR@10": "rr_at_10",
    "RR": "rr",
    "AP@100": "ap_at_100",
    "AP": "ap",
    "Success@10": "success_at_10",
    "Rprec": "rprec",
    "R_cap@10": "r_cap_at_10",
    "nDCG(dcg='exp-log2')@10": "ndcg_dcg_exp_log2_at_10",
    "P(rel=2)@10": "p_rel_2_at_10",
    "Judged@10": "judged_at_10",
    "Bpref": "bpref",
    "nDCG(judged_only=True)@10": "ndcg_judged_only_true_at_10",
}


@pytest.mark.parametrize("name,key", list(NAMES_AND_KEYS.items()))
def test_name_round_trip_and_mlflow_key(name, key):
    m = parse_measure(name)
    assert m.name == name
    assert parse_measure(m.name) == m
    assert m.key == key
    assert set(m.key) <= set("abcdefghijklmnopqrstuvwxyz0123456789_")


def test_measure_fields_and_immutability():
    m = parse_measure("nDCG(dcg='exp-log2')@10")
    assert (m.family, m.cutoff, m.dcg, m.rel) == ("nDCG", 10, "exp-log2", None)
    assert parse_measure("P(rel=2)@10") == Measure("P", 10, rel=2)
    assert parse_measure("nDCG(dcg='log2')@10") == Measure("nDCG", 10)  # default left out of the name
    assert Measure("RR").name == "RR" and Measure("AP", 100).name == "AP@100"
    with pytest.raises(FrozenInstanceError):
        m.cutoff = 5  # type: ignore[misc]
    assert len({parse_measure("P@10"), Measure("P", 10)}) == 1  # hashable, equal by value
    assert parse_measures(["nDCG@10", "nDCG@10", "P@5"]) == [Measure("nDCG", 10), Measure("P", 5)]


def test_expand_families_by_cutoffs():
    got = [m.name for m in expand(["nDCG", "R"], [1, 5, 10, 100])]
    assert got == ["nDCG@1", "nDCG@5", "nDCG@10", "nDCG@100", "R@1", "R@5", "R@10", "R@100"]
    got = [m.name for m in expand(["P(rel=2)", "Rprec", "RR@3"], [5, 10])]
    assert got == ["P(rel=2)@5", "P(rel=2)@10", "Rprec", "RR@3"]


@pytest.mark.parametrize(
    "bad",
    [
        "foo@10",
        "NDCG_cut_10",
        "nDCG@",
        "nDCG@0",
        "Rprec@10",
        "P",
        "Success",
        "nDCG(rel=2)@10",
        "nDCG(dcg='exp')@10",
        "P(rel=0)@10",
        "P(foo=1)@5",
        "Judged(judged_only=True)@10",
        "Bpref@10",
        "P(judged_only=yes)@5",
        "",
    ],
)
def test_unknown_name_error_lists_families(bad):
    with pytest.raises(UnknownNameError) as exc:
        parse_measure(bad)
    msg = str(exc.value)
    assert repr(bad) in msg
    for fam in ("nDCG", "P", "R", "R_cap", "RR", "AP", "Success", "Rprec"):
        assert fam in msg
    assert "e.g. 'nDCG@10'" in msg
    assert isinstance(exc.value, KeyError)  # UnknownNameError is a KeyError too


def test_evaluate_rejects_unknown_measure_names():
    with pytest.raises(UnknownNameError, match="valid families"):
        evaluate(EDGE_RUN, EDGE_QRELS, ["nDCG@10", "MRR@ten"])


def test_duplicate_run_rows_raise_naming_query_and_doc():
    run = run_df([("q1", "a", 2.0), ("q1", "b", 1.0), ("q2", "a", 1.0), ("q1", "a", 0.5)])
    qrels = qrels_df([("q1", "a", 1), ("q2", "a", 1)])
    with pytest.raises(InputError) as exc:
        evaluate(run, qrels, ["P@1"])
    assert "duplicate" in str(exc.value) and "'q1'" in str(exc.value) and "'a'" in str(exc.value)


def test_duplicate_qrels_raise():
    qrels = qrels_df([("q1", "a", 1), ("q1", "a", 2)])
    with pytest.raises(InputError, match="duplicate judgement.*'q1'.*'a'"):
        evaluate(run_df([("q1", "a", 1.0)]), qrels, ["P@1"])


def test_bad_inputs_raise():
    with pytest.raises(InputError, match="missing column"):
        evaluate(EDGE_RUN.drop(columns="score"), EDGE_QRELS, ["P@1"])
    with pytest.raises(InputError, match="NaN"):
        evaluate(run_df([("q", "a", float("nan"))]), qrels_df([("q", "a", 1)]), ["P@1"])
    with pytest.raises(InputError, match="integer"):
        evaluate(run_df([("q", "a", 1.0)]), qrels_df([("q", "a", 1.5)]), ["P@1"])
    with pytest.raises(ValueError, match="relevance_level"):
        evaluate(EDGE_RUN, EDGE_QRELS, ["P@1"], relevance_level=0)


def test_edges_fail_with_named_errors_not_overflow_or_nan():
    with pytest.raises(
        UnknownNameError, match=r"cutoff 9223372036854775808 is too large; expected at most 2,147,483,647"
    ):
        evaluate(EDGE_RUN, EDGE_QRELS, ["R_cap@9223372036854775808"])
    run, huge = run_df([("q", "a", 1.0)]), qrels_df([("q", "a", 1100), ("q", "b", 2)])
    with pytest.raises(
        InputError, match=r"grade 1100 \(query 'q', document 'a'\) is too large for nDCG\(dcg='exp-log2'\)"
    ):
        evaluate(run, huge, ["nDCG(dcg='exp-log2')@10"])
    assert evaluate(run, huge, ["nDCG@10"])["value"].tolist() == [pytest.approx(1100 / (1100 + 2 / math.log2(3)))]
    top = qrels_df([("q", "a", 1000), ("q", "b", 1000)])  # the largest grade irflow stores: finite gains
    assert evaluate(run, top, ["nDCG(dcg='exp-log2')@10"])["value"].tolist() == [
        pytest.approx(1 / (1 + 1 / math.log2(3)))
    ]


def test_scores_are_compared_as_doubles_like_trec_eval_10_not_float32_like_pytrec_eval():
    """trec_eval >= 10 reads scores as doubles; pytrec_eval (trec_eval 9's code) stores float32. Two
    scores that differ only beyond float32 precision are distinct here and tied there. This pins
    irflow to trec_eval >= 10: do not "fix" it towards pytrec_eval."""
    run = run_df([("q", "a", 1.000000000001), ("q", "b", 1.0)])
    qrels = qrels_df([("q", "a", 1), ("q", "b", 0)])
    assert evaluate(run, qrels, ["RR"])["value"].tolist() == [1.0]  # a scores higher: first
    tied = pytrec_eval.RelevanceEvaluator({"q": {"a": 1, "b": 0}}, {"recip_rank"}).evaluate(
        {"q": {"a": 1.000000000001, "b": 1.0}}
    )
    assert tied["q"]["recip_rank"] == 0.5  # float32: a tie, broken by doc id descending: b first


def test_integer_ids_are_compared_as_strings():
    run = pd.DataFrame({"query_id": [1, 1, 1], "doc_id": [9, 10, 1], "score": [1.0, 1.0, 1.0]})
    qrels = pd.DataFrame({"query_id": ["1", "1"], "doc_id": ["10", "1"], "relevance": [1, 1]})
    got = evaluate(run, qrels, ["RR", "P@2"])
    assert got["query_id"].tolist() == ["1", "1"]
    assert got["value"].tolist() == pytest.approx([1 / 2, 1 / 2])  # "9" > "10" > "1"


# --------------------------------------------------------------------------- seed documents


def _seed_dcg(relevance_scores: list[int], k: int | None = None) -> float:
    """The seed document's calculate_dcg (2^rel - 1 gain, log2(i + 2) discount)."""
    if k is not None:
        relevance_scores = relevance_scores[:k]
    dcg = 0.0
    for i, gain in enumerate(2**s - 1 for s in relevance_scores):
        dcg += gain / np.log2(i + 2) if i > 0 else gain
    return dcg


def test_seed_example_exponential_gain():
    """The technical-docs example of the seed material: grades 0-3, nDCG with 2^rel − 1 gain."""
    grades = {"doc001": 3, "doc002": 3, "doc003": 3, "doc004": 1, "doc030": 0}
    qrels = qrels_df([("bq", d, g) for d, g in grades.items()])
    # a model that ranks the forum post first and the short code example last
    ranked = ["doc004", "doc001", "doc030", "doc002", "doc003"]
    run = run_df([("bq", d, float(len(ranked) - i)) for i, d in enumerate(ranked)])
    actual = [grades[d] for d in ranked]
    ideal = sorted(grades.values(), reverse=True)
    got = evaluate(run, qrels, ["nDCG(dcg='exp-log2')@3", "nDCG(dcg='exp-log2')@5", "nDCG@5"])
    v = dict(zip(got["metric"], got["value"]))
    for k in (3, 5):
        assert v[f"nDCG(dcg='exp-log2')@{k}"] == pytest.approx(_seed_dcg(actual, k) / _seed_dcg(ideal, k), abs=1e-12)
    # pinned: (1 + 7/log2 3 + 7/log2 5 + 7/log2 6) / (7 + 7/log2 3 + 7/log2 4 + 1/log2 5)
    assert v["nDCG(dcg='exp-log2')@5"] == pytest.approx(0.725814796, abs=1e-9)
    assert v["nDCG@5"] == pytest.approx(
        (1 + 3 / math.log2(3) + 3 / math.log2(5) + 3 / math.log2(6))
        / (3 + 3 / math.log2(3) + 3 / math.log2(4) + 1 / math.log2(5)),
        abs=1e-12,
    )


def test_seed_quick_start_example():
    """retrieved [doc_3, doc_1, doc_7, doc_2, doc_5], relevant {doc_1, doc_2, doc_6}:
    Recall@3 0.33, Precision@3 0.33, MRR 0.50."""
    retrieved = ["doc_3", "doc_1", "doc_7", "doc_2", "doc_5"]
    run = run_df([("q", d, float(5 - i)) for i, d in enumerate(retrieved)])
    qrels = qrels_df([("q", d, 1) for d in ("doc_1", "doc_2", "doc_6")])
    v = mean(evaluate(run, qrels, ["R@3", "P@3", "RR"]))
    assert v == pytest.approx({"R@3": 1 / 3, "P@3": 1 / 3, "RR": 0.5})
