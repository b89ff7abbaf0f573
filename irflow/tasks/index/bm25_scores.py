"""BM25's precomputed score matrix (:func:`build_scores`): whole-array numpy instead of bm25s's Python loop per
document, bit-identical to what ``bm25s.BM25.build_index_from_ids`` computes."""

from __future__ import annotations

from typing import Any

import numpy as np

from irflow.tasks.index.bm25_tokens import CorpusTokens


def build_scores(
    tokens: CorpusTokens,
    n_vocab: int,
    *,
    method: str,
    idf_method: str,
    k1: float,
    b: float,
    delta: float,
    dtype: str = "float32",
    int_dtype: str = "int32",
) -> tuple[dict[str, Any], np.ndarray | None]:
    """bm25s's precomputed score matrix, built with whole-array numpy instead of a Python loop per document.

    Column ``t`` of the (documents x vocabulary) CSC matrix holds, for every document ``d`` containing
    term ``t``, ``idf(t) * tfc(tf(t, d), |d|)`` (minus the non-occurrence score for BM25L/BM25+, which
    is returned too: bm25s adds it back per query term), with bm25s's own idf/tfc formulas evaluated
    in the same dtypes, so the arrays equal what ``bm25s.BM25.build_index_from_ids`` computes, bit
    for bit (tested).
    """
    from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

    n_docs, lengths = len(tokens), tokens.lengths
    docs = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
    pairs, tf = np.unique(tokens.flat.astype(np.int64) * n_docs + docs, return_counts=True)  # (term, doc) order
    cols, rows = np.divmod(pairs, n_docs)
    df = np.bincount(cols, minlength=n_vocab)
    avg_len = lengths.mean()

    # idf per distinct document frequency, by bm25s's scalar formula (a few hundred calls, not one per term)
    idf_fn, tfc_fn = _select_idf_scorer(idf_method), _select_tfc_scorer(method)
    seen = np.flatnonzero(df)
    distinct, which = np.unique(df[seen], return_inverse=True)
    idf64 = np.array([idf_fn(int(d), N=n_docs) for d in distinct], dtype=np.float64)[which]
    idf = np.zeros(n_vocab, dtype=dtype)
    idf[seen] = idf64

    scores = idf[cols] * tfc_fn(
        tf_array=tf.astype(dtype), l_d=lengths[rows].astype(np.float64), l_avg=avg_len, k1=k1, b=b, delta=delta
    )
    nonoccurrence = None
    if method in ("bm25l", "bm25+"):  # these give a score for *not* containing a term; stored relative to it
        nonoccurrence = np.zeros(n_vocab, dtype=dtype)
        nonoccurrence[seen] = idf64 * tfc_fn(tf_array=0, l_d=avg_len, l_avg=avg_len, k1=k1, b=b, delta=delta)
        scores = scores - nonoccurrence[cols]
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=n_vocab), out=indptr[1:])
    matrix = {"data": scores.astype(dtype), "indices": rows.astype(int_dtype), "indptr": indptr, "num_docs": n_docs}
    return matrix, nonoccurrence


__all__ = ["build_scores"]
