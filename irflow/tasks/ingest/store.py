"""The dataset store: names, folders, locks, one-step publish, and reading stored datasets.

Layout: ``<cache>/datasets/<name>/{corpus.parquet,corpus.json,<split>/{queries,qrels}.parquet,
<split>/manifest.json}``. A name is one path segment (``[A-Za-z0-9][A-Za-z0-9._-]*``); only the
BEIR catalog's names (``beir/<name>``, ``beir/cqadupstack/<forum>``) have more, and the caller
checks those against the catalog. So no name can reach into, replace or shadow another's folder.

A dataset is written whole: built in a temporary folder beside its final place, then published by
one rename (:func:`irflow.tasks.core.atomic.replace_dir`). Two locks per name, in ``datasets/.locks/``:

* ``<name>.build`` — exclusive while one process builds the dataset, so concurrent ingestions of
  the same name run one after the other (the later ones then find it stored);
* ``<name>.read`` — shared while a reader reads the files, exclusive only for the swap, so a
  reader never sees a half-replaced dataset and never waits for a build.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pandas as pd

from irflow.tasks.core.atomic import file_lock, publish_dir, temp_dir
from irflow.tasks.core.config import cache_dir
from irflow.tasks.core.schema import Dataset, InputError, Manifest, UnknownNameError

T = TypeVar("T")
log = logging.getLogger(__name__)

SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_SEGMENT_RE = re.compile(rf"^{SEGMENT}$")
_CATALOG_RE = re.compile(rf"^beir(/{SEGMENT}){{1,2}}$")
RESERVED_SPLITS = frozenset({"corpus.parquet", "corpus.json"})


def root() -> Path:
    """``<cache>/datasets``."""
    return cache_dir() / "datasets"


def _segment_ok(part: str) -> bool:
    return bool(_SEGMENT_RE.match(part)) and ".." not in part


def check_import_name(name: str) -> str:
    """A name an import may use: one path segment, not ``beir``. Raises :class:`InputError` otherwise."""
    if not isinstance(name, str) or not _segment_ok(name) or name == "beir":
        raise InputError(
            f"invalid dataset name {name!r}: a name is one path segment of letters, digits, '.', '_' "
            "and '-' starting with a letter or digit, no '..', e.g. 'my-docs' ('beir/<name>' is kept for the BEIR "
            "catalog and 'beir' itself is reserved)"
        )
    return name


def check_split(split: str) -> str:
    """A split name is one path segment and not one of the dataset's own file names."""
    if not isinstance(split, str) or not _segment_ok(split) or split in RESERVED_SPLITS:
        raise InputError(
            f"invalid split name {split!r}: a split is one path segment of letters, digits, '.', '_' and '-' "
            "(no '..'), e.g. 'test'"
        )
    return split


def dataset_dir(name: str) -> Path:
    """The folder of dataset ``name`` (a single segment, or a catalog-shaped ``beir/...`` name)."""
    if not (_segment_ok(name) and name != "beir") and not (
        _CATALOG_RE.match(name) and all(_segment_ok(p) for p in name.split("/"))
    ):
        check_import_name(name)  # raises with the rule
    return root() / name


def _lock_path(name: str, kind: str) -> Path:
    return root() / ".locks" / f"{name.replace('/', '+')}.{kind}"  # '+' never occurs in a name


@contextlib.contextmanager
def reading(name: str) -> Iterator[None]:
    """Shared lock: the stored dataset does not change while held."""
    with file_lock(_lock_path(name, "read"), shared=True):
        yield


@contextlib.contextmanager
def building(name: str) -> Iterator[None]:
    """Exclusive lock: one builder of ``name`` at a time (readers are not blocked)."""
    with file_lock(_lock_path(name, "build")):
        yield


def publish(name: str, build: Callable[[Path], T]) -> T:
    """Build dataset ``name`` in a temporary folder with ``build(folder)``, then publish it whole.

    The caller holds :func:`building`. Any exception inside ``build`` leaves the stored dataset
    byte for byte as it was and no temporary folder behind; stale temporaries of killed builders
    in the same folder are removed first.
    """
    final = dataset_dir(name)
    _check_replaceable(final, name)
    with publish_dir(final, replace=True, lock=_lock_path(name, "read")) as folder:
        return build(folder)


def _check_replaceable(final: Path, name: str) -> None:
    """Refuse to replace a folder that is not exactly one dataset (an older irflow nested names)."""
    if not final.exists():
        return
    nested = sorted(p.parent.relative_to(root()).as_posix() for p in final.glob("*/corpus.json"))
    if nested or not (final / "corpus.json").is_file():
        held = (
            f"datasets stored under nested names by an older irflow ({', '.join(nested)})" if nested else "no dataset"
        )
        raise InputError(
            f"{final} holds {held}; refusing to replace it with dataset {name!r}: move that folder away first"
        )


