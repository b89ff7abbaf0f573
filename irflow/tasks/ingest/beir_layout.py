"""The BEIR folder layout: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``, read as the canonical
builder's sources (the corpus streamed, each split read when the builder asks for it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from irflow.tasks.core.progress import Progress
from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.ingest.canonical import CorpusSource, SplitSource
from irflow.tasks.ingest.readers import iter_jsonl, read_qrels, require_id, require_text
from irflow.tasks.ingest.records import DocRecord


def beir_root(path: Path) -> Path:
    """The folder holding ``corpus.jsonl``: ``path`` itself or its single subfolder (as zips unpack)."""
    if (path / "corpus.jsonl").is_file():
        return path
    subdirs = [p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))]
    if len(subdirs) == 1 and (subdirs[0] / "corpus.jsonl").is_file():
        return subdirs[0]
    raise InputError("not a BEIR folder: expected corpus.jsonl, queries.jsonl and qrels/<split>.tsv", path=str(path))


def available_splits(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "qrels").glob("*.tsv") if not p.name.startswith("."))


def corpus_source(root: Path) -> CorpusSource:
    """The documents of ``root/corpus.jsonl``, streamed."""
    path = root / "corpus.jsonl"
    if not path.is_file():
        raise InputError("missing corpus file; expected corpus.jsonl", path=str(path))

    def records() -> Iterator[DocRecord]:
        with Progress(f"ingest {path.parent.name}/{path.name}", unit="docs") as progress:
            for line, obj in iter_jsonl(path):
                metadata = obj.get("metadata")
                if metadata is not None and not isinstance(metadata, dict):
                    raise InputError("field 'metadata' must be a JSON object", path=str(path), line=line)
                yield (
                    require_id(obj, "_id", path, line),
                    require_text(obj, "title", path, line, required=False),
                    require_text(obj, "text", path, line),
                    metadata,
                    line,
                )
                progress.advance(1)

    return CorpusSource(str(path), records())


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


def read_splits(root: Path, splits: list[str]) -> Iterator[SplitSource]:
    """Each split in turn (read only when the builder asks for it)."""
    for split in splits:
        yield read_split(root, split)


__all__ = ["available_splits", "beir_root", "corpus_source", "read_split", "read_splits"]
