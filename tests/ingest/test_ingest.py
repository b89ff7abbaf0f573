"""Ingestion: real BEIR downloads over loopback HTTP, every source format, and every bad-input case."""

from __future__ import annotations

import json
import os
import shutil
import stat
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from support.toy import DOCS, QRELS, QUERIES, write_beir

from irflow.tasks import ingest
from irflow.tasks.core.atomic import is_temp_name
from irflow.tasks.core.schema import DownloadError, InputError, UnknownNameError
from irflow.tasks.ingest import beir, store


def imported(*args, **kwargs):
    """Import, then load the stored split (import itself returns only the manifest)."""
    manifest = ingest.import_dataset(*args, **kwargs)
    return ingest.load_dataset(manifest["name"], manifest["split"])


# ----------------------------------------------------------------------------- BEIR over HTTP


@pytest.fixture
def mirror(beir_dir: Path, serve_dir, monkeypatch: pytest.MonkeyPatch):
    """The shared BEIR zips served on 127.0.0.1, with IRFLOW_BEIR_BASE_URL pointing at them."""
    base, requests = serve_dir(beir_dir)
    monkeypatch.setenv("IRFLOW_BEIR_BASE_URL", base)
    return requests


@pytest.mark.shared
def test_beir_download_gives_the_published_counts_and_caches(mirror: list[str], beir_dir: Path) -> None:
    scifact = ingest.load_dataset("beir/scifact")
    assert (len(scifact.corpus), len(scifact.queries), len(scifact.qrels)) == (5183, 300, 339)
    assert scifact.corpus["doc_id"].map(type).eq(str).all() and "4983" in set(scifact.corpus["doc_id"])
    assert not scifact.qrels["doc_id"].str.contains("\r").any()
    assert scifact.manifest["source"]["verified"].startswith("content pinned in irflow's catalog")
    assert scifact.manifest["source"]["official_archive"] is False, "the shared scifact.zip is repackaged"
    nfcorpus = ingest.load_dataset("beir/nfcorpus")
    assert (len(nfcorpus.corpus), len(nfcorpus.queries), len(nfcorpus.qrels)) == (3633, 323, 12334)
    assert nfcorpus.grades() == {1: 11758, 2: 576}
    assert nfcorpus.manifest["source"]["official_archive"] is True
    assert ingest.load_dataset("beir/nfcorpus", "dev").manifest["judgements"] == 11385
    assert "/nfcorpus.zip" in mirror and "/scifact.zip" in mirror

    before = list(mirror)
    again = ingest.load_dataset("beir/scifact")
    ingest.load_dataset("beir/nfcorpus", "train")  # every split was stored with the first: still offline
    assert mirror == before, "a second call must make no network request"
    assert again.fingerprint == scifact.fingerprint

    # The same content by the zip-import and unpacked-folder routes has the same fingerprint.
    via_zip = imported(beir_dir / "scifact.zip", "beir", "copy-zip")
    folder = Path(os.environ["IRFLOW_CACHE_DIR"]) / "unpacked"
    zipfile.ZipFile(beir_dir / "scifact.zip").extractall(folder)
    via_folder = imported(folder / "scifact", "beir", "copy-folder")
    assert via_zip.fingerprint == via_folder.fingerprint == scifact.fingerprint


def _toy_catalog(tmp_path: Path, serve_dir, monkeypatch, md5: str | None) -> tuple[Path, Path]:
    """A one-entry catalog ``beir/toy`` (no content pins) served from a loopback mirror."""
    folder = write_beir(tmp_path / "src" / "toy", DOCS, QUERIES, QRELS)
    served = tmp_path / "served"
    served.mkdir()
    shutil.make_archive(str(served / "toy"), "zip", folder.parent, "toy")
    base, _ = serve_dir(served)
    monkeypatch.setenv("IRFLOW_BEIR_BASE_URL", base)
    digest = beir.file_checksums(served / "toy.zip")["md5"] if md5 == "auto" else md5
    entry = beir.BeirEntry("beir/toy", "toy", None, digest, ("test",), "test", False)
    monkeypatch.setattr(beir, "catalog", lambda: {"beir/toy": entry})
    return folder, served


