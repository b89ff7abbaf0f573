"""The dataset store cannot lose data: atomic publish, names that cannot nest, concurrent ingestion,
stale temporaries, content pins a mirror cannot forge, zip bombs, and named errors for bad input."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from support.toy import DOCS, QRELS, QUERIES, ingest_rounds, snapshot, write_beir

from irflow.cli.main import main
from irflow.tasks import ingest
from irflow.tasks.core import atomic
from irflow.tasks.core.schema import DownloadError, InputError
from irflow.tasks.ingest import beir, beir_extract, store


def cache() -> Path:
    return Path(os.environ["IRFLOW_CACHE_DIR"])


def temporaries() -> list[Path]:
    """Every writer's temporary left anywhere in the cache (none may survive a finished command)."""
    return [p for p in cache().rglob("*") if atomic.is_temp_name(p.name)]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run ``irflow ARGV`` in this process; returns the exit code and what it wrote to stderr."""
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().err


def dead_pid() -> int:
    """The pid of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# ----------------------------------------------------------------------------- bad input leaves the old dataset


def _zip_folder(folder: Path, archive: Path, *, encrypt: str | None = None) -> Path:
    """Zip ``folder`` (as its own top folder); ``encrypt`` marks that member encrypted (flag bit 0 in
    its local and central headers, as an encrypting zip tool writes it)."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            zf.writestr(f"{folder.name}/{path.relative_to(folder).as_posix()}", path.read_bytes())
    if encrypt:
        data = bytearray(archive.read_bytes())
        name = encrypt.encode()
        for signature, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
            at = data.find(signature)
            while at >= 0 and data[at + name_at : at + name_at + len(name)] != name:
                at = data.find(signature, at + 1)
            data[at + flag_at] |= 0x1
        archive.write_bytes(bytes(data))
    return archive


def _damage_member(archive: Path, member: str) -> Path:
    """Flip a byte inside the compressed data of ``member``."""
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(member)
    data = bytearray(archive.read_bytes())
    name_len, extra_len = (
        int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little"),
        int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little"),
    )
    start = info.header_offset + 30 + name_len + extra_len
    data[start + info.compress_size // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    return archive


def _tables(folder: Path, fmt: str, corpus: str | None = None, qrels: str | None = None) -> Path:
    """A jsonl/csv folder of corpus, queries and qrels tables (``corpus``/``qrels`` verbatim when given)."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        (folder / "corpus.csv").write_text(corpus or "doc_id,title,text\nd1,A,first doc\nd2,B,second doc\n")
        (folder / "queries.csv").write_text("query_id,text\nq1,first?\nq2,second?\n")
        (folder / "qrels.csv").write_text(qrels or "query_id,doc_id,relevance\nq1,d1,1\nq2,d2,2\n")
    else:
        docs = [{"doc_id": "d1", "text": "first doc"}, {"doc_id": "d2", "text": "second doc"}]
        (folder / "corpus.jsonl").write_text(corpus or "".join(json.dumps(d) + "\n" for d in docs))
        (folder / "queries.jsonl").write_text('{"query_id": "q1", "text": "first?"}\n')
        (folder / "qrels.jsonl").write_text(qrels or '{"query_id": "q1", "doc_id": "d1", "relevance": 1}\n')
    return folder


def _beir_qrels(grade: str) -> Callable[[Path], list[str]]:
    return lambda tmp: [str(write_beir(tmp / "bad", DOCS, QUERIES, f"q1\td1\t{grade}\n")), "--format", "beir"]


SURROGATE_DOC = '{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": "bad \\ud800 text"}\n'
SURROGATE_QUERY = '{"_id": "q1", "text": "alpha?"}\n{"_id": "q\\udfff", "text": "x"}\n'


def _empty_qrels(tmp: Path) -> list[str]:
    return [str(write_beir(tmp / "bad", DOCS, QUERIES, "query-id\tcorpus-id\tscore\n")), "--format", "beir"]


def _zbench_folder(tmp: Path) -> list[str]:
    (tmp / "dir.jsonl").mkdir()
    return [str(tmp / "dir.jsonl"), "--format", "zbench"]


