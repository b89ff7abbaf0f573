"""Answers from two sources: a team's own file (``--answers``) or irflow systems' top k.

An answers file is JSON Lines, one object per query::

    {"query_id": "q1", "answer": "...", "contexts": [{"doc_id": "d3"}, {"text": "..."}], "reference": "..."}

``contexts`` are in the order the generator saw them; a ``doc_id`` context takes its title and text from the
corpus (a given ``text`` wins), a ``text`` one is free text retrieved elsewhere. ``reference`` (a reference
answer) is optional. Validated as ``run:`` files are: a malformed line fails naming ``file:line`` and what
was expected; queries and documents the dataset does not know are counted and named, and left out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from irflow.tasks.core.limits import bounded_lines
from irflow.tasks.core.paths import describe_path
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.ingest import EMBEDDED
from irflow.tasks.rag.samples import Answer, Context

MAX_NAMED = 5  # unknown ids named in a message (the count is always given)
REFERENCES_FILE = "references.jsonl"  # an embedded dataset's reference answers: {"query_id", "reference"}


@dataclass(frozen=True)
class AnswerFile:
    """The answers read from a file, and what was left out (unknown query and document ids)."""

    answers: list[Answer]
    unknown_queries: list[str] = field(default_factory=list)
    unknown_documents: list[str] = field(default_factory=list)

    def problems(self) -> dict[str, Any]:
        """The skipped ids, counted and named (the first :data:`MAX_NAMED`) for metrics.json and the report."""
        out: dict[str, Any] = {}
        for what, ids in (("unknown_queries", self.unknown_queries), ("unknown_documents", self.unknown_documents)):
            if ids:
                out[what] = {"count": len(ids), "first": ids[:MAX_NAMED]}
        return out


def questions(dataset: Dataset) -> dict[str, str]:
    return dict(zip(dataset.queries["query_id"].astype(str), dataset.queries["text"].astype(str), strict=True))


def document_texts(dataset: Dataset) -> dict[str, str]:
    """Each document as the generator sees it: the title, a blank line, the text (no title: the text)."""
    corpus = dataset.corpus
    titles = corpus["title"].fillna("").astype(str) if "title" in corpus.columns else pd.Series("", index=corpus.index)
    texts = corpus["text"].fillna("").astype(str)
    return {str(d): (f"{t}\n\n{x}" if t else x) for d, t, x in zip(corpus["doc_id"], titles, texts, strict=True)}


def dataset_references(dataset: Dataset) -> dict[str, str]:
    """The reference answers shipped with an embedded dataset (``irflow/datasets/<name>/references.jsonl``)."""
    if dataset.name not in EMBEDDED or not (path := EMBEDDED[dataset.name] / REFERENCES_FILE).is_file():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out[str(row["query_id"])] = str(row["reference"])
    return out


def check_answers_path(path: str | os.PathLike[str]) -> str:
    """``path`` as text when it is a regular file; else InputError saying what it is (a directory, a device)."""
    if (what := describe_path(path)) is not None:
        raise InputError(f"--answers: {path}: {what}; expected JSON lines of answers")
    return str(path)


def read_answers(path: str | os.PathLike[str], dataset: Dataset, references: Mapping[str, str] = {}) -> AnswerFile:
    """The answers of ``path`` for ``dataset`` (``references`` fill in a missing ``reference``)."""
    where = str(path)
    asked, docs = questions(dataset), document_texts(dataset)
    answers: list[Answer] = []
    seen: dict[str, int] = {}
    unknown_q: list[str] = []
    unknown_d: list[str] = []
    for lineno, raw in bounded_lines(path, "an answers file (JSON Lines, --answers)"):
        if not raw.strip():
            continue
        at = f"{where}:{lineno}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"{at}: not UTF-8 text at byte {err.start} of the line") from None
        row = _object(line, at)
        qid = _string(row, "query_id", at)
        if qid in seen:
            raise InputError(
                f"{at}: query {qid!r} was already answered on line {seen[qid]}; expected one line per query"
            )
        seen[qid] = lineno
        answer = _string(row, "answer", at, empty=True)
        reference = row.get("reference")
        if reference is not None and not isinstance(reference, str):
            raise InputError(f"{at}: 'reference' must be a string (a reference answer) or absent, got {reference!r}")
        contexts = _contexts(row.get("contexts"), at, docs, unknown_d)
        if qid not in asked:
            unknown_q.append(qid)
            continue
        answers.append(Answer(qid, asked[qid], answer, contexts, reference or references.get(qid)))
    if not answers:
        raise InputError(
            f"{where}: no answer to a query of {dataset.name} ({dataset.split})"
            + (f"; {len(unknown_q)} unknown query ids, e.g. {', '.join(unknown_q[:MAX_NAMED])}" if unknown_q else "")
        )
    return AnswerFile(answers, unknown_q, list(dict.fromkeys(unknown_d)))


def _object(line: str, at: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except ValueError as err:
        raise InputError(
            f"{at}: not JSON ({err.args[0] if err.args else err}); expected one JSON object a line"
        ) from None
    if not isinstance(row, dict):
        raise InputError(f"{at}: expected a JSON object with query_id, answer and contexts, got {type(row).__name__}")
    return row


def _string(row: Mapping[str, Any], key: str, at: str, *, empty: bool = False) -> str:
    value = row.get(key)
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise InputError(f"{at}: {key!r} must be a{'' if empty else ' non-empty'} string, got {value!r}")
    return value


def _contexts(value: Any, at: str, docs: Mapping[str, str], unknown: list[str]) -> tuple[Context, ...]:
    if not isinstance(value, list):
        raise InputError(
            f'{at}: \'contexts\' must be a list of {{"doc_id": ...}} and/or {{"text": ...}}, got {value!r}'
        )
    out = []
    for i, item in enumerate(value):
        doc_id, text = (item.get("doc_id"), item.get("text")) if isinstance(item, dict) else (None, None)
        if (doc_id is None and text is None) or not all(v is None or isinstance(v, str) for v in (doc_id, text)):
            raise InputError(
                f'{at}: contexts[{i}] must be {{"doc_id": STRING}} and/or {{"text": STRING}}, got {item!r}'
            )
        if doc_id is not None and doc_id not in docs:
            unknown.append(doc_id)
            if text is None:
                continue  # an unknown document with no text has nothing to give
            doc_id = None
        out.append(Context(text if text is not None else docs[str(doc_id)], doc_id))
    return tuple(out)


def top_contexts(run: pd.DataFrame, dataset: Dataset, k: int) -> dict[str, tuple[Context, ...]]:
    """Each query's top ``k`` documents of a run (rank order) as contexts."""
    docs = document_texts(dataset)
    top = run.sort_values(["query_id", "rank"]).groupby("query_id", sort=False).head(k)
    out: dict[str, tuple[Context, ...]] = {}
    for qid, group in top.groupby("query_id", sort=False):
        out[str(qid)] = tuple(Context(docs.get(str(d), ""), str(d)) for d in group["doc_id"])
    return out
