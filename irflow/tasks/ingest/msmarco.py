"""MS MARCO passage ranking in its native files, streamed.

``collection.tsv`` (``pid<TAB>passage``), ``queries.<split>.tsv`` (``qid<TAB>query``) and
``qrels.<split>.tsv`` (TREC: ``qid 0 pid grade``). The 8.8M-line collection is streamed line by
line into Parquet batches, so it is never held as Python strings all at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.ingest.canonical import CorpusSource, SplitSource
from irflow.tasks.ingest.readers import iter_lines, read_qrels
from irflow.tasks.ingest.records import DocRecord

DEFAULT_SPLIT = "dev"


def _id_text_rows(path: Path, what: str) -> Iterator[tuple[int, str, str]]:
    for number, line in iter_lines(path):
        if not line:
            continue
        ident, sep, text = line.partition("\t")
        if not sep or not ident.strip():
            raise InputError(f"expected '<{what} id><TAB><text>'", path=str(path), line=number)
        yield number, ident.strip(), text


def corpus_source(folder: Path) -> CorpusSource:
    """The passages of ``folder/collection.tsv``, streamed."""
    path = folder / "collection.tsv"
    if not path.is_file():
        raise InputError("missing MS MARCO collection; expected collection.tsv", path=str(path))

    def records() -> Iterator[DocRecord]:
        for line, pid, text in _id_text_rows(path, "passage"):
            yield pid, "", text, None, line

    return CorpusSource(str(path), records())


def available_splits(folder: Path) -> list[str]:
    return sorted(
        p.name[len("queries.") : -len(".tsv")]
        for p in folder.glob("queries.*.tsv")
        if (folder / p.name.replace("queries.", "qrels.", 1)).is_file()
    )


def read_split(folder: Path, split: str | None) -> SplitSource:
    split = split or DEFAULT_SPLIT
    queries_path, qrels_path = folder / f"queries.{split}.tsv", folder / f"qrels.{split}.tsv"
    if not queries_path.is_file() or not qrels_path.is_file():
        raise UnknownNameError(
            f"no split {split!r} in {folder}: expected queries.{split}.tsv and "
            f"qrels.{split}.tsv; available splits: {', '.join(available_splits(folder)) or 'none'}"
        )
    queries = [(qid, text, None, number) for number, qid, text in _id_text_rows(queries_path, "query")]
    return SplitSource(
        split=split,
        queries=queries,
        qrels=read_qrels(qrels_path),
        queries_source=str(queries_path),
        qrels_source=str(qrels_path),
    )