def test_published_md5_is_checked_for_unpinned_entries(tmp_path, serve_dir, monkeypatch, caplog) -> None:
    folder, served = _toy_catalog(tmp_path, serve_dir, monkeypatch, "auto")
    (served / "SHA256SUMS").write_text(f"{beir.file_checksums(served / 'toy.zip')['sha256']}  toy.zip\n")
    dataset = ingest.load_dataset("beir/toy")
    verified = dataset.manifest["source"]["verified"]
    assert verified.startswith("md5 published by BEIR") and "recorded on first download" in verified
    assert "trusting it on first download" in caplog.text, "trust on first download is said on stderr"
    # A different archive, vouched for by the mirror's own SHA256SUMS, is refused: the md5 decides.
    shutil.rmtree(Path(os.environ["IRFLOW_CACHE_DIR"]) / "datasets")
    (Path(os.environ["IRFLOW_CACHE_DIR"]) / "downloads" / "beir" / "toy.zip").unlink()
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t1\n")
    shutil.make_archive(str(served / "toy"), "zip", folder.parent, "toy")
    (served / "SHA256SUMS").write_text(f"{beir.file_checksums(served / 'toy.zip')['sha256']}  toy.zip\n")
    with pytest.raises(DownloadError, match="checksum mismatch.*md5.*published by BEIR"):
        ingest.load_dataset("beir/toy")
    assert not store.stored_splits("beir/toy")


@pytest.mark.shared
def test_damaged_download_caches_nothing_and_next_call_downloads_again(beir_dir, serve_dir, monkeypatch, tmp_path):
    data = bytearray((beir_dir / "nfcorpus.zip").read_bytes())
    data[1000] ^= 0xFF
    (tmp_path / "nfcorpus.zip").write_bytes(bytes(data))
    base, requests = serve_dir(tmp_path)
    monkeypatch.setenv("IRFLOW_BEIR_BASE_URL", base)
    with pytest.raises(DownloadError, match="nfcorpus.zip: the downloaded archive is unusable: .*damaged zip member"):
        ingest.load_dataset("beir/nfcorpus")
    cache = Path(os.environ["IRFLOW_CACHE_DIR"])
    assert not list((cache / "downloads" / "beir").glob("*nfcorpus*")), "nothing may be cached"
    assert not store.stored_splits("beir/nfcorpus")
    assert not [p for p in cache.rglob("*") if is_temp_name(p.name)], "no temporary is left behind"

    shutil.copy(beir_dir / "nfcorpus.zip", tmp_path / "nfcorpus.zip")
    n = requests.count("/nfcorpus.zip")
    assert len(ingest.load_dataset("beir/nfcorpus").corpus) == 3633
    assert requests.count("/nfcorpus.zip") == n + 1


def test_interrupted_download_is_never_taken_for_complete(tmp_path: Path) -> None:
    import http.server
    import threading

    class Truncating(http.server.BaseHTTPRequestHandler):
        calls = 0

        def do_GET(self) -> None:
            Truncating.calls += 1
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"x" * 5000)  # then the connection closes: a short read

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Truncating)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dest = tmp_path / "dl" / "thing.zip"
        with pytest.raises(DownloadError, match="after 2 attempts"):
            beir.download(f"http://127.0.0.1:{server.server_address[1]}/thing.zip", dest, retries=2, backoff=0)
        assert Truncating.calls == 2
        assert not dest.exists() and not list(dest.parent.iterdir())
    finally:
        server.shutdown()
        server.server_close()


