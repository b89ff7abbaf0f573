"""A real Chroma server in the loop (``dense(index=chroma):…``): ``chroma run`` on 127.0.0.1 per
module, stopped by PID. Quality against exact FAISS on a BEIR collection, the HNSW settings the
server reports, the collection lifecycle (closed, collected, left by a killed run) and the errors.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.chroma import chroma_server
from support.services import free_port

from irflow.tasks.core.runs import order_run
from irflow.tasks.core.schema import InputError
from irflow.tasks.index import chroma as vectordb
from irflow.tasks.index.chroma import ChromaError
from irflow.tasks.index.faiss_index import build_index
from irflow.tasks.index.recall import exact_search

try:
    import chromadb
except ImportError:  # the optional extra: mandatory in CI (IRFLOW_REQUIRE_SHARED=1), skipped elsewhere
    chromadb = None
    if os.environ.get("IRFLOW_REQUIRE_SHARED") == "1":
        raise
    pytest.skip("needs the chroma extra: pip install -e '.[chroma]'", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("chroma") / "db"
    path.mkdir()
    with chroma_server(path) as url:
        yield url


@pytest.fixture
def client(server: str, monkeypatch: pytest.MonkeyPatch):
    """A plain chromadb client of the test server (IRFLOW_CHROMA_URL points irflow at it)."""
    monkeypatch.setenv(vectordb.URL_ENV, server)
    port = int(server.rsplit(":", 1)[1])
    return chromadb.HttpClient(host="127.0.0.1", port=port, settings=chromadb.Settings(anonymized_telemetry=False))


def _names(client) -> set[str]:
    return {c.name for c in client.list_collections()}


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _lsa(dataset, dim: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """Real vectors of a BEIR collection in seconds: tf-idf over the documents' words, projected on
    its top ``dim`` singular vectors (LSA), L2-normalised; queries projected the same way."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import svds

    from irflow.tasks.embed.vectors import document_texts

    word = re.compile(r"[a-z0-9]+")
    vocab: dict[str, int] = {}

    def matrix(texts: list[str], grow: bool) -> sp.csr_matrix:
        rows, cols = [], []
        for i, text in enumerate(texts):
            for w in word.findall(text.lower()):
                if grow:
                    vocab.setdefault(w, len(vocab))
                if w in vocab:
                    rows.append(i)
                    cols.append(vocab[w])
        return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), len(vocab)))  # sums repeats

    docs = matrix(document_texts(dataset.corpus), grow=True)
    queries = matrix(dataset.queries["text"].astype(str).tolist(), grow=False)
    idf = np.log((1 + docs.shape[0]) / (1 + np.bincount(docs.indices, minlength=docs.shape[1]))) + 1

    def weigh(m: sp.csr_matrix) -> sp.csr_matrix:
        m = m.copy()
        m.data = 1 + np.log(m.data)
        return m @ sp.diags(idf)

    _, _, vt = svds(weigh(docs), k=dim, random_state=0)

    def project(m: sp.csr_matrix) -> np.ndarray:
        x = np.asarray(weigh(m) @ vt.T, dtype=np.float32)
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    return project(docs), project(queries)


def _run(query_ids, doc_ids, scores: np.ndarray, rows: np.ndarray) -> pd.DataFrame:
    keep = rows.ravel() >= 0
    return order_run(
        pd.DataFrame(
            {
                "query_id": np.repeat(np.asarray(query_ids, dtype=object), rows.shape[1])[keep],
                "doc_id": np.asarray(doc_ids, dtype=object)[rows.ravel()[keep]],
                "score": scores.ravel()[keep].astype(np.float64),
            }
        )
    )


