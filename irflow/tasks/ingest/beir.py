"""BEIR: the catalog, verified downloads, safe extraction, and the BEIR folder layout reader.

A BEIR dataset is a folder (or a zip of one) holding ``corpus.jsonl``, ``queries.jsonl`` and
``qrels/<split>.tsv``. Downloads stream from ``IRFLOW_BEIR_BASE_URL`` (default: the official
location) into a temporary file, are verified, and only then renamed into the cache; a partial
or mismatching download is never kept. Checksums, in order of precedence:

1. ``<base>/SHA256SUMS`` when the server publishes one (a mirror vouching for its own files);
2. the md5 BEIR publishes for the official archive (``datasets/beir.json``);
3. otherwise the sha256 seen on first download is recorded and later downloads must match it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from irflow.tasks.atomic import write_json
from irflow.tasks.config import beir_base_url, cache_dir, package_data
from irflow.tasks.ingest.canonical import CorpusWriter, SplitSource
from irflow.tasks.ingest.readers import iter_jsonl, read_qrels, require_id, require_text
from irflow.tasks.schema import DownloadError, InputError, UnknownNameError

log = logging.getLogger(__name__)

CHUNK = 1 << 20


# ----------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class BeirEntry:
    """One downloadable BEIR dataset (a CQADupStack subforum is an entry of its own)."""

    name: str  # e.g. "beir/scifact", "beir/cqadupstack/android"
    archive: str  # zip file name without ".zip"
    subset: str | None
    md5: str | None
    splits: tuple[str, ...]
    default_split: str
    ignore_identical_ids: bool


def catalog() -> dict[str, BeirEntry]:
    """Every BEIR dataset irflow can download, by irflow name."""
    raw = json.loads(package_data("datasets", "beir.json").read_text())["datasets"]
    entries: dict[str, BeirEntry] = {}
    for archive, spec in raw.items():
        common = dict(
            archive=archive,
            md5=spec.get("md5"),
            splits=tuple(spec["splits"]),
            default_split=spec.get("default_split", "test"),
            ignore_identical_ids=bool(spec.get("ignore_identical_ids", False)),
        )
        for subset in spec.get("subsets") or [None]:
            name = f"beir/{archive}" + (f"/{subset}" if subset else "")
            entries[name] = BeirEntry(name=name, subset=subset, **common)
    return entries


def entry(name: str) -> BeirEntry:
    entries = catalog()
    if name not in entries:
        raise UnknownNameError(f"unknown BEIR dataset {name!r}; valid names: {', '.join(sorted(entries))}")
    return entries[name]


# ----------------------------------------------------------------------------- download


def _open(url: str, timeout: float = 60.0) -> Any:
    request = urllib.request.Request(url, headers={"User-Agent": "irflow"})
    return urllib.request.urlopen(request, timeout=timeout)


def published_sha256(base: str, filename: str) -> str | None:
    """The sha256 the server lists for ``filename`` in ``<base>/SHA256SUMS``, if it publishes one."""
    try:
        with _open(f"{base}/SHA256SUMS", timeout=30) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == filename and re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            return parts[0]
    return None


def download(
    url: str, dest: Path, *, md5: str | None = None, sha256: str | None = None, retries: int = 3, backoff: float = 1.0
) -> dict[str, str]:
    """Stream ``url`` to ``dest`` with a progress bar and retries; verify, then rename into place.

    Returns the md5 and sha256 of what was written. A short read, a network failure after the
    last retry, or a checksum mismatch raises :class:`DownloadError` and leaves nothing at ``dest``.
    """
    from tqdm import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    last_error: Exception | None = None
    for attempt in range(1, retries + 1):
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        tmp = Path(tmp_name)
        try:
            h_md5, h_sha = hashlib.md5(), hashlib.sha256()
            with os.fdopen(fd, "wb") as out, _open(url) as resp:
                total = resp.headers.get("Content-Length")
                total = int(total) if total and total.isdigit() else None
                received = 0
                with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, disable=None) as bar:
                    while chunk := resp.read(CHUNK):
                        out.write(chunk)
                        h_md5.update(chunk)
                        h_sha.update(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
                if total is not None and received != total:
                    raise DownloadError(f"incomplete download of {url}: got {received} of {total} bytes")
                out.flush()
                os.fsync(out.fileno())
            got = {"md5": h_md5.hexdigest(), "sha256": h_sha.hexdigest()}
            for algo, expected in (("md5", md5), ("sha256", sha256)):
                if expected and got[algo] != expected.lower():
                    raise DownloadError(
                        f"checksum mismatch for {url}: {algo} {got[algo]}, expected {expected}; nothing was cached"
                    )
            os.replace(tmp, dest)
            return got
        except DownloadError as err:
            if "checksum mismatch" in str(err):
                raise
            last_error = err
        except urllib.error.HTTPError as err:
            if err.code < 500 and err.code != 429:
                raise DownloadError(f"cannot download {url}: HTTP {err.code} {err.reason}") from None
            last_error = err
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            last_error = err
        finally:
            tmp.unlink(missing_ok=True)
        if attempt < retries:
            log.warning("download of %s failed (%s); retry %d of %d", url, last_error, attempt, retries - 1)
            time.sleep(backoff * 2 ** (attempt - 1))
    raise DownloadError(f"cannot download {url} after {retries} attempts: {last_error}")


# ----------------------------------------------------------------------------- extraction


def safe_extract(zip_path: Path, dest: Path) -> None:
    """Extract ``zip_path`` into a new folder ``dest``, refusing absolute paths, ``..`` and links.

    Every member is checked before anything is written; the folder appears by one rename.
    """
    try:
        archive = zipfile.ZipFile(zip_path)
    except zipfile.BadZipFile:
        raise InputError("not a valid zip archive", path=str(zip_path)) from None
    with archive:
        members = archive.infolist()
        for info in members:
            name = info.filename.replace("\\", "/")
            parts = PurePosixPath(name).parts
            if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
                raise InputError(f"refusing zip member with an absolute path: {info.filename!r}", path=str(zip_path))
            if ".." in parts:
                raise InputError(f"refusing zip member that escapes the folder: {info.filename!r}", path=str(zip_path))
            if stat.S_ISLNK(info.external_attr >> 16):
                raise InputError(f"refusing zip member that is a link: {info.filename!r}", path=str(zip_path))
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
        try:
            root = tmp.resolve()
            for info in members:
                target = (tmp / info.filename.replace("\\", "/")).resolve()
                if root not in target.parents and target != root:
                    raise InputError(f"refusing zip member outside the folder: {info.filename!r}", path=str(zip_path))
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, CHUNK)
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def fetch_archive(archive: str, md5: str | None) -> tuple[Path, dict[str, Any]]:
    """Make sure ``<archive>.zip`` is downloaded, verified and extracted; return the folder and provenance.

    With the folder already extracted, no network request is made.
    """
    base = beir_base_url()
    folder = cache_dir() / "raw" / "beir" / archive
    record_path = folder.parent / f"{archive}.source.json"
    if folder.is_dir() and record_path.is_file():
        return folder, json.loads(record_path.read_text())
    url = f"{base}/{archive}.zip"
    zip_path = cache_dir() / "downloads" / "beir" / f"{archive}.zip"
    trusted = _trusted_checksums()
    sha256 = published_sha256(base, f"{archive}.zip")
    if sha256:
        verified, expect = f"sha256 listed in {base}/SHA256SUMS", {"sha256": sha256}
    elif md5:
        verified, expect = "md5 published by BEIR", {"md5": md5}
    elif archive in trusted:
        verified, expect = "sha256 recorded on first download", {"sha256": trusted[archive]}
    else:
        verified, expect = "none published: sha256 recorded on first download", {}
    got = download(url, zip_path, **expect)
    if not expect:
        log.warning("no published checksum for %s; recorded sha256 %s on first download", url, got["sha256"])
        write_json(_trusted_path(), {**trusted, archive: got["sha256"]})
    safe_extract(zip_path, folder)
    record = {"kind": "beir", "location": url, "md5": got["md5"], "sha256": got["sha256"], "verified": verified}
    write_json(record_path, record)
    return folder, record


def _trusted_path() -> Path:
    return cache_dir() / "downloads" / "beir" / "checksums.json"


def _trusted_checksums() -> dict[str, str]:
    path = _trusted_path()
    return json.loads(path.read_text()) if path.is_file() else {}


# ----------------------------------------------------------------------------- folder layout


def beir_root(path: Path) -> Path:
    """The folder holding ``corpus.jsonl``: ``path`` itself or its single subfolder (as zips unpack)."""
    if (path / "corpus.jsonl").is_file():
        return path
    subdirs = [p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))]
    if len(subdirs) == 1 and (subdirs[0] / "corpus.jsonl").is_file():
        return subdirs[0]
    raise InputError("not a BEIR folder: expected corpus.jsonl, queries.jsonl and qrels/<split>.tsv", path=str(path))


def available_splits(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "qrels").glob("*.tsv"))


def corpus_writer_for(root: Path) -> Callable[[CorpusWriter], None]:
    """A function that streams ``root/corpus.jsonl`` into a :class:`CorpusWriter`."""
    path = root / "corpus.jsonl"

    def write(writer: CorpusWriter) -> None:
        if not path.is_file():
            raise InputError("missing corpus file; expected corpus.jsonl", path=str(path))
        for line, obj in iter_jsonl(path):
            metadata = obj.get("metadata")
            if metadata is not None and not isinstance(metadata, dict):
                raise InputError("field 'metadata' must be a JSON object", path=str(path), line=line)
            writer.add(
                require_id(obj, "_id", path, line),
                require_text(obj, "title", path, line, required=False),
                require_text(obj, "text", path, line),
                metadata,
            )

    return write


def read_split(root: Path, split: str) -> SplitSource:
    """Queries and qrels of one split of a BEIR folder."""
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise UnknownNameError(
            f"no split {split!r} in {root}: available splits: {', '.join(available_splits(root)) or 'none'}"
        )
    queries_path = root / "queries.jsonl"
    if not queries_path.is_file():
        raise InputError("missing queries file; expected queries.jsonl", path=str(queries_path))
    queries = []
    for line, obj in iter_jsonl(queries_path):
        metadata = obj.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise InputError("field 'metadata' must be a JSON object", path=str(queries_path), line=line)
        queries.append(
            (
                require_id(obj, "_id", queries_path, line),
                require_text(obj, "text", queries_path, line),
                metadata or None,
                line,
            )
        )
    return SplitSource(
        split=split,
        queries=queries,
        qrels=read_qrels(qrels_path),
        queries_source=str(queries_path),
        qrels_source=str(qrels_path),
    )
