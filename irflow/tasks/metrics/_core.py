"""Shared vectorised core: run + qrels -> a padded matrix of grades in trec_eval order.

trec_eval's conventions (``form_res_rels.c`` in trec_eval 9.x, which pytrec_eval embeds):

* ranking: score descending, ties broken by doc id *descending* (``strcmp``); any ``rank``
  column of the run is ignored;
* a retrieved document missing from the qrels is non-relevant (trec_eval's ``RELVALUE_NONPOOL``);
  a negative grade is "in the pool but unjudged" and is never relevant and never gains;
* the number of relevant documents, and the ideal ranking for nDCG, come from *all* judged
  documents of the query, retrieved or not;
* a query without judgements is not evaluated; a judged query absent from the run gets an
  empty ranking (``trec_eval -c``).

Everything here is pandas factorize + numpy sort/scatter: there is no Python loop over queries
or rows. Grades are laid out as ``grades[query, position]`` (``-1`` pads short rankings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import InputError

PAD = -1  # grade of a padding cell and of a retrieved-but-unjudged document


def _ids(df: pd.DataFrame, col: str, what: str) -> pd.Series:
    """The id column as pandas' string dtype (ids are strings, always)."""
    s = df[col]
    if not isinstance(s.dtype, pd.StringDtype):
        if s.isna().any():
            raise InputError(f"{what}: column {col!r} has missing values")
        s = s.astype(str)
    elif s.isna().any():
        raise InputError(f"{what}: column {col!r} has missing values")
    return s.reset_index(drop=True)


def _check_columns(df: pd.DataFrame, cols: tuple[str, ...], what: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {missing}; expected {list(cols)}")


def _scores(run: pd.DataFrame) -> np.ndarray:
    try:
        sc = run["score"].to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError) as exc:
        raise InputError(f"run: column 'score' must be numeric ({exc})") from None
    if np.isnan(sc).any():
        raise InputError(f"run: column 'score' has {int(np.isnan(sc).sum())} missing/NaN value(s)")
    return sc


def _grades(qrels: pd.DataFrame) -> np.ndarray:
    col = qrels["relevance"]
    try:
        g = col.to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError) as exc:
        raise InputError(f"qrels: column 'relevance' must be integer grades ({exc})") from None
    if np.isnan(g).any() or not np.array_equal(g, np.round(g)):
        raise InputError("qrels: column 'relevance' must hold integer grades (no NaN, no fractions)")
    return g.astype(np.int64)


def safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, 0 where den == 0 (trec_eval leaves such values at 0)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    out = np.zeros(np.broadcast(num, den).shape, dtype=np.float64)
    np.divide(num, den, out=out, where=den != 0)
    return out


def _first_duplicate(keys: np.ndarray) -> int:
    """Index (into ``keys``) of the first repeated key, or -1."""
    dup = pd.Index(keys).duplicated()
    return int(np.flatnonzero(dup)[0]) if dup.any() else -1


