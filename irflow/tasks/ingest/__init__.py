"""Ingest: turn any source into one canonical dataset, stored whole or not at all.

Names: ``techdocs`` (the embedded demo), ``beir/<name>`` (downloaded on first use),
``beir/cqadupstack/<forum>``, or the one-segment name given at import. Public functions:

* :func:`load_dataset` — the canonical :class:`~irflow.tasks.core.schema.Dataset` of a name and split,
  ingesting (and downloading) on first use; later calls read the stored Parquet only.
* :func:`import_dataset` — ingest a local source under a name, replacing the dataset of that name.
* :func:`list_datasets`, :func:`dataset_info`, :func:`check_name`, :func:`default_split`.

Every ingestion runs one way: a reader (``beir``, ``msmarco``, ``custom``) yields records →
``canonical.build_dataset`` checks them and writes every table of every split into a temporary
folder → ``store.publish`` renames it into the store. A failure anywhere leaves the stored dataset
of that name byte for byte as it was. Processes that ingest the same name at once take turns
(``store.building``); the later ones find the dataset stored and only read it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from irflow.tasks.core.config import package_data
from irflow.tasks.core.paths import regular_file
from irflow.tasks.core.schema import Dataset, InputError, Manifest, UnknownNameError
from irflow.tasks.ingest import beir, canonical, clicks, custom, msmarco, querylog, sheet, store
from irflow.tasks.ingest.judgements import JUDGEMENTS_FILE, judgements_dataset, read_judgements

EMBEDDED = {"techdocs": package_data("datasets", "techdocs")}
FORMATS = ("beir", "msmarco", "jsonl", "csv", "parquet", "zbench", "trec-qrels", "clicks", "sheet", "querylog")
_FILE_FORMATS = {"zbench", "trec-qrels", "clicks", "sheet", "querylog"}
_OVER_BASE = {"trec-qrels", "clicks", "sheet", "querylog"}  # formats over the corpus (and queries) of another dataset
_FOLDER_FORMATS = {"msmarco", "jsonl", "csv", "parquet"}

__all__ = [
    "FORMATS",
    "JUDGEMENTS_FILE",
    "check_name",
    "check_source",
    "dataset_info",
    "default_split",
    "import_dataset",
    "judgements_dataset",
    "list_datasets",
    "load_dataset",
    "read_judgements",
]


def _check_known_shape(name: str) -> None:
    """A ``beir/...`` name must be a catalog entry; any other name must be one valid segment."""
    if not isinstance(name, str):
        raise InputError(f"invalid dataset name {name!r}")
    if name.startswith("beir/"):
        beir.entry(name)  # UnknownNameError listing the catalog
    elif name not in EMBEDDED:
        store.check_import_name(name)


def default_split(name: str) -> str:
    """The split a name evaluates by default: the catalog's, else ``test`` if stored (or none is), else the first."""
    _check_known_shape(name)
    if name.startswith("beir/"):
        return beir.entry(name).default_split
    stored = store.stored_splits(name)
    if name in EMBEDDED or not stored or "test" in stored:
        return "test"
    return stored[0]


def load_dataset(name: str, split: str | None = None) -> Dataset:
    """The canonical dataset ``name`` (split default: ``test``; ``dev`` for MS MARCO).

    Embedded and catalog datasets are ingested on first use (all their splits at once); imported
    ones must have been imported. Reads hold the store's shared lock, so a concurrent replacement
    is seen whole or not at all.
    """
    split = store.check_split(split or default_split(name))
    if name in EMBEDDED or name.startswith("beir/"):
        splits = beir.available_splits(EMBEDDED[name]) if name in EMBEDDED else list(beir.entry(name).splits)
        if split not in splits:
            raise UnknownNameError(f"{name} has no split {split!r}; available: {', '.join(splits)}")
        return _ensure(name, split)
    with store.reading(name):
        if store.has_split(name, split):
            return store.load_stored(name, split)
    check_name(name)
    raise UnknownNameError(
        f"dataset {name!r} has no split {split!r}; stored splits: {', '.join(store.stored_splits(name))}"
    )