def _qrels_folder(tmp: Path) -> list[str]:
    (tmp / "qrels.d").mkdir()
    return [str(tmp / "qrels.d"), "--format", "trec-qrels", "--dataset", "keep"]


def _corrupt_parquet(tmp: Path) -> list[str]:
    folder = tmp / "pq"
    folder.mkdir()
    pd.DataFrame({"query_id": ["q1"], "text": ["first?"]}).to_parquet(folder / "queries.parquet")
    pd.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]}).to_parquet(folder / "qrels.parquet")
    (folder / "corpus.parquet").write_bytes(b"PAR1" + os.urandom(200) + b"PAR1")
    return [str(folder), "--format", "parquet"]


def _damaged_zip(tmp: Path) -> list[str]:
    archive = _zip_folder(write_beir(tmp / "toy", DOCS * 30, QUERIES, QRELS), tmp / "toy.zip")
    return [str(_damage_member(archive, "toy/corpus.jsonl")), "--format", "beir"]


def _encrypted_zip(tmp: Path) -> list[str]:
    folder = write_beir(tmp / "toy", DOCS, QUERIES, QRELS)
    return [str(_zip_folder(folder, tmp / "toy.zip", encrypt="toy/queries.jsonl")), "--format", "beir"]


BAD_INPUTS: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "empty qrels": (_empty_qrels, r"test\.tsv: no judged queries in split 'test'"),
    "grade 10^30": (
        _beir_qrels("1" + "0" * 30),
        r"test\.tsv:1: relevance grade 100000000000\.\.\. \(31 digits\) is out of range; expected an integer from 0",
    ),
    "grade 2^40": (
        _beir_qrels(str(2**40)),
        r"test\.tsv:1: relevance grade 1099511627776 is out of range; expected an integer from 0 .* to 1000",
    ),
    "grade -1": (
        _beir_qrels("-1"),
        r"test\.tsv:1: relevance grade -1 is out of range.*negative grades as not relevant: use 0",
    ),
    "grade 1e3": (_beir_qrels("1e3"), r"test\.tsv:1: relevance grade '1e3' is not an integer"),
    "JSON true grade": (
        lambda tmp: [
            str(_tables(tmp / "t", "jsonl", qrels='{"query_id": "q1", "doc_id": "d1", "relevance": true}\n')),
            "--format",
            "jsonl",
        ],
        r"qrels\.jsonl:1: relevance grade True is not an integer",
    ),
    "JSON 10^30 grade": (
        lambda tmp: [
            str(
                _tables(
                    tmp / "t", "jsonl", qrels='{"query_id": "q1", "doc_id": "d1", "relevance": 1' + "0" * 30 + "}\n"
                )
            ),
            "--format",
            "jsonl",
        ],
        r"qrels\.jsonl:1: relevance grade 100000000000\.\.\. \(31 digits\) is out of range",
    ),
    "lone surrogate in a document": (
        lambda tmp: [str(write_beir(tmp / "bad", SURROGATE_DOC, QUERIES, QRELS)), "--format", "beir"],
        r"corpus\.jsonl:2: field 'text' holds a lone surrogate U\+D800 at character 4",
    ),
    "lone surrogate in a query id": (
        lambda tmp: [str(write_beir(tmp / "bad", DOCS, SURROGATE_QUERY, QRELS)), "--format", "beir"],
        r"queries\.jsonl:2: field '_id' holds a lone surrogate U\+DFFF",
    ),
    "folder given to zbench": (_zbench_folder, r"dir\.jsonl: is a folder; --format zbench reads one file"),
    "folder given to trec-qrels": (_qrels_folder, r"qrels\.d: is a folder; --format trec-qrels reads one file"),
    "corrupt parquet": (_corrupt_parquet, r"corpus\.parquet: not a readable Parquet file"),
    "damaged zip member": (_damaged_zip, r"toy\.zip: damaged zip member 'toy/corpus\.jsonl'"),
    "encrypted zip member": (_encrypted_zip, r"toy\.zip: zip member 'toy/queries\.jsonl' is encrypted"),
    "short CSV row": (
        lambda tmp: [str(_tables(tmp / "c", "csv", corpus="doc_id,title,text\nd1,A,first\nd2,B\n")), "--format", "csv"],
        r"corpus\.csv:3: 2 fields, expected 3 as in the header \(doc_id, title, text\)",
    ),
    "extra CSV field": (
        lambda tmp: [
            str(_tables(tmp / "c", "csv", corpus="doc_id,title,text\nd1,A,first\nd2,B,second,extra\n")),
            "--format",
            "csv",
        ],
        r"corpus\.csv:3: 4 fields, expected 3",
    ),
    "malformed --map": (
        lambda tmp: [str(_tables(tmp / "t", "jsonl")), "--format", "jsonl", "--map", "corpus.body"],
        r"--map expects TABLE\.FIELD=COLUMN",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_named_exits_2_and_leaves_the_stored_dataset_intact(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, pattern = BAD_INPUTS[case]
    code, err = cli(
        capsys,
        "datasets",
        "import",
        str(write_beir(tmp_path / "good", DOCS, QUERIES, QRELS)),
        "--format",
        "beir",
        "--name",
        "keep",
    )
    assert code == 0, err
    before = snapshot(store.dataset_dir("keep"))
    code, err = cli(capsys, "datasets", "import", *make(tmp_path), "--name", "keep")
    assert code == 2, err
    assert err.startswith("irflow: error: ") and "Traceback" not in err
    assert re.search(pattern, err), err
    assert snapshot(store.dataset_dir("keep")) == before, "the stored dataset must be byte for byte as it was"
    assert not temporaries()
    assert ingest.load_dataset("keep").grades() == {0: 1, 1: 1, 2: 1}


def test_failure_at_any_point_of_a_build_leaves_the_old_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest.import_dataset(write_beir(tmp_path / "good", DOCS, QUERIES, QRELS), "beir", "keep")
    before = snapshot(store.dataset_dir("keep"))
    other = write_beir(tmp_path / "other", DOCS[:2], QUERIES, "q1\td1\t1\n")
    from irflow.tasks.ingest import canonical

    real = canonical.write_split

    def fail_late(*args, **kwargs):  # every table of the new version is written; then the last step fails
        real(*args, **kwargs)
        raise OSError("disk full")

    monkeypatch.setattr(canonical, "write_split", fail_late)
    with pytest.raises(OSError, match="disk full"):
        ingest.import_dataset(other, "beir", "keep")
    assert snapshot(store.dataset_dir("keep")) == before and not temporaries()
    monkeypatch.setattr(canonical, "write_split", real)
    assert ingest.import_dataset(other, "beir", "keep")["documents"] == 2, "a good import still replaces it"
    assert not temporaries()


KILLED_IMPORT = """
import sys, time
from irflow.tasks.ingest import canonical, import_dataset
real = canonical.write_split
def stall(*args, **kwargs):
    manifest = real(*args, **kwargs)
    print("written", flush=True)
    time.sleep(600)
canonical.write_split = stall
import_dataset(sys.argv[1], "beir", "keep")
"""


def test_an_import_killed_mid_build_loses_nothing_and_its_leftovers_are_cleaned(tmp_path: Path) -> None:
    ingest.import_dataset(write_beir(tmp_path / "good", DOCS, QUERIES, QRELS), "beir", "keep")
    before = snapshot(store.dataset_dir("keep"))
    other = write_beir(tmp_path / "other", DOCS[:2], QUERIES, "q1\td1\t1\n")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_IMPORT, str(other)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
        leftovers = temporaries()
        assert leftovers, "the new version is being built beside the old one"
    finally:
        proc.kill()  # SIGKILL: no clean-up code runs
        proc.wait()
    assert snapshot(store.dataset_dir("keep")) == before
    assert ingest.load_dataset("keep").grades() == {0: 1, 1: 1, 2: 1}
    ingest.import_dataset(other, "beir", "next")  # the next ingestion in the store removes the dead writer's folder
    assert not temporaries() and not any(p.exists() for p in leftovers)


# ----------------------------------------------------------------------------- names


def _toy_catalog(monkeypatch: pytest.MonkeyPatch, serve_dir, tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "src" / "toy", DOCS, QUERIES, QRELS)
    served = tmp_path / "served"
    served.mkdir()
    _zip_folder(folder, served / "toy.zip")
    base, _ = serve_dir(served)
    monkeypatch.setenv("IRFLOW_BEIR_BASE_URL", base)
    entry = beir.BeirEntry("beir/toy", "toy", None, None, ("test",), "test", False)
    monkeypatch.setattr(beir, "catalog", lambda: {"beir/toy": entry})


def test_names_cannot_nest_into_or_shadow_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, serve_dir
) -> None:
    _toy_catalog(monkeypatch, serve_dir, tmp_path)
    good = str(write_beir(tmp_path / "good", DOCS, QUERIES, QRELS))
    assert cli(capsys, "datasets", "import", good, "--format", "beir", "--name", "t")[0] == 0
    assert cli(capsys, "datasets", "info", "beir/toy", "--json")[0] == 0
    stored = {name: snapshot(store.dataset_dir(name)) for name in ("t", "beir/toy")}
    for name in ("t/test", "beir", "a/b", "beir/toy", "beir/other", "../t", "t/..", "a..b", ".t", "techdocs"):
        code, err = cli(capsys, "datasets", "import", good, "--format", "beir", "--name", name)
        assert code == 2, (name, err)
        assert "invalid dataset name" in err or "reserved" in err, (name, err)
    for split in ("../x", "corpus.json", "a/b"):
        code, err = cli(capsys, "datasets", "import", good, "--format", "beir", "--name", "u", "--split", split)
        assert code == 2 and "invalid split name" in err, (split, err)
    code, err = cli(capsys, "datasets", "info", "t/test")
    assert code == 2 and "invalid dataset name" in err
    assert {name: snapshot(store.dataset_dir(name)) for name in stored} == stored
    assert not store.dataset_dir("u").exists() and not temporaries()


def test_a_folder_of_nested_datasets_from_an_older_irflow_is_not_replaced(tmp_path: Path) -> None:
    good = write_beir(tmp_path / "good", DOCS, QUERIES, QRELS)
    ingest.import_dataset(good, "beir", "b")
    (store.root() / "a").mkdir()
    shutil.move(store.dataset_dir("b"), store.root() / "a" / "b")  # how an older irflow stored 'a/b'
    before = snapshot(store.root() / "a")
    with pytest.raises(InputError, match=r"nested names by an older irflow \(a/b\)"):
        ingest.import_dataset(good, "beir", "a")
    assert snapshot(store.root() / "a") == before


# ----------------------------------------------------------------------------- concurrency


def test_four_processes_ingesting_at_once_all_succeed_twenty_times(tmp_path: Path) -> None:
    rounds, workers = 20, 4
    dirs = [str(tmp_path / f"round-{i}") for i in range(rounds)]
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=ingest_rounds, args=(dirs, barrier, results)) for _ in range(workers)]
    start = time.monotonic()
    for proc in procs:
        proc.start()
    try:
        outcomes = [results.get(timeout=300) for _ in range(rounds * workers)]
    finally:
        for proc in procs:
            proc.join(timeout=60)
    assert all(proc.exitcode == 0 for proc in procs)
    errors = [detail for status, detail in outcomes if status != "ok"]
    assert not errors, f"{len(errors)} of {len(outcomes)} ingestions failed: {errors[:3]}"
    assert len({detail for _, detail in outcomes}) == 1, "every process sees the same dataset"
    for d in dirs:
        assert not [p for p in Path(d).rglob("*") if atomic.is_temp_name(p.name)]
    print(f"{rounds} rounds x {workers} processes in {time.monotonic() - start:.1f} s")


