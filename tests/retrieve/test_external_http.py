"""``http:<url>``: a live search service (a real HTTP server process on 127.0.0.1, stopped by its PID)
serving a precomputed BM25 run; it answers 429 with Retry-After and 503 once, and checks a token."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from support.cli import irflow
from support.services import script_server

from irflow.tasks.core.runs import write_trec
from irflow.tasks.core.schema import Dataset, InputError, UnknownNameError
from irflow.tasks.metrics import evaluate
from irflow.tasks.retrieve.searchers import measure_latency, retrieve
from irflow.tasks.systems.http_options import normalize, resolve
from irflow.tasks.systems.specs import parse_system

TOKEN = "tok-5f1d2c9a-never-print-me"
MEASURES = ["nDCG@10", "R@100", "P@10", "AP@100"]


@contextmanager
def search_service(hits: Path, log: Path, token: str | None = TOKEN) -> Iterator[str]:
    """Start tests/support/search.py; yields its base URL; stops it by its PID."""
    args = ["support.search", str(hits), str(log), *([token] if token else [])]
    with script_server(*args) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dataset, pd.DataFrame, Path, Path]:
    """techdocs, its BM25 run (TREC file) and the same run as the service's answers."""
    folder = tmp_path_factory.mktemp("served")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IRFLOW_CACHE_DIR", str(folder / "cache"))
        from irflow.tasks.ingest import load_dataset

        dataset = load_dataset("techdocs")
        run = retrieve(dataset, "bm25", depth=100).run
    text = dict(zip(dataset.queries["query_id"], dataset.queries["text"]))
    assert len(set(text.values())) == len(text)
    answers: dict[str, list] = {}
    for q, d, s in run[["query_id", "doc_id", "score"]].itertuples(index=False):
        answers.setdefault(text[q], []).append([d, s])
    (folder / "hits.json").write_text(json.dumps(answers))
    write_trec(run, folder / "bm25.trec", "bm25")
    return dataset, run, folder / "hits.json", folder / "bm25.trec"


def per_query(dataset: Dataset, run: pd.DataFrame) -> dict[tuple[str, str], float]:
    table = evaluate(run, dataset.qrels, MEASURES)
    return {(m, q): v for m, q, v in table[["metric", "query_id", "value"]].itertuples(index=False)}


def test_a_service_gives_the_metrics_of_the_run_it_serves(served, tmp_path: Path, monkeypatch, capsys) -> None:
    dataset, run, hits, trec = served
    monkeypatch.setenv("SEARCH_TOKEN", TOKEN)
    expected = per_query(dataset, retrieve(dataset, f"run:{trec}").run)
    with search_service(hits, tmp_path / "log") as url:
        start = time.perf_counter()
        result = retrieve(dataset, f"http(auth_env=SEARCH_TOKEN):{url}/search", depth=100)
        took = time.perf_counter() - start
        log = (tmp_path / "log").read_text().split("\n")
        # (concurrent requests: the 429 and the 503 need not be the first lines the service logged)
        assert log.count("429 /search") == log.count("503 /search") == 1
        assert log.count("200 /search") == len(dataset.queries)
        assert took >= 1.0  # Retry-After: 1 was honoured
        assert per_query(dataset, result.run) == expected
        assert result.run.equals(retrieve(dataset, f"run:{trec}").run)  # the very same table, scores and ties
        monkeypatch.setenv("IRFLOW_PROGRESS", "1")  # as on a terminal: the service's calls show progress
        capsys.readouterr()
        one_by_one = retrieve(dataset, f"http(auth_env=SEARCH_TOKEN,concurrency=1):{url}/search", depth=100)
        assert one_by_one.run.equals(result.run)  # concurrency 1: requests in turn, the same table
        n = len(dataset.queries)
        assert (
            f"\rretrieve http(auth_env=SEARCH_TOKEN,concurrency=1):127.0.0.1:{url.rsplit(':', 1)[1]}/search  "
            f"{n}/{n} queries (100%)" in capsys.readouterr().err
        )
        monkeypatch.delenv("IRFLOW_PROGRESS")
        assert TOKEN not in json.dumps(result.info) and result.info["http_auth_env"] == "SEARCH_TOKEN"

        from irflow.tasks.retrieve.searchers import make_searcher

        online = make_searcher(dataset, parse_system(f"http(auth_env=SEARCH_TOKEN):{url}/search"), online=True)
        for i in range(0, len(dataset.queries), 9):  # one query at a time (the latency path) ranks as the batch
            one = online(dataset.queries.iloc[[i]], 100)
            batch = result.run[result.run["query_id"] == one["query_id"].iloc[0]].reset_index(drop=True)
            pd.testing.assert_frame_equal(one, batch, check_dtype=False)

        es = retrieve(dataset, f"http(preset=elasticsearch,auth_env=SEARCH_TOKEN,concurrency=8):{url}/es/_search")
        assert per_query(dataset, es.run) == expected

        latency = measure_latency(dataset, f"http(auth_env=SEARCH_TOKEN,load=1:4):{url}/search", warmup=2, sample=20)
        assert 0 < latency.p50_ms <= latency.p95_ms <= latency.p99_ms
        assert [level["concurrency"] for level in latency.load_curve] == [1, 4]
        assert all(level["queries_per_second"] > 0 and level["queries"] >= 8 for level in latency.load_curve)


