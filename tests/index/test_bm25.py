"""BM25 (bm25s and rank-bm25) on real data against reference figures, its disk cache, and the
``retrieve`` dispatcher (hybrid / rerank composed over fakes of the dense side)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.toy import tiny_dataset

from irflow.tasks.core.config import cache_dir
from irflow.tasks.core.runs import order_run
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.index import bm25
from irflow.tasks.retrieve.fusion import fuse_rrf
from irflow.tasks.retrieve.searchers import measure_latency, retrieve
from irflow.tasks.systems.specs import BM25Spec, parse_system


def ndcg_at_10(dataset: Dataset, run: pd.DataFrame) -> float:
    """Mean nDCG@10 by pytrec_eval over every judged query (a query without hits scores 0, as trec_eval -c)."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels: dict[str, dict[str, int]] = {}
    for q, d, r in dataset.qrels[["query_id", "doc_id", "relevance"]].itertuples(index=False):
        qrels.setdefault(str(q), {})[str(d)] = int(r)
    scored: dict[str, dict[str, float]] = {}
    for q, d, s in run[["query_id", "doc_id", "score"]].itertuples(index=False):
        scored.setdefault(q, {})[d] = float(s)
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(scored)
    return sum(per_query.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)


# ---------------------------------------------------------------------------------------------
# real data


@pytest.mark.shared
@pytest.mark.parametrize(("name", "reference"), [("scifact", 0.679), ("nfcorpus", 0.322)])
def test_default_bm25_matches_reference_ndcg(beir_dataset, name: str, reference: float) -> None:
    dataset = beir_dataset(name)
    result = retrieve(dataset, "bm25", depth=100)
    assert result.system == "bm25"
    assert ndcg_at_10(dataset, result.run) == pytest.approx(reference, abs=0.01)
    counts = result.run.groupby("query_id").size()
    assert counts.max() == 100 and set(result.run["query_id"]) <= set(dataset.queries["query_id"])
    assert result.info["index_cached"] is False and result.info["index_build_seconds"] > 0


@pytest.mark.shared
@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_vectorised_index_equals_bm25s_own_build(beir_dataset, method: str) -> None:
    """irflow's numpy index build must give bm25s's score matrix bit for bit, and the same search results."""
    import bm25s

    dataset = beir_dataset("nfcorpus")
    spec = parse_system(f"bm25:method={method}")
    texts = bm25.document_texts(dataset)
    reference = bm25s.BM25(k1=spec.k1, b=spec.b, method=method)
    reference.index(bm25.tokenize(texts, spec, return_ids=True), show_progress=False)  # index() edits the vocab
    ours = bm25._engine(spec)
    ours.index(bm25.corpus_tokens(dataset, spec), show_progress=False)  # flat arrays, via the token cache
    for name in ("data", "indices", "indptr"):
        assert ours.scores[name].dtype == reference.scores[name].dtype, name
        np.testing.assert_array_equal(ours.scores[name], reference.scores[name], err_msg=name)
    assert ours.scores["num_docs"] == reference.scores["num_docs"]
    if method in ("bm25l", "bm25+"):
        np.testing.assert_array_equal(ours.nonoccurrence_array, reference.nonoccurrence_array)
    else:
        assert ours.nonoccurrence_array is None and reference.nonoccurrence_array is None
    queries = bm25.tokenize(dataset.queries["text"].tolist()[:50], spec, return_ids=False)
    ids = [[reference.vocab_dict[t] for t in q if t in reference.vocab_dict] or [0] for q in queries]
    np.testing.assert_array_equal(
        ours.retrieve(ids, k=20, show_progress=False)[1], reference.retrieve(ids, k=20, show_progress=False)[1]
    )


