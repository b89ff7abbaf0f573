"""Ingest: turn any source into one canonical dataset (see ``tasks.ingest.canonical``).

Names: ``techdocs`` (the embedded demo), ``beir/<name>`` (downloaded on first use),
``beir/cqadupstack/<forum>``, or the name given at import. Public functions:

* :func:`load_dataset` — the canonical :class:`~tasks.schema.Dataset` of a name and split,
  ingesting (and downloading) on first use; later calls read the stored Parquet only.
* :func:`import_dataset` — ingest a local source under a new name.
* :func:`list_datasets`, :func:`dataset_info`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from irflow.tasks.config import package_data
from irflow.tasks.ingest import beir, canonical, custom, msmarco
from irflow.tasks.schema import Dataset, InputError, UnknownNameError

EMBEDDED = {"techdocs": package_data("datasets", "techdocs")}
FORMATS = ("beir", "msmarco", "jsonl", "csv", "parquet", "zbench", "trec-qrels")

__all__ = ["FORMATS", "check_name", "dataset_info", "default_split", "import_dataset", "list_datasets", "load_dataset"]


def default_split(name: str) -> str:
    if name.startswith("beir/"):
        return beir.entry(name).default_split
    stored = canonical.stored_splits(name)
    if name in EMBEDDED or not stored or "test" in stored:
        return "test"
    return stored[0]


def load_dataset(name: str, split: str | None = None) -> Dataset:
    """The canonical dataset ``name`` (split default: ``test``; ``dev`` for MS MARCO)."""
    split = split or default_split(name)
    if name in EMBEDDED:
        return _load_embedded(name, split)
    if canonical.has_split(name, split):
        return canonical.load_stored(name, split)
    if name.startswith("beir/"):
        return _load_beir(name, split)
    check_name(name)
    raise UnknownNameError(
        f"dataset {name!r} has no split {split!r}; stored splits: {', '.join(canonical.stored_splits(name))}"
    )


def check_name(name: str) -> None:
    """Raise :class:`UnknownNameError` listing the valid names unless ``name`` is a known dataset."""
    if name not in EMBEDDED and name not in beir.catalog() and not canonical.stored_splits(name):
        raise UnknownNameError(
            f"unknown dataset {name!r}; valid names: {', '.join(_known_names())} "
            "(or import one: irflow datasets import PATH --format F --name NAME)"
        )


def _known_names() -> list[str]:
    return sorted(set(EMBEDDED) | set(beir.catalog()) | set(canonical.stored_names()))


def _load_beir(name: str, split: str) -> Dataset:
    item = beir.entry(name)
    if split not in item.splits:
        raise UnknownNameError(f"{name} has no split {split!r}; available: {', '.join(item.splits)}")
    folder, source = beir.fetch_archive(item.archive, item.md5)
    top = folder / item.archive if (folder / item.archive).is_dir() else folder
    root = beir.beir_root(top / item.subset if item.subset else top)
    if not (canonical.store_dir(name) / "corpus.json").is_file():
        canonical.write_corpus(name, beir.corpus_writer_for(root), source)
    canonical.write_split(name, beir.read_split(root, split), source, ignore_identical_ids=item.ignore_identical_ids)
    return canonical.load_stored(name, split)


def _load_embedded(name: str, split: str) -> Dataset:
    """Embedded datasets are re-ingested whenever their source files change."""
    root = EMBEDDED[name]
    signature = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in {".jsonl", ".tsv"}):
        signature.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    source = {"kind": "embedded", "location": f"datasets/{name}", "sha256": signature.hexdigest()}
    corpus_json = canonical.store_dir(name) / "corpus.json"
    current = corpus_json.is_file() and json.loads(corpus_json.read_text()).get("source") == source
    if current and canonical.has_split(name, split):
        return canonical.load_stored(name, split)
    if not current:
        canonical.write_corpus(name, beir.corpus_writer_for(root), source)
    canonical.write_split(name, beir.read_split(root, split), source)
    return canonical.load_stored(name, split)


def import_dataset(
    path: str | Path,
    fmt: str,
    name: str,
    *,
    split: str | None = None,
    mapping: dict[str, str] | None = None,
    base: str | None = None,
    grade_thresholds: tuple[float, ...] | None = None,
) -> dict[str, Any]:
    """Ingest a local source under ``name`` (replacing a dataset of that name); returns the manifest.

    The stored dataset is then available to :func:`load_dataset` (the corpus is not loaded here,
    so importing a large collection stays within a small, constant memory).

    Formats: ``beir`` (folder or zip), ``msmarco`` (collection.tsv, queries.<split>.tsv,
    qrels.<split>.tsv), ``jsonl``/``csv``/``parquet`` (a folder with corpus, queries and qrels
    files; ``mapping`` renames source columns), ``zbench`` (QueryDocuments or
    AnnotatedQueryDocuments JSONL), ``trec-qrels`` (new judgements over the corpus and queries
    of dataset ``base``).
    """
    canonical.validate_name(name)
    if name in EMBEDDED or name.startswith("beir/"):
        raise InputError(f"dataset name {name!r} is reserved; choose another name")
    path = Path(path)
    if not path.exists():
        raise InputError("no such file or folder", path=str(path))
    source: dict[str, Any] = {"kind": fmt, "location": str(path.resolve())}
    if fmt == "msmarco":
        canonical.write_corpus(name, msmarco.corpus_writer_for(path), source)
        return canonical.write_split(name, msmarco.read_split(path, split), source)
    split = split or "test"
    if fmt == "beir":
        return _import_beir(path, name, split, source)
    if fmt in ("jsonl", "csv", "parquet"):
        files = custom.TableFiles.find(path, fmt)
        canonical.write_corpus(name, custom.corpus_writer_for(files.corpus, mapping or {}), source)
        return canonical.write_split(name, custom.read_split(files, split, mapping or {}), source)
    if fmt == "zbench":
        parsed = custom.read_zbench(path, grade_thresholds=grade_thresholds)
        canonical.write_corpus(name, parsed.write_corpus, {**source, "grading": parsed.grading})
        return canonical.write_split(
            name,
            parsed.split(split),
            {**source, "grading": parsed.grading},
            candidates=parsed.candidates if parsed.unjudged else None,
        )
    if fmt == "trec-qrels":
        if not base:
            raise InputError(
                "--format trec-qrels needs --base NAME: the dataset whose corpus and queries the judgements refer to"
            )
        return custom.import_qrels(path, name, load_dataset(base), split, source)
    raise UnknownNameError(f"unknown import format {fmt!r}; valid formats: {', '.join(FORMATS)}")


def _import_beir(path: Path, name: str, split: str, source: dict[str, Any]) -> dict[str, Any]:
    if path.is_file():
        folder = canonical.store_dir(name).parent / f".{Path(name).name}.unzipped"
        beir.safe_extract(path, folder)
        try:
            return _import_beir_folder(beir.beir_root(folder), name, split, source)
        finally:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    return _import_beir_folder(beir.beir_root(path), name, split, source)


def _import_beir_folder(root: Path, name: str, split: str, source: dict[str, Any]) -> dict[str, Any]:
    canonical.write_corpus(name, beir.corpus_writer_for(root), source)
    manifest = canonical.write_split(name, beir.read_split(root, split), source)
    for other in beir.available_splits(root):
        if other != split:
            canonical.write_split(name, beir.read_split(root, other), source)
    return manifest


def list_datasets() -> list[dict[str, Any]]:
    """Every known dataset: embedded, BEIR catalog and imported, with the splits already stored."""
    rows = []
    for name in EMBEDDED:
        rows.append({"name": name, "kind": "embedded", "stored": canonical.stored_splits(name)})
    for name, item in beir.catalog().items():
        rows.append(
            {"name": name, "kind": "beir", "splits": list(item.splits), "stored": canonical.stored_splits(name)}
        )
    known = {r["name"] for r in rows}
    for name in canonical.stored_names():
        if name not in known:
            rows.append({"name": name, "kind": "imported", "stored": canonical.stored_splits(name)})
    return rows


def dataset_info(name: str, split: str | None = None) -> dict[str, Any]:
    """The manifest of a dataset split (ingesting it first if needed; a stored split is not loaded)."""
    split = split or default_split(name)
    if canonical.has_split(name, split) and name not in EMBEDDED:
        return canonical.read_manifest(name, split)
    return dict(load_dataset(name, split).manifest)
