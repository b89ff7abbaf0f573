"""BEIR: the catalog and verified downloads (safe extraction and the folder layout reader re-exported).

A BEIR dataset is a folder (or a zip of one) holding ``corpus.jsonl``, ``queries.jsonl`` and
``qrels/<split>.tsv``. Downloads stream from ``IRFLOW_BEIR_BASE_URL`` (default: the official
location) into an owned ``.part`` file and are renamed into ``<cache>/downloads/beir/`` only once
checked. Who vouches for what (``datasets/beir.json``):

1. **Content pins** (``members``: the sha256 of each file irflow reads): the archive is accepted
   whatever its container bytes (a repackaged zip with identical members passes) and refused
   when any pinned member differs. A mirror cannot forge these: they ship inside irflow.
2. Otherwise the **md5 BEIR publishes** for the official archive must match, and the archive's
   sha256 is **recorded on first download** (trust on first use, said on stderr and in the
   manifest); later downloads must match the record.
3. An entry with neither (none in the catalog today) is trusted on first download alone.
A mirror's ``<base>/SHA256SUMS`` only detects a corrupted transfer: a mismatch fails the
download, a match vouches for nothing.

Safe extraction lives in ``beir_extract`` and the folder layout reader in ``beir_layout``; both are
re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from irflow.tasks.core.atomic import clean_stale, file_lock, temp_name, write_json
from irflow.tasks.core.config import beir_base_url, cache_dir, package_data
from irflow.tasks.core.limits import (
    DOWNLOAD_SECONDS,
    MAX_DOWNLOAD_BYTES,
    RESPONSE_SECONDS,
    Limit,
    LimitError,
)
from irflow.tasks.core.progress import Progress
from irflow.tasks.core.schema import DownloadError, InputError, UnknownNameError
from irflow.tasks.ingest.beir_extract import extract_into, extract_limits, unpacked_top
from irflow.tasks.ingest.beir_layout import available_splits, beir_root, corpus_source, read_split, read_splits

log = logging.getLogger(__name__)

CHUNK = 1 << 20


class _Incomplete(DownloadError):
    """A transfer that ended early: worth another attempt."""


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
    members: dict[str, str] = field(default_factory=dict)  # content pins: path in the unpacked folder -> sha256


def catalog() -> dict[str, BeirEntry]:
    """Every BEIR dataset irflow can download, by irflow name."""
    raw = json.loads(package_data("datasets", "beir.json").read_text())["datasets"]
    entries: dict[str, BeirEntry] = {}
    for archive, spec in raw.items():
        for subset in spec.get("subsets") or [None]:
            name = f"beir/{archive}" + (f"/{subset}" if subset else "")
            entries[name] = BeirEntry(
                name=name,
                archive=archive,
                subset=subset,
                md5=spec.get("md5"),
                splits=tuple(spec["splits"]),
                default_split=spec.get("default_split", "test"),
                ignore_identical_ids=bool(spec.get("ignore_identical_ids", False)),
                members=dict(spec.get("members") or {}),
            )
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


def _pieces(resp: Any, url: str, most: int, size: Limit | None, seconds: Limit) -> Iterator[bytes]:
    """``resp``'s body as it arrives (``read1``: a trickle is not waited on to fill a buffer), within ``most``
    bytes and ``seconds`` from now: past either, a LimitError naming ``url``, the limit and its variable (past
    ``most`` with ``size`` None: the body is cut there, silently)."""
    deadline = time.monotonic() + seconds.value()
    received = 0
    while piece := resp.read1(CHUNK):
        received += len(piece)
        if received > most:
            if size is None:
                yield piece[: len(piece) - (received - most)]
                return
            raise LimitError(size.passed(f"{url}: the download passed its size"))
        if time.monotonic() > deadline:
            raise LimitError(seconds.passed(f"{url}: still downloading ({received:,} bytes so far)"))
        yield piece


def published_sha256(base: str, filename: str) -> str | None:
    """The sha256 the server lists for ``filename`` in ``<base>/SHA256SUMS``, if it publishes one."""
    url = f"{base}/SHA256SUMS"
    try:
        with _open(url, timeout=30) as resp:  # a listing of checksums: a few KB, read within 1 MiB
            text = b"".join(_pieces(resp, url, 1 << 20, None, RESPONSE_SECONDS)).decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == filename and re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            return parts[0]
    return None


def file_checksums(path: Path) -> dict[str, str]:
    """md5 and sha256 of a file, streamed."""
    h_md5, h_sha = hashlib.md5(), hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h_md5.update(chunk)
            h_sha.update(chunk)
    return {"md5": h_md5.hexdigest(), "sha256": h_sha.hexdigest()}


def download(
    url: str,
    dest: Path,
    *,
    md5: str | None = None,
    sha256: str | None = None,
    check: Callable[[dict[str, str]], None] | None = None,
    retries: int = 3,
    backoff: float = 1.0,
) -> dict[str, str]:
    """Stream ``url`` to ``dest`` with a progress bar and retries; verify, then rename into place.

    ``md5``/``sha256`` are expected checksums; ``check(got)`` may raise :class:`DownloadError` for
    any other rule. Returns the md5 and sha256 of what was written. A short read, a network failure
    after the last retry, or a failed check raises :class:`DownloadError` and leaves nothing at
    ``dest`` (the ``.part`` file is removed; those of killed downloads are cleaned here too). A download
    past ``IRFLOW_MAX_DOWNLOAD_BYTES`` or ``IRFLOW_DOWNLOAD_SECONDS`` (a server that trickles forever) fails
    at once with a :class:`~irflow.tasks.core.limits.LimitError` naming the URL, the limit and its variable.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(dest.parent)
    last_error: Exception | None = None
    for attempt in range(1, retries + 1):
        tmp = dest.parent / temp_name(dest.name, "part")
        try:
            h_md5, h_sha = hashlib.md5(), hashlib.sha256()
            with open(tmp, "wb") as out, _open(url) as resp:
                total = resp.headers.get("Content-Length")
                total = int(total) if total and total.isdigit() else None
                most = MAX_DOWNLOAD_BYTES.bytes()
                if total is not None and total > most:
                    raise LimitError(MAX_DOWNLOAD_BYTES.passed(f"{url}: announces {total:,} bytes"))
                received = 0
                with Progress(f"download {dest.name}", total, unit="MB", scale=1e6) as bar:
                    for chunk in _pieces(resp, url, most, MAX_DOWNLOAD_BYTES, DOWNLOAD_SECONDS):
                        out.write(chunk)
                        h_md5.update(chunk)
                        h_sha.update(chunk)
                        received += len(chunk)
                        bar.advance(len(chunk))
                if total is not None and received != total:
                    raise _Incomplete(f"incomplete download of {url}: got {received} of {total} bytes")
                out.flush()
                os.fsync(out.fileno())
            got = {"md5": h_md5.hexdigest(), "sha256": h_sha.hexdigest()}
            for algo, expected in (("md5", md5), ("sha256", sha256)):
                if expected and got[algo] != expected.lower():
                    raise DownloadError(
                        f"checksum mismatch for {url}: {algo} {got[algo]}, expected {expected}; nothing was cached"
                    )
            if check is not None:
                check(got)
            os.replace(tmp, dest)
            return got
        except _Incomplete as err:
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