@pytest.mark.shared
def test_parameter_sweep_tokenizes_the_corpus_once(beir_dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = beir_dataset("scifact")
    first = bm25.search(dataset, "bm25", depth=10)
    tokens_dir = cache_dir() / "bm25" / "tokens" / bm25.tokens_key(dataset, BM25Spec())
    assert (tokens_dir / "flat.npy").is_file() and (tokens_dir / "vocab.json").is_file()
    assert bm25.tokens_key(dataset, BM25Spec()) == bm25.tokens_key(dataset, parse_system("bm25:k1=1.2,b=0.75"))
    assert bm25.tokens_key(dataset, BM25Spec()) != bm25.tokens_key(dataset, parse_system("bm25:stemmer=none"))

    calls: list[int] = []
    real_tokenize = bm25.tokenize
    monkeypatch.setattr(
        bm25, "tokenize", lambda texts, spec, **kw: calls.append(len(texts)) or real_tokenize(texts, spec, **kw)
    )
    swept = bm25.search(dataset, "bm25:k1=1.2,b=0.75", depth=10)
    assert calls == [len(dataset.queries)]  # the queries only: the corpus tokens came from the cache
    index = bm25.load_index(dataset, "bm25:k1=1.2,b=0.75")
    assert index.cached and not swept.equals(first)

    # the same index from freshly tokenized lists through bm25s's own build
    import bm25s

    spec = parse_system("bm25:k1=1.2,b=0.75")
    reference = bm25s.BM25(k1=spec.k1, b=spec.b, method=spec.method)
    reference.index(real_tokenize(bm25.document_texts(dataset), spec, return_ids=True), show_progress=False)
    for query in real_tokenize(dataset.queries["text"].tolist()[:50], spec):
        np.testing.assert_array_equal(index.engine.get_scores(query), reference.get_scores(query))


@pytest.mark.shared
def test_second_call_uses_cached_index(beir_dataset) -> None:
    dataset = beir_dataset("scifact")
    first = bm25.load_index(dataset)
    second = bm25.load_index(dataset, "bm25:k1=0.9,b=0.4")
    assert (first.cached, second.cached) == (False, True)
    assert second.path == first.path and second.build_seconds == first.build_seconds
    assert list((cache_dir() / "bm25" / "index").iterdir()) == [first.path]  # no temporary folder left behind
    assert len(list((cache_dir() / "bm25" / "tokens").iterdir())) == 1
    assert (first.path / "meta.json").is_file()
    queries = dataset.queries
    a = first.search(queries["query_id"].tolist(), queries["text"].tolist(), 100)
    b = second.search(queries["query_id"].tolist(), queries["text"].tolist(), 100)
    pd.testing.assert_frame_equal(a, b)
    other = bm25.load_index(dataset, "bm25:k1=1.2,b=0.75")
    assert other.cached is False and other.path != first.path
    assert retrieve(dataset, "bm25", depth=10).info["index_cached"] is True


@pytest.mark.shared
def test_rank_bm25_backend_agrees_with_bm25s(beir_dataset) -> None:
    dataset = beir_dataset("scifact")
    fast = retrieve(dataset, "bm25", depth=100).run
    slow = retrieve(dataset, "bm25:backend=rank_bm25", depth=100).run
    assert abs(ndcg_at_10(dataset, fast) - ndcg_at_10(dataset, slow)) < 0.01  # same tokens, Okapi idf differs
    top1 = fast[fast["rank"] == 1].set_index("query_id")["doc_id"]
    top1_slow = slow[slow["rank"] == 1].set_index("query_id")["doc_id"]
    assert (top1 == top1_slow.reindex(top1.index)).mean() > 0.9


@pytest.mark.shared
@pytest.mark.parametrize("system", ["bm25", "bm25:backend=rank_bm25"])
def test_shallow_run_is_prefix_of_deep_run(beir_dataset, system: str) -> None:
    """Ties at the cut-off are resolved like trec_eval (doc id descending), so depth never changes the top."""
    dataset = beir_dataset("nfcorpus")
    index = bm25.load_index(dataset, system)
    ids, texts = dataset.queries["query_id"].tolist(), dataset.queries["text"].tolist()
    deep = index.search(ids, texts, 1000)
    for depth in (1, 10, 100):
        pd.testing.assert_frame_equal(
            index.search(ids, texts, depth), deep[deep["rank"] <= depth].reset_index(drop=True)
        )


# ---------------------------------------------------------------------------------------------
# small synthetic data


def test_bm25_on_tiny_dataset() -> None:
    dataset = tiny_dataset()
    run = bm25.search(dataset, BM25Spec(), depth=10)
    assert run[run["query_id"] == "q1"]["doc_id"].tolist() == ["q1", "d2", "d1"]  # d1/d2 tie: doc id desc
    assert bm25.search(dataset, BM25Spec(), depth=2)["doc_id"].tolist() == ["q1", "d2"]  # the tie at the cut too
    q1 = run[run["query_id"] == "q1"]
    assert q1["doc_id"].tolist()[:1] == ["q1"]  # the doc with both terms (title and text) wins
    assert set(q1["doc_id"]) == {"q1", "d1", "d2"}  # docs sharing no term are not returned
    assert set(run["query_id"]) == {"q1"}  # stopwords only / unknown words: no hits, no crash
    assert (run["score"] > 0).all() and run.equals(order_run(run))
    assert bm25.search(dataset, "bm25:stopwords=none", depth=10)["query_id"].nunique() == 2  # "the and of"
    assert len(bm25.search(dataset, "bm25", depth=1)) == 1


def test_bm25_rejects_non_bm25_spec_and_empty_corpus() -> None:
    with pytest.raises(InputError, match="not a BM25 system"):
        bm25.load_index(tiny_dataset(), "dense:minilm")
    empty = tiny_dataset()
    empty = Dataset("e", "test", empty.corpus.iloc[:0], empty.queries, empty.qrels, empty.manifest)
    with pytest.raises(InputError, match="empty corpus"):
        bm25.load_index(empty)


def test_cache_key_covers_the_index_inputs() -> None:
    dataset = tiny_dataset()
    keys = {
        bm25.cache_key(dataset, parse_system(s))
        for s in ["bm25", "bm25:k1=1", "bm25:b=0.5", "bm25:method=atire", "bm25:stemmer=none", "bm25:stopwords=none"]
    }
    keys.add(bm25.cache_key(tiny_dataset(ignore_identical_ids=True), BM25Spec()))  # other fingerprint
    assert len(keys) == 7


def test_ignore_identical_ids_keeps_depth() -> None:
    kept = retrieve(tiny_dataset(), "bm25", depth=2).run
    assert kept[kept["query_id"] == "q1"]["doc_id"].tolist() == ["q1", "d2"]
    dropped = retrieve(tiny_dataset(ignore_identical_ids=True), "bm25", depth=2).run
    assert dropped[dropped["query_id"] == "q1"]["doc_id"].tolist() == ["d2", "d1"]
    assert dropped["rank"].tolist() == [1, 2]


def fake_dense(monkeypatch: pytest.MonkeyPatch, rows: list[tuple[str, str, float]]) -> list[int]:
    """Replace retrieve.dense.dense_search by a fixed run; returns the depths it was asked for."""
    from irflow.tasks.retrieve import dense

    asked: list[int] = []

    def dense_search(dataset: Dataset, spec: object, depth: int) -> pd.DataFrame:
        asked.append(depth)
        return pd.DataFrame(rows, columns=["query_id", "doc_id", "score"])

    monkeypatch.setattr(dense, "dense_search", dense_search)
    return asked


def test_retrieve_hybrid_is_rrf_of_members(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_dense(monkeypatch, [("q1", "d5", 0.9), ("q1", "d1", 0.8), ("q3", "d3", 0.7)])
    dataset = tiny_dataset()
    result = retrieve(dataset, "hybrid(weights=1:2):bm25+dense:minilm", depth=3)
    assert asked == [100]  # members are fetched at max(depth, 100)
    members = [
        retrieve(dataset, "bm25", depth=100).run,
        order_run(
            pd.DataFrame(
                [("q1", "d5", 0.9), ("q1", "d1", 0.8), ("q3", "d3", 0.7)], columns=["query_id", "doc_id", "score"]
            )
        ),
    ]
    expected = fuse_rrf(members, [1.0, 2.0], 60)
    pd.testing.assert_frame_equal(result.run, expected[expected["rank"] <= 3].reset_index(drop=True))
    assert result.run[result.run["query_id"] == "q1"]["doc_id"].tolist() == ["d1", "d5", "q1"]
    assert set(result.info["members"]) == {"bm25", "dense:sentence-transformers/all-MiniLM-L6-v2"}
    retrieve(dataset, "hybrid(depth=7):bm25+dense:minilm", depth=3)
    assert asked[-1] == 7


def test_retrieve_rerank_rescores_top_n(monkeypatch: pytest.MonkeyPatch) -> None:
    from irflow.tasks.embed import inference

    calls: list[tuple[str, list]] = []

    def score_pairs_many(model: str, items: list, **kwargs: object) -> list[list[float]]:
        calls.append((model, items))
        return [[float(len(doc)) for doc in docs] for _, docs in items]  # longer document = more relevant

    monkeypatch.setattr(inference, "score_pairs_many", score_pairs_many)
    dataset = tiny_dataset()
    first = retrieve(dataset, "bm25", depth=10).run
    result = retrieve(dataset, "rerank(top=2):minilm@bm25", depth=10)
    model, items = calls[0]
    assert model == "sentence-transformers/all-MiniLM-L6-v2"
    assert items == [("cats dogs", ["Cats and dogs cats chase dogs", "Dogs dogs bark loudly"])]
    q1 = result.run[result.run["query_id"] == "q1"]
    assert q1["doc_id"].tolist() == ["q1", "d2", *first[first["rank"] > 2]["doc_id"]]
    assert q1["score"].iloc[0] == len("Cats and dogs cats chase dogs") and q1["score"].is_monotonic_decreasing


def test_measure_latency_bm25() -> None:
    report = measure_latency(tiny_dataset(), "bm25", warmup=2, num_runs=3, sample=None, depth=5)
    assert report.queries == 3 and report.num_runs == 3 and report.system == "bm25"
    assert 0 < report.p50_ms <= report.p95_ms <= report.p99_ms
    assert report.queries_per_second > 0 and report.index_build_seconds > 0
    assert report.documents_per_second is None
    assert (report.queries_total, report.threads, len(report.samples_ms)) == (3, 1, 9)
    assert report.p50_ms_min <= report.p50_ms_median <= report.p50_ms_max
    assert report.p95_ms_min <= report.p95_ms_median <= report.p95_ms_max
    assert report.p50_ms_ci_low <= report.p50_ms <= report.p50_ms_ci_high
    assert report.p95_ms_ci_low <= report.p95_ms_ci_high
    assert 0 <= report.clock_overhead_ms < report.p50_ms
    assert report.load_before is not None and report.load_after is not None
    with pytest.raises(ValueError):
        measure_latency(tiny_dataset(), "bm25", num_runs=0)


def test_the_latency_path_ranks_as_the_run_does() -> None:
    """``query`` (what latency times: tokenisation + bm25s) gives the run's documents and scores."""
    from irflow.tasks.index import bm25

    dataset = tiny_dataset()
    index = bm25.load_index(dataset, "bm25")
    run = bm25.search(dataset, "bm25", depth=5)
    for qid, text in dataset.queries[["query_id", "text"]].itertuples(index=False):
        rows, scores = index.query(text, 5)
        kept = scores != 0
        expected = run[run["query_id"] == qid]
        hits = sorted(zip(index.doc_ids[rows[kept]].tolist(), scores[kept].tolist()), key=lambda h: (-h[1], h[0]))
        assert hits == sorted(zip(expected["doc_id"], expected["score"]), key=lambda h: (-h[1], h[0]))


def test_latency_spread_over_repeats_and_bootstrap() -> None:
    from irflow.tasks.retrieve.latency import spread

    fast, slow = [0.001 * (i + 1) for i in range(100)], [0.002 * (i + 1) for i in range(100)]
    out = spread([fast, slow, fast])
    assert (out["p50_ms_min"], out["p50_ms_median"], out["p50_ms_max"]) == pytest.approx((50.5, 50.5, 101.0))
    assert out["p95_ms_min"] == pytest.approx(95.05) and out["p95_ms_max"] == pytest.approx(190.1)
    pooled = np.percentile(np.concatenate([fast, slow, fast]) * 1000, 50)
    assert out["p50_ms_ci_low"] < pooled < out["p50_ms_ci_high"] < 100  # resampling queries moves the median
    assert spread([fast, slow, fast]) == out  # seeded
    assert spread([[0.005] * 10])["p95_ms_ci_low"] == pytest.approx(5.0) == spread([[0.005] * 10])["p95_ms_ci_high"]


def test_pinned_threads_limits_and_restores() -> None:
    import faiss

    from irflow.tasks.retrieve.latency import pinned_threads

    before = faiss.omp_get_max_threads()
    with pinned_threads(1):
        assert faiss.omp_get_max_threads() == 1
    assert faiss.omp_get_max_threads() == before


def test_retrieve_validates_depth_and_spec() -> None:
    with pytest.raises(InputError, match="depth"):
        retrieve(tiny_dataset(), "bm25", depth=1001)
    with pytest.raises(Exception, match="valid system specs"):
        retrieve(tiny_dataset(), "bm42")
    assert np.issubdtype(retrieve(tiny_dataset(), "bm25", depth=1000).run["rank"].dtype, np.integer)


@pytest.mark.parametrize("system", ["bm25", "hybrid:bm25+bm25:k1=1.2,b=0.75", "hybrid(weights=2:1,k=10):bm25+bm25:b=1"])
def test_the_latency_ranking_is_the_run(system: str) -> None:
    """What latency times for BM25 and hybrids (``Searcher.ranking``, no tables) ranks as ``retrieve`` does."""
    from irflow.tasks.retrieve.searchers import make_searcher

    dataset = tiny_dataset()
    run = retrieve(dataset, system, depth=5).run
    searcher = make_searcher(dataset, parse_system(system), online=True)
    for qid, text in dataset.queries[["query_id", "text"]].itertuples(index=False):
        expected = run[run["query_id"] == qid]
        hits = searcher.ranking(qid, text, 5)
        assert [d for d, _ in hits] == expected["doc_id"].tolist()
        np.testing.assert_allclose([s for _, s in hits], expected["score"].to_numpy(), rtol=1e-12)
