"""``irflow rag`` end to end: the offline demo (extractive answers from two systems, tracked, a paired test)
and generation by a scripted OpenAI-compatible server on 127.0.0.1 (tests/support/rag_chat.py): failures
counted and named, a rerun asks only what was not answered, the key in no file, log or MLflow record."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.cli import irflow, printed_verdict
from support.services import script_server

from irflow.tasks.ingest import load_dataset
from irflow.tasks.rag.id_based import ID_METRICS

SERVICE = "support.rag_chat"
KEY = "sk-test-rag-0123456789abcdef"


def _runs(experiment: str = "irflow") -> list[Any]:
    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    return mlflow.search_runs(experiment_names=[experiment], output_format="list")


def _files_holding(folder: Path, secret: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.e2e
def test_the_offline_demo_reports_id_based_metrics_with_a_paired_test(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = ["rag", "--dataset", "techdocs", "--system", "bm25", "--system", "hybrid:bm25+dense:minilm"]
    done = irflow(*args, "--generator", "extractive", "--output", str(out), env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    hybrid = "hybrid:bm25+dense:sentence-transformers/all-MiniLM-L6-v2"
    assert "bm25" in done.stdout and str(out) in done.stdout
    assert "hybrid:bm25+dense:all-MiniLM-L6-v2 " in done.stdout and hybrid not in done.stdout  # the readable label
    assert max(len(line) for line in done.stdout.splitlines()) <= 120

    document = json.loads((out / "metrics.json").read_text())
    assert document["kind"] == "rag" and document["measures"] == list(ID_METRICS)
    # the verdict leads the report (its blue callout) and ends the terminal's output: one sentence
    report = (out / "report.md").read_text()
    assert printed_verdict(done.stdout) == document["verdict"] and "Holm-adjusted p = " in document["verdict"]
    assert report.splitlines()[2] == "**Verdict.** " + document["verdict"]
    assert "generator: extractive" in report and "generator_" not in report and "-0.0000" not in report
    assert list(document["configurations"]) == ["bm25", hybrid] and document["baseline"] == "bm25"
    for block in document["summary"].values():
        for row in block.values():
            assert row["n"] == 80 and row["failed"] == 0 and row["ci_low"] <= row["mean"] <= row["ci_high"]
    per_query = pd.read_parquet(out / "per_query.parquet")
    assert len(per_query) == 2 * 2 * 80 and per_query["value"].between(0, 1).all()
    means = per_query.groupby(["system", "metric"])["value"].mean()
    assert means[("bm25", "id_based_context_recall")] == pytest.approx(
        document["systems"]["bm25"]["id_based_context_recall"]
    )

    tests = pd.read_csv(out / "significance.csv")
    assert (
        sorted(tests["metric"]) == sorted(ID_METRICS)
        and (tests["candidate"] == hybrid).all()
        and (tests["n"] == 80).all()
    )
    report = (out / "report.md").read_text()
    assert "## Answers" in report and "### Paired tests against `bm25`" in report and "### Examples" in report
    assert "(grade 3)" in report and "Answers" in (out / "report.html").read_text()
    answers = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == 160 and all(a["answer"] and len(a["contexts"]) <= 5 for a in answers)

    runs = _runs()
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent[0].data.tags["irflow.evaluation"] == "rag"
    assert len(parent) == 1 and parent[0].data.params["dataset.name"] == "techdocs"
    children = {
        r.data.tags["irflow.system"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id
    }
    assert set(children) == {"bm25", hybrid}
    bm25 = children["bm25"].data.metrics
    assert bm25["id_based_context_precision"] == pytest.approx(
        document["systems"]["bm25"]["id_based_context_precision"]
    )
    assert bm25["id_based_context_precision.failed"] == 0
    # one readable name for the Prefect flow run, the MLflow run and the result's run (not two random words)
    name = document["run"]["name"]
    assert name.startswith("techdocs_") and "_rag_bm25_" in name and parent[0].info.run_name == name
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as prefect:
        assert prefect.read_flow_run(parent[0].data.tags["prefect.flow_run_id"]).name == name


@pytest.mark.e2e
def test_generation_by_a_chat_server_is_cached_counted_and_keeps_the_key_out(tmp_path: Path) -> None:
    cache = Path(os.environ["IRFLOW_CACHE_DIR"])
    log = tmp_path / "chat.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": KEY}
    questions = load_dataset("techdocs").queries.set_index("query_id")["text"]
    flaky = sorted(q for q, text in questions.items() if "filtered" in text)
    leaky = [q for q, text in questions.items() if "containers" in text]
    assert flaky and leaky
    with script_server(SERVICE, str(log), KEY) as port:
        generator = f"openai(max_retries=0,concurrency=4,price=0.002):fake@http://127.0.0.1:{port}/v1"
        args = ["rag", "--system", "bm25", "--generator", generator, "--depth", "3"]
        dry = irflow(*args, "--dry-run", env=env)
        assert dry.returncode == 0, dry.stderr[-2000:]
        assert re.search(r"generation \(openai:fake@http://127.0.0.1:\d+/v1\): 80 calls \(0 cached\)", dry.stdout)
        assert not log.exists()

        first = irflow(*args, "--output", str(tmp_path / "one"), env=env)
        assert first.returncode == 0, first.stderr[-3000:]
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(calls) == 80 and all(c["response_format"] is None for c in calls if c["status"] == 200)
        document = json.loads((tmp_path / "one" / "metrics.json").read_text())
        usage = document["usage"]["generation"]
        assert usage["calls"] == 80 and usage["cached"] == 0 and usage["failed"] == len(flaky)
        assert usage["completion_tokens"] == 10 * (80 - len(flaky)) and usage["tokens_counted_by"] == "provider"
        assert usage["usd"] == pytest.approx((usage["prompt_tokens"] + usage["completion_tokens"]) / 1000 * 0.002)
        rows = {
            a["query_id"]: a for a in map(json.loads, (tmp_path / "one" / "answers.jsonl").read_text().splitlines())
        }
        assert all(rows[q]["answer"] is None and "500" in rows[q]["error"] for q in flaky)
        assert all("***" in rows[q]["answer"] for q in leaky)  # the answer quoted the header: stored redacted
        assert rows["td-q-002"]["answer"].startswith("From [1]: ") and len(rows["td-q-002"]["contexts"]) == 3

        again = irflow(*args, "--output", str(tmp_path / "two"), "--no-track", env=env)
        assert again.returncode == 0, again.stderr[-3000:]
        resent = [json.loads(line) for line in log.read_text().splitlines()][80:]
        assert sorted(c["question"] for c in resent) == sorted(questions[q] for q in flaky)  # only the failed ones
        second = json.loads((tmp_path / "two" / "metrics.json").read_text())["usage"]["generation"]
        assert second["cached"] == 80 - len(flaky) and second["calls"] == len(flaky)
        one, two = (pd.read_parquet(tmp_path / d / "per_query.parquet") for d in ("one", "two"))
        pd.testing.assert_frame_equal(one, two)
        dry = irflow(*args, "--dry-run", env=env)
        assert ": 80 calls" not in dry.stdout and len(log.read_text().splitlines()) == 80 + len(flaky)

    mlruns = Path(os.environ["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///")).parent
    for where in (tmp_path, cache, mlruns):
        assert _files_holding(where, KEY) == []
    for output in (dry, first, again):
        assert KEY not in output.stdout + output.stderr


JUDGE = "support.ragas_judge"


@pytest.mark.e2e
def test_answers_files_judged_by_a_scripted_judge_with_repeats_and_a_cached_rerun(tmp_path: Path) -> None:
    """Two pipelines' answers files, every LLM-judged metric from the scripted judge (tests/support/ragas_judge.py),
    asked twice (--judge-repeats 2: both repeats real calls); a rerun sends no request and gives the same numbers."""
    data = load_dataset("techdocs")
    texts = data.corpus.set_index("doc_id")["text"]
    relevant = data.qrels[data.qrels["relevance"] >= 2].groupby("query_id")["doc_id"].apply(list)
    qids = ["td-q-001", "td-q-003", "td-q-004", "td-q-005"]
    rows = {"a": [], "b": []}
    for i, q in enumerate(qids):
        docs = relevant[q][:2]
        contexts = [{"doc_id": d} for d in docs]
        sentence = re.split(r"(?<=[.!?])\s+", texts[docs[0]].strip())[0]
        extra = {"reference": sentence} if i < 2 else {}
        rows["a"].append({"query_id": q, "answer": sentence, "contexts": contexts, **extra})
        unsure = "Perhaps zyxwv, I am not sure about qwrtp."
        rows["b"].append({"query_id": q, "answer": unsure, "contexts": contexts[:1] if i else [{"text": "zyxwv"}]})
    files = []
    for name, lines in rows.items():
        (tmp_path / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
        files += ["--answers", str(tmp_path / f"{name}.jsonl")]
    log = tmp_path / "judge.jsonl"
    with script_server(JUDGE, str(log)) as port:
        args = ["rag", *files, "--judge", f"openai:judge@http://127.0.0.1:{port}/v1", "--judge-repeats", "2"]
        first = irflow(
            *args, "--output", str(tmp_path / "one"), "--no-track", env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        assert first.returncode == 0, first.stderr[-3000:]
        sent = len(log.read_text().splitlines())
        again = irflow(
            *args, "--output", str(tmp_path / "two"), "--no-track", env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(log.read_text().splitlines()) == sent  # every call answered from the cache

    from irflow.tasks.rag.answers import dataset_references
    from irflow.tasks.rag.judged import LLM_METRICS

    document = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert document["measures"] == [*ID_METRICS, *LLM_METRICS] and document["baseline"] == "a"
    usage = document["usage"]["judging"]
    assert usage["calls"] == sent and sent % 2 == 0  # repeat 1 asked all again (a shared prompt: once)
    assert json.loads((tmp_path / "two" / "metrics.json").read_text())["usage"]["judging"]["calls"] == 0
    for metric in LLM_METRICS:
        assert document["summary"]["a"][metric]["repeat_sd"] == 0.0  # the scripted judge never changes its mind
    one, two = (pd.read_parquet(tmp_path / d / "per_query.parquet") for d in ("one", "two"))
    pd.testing.assert_frame_equal(one, two)
    value = one.set_index(["system", "query_id", "metric"])["value"]
    assert all(value[("a", q, "faithfulness")] == 1.0 for q in qids)  # a sentence of its own context
    assert all(value[("b", q, "faithfulness")] == 0.0 for q in qids)
    assert all(value[("b", q, "answer_relevancy")] == 0.0 for q in qids)  # noncommittal
    answers = [json.loads(line) for line in (tmp_path / "one" / "answers.jsonl").read_text().splitlines()]
    shipped = dataset_references(data)
    reference = {(r["system"], r["query_id"]): r["reference"] for r in answers}
    assert reference[("a", "td-q-004")] == shipped["td-q-004"] and reference[("a", "td-q-001")] != shipped["td-q-001"]
    failures = pd.read_csv(tmp_path / "one" / "failures.csv")  # b's first sample has a text context only
    assert failures[["system", "query_id", "metric", "error"]].values.tolist() == [
        ["b", "td-q-001", "id_based_context_precision", "no context has a document id"]
    ]
    assert not one["value"].isna().any() and ("b", "td-q-001", "id_based_context_precision") not in value
    tests = pd.read_csv(tmp_path / "one" / "significance.csv").set_index("metric")
    assert tests.loc["faithfulness", "delta"] == -1.0 and tests.loc["faithfulness", "n"] == 4
    assert tests.loc["id_based_context_precision", "n"] == 3  # the failed sample left out of the pair
    assert all(a["verdicts"].get("faithfulness") for a in answers)
    assert "- faithfulness: " in (tmp_path / "one" / "report.md").read_text()  # the judge's verdicts, shown