def test_readers_never_see_a_half_replaced_dataset(tmp_path: Path) -> None:
    versions = [
        write_beir(tmp_path / "v1", DOCS, QUERIES, QRELS),
        write_beir(tmp_path / "v2", DOCS[:2], QUERIES, "q1\td1\t1\n"),
    ]
    ingest.import_dataset(versions[0], "beir", "keep")
    done, seen, errors = threading.Event(), set(), []

    def read() -> None:
        while not done.is_set():
            try:
                dataset = ingest.load_dataset("keep")
                assert len(dataset.corpus) == dataset.manifest["documents"]
                assert len(dataset.qrels) == dataset.manifest["judgements"]
                seen.add(len(dataset.corpus))
            except Exception as err:  # every failure is the finding
                errors.append(repr(err))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in readers:
        thread.start()
    try:
        for i in range(10):  # ten replacements while two readers load in a loop
            ingest.import_dataset(versions[i % 2], "beir", "keep")
    finally:
        done.set()
        for thread in readers:
            thread.join(timeout=60)
    assert not errors, errors[:3]
    assert seen == {2, 3}, "the readers saw both versions"


def test_four_cli_processes_at_once(tmp_path: Path) -> None:
    env = {**os.environ, "IRFLOW_CACHE_DIR": str(tmp_path / "fresh")}
    cmd = [sys.executable, "-m", "irflow.cli", "datasets", "info", "techdocs", "--json"]
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)
    ]
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, [err for _, err in outs]
    assert len({json.loads(out)["fingerprint"] for out, _ in outs}) == 1


