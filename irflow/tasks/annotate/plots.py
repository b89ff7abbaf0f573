"""Plots of an annotation: the pairwise matrix (zbench's picture) and the distribution of zELO scores.

The matrix of a query holds, at (i, j), the ensemble's verdict of document i against document j
in [−1, 1] (+1: i won every vote), blank where the two never met. Ordered by first-stage rank it
shows which retrieved documents are good or bad (green or red rows); ordered by zELO it becomes
nearly triangular when the judges are consistent.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from irflow.tasks.core.atomic import atomic_path


def pair_matrix(doc_ids: Sequence[str], combined: pd.DataFrame) -> np.ndarray:
    """K×K verdicts (row document vs column document) of one query's combined pairs; NaN = not battled."""
    index = {d: i for i, d in enumerate(doc_ids)}
    matrix = np.full((len(doc_ids), len(doc_ids)), np.nan)
    for a, b, p_b in zip(combined["doc_a"], combined["doc_b"], combined["p_b"]):
        if a in index and b in index and not np.isnan(p_b):
            matrix[index[b], index[a]] = 2 * p_b - 1
            matrix[index[a], index[b]] = 1 - 2 * p_b
    return matrix


def plot_pair_matrices(path: str | Path, scores: pd.DataFrame, combined: pd.DataFrame, queries: Sequence[str]) -> Path:
    """For each query: its matrix ordered by first-stage rank (top row) and by zELO score (bottom row)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    queries = list(queries)
    fig, axes = plt.subplots(2, max(1, len(queries)), figsize=(4.2 * max(1, len(queries)), 8.4), squeeze=False)
    for col, qid in enumerate(queries):
        docs = scores[scores["query_id"] == qid]
        pairs = combined[combined["query_id"] == qid]
        for row, (label, ordered) in enumerate(
            [("first-stage rank", docs.sort_values("rank")), ("zELO score", docs.sort_values("score", ascending=False))]
        ):
            ax = axes[row][col]
            image = ax.imshow(pair_matrix(ordered["doc_id"].tolist(), pairs), cmap="RdYlGn", vmin=-1, vmax=1)
            ax.set_title(f"{qid}: by {label}", fontsize=9)
            ax.set_xlabel("opponent", fontsize=8)
            ax.set_ylabel("document", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label="verdict of row vs column (+1: row more relevant)")
    return _save(fig, path)


def plot_score_distribution(path: str | Path, scores: pd.DataFrame) -> Path:
    """Histogram of all zELO scores (zero mean per query)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.hist(scores["score"].to_numpy(np.float64), bins=40, color="#4c72b0", edgecolor="white")
    ax.set_xlabel("zELO score (log Bradley–Terry strength, zero mean per query)")
    ax.set_ylabel("documents")
    ax.set_title(f"{len(scores)} documents, {scores['query_id'].nunique()} queries")
    return _save(fig, path)


def _save(fig: object, path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return path