@pytest.mark.e2e
@pytest.mark.shared
def test_chroma_on_nfcorpus_matches_exact_faiss_and_reports_recall(beir_dataset, client):
    """NFCorpus (3,633 documents, 323 test queries, graded): the same vectors searched through a
    Chroma collection and through FAISS flat give nDCG@10 within 0.005; recall@10/@100 is tracked."""
    from irflow.tasks.metrics import evaluate, mean

    dataset = beir_dataset("nfcorpus")
    docs, queries = _lsa(dataset)
    doc_ids, query_ids = dataset.corpus["doc_id"].tolist(), dataset.queries["query_id"].tolist()
    exact = build_index(docs)
    chroma = build_index(docs, "chroma")
    try:
        flat_scores, flat_rows = exact.search(queries, 100)
        scores, rows = chroma.search(queries, 100)
        ndcg = {
            name: mean(evaluate(_run(query_ids, doc_ids, s, r), dataset.qrels, ["nDCG@10", "R@100"]))
            for name, (s, r) in {"flat": (flat_scores, flat_rows), "chroma": (scores, rows)}.items()
        }
        tracked = chroma.tracking()
    finally:
        chroma.close()
    assert ndcg["flat"]["nDCG@10"] > 0.15, ndcg  # real retrieval, not noise
    assert abs(ndcg["chroma"]["nDCG@10"] - ndcg["flat"]["nDCG@10"]) <= 0.005, ndcg
    # scores are inner products, as FAISS's: 1 - Chroma's ip distance
    np.testing.assert_allclose(scores, np.einsum("qkd,qd->qk", docs[rows], queries), atol=1e-5)
    # recall against exact, recomputed here with numpy: a hit is a document scoring at least the k-th
    # best score (NFCorpus has duplicate documents, so plain top-k set overlap undercounts ties)
    full = queries.astype(np.float64) @ docs.astype(np.float64).T
    for k in (10, 100):
        kth = -np.partition(-full, k - 1, axis=1)[:, k - 1 : k]
        hits = np.take_along_axis(full, rows[:, :k], axis=1) >= kth - 1e-5
        assert tracked[f"index_recall_at_{k}"] == pytest.approx(hits.mean(), abs=1e-3), (k, tracked)
        overlap = np.mean([len(set(a[:k]) & set(e[:k])) / k for a, e in zip(rows, flat_rows)])
        assert overlap <= tracked[f"index_recall_at_{k}"] + 1e-9
        assert 0.9 <= tracked[f"index_recall_at_{k}"] <= 1.0
    assert tracked["index_recall_queries"] == len(queries)
    print(f"nfcorpus LSA-128: {ndcg}; recall {tracked['index_recall_at_10']}/{tracked['index_recall_at_100']}")


@pytest.mark.e2e
@pytest.mark.shared
def test_dense_chroma_system_through_retrieve(client):
    """``dense(index=chroma):minilm`` end to end on a SciFact subset: same metrics as exact flat,
    the index's settings and recall in the retrieval info and MLflow params, nothing left behind."""
    from support.scifact import scifact

    from irflow.tasks.metrics import evaluate, mean
    from irflow.tasks.retrieve.searchers import measure_latency, retrieve
    from irflow.tasks.tracking.params import system_params

    dataset = scifact(200)  # encoded once (the embedding cache is shared by both systems), 64 tokens: seconds
    system = "dense(max_seq_length=64,index=chroma,M=24,efSearch=64):minilm"
    flat = retrieve(dataset, "dense(max_seq_length=64):minilm")
    chroma = retrieve(dataset, system)
    assert _names(client) == set()  # the batch search's collection went with it
    a, b = (mean(evaluate(r.run, dataset.qrels, ["nDCG@10"]))["nDCG@10"] for r in (flat, chroma))
    assert a > 0.5 and abs(a - b) <= 0.005, (a, b)
    info = chroma.info
    assert info["index"] == "chroma" and info["index_space"] == "ip"
    assert info["index_M"] == 24 and info["index_efSearch"] == 64 and info["index_efConstruction"] == 100
    assert info["index_recall_at_100"] >= 0.95 and info["index_recall_queries"] == len(dataset.queries)
    params = system_params(system, info)
    assert params["index.type"] == "chroma" and params["index.space"] == "ip"
    assert params["index.recall_at_10"] == info["index_recall_at_10"]
    assert params["index.chroma_server"] == client.get_version()
    latency = measure_latency(dataset, system, warmup=1, num_runs=1, sample=5)
    assert latency.p50_ms > 0 and latency.info["index"] == "chroma"
    gc.collect()
    assert _names(client) == set()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.shared