# ----------------------------------------------------------------------------- stale temporaries


def test_stale_temporaries_are_cleaned_and_live_ones_kept(tmp_path: Path, serve_dir) -> None:
    datasets = store.root()
    datasets.mkdir(parents=True)
    host, gone = atomic._host(), dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = datasets / f".techdocs.{host}.{gone}.0badc0de.tmp"
        (stale / "out").mkdir(parents=True)
        (stale / "out" / "corpus.parquet").write_bytes(b"x" * 1_000_000)
        running = datasets / f".techdocs.{host}.{live.pid}.00c0ffee.tmp"
        running.mkdir()
        far_old = datasets / ".other.elsewhere.123.0000abcd.tmp"
        far_old.mkdir()
        os.utime(far_old, (time.time() - 7 * 3600, time.time() - 7 * 3600))
        far_new = datasets / ".other.elsewhere.124.0000abce.tmp"
        far_new.mkdir()
        # A writer killed between its two renames (no rename-exchange): the old version was set aside.
        ingest.import_dataset(write_beir(tmp_path / "k", DOCS, QUERIES, QRELS), "beir", "kept")
        kept = snapshot(store.dataset_dir("kept"))
        os.rename(store.dataset_dir("kept"), datasets / f".kept.{host}.{gone}.12345678.old")
        downloads = cache() / "downloads" / "beir"
        downloads.mkdir(parents=True)
        part = downloads / f".toy.zip.{host}.{gone}.abcdef01.part"
        part.write_bytes(b"half a download")

        ingest.load_dataset("techdocs")
        assert not stale.exists() and not far_old.exists()
        assert running.exists() and far_new.exists(), "a live writer's (or a recent foreign) temporary is kept"
        assert snapshot(store.dataset_dir("kept")) == kept, "the set-aside version is restored"

        served = tmp_path / "served"
        served.mkdir()
        (served / "toy.zip").write_bytes(b"zip")
        base, _ = serve_dir(served)
        beir.download(f"{base}/toy.zip", downloads / "toy.zip")
        assert not part.exists()
    finally:
        live.kill()
        live.wait()