def test_service_errors_name_the_system_and_never_show_the_token(served, tmp_path: Path, monkeypatch) -> None:
    dataset, _, hits, _ = served
    with search_service(hits, tmp_path / "log") as url:
        with pytest.raises(InputError, match="the environment variable SEARCH_TOKEN .* is not set"):
            retrieve(dataset, f"http(auth_env=SEARCH_TOKEN):{url}/search")
        monkeypatch.setenv("SEARCH_TOKEN", TOKEN)
        with pytest.raises(Exception, match="answered HTTP 400") as info:
            retrieve(dataset, f"http(auth_env=SEARCH_TOKEN):{url}/leaky")
        assert "rejected request with credentials" in str(info.value) and TOKEN not in str(info.value)
        assert "***" in str(info.value)
        monkeypatch.setenv("SEARCH_TOKEN", "wrong")
        with pytest.raises(Exception, match="HTTP 401"):
            retrieve(dataset, f"http(auth_env=SEARCH_TOKEN):{url}/search")
        monkeypatch.setenv("SEARCH_TOKEN", TOKEN)
        with pytest.raises(Exception, match=r"no list of hits at 'results'"):
            retrieve(dataset, f"http(auth_env=SEARCH_TOKEN,hits=results,retries=2):{url}/search")
    with pytest.raises(Exception, match="failed 2 times; last: ConnectionRefusedError"):
        retrieve(dataset, f"http(retries=1):{url}/search")  # the service is gone


def test_answers_of_any_shape_read_as_the_checked_path_reads_them() -> None:
    """The quick read of the common shape and the hit-by-hit read agree, and a bad hit is named either way."""
    from support.toy import tiny_dataset

    from irflow.tasks.retrieve.http_service import HttpSearcher, ServiceError

    def searcher(options: str = "") -> HttpSearcher:
        return HttpSearcher(tiny_dataset(), parse_system(f"http{options}:http://127.0.0.1:9/never-called"))  # type: ignore[arg-type]

    plain = searcher()
    answers = [
        {"hits": [{"id": "d2", "score": 2.5}, {"id": "d1", "score": 1}]},  # quick: string ids, numbers
        {"hits": [{"id": 7, "score": 0.5}, {"id": 3, "score": -1.0}]},  # quick: integer ids become strings
        {"hits": [{"id": "d1", "score": "0.25"}, {"id": 4, "score": 1e-3}]},  # hit by hit: a numeric string
        {"hits": [{"id": "d1", "score": 1e308}, {"id": "d2", "score": 1e308}]},  # the sum overflows; each is finite
        {"hits": []},
    ]
    for answer in answers:
        docs, scores = plain._hits(answer)
        assert (docs, scores) == plain._hits_checked(answer["hits"])
        assert all(isinstance(d, str) for d in docs)
    assert plain._hits(answers[2]) == (["d1", "4"], [0.25, 0.001])
    nested = searcher("(hits=data.items,id=doc.key,score=rel.0)")
    assert nested._hits({"data": {"items": [{"doc": {"key": 5}, "rel": [0.5]}]}}) == (["5"], [0.5])
    for hit in (
        {"id": "d1", "score": float("nan")},
        {"id": "d1", "score": 10**400},
        {"id": True, "score": 1.0},
        {"id": "d1"},
        {"score": 1.0},
        {"id": ["d1"], "score": 1.0},
    ):
        with pytest.raises(ServiceError, match="hit 2 has no id at 'id' or no finite score at 'score'"):
            plain._hits({"hits": [{"id": "d0", "score": 2.0}, hit]})


