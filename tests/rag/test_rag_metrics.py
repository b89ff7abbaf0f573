"""RAG scoring without an LLM: id-based context precision/recall against pytrec_eval on the same top k,
answers-file validation, failures counted (never NaN, never 0/1), paired tests and judge-repeat noise."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest import load_dataset
from irflow.tasks.rag.answers import read_answers, top_contexts
from irflow.tasks.rag.generate import extractive, parse_generator
from irflow.tasks.rag.id_based import ID_METRICS, relevant_ids
from irflow.tasks.rag.samples import Answer, Context
from irflow.tasks.rag.score import Configuration, paired_tests, score, summary
from irflow.tasks.retrieve.searchers import retrieve

pytrec_eval = pytest.importorskip("pytrec_eval")


@pytest.fixture(scope="module")
def techdocs() -> Any:
    return load_dataset("techdocs")


def test_id_based_metrics_equal_pytrec_eval_precision_and_recall_at_k(techdocs: Any) -> None:
    """On a run's top 5, RAGAS's id-based recall |R∩G|/|G| (relevant = grade ≥ 1) is trec_eval's recall_5 at
    relevance level 1, and its precision |R∩G|/|R| is P_5 · 5 / |R| (P_5 divides by 5 even where BM25 found
    fewer documents: td-q-057 has 3)."""
    run = retrieve(techdocs, "bm25", 10).run
    contexts = top_contexts(run, techdocs, 5)
    answers = [Answer(q, "", "", c) for q, c in contexts.items()]
    scores = score([Configuration("bm25", answers)], ID_METRICS, relevant_ids(techdocs.qrels))
    ours = scores.per_query.pivot(index="query_id", columns="metric", values="value")

    qrels: dict[str, dict[str, int]] = {}
    for q, d, g in techdocs.qrels[["query_id", "doc_id", "relevance"]].itertuples(index=False):
        qrels.setdefault(str(q), {})[str(d)] = int(g)
    top = run[run["rank"] <= 5]
    trec = {
        str(q): dict(zip(g["doc_id"].astype(str), g["score"].astype(float), strict=True))
        for q, g in top.groupby("query_id")
    }
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"P.5", "recall.5"}, relevance_level=1).evaluate(trec)
    assert len(ours) == len(theirs) == 80 and min(len(t) for t in trec.values()) < 5  # a short list is covered
    for q, m in theirs.items():
        hits = len(trec[q])
        assert ours.loc[q, "id_based_context_precision"] == pytest.approx(m["P_5"] * 5 / hits, abs=1e-12)
        assert ours.loc[q, "id_based_context_recall"] == pytest.approx(m["recall_5"], abs=1e-12)
    assert scores.failures.empty


def test_undefined_samples_are_failures_with_a_reason_not_nan_or_zero() -> None:
    answers = [
        Answer("q1", "?", "a", (Context("free text"),)),  # no document id: precision undefined
        Answer("q2", "?", "a", (Context("x", "d1"), Context("y", "d9"))),
        Answer("q3", "?", "a", (Context("x", "d1"),)),  # no relevant document: recall undefined
    ]
    s = score([Configuration("c", answers)], ID_METRICS, {"q1": {"d1"}, "q2": {"d1", "d2"}})
    values = {(r.query_id, r.metric): r.value for r in s.per_query.itertuples()}
    assert values == {
        ("q1", "id_based_context_recall"): 0.0,
        ("q2", "id_based_context_precision"): 0.5,
        ("q2", "id_based_context_recall"): 0.5,
        ("q3", "id_based_context_precision"): 0.0,
    }
    failed = {(r.query_id, r.metric): r.error for r in s.failures.itertuples()}
    assert failed == {
        ("q1", "id_based_context_precision"): "no context has a document id",
        ("q3", "id_based_context_recall"): "the query has no relevant document",
    }
    block = summary(s, ID_METRICS)["c"]
    assert block["id_based_context_precision"]["n"] == 2 and block["id_based_context_precision"]["failed"] == 1
    assert block["id_based_context_precision"]["mean"] == pytest.approx(0.25)


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_answers_files_are_validated_with_file_and_line(tmp_path: Path, techdocs: Any) -> None:
    good = {"query_id": "td-q-001", "answer": "x", "contexts": [{"doc_id": "td-doc-0027"}]}
    bad = [
        ("{not json", r"answers.jsonl:2: not JSON"),
        ({"query_id": "td-q-002", "answer": 3, "contexts": []}, r"answers.jsonl:2: 'answer' must be a string"),
        ({"query_id": "td-q-002", "answer": "a", "contexts": "td-doc-1"}, r":2: 'contexts' must be a list"),
        ({"query_id": "td-q-002", "answer": "a", "contexts": [{"id": "x"}]}, r":2: contexts\[0\] must be"),
        (
            {"query_id": "td-q-001", "answer": "a", "contexts": []},
            r":2: query 'td-q-001' was already answered on line 1",
        ),
        ({"query_id": "td-q-002", "answer": "a", "contexts": [], "reference": 1}, r":2: 'reference' must be"),
    ]
    for row, match in bad:
        with pytest.raises(InputError, match=match):
            read_answers(_write(tmp_path / "answers.jsonl", [good, row]), techdocs)
    with pytest.raises(InputError, match="no such file"):
        read_answers(tmp_path / "missing.jsonl", techdocs)


def test_unknown_queries_and_documents_are_counted_named_and_left_out(tmp_path: Path, techdocs: Any) -> None:
    rows = [
        {
            "query_id": "td-q-001",
            "answer": "a",
            "contexts": [{"doc_id": "td-doc-0027"}, {"doc_id": "nope-1"}, {"doc_id": "nope-2", "text": "kept as text"}],
        },
        {"query_id": "zz-1", "answer": "b", "contexts": []},
        {"query_id": "td-q-002", "answer": "c", "contexts": [{"text": "free"}], "reference": "ref"},
    ]
    read = read_answers(_write(tmp_path / "a.jsonl", rows), techdocs)
    assert [a.query_id for a in read.answers] == ["td-q-001", "td-q-002"]
    first = read.answers[0]
    assert [c.doc_id for c in first.contexts] == ["td-doc-0027", None]
    assert first.contexts[0].text.startswith(techdocs.corpus.set_index("doc_id").loc["td-doc-0027", "title"])
    assert first.contexts[1].text == "kept as text" and read.answers[1].reference == "ref"
    assert read.problems() == {
        "unknown_queries": {"count": 1, "first": ["zz-1"]},
        "unknown_documents": {"count": 2, "first": ["nope-1", "nope-2"]},
    }


def test_paired_tests_leave_out_failed_samples_and_match_scipy() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random(30), rng.random(30) + 0.2
    rows = [("base", f"q{i}", "m", v) for i, v in enumerate(a)] + [("cand", f"q{i}", "m", v) for i, v in enumerate(b)]
    table = pd.DataFrame(rows, columns=["system", "query_id", "metric", "value"])
    table = table[~((table["system"] == "cand") & (table["query_id"] == "q0"))]  # cand failed on q0
    result = paired_tests(table, ["m"], "base").iloc[0]
    assert result["n"] == 29  # q0 left out, not scored 0
    assert result["p_ttest"] == pytest.approx(stats.ttest_rel(b[1:], a[1:]).pvalue)
    assert result["delta"] == pytest.approx(float(np.mean(b[1:] - a[1:])))


@dataclass(frozen=True)
class _Verdict:
    value: float | None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def test_judge_repeats_give_the_run_to_run_sd_and_failures_are_named() -> None:
    answers = [Answer(f"q{i}", "?", "a", ()) for i in range(4)]
    per_repeat = {0: [0.2, 0.4, None, 1.0], 1: [0.4, 0.4, None, 0.8], 2: [0.6, None, None, 0.6]}

    def judge(metric: str, batch: Any, ask: Any) -> list[_Verdict]:
        return [_Verdict(v, None if v is not None else "unparsable reply", {"r": ask}) for v in per_repeat[ask]]

    config = Configuration("c", answers, unanswered={})
    s = score([config], ["faithfulness"], {}, judge=judge, asks=[0, 1, 2])  # type: ignore[list-item]
    values = dict(zip(s.per_query["query_id"], s.per_query["value"], strict=True))
    assert values == pytest.approx({"q0": 0.4, "q1": 0.4, "q3": 0.8})  # q1: the mean of the repeats with a value
    assert s.failures.to_dict("records") == [
        {"system": "c", "query_id": "q2", "metric": "faithfulness", "error": "unparsable reply"}
    ]
    means = [np.mean([per_repeat[r][0], per_repeat[r][3]]) for r in range(3)]  # q0, q3: valued in every repeat
    assert s.repeat_sd["c"]["faithfulness"] == pytest.approx(np.std(means, ddof=1))


def test_extractive_takes_leading_sentences_and_specs_are_checked() -> None:
    contexts = (Context("Title\n\nFirst one here. Second."), Context("ann asked:\nOnly line"), Context("A. B."))
    assert extractive((*contexts, Context("Never."))) == "First one here. Only line A."
    assert parse_generator("python:pkg.mod:fn").kind == "python"
    assert parse_generator("openai(rpm=5):gpt-4o-mini@http://127.0.0.1:1/v1").kind == "llm"
    for spec in ("python:pkg", "nonsense", "openai(colour=red):m"):
        with pytest.raises(InputError, match="--generator"):
            parse_generator(spec)


def test_bad_arguments_fail_naming_the_option_before_any_work() -> None:
    from irflow.flows.rag import validate_rag

    ok = ("techdocs", ["bm25"], [], "extractive", 5, None, None, 1, None)
    assert validate_rag(*ok)[2] == list(ID_METRICS)
    for change, match in (
        ({1: []}, "takes --answers FILE"),
        ({3: None}, "--system needs --generator"),
        ({4: 0}, "--k expects an integer from 1 to 100"),
        ({5: ["faithfulness"]}, "--metric faithfulness needs --judge"),
        ({5: ["nDCG@10"]}, "unknown RAG metric 'nDCG@10'"),
        ({8: "dense:minilm"}, "--baseline 'dense:minilm' is not one of the configurations: bm25"),
        ({6: "model:minilm"}, "--judge takes an LLM spec"),
        ({6: "openai:m", 7: 0}, "--judge-repeats expects an integer >= 1"),
    ):
        args = list(ok)
        for i, v in change.items():
            args[i] = v
        with pytest.raises(Exception, match=match):
            validate_rag(*args)  # type: ignore[arg-type]


def test_human_verdicts_calibrate_the_judged_metrics_and_failed_samples_stay_missing(tmp_path: Path) -> None:
    """The flow's calibrate stage hands the judge's scores to PPI++ with failed samples as missing (counted
    as ``judge_failed`` when a human judged them), never as a score; the report shows the calibrated means."""
    from irflow.flows.rag import calibrate_task
    from irflow.tasks.rag.calibrate import calibrate_answers, read_human_verdicts
    from irflow.tasks.rag.score import Scores

    rng = np.random.default_rng(7)
    rows = [(s, f"q{i:02d}", "faithfulness", float(rng.random())) for s in ("a", "b") for i in range(1, 40)]
    failures = pd.DataFrame(
        [("a", "q00", "faithfulness", "unparsable reply")], columns=["system", "query_id", "metric", "error"]
    )
    scores = Scores(pd.DataFrame(rows, columns=["system", "query_id", "metric", "value"]), failures)
    human = [
        {"system": s, "query_id": f"q{i:02d}", "metric": "faithfulness", "value": float(rng.random())}
        for s in ("a", "b")
        for i in range(0, 20)
    ]
    path = _write(tmp_path / "human.jsonl", human)
    block = calibrate_task.fn(scores, str(path), "a")
    counts = block["calibration"]["counts"]  # a/q00: the judge failed; b/q00: b has no such answer
    assert (counts["judge_failed"], counts["paired"], counts["unknown"]) == (1, 38, 1)
    judged = pd.concat([scores.per_query, failures.drop(columns="error").assign(value=np.nan)], ignore_index=True)
    expected = calibrate_answers(judged, read_human_verdicts(path), "a")["calibrated"]
    assert block["calibrated"]["a"]["faithfulness"]["estimate"] == pytest.approx(
        expected["a"]["faithfulness"]["estimate"]
    )
    assert block["calibrated"]["b"]["faithfulness"]["difference"] is not None