def test_replace_dir_without_rename_exchange(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, text in ((a, "A"), (b, "B")):
        folder.mkdir()
        (folder / "f").write_text(text)
    if atomic._exchange(a, b):  # where the kernel and filesystem can swap, it is one step
        assert (a / "f").read_text() == "B" and (b / "f").read_text() == "A"
    monkeypatch.setattr(atomic, "_exchange", lambda x, y: False)
    new = tmp_path / "new"
    new.mkdir()
    (new / "f").write_text("new")
    atomic.replace_dir(new, b)
    assert (b / "f").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


# ----------------------------------------------------------------------------- content pins


def _repack(src: Path, dest: Path, edit: Callable[[str, bytes], bytes] = lambda n, d: d, **kw) -> Path:
    """Write ``src``'s members into a new zip (reversed order, stored not deflated), editing each with ``edit``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", kw.get("compression", zipfile.ZIP_STORED)) as zout:
        for info in reversed(zin.infolist()):
            if not info.is_dir():
                zout.writestr(info.filename, edit(info.filename, zin.read(info)))
    return dest


@pytest.mark.shared
def test_tampered_members_fail_whatever_the_mirror_says(
    beir_dir: Path, serve_dir, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def cut_qrels(name: str, data: bytes) -> bytes:
        return b"\r\n".join(data.split(b"\r\n")[:2]) + b"\r\n" if name == "scifact/qrels/test.tsv" else data

    served = tmp_path / "mirror"
    served.mkdir()
    _repack(beir_dir / "scifact.zip", served / "scifact.zip", cut_qrels)
    forged = beir.file_checksums(served / "scifact.zip")["sha256"]
    (served / "SHA256SUMS").write_text(f"{forged}  scifact.zip\n")
    base, requests = serve_dir(served)
    monkeypatch.setenv("IRFLOW_BEIR_BASE_URL", base)
    with pytest.raises(
        DownloadError, match=r"scifact\.zip: qrels/test\.tsv does not match the content pinned in irflow's catalog"
    ):
        ingest.load_dataset("beir/scifact")
    assert "/SHA256SUMS" in requests and "/scifact.zip" in requests
    code, err = cli(capsys, "datasets", "download", "beir/scifact")
    assert code == 2 and "does not match the content pinned" in err
    assert not store.dataset_dir("beir/scifact").exists() and not temporaries()
    assert not (cache() / "downloads" / "beir" / "scifact.zip").exists(), "a refused archive is not kept"


@pytest.mark.shared
def test_a_repackaged_archive_with_identical_members_passes(
    beir_dir: Path, serve_dir, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    served = tmp_path / "mirror"
    served.mkdir()
    _repack(beir_dir / "scifact.zip", served / "scifact.zip")  # no SHA256SUMS, md5 not BEIR's: the pins decide
    base, _ = serve_dir(served)
    monkeypatch.setenv("IRFLOW_BEIR_BASE_URL", base)
    dataset = ingest.load_dataset("beir/scifact")
    assert (len(dataset.corpus), len(dataset.queries), len(dataset.qrels)) == (5183, 300, 339)
    assert dataset.manifest["source"]["official_archive"] is False
    assert dataset.manifest["source"]["verified"].startswith("content pinned in irflow's catalog")


def test_every_pinned_catalog_entry_pins_everything_it_reads() -> None:
    pinned = [e for e in beir.catalog().values() if e.members]
    assert {e.name for e in pinned} == {"beir/scifact", "beir/nfcorpus"}
    for e in pinned:
        assert set(e.members) == {"corpus.jsonl", "queries.jsonl", *(f"qrels/{s}.tsv" for s in e.splits)}


# ----------------------------------------------------------------------------- zip bombs


def _bomb(path: Path, size: int = 200 << 20) -> Path:
    """A zip of a valid toy dataset plus ``size`` zero bytes (about 200 KB for 200 MiB)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("toy/corpus.jsonl", "".join(json.dumps(d) + "\n" for d in DOCS))
        zf.writestr("toy/queries.jsonl", "".join(json.dumps(q) + "\n" for q in QUERIES))
        zf.writestr("toy/qrels/test.tsv", QRELS)
        with zf.open("toy/zeros.bin", "w") as out:
            chunk = bytes(1 << 20)
            for _ in range(size >> 20):
                out.write(chunk)
    return path


@pytest.mark.parametrize("limit", ["50M", None])
def test_zip_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str | None) -> None:
    archive = _bomb(tmp_path / "bomb.zip")
    assert archive.stat().st_size < 400_000
    if limit:
        monkeypatch.setenv("IRFLOW_MAX_EXTRACT_BYTES", limit)
    pattern = r"52,428,800 bytes, IRFLOW_MAX_EXTRACT_BYTES" if limit else r"100 times the .*IRFLOW_MAX_EXTRACT_RATIO"
    with pytest.raises(InputError, match=rf"bomb\.zip: refusing archive that expands past .*{pattern}"):
        ingest.import_dataset(archive, "beir", "bomb")
    assert not store.dataset_dir("bomb").exists() and not temporaries()
    assert not list((store.root() / ".work").iterdir())