def _positions(sorted_groups: np.ndarray, n_groups: int) -> np.ndarray:
    """0-based position of each row inside its group; rows must already be grouped."""
    counts = np.bincount(sorted_groups, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    return np.arange(len(sorted_groups), dtype=np.int64) - starts[sorted_groups]


def _desc_order(*keys: np.ndarray) -> np.ndarray:
    """argsort by keys[0] ascending, then keys[1:] *descending* (all non-negative ints).

    Packs the keys into one int64 when they fit (one sort), else falls back to lexsort.
    """
    sizes = [int(k.max()) + 1 if len(k) else 1 for k in keys]
    total = 1
    for s in sizes:
        total *= s
    if total < 2**62:
        packed = keys[0].astype(np.int64)
        for k, s in zip(keys[1:], sizes[1:]):
            packed = packed * s + (s - 1 - k.astype(np.int64))
        return np.argsort(packed, kind="stable")
    return np.lexsort(tuple(-k.astype(np.int64) for k in reversed(keys[1:])) + (keys[0],))


def _trec_order(q: np.ndarray, score: np.ndarray, doc: np.ndarray, doc_names: pd.Index, n_queries: int) -> np.ndarray:
    """Row order by query ascending, score descending, doc id descending (byte order).

    Rows are grouped by query with a stable integer sort (radix when the codes fit 16 bits);
    when queries have similar run lengths, each query's scores are then sorted as one row of a
    padded matrix (many short sorts beat one long one), otherwise by one global float argsort.
    Only rows in score ties then need the doc ids, whose strings are ranked for those rows alone.
    """
    n = len(q)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    small = n_queries <= np.iinfo(np.uint16).max
    counts = np.bincount(q, minlength=n_queries)
    width = int(counts.max())
    if n_queries * width <= 4 * n + 1024:
        by_q = np.argsort(q.astype(np.uint16) if small else q, kind="stable")
        qs = q[by_q]
        pos = np.arange(n, dtype=np.int64) - (np.cumsum(counts) - counts)[qs]
        keys = np.full((n_queries, width), np.nan)  # NaN pads sort after every score (even -inf)
        keys[qs, pos] = -score[by_q]
        rows = np.zeros((n_queries, width), dtype=np.int64)
        rows[qs, pos] = by_q
        cols = np.argsort(keys, axis=1)  # not stable: ties are resolved explicitly below
        order = np.take_along_axis(rows, cols, axis=1)[np.arange(width)[None, :] < counts[:, None]]
    else:
        o1 = np.argsort(-score)  # not stable: ties are resolved explicitly below
        qs = q[o1]
        order = o1[np.argsort(qs.astype(np.uint16) if small else qs, kind="stable")]
    s_q, s_score = q[order], score[order]
    tie = (s_q[1:] == s_q[:-1]) & (s_score[1:] == s_score[:-1])  # rows i and i+1 tie
    if not tie.any():
        return order
    in_tie = np.zeros(n, dtype=bool)
    in_tie[1:] |= tie
    in_tie[:-1] |= tie
    idx = np.flatnonzero(in_tie)  # sorted positions, tie groups are contiguous runs
    starts = np.ones(len(idx), dtype=bool)
    starts[1:] = ~tie[idx[1:] - 1]
    group = np.cumsum(starts) - 1
    rows = order[idx]
    uniq, inv = np.unique(doc[rows], return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.asarray(doc_names.take(uniq).argsort())] = np.arange(len(uniq), dtype=np.int64)
    sub = _desc_order(group, rank[inv.reshape(-1)])
    order[idx] = rows[sub]
    return order


@dataclass
class Ranking:
    """Run and qrels of the judged queries, aligned in trec_eval order.

    * ``query_ids`` — the judged queries (every query id of the qrels), sorted;
    * ``grades`` — ``(n_queries, depth)`` int32 (int64 for huge grades): grade of the document
      at each rank (0-based column = rank − 1), :data:`PAD` (-1) for unjudged documents and past
      the end of the run;
    * ``run_length`` — documents retrieved per query (before truncation to ``depth``);
    * ``ideal`` — ``(n_queries, ideal_depth)`` int64, the positive grades of the query's
      judgements sorted descending, 0-padded (the ideal ranking of nDCG);
    * ``qrels_query`` / ``qrels_grade`` — one entry per judgement, for relevant counts.
    """

    query_ids: np.ndarray
    grades: np.ndarray
    run_length: np.ndarray
    ideal: np.ndarray
    qrels_query: np.ndarray
    qrels_grade: np.ndarray
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    @property
    def depth(self) -> int:
        return self.grades.shape[1]

    def relevant(self, rel: int) -> np.ndarray:
        """Boolean matrix: document at this rank has grade >= rel (rel >= 1)."""
        key = ("relevant", rel)
        if key not in self._cache:
            self._cache[key] = self.grades >= rel
        return self._cache[key]

    def relevant_cumsum(self, rel: int) -> np.ndarray:
        """``cum[q, i]`` = number of relevant documents in ranks 1..i+1."""
        key = ("cumsum", rel)
        if key not in self._cache:
            self._cache[key] = np.cumsum(self.relevant(rel), axis=1, dtype=np.int32)
        return self._cache[key]

    def relevant_at(self, rel: int, cutoff: int | None) -> np.ndarray:
        """Number of relevant documents in the top ``cutoff`` (whole ranking when None)."""
        return self.relevant_cumsum(rel)[:, self.column(cutoff)]

    def num_rel(self, rel: int) -> np.ndarray:
        """Judged documents with grade >= rel, per query (trec_eval ``num_rel``)."""
        key = ("num_rel", rel)
        if key not in self._cache:
            self._cache[key] = np.bincount(self.qrels_query[self.qrels_grade >= rel], minlength=self.n_queries).astype(
                np.int64
            )
        return self._cache[key]

    def column(self, cutoff: int | None) -> int:
        """Matrix column holding the value at rank ``cutoff`` (the last column if deeper)."""
        return self.depth - 1 if cutoff is None else min(cutoff, self.depth) - 1


def build_ranking(
    run: pd.DataFrame,
    qrels: pd.DataFrame,
    *,
    depth: int | None,
    ideal_depth: int | None,
    rank_depth_for_rel: int | None = None,
) -> Ranking:
    """Align ``run`` with ``qrels`` in trec_eval order.

    ``depth`` is the deepest rank any requested measure looks at (``None``: the whole run);
    ``ideal_depth`` the deepest rank of an nDCG ideal ranking (``None``: all positive grades;
    ``0``: no nDCG requested). ``rank_depth_for_rel`` asks for enough depth to reach rank
    #relevant(grade >= that level) (R-precision).
    """
    _check_columns(run, ("query_id", "doc_id", "score"), "run")
    _check_columns(qrels, ("query_id", "doc_id", "relevance"), "qrels")

    # --- qrels: judged queries, sorted ---------------------------------------------------
    q_qid = _ids(qrels, "query_id", "qrels")
    q_doc = _ids(qrels, "doc_id", "qrels")
    q_grade = _grades(qrels)
    q_code, query_ids = pd.factorize(q_qid, sort=True)
    q_code = q_code.astype(np.int64)
    nq = len(query_ids)

    # --- run: keep rows of judged queries ------------------------------------------------
    r_qid = _ids(run, "query_id", "run")
    r_doc = _ids(run, "doc_id", "run")
    r_score = _scores(run)
    raw_code, raw_uniques = pd.factorize(r_qid)
    to_judged = pd.Index(query_ids).get_indexer(raw_uniques)
    r_code = to_judged[raw_code].astype(np.int64) if len(raw_code) else np.empty(0, np.int64)
    keep = r_code >= 0
    if not keep.all():
        r_code, r_score, r_doc = r_code[keep], r_score[keep], r_doc[keep].reset_index(drop=True)

    # --- doc ids: one factorisation for run and qrels --------------------------------------
    n_run = len(r_doc)
    d_code, d_uniques = pd.factorize(pd.concat([r_doc, q_doc], ignore_index=True))
    d_code = d_code.astype(np.int64)
    nd = max(len(d_uniques), 1)
    rd_code, qd_code = d_code[:n_run], d_code[n_run:]

    # qrels keys (query, doc); a repeated judgement is an error (trec_eval refuses it too)
    q_key = pd.Index(q_code * nd + qd_code)
    if not q_key.is_unique:
        i = _first_duplicate(q_key.to_numpy())
        raise InputError(
            f"qrels: duplicate judgement for query {q_qid.iloc[i]!r}, doc {q_doc.iloc[i]!r} "
            "(each (query_id, doc_id) pair must be judged once)"
        )

    # run keys: a document retrieved twice for one query is an error (trec_eval: "duplicate docs")
    r_key = r_code * nd + rd_code
    if n_run > 1 and not pd.Index(r_key).is_unique:
        i = _first_duplicate(r_key)
        raise InputError(
            f"run: duplicate row for query {str(query_ids[r_code[i]])!r}, doc {str(r_doc.iloc[i])!r} "
            "(each (query_id, doc_id) pair may appear once; trec_eval rejects duplicates and "
            "pytrec_eval would silently keep only one)"
        )

    # grade of each retrieved document (PAD when unjudged): a hash join on the int64 keys
    loc = q_key.get_indexer(r_key) if n_run else np.empty(0, dtype=np.int64)
    r_grade = np.where(loc >= 0, q_grade[loc], PAD) if len(q_grade) else np.full(n_run, PAD, np.int64)

    # --- trec_eval order: query, score desc, doc id desc (strcmp) ---------------------------
    order = _trec_order(r_code, r_score, rd_code, d_uniques, nq)
    s_code = r_code[order]
    s_grade = r_grade[order]
    s_pos = _positions(s_code, nq)
    run_length = np.bincount(r_code, minlength=nq).astype(np.int64)

    # --- the grade matrix ------------------------------------------------------------------
    max_len = int(run_length.max()) if nq else 0
    need = max_len if depth is None else min(depth, max_len)
    if rank_depth_for_rel is not None and nq:
        nr = np.bincount(q_code[q_grade >= rank_depth_for_rel], minlength=nq)
        need = max(need, min(int(nr.max()), max_len))
    width = max(need, 1)
    small = np.abs(q_grade).max(initial=0) < np.iinfo(np.int32).max
    grades = np.full((nq, width), PAD, dtype=np.int32 if small else np.int64)
    inside = s_pos < width
    grades[s_code[inside], s_pos[inside]] = s_grade[inside]

    # --- ideal ranking: positive grades per query, descending ------------------------------
    pos_mask = q_grade > 0
    iq, ig = q_code[pos_mask], q_grade[pos_mask]
    if ideal_depth == 0 or len(ig) == 0:
        ideal = np.zeros((nq, 1), dtype=np.int64)
    else:
        i_order = _desc_order(iq, ig)
        iq_s, ig_s = iq[i_order], ig[i_order]
        i_pos = _positions(iq_s, nq)
        max_pos = int(i_pos.max()) + 1
        iw = max_pos if ideal_depth is None else min(ideal_depth, max_pos)
        ideal = np.zeros((nq, max(iw, 1)), dtype=np.int64)
        sel = i_pos < iw
        ideal[iq_s[sel], i_pos[sel]] = ig_s[sel]

    return Ranking(
        query_ids=np.asarray(query_ids, dtype=object),
        grades=grades,
        run_length=run_length,
        ideal=ideal,
        qrels_query=q_code,
        qrels_grade=q_grade,
    )
