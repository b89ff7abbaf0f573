"""Where a difference comes from: segments, document-type shares, length bias, disagreements, consistency.

Pure functions over the canonical tables (``tasks.core.schema``) and the long per-query table
``system, query_id, metric, value``; a run is ``query_id, doc_id, score, rank``. They answer the
questions of a comparison beyond the mean: which query types each system handles, whether it
prefers code over prose or long documents over short ones, where two systems disagree most, and
how consistent each one is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from irflow.tasks.core.schema import InputError
from irflow.tasks.metrics import parse_measure

NONE_LABEL = "(none)"
ORDINAL_SCALES = (  # metadata values with a natural order: segments follow it
    ("head", "torso", "tail"),
    ("easy", "medium", "hard"),
    ("1-2 words", "3-5 words", "6+ words"),
)
SNIPPET_WIDTH = 80


def _systems(per_query: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(per_query["system"]))


def metric_table(per_query: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Values of one metric as a query × system matrix (systems in table order; a missing value scores 0)."""
    rows = per_query[per_query["metric"] == metric]
    if rows.empty:
        raise InputError(
            f"metric {metric!r} is not in the per-query table; "
            f"available: {', '.join(dict.fromkeys(per_query['metric']))}"
        )
    wide = rows.pivot(index="query_id", columns="system", values="value").fillna(0.0)
    return wide[[s for s in _systems(per_query) if s in wide.columns]].rename_axis(columns=None)


def _labels(values: pd.Series) -> pd.Series:
    """Metadata values as labels: missing or empty becomes ``(none)``."""
    text = values.astype("string").str.strip()
    return text.mask(text.isna() | (text == ""), NONE_LABEL).astype(str)


def segments(per_query: pd.DataFrame, queries: pd.DataFrame, column: str, metric: str) -> pd.DataFrame:
    """Mean ``metric`` per value of the query metadata ``column``: ``column, queries, <system>...``.

    Rows follow the categories of an ordered categorical column (e.g. length bins) or a known scale
    (:data:`ORDINAL_SCALES`: head/torso/tail, easy/medium/hard, query-log length bands) that holds
    every value, else the number of queries (largest first); a query without the column's value
    falls in ``(none)``.
    """
    if column not in queries.columns:
        raise InputError(
            f"queries have no metadata column {column!r}; available: "
            f"{', '.join(c for c in queries.columns if c not in ('query_id', 'text'))}"
        )
    wide = metric_table(per_query, metric)
    label = _labels(queries.set_index(queries["query_id"].astype(str))[column])
    groups = label.reindex(wide.index).fillna(NONE_LABEL).rename(column)
    table = wide.groupby(groups).mean()
    table.insert(0, "queries", groups.value_counts())
    dtype = queries[column].dtype
    values = set(table.index) - {NONE_LABEL}
    if isinstance(dtype, pd.CategoricalDtype) and dtype.ordered:
        scale: Sequence[str] | None = [str(c) for c in dtype.categories]
    else:
        scale = next((s for s in ORDINAL_SCALES if values <= set(s)), None)
    if scale is not None:
        order = [*scale, NONE_LABEL]
        return table.reindex([c for c in order if c in table.index]).rename_axis(column).reset_index()
    return table.sort_values("queries", ascending=False, kind="mergesort").reset_index()


def query_features(queries: pd.DataFrame, qrels: pd.DataFrame, *, relevance_level: int = 1) -> pd.DataFrame:
    """Segments every dataset has, as ordered categoricals: ``query length`` (words, three bins at the
    terciles) and ``relevant documents`` (judged relevant per query: 0, 1, 2, 3-5, 6+)."""
    ids = queries["query_id"].astype(str)
    words = queries["text"].fillna("").astype(str).str.split().str.len().to_numpy(dtype=np.int64)
    edges = np.unique(np.quantile(words, [1 / 3, 2 / 3])) if len(words) else np.array([])
    bins = np.searchsorted(edges, words, side="left")
    names = {
        b: f"{lo}-{hi} words" if lo != hi else f"{lo} words"
        for b, lo, hi in ((b, words[bins == b].min(), words[bins == b].max()) for b in np.unique(bins))
    }
    length = pd.Categorical([names[b] for b in bins], categories=list(names.values()), ordered=True)
    counts = _relevant(qrels, relevance_level).groupby("query_id").size().reindex(ids).fillna(0).astype(int)
    relevant = pd.cut(counts, [-1, 0, 1, 2, 5, np.inf], labels=["0", "1", "2", "3-5", "6+"])
    return pd.DataFrame(
        {
            "query_id": ids.to_numpy(),
            "query length": length,
            "relevant documents": pd.Categorical(relevant.to_numpy(), ordered=True, categories=relevant.cat.categories),
        }
    )


