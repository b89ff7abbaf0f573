"""Pooling and human judging: what to judge, a sheet to judge it in, and how far two judges agree.

* :func:`pool` — TREC pooling (Spärck Jones & van Rijsbergen 1975; Voorhees & Harman 2005): the
  union of the top ``k`` of several systems per query, minus what is already judged (unless asked).
* :func:`write_pool` — the pool as a zbench ``QueryDocuments`` JSONL (for ``irflow annotate
  --input``) and a TSV sheet a person fills in (``grade`` column, 0–3), published together.
* a filled sheet comes back through ``irflow datasets import SHEET --format sheet --base D``
  (:mod:`irflow.tasks.ingest.sheet`), merged with D's judgements.
* :func:`cohen_kappa` (Cohen 1960; quadratic weights, Cohen 1968) and :func:`krippendorff_alpha`
  (Krippendorff 2011, nominal / ordinal / interval) — agreement of two or more judges' sheets; both are
  undefined (NaN, shown by :func:`agreement_text` as ``undefined (one grade only)``) when a single grade
  was given throughout: agreement beyond chance has nothing to be measured against.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.atomic import atomic_open, write_json
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.ingest.sheet import SHEET_COLUMNS, read_sheet

SHEET_TEXT_CHARS = 2000  # of each document shown in the sheet (the JSONL keeps it whole)


def pool(
    dataset: Dataset, runs: Mapping[str, pd.DataFrame], k: int = 10, *, include_judged: bool = False
) -> pd.DataFrame:
    """The pool: ``query_id, doc_id, systems`` (how many systems put it in their top k), queries in id
    order, documents by how many systems retrieved them, then by best rank. Documents not in the corpus
    (a run file may rank them) have no text to judge and are left out."""
    if k < 1:
        raise InputError(f"pool depth k must be >= 1, got {k}")
    if not runs:
        raise InputError("pooling needs at least one system")
    tops = []
    for name, run in runs.items():
        top = run[run["rank"] <= k].loc[:, ["query_id", "doc_id", "rank"]].assign(system=name)
        tops.append(top)
    hits = pd.concat(tops, ignore_index=True).astype({"query_id": str, "doc_id": str})
    hits = hits[hits["query_id"].isin(set(dataset.queries["query_id"].astype(str)))]
    hits = hits[hits["doc_id"].isin(set(dataset.corpus["doc_id"].astype(str)))]  # a run's missing document: no text
    pooled = hits.groupby(["query_id", "doc_id"], as_index=False).agg(
        systems=("system", "nunique"), best=("rank", "min")
    )
    if not include_judged:
        judged = pd.MultiIndex.from_frame(dataset.qrels[["query_id", "doc_id"]].astype(str))
        pooled = pooled[~pd.MultiIndex.from_frame(pooled[["query_id", "doc_id"]]).isin(judged)]
    pooled = pooled.sort_values(["query_id", "systems", "best", "doc_id"], ascending=[True, False, True, True])
    return pooled.reset_index(drop=True)[["query_id", "doc_id", "systems"]]


def write_pool(dataset: Dataset, pooled: pd.DataFrame, folder: str | Path, info: dict[str, Any]) -> dict[str, Any]:
    """Write ``pool.jsonl`` (zbench QueryDocuments), ``sheet.tsv`` and ``pool.json`` into ``folder``;
    each file is written atomically. Returns the summary written to ``pool.json``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    queries = dict(zip(dataset.queries["query_id"].astype(str), dataset.queries["text"].astype(str)))
    corpus = dataset.corpus.set_index(dataset.corpus["doc_id"].astype(str))
    with atomic_open(folder / "pool.jsonl", "w", encoding="utf-8") as fh:
        for qid, group in pooled.groupby("query_id", sort=True):
            documents = [{"id": d, "content": _content(corpus, d)} for d in group["doc_id"]]
            fh.write(json.dumps({"query": {"id": qid, "query": queries[qid]}, "documents": documents}) + "\n")
    with atomic_open(folder / "sheet.tsv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(SHEET_COLUMNS)
        for qid, did in zip(pooled["query_id"], pooled["doc_id"]):
            title, text = (str(corpus.at[did, c] or "") for c in ("title", "text"))
            writer.writerow(
                [qid, did, "", _one_line(queries[qid]), _one_line(title), _one_line(text)[:SHEET_TEXT_CHARS]]
            )
    summary = {
        **info,
        "dataset": dataset.name,
        "split": dataset.split,
        "fingerprint": dataset.fingerprint,
        "queries": int(pooled["query_id"].nunique()),
        "documents": int(len(pooled)),
        "per_query": float(len(pooled) / max(1, pooled["query_id"].nunique())),
        "grades": "0 = not relevant, 1 = related, 2 = relevant, 3 = perfectly relevant (blank = not judged)",
    }
    write_json(folder / "pool.json", summary)
    return summary


def _content(corpus: pd.DataFrame, doc_id: str) -> str:
    title, text = (str(corpus.at[doc_id, c] or "") for c in ("title", "text"))
    return f"{title}\n\n{text}" if title else text


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# ----------------------------------------------------------------------------------- agreement


def agreement_table(sheets: Sequence[str | Path]) -> pd.DataFrame:
    """Units (query, document) × judges: the grades of each sheet, NaN where a judge left it blank."""
    columns = {}
    for i, sheet in enumerate(sheets):
        grades = {(q, d): g for q, d, g, _ in read_sheet(sheet)}
        columns[f"judge{i + 1}"] = pd.Series(grades, dtype="float64")
    return pd.DataFrame(columns)


UNDEFINED = "undefined (one grade only)"


def agreement_text(value: float) -> str:
    """A kappa or alpha for printing: three decimals, or :data:`UNDEFINED` for NaN."""
    return UNDEFINED if math.isnan(value) else f"{value:.3f}"


def single_grade_reason(table: pd.DataFrame) -> str | None:
    """Why kappa and alpha are undefined, when they are: the units judged by two or more judges all got
    one grade (None otherwise)."""
    paired = table[table.notna().sum(axis=1) >= 2]
    grades = np.unique(paired.to_numpy()[paired.notna().to_numpy()])
    if grades.size != 1:
        return None
    return (
        f"undefined: every unit judged twice or more got grade {grades[0]:g} from every judge, so agreement "
        "cannot be told from chance (kappa and alpha are 0/0)"
    )


def cohen_kappa(a: Sequence[float], b: Sequence[float], *, weights: str | None = None) -> float:
    """Cohen's kappa of two judges over the units both judged: (p_o − p_e) / (1 − p_e), or with
    ``weights="quadratic"`` the weighted kappa. 1 = perfect agreement, 0 = chance.

    Quadratic weights are the squared differences of the grade *values*, (g − h)², not of the grades'
    positions among those used: with grades 0, 1 and 3 in use a 0-vs-3 disagreement weighs 9, not 4
    (scikit-learn's ``cohen_kappa_score`` weighs positions in ``labels``; the two agree when the grades used
    are consecutive, or with ``labels=range(max grade + 1)``). A grade scale is an interval scale here,
    as for Krippendorff's interval alpha.

    NaN (undefined) when both judges gave every unit one and the same grade: chance agreement is then 1
    and kappa is 0/0 (Cohen 1960; scikit-learn returns NaN too); not 1, which would claim agreement
    beyond chance that one grade cannot show."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = ~(np.isnan(x) | np.isnan(y))
    x, y = x[both], y[both]
    if x.size == 0:
        raise InputError("no unit was judged by both judges")
    labels = np.unique(np.concatenate([x, y]))
    i, j = np.searchsorted(labels, x), np.searchsorted(labels, y)
    observed = np.zeros((labels.size, labels.size))
    np.add.at(observed, (i, j), 1.0)
    observed /= observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    if weights is None:
        disagreement = 1.0 - np.eye(labels.size)
    elif weights == "quadratic":
        disagreement = (labels[:, None] - labels[None, :]) ** 2
    else:
        raise InputError(f"unknown kappa weights {weights!r}; expected None or 'quadratic'")
    chance = float((disagreement * expected).sum())  # 0 only when a single grade was used throughout
    return math.nan if chance == 0 else 1.0 - float((disagreement * observed).sum()) / chance


def krippendorff_alpha(table: pd.DataFrame | np.ndarray, level: str = "ordinal") -> float:
    """Krippendorff's alpha (Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability"):
    1 − D_o / D_e from the coincidence matrix of units × judges (NaN = not judged; units with fewer
    than two values are left out). ``level``: ``nominal``, ``ordinal`` or ``interval``. NaN (undefined,
    as Krippendorff states) when every pairable value is the same grade: the expected disagreement is 0."""
    values = np.asarray(table, dtype=np.float64)
    labels = np.unique(values[~np.isnan(values)])
    index = {v: n for n, v in enumerate(labels)}
    coincidence = np.zeros((labels.size, labels.size))
    for unit in values:
        present = unit[~np.isnan(unit)]
        m = present.size
        if m < 2:
            continue
        counts = np.zeros(labels.size)
        for v in present:
            counts[index[v]] += 1
        coincidence += (np.outer(counts, counts) - np.diag(counts)) / (m - 1)
    n_c = coincidence.sum(axis=1)
    n = n_c.sum()
    if n == 0:
        raise InputError("no unit was judged by two or more judges")
    if level == "nominal":
        delta = 1.0 - np.eye(labels.size)
    elif level == "interval":
        delta = (labels[:, None] - labels[None, :]) ** 2
    elif level == "ordinal":
        cumulative = np.cumsum(n_c)
        delta = np.zeros((labels.size, labels.size))
        for g in range(labels.size):
            for h in range(g + 1, labels.size):
                from_g_to_h = cumulative[h] - cumulative[g] + n_c[g]  # Σ n_k for g <= k <= h
                delta[g, h] = delta[h, g] = (from_g_to_h - (n_c[g] + n_c[h]) / 2) ** 2
    else:
        raise InputError(f"unknown alpha level {level!r}; expected nominal, ordinal or interval")
    observed = float((coincidence * delta).sum())
    expected = float((np.outer(n_c, n_c) * delta).sum()) / (n - 1)
    return math.nan if expected == 0 else 1.0 - observed / expected