def test_http_options_and_specs() -> None:
    spec = parse_system("http(preset=elasticsearch,field=title,timeout=5.0,concurrency=4):https://es:9200/i/_search")
    assert str(spec) == "http(field=title,preset=elasticsearch,timeout=5):https://es:9200/i/_search"
    options = resolve(spec.options)  # type: ignore[union-attr]
    assert options.template == {"query": {"match": {"title": "$query"}}, "size": "$k", "_source": False}
    assert (options.hits, options.id, options.score) == (("hits", "hits"), ("_id",), ("_score",))
    assert options.load == (1, 4, 16) and options.concurrency == 4 and options.auth_scheme == "Bearer"
    template = '{"q": "$query", "limit": "$k", "filter": {"lang": "en"}}'
    custom = parse_system(f"http(template={json.dumps(template)},hits=data.items,id=doc.key,score=rel):http://x/s")
    assert parse_system(str(custom)) == custom
    assert resolve(custom.options).template == {"q": "$query", "limit": "$k", "filter": {"lang": "en"}}  # type: ignore[union-attr]
    assert resolve(normalize({"auth_env": "K", "auth_header": "X-API-Key"})).auth_scheme is None
    for bad, fragment in [
        ("http:ftp://x/s", "expected http[s]://host"),
        ("http:http://user:pw@x/s", "must not carry credentials"),
        ("http(preset=solr2):http://x", "unknown preset 'solr2'"),
        ('http(template="{}"):http://x', 'must contain the string "$query"'),
        ("http(auth_env=1X):http://x", "must name an environment variable"),
        ("http(auth_header=X-Key):http://x", "need auth_env"),
        ("http(load=4:1):http://x", "increasing concurrency levels"),
        ("http(concurrency=0):http://x", "concurrency='0' must be an integer >= 1"),
        ("http(field=title):http://x", "field applies to the presets"),
        ("http(method=GET):http://x", "unknown http option 'method'"),
    ]:
        with pytest.raises((InputError, UnknownNameError), match=None) as info:
            parse_system(bad)
        assert fragment in str(info.value), (bad, str(info.value)[:300])


@pytest.mark.e2e
def test_irflow_run_with_a_service_load_curve_and_no_token_anywhere(served, tmp_path: Path) -> None:
    """End to end: metrics and the load curve in metrics.json, the report and MLflow; the token, echoed by
    the service in an error body, is found in no output, log, MLflow store or Prefect database."""
    _, _, hits, trec = served
    env = {
        **os.environ,
        "IRFLOW_CACHE_DIR": str(tmp_path / "cache"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "HF_HUB_OFFLINE": "1",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}",
        "SEARCH_TOKEN": TOKEN,
    }
    out = tmp_path / "out"
    with search_service(hits, tmp_path / "log") as url:
        good = f"http(auth_env=SEARCH_TOKEN):{url}/search"
        leaky = f"http(auth_env=SEARCH_TOKEN):{url}/leaky"
        args = ["run", "--system", f"run:{trec}", "--system", good, "--system", leaky, "--latency-runs", "1"]
        done = irflow(*args, *[x for m in MEASURES for x in ("--metric", m)], "--output", str(out), env=env)
    assert done.returncode != 0 and "1 of 3 systems failed" in done.stderr, done.stderr[-3000:]
    document = json.loads((out / "metrics.json").read_text())
    service, served_run = str(parse_system(good)), str(parse_system(f"run:{trec}"))
    assert set(document["systems"]) == {service, served_run}
    assert document["systems"][service] == pytest.approx(document["systems"][served_run], abs=1e-12)
    assert "***" in document["failed"][str(parse_system(leaky))]
    curve = document["cost"][service]["load_curve"]
    assert [level["concurrency"] for level in curve] == [1, 4, 16]
    assert all(level["queries_per_second"] > 0 and level["p95_ms"] > 0 for level in curve)
    assert document["cost"][service]["p95_ms"] > 0
    report = (out / "report.md").read_text()
    assert "### Load curve" in report and "| concurrency | queries/s | p50 ms | p95 ms |" in report

    import sqlite3

    db = sqlite3.connect(tmp_path / "mlruns" / "mlflow.db")
    keys = {k for (k,) in db.execute("select key from metrics")}
    db.close()
    assert {"load_c1_queries_per_second", "load_c16_p95_ms", "p95_ms"} <= keys

    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaks == [] and TOKEN not in done.stdout + done.stderr


def test_a_service_with_no_hit_for_any_query_is_an_error(monkeypatch) -> None:
    """No hit for every query is an error, as an empty run file is (not a run of zeros); no hit for
    some queries is a legal answer."""
    from support.toy import tiny_dataset

    from irflow.tasks.retrieve.http_service import HttpSearcher, ServiceError

    dataset = tiny_dataset()
    searcher = HttpSearcher(dataset, parse_system("http:http://127.0.0.1:9/never-called"))  # type: ignore[arg-type]
    monkeypatch.setattr(searcher, "_query", lambda text, k, vector: ([], []))
    with pytest.raises(ServiceError, match=r"answered no hit for any of the \d+ queries"):
        searcher(dataset.queries, 10)
    first = dataset.queries["text"].iloc[0]
    doc = str(dataset.corpus["doc_id"].iloc[0])
    monkeypatch.setattr(searcher, "_query", lambda text, k, vector: ([doc], [1.0]) if text == first else ([], []))
    run = searcher(dataset.queries, 10)
    assert run["doc_id"].tolist() == [doc]
