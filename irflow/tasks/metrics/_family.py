"""Helpers shared by the family modules."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .measures import Measure


def rel_of(m: Measure, relevance_level: int) -> int:
    """The relevance threshold of a measure: its own ``rel`` or evaluate()'s level."""
    return relevance_level if m.rel is None else m.rel


def safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, 0 where den == 0 (trec_eval leaves such values at 0)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    out = np.zeros(np.broadcast(num, den).shape, dtype=np.float64)
    np.divide(num, den, out=out, where=den != 0)
    return out


def one_measure(m: Measure, run: pd.DataFrame, qrels: pd.DataFrame, relevance_level: int) -> pd.Series:
    """Per-query values of one measure, indexed by query_id (used by the thin public functions)."""
    from .evaluate import evaluate  # late import: evaluate imports every family module

    table = evaluate(run, qrels, [m], relevance_level=relevance_level)
    return pd.Series(table["value"].to_numpy(), index=pd.Index(table["query_id"], name="query_id"), name=m.name)