def test_extraction_limits_are_read_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRFLOW_MAX_EXTRACT_BYTES", "1.5G")
    monkeypatch.setenv("IRFLOW_MAX_EXTRACT_RATIO", "1000")
    assert beir.extract_limits() == (int(1.5 * (1 << 30)), 1000.0)
    monkeypatch.setenv("IRFLOW_MAX_EXTRACT_BYTES", "lots")
    with pytest.raises(InputError, match="IRFLOW_MAX_EXTRACT_BYTES='lots'"):
        beir.extract_limits()
    monkeypatch.delenv("IRFLOW_MAX_EXTRACT_BYTES")
    monkeypatch.setenv("IRFLOW_MAX_EXTRACT_RATIO", "1")  # a plain zip of text expands 2-10x
    archive = _zip_folder(write_beir(tmp_path / "toy", DOCS, QUERIES, QRELS), tmp_path / "toy.zip")
    assert ingest.import_dataset(archive, "beir", "small")["documents"] == 3, "the ratio applies past 64 MiB only"


@pytest.mark.parametrize(
    "damage, match",
    [
        ("corpus.parquet", r"corpus\.parquet: the stored dataset file is damaged"),
        ("test/qrels.parquet", r"qrels\.parquet: the stored dataset file is damaged"),
        ("test/manifest.json", r"manifest\.json: the stored dataset file is damaged"),
    ],
)
def test_a_damaged_store_file_is_named_by_info_and_by_loading(tmp_path, capsys, damage, match):
    """`datasets info` checks the files its manifest names (footers and row counts), not only the manifest."""
    ingest.import_dataset(write_beir(tmp_path / "src", DOCS, QUERIES, QRELS), "beir", "toy")
    assert ingest.dataset_info("toy", "test")["documents"] == len(DOCS)
    (store.dataset_dir("toy") / damage).write_bytes(b"this is no parquet and no json {")
    for call in (lambda: ingest.dataset_info("toy", "test"), lambda: ingest.load_dataset("toy", "test")):
        with pytest.raises(InputError, match=match + r" .*; import the dataset again"):
            call()
    code, err = cli(capsys, "datasets", "info", "toy")
    assert code == 2 and re.search(match, err)