def check_pins(item: BeirEntry, digests: dict[str, str], url: str) -> None:
    """Every pinned member is present with its pinned sha256, else :class:`DownloadError` (whatever SHA256SUMS says)."""
    for rel, expected in sorted(item.members.items()):
        got = digests.get(rel)
        if got is None:
            raise DownloadError(
                f"{url}: {rel} is missing from the archive; irflow's catalog pins it (sha256 {expected}); "
                "nothing was stored"
            )
        if got != expected:
            raise DownloadError(
                f"{url}: {rel} does not match the content pinned in irflow's catalog: sha256 {got}, expected "
                f"{expected}. The archive was altered (a mirror's SHA256SUMS cannot vouch for it); nothing was stored"
            )


def fetch_archive(item: BeirEntry, work: Path) -> tuple[Path, dict[str, Any]]:
    """Download (or reuse) ``item``'s verified zip, extract it into ``work`` and check its content pins.

    Returns the BEIR folder of ``item`` and the provenance record for the manifest. A checksum or
    pin failure raises :class:`DownloadError`; the zip is then not kept in the download cache.
    """
    base = beir_base_url()
    url = f"{base}/{item.archive}.zip"
    zip_path = cache_dir() / "downloads" / "beir" / f"{item.archive}.zip"

    mirror_sha256 = None

    def check(got: dict[str, str]) -> None:
        if mirror_sha256 and got["sha256"] != mirror_sha256:
            raise DownloadError(
                f"checksum mismatch for {url}: sha256 {got['sha256']}, expected {mirror_sha256} (listed in the "
                "mirror's SHA256SUMS: a corrupted transfer?); nothing was cached"
            )
        if item.members:
            return  # the content pins decide, at extraction
        if item.md5 and got["md5"] != item.md5:
            raise DownloadError(
                f"checksum mismatch for {url}: md5 {got['md5']}, expected {item.md5} (published by BEIR); "
                "nothing was cached"
            )
        recorded = _trusted_checksums().get(item.archive)
        if recorded and got["sha256"] != recorded:
            raise DownloadError(
                f"checksum mismatch for {url}: sha256 {got['sha256']}, expected {recorded} (recorded on first "
                f"download in {_trusted_path()}); nothing was cached"
            )

    got = None
    if zip_path.is_file():
        got = file_checksums(zip_path)
        try:
            check(got)
        except DownloadError:
            log.warning("cached %s fails its checksum; downloading it again", zip_path)
            zip_path.unlink(missing_ok=True)
            got = None
    if got is None:
        mirror_sha256 = published_sha256(base, f"{item.archive}.zip")
        got = download(url, zip_path, check=check)
    try:
        digests = extract_into(zip_path, work)
        top = unpacked_top(work)
        prefix = "" if top == work else top.relative_to(work).as_posix() + "/"
        if item.members:
            check_pins(item, {k[len(prefix) :]: v for k, v in digests.items() if k.startswith(prefix)}, url)
    except (DownloadError, InputError) as err:
        zip_path.unlink(missing_ok=True)
        if isinstance(err, DownloadError):
            raise
        raise DownloadError(f"{url}: the downloaded archive is unusable: {err}; nothing was stored") from None
    if item.members:
        verified = f"content pinned in irflow's catalog: sha256 of {', '.join(sorted(item.members))}"
    elif item.md5:
        verified = "md5 published by BEIR"
    else:
        verified = "none published"
    if not item.members:
        verified += _trust_on_first_download(item.archive, got["sha256"], url)
    record = {
        "kind": "beir",
        "location": url,
        "md5": got["md5"],
        "sha256": got["sha256"],
        "official_archive": bool(item.md5) and got["md5"] == item.md5,
        "verified": verified,
    }
    return beir_root(top / item.subset if item.subset else top), record


