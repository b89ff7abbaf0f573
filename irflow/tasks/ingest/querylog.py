"""Query logs → query sets: normalise and de-duplicate the queries users typed, then sample a seeded set.

A log is a CSV, TSV, JSONL or Parquet file, one row per search or per query with a count:

* ``query`` (or ``text``): the query as typed (required);
* ``count``: how many searches the row stands for (an integer >= 1; default 1);
* ``timestamp``: ISO 8601 (a time without a zone is UTC); ``since``/``until`` keep a window of it;
* ``category``, ``segment`` (user segment), ``difficulty``, ``source``: optional labels.

Normalisation: Unicode NFKC, casefold, whitespace collapsed and stripped. Rows with the same
normalised text are one query: its count is the sum, its text the most searched original spelling
(whitespace collapsed), each label the value with the most searches (ties: the first in the file).
Empty queries are dropped and counted.

Each query of the set carries metadata: ``source`` (the row's, else the import's default; one of
:data:`SOURCES`), ``count``, ``length`` (``1-2 words``, ``3-5 words``, ``6+ words``),
``difficulty`` (the log's column when it has one, else the frequency band: see
:func:`frequency_bands`), and ``category``/``segment`` when the log has them.

Sampling is weighted sampling without replacement (Efraimidis & Spirakis 2006): each query draws
the key E / w, E ~ Exp(1), w its count (``frequency``) or 1 (``uniform``), and the smallest keys
are the sample. Stratified, the size is apportioned to the strata (the combinations of the
``stratify`` labels) by largest remainder in proportion to their searches (``frequency``) or
queries (``uniform``), no stratum beyond its size, and each stratum takes its smallest keys.
Queries are ordered by normalised text before the draw, so the same log content and seed give the
same set whatever the row order, and a larger sample extends a smaller one with the same seed.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.ingest.canonical import CorpusSource, SplitSource
from irflow.tasks.ingest.custom import base_corpus, base_provenance, base_queries
from irflow.tasks.ingest.readers import fail_at_row, integer_column, read_log_table, utc_time_column
from irflow.tasks.ingest.records import QrelRow, QueryRecord

SOURCES = ("production", "synthetic", "expert", "click")
STRATEGIES = ("frequency", "uniform")
LABELS = ("category", "segment", "difficulty", "source")  # optional label columns of a log
STRATIFY_KEYS = ("category", "segment", "length", "difficulty", "source")
BANDS = ("head", "torso", "tail")
NONE_LABEL = "(none)"
ID_PREFIX = "log-"
_TIME_EXAMPLE = "an ISO 8601 date or time, e.g. 2024-05-01 or 2024-05-01T12:00:00Z"


@dataclass(frozen=True)
class Sampling:
    """How a query set is drawn from a log (see the module docstring)."""

    size: int | None = None  # None: every query
    strategy: str = "frequency"
    stratify: tuple[str, ...] = ()
    seed: int = 0
    min_count: int = 1
    source: str = "production"  # of rows without a source
    since: str | None = None  # ISO 8601, inclusive
    until: str | None = None  # ISO 8601, exclusive

    def check(self) -> None:
        """Raise :class:`InputError` naming the option that is out of range."""
        if self.size is not None and self.size < 1:
            raise InputError(f"--sample must be >= 1, got {self.size}")
        if self.strategy not in STRATEGIES:
            raise InputError(f"--strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        unknown = [k for k in self.stratify if k not in STRATIFY_KEYS]
        if unknown or len(set(self.stratify)) != len(self.stratify):
            raise InputError(
                f"--stratify takes distinct labels from {', '.join(STRATIFY_KEYS)}, got {','.join(self.stratify)!r}"
            )
        if self.seed < 0:
            raise InputError(f"--seed must be >= 0, got {self.seed}")
        if self.min_count < 1:
            raise InputError(f"--min-count must be >= 1, got {self.min_count}")
        if self.source not in SOURCES:
            raise InputError(f"--source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        since, until = self.window()
        if since is not None and until is not None and since >= until:
            raise InputError(f"--since {self.since} is not before --until {self.until}")

    def window(self) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
        """``since`` and ``until`` as UTC times."""
        return _option_time(self.since, "--since"), _option_time(self.until, "--until")


def _option_time(text: str | None, option: str) -> pd.Timestamp | None:
    if text is None:
        return None
    parsed = pd.to_datetime(pd.Series([text]), utc=True, format="ISO8601", errors="coerce").iloc[0]
    if pd.isna(parsed):
        raise InputError(f"{option} expects {_TIME_EXAMPLE}; got {text!r}")
    return parsed


def normalise(text: str) -> str:
    """The form two queries are the same in: NFKC, casefolded, whitespace collapsed and stripped."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(folded.split())