def check_name(name: str) -> None:
    """Raise :class:`UnknownNameError` listing the valid names unless ``name`` is a known dataset
    (:class:`InputError` when it cannot be a dataset name at all)."""
    if name in EMBEDDED or name in beir.catalog():
        return
    _check_known_shape(name)
    if not store.stored_splits(name):
        raise UnknownNameError(
            f"unknown dataset {name!r}; valid names: {', '.join(_known_names())} "
            "(or import one: irflow datasets import PATH --format F --name NAME)"
        )


def _known_names() -> list[str]:
    catalog = list(beir.catalog())
    return sorted(set(EMBEDDED) | set(catalog) | set(store.stored_names(catalog)))


def _ensure(name: str, split: str) -> Dataset:
    """Load an embedded or catalog dataset, ingesting it first when it is missing or out of date."""
    source = _embedded_source(name) if name in EMBEDDED else None

    def current() -> bool:
        stored = store.read_json(name, "corpus.json")
        if not stored or (source is not None and stored.get("source") != source):
            return False
        if not store.has_split(name, split):
            return False
        # stored by an older irflow that dropped judgements of documents absent from the corpus: rebuild
        return not store.dropped_missing_documents(store.read_manifest(name, split))

    with store.reading(name):
        if current():
            return store.load_stored(name, split)
    with store.building(name):  # one builder at a time; the others wait here, then find it stored
        with store.reading(name):
            if current():
                return store.load_stored(name, split)
        if source is not None:
            store.publish(name, _embedded_builder(name, source))
        else:
            store.publish(name, _beir_builder(name))
        with store.reading(name):
            return store.load_stored(name, split)


def _embedded_source(name: str) -> dict[str, Any]:
    """Provenance of an embedded dataset: a digest of its files, so a changed file re-ingests it."""
    root = EMBEDDED[name]
    signature = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in {".jsonl", ".tsv"}):
        signature.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return {"kind": "embedded", "location": f"datasets/{name}", "sha256": signature.hexdigest()}


def _embedded_builder(name: str, source: dict[str, Any]) -> Callable[[Path], None]:
    root = EMBEDDED[name]

    def build(folder: Path) -> None:
        splits = beir.available_splits(root)
        canonical.build_dataset(folder, name, beir.corpus_source(root), beir.read_splits(root, splits), source)

    return build


def _beir_builder(name: str) -> Callable[[Path], None]:
    item = beir.entry(name)

    def build(folder: Path) -> None:
        with store.work_dir(name) as work:
            root, source = beir.fetch_archive(item, work)
            canonical.build_dataset(
                folder,
                name,
                beir.corpus_source(root),
                beir.read_splits(root, list(item.splits)),
                source,
                ignore_identical_ids=item.ignore_identical_ids,
            )

    return build