def _trust_on_first_download(archive: str, sha256: str, url: str) -> str:
    """Record ``sha256`` for ``archive`` unless recorded; returns the words for the manifest's ``verified``."""
    with file_lock(_trusted_path().with_suffix(".lock")):
        trusted = _trusted_checksums()
        if trusted.get(archive) == sha256:
            return "; sha256 matches the one recorded on first download"
        log.warning(
            "%s: irflow's catalog pins no content for it; trusting it on first download and recording sha256 %s in %s",
            url,
            sha256,
            _trusted_path(),
        )
        write_json(_trusted_path(), {**trusted, archive: sha256})
    return "; sha256 recorded on first download (no content pin in the catalog)"


def _trusted_path() -> Path:
    return cache_dir() / "downloads" / "beir" / "checksums.json"


def _trusted_checksums() -> dict[str, str]:
    path = _trusted_path()
    return json.loads(path.read_text()) if path.is_file() else {}


__all__ = [
    "BeirEntry",
    "available_splits",
    "beir_root",
    "catalog",
    "check_pins",
    "corpus_source",
    "download",
    "entry",
    "extract_into",
    "extract_limits",
    "fetch_archive",
    "file_checksums",
    "published_sha256",
    "read_split",
    "read_splits",
    "unpacked_top",
]