def length_band(words: int) -> str:
    """``1-2 words``, ``3-5 words`` or ``6+ words``."""
    return "1-2 words" if words <= 2 else "3-5 words" if words <= 5 else "6+ words"


def _cell_text(value: Any) -> str:
    """A cell as text with whitespace collapsed; a missing value is ``""``."""
    if isinstance(value, str):
        return " ".join(value.split())
    if value is None or (np.isscalar(value) and pd.isna(value)):
        return ""
    return " ".join(str(value).split())


def read_query_log(path: str | Path, default_source: str = "production") -> pd.DataFrame:
    """The log as ``row, query, key, count, source`` (+ ``timestamp`` and labels when present): one row
    per file row, ``key`` the normalised text (``""`` for an empty query). A file that does not fit
    names the file, the row and the field."""
    path = Path(path)
    log = read_log_table(path, "query log")
    if len(log.columns) == 0:
        raise InputError("query log is empty; expected a header and at least one query", path=str(path))
    column = "query" if "query" in log.columns else "text" if "text" in log.columns else None
    if column is None:
        raise InputError(
            f"query log lacks a query column (query or text); columns: {', '.join(map(str, log.columns))}",
            path=str(path),
        )
    if log.empty:
        raise InputError("query log is empty; expected at least one query", path=str(path))
    texts = log[column].map(_cell_text)
    keys = {t: normalise(t) for t in pd.unique(texts)}
    out = pd.DataFrame({"row": np.arange(1, len(log) + 1), "query": texts, "key": texts.map(keys)})
    out["count"] = integer_column(log["count"], "count", path, 1) if "count" in log.columns else 1
    if "timestamp" in log.columns:
        out["timestamp"] = utc_time_column(log, "timestamp", path, _TIME_EXAMPLE)
    for label in LABELS:
        if label in log.columns:
            out[label] = log[label].map(_cell_text)
    if "source" in out.columns:
        out["source"] = out["source"].str.lower().replace("", default_source)
        bad = ~out["source"].isin(SOURCES)
        if bad.any():
            fail_at_row(bad, "source", f"one of {', '.join(SOURCES)} (or empty)", log, path)
    else:
        out["source"] = default_source
    return out


def _mode(rows: pd.DataFrame, column: str) -> pd.Series:
    """Per key, the value of ``column`` with the most searches (ties: the first in the file); empty values skipped."""
    rows = rows[rows[column] != ""]
    searches = rows.groupby(["key", column], sort=False).agg(searches=("count", "sum"), first=("row", "min"))
    searches = searches.reset_index().sort_values(
        ["key", "searches", "first"], ascending=[True, False, True], kind="mergesort"
    )
    return searches.drop_duplicates("key").set_index("key")[column]


def frequency_bands(counts: np.ndarray) -> np.ndarray:
    """``head``/``torso``/``tail`` per query, by where its searches begin in the log's traffic (queries
    most searched first): below 1/3 of all searches head, below 2/3 torso, else tail. Equally frequent
    queries are placed as the middle one of them, so they share a band and the most searched query is
    always head."""
    counts = np.asarray(counts, dtype=np.float64)
    _, group = np.unique(-counts, return_inverse=True)  # groups of equal counts, most frequent first
    traffic = np.bincount(group, weights=counts)
    members = np.bincount(group)
    start = np.cumsum(traffic) - traffic + (members - 1) // 2 * (traffic / members)
    return np.asarray(BANDS)[np.searchsorted([1 / 3, 2 / 3], start / traffic.sum(), side="right")][group]


def distinct_queries(log: pd.DataFrame) -> pd.DataFrame:
    """One row per normalised query, in ``key`` order: ``key, text, count, length, difficulty, source``
    (+ ``category``/``segment`` when the log has them; ``""`` where a query has no value)."""
    rows = log[log["key"] != ""]
    if rows.empty:
        raise InputError("the query log holds no non-empty query")
    counts = rows.groupby("key", sort=True)["count"].sum()
    table = pd.DataFrame({"key": counts.index.astype(str), "count": counts.to_numpy(np.int64)})
    table["text"] = _mode(rows, "query").reindex(table["key"]).to_numpy()
    for label in LABELS:
        if label in rows.columns:
            table[label] = _mode(rows, label).reindex(table["key"]).fillna("").to_numpy()
    table["length"] = [length_band(len(k.split())) for k in table["key"]]
    if "difficulty" not in table.columns:
        table["difficulty"] = frequency_bands(table["count"].to_numpy())
    return table