def test_minilm_on_full_scifact_chroma_within_0005_of_exact(beir_dataset, client):
    """The done-when with a real model: all of SciFact (5,183 documents; a full encode, minutes)."""
    from irflow.tasks.metrics import evaluate, mean
    from irflow.tasks.retrieve.searchers import retrieve

    dataset = beir_dataset("scifact")
    flat, chroma = (retrieve(dataset, s) for s in ("dense:minilm", "dense(index=chroma):minilm"))
    a, b = (mean(evaluate(r.run, dataset.qrels, ["nDCG@10"]))["nDCG@10"] for r in (flat, chroma))
    assert a == pytest.approx(0.6451, abs=0.01) and abs(a - b) <= 0.005, (a, b)
    assert 0.9 <= chroma.info["index_recall_at_100"] <= 1.0
    print(f"scifact minilm nDCG@10 flat {a:.4f} chroma {b:.4f}; recall {chroma.info['index_recall_at_100']}")


@pytest.mark.e2e
def test_hnsw_settings_reach_the_server_and_tracking(client):
    vectors = _unit(500, 16, 0)
    index = build_index(vectors, "chroma", {"M": "8", "efConstruction": "40", "efSearch": "30"})
    try:
        stored = client.get_collection(index.name).configuration_json["hnsw"]
        assert (stored["space"], stored["max_neighbors"], stored["ef_construction"], stored["ef_search"]) == (
            "ip",
            8,
            40,
            30,
        )
        tracked = index.tracking()
        assert tracked["index"] == "chroma" and tracked["index_from_cache"] is False
        assert (tracked["index_M"], tracked["index_efConstruction"], tracked["index_efSearch"]) == (8, 40, 30)
        assert tracked["index_space"] == "ip" and tracked["index_chroma_server"] == client.get_version()
        assert tracked["index_chroma_client"] == chromadb.__version__ and tracked["index_build_seconds"] > 0
        assert "index_recall_at_10" not in tracked  # measured on the first search
        scores, rows = index.search(vectors[:3], 1000)  # deeper than the collection: every row once
        assert rows.shape == (3, 500) and (np.sort(rows, axis=1) == np.arange(500)).all()
        assert rows[:, 0].tolist() == [0, 1, 2] and np.allclose(scores[:, 0], 1.0, atol=1e-5)
        exact_scores, _ = exact_search(vectors, vectors[:3], 500)
        np.testing.assert_allclose(scores, exact_scores, atol=1e-5)  # all 500: same scores, same order
        assert index.tracking()["index_recall_at_100"] == 1.0
    finally:
        index.close()


@pytest.mark.e2e
def test_collections_are_deleted_on_close_and_when_collected(client):
    vectors = _unit(50, 8, 1)
    first, second = build_index(vectors, "chroma"), build_index(vectors, "chroma")
    names = {first.name, second.name}
    assert all(n.startswith(vectordb.PREFIX) for n in names) and names <= _names(client)
    first.close()
    first.close()  # idempotent
    assert first.name not in _names(client) and second.name in _names(client)
    with pytest.raises(ChromaError, match="closed"):
        first.search(vectors[:1], 5)
    del second
    gc.collect()
    assert not names & _names(client)


@pytest.mark.e2e
def test_a_killed_runs_collection_is_swept_by_the_next_run_and_others_are_kept(client, server, tmp_path):
    script = textwrap.dedent(
        """
        import sys, numpy as np
        from irflow.tasks.index.faiss_index import build_index
        index = build_index(np.eye(4, dtype=np.float32), "chroma")
        print(index.name, flush=True)
        sys.stdin.read()
        """
    )
    env = {**os.environ, vectordb.URL_ENV: server}
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        orphan = proc.stdout.readline().decode().strip()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert orphan.startswith(vectordb.PREFIX) and orphan in _names(client)  # SIGKILL: no clean-up ran

    me = {**vectordb.OWNER, "irflow_host": socket.gethostname(), "irflow_pid": os.getpid()}
    old = {**vectordb.OWNER, "irflow_host": "elsewhere", "irflow_pid": 1, "irflow_created": time.time() - 2 * 86400}
    kept = {
        "irflow-live": {**me, "irflow_created": time.time()},  # its process runs: in use
        "irflow-recent-elsewhere": {**old, "irflow_created": time.time()},  # another host, recent: unknown
        "irflow-not-ours": {"team": "search"},  # the prefix without irflow's mark
        "products": old,  # the mark without the prefix
    }
    for name, meta in {**kept, "irflow-old-elsewhere": old}.items():
        client.create_collection(name, metadata=meta, embedding_function=None)
    with build_index(_unit(10, 4, 2), "chroma") as index:
        left = _names(client)
        assert orphan not in left and "irflow-old-elsewhere" not in left
        assert set(kept) | {index.name} == left
    for name in kept:
        client.delete_collection(name)