def _top_hits(run: pd.DataFrame, judged: pd.Index, k: int) -> pd.DataFrame:
    hits = run[(run["rank"] <= k) & run["query_id"].astype(str).isin(judged)]
    return hits.assign(query_id=hits["query_id"].astype(str), doc_id=hits["doc_id"].astype(str))


def _relevant(qrels: pd.DataFrame, relevance_level: int) -> pd.DataFrame:
    rel = qrels[qrels["relevance"] >= relevance_level]
    return rel.assign(query_id=rel["query_id"].astype(str), doc_id=rel["doc_id"].astype(str))


def document_shares(
    runs: Mapping[str, pd.DataFrame],
    qrels: pd.DataFrame,
    corpus: pd.DataFrame,
    column: str,
    *,
    k: int = 10,
    relevance_level: int = 1,
) -> pd.DataFrame:
    """Share of each value of the document metadata ``column`` in the corpus, among relevant
    judgements, and among each system's top-``k`` hits over the judged queries.

    Columns ``column, corpus, relevant, <system>...``; each column sums to 1. A system whose share
    of a type exceeds the relevant share retrieves that type more often than it is relevant
    (e.g. prefers code snippets over prose).
    """
    if column not in corpus.columns:
        raise InputError(f"corpus has no metadata column {column!r}")
    label = _labels(corpus.set_index(corpus["doc_id"].astype(str))[column])
    judged = pd.Index(qrels["query_id"].astype(str).unique())

    def shares(doc_ids: pd.Series) -> pd.Series:
        values = label.reindex(doc_ids.to_numpy()).fillna(NONE_LABEL)
        return values.value_counts(normalize=True)

    table = pd.DataFrame(
        {
            "corpus": label.value_counts(normalize=True),
            "relevant": shares(_relevant(qrels, relevance_level)["doc_id"]),
            **{s: shares(_top_hits(run, judged, k)["doc_id"]) for s, run in runs.items()},
        }
    )
    table = table.fillna(0.0).sort_values("relevant", ascending=False, kind="mergesort")
    return table.rename_axis(column).reset_index()


def document_lengths(corpus: pd.DataFrame) -> pd.Series:
    """Length in words (whitespace tokens) of each document's title and text, indexed by doc id."""
    text = corpus["title"].fillna("").astype(str) + " " + corpus["text"].fillna("").astype(str)
    return pd.Series(text.str.split().str.len().to_numpy(dtype=np.int64), index=corpus["doc_id"].astype(str))


def length_bias(
    runs: Mapping[str, pd.DataFrame],
    qrels: pd.DataFrame,
    corpus: pd.DataFrame,
    *,
    k: int = 10,
    relevance_level: int = 1,
) -> pd.DataFrame:
    """Mean and median length (words) of the corpus, the relevant documents and each system's top ``k``.

    For each system also Spearman's rho between rank and length over its top-``k`` hits of the
    judged queries (rho < 0: longer documents are ranked higher) and its p-value; NaN where
    undefined (no hits, or constant ranks or lengths).
    """
    lengths = document_lengths(corpus)
    judged = pd.Index(qrels["query_id"].astype(str).unique())
    rows = {"corpus": (lengths, None), "relevant": (lengths.reindex(_relevant(qrels, relevance_level)["doc_id"]), None)}
    for system, run in runs.items():
        hits = _top_hits(run, judged, k)
        rows[system] = (lengths.reindex(hits["doc_id"].to_numpy()), hits["rank"].to_numpy())
    out = []
    for name, (values, ranks) in rows.items():
        values = values.dropna().astype(np.float64)
        rho = p = np.nan
        if (
            ranks is not None
            and len(values) == len(ranks)
            and len(values) > 2
            and np.ptp(ranks) > 0
            and np.ptp(values.to_numpy()) > 0
        ):
            rho, p = stats.spearmanr(ranks, values.to_numpy())
        out.append(
            {
                "set": name,
                "documents": len(values),
                "mean_words": float(values.mean()) if len(values) else np.nan,
                "median_words": float(values.median()) if len(values) else np.nan,
                "spearman_rank_length": float(rho),
                "p_value": float(p),
            }
        )
    return pd.DataFrame(out)