def allocate(weights: np.ndarray, capacity: np.ndarray, size: int) -> np.ndarray:
    """``size`` apportioned to strata in proportion to ``weights``, none beyond its ``capacity``: a stratum
    whose quota exceeds its size takes all of it and the others share the rest; then largest remainder
    (ties: the first stratum)."""
    weights, capacity = np.asarray(weights, np.float64), np.asarray(capacity, np.int64)
    size = min(size, int(capacity.sum()))
    full = capacity <= 0
    quota = np.zeros(len(capacity))
    while not full.all():
        share = np.where(full, 0.0, weights)
        share = share if share.sum() > 0 else (~full).astype(np.float64)
        quota = (size - capacity[full].sum()) * share / share.sum()
        over = ~full & (quota > capacity)
        if not over.any():
            break
        full |= over
    alloc = np.where(full, capacity, np.floor(quota)).astype(np.int64)
    remainder = np.where(full, -1.0, quota - alloc)
    order = np.lexsort((np.arange(len(alloc)), -remainder))
    alloc[order[: size - int(alloc.sum())]] += 1
    return np.minimum(alloc, capacity)


def sample_queries(table: pd.DataFrame, keys: np.ndarray, sampling: Sampling) -> tuple[pd.DataFrame, dict[str, int]]:
    """The rows of ``table`` with the smallest ``keys`` (per stratum when stratified), most searched first,
    and the queries each stratum got (empty unless stratified)."""
    size = len(table) if sampling.size is None else min(sampling.size, len(table))
    if not sampling.stratify:
        chosen = np.argsort(keys, kind="stable")[:size]
        return _order(table.iloc[chosen]), {}
    for key in sampling.stratify:
        if key not in table.columns:
            raise InputError(f"cannot stratify by {key!r}: the query log has no {key} column")
    labels = table[list(sampling.stratify)].replace("", NONE_LABEL).astype(str).agg(" / ".join, axis=1)
    codes, names = pd.factorize(labels, sort=True)
    weights = table["count"].to_numpy(np.float64) if sampling.strategy == "frequency" else np.ones(len(table))
    alloc = allocate(np.bincount(codes, weights=weights), np.bincount(codes), size)
    parts = []
    for stratum, take in enumerate(alloc):
        members = np.flatnonzero(codes == stratum)
        parts.append(members[np.argsort(keys[members], kind="stable")[:take]])
    chosen = np.concatenate(parts) if parts else np.array([], np.int64)
    return _order(table.iloc[chosen]), {str(n): int(a) for n, a in zip(names, alloc)}


def _order(sample: pd.DataFrame) -> pd.DataFrame:
    return sample.sort_values(["count", "key"], ascending=[False, True], kind="mergesort").reset_index(drop=True)


def draw_keys(table: pd.DataFrame, sampling: Sampling) -> np.ndarray:
    """One sampling key per query of ``table`` (in its order): E / w, E ~ Exp(1) seeded, w the count or 1."""
    rng = np.random.default_rng(sampling.seed)
    weights = table["count"].to_numpy(np.float64) if sampling.strategy == "frequency" else np.ones(len(table))
    return rng.exponential(size=len(table)) / weights