def import_dataset(
    path: str | Path,
    fmt: str,
    name: str,
    *,
    split: str | None = None,
    mapping: dict[str, str] | None = None,
    base: str | None = None,
    grade_thresholds: tuple[float, ...] | None = None,
    drop_missing_documents: bool = False,
    min_impressions: int = clicks.MIN_IMPRESSIONS,
    sampling: querylog.Sampling | None = None,
    logged_by: str | None = None,
) -> Manifest:
    """Ingest a local source under ``name``, replacing a dataset of that name; returns the split's manifest.

    Judgements of documents absent from the corpus are kept (trec_eval and BEIR semantics: relevant,
    unretrievable) and reported in the manifest; ``drop_missing_documents`` drops them instead.

    The whole dataset is built and checked in a temporary folder and published by one rename: a
    failure (bad input, interruption) leaves any stored dataset of that name as it was. The corpus
    is not loaded here, so importing a large collection stays within a small, constant memory.

    Formats: ``beir`` (folder or zip; every split), ``msmarco`` (collection.tsv, queries.<split>.tsv,
    qrels.<split>.tsv), ``jsonl``/``csv``/``parquet`` (a folder with corpus, queries and qrels
    files; ``mapping`` renames source columns), ``zbench`` (QueryDocuments or
    AnnotatedQueryDocuments JSONL), ``trec-qrels`` (new judgements over the corpus and queries
    of dataset ``base``), ``clicks`` (a click log, graded by a position-based click model over
    the corpus of dataset ``base``; pairs shown fewer than ``min_impressions`` times stay unjudged),
    ``sheet`` (an ``irflow pool`` sheet with grades filled in, merged with the judgements of ``base``),
    ``querylog`` (a query log, normalised, de-duplicated and sampled by ``sampling`` into a query set over
    the corpus of ``base``, with ``base``'s judgements of the queries it shares).

    ``logged_by`` names the system whose rankings a click log records (kept in the manifest; the report
    names it as the only source of the judgements).
    """
    if name in EMBEDDED:
        raise InputError(f"dataset name {name!r} is reserved; choose another name")
    if isinstance(name, str) and name.startswith("beir/"):
        raise InputError(f"dataset name {name!r} is reserved for the BEIR catalog; choose a name without '/'")
    store.check_import_name(name)
    if fmt not in FORMATS:
        raise UnknownNameError(f"unknown import format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    if split is not None:
        store.check_split(split)
    path = check_source(path, fmt)
    base_dataset = None
    if fmt in _OVER_BASE:
        if not base:
            raise InputError(
                f"--format {fmt} needs --base NAME: the dataset whose corpus and queries the "
                + ("query set is sampled over" if fmt == "querylog" else "judgements refer to")
            )
        base_dataset = load_dataset(base)  # read before this name's lock: base may be this very name
    source: dict[str, Any] = {"kind": fmt, "location": str(path.resolve())}
    if drop_missing_documents:
        source["drop_missing_documents"] = True
    if logged_by is not None:
        if fmt != "clicks" or not logged_by.strip():
            raise InputError("--logged-by names the system that produced a click log's rankings (--format clicks)")
        source["logged_by"] = logged_by.strip()
    if fmt == "querylog":
        (sampling or querylog.Sampling()).check()  # a bad option fails before any work
    build = _import_builder(
        path, fmt, name, split, source, mapping or {}, grade_thresholds, base_dataset, min_impressions, sampling
    )
    with store.building(name):
        manifests = store.publish(name, build)
    wanted = split or (msmarco.DEFAULT_SPLIT if fmt == "msmarco" else "test")
    return manifests[wanted] if wanted in manifests else next(iter(manifests.values()))


def check_source(path: str | Path, fmt: str) -> Path:
    """``path`` when it can be a source of ``fmt`` (a file, or a folder for the formats that read one); else
    InputError naming it and what it is. Reads nothing."""
    path = Path(path)
    if not path.exists():
        raise InputError("no such file or folder", path=str(path))
    if fmt in _FILE_FORMATS and path.is_dir():
        raise InputError(f"is a folder; --format {fmt} reads one file", path=str(path))
    if fmt in _FILE_FORMATS:
        regular_file(path, f"a file (--format {fmt})")
    if fmt in _FOLDER_FORMATS and not path.is_dir():
        raise InputError(
            f"is a file; --format {fmt} reads a folder (see irflow datasets import --help)", path=str(path)
        )
    return path


def _import_builder(
    path: Path,
    fmt: str,
    name: str,
    split: str | None,
    source: dict[str, Any],
    mapping: dict[str, str],
    grade_thresholds: tuple[float, ...] | None,
    base: Dataset | None,
    min_impressions: int = clicks.MIN_IMPRESSIONS,
    sampling: querylog.Sampling | None = None,
) -> Callable[[Path], dict[str, Manifest]]:
    """The function that reads ``path`` and builds the dataset into a folder (see :func:`import_dataset`)."""

    def build(folder: Path) -> dict[str, Manifest]:
        if fmt == "msmarco":
            splits = [msmarco.read_split(path, split)]
            return canonical.build_dataset(folder, name, msmarco.corpus_source(path), splits, source)
        wanted = split or "test"
        if fmt == "beir":
            return _build_beir(folder, path, name, wanted, source, explicit=split is not None)
        if fmt in ("jsonl", "csv", "parquet"):
            files = custom.TableFiles.find(path, fmt)
            splits = [custom.read_split(files, wanted, mapping)]
            return canonical.build_dataset(folder, name, custom.corpus_source(files.corpus, mapping), splits, source)
        if fmt == "zbench":
            parsed = custom.read_zbench(path, grade_thresholds=grade_thresholds)
            graded = {**source, "grading": parsed.grading}
            return canonical.build_dataset(folder, name, parsed.corpus_source(), [parsed.split(wanted)], graded)
        assert base is not None
        if fmt == "sheet":
            corpus, split_source, provenance = sheet.sheet_over_base(path, base, wanted)
        elif fmt == "clicks":
            thresholds = grade_thresholds or clicks.THRESHOLDS
            over = clicks.clicks_over_base(path, base, wanted, min_impressions=min_impressions, thresholds=thresholds)
            corpus, split_source, provenance = over
        elif fmt == "querylog":
            over = querylog.querylog_over_base(path, base, wanted, sampling or querylog.Sampling())
            corpus, split_source, provenance = over
        else:
            corpus, split_source, provenance = custom.qrels_over_base(path, base, wanted)
        return canonical.build_dataset(folder, name, corpus, [split_source], {**source, **provenance})

    return build


def _build_beir(
    folder: Path, path: Path, name: str, split: str, source: dict[str, Any], *, explicit: bool
) -> dict[str, Manifest]:
    """A BEIR folder or zip: every split, the requested one first (so a missing one fails before any work)."""

    def from_root(root: Path) -> dict[str, Manifest]:
        available = beir.available_splits(root)
        if split not in available:
            raise UnknownNameError(
                f"no split {split!r} in {root}: available splits: {', '.join(available) or 'none'}"
                + ("" if explicit else " (choose one with --split)")
            )
        order = [split, *(s for s in available if s != split)]
        return canonical.build_dataset(folder, name, beir.corpus_source(root), beir.read_splits(root, order), source)

    if path.is_file():
        with store.work_dir(name) as work:
            beir.extract_into(path, work)
            return from_root(beir.beir_root(beir.unpacked_top(work)))
    return from_root(beir.beir_root(path))


def list_datasets() -> list[dict[str, Any]]:
    """Every known dataset: embedded, BEIR catalog and imported, with the splits already stored."""
    rows = []
    for name in EMBEDDED:
        rows.append({"name": name, "kind": "embedded", "stored": store.stored_splits(name)})
    catalog = beir.catalog()
    for name, item in catalog.items():
        rows.append({"name": name, "kind": "beir", "splits": list(item.splits), "stored": store.stored_splits(name)})
    known = {r["name"] for r in rows}
    for name in store.stored_names(list(catalog)):
        if name not in known:
            rows.append({"name": name, "kind": "imported", "stored": store.stored_splits(name)})
    return rows


def dataset_info(name: str, split: str | None = None) -> Manifest:
    """The manifest of a dataset split (ingesting it first if needed; a stored split is not loaded, but the
    files its manifest names are checked to be there with the rows it counts: :func:`store.verify_split`)."""
    split = store.check_split(split or default_split(name))
    if name not in EMBEDDED and not name.startswith("beir/"):
        check_name(name)
        with store.reading(name):
            manifest = store.read_manifest(name, split)
            store.verify_split(name, split, manifest)
            return manifest
    with store.reading(name):
        if store.has_split(name, split) and name not in EMBEDDED:
            manifest = store.read_manifest(name, split)
            store.verify_split(name, split, manifest)
            return manifest
    return Manifest(**load_dataset(name, split).manifest)
