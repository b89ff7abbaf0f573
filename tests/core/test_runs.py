"""Run tables: trec_eval order and ties, cut-offs, identical ids, TREC files, RRF, rerank order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from irflow.tasks.core.runs import (
    MAX_DEPTH,
    drop_identical_ids,
    order_run,
    read_trec,
    validate_depth,
    write_trec,
)
from irflow.tasks.core.schema import InputError
from irflow.tasks.retrieve.fusion import apply_rerank, fuse_rrf


def run_of(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["query_id", "doc_id", "score"])


def ranked(run: pd.DataFrame) -> list[tuple[str, str, int]]:
    return list(zip(run["query_id"], run["doc_id"], run["rank"]))


def test_order_is_score_desc_then_doc_id_desc_as_strings() -> None:
    run = order_run(
        run_of(
            [
                ("2", "a", 1.0),
                ("10", "9", 0.5),
                ("10", "10", 0.5),
                ("10", "b", 0.7),
                ("10", "100", 0.5),
                ("2", "b", 1.0),
                ("2", "c", 3.0),
            ]
        )
    )
    # string order: "9" > "100" > "10" (trec_eval compares doc ids with strcmp)
    assert ranked(run) == [
        ("10", "b", 1),
        ("10", "9", 2),
        ("10", "100", 3),
        ("10", "10", 4),
        ("2", "c", 1),
        ("2", "b", 2),
        ("2", "a", 3),
    ]
    assert list(run.columns) == ["query_id", "doc_id", "score", "rank"]
    assert run["rank"].dtype == np.int64 and run["score"].dtype == np.float64
    assert ranked(order_run(run.iloc[::-1])) == ranked(run)  # input order never matters


def test_order_equals_a_stable_pandas_sort_on_random_runs() -> None:
    """order_run sorts with Arrow; its order (and rank, dtypes, index) is that of pandas' stable sort by
    query id, score descending, doc id descending, on ties, -0.0, NaN and infinite scores, unicode ids
    (code point order), missing doc ids and any input index."""
    rng = np.random.default_rng(7)
    alphabet = ["a", "b", "Z", "é", "😀", "10", "9", "", " ", "ß", "\u0301"]
    scores = [0.0, -0.0, 1.0, 1.5, -2.0, float("nan"), 1e-300, np.inf, -np.inf]
    for trial in range(200):
        n = int(rng.integers(0, 40))
        run = pd.DataFrame(
            {
                "query_id": [str(rng.choice(alphabet[:5])) + str(rng.choice(alphabet)) for _ in range(n)],
                "doc_id": ["".join(rng.choice(alphabet, size=int(rng.integers(1, 4)))) for _ in range(n)],
                "score": rng.choice(scores, size=n),
            },
            index=rng.permutation(n) * 3,
        )
        if trial % 3 == 0 and n:
            run.loc[run.index[0], "doc_id"] = None
        expected = run.astype({"query_id": "str", "doc_id": "str"}).sort_values(
            ["query_id", "score", "doc_id"], ascending=[True, False, False], kind="mergesort", ignore_index=True
        )
        expected["rank"] = expected.groupby("query_id", sort=False).cumcount().add(1).astype("int64")
        pd.testing.assert_frame_equal(order_run(run), expected)


def test_order_matches_trec_eval_tie_breaking() -> None:
    """pytrec_eval (trec_eval's code) must score our order the same as its own ordering of the scores."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run = order_run(run_of([("q", "d1", 1.0), ("q", "d2", 1.0), ("q", "d3", 1.0), ("q", "d0", 0.5)]))
    qrels = {"q": {"d1": 1}}
    ours = {"q": {d: float(10 - r) for d, r in zip(run["doc_id"], run["rank"])}}  # strictly by our ranks
    theirs = {"q": dict(zip(run["doc_id"], run["score"]))}
    evaluate = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate
    assert evaluate(ours)["q"]["recip_rank"] == evaluate(theirs)["q"]["recip_rank"] == pytest.approx(1 / 3)


def test_depth_validation() -> None:
    assert validate_depth(MAX_DEPTH) == MAX_DEPTH
    for bad in (0, -1, MAX_DEPTH + 1, 1.5, "10", True, None):
        with pytest.raises(InputError, match="depth must be an integer between 1 and 1000"):
            validate_depth(bad)  # type: ignore[arg-type]


def test_drop_identical_ids_reranks() -> None:
    run = order_run(run_of([("q1", "q1", 9.0), ("q1", "d1", 5.0), ("q1", "d2", 4.0), ("q2", "q1", 3.0)]))
    kept = drop_identical_ids(run)
    assert ranked(kept) == [("q1", "d1", 1), ("q1", "d2", 2), ("q2", "q1", 1)]


def test_trec_round_trip_is_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    rows = [(f"q{q}", f"doc-{d}", float(s)) for q in range(5) for d, s in enumerate(rng.normal(size=40))]
    rows += [
        ("q9", "α-ü", 1 / 3),
        ("q9", "tiny", 1e-05),
        ("q9", "big", 1e20),
        ("q9", "neg", -2.5),
        ("q9", "tie-a", 0.5),
        ("q9", "tie-b", 0.5),
    ]
    run = order_run(run_of(rows))
    path = write_trec(run, tmp_path / "runs" / "bm25.trec", "irflow-bm25")
    back = read_trec(path)
    pd.testing.assert_frame_equal(back, run)
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == len(run) + 1
    assert lines[0].split() == [
        run["query_id"][0],
        "Q0",
        run["doc_id"][0],
        "1",
        repr(float(run["score"][0])),
        "irflow-bm25",
    ]
    assert "q9 Q0 tie-b 2 0.5 irflow-bm25" in lines and "q9 Q0 tie-a 3 0.5 irflow-bm25" in lines
    assert sorted(p.name for p in path.parent.iterdir()) == ["bm25.trec"]  # no temporary file left
    write_trec(run.sample(frac=1, random_state=1), tmp_path / "again.trec", "irflow-bm25")
    assert (tmp_path / "again.trec").read_bytes() == path.read_bytes()  # byte for byte


def test_read_trec_accepts_blank_lines_and_tabs(tmp_path: Path) -> None:
    path = tmp_path / "r.trec"
    path.write_text("q1\tQ0\td1\t1\t2.5\tx\r\n\n  q1 Q0 d2 2 1 x  \n", encoding="utf-8")
    assert ranked(read_trec(path)) == [("q1", "d1", 1), ("q1", "d2", 2)]
    empty = tmp_path / "empty.trec"
    empty.write_text("", encoding="utf-8")
    assert read_trec(empty).empty and list(read_trec(empty).columns) == ["query_id", "doc_id", "score", "rank"]


@pytest.mark.parametrize(
    ("body", "line", "fragment"),
    [
        ("q1 Q0 d1 1 2.5 x\nq1 Q0 d2 2 1.5\n", 2, "expected 6 fields"),
        ("q1 Q0 d1 1 2.5 x\n\nq1 Q0 d2 2 1.5 x extra\n", 3, "found 7"),
        ("q1 Q0 d1 1 2.5 x\nq1 Q0 d2 two 1.5 x\n", 2, "rank must be an integer, got 'two'"),
        ("q1 Q0 d1 1.0 2.5 x\n", 1, "rank must be an integer"),
        ("q1 Q0 d1 1 2.5 x\nq1 Q0 d2 2 1.5 x\nq1 Q0 d3 3 abc x\n", 3, "score must be a finite number, got 'abc'"),
        ("q1 Q0 d1 1 nan x\n", 1, "finite"),
        ("q1 Q0 d1 1 2.5 x\nq2 Q0 d1 1 2.5 x\nq1 Q0 d1 2 1.0 x\n", 3, "appears twice"),
    ],
)
def test_read_trec_names_file_and_line(tmp_path: Path, body: str, line: int, fragment: str) -> None:
    path = tmp_path / "bad.trec"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_trec(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert fragment in str(info.value)
    assert info.value.line == line and info.value.path == str(path)


def test_read_trec_missing_or_binary_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read run file"):
        read_trec(tmp_path / "absent.trec")
    (tmp_path / "bin.trec").write_bytes(b"q1 Q0 \xff\xfe 1 1 x\n")
    with pytest.raises(InputError, match="not UTF-8"):
        read_trec(tmp_path / "bin.trec")


def test_write_trec_rejects_what_trec_cannot_hold(tmp_path: Path) -> None:
    good = order_run(run_of([("q1", "d1", 1.0)]))
    with pytest.raises(InputError, match="tag"):
        write_trec(good, tmp_path / "a.trec", "two words")
    with pytest.raises(InputError, match="contains whitespace"):
        write_trec(order_run(run_of([("q1", "d 1", 1.0)])), tmp_path / "a.trec", "t")
    with pytest.raises(InputError, match="appears twice"):
        write_trec(order_run(run_of([("q1", "d1", 1.0), ("q1", "d1", 2.0)])), tmp_path / "a.trec", "t")
    with pytest.raises(InputError, match="NaN"):
        write_trec(order_run(run_of([("q1", "d1", float("nan"))])), tmp_path / "a.trec", "t")
    with pytest.raises(InputError, match=r"lacks columns \['rank'\]"):
        write_trec(run_of([("q1", "d1", 1.0)]), tmp_path / "a.trec", "t")
    assert not (tmp_path / "a.trec").exists()


def test_rrf_hand_example() -> None:
    """Two runs, k=60: d2 = 1/61 + 1/62 beats d1 = 1/61 and d3 = 1/62 (a tie broken by doc id desc)."""
    a = order_run(run_of([("q", "d1", 9.0), ("q", "d2", 8.0), ("r", "x", 1.0)]))
    b = order_run(run_of([("q", "d2", 0.9), ("q", "d3", 0.8), ("q", "d0", 0.1)]))
    fused = fuse_rrf([a, b], k=60)
    assert ranked(fused) == [("q", "d2", 1), ("q", "d1", 2), ("q", "d3", 3), ("q", "d0", 4), ("r", "x", 1)]
    scores = dict(zip(fused["doc_id"], fused["score"]))
    assert scores["d2"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["d1"] == pytest.approx(1 / 61) and scores["d3"] == pytest.approx(1 / 62)
    assert scores["d0"] == pytest.approx(1 / 63)
    weighted = fuse_rrf([a, b], weights=[3.0, 1.0], k=0)
    assert ranked(weighted)[:3] == [("q", "d1", 1), ("q", "d2", 2), ("q", "d3", 3)]  # d1 3/1 vs d2 3/2 + 1/1
    assert dict(zip(weighted["doc_id"], weighted["score"]))["d2"] == pytest.approx(2.5)


def test_rrf_equal_exact_scores_tie_whatever_the_member_order() -> None:
    """Ranks (1, 2, 10) and (10, 1, 2) fuse to the same rational score: the floats must be equal too,
    so the doc-id tie rule (descending) orders them, not the last bit of a summation order."""
    runs = [run_of([("q", "a", 0.0), ("q", "z", 0.0)]).assign(rank=ranks) for ranks in ((1, 10), (2, 1), (10, 2))]
    fused = fuse_rrf(runs, k=60)
    scores = dict(zip(fused["doc_id"], fused["score"]))
    assert scores["a"] == scores["z"]
    assert ranked(fused) == [("q", "z", 1), ("q", "a", 2)]


def test_rrf_orders_as_exact_rational_arithmetic() -> None:
    """150 random fusions of 2-4 runs with weights 1, 2 or 0.5: every rank equals the rank given by
    exact Fraction sums (ties by doc id descending), and equal exact sums are equal floats."""
    from fractions import Fraction

    rng = np.random.default_rng(7)
    for trial in range(150):
        members, k = int(rng.integers(2, 5)), int(rng.choice([0, 1, 60]))
        weights = [float(rng.choice([1.0, 2.0, 0.5])) for _ in range(members)]
        docs = [f"d{i:02d}" for i in range(30)]
        runs = []
        for _ in range(members):
            chosen = rng.permutation(docs)[: int(rng.integers(5, 30))]
            runs.append(run_of([("q", d, 0.0) for d in chosen]).assign(rank=np.arange(1, len(chosen) + 1)))
        exact: dict[str, Fraction] = {}
        for run, w in zip(runs, weights):
            for doc, rank in zip(run["doc_id"], run["rank"]):
                exact[doc] = exact.get(doc, Fraction(0)) + Fraction(w) / (k + int(rank))
        expected = sorted(exact, key=lambda d: (exact[d], d), reverse=True)
        fused = fuse_rrf(runs, weights=weights, k=k)
        assert fused["doc_id"].tolist() == expected, f"trial {trial}"
        floats = dict(zip(fused["doc_id"], fused["score"]))
        for x in exact:
            for y in exact:
                assert (floats[x] == floats[y]) == (exact[x] == exact[y]), f"trial {trial}: {x} vs {y}"


def test_rrf_refuses_all_zero_weights_and_drops_zero_weight_members() -> None:
    a = order_run(run_of([("q", "d1", 2.0), ("q", "d2", 1.0)]))
    b = order_run(run_of([("q", "d3", 2.0)]))
    with pytest.raises(ValueError, match="all zero"):
        fuse_rrf([a, b], weights=[0.0, 0.0])
    assert ranked(fuse_rrf([a, b], weights=[1.0, 0.0])) == [("q", "d1", 1), ("q", "d2", 2)]


def test_rerank_reorders_head_and_keeps_tail_below() -> None:
    first = order_run(run_of([("q", f"d{i}", 10.0 - i) for i in range(5)] + [("r", "x", 1.0)]))
    # top 3 of q (d0, d1, d2) and r's only hit get new scores, in run order: q's head first (sorted qids)
    out = apply_rerank(first, 3, [0.1, 0.9, 0.5, 7.0])
    assert ranked(out) == [
        ("q", "d1", 1),
        ("q", "d2", 2),
        ("q", "d0", 3),
        ("q", "d3", 4),
        ("q", "d4", 5),
        ("r", "x", 1),
    ]
    q = out[out["query_id"] == "q"]["score"].tolist()
    assert q[:3] == [0.9, 0.5, 0.1] and q[3] < 0.1 and q[4] < q[3]
    with pytest.raises(ValueError, match="rerank scores"):
        apply_rerank(first, 3, [1.0])