def work_dir(name: str) -> contextlib.AbstractContextManager[Path]:
    """A scratch folder for ``name``'s ingestion (extracted archives), removed after; stale ones are cleaned."""
    return temp_dir(root() / ".work", name.replace("/", "+"))


# ----------------------------------------------------------------------------- reading


def has_split(name: str, split: str) -> bool:
    """True when dataset ``name`` is stored with split ``split``."""
    folder = dataset_dir(name)
    return (folder / "corpus.json").is_file() and (folder / check_split(split) / "manifest.json").is_file()


def stored_splits(name: str) -> list[str]:
    """The splits of ``name`` that are stored (empty when the dataset is not)."""
    folder = dataset_dir(name)
    if not (folder / "corpus.json").is_file():
        return []
    return sorted(p.parent.name for p in folder.glob("*/manifest.json"))


def stored_names(catalog: list[str]) -> list[str]:
    """Every stored imported dataset (single-segment folders), plus the stored catalog names."""
    base = root()
    if not base.is_dir():
        return []
    names = [
        p.name for p in base.iterdir() if _segment_ok(p.name) and p.name != "beir" and (p / "corpus.json").is_file()
    ]
    names += [n for n in catalog if (base / n / "corpus.json").is_file()]
    return sorted(names)


def _damaged(path: Path, err: BaseException) -> InputError:
    """A stored file that does not read back as irflow wrote it (edited, truncated, replaced)."""
    detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return InputError(
        f"the stored dataset file is damaged ({detail}); import the dataset again to replace it", path=str(path)
    )


def _json_file(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise _damaged(path, err) from None
    if not isinstance(value, dict):
        raise _damaged(path, ValueError(f"expected a JSON object, found {type(value).__name__}"))
    return value


def read_json(name: str, *parts: str) -> dict[str, Any]:
    path = dataset_dir(name).joinpath(*parts)
    return _json_file(path) if path.is_file() else {}


def read_table(path: Path) -> pd.DataFrame:
    """A stored Parquet table; a damaged one is an :class:`InputError` naming the file."""
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise _damaged(path, err) from None


def verify_split(name: str, split: str, manifest: Manifest) -> None:
    """Check that the files a stored split's manifest describes are there and hold the rows it counts.

    Reads only each Parquet file's footer, so ``datasets info`` stays instant on a large corpus but does
    not vouch for a dataset that cannot be loaded."""
    import pyarrow.parquet as pq

    folder = dataset_dir(name)
    counts = {
        folder / "corpus.parquet": manifest.get("documents"),
        folder / split / "queries.parquet": None,
        folder / split / "qrels.parquet": manifest.get("judgements"),
    }
    for path, expected in counts.items():
        try:
            rows = pq.read_metadata(path).num_rows
        except (OSError, ValueError) as err:
            raise _damaged(path, err) from None
        if expected is not None and rows != expected:
            raise _damaged(path, ValueError(f"{rows:,} rows where the manifest counts {expected:,}"))


def dropped_missing_documents(manifest: Manifest) -> bool:
    """True if the split was stored with judgements of documents absent from the corpus dropped."""
    return bool(manifest.get("dropped_qrels", {}).get("unknown_doc"))


def read_manifest(name: str, split: str) -> Manifest:
    path = dataset_dir(name) / check_split(split) / "manifest.json"
    if not path.is_file():
        raise UnknownNameError(
            f"dataset {name!r} has no stored split {split!r}; stored splits: {', '.join(stored_splits(name)) or 'none'}"
        )
    return cast(Manifest, _json_file(path))


def load_stored(name: str, split: str) -> Dataset:
    """Load a stored split as DataFrames (ids as strings); the caller holds :func:`reading`."""
    manifest = read_manifest(name, split)
    if dropped_missing_documents(manifest) and "drop_missing_documents" not in manifest.get("source", {}):
        log.warning(
            "dataset %r (split %s) was imported by an older irflow, which dropped %d judgements of documents not "
            "in the corpus (and with them any query judged only on such documents); trec_eval and BEIR keep them: "
            "import it again to evaluate as they do",
            name,
            split,
            manifest["dropped_qrels"]["unknown_doc"],
        )
    folder = dataset_dir(name)
    corpus = read_table(folder / "corpus.parquet")
    queries = read_table(folder / split / "queries.parquet")
    qrels = read_table(folder / split / "qrels.parquet")
    candidates_path = folder / split / "candidates.parquet"
    if candidates_path.is_file():
        manifest = {**manifest, "candidates": str(candidates_path)}
    return Dataset(name=name, split=split, corpus=corpus, queries=queries, qrels=qrels, manifest=manifest)