def query_set(path: str | Path, sampling: Sampling) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The sampled queries of the log at ``path`` (``distinct_queries`` rows) and what the manifest
    records about the log and the draw."""
    sampling.check()
    log = read_query_log(path, sampling.source)
    summary: dict[str, Any] = {"rows": int(len(log))}
    since, until = sampling.window()
    if since is not None or until is not None:
        if "timestamp" not in log.columns:
            raise InputError("--since/--until need a timestamp column; the query log has none", path=str(path))
        inside = pd.Series(True, index=log.index)
        if since is not None:
            inside &= log["timestamp"] >= since
        if until is not None:
            inside &= log["timestamp"] < until
        summary["outside_window"] = int((~inside).sum())
        log = log[inside]
    if "timestamp" in log.columns and len(log):
        summary["first_search"] = log["timestamp"].min().isoformat()
        summary["last_search"] = log["timestamp"].max().isoformat()
    summary["empty_queries"] = int((log["key"] == "").sum())
    if summary["empty_queries"] == len(log):
        raise InputError(
            "no non-empty query is left (empty queries and searches outside the window are dropped)", path=str(path)
        )
    table = distinct_queries(log)
    keys = draw_keys(table, sampling)  # drawn before --min-count: a higher minimum keeps the order of the rest
    eligible = (table["count"] >= sampling.min_count).to_numpy()
    if not eligible.any():
        raise InputError(f"no query was searched at least {sampling.min_count} times (--min-count)", path=str(path))
    sample, strata = sample_queries(table[eligible].reset_index(drop=True), keys[eligible], sampling)
    summary |= {
        "searches": int(log["count"].sum()),
        "distinct_queries": int(len(table)),
        "merged_spellings": int(log.loc[log["key"] != "", "query"].nunique() - len(table)),
        "below_min_count": int((~eligible).sum()),
        "normalisation": "NFKC, casefold, whitespace collapsed",
        "difficulty": "log"
        if "difficulty" in log.columns
        else "frequency band (head/torso/tail: thirds of the searches)",
        "sampling": {
            "requested": sampling.size,
            "sampled": int(len(sample)),
            "strategy": sampling.strategy,
            "stratify": list(sampling.stratify),
            "seed": sampling.seed,
            "min_count": sampling.min_count,
            "default_source": sampling.source,
            "since": sampling.since,
            "until": sampling.until,
        },
    }
    if strata:
        summary["strata"] = strata
    return sample, summary


def _metadata(row: dict[str, Any]) -> dict[str, Any]:
    meta = {"source": row["source"], "count": int(row["count"]), "length": row["length"]}
    meta |= {k: row[k] for k in ("difficulty", "category", "segment") if k in row and row[k] != ""}
    return meta


def query_id(key: str) -> str:
    """The id of a log query no base query matches: ``log-`` and a digest of its normalised text."""
    return ID_PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def querylog_over_base(
    path: str | Path, base: Dataset, split: str, sampling: Sampling
) -> tuple[CorpusSource, SplitSource, dict[str, Any]]:
    """A query set sampled from the log at ``path`` over the corpus of dataset ``base``.

    A sampled query whose normalised text is that of a ``base`` query takes its id, its metadata
    (the log's labels win) and its judgements; any other is a new, unjudged query ``log-<digest>``.
    Every sampled query is stored, judged or not (pool or annotate the rest).
    """
    sample, summary = query_set(path, sampling)
    by_text: dict[str, tuple[str, dict[str, Any]]] = {}
    for qid, text, meta, _ in base_queries(base):
        by_text.setdefault(normalise(text), (qid, meta or {}))
    records: list[QueryRecord] = []
    matched: set[str] = set()
    for line, row in enumerate(sample.to_dict("records"), 1):
        hit = by_text.get(row["key"])
        qid, meta = hit if hit else (query_id(row["key"]), {})
        if hit:
            matched.add(qid)
        records.append((qid, row["text"], {**meta, **_metadata(row)}, line))
    judged = base.qrels[base.qrels["query_id"].astype(str).isin(matched)]
    qrels: list[QrelRow] = [
        (str(q), str(d), int(g), i)
        for i, (q, d, g) in enumerate(judged[["query_id", "doc_id", "relevance"]].itertuples(index=False), 1)
    ]
    summary["matched_base_queries"] = len(matched)
    summary["judged_queries"] = int(judged["query_id"].nunique())
    provenance = {**base_provenance(base), "querylog": summary}
    split_source = SplitSource(split, records, qrels, str(path), f"{base.name} qrels", unjudged=True)
    return base_corpus(base), split_source, provenance


def describe(summary: dict[str, Any], name: str) -> str:
    """One paragraph for the import's output: what was drawn, and what is judged."""
    drawn = summary["sampling"]
    how = drawn["strategy"] + (f", stratified by {'+'.join(drawn['stratify'])}" if drawn["stratify"] else "")
    unjudged = drawn["sampled"] - summary["judged_queries"]
    text = (
        f"query set: {drawn['sampled']:,} of {summary['distinct_queries']:,} distinct queries "
        f"({summary['searches']:,} searches; {how}; seed {drawn['seed']}); "
        f"{summary['judged_queries']:,} judged by the base dataset"
    )
    if unjudged:
        text += f", {unjudged:,} unjudged: judge them with irflow pool --dataset {name} or irflow annotate"
    return text
