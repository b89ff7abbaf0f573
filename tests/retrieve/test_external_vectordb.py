"""``http:`` presets of vector databases (Qdrant, Pinecone, Milvus, Weaviate): irflow embeds each query with
its own model (all-MiniLM-L6-v2, the offline copy) and sends the vector in the database's request shape;
a fake database on 127.0.0.1 (tests/support/vector_db.py, stopped by its PID) checks that shape, finds the
query by its vector and answers a precomputed BM25 run in the database's documented answer shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from support.services import script_server

from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.metrics import evaluate
from irflow.tasks.retrieve.http_service import ServiceError
from irflow.tasks.retrieve.searchers import measure_latency, retrieve
from irflow.tasks.systems.http_options import fill, normalize, resolve
from irflow.tasks.systems.specs import parse_system

TOKEN = "vdb-7c1e4a-never-print-me"
MEASURES = ["nDCG@10", "R@100", "P@10", "AP@100"]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dataset, pd.DataFrame, Path, Path]:
    """techdocs, its BM25 run, and the fixture the fake databases serve: every query's MiniLM vector (from
    irflow's embedding cache, kept in ``cache``) and its BM25 hits."""
    folder = tmp_path_factory.mktemp("vectordb")
    cache = folder / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IRFLOW_CACHE_DIR", str(cache))
        from irflow.tasks.embed.vectors import embed_queries
        from irflow.tasks.ingest import load_dataset
        from irflow.tasks.systems.specs import DenseSpec

        dataset = load_dataset("techdocs")
        run = retrieve(dataset, "bm25", depth=100).run
        vectors = embed_queries(dataset, DenseSpec(model="minilm"))
    hits: dict[str, list] = {}
    for q, d, s in run[["query_id", "doc_id", "score"]].itertuples(index=False):
        hits.setdefault(q, []).append([d, s])
    fixture = {"vectors": {q: v.tolist() for q, v in zip(vectors.ids, vectors.vectors)}, "hits": hits}
    (folder / "fixture.json").write_text(json.dumps(fixture))
    return dataset, run, folder / "fixture.json", cache


@contextmanager
def vector_service(fixture: Path, log: Path) -> Iterator[str]:
    with script_server("support.vector_db", str(fixture), str(log), TOKEN) as port:
        yield f"http://127.0.0.1:{port}"


def per_query(dataset: Dataset, run: pd.DataFrame) -> dict[tuple[str, str], float]:
    table = evaluate(run, dataset.qrels, MEASURES)
    return {(m, q): v for m, q, v in table[["metric", "query_id", "value"]].itertuples(index=False)}


@pytest.mark.e2e
def test_vector_database_presets_give_the_metrics_of_the_run_they_serve(served, tmp_path: Path, monkeypatch) -> None:
    dataset, run, fixture, cache = served
    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(cache))  # the query vectors come from irflow's cache
    monkeypatch.setenv("VDB_TOKEN", TOKEN)
    expected = per_query(dataset, run)
    log = tmp_path / "log"
    with vector_service(fixture, log) as url:
        auth = "model=minilm,auth_env=VDB_TOKEN"
        specs = {
            "qdrant": f"http(preset=qdrant,id=payload.doc_id,{auth}):{url}/collections/docs/points/query",
            "pinecone": f"http(preset=pinecone,namespace=prod,{auth}):{url}/query",
            "milvus": f"http(preset=milvus,collection=docs,{auth}):{url}/v2/vectordb/entities/search",
            "weaviate": f"http(preset=weaviate,collection=Doc,id=doc_id,{auth}):{url}/v1/graphql",
        }
        for name, spec in specs.items():
            result = retrieve(dataset, spec, depth=100)
            assert per_query(dataset, result.run) == expected, name
            # the very table served: Qdrant's integer point ids were not used, Weaviate's distances turned back
            assert result.run.equals(run), name
            assert result.info["http_model"] == MINILM and result.info["queries_encoded"] == 0, name
        milvus_by_field = retrieve(dataset, specs["milvus"].replace("collection=docs", "collection=docs,id=doc_id"))
        assert milvus_by_field.run.equals(run)  # the id read from an output field the request asked for
        # scores read the wrong way round (similarities as distances, distances as similarities) stop the run
        wrong_way = {
            specs["milvus"].replace("collection=docs", "collection=docs,scores=distance"): "drop scores=distance",
            specs["weaviate"].replace("collection=Doc", "collection=Doc,scores=similarity"): "add scores=distance",
        }
        for spec, fix in wrong_way.items():
            with pytest.raises(ServiceError, match=f"in all {len(dataset.queries)} answers .* rise .*{fix}"):
                retrieve(dataset, spec, depth=100)
        # one query at a time (the latency path), each embedded on the spot, then the load curve (threads)
        weaviate = specs["weaviate"].replace("id=doc_id", "id=doc_id,load=1:4")
        latency = measure_latency(dataset, weaviate, warmup=1, sample=4, num_runs=1)
        assert latency.p50_ms is not None and latency.p50_ms > 0 and latency.queries == 4
        assert [level["concurrency"] for level in latency.load_curve] == [1, 4]
        with pytest.raises(Exception, match="HTTP 400.*no query has this vector"):  # another model's vectors
            retrieve(dataset, specs["pinecone"].replace("model=minilm", 'model="dense(query_prompt=x):minilm"'))
    lines = log.read_text().split("\n")
    queries = len(dataset.queries)
    assert lines.count("200 /collections/docs/points/query") == queries
    assert lines.count("200 /query") == queries
    assert lines.count("200 /v2/vectordb/entities/search") == 3 * queries
    assert lines.count("200 /v1/graphql") > queries + 5  # the batch, warm-up, 4 timed queries, the load curve
    assert "401" not in log.read_text()  # Pinecone's key went in Api-Key, the others as Bearer tokens


