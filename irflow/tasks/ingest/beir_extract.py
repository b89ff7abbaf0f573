"""Safe extraction of a zip archive (a downloaded BEIR zip, or one given to ``datasets import``).

Extraction refuses absolute paths, ``..``, links, encrypted or damaged members, and archives that
expand past ``IRFLOW_MAX_EXTRACT_BYTES`` (default 32 GiB) or more than ``IRFLOW_MAX_EXTRACT_RATIO``
(default 100) times their own size once past 64 MiB, counting the bytes actually written.
"""

from __future__ import annotations

import hashlib
import re
import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from irflow.tasks.core.limits import (
    MAX_EXTRACT_BYTES,
    MAX_EXTRACT_RATIO,
    RATIO_FLOOR_BYTES,
)
from irflow.tasks.core.schema import InputError

_CHUNK = 1 << 20


def extract_limits() -> tuple[int, float]:
    """``(max bytes, max ratio)`` for extraction, from ``IRFLOW_MAX_EXTRACT_BYTES`` / ``IRFLOW_MAX_EXTRACT_RATIO``."""
    return MAX_EXTRACT_BYTES.bytes(), MAX_EXTRACT_RATIO.value()


def _check_members(zip_path: Path, members: list[zipfile.ZipInfo]) -> None:
    for info in members:
        name = info.filename.replace("\\", "/")
        parts = PurePosixPath(name).parts
        if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
            raise InputError(f"refusing zip member with an absolute path: {info.filename!r}", path=str(zip_path))
        if ".." in parts:
            raise InputError(f"refusing zip member that escapes the folder: {info.filename!r}", path=str(zip_path))
        if stat.S_ISLNK(info.external_attr >> 16):
            raise InputError(f"refusing zip member that is a link: {info.filename!r}", path=str(zip_path))
        if info.flag_bits & 0x1:
            raise InputError(
                f"zip member {info.filename!r} is encrypted; expected an unencrypted archive", path=str(zip_path)
            )


def extract_into(zip_path: Path, dest: Path) -> dict[str, str]:
    """Extract ``zip_path`` into the empty folder ``dest``; returns the sha256 of each file by relative path.

    Members are checked (no absolute paths, ``..``, links or encryption) before anything is written, and the bytes
    actually written are counted against :func:`extract_limits` as they are written (header sizes
    are not trusted). A damaged member raises :class:`InputError` naming it.
    """
    max_bytes, max_ratio = extract_limits()
    try:
        archive = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as err:
        raise InputError(f"not a valid zip archive ({err})", path=str(zip_path)) from None
    size = max(zip_path.stat().st_size, 1)
    digests: dict[str, str] = {}
    written = 0
    with archive:
        members = archive.infolist()
        _check_members(zip_path, members)
        root = dest.resolve()
        for info in members:
            target = (dest / info.filename.replace("\\", "/")).resolve()
            if root not in target.parents and target != root:
                raise InputError(f"refusing zip member outside the folder: {info.filename!r}", path=str(zip_path))
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            try:
                with archive.open(info) as src, open(target, "wb") as out:
                    while chunk := src.read(_CHUNK):
                        written += len(chunk)
                        if written > max_bytes or (written > RATIO_FLOOR_BYTES and written > max_ratio * size):
                            raise InputError(
                                f"refusing archive that expands past {written:,} bytes at member {info.filename!r} "
                                f"(limits: {max_bytes:,} bytes, IRFLOW_MAX_EXTRACT_BYTES; {max_ratio:g} times the "
                                f"{size:,}-byte archive past {RATIO_FLOOR_BYTES >> 20} MiB, IRFLOW_MAX_EXTRACT_RATIO)",
                                path=str(zip_path),
                            )
                        digest.update(chunk)
                        out.write(chunk)
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, ValueError) as err:
                raise InputError(
                    f"damaged zip member {info.filename!r} ({err}); expected a readable archive", path=str(zip_path)
                ) from None
            digests[target.relative_to(root).as_posix()] = digest.hexdigest()
    return digests


def unpacked_top(folder: Path) -> Path:
    """The folder an archive unpacked to: ``folder`` itself or its only subfolder (hidden and ``__`` ones aside)."""
    entries = [p for p in folder.iterdir() if not p.name.startswith((".", "__"))]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return folder


__all__ = ["extract_into", "extract_limits", "unpacked_top"]
