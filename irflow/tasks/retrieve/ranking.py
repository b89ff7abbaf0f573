"""Rankings that come from outside (a file, a Python retriever, a service), checked against the dataset.

Every external system goes through :func:`against_dataset`: hits of query ids that are not queries of
the evaluated split are counted and dropped, as irflow drops judgements of unknown queries; hits of
document ids that are not in the corpus are counted and kept at their rank, as trec_eval (which has no
corpus) keeps them: not relevant, or relevant where the qrels judge them. A ranking that shares no query
or no document with the dataset is an error (it was made for another dataset). The counts go into the
system's info (``unknown_queries`` …), and from there into metrics.json's cost block, MLflow and the
report.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.runs import has_duplicates
from irflow.tasks.core.schema import Dataset, InputError

COUNTS = ("unknown_queries", "unknown_documents", "unknown_document_hits", "dropped_hits", "queries_without_hits")


def _known(values: pd.Series, ids: pd.Series) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    found = pc.is_in(pa.array(values.astype("str")), value_set=pa.array(ids.astype("str").unique()))
    return np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)


def against_dataset(
    dataset: Dataset, run: pd.DataFrame, where: str, *, all_queries: bool = True, overlap: bool = True
) -> tuple[pd.DataFrame, dict[str, int]]:
    """``run`` (query_id, doc_id, score) without hits of unknown queries, and the counts (hits of documents
    not in the corpus are kept and counted).

    ``all_queries``: the run answers every query of the dataset, so dataset queries it lacks are
    counted as ``queries_without_hits`` (they score 0, as in ``trec_eval -c``). ``overlap``: no known
    query or no known document at all is an error (off for a single query, which may find nothing).
    """
    queries = dataset.queries["query_id"]
    if run.empty:
        return run, {**dict.fromkeys(COUNTS, 0), "queries_without_hits": len(queries) if all_queries else 0}
    known_query = _known(run["query_id"], queries)
    if overlap and not known_query.any():
        sample = ", ".join(repr(q) for q in run["query_id"].drop_duplicates().head(3))
        raise InputError(
            f"none of the {run['query_id'].nunique():,} query ids of this ranking is a query of "
            f"{dataset.name} ({dataset.split}), e.g. {sample} vs {queries.iloc[0]!r}: a run for another dataset?",
            path=where,
        )
    known_doc = _known(run["doc_id"], dataset.corpus["doc_id"])
    if overlap and not known_doc[known_query].any():
        sample = ", ".join(repr(d) for d in run["doc_id"][known_query].drop_duplicates().head(3))
        raise InputError(
            f"none of the document ids of this ranking is in the corpus of {dataset.name}, e.g. {sample} vs "
            f"{dataset.corpus['doc_id'].iloc[0]!r}: a run for another dataset?",
            path=where,
        )
    unknown_doc = known_query & ~known_doc
    counts = {
        "unknown_queries": int(run["query_id"][~known_query].nunique()),
        "unknown_documents": int(run["doc_id"][unknown_doc].nunique()),
        "unknown_document_hits": int(unknown_doc.sum()),
        "dropped_hits": int((~known_query).sum()),
        "queries_without_hits": 0,
    }
    kept = run[known_query] if not known_query.all() else run
    if all_queries:
        counts["queries_without_hits"] = int((~_known(queries, kept["query_id"])).sum())
    return kept, counts


def add_counts(info: dict[str, Any], counts: Mapping[str, int]) -> None:
    """Add ``counts`` to a searcher's info (a searcher that runs several times adds up)."""
    for key, value in counts.items():
        info[key] = int(info.get(key, 0)) + int(value)


def top_hits(docs: list[str], scores: list[float], depth: int) -> tuple[list[str], list[float]]:
    """The first hit of each document, cut to the ``depth`` best in trec_eval's order (score descending,
    ties by doc id descending), in the answer's own order: what a service asked for ``depth`` hits keeps."""
    if len(docs) <= depth:
        return docs, scores
    first: dict[str, int] = {}
    for i, doc in enumerate(docs):
        first.setdefault(doc, i)
    keep = sorted(heapq.nlargest(depth, first.values(), key=lambda i: (scores[i], docs[i])))
    return [docs[i] for i in keep], [scores[i] for i in keep]