def disagreements(per_query: pd.DataFrame, metric: str, system_a: str, system_b: str, n: int = 5) -> pd.DataFrame:
    """The ``n`` queries where ``system_b − system_a`` on ``metric`` is largest in absolute value.

    Columns ``query_id, <system_a>, <system_b>, delta``; ties broken by query id, so the
    choice is deterministic. Queries with no difference are never listed.
    """
    if system_a == system_b:
        raise InputError("disagreements need two different systems")
    wide = metric_table(per_query, metric)
    for s in (system_a, system_b):
        if s not in wide.columns:
            raise InputError(f"system {s!r} has no values of {metric!r}")
    table = pd.DataFrame(
        {"query_id": wide.index.astype(str), system_a: wide[system_a].to_numpy(), system_b: wide[system_b].to_numpy()}
    )
    table["delta"] = table[system_b] - table[system_a]
    table = table[table["delta"] != 0].assign(size=table["delta"].abs())
    table = table.sort_values(["size", "query_id"], ascending=[False, True], kind="mergesort")
    return table.drop(columns="size").head(n).reset_index(drop=True)


def snippet(title: str, text: str, width: int = SNIPPET_WIDTH) -> str:
    """One line: ``title: text`` with whitespace collapsed, cut to ``width`` characters."""
    joined = " ".join((f"{title}: {text}" if title else str(text)).split())
    return joined if len(joined) <= width else joined[: width - 1].rstrip() + "…"


def side_by_side(
    runs: Mapping[str, pd.DataFrame],
    query_id: str,
    qrels: pd.DataFrame,
    corpus: pd.DataFrame,
    *,
    k: int = 5,
    width: int = SNIPPET_WIDTH,
) -> pd.DataFrame:
    """Each system's top ``k`` for one query, side by side: ``rank``, then per system
    ``<system> doc``, ``<system> grade`` (NA = unjudged) and ``<system> snippet``."""
    grades = qrels[qrels["query_id"].astype(str) == str(query_id)]
    grade = pd.Series(grades["relevance"].to_numpy(), index=grades["doc_id"].astype(str).to_numpy())
    docs = corpus.set_index(corpus["doc_id"].astype(str))
    table = pd.DataFrame({"rank": np.arange(1, k + 1)})
    for system, run in runs.items():
        hits = run[(run["query_id"].astype(str) == str(query_id)) & (run["rank"] <= k)].sort_values("rank")
        ids = hits["doc_id"].astype(str).tolist() + [""] * (k - len(hits))
        known = docs.reindex(ids)[["title", "text"]].astype("string").fillna("")
        table[f"{system} doc"] = ids
        table[f"{system} grade"] = pd.array([grade.get(i) if i else None for i in ids], dtype="Int64")
        table[f"{system} snippet"] = [
            snippet(t, x, width) if i else "" for i, t, x in zip(ids, known["title"], known["text"])
        ]
    return table


def consistency(per_query: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per system: queries, mean, std (ddof=1), min, quartiles, max and the share of queries scoring 0."""
    wide = metric_table(per_query, metric)
    q = wide.quantile([0.25, 0.5, 0.75])
    return (
        pd.DataFrame(
            {
                "queries": wide.count(),
                "mean": wide.mean(),
                "std": wide.std(ddof=1),
                "min": wide.min(),
                "q1": q.loc[0.25],
                "median": q.loc[0.5],
                "q3": q.loc[0.75],
                "max": wide.max(),
                "zero_share": (wide == 0).mean(),
            }
        )
        .rename_axis("system")
        .reset_index()
    )


def metric_curves(means: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """Mean value per cutoff for every measure family computed at two or more cutoffs.

    ``means`` is ``{system: {metric: value}}`` (metrics.json's ``systems``); returns
    ``system, family, k, value`` by family (in the order first met) and k, where ``family`` is the measure name
    without its cutoff (``nDCG``, ``R``, ``P(rel=2)``).
    """
    rows = []
    for system, values in means.items():
        for name, value in values.items():
            m = parse_measure(name)
            if m.cutoff is not None:
                family = name.rsplit("@", 1)[0]
                rows.append({"system": system, "family": family, "k": m.cutoff, "value": float(value)})
    table = pd.DataFrame(rows, columns=["system", "family", "k", "value"])
    cutoffs = table.groupby("family")["k"].nunique()
    table = table[table["family"].isin(cutoffs[cutoffs >= 2].index)]
    order = {f: i for i, f in enumerate(dict.fromkeys(table["family"]))}  # families in the order computed
    return table.sort_values(
        ["family", "k"], key=lambda c: c.map(order) if c.name == "family" else c, kind="mergesort"
    ).reset_index(drop=True)


__all__ = [
    "consistency",
    "disagreements",
    "document_lengths",
    "document_shares",
    "length_bias",
    "metric_curves",
    "metric_table",
    "segments",
    "side_by_side",
    "snippet",
]