@pytest.mark.e2e
def test_the_test_server_dies_with_a_killed_test_process(tmp_path):
    """``chroma_server`` runs ``chroma run`` through irflow.tasks.core.child: SIGKILL the process that
    started it (no ``finally`` runs) and the server still goes away."""
    from support.chroma import _answers

    (tmp_path / "db").mkdir()
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from support.chroma import chroma_server
        with chroma_server(Path({str(tmp_path / "db")!r})) as url:
            print(url, flush=True)
            time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    starter = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    try:
        url = starter.stdout.readline().decode().strip()
        assert _answers(url)
    finally:
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait(30)
    deadline = time.monotonic() + 30
    while _answers(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _answers(url), f"the Chroma server at {url} outlived the killed test process"


def test_unreachable_server_is_a_named_error_with_the_url(monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv(vectordb.URL_ENV, url)
    start = time.monotonic()
    with pytest.raises(ChromaError, match=re.escape(url) + r".*IRFLOW_CHROMA_URL.*chroma run"):
        build_index(_unit(5, 4, 3), "chroma")
    assert time.monotonic() - start < vectordb.CONNECT_TIMEOUT_S


def test_a_server_that_never_answers_fails_within_the_connect_timeout(monkeypatch):
    with socket.socket() as silent:  # accepts connections (backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv(vectordb.URL_ENV, url)
        monkeypatch.setattr(vectordb, "CONNECT_TIMEOUT_S", 0.5)
        start = time.monotonic()
        with pytest.raises(ChromaError, match=re.escape(url) + ".*Timeout"):
            build_index(_unit(5, 4, 3), "chroma")
        assert time.monotonic() - start < 5


def test_default_url_bad_urls_and_missing_package(monkeypatch):
    monkeypatch.delenv(vectordb.URL_ENV, raising=False)
    assert vectordb.chroma_url() == "http://127.0.0.1:8000"
    for bad in ("127.0.0.1:8000", "http://127.0.0.1:8000/chroma", "ftp://host", "http://host:port"):
        monkeypatch.setenv(vectordb.URL_ENV, bad)
        with pytest.raises(InputError, match="IRFLOW_CHROMA_URL"):
            build_index(_unit(5, 4, 3), "chroma")
    monkeypatch.setenv(vectordb.URL_ENV, "http://127.0.0.1:1")
    monkeypatch.setitem(sys.modules, "chromadb", None)  # as if the extra were not installed
    with pytest.raises(ChromaError, match=re.escape("pip install 'irflow[chroma]'")):
        build_index(_unit(5, 4, 3), "chroma")


def test_stale_rule():
    now = time.time()
    mine = {**vectordb.OWNER, "irflow_host": socket.gethostname(), "irflow_created": now}
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert vectordb.is_stale("irflow-x", {**mine, "irflow_pid": dead.pid}, now)
    assert not vectordb.is_stale("irflow-x", {**mine, "irflow_pid": os.getpid()}, now)
    assert vectordb.is_stale("irflow-x", {**mine, "irflow_pid": os.getpid()}, now + vectordb.STALE_AFTER_S + 1)
    assert not vectordb.is_stale("other-x", {**mine, "irflow_pid": dead.pid}, now)
    assert not vectordb.is_stale("irflow-x", {"irflow_pid": dead.pid}, now)
    assert not vectordb.is_stale("irflow-x", None, now)


@pytest.mark.parametrize(
    "body, content_type, match",
    [
        (b"<html>a web app</html>", "text/html", r"not JSON \(text/html\)"),
        (b'{"status": "ok"}', "application/json", r"without Chroma's 'nanosecond heartbeat'"),
    ],
)
def test_a_web_server_that_is_not_chroma_is_named_with_its_url_and_no_credentials(
    monkeypatch, body, content_type, match
):
    import http.server
    import threading

    class Anything(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # every path answers 200, as a single-page web app does
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Anything)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        monkeypatch.setenv(vectordb.URL_ENV, f"http://someone:s3cret-pw@127.0.0.1:{port}")
        with pytest.raises(
            ChromaError, match=rf"http://someone:\*\*\*@127\.0\.0\.1:{port} \(IRFLOW_CHROMA_URL\) .*{match}"
        ) as info:
            build_index(_unit(5, 4, 3), "chroma")
        assert "s3cret-pw" not in str(info.value)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