def test_info_notices_a_stored_table_replaced_by_another(tmp_path):
    ingest.import_dataset(write_beir(tmp_path / "src", DOCS, QUERIES, QRELS), "beir", "toy")
    corpus = store.dataset_dir("toy") / "corpus.parquet"
    pd.read_parquet(corpus).iloc[:1].to_parquet(corpus)
    with pytest.raises(InputError, match=rf"corpus\.parquet: .*1 rows where the manifest counts {len(DOCS)}"):
        ingest.dataset_info("toy", "test")


def test_a_full_disk_while_importing_a_zip_is_named_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """`datasets import scifact.zip` on a full disk: an error naming where it wrote (no OSError traceback),
    no temporary left, and the dataset stored before kept."""
    folder = write_beir(tmp_path / "toy", DOCS, QUERIES, QRELS)
    ingest.import_dataset(folder, "beir", "toy")
    before = ingest.load_dataset("toy", "test").fingerprint
    archive = Path(shutil.make_archive(str(tmp_path / "toy"), "zip", tmp_path, "toy"))
    real_open = open

    def full_open(file, mode="r", *args, **kwargs):  # the extraction's writes find the disk full
        if "w" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(file, mode, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(beir_extract, "open", full_open, raising=False)
        code, err = cli(capsys, "datasets", "import", str(archive), "--format", "beir", "--name", "toy")
    assert code == 2
    assert re.search(r"irflow: error: could not write .*toy: No space left on device", err)
    assert temporaries() == []
    assert ingest.load_dataset("toy", "test").fingerprint == before