def ranked_lists(
    answers: Sequence[Any] | Mapping[str, Any], query_ids: Sequence[str], system: str, depth: int | None = None
) -> pd.DataFrame:
    """One run table from ranked lists, one per query: each hit a ``(doc_id, score)`` pair, a mapping
    with ``doc_id`` (or ``id``) and ``score``, or a bare doc id (scored by its position). ``answers``
    is a sequence in the order of ``query_ids`` or a mapping query id -> list. Errors name ``system``.

    With ``depth``, each list is read one hit at a time and only its ``depth`` best hits (trec_eval's
    order) are kept, so a list (or generator) of any length costs memory for ``depth`` hits."""
    if isinstance(answers, Mapping):
        extra = sorted(set(map(str, answers)) - set(query_ids))
        if extra:
            raise InputError(f"system {system!r}: answered query {extra[0]!r}, which it was not asked")
        lists: list[Any] = [answers.get(q, answers.get(_maybe_int(q), [])) for q in query_ids]
    elif isinstance(answers, Sequence) and not isinstance(answers, (str, bytes)):
        if len(answers) != len(query_ids):
            raise InputError(
                f"system {system!r}: expected one ranked list per query ({len(query_ids)}), got {len(answers)}"
            )
        lists = list(answers)
    else:
        raise InputError(
            f"system {system!r}: search() must return a list of ranked lists (one per query) or a mapping "
            f"query_id -> ranked list, got {type(answers).__name__}"
        )
    qids: list[str] = []
    docs: list[str] = []
    scores: list[float] = []
    for qid, hits in zip(query_ids, lists):
        best: list[tuple[float, str]] = []  # a min-heap of the ``depth`` best (score, doc id) so far
        for position, hit in enumerate(_iterable(hits, system, qid)):
            doc, score = _hit(hit, position, system, qid)
            if depth is None:
                best.append((score, doc))
            elif len(best) < depth:
                heapq.heappush(best, (score, doc))
            elif (score, doc) > best[0]:
                heapq.heapreplace(best, (score, doc))
        qids.extend([qid] * len(best))
        docs.extend(doc for _, doc in best)
        scores.extend(score for score, _ in best)
    run = pd.DataFrame(
        {
            "query_id": pd.Series(qids, dtype="str"),
            "doc_id": pd.Series(docs, dtype="str"),
            "score": np.asarray(scores, dtype=np.float64),
        }
    )
    if has_duplicates(run):
        row = run[run.duplicated(["query_id", "doc_id"])].iloc[0]
        raise InputError(f"system {system!r}: document {row['doc_id']!r} appears twice for query {row['query_id']!r}")
    return run


def _maybe_int(qid: str) -> Any:
    return int(qid) if qid.isdigit() else qid


def _iterable(hits: Any, system: str, qid: str) -> Iterable[Any]:
    if hits is None or isinstance(hits, (str, bytes, Mapping)) or not isinstance(hits, Iterable):
        raise InputError(f"system {system!r}: the ranked list of query {qid!r} must be a list, got {hits!r:.80}")
    return hits


def _hit(hit: Any, position: int, system: str, qid: str) -> tuple[str, float]:
    """(doc id, score) of one hit; a bare id scores -(position + 1), so its order is kept."""
    if isinstance(hit, Mapping):
        doc = hit.get("doc_id", hit.get("id"))
        score = hit.get("score")
    elif isinstance(hit, (tuple, list)) and len(hit) == 2:
        doc, score = hit
    elif isinstance(hit, (str, int)) and not isinstance(hit, bool):
        doc, score = hit, -(position + 1.0)
    else:
        doc = score = None
    expected = "(doc_id, score), {'doc_id': ..., 'score': ...} or a doc id"
    if doc is None or isinstance(doc, bool) or not isinstance(doc, (str, int)) or str(doc) == "":
        raise InputError(
            f"system {system!r}: hit {position + 1} of query {qid!r}: expected {expected}, got {hit!r:.80}"
        )
    value = number(score)
    if value is None:
        raise InputError(
            f"system {system!r}: hit {position + 1} of query {qid!r}: score must be a finite number, got {score!r:.40}"
        )
    return str(doc), value


def number(value: Any) -> float | None:
    """A finite float from a number or a numeric string (Weaviate sends scores as strings), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, np.number)):
        return None
    try:
        out = float(value)
    except (ValueError, OverflowError):  # not a number, or an integer too large for a float
        return None
    return out if np.isfinite(out) else None