def test_vector_preset_requests_and_options() -> None:
    qdrant = resolve(normalize({"preset": "qdrant", "model": "minilm", "id": "payload.doc_id"}))
    assert qdrant.template == {"query": "$vector", "limit": "$k", "with_payload": ["doc_id"]}
    assert (qdrant.hits, qdrant.id, qdrant.score, qdrant.distance) == (
        ("result", "points"),
        ("payload", "doc_id"),
        ("score",),
        False,
    )
    named = resolve(normalize({"preset": "qdrant", "model": "minilm", "field": "text-dense"}))
    assert named.template == {"query": "$vector", "limit": "$k", "with_payload": False, "using": "text-dense"}
    pinecone = resolve(normalize({"preset": "pinecone", "model": "minilm", "auth_env": "PINECONE_API_KEY"}))
    assert pinecone.template == {"vector": "$vector", "topK": "$k", "includeMetadata": False, "includeValues": False}
    assert (pinecone.auth_header, pinecone.auth_scheme) == ("Api-Key", None)
    milvus = resolve(normalize({"preset": "milvus", "model": "minilm", "collection": "c", "field": "emb"}))
    assert milvus.template == {"collectionName": "c", "data": ["$vector"], "annsField": "emb", "limit": "$k"}
    assert (milvus.hits, milvus.score, milvus.distance) == (("data",), ("distance",), False)
    assert resolve(normalize({"preset": "milvus", "model": "minilm", "collection": "c", "scores": "distance"})).distance
    weaviate = resolve(normalize({"preset": "weaviate", "model": "minilm", "collection": "Doc"}))
    assert weaviate.template == {
        "query": "{ Get { Doc(nearVector: {vector: $vector}, limit: $k) { _additional { id distance } } } }"
    }
    assert (weaviate.hits, weaviate.id, weaviate.distance) == (("data", "Get", "Doc"), ("_additional", "id"), True)
    body = fill(weaviate.template, "ignored", 3, [0.5, -1.0])
    assert body == {
        "query": "{ Get { Doc(nearVector: {vector: [0.5, -1.0]}, limit: 3) { _additional { id distance } } } }"
    }
    # any template: $query, $k and $vector inside a longer string become their JSON text (a GraphQL string)
    bm25 = {"query": "{ Get { Doc(bm25: {query: $query}, limit: $k) { doc_id _additional { score } } } }"}
    assert (
        fill(bm25, 'say "hi"', 5)["query"]
        == '{ Get { Doc(bm25: {query: "say \\"hi\\""}, limit: 5) { doc_id _additional { score } } } }'
    )
    # canonical specs: the model resolved, its encoding options kept, defaults left out
    spec = parse_system("http(preset=weaviate,collection=Doc,model=minilm,scores=distance):http://w:8080/v1/graphql")
    assert str(spec) == f"http(collection=Doc,model={MINILM},preset=weaviate):http://w:8080/v1/graphql"
    spec = parse_system(
        'http(preset=qdrant,model="dense(max_seq_length=128):minilm"):http://q:6333/collections/c/points/query'
    )
    assert parse_system(str(spec)) == spec and "max_seq_length=128" in str(spec)
    for bad, fragment in [
        ("http(preset=qdrant):http://q/collections/c/points/query", "preset=qdrant needs model="),
        ("http(preset=milvus,model=minilm):http://m/v2/vectordb/entities/search", "preset=milvus needs collection="),
        ("http(preset=weaviate,model=minilm,collection=Doc}x):http://w/v1/graphql", "is not a GraphQL name"),
        ("http(model=minilm):http://x/search", 'model applies when the request carries the query vector ("$vector")'),
        ("http(preset=qdrant,model=minilm,scores=cosine):http://q/c", "scores='cosine' must be similarity"),
        ("http(preset=qdrant,model=minilm,collection=c):http://q/c", "option collection applies to the presets milvus"),
        (
            "http(preset=milvus,model=minilm,collection=c,namespace=n):http://m/s",
            "namespace applies to the presets pinecone",
        ),
        ('http(preset=qdrant,model="dense(index=hnsw):minilm"):http://q/c', "index options do not apply"),
        ('http(template="{\\"v\\": \\"$vector\\"}"):http://x/s', "a template with $vector needs model="),
    ]:
        with pytest.raises(InputError) as info:
            parse_system(bad)
        assert fragment in str(info.value), (bad, str(info.value)[:300])