class _Trickle:
    """A 127.0.0.1 server whose GET answers ``PIECE`` bytes every ``PAUSE`` seconds, forever (no length)."""

    def __init__(self, piece: int, pause: float) -> None:
        import http.server
        import threading
        import time

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                try:
                    while True:
                        self.wfile.write(b"x" * piece)
                        self.wfile.flush()
                        time.sleep(pause)
                except OSError:
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/thing.zip"

    def __enter__(self) -> _Trickle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    "piece, pause, env, message",
    [
        (16, 0.05, {"IRFLOW_DOWNLOAD_SECONDS": "2"}, "more than 2 seconds (IRFLOW_DOWNLOAD_SECONDS; raise it"),
        (1 << 16, 0.0, {"IRFLOW_MAX_DOWNLOAD_BYTES": "4M"}, "more than 4,194,304 bytes (IRFLOW_MAX_DOWNLOAD_BYTES;"),
    ],
    ids=["trickle", "endless"],
)
def test_a_download_that_never_ends_stops_at_its_limit(
    piece: int, pause: float, env: dict[str, str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 bytes every 50 ms: each wait is far below the socket timeout, so only the total time limit ends it;
    a fast endless body would fill the disk but for the size limit. Neither is retried; nothing is left."""
    import time

    from irflow.tasks.core.limits import LimitError

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    dest = tmp_path / "dl" / "thing.zip"
    with _Trickle(piece, pause) as server:
        start = time.monotonic()
        with pytest.raises(LimitError) as caught:
            beir.download(server.url, dest, retries=3, backoff=0)
        assert time.monotonic() - start < 30
    assert server.url in str(caught.value) and message in str(caught.value)
    assert not dest.exists() and not list(dest.parent.iterdir())


def test_unknown_checksum_is_recorded_on_first_download_and_enforced(tmp_path, serve_dir, monkeypatch) -> None:
    folder, served = _toy_catalog(tmp_path, serve_dir, monkeypatch, None)
    first = ingest.load_dataset("beir/toy")
    assert first.manifest["source"]["verified"] == (
        "none published; sha256 recorded on first download (no content pin in the catalog)"
    )
    # The archive changes upstream; a fresh download must match the recorded sha256.
    cache = Path(os.environ["IRFLOW_CACHE_DIR"])
    shutil.rmtree(cache / "datasets")
    (cache / "downloads" / "beir" / "toy.zip").unlink()
    (folder / "corpus.jsonl").write_text(json.dumps(DOCS[0]) + "\n")
    shutil.make_archive(str(served / "toy"), "zip", folder.parent, "toy")
    with pytest.raises(DownloadError, match="checksum mismatch.*sha256.*recorded on first download"):
        ingest.load_dataset("beir/toy")


def test_catalog_lists_beir_with_identical_id_flags() -> None:
    entries = beir.catalog()
    assert entries["beir/arguana"].ignore_identical_ids and entries["beir/quora"].ignore_identical_ids
    assert not entries["beir/scifact"].ignore_identical_ids
    assert entries["beir/msmarco"].default_split == "dev"
    assert ingest.default_split("beir/msmarco") == "dev"
    assert entries["beir/cqadupstack/android"].archive == "cqadupstack"
    assert len([n for n in entries if n.startswith("beir/cqadupstack/")]) == 12
    with pytest.raises(UnknownNameError, match="beir/scifact"):
        ingest.load_dataset("beir/scifacts")


# ----------------------------------------------------------------------------- zip slip


def _zip_with(path: Path, name: str, data: bytes = b"x", mode: int | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("toy/corpus.jsonl", json.dumps(DOCS[0]) + "\n")
        info = zipfile.ZipInfo(name)
        if mode is not None:
            info.external_attr = mode << 16
        zf.writestr(info, data)
    return path


@pytest.mark.parametrize(
    "member, mode, why",
    [
        ("../evil.txt", None, "escapes"),
        ("toy/../../evil.txt", None, "escapes"),
        ("/tmp/irflow-evil.txt", None, "absolute"),
        ("toy/link", stat.S_IFLNK | 0o777, "link"),
    ],
)
def test_zip_slip_is_refused_and_nothing_written(tmp_path: Path, member: str, mode: int | None, why: str) -> None:
    archive = _zip_with(tmp_path / "a.zip", member, b"/etc/passwd" if mode else b"x", mode)
    dest = tmp_path / "out" / "toy"
    dest.mkdir(parents=True)
    with pytest.raises(InputError, match=why):
        beir.extract_into(archive, dest)
    assert not any(dest.iterdir()) and not (tmp_path / "evil.txt").exists()
    assert not Path("/tmp/irflow-evil.txt").exists()


def test_import_of_a_zip_routes_through_safe_extraction(tmp_path: Path) -> None:
    archive = _zip_with(tmp_path / "a.zip", "../evil.txt")
    with pytest.raises(InputError, match="escapes"):
        ingest.import_dataset(archive, "beir", "evil")
    assert not (tmp_path / "evil.txt").exists()


# ----------------------------------------------------------------------------- canonical form


def test_canonical_tables_ids_metadata_and_dropped_qrels(tmp_path: Path) -> None:
    """Judgements of unknown queries and duplicate lines are dropped and counted; a judgement of a
    document absent from the corpus is kept (trec_eval / BEIR) and reported as such."""
    qrels = QRELS + "q1\tnope\t1\r\nq9\td1\t1\r\nq2\td2\t1\r\n"
    dataset = imported(write_beir(tmp_path / "toy", DOCS, QUERIES, qrels), "beir", "toy")
    assert list(dataset.corpus.columns) == ["doc_id", "title", "text", "doc_type"]
    assert dataset.corpus.set_index("doc_id").loc["3", "doc_type"] == "code"
    assert sorted(dataset.queries["query_id"]) == ["q1", "q2"], "only judged queries of the split"
    assert dataset.qrels["relevance"].dtype == "int64"
    assert dataset.grades() == {0: 1, 1: 2, 2: 1}
    assert ("q1", "nope", 1) in set(dataset.qrels.itertuples(index=False, name=None))
    assert dataset.manifest["dropped_qrels"] == {
        "unknown_query": 1,
        "unknown_doc": 0,
        "duplicate": 1,
        "examples": ["q9 -> d1"],
    }
    assert dataset.manifest["missing_documents"] == {
        "judgements": 1,
        "documents": 1,
        "relevant_judgements": 1,
        "queries": 1,
        "queries_without_retrievable_relevant": 0,
        "examples": ["q1 -> nope"],
    }
    assert set(dataset.manifest) >= {
        "name",
        "split",
        "documents",
        "queries",
        "judgements",
        "grades",
        "fingerprint",
        "source",
        "irflow_version",
    }
    assert (dataset.manifest["documents"], dataset.manifest["queries"], dataset.manifest["judgements"]) == (3, 2, 4)


def test_missing_documents_dropped_on_request_and_a_foreign_qrels_file_refused(tmp_path: Path) -> None:
    qrels = QRELS + "q1\tnope\t1\r\nq3\tgone\t2\r\n"
    folder = write_beir(tmp_path / "toy", DOCS, QUERIES, qrels)
    kept = imported(folder, "beir", "kept")
    assert kept.manifest["missing_documents"]["queries_without_retrievable_relevant"] == 1, "q3 judges only 'gone'"
    assert "q3" in set(kept.queries["query_id"])
    dropped = imported(folder, "beir", "dropped", drop_missing_documents=True)
    assert dropped.manifest["dropped_qrels"]["unknown_doc"] == 2
    assert dropped.manifest["missing_documents"]["judgements"] == 0
    assert "q3" not in set(dropped.queries["query_id"]) and len(dropped.qrels) == len(kept.qrels) - 2
    assert dropped.manifest["source"]["drop_missing_documents"] is True
    foreign = write_beir(tmp_path / "foreign", DOCS, QUERIES, "query-id\tcorpus-id\tscore\nq1\tx1\t1\nq2\tx2\t1\n")
    with pytest.raises(InputError, match="none of the 2 judged documents .* is in the corpus"):
        ingest.import_dataset(foreign, "beir", "foreign")


def test_fingerprint_is_stable_and_sensitive(tmp_path: Path) -> None:
    a = imported(write_beir(tmp_path / "a", DOCS, QUERIES, QRELS), "beir", "a")
    b = imported(write_beir(tmp_path / "b", list(reversed(DOCS)), QUERIES, QRELS), "beir", "b")
    assert a.fingerprint == b.fingerprint, "row order is not content"
    assert imported(tmp_path / "a", "beir", "a").fingerprint == a.fingerprint
    changed = QRELS.replace("q2\td2\t1", "q2\td2\t2")
    c = imported(write_beir(tmp_path / "c", DOCS, QUERIES, changed), "beir", "c")
    docs = [dict(DOCS[0], text="first doc!"), *DOCS[1:]]
    d = imported(write_beir(tmp_path / "d", docs, QUERIES, QRELS), "beir", "d")
    assert len({a.fingerprint, c.fingerprint, d.fingerprint}) == 3


def test_second_load_reads_the_store(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "toy", DOCS, QUERIES, QRELS)
    first = imported(folder, "beir", "toy")
    shutil.rmtree(folder)
    again = ingest.load_dataset("toy")
    pd.testing.assert_frame_equal(first.corpus, again.corpus)
    assert again.fingerprint == first.fingerprint


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "corpus, match",
    [
        ('{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": "broken\n', r"corpus\.jsonl:2: malformed JSON"),
        (
            '{"_id": "d1", "text": "ok"}\n{"title": "t", "text": "no id"}\n',
            r"corpus\.jsonl:2: missing required field '_id'",
        ),
        (
            '{"_id": "d1", "text": "ok"}\n{"_id": "d2", "title": "no text"}\n',
            r"corpus\.jsonl:2: missing required field 'text'",
        ),
        ('{"_id": "d1", "text": "ok"}\n[1, 2]\n', r"corpus\.jsonl:2: expected a JSON object"),
        (
            '{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": "b"}\n{"_id": "d1", "text": "c"}\n',
            r"duplicate document id 'd1'",
        ),
        ("", r"the corpus is empty"),
        (
            '{"_id": "d1", "text": "ok"}\n{"_id": "doc 2", "text": "a space"}\n',
            r"corpus\.jsonl:2: document id 'doc 2' is empty or contains whitespace; expected an id without spaces",
        ),
        (
            '{"_id": "d1\\t", "text": "a tab"}\n',
            r"corpus\.jsonl:1: document id 'd1\\t' is empty or contains whitespace",
        ),
    ],
)
def test_bad_corpus(tmp_path: Path, corpus: str, match: str) -> None:
    folder = write_beir(tmp_path / "bad", corpus, QUERIES, "q1\td1\t1\n")
    with pytest.raises(InputError, match=match):
        ingest.import_dataset(folder, "beir", "bad")
    assert not store.dataset_dir("bad").exists(), "a failed ingestion stores nothing"


def test_failed_reimport_keeps_the_previous_dataset(tmp_path: Path) -> None:
    good = imported(write_beir(tmp_path / "good", DOCS, QUERIES, QRELS), "beir", "keep")
    bad = write_beir(tmp_path / "bad", '{"_id": "x"\n', QUERIES, QRELS)
    with pytest.raises(InputError):
        ingest.import_dataset(bad, "beir", "keep")
    assert ingest.load_dataset("keep").fingerprint == good.fingerprint


def test_a_query_id_with_a_space_is_refused_at_import(tmp_path: Path) -> None:
    """A run file could not hold it: every run on the dataset would fail when written (at report time)."""
    queries = [*QUERIES, {"_id": "q 3", "text": "spaced"}]
    with pytest.raises(InputError, match=r"queries\.jsonl:4: query id 'q 3' is empty or contains whitespace"):
        ingest.import_dataset(write_beir(tmp_path / "t", DOCS, queries, QRELS), "beir", "t")


def test_duplicate_query_id_names_the_id_and_both_lines(tmp_path: Path) -> None:
    queries = QUERIES + [{"_id": "q2", "text": "again"}]
    with pytest.raises(InputError, match=r"queries\.jsonl:4: duplicate query id 'q2' \(first seen on line 2\)"):
        ingest.import_dataset(write_beir(tmp_path / "t", DOCS, queries, QRELS), "beir", "t")


@pytest.mark.parametrize(
    "qrels, match",
    [
        ("query-id\tcorpus-id\tscore\nq1\td1\thigh\n", r"test\.tsv:2: relevance grade 'high' is not an integer"),
        ("q1\td1\t1.5\n", r"test\.tsv:1: relevance grade '1.5' is not an integer"),
        ("q1\td1\n", r"test\.tsv:1: expected 3 tab-separated fields"),
        ("q1\td1\t1\nq1\td1\t2\n", r"test\.tsv:2: query 'q1' and document 'd1' judged twice"),
        ("q9\td1\t1\nq1\tzz\t1\n", r"none of the 1 judged documents .*\(e\.g\. q1 -> zz\).* another collection"),
        ("query-id\tcorpus-id\tscore\n", r"no judged queries"),
    ],
)
def test_bad_qrels(tmp_path: Path, qrels: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        ingest.import_dataset(write_beir(tmp_path / "t", DOCS, QUERIES, qrels), "beir", "t")


def test_non_utf8_bytes_report_the_byte_offset(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "t", DOCS, QUERIES, QRELS)
    good = (folder / "corpus.jsonl").read_bytes()
    (folder / "corpus.jsonl").write_bytes(good + b'{"_id": "d9", "text": "caf\xe9"}\n')
    offset = len(good) + len(b'{"_id": "d9", "text": "caf')
    with pytest.raises(InputError, match=rf"corpus\.jsonl:4: invalid UTF-8 byte 0xe9 at byte offset {offset}"):
        ingest.import_dataset(folder, "beir", "t")


def test_unknown_split_lists_the_available_ones(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "t", DOCS, QUERIES, QRELS)
    with pytest.raises(UnknownNameError, match="available splits: test"):
        ingest.import_dataset(folder, "beir", "t", split="dev")


def test_invalid_and_reserved_names(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "t", DOCS, QUERIES, QRELS)
    for bad in ("../up", "a//b", "/abs", "techdocs", "beir/scifact", "beir", "a/b", "t/test", "a..b", ".hidden", ""):
        with pytest.raises(InputError):
            ingest.import_dataset(folder, "beir", bad)


# ----------------------------------------------------------------------------- other sources


def test_msmarco_native_files(tmp_path: Path) -> None:
    (tmp_path / "collection.tsv").write_text("0\tThe first passage.\n1\tSecond one\twith a tab.\n7\tSeventh.\n")
    (tmp_path / "queries.dev.small.tsv").write_text("100\twhat is first\n200\tseventh?\n300\tunjudged\n")
    (tmp_path / "qrels.dev.small.tsv").write_text("100\t0\t0\t1\n200\t0\t7\t1\n")
    dataset = imported(tmp_path, "msmarco", "mm", split="dev.small")
    assert list(dataset.corpus["doc_id"]) == ["0", "1", "7"]
    assert dataset.corpus.set_index("doc_id").loc["1", "text"] == "Second one\twith a tab."
    assert sorted(dataset.queries["query_id"]) == ["100", "200"] and len(dataset.qrels) == 2
    with pytest.raises(UnknownNameError, match="available splits: dev.small"):
        ingest.import_dataset(tmp_path, "msmarco", "mm")
    (tmp_path / "collection.tsv").write_text("0\tok\nno tab here\n")
    with pytest.raises(InputError, match=r"collection\.tsv:2: expected '<passage id><TAB><text>'"):
        ingest.import_dataset(tmp_path, "msmarco", "mm", split="dev.small")


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_column_mapped_tables(tmp_path: Path, fmt: str) -> None:
    corpus = pd.DataFrame(
        {
            "id": [1, 2, 3],
            "heading": ["A", "B", "C"],
            "body": ["x y", "y z", "z"],
            "doc_type": ["guide", "code", "forum"],
        }
    )
    queries = pd.DataFrame({"qid": ["a", "b"], "question": ["x?", "z?"], "category": ["c1", "c2"]})
    qrels = pd.DataFrame({"qid": ["a", "b", "b"], "docid": [1, 2, 3], "label": [2, 0, 1]})
    for name, frame in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        path = tmp_path / f"{name}.{fmt}"
        if fmt == "jsonl":
            frame.to_json(path, orient="records", lines=True)
        elif fmt == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path)
    mapping = {"corpus.title": "heading", "corpus.text": "body", "queries.text": "question"}
    dataset = imported(tmp_path, fmt, f"mapped-{fmt}", mapping=mapping)
    assert list(dataset.corpus["doc_id"]) == ["1", "2", "3"], "ids are strings"
    assert list(dataset.corpus.columns) == ["doc_id", "title", "text", "doc_type"]
    assert list(dataset.queries.columns) == ["query_id", "text", "category"]
    assert dataset.grades() == {0: 1, 1: 1, 2: 1}
    with pytest.raises(InputError, match=r"queries\.\w+:[12]: missing required field 'text'"):
        ingest.import_dataset(tmp_path, fmt, "unmapped")


def test_zbench_annotated_and_unannotated(tmp_path: Path) -> None:
    def line(qid: str, docs: list[tuple[str, float | None]]) -> str:
        return json.dumps(
            {
                "query": {"id": qid, "query": f"query {qid}"},
                "documents": [
                    {"id": d, "content": f"text of {d}", "metadata": {"page": 1}, **({} if s is None else {"score": s})}
                    for d, s in docs
                ],
            }
        )

    plain = tmp_path / "plain.jsonl"
    plain.write_text(line("q1", [("a", None), ("b", None)]) + "\n" + line("q2", [("b", None), ("c", None)]) + "\n")
    dataset = imported(plain, "zbench", "zb-plain")
    assert len(dataset.corpus) == 3 and dataset.qrels.empty
    assert pd.read_parquet(dataset.manifest["candidates"])["doc_id"].tolist() == ["a", "b", "b", "c"]

    human = tmp_path / "human.jsonl"
    human.write_text(line("q1", [("a", 1), ("b", 0)]) + "\n")
    assert imported(human, "zbench", "zb-human").grades() == {0: 1, 1: 1}

    zelo = tmp_path / "zelo.jsonl"
    zelo.write_text(line("q1", [("a", 2.0), ("b", 2.0 - 0.5), ("c", 2.0 - 1.2), ("d", 2.0 - 2.0), ("e", -3.0)]) + "\n")
    graded = imported(zelo, "zbench", "zb-zelo")
    # p = exp(s - best): 1.0, 0.61, 0.30, 0.135, 0.0067 -> 3, 3, 2, 1, 0
    assert dict(zip(graded.qrels["doc_id"], graded.qrels["relevance"])) == {"a": 3, "b": 3, "c": 2, "d": 1, "e": 0}
    assert "exp(score - best score)" in graded.manifest["source"]["grading"]

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        line("q1", [("a", None)])
        + "\n"
        + json.dumps({"query": {"id": "q2", "query": "x"}, "documents": [{"id": "a", "content": "other"}]})
        + "\n"
    )
    with pytest.raises(InputError, match=r"bad\.jsonl:2: document id 'a' appears with different content"):
        ingest.import_dataset(bad, "zbench", "zb-bad")


def test_trec_qrels_over_a_base_dataset(tmp_path: Path) -> None:
    ingest.import_dataset(write_beir(tmp_path / "base", DOCS, QUERIES, QRELS), "beir", "base")
    trec = tmp_path / "new.qrels"
    trec.write_text("q1 0 d2 3\nq2 0 3 1\nq7 0 d1 1\n")
    dataset = imported(trec, "trec-qrels", "rejudged", base="base")
    assert dataset.grades() == {1: 1, 3: 1}
    assert dataset.manifest["dropped_qrels"]["unknown_query"] == 1
    assert dataset.manifest["source"]["base"] == "base"
