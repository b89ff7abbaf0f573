"""FAISS indexes over real MiniLM vectors of SciFact: exactness, recall, parameters, caching."""

from __future__ import annotations

import numpy as np
import pytest
from support.scifact import scifact

from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.embed import cache as embed_cache
from irflow.tasks.embed import models
from irflow.tasks.embed import vectors as embed
from irflow.tasks.index.faiss_index import build_index, resolve_params


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    """(document vectors, query vectors) of a 300-document SciFact subset."""
    dataset = scifact(300)
    model = models.resolve_model("minilm")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IRFLOW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        docs = embed_cache.embed_texts(
            dataset.corpus["doc_id"], embed.document_texts(dataset.corpus), model, role="document", max_seq_length=128
        )
        queries = embed_cache.embed_texts(
            dataset.queries["query_id"], dataset.queries["text"], model, role="query", max_seq_length=128
        )
    return docs.vectors, queries.vectors


def _brute_force(docs: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = queries.astype(np.float64) @ docs.astype(np.float64).T
    rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, rows, axis=1), rows


@pytest.mark.shared
def test_flat_equals_numpy_brute_force(vectors):
    docs, queries = vectors
    index = build_index(docs)
    scores, rows = index.search(queries, 10)
    expected_scores, expected_rows = _brute_force(docs, queries, 10)
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    assert index.kind == "flat" and index.params == {} and index.path is None


@pytest.mark.shared
def test_hnsw_recall_against_flat_and_params_recorded(vectors, tmp_path):
    docs, queries = vectors
    _, exact = build_index(docs).search(queries, 10)
    hnsw = build_index(docs, "hnsw", {"M": "16", "efSearch": "64"}, cache_dir=tmp_path)
    _, approx = hnsw.search(queries, 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact)])
    assert recall >= 0.95, recall
    assert hnsw.params == {"M": 16, "efConstruction": 200, "efSearch": 64}
    tracked = hnsw.tracking()
    assert tracked["index"] == "hnsw" and tracked["index_M"] == 16 and tracked["index_build_seconds"] >= 0


@pytest.mark.shared
def test_index_cache_is_reused_and_keyed_on_build_params(vectors, tmp_path):
    docs, queries = vectors
    first = build_index(docs, "hnsw", {"M": 16}, cache_dir=tmp_path)
    assert not first.from_cache and first.path.is_file() and first.path.name.startswith("index-hnsw-")
    again = build_index(docs, "hnsw", {"M": 16, "efSearch": 32}, cache_dir=tmp_path)  # search-only change
    assert again.from_cache and again.path == first.path and again.params["efSearch"] == 32
    assert again.build_seconds == pytest.approx(first.build_seconds)
    np.testing.assert_array_equal(
        build_index(docs, "hnsw", {"M": 16}, cache_dir=tmp_path).search(queries, 10)[1], first.search(queries, 10)[1]
    )
    other = build_index(docs, "hnsw", {"M": 8}, cache_dir=tmp_path)
    assert not other.from_cache and other.path != first.path
    assert len(list(tmp_path.glob("index-hnsw-*.faiss"))) == 2


@pytest.mark.shared
@pytest.mark.parametrize(
    "kind, params", [("ivf", {"nlist": 8, "nprobe": 8}), ("ivfpq", {"nlist": 4, "nprobe": 4, "m": 48, "nbits": 6})]
)
def test_ivf_builds_are_deterministic_and_accurate(vectors, tmp_path, kind, params):
    docs, queries = vectors
    a = build_index(docs, kind, params, cache_dir=tmp_path / "a")
    b = build_index(docs, kind, params, cache_dir=tmp_path / "b")
    assert a.path.read_bytes() == b.path.read_bytes()  # seeded training: byte-identical indexes
    _, exact = build_index(docs).search(queries, 10)
    _, approx = a.search(queries, 10)
    recall = np.mean([len(set(x) & set(e)) / 10 for x, e in zip(approx, exact)])
    assert recall >= (0.99 if kind == "ivf" else 0.6), recall  # nprobe = nlist: IVF is exhaustive
    assert a.params == {**params}


def test_bad_kind_and_params_are_reported():
    with pytest.raises(UnknownNameError, match="flat, hnsw, ivf, ivfpq"):
        resolve_params("annoy", None, 100, 8)
    with pytest.raises(UnknownNameError, match="efSearch"):
        resolve_params("hnsw", {"nprobe": 3}, 100, 8)
    with pytest.raises(InputError, match="integer"):
        resolve_params("hnsw", {"M": "many"}, 100, 8)
    with pytest.raises(InputError, match="divide"):
        resolve_params("ivfpq", {"m": 5, "nbits": 4}, 100, 8)
    with pytest.raises(InputError, match="vectors to train"):
        resolve_params("ivfpq", {"nbits": 8}, 100, 8)
    assert resolve_params("ivf", (("nprobe", "2"),), 10_000, 8) == {"nlist": 256, "nprobe": 2}
