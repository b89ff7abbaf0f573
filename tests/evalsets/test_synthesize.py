"""Synthetic queries (``irflow datasets synthesize``): sampling, parsing, de-duplication, and the whole
command against a fake OpenAI-compatible chat server on 127.0.0.1 (tests/support/synth_chat.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from support import services
from support.cli import irflow
from support.services import script_server

from irflow.tasks import ingest
from irflow.tasks.core.schema import InputError
from irflow.tasks.evalsets.synthesize import SynthesisConfig, collect, parse_queries, plan_requests, sample_documents
from irflow.tasks.evalsets.synthesize_llm import AnswerCache, Request, make_generator
from irflow.tasks.llm import Outcome, ask_all, request_key

SERVICE = "support.synth_chat"
KEY = "sk-test-synthesize-0123456789"


def test_answers_parse_with_fences_and_fail_clearly() -> None:
    assert parse_queries('```json\n{"queries": ["a b", "c"]}\n```') == ["a b", "c"]
    assert parse_queries('Here: {"queries": []} done') == []
    for text, match in (("no json", "no JSON object"), ('{"queries": "a"}', "expected"), ("{queries: [}", "malformed")):
        with pytest.raises(ValueError, match=match):
            parse_queries(text)


def test_documents_are_sampled_seeded_whatever_the_order_and_by_stratum() -> None:
    corpus = pd.DataFrame(
        {
            "doc_id": [f"d{i:02d}" for i in range(40)],
            "title": "",
            "text": "x",
            "kind": ["a"] * 30 + ["b"] * 8 + [None] * 2,
        }
    )
    first = sample_documents(corpus, 20, 5, "kind")
    again = sample_documents(corpus.sample(frac=1, random_state=1), 20, 5, "kind")
    assert first["doc_id"].tolist() == again["doc_id"].tolist()
    assert first["stratum"].value_counts().to_dict() == {"a": 15, "b": 4, "(none)": 1}  # 30:8:2 of 20
    assert first["doc_id"].is_unique and set(sample_documents(corpus, 20, 6, "kind")["doc_id"]) != set(first["doc_id"])
    assert len(sample_documents(corpus, 99, 0, None)) == 40


def test_styles_rotate_and_no_document_is_asked_a_style_twice() -> None:
    generator = make_generator("openai:m@http://127.0.0.1:9/v1")
    docs = pd.DataFrame({"doc_id": ["a", "b", "c"], "title": "t", "text": ["x", "y", "z"]})
    config = SynthesisConfig(base="b", name="n", llm="x", queries=9, per_call=1, overgenerate=1.0)
    requests = plan_requests(docs, config, generator)
    assert len(requests) == 9 and len({(r.doc_id, r.style) for r in requests}) == 9
    assert len({r.key for r in requests}) == 9 and all("Style: " + r.style in r.user for r in requests)


def test_queries_are_deduplicated_on_their_normalised_text_and_counted() -> None:
    requests = [Request(f"d{i}", "keyword", 2, "s", f"u{i}", f"k{i}") for i in range(4)]
    outcomes = {
        "k0": Outcome('{"queries": ["Vector  Index", "HNSW"]}'),
        "k1": Outcome('{"queries": ["vector index", 7, ""]}'),
        "k2": Outcome("not an answer"),
        "k3": Outcome(None, "HTTP 500"),
    }
    table, counts = collect(requests, outcomes, taken={"hnsw"})
    assert table[["text", "doc_id"]].values.tolist() == [["Vector Index", "d0"]]
    assert counts == {
        "failed_calls": 1,
        "unparseable_answers": 1,
        "not_text": 2,
        "not_unicode": 0,
        "duplicate": 2,
        "generated": 5,
    }


def test_a_query_holding_a_lone_surrogate_is_dropped_and_counted_and_its_answer_cached(tmp_path: Path) -> None:
    """An LLM answer's JSON may escape a lone surrogate ("\\ud800"): that query cannot be stored as UTF-8, so
    it is dropped and counted (not a UnicodeEncodeError); the answer itself is cached as sent."""
    from irflow.tasks.evalsets.synthesize_llm import AnswerCache

    answer = '{"queries": ["bad \\ud800 query", "good query"]}'
    requests = [Request("d0", "keyword", 2, "s", "u0", "k0")]
    table, counts = collect(requests, {"k0": Outcome(answer)}, taken=set())
    assert table["text"].tolist() == ["good query"]
    assert counts["not_unicode"] == 1 and counts["generated"] == 2
    raw = json.loads('"bad \\ud800 answer"')  # a chat API's JSON body decodes to a lone surrogate
    cache = AnswerCache(tmp_path / "answers.jsonl")
    cache.append("k1", raw)
    assert cache.load() == {"k1": raw}


def test_bad_options_fail_before_any_call() -> None:
    for config, match in (
        (SynthesisConfig("techdocs", "n", "openai:m", queries=0), "--queries must be >= 1"),
        (SynthesisConfig("techdocs", "n", "openai:m", styles=("haiku",)), "--styles takes distinct styles"),
        (SynthesisConfig("techdocs", "beir/x", "openai:m"), "reserved"),
        (SynthesisConfig("techdocs", "n", "system:bm25"), "--llm takes an LLM spec"),
        (SynthesisConfig("techdocs", "n", "openai:m@http://127.0.0.1:9/v1", stratify="colour"), "no such metadata"),
    ):
        from irflow.tasks.evalsets.synthesize import synthesize

        with pytest.raises(InputError, match=match):
            synthesize(config)


def _files_holding(folder: Path, secret: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.e2e
def test_synthesize_end_to_end_filters_dedupes_stores_and_evaluates_by_source(tmp_path: Path) -> None:
    """12 calls against the fake chat server: one prose answer, a generic query in every answer (duplicates),
    paraphrases nobody can find (round trip fails); the kept queries are stored beside techdocs' own,
    found again by BM25, and `irflow run` reports them segmented by source. A rerun pays no call; the key
    is nowhere."""
    cache = Path(os.environ["IRFLOW_CACHE_DIR"])
    log = tmp_path / "chat.jsonl"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": KEY}
    with script_server(SERVICE, str(log), KEY) as port:
        llm = f"openai:fake@http://127.0.0.1:{port}/v1"
        args = ["datasets", "synthesize", "--dataset", "techdocs", "--llm", llm, "--queries", "12", "--seed", "1"]
        dry = irflow(*args, "--name", "syn", "--dry-run", env=env)
        assert dry.returncode == 0, dry.stderr[-2000:]
        assert re.search(
            r": 12 calls \(0 answers cached\) over 12 documents of techdocs stratified by doc_type", dry.stdout
        )
        assert "tokens" in dry.stdout and "$" in dry.stdout and not log.exists()
        assert not (cache / "datasets" / "syn").exists()

        done = irflow(*args, "--name", "syn", "--with-base-queries", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(calls) == 12 and all(c["response_format"] == {"type": "json_object"} for c in calls)
        again = irflow(*args, "--name", "syn2", env=env)  # same calls: answered from the cache
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(log.read_text().splitlines()) == 12

    dataset = ingest.load_dataset("syn")
    summary = dataset.manifest["source"]["synthesis"]
    answered = sum(1 for c in calls if not c["unparseable"])
    assert summary["unparseable_answers"] == 1 and summary["generated"] == 2 * answered
    assert summary["duplicate"] >= answered - 1  # "how do I get started" in every answer
    paraphrases = sum(1 for c in calls if c["style"] == "paraphrase" and not c["unparseable"])
    assert summary["failed_round_trip"] >= paraphrases  # reversed words: no document has them
    accounted = ("kept", "duplicate", "failed_round_trip", "surplus", "not_text")
    assert sum(summary[k] for k in accounted) == summary["generated"]
    assert f"{summary['unparseable_answers']} unparseable answers" in done.stdout

    queries = dataset.queries.set_index("query_id")
    synthetic = queries[queries["source"] == "synthetic"]
    assert len(synthetic) == summary["kept"] > 0 and set(queries["source"]) == {"expert", "synthetic"}
    assert set(synthetic["style"]) <= {"keyword", "question"}  # paraphrases never come back
    assert synthetic["text"].str.lower().is_unique
    qrels = dataset.qrels.set_index("query_id")
    corpus = dataset.corpus.set_index("doc_id")
    for qid, row in synthetic.iterrows():
        doc = corpus.loc[qrels.loc[qid, "doc_id"]]
        words = set(re.findall(r"[a-z]+", (doc["title"] + " " + doc["text"]).lower()))
        assert set(row["text"].lower().removeprefix("what is ").split()) <= words  # written from its source
        assert qrels.loc[qid, "relevance"] == 1
    techdocs = ingest.load_dataset("techdocs")
    assert len(queries) - len(synthetic) == len(techdocs.queries)
    syn2 = ingest.load_dataset("syn2").queries
    assert set(syn2["query_id"]) == set(synthetic.index)  # the cached answers give the same queries

    out = tmp_path / "out"
    run = irflow("run", "--dataset", "syn", "--system", "bm25", "--metric", "nDCG@10", "--metric", "Success@10",
                 "--latency-runs", "0", "--no-track", "--output", str(out), env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    per_query = pd.read_parquet(out / "per_query.parquet")
    success = per_query[per_query["metric"] == "Success@10"].set_index("query_id")["value"]
    assert (success[synthetic.index] == 1.0).all()  # the round trip guarantees BM25 finds them in its top 10
    section = (out / "report.md").read_text(encoding="utf-8").split("### By source", 1)[1].split("###", 1)[0]
    assert re.search(rf"^\| synthetic \| {len(synthetic)}\b", section, re.MULTILINE), section
    assert re.search(rf"^\| expert \| {len(techdocs.queries)}\b", section, re.MULTILINE), section

    for text in (dry.stdout, dry.stderr, done.stdout, done.stderr, again.stdout, again.stderr, run.stderr):
        assert KEY not in text
    assert _files_holding(cache, KEY) == [] and _files_holding(out, KEY) == []


@pytest.mark.e2e
def test_a_refused_key_stops_at_once_stores_nothing_and_is_never_shown(tmp_path: Path) -> None:
    cache = Path(os.environ["IRFLOW_CACHE_DIR"])
    log = tmp_path / "chat.jsonl"
    wrong = "sk-wrong-key-9876543210"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": wrong}
    with script_server(SERVICE, str(log), KEY) as port:
        llm = f"openai(concurrency=1):fake@http://127.0.0.1:{port}/v1"
        done = irflow("datasets", "synthesize", "--dataset", "techdocs", "--name", "syn", "--llm", llm, env=env)
    assert done.returncode == 2
    assert "query generator openai:fake" in done.stderr and "refused the credentials" in done.stderr
    assert "check OPENAI_API_KEY" in done.stderr and "***" in done.stderr  # the echoed header, redacted
    assert [json.loads(line)["status"] for line in log.read_text().splitlines()] == [401]  # one call, then stop
    assert not (cache / "datasets" / "syn").exists()
    assert wrong not in done.stderr + done.stdout and _files_holding(cache, wrong) == []


def test_an_answer_that_echoes_the_key_is_cached_and_used_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """HTTP 200 whose queries quote the Authorization header: the answer cache and the answer used hold ***."""

    class Echo(services.ChatService):
        def chat(self, request: services.Request) -> services.Reply:
            queries = [f"my key is {request.headers.get('Authorization')}", "what is bm25"]
            return services.reply(200, services.completion(json.dumps({"queries": queries})))

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with Echo() as server:
        generator = make_generator(f"openai(concurrency=1):fake@{server.url}/v1")
        asked = Request("d1", "keyword", 2, "system", "user", request_key(generator, "system", "user"))
        cache = AnswerCache(tmp_path / "answers.jsonl")
        outcome = ask_all([asked], generator, cache)[asked.key]
    assert outcome.text is not None and parse_queries(outcome.text) == ["my key is Bearer ***", "what is bm25"]
    assert parse_queries(cache.load()[asked.key]) == ["my key is Bearer ***", "what is bm25"]
    out, err = capfd.readouterr()
    assert KEY not in out + err and _files_holding(tmp_path, KEY) == []
