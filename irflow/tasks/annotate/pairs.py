"""Pairs to judge: ``cycles`` random cycles over each query's candidates, seeded and persisted.

A cycle is a random permutation of the query's K documents joined end to end (consecutive
documents, plus the wrap-around from last to first), so every cycle gives each document two
opponents and 4 cycles about 8 — enough for Bradley–Terry to recover a ranking at O(K) cost
instead of the O(K²) of all pairs. Cycles are drawn to avoid pairs already drawn, and a pair
drawn twice anyway is judged once (cycles over K = 3 all give the same three pairs). Each query
has its own random stream, derived from ``(seed, query_id)``: adding or dropping queries never
changes another query's pairs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.annotate.config import DEFAULT_CYCLES
from irflow.tasks.core.atomic import atomic_path, write_json
from irflow.tasks.core.schema import InputError

PAIR_COLUMNS = ("pair_id", "query_id", "doc_a", "doc_b", "cycle")

CYCLE_TRIES = 64


def pair_id(query_id: str, doc_a: str, doc_b: str) -> str:
    """A stable id of the unordered pair ``{doc_a, doc_b}`` under ``query_id`` (sha256, 20 hex digits)."""
    low, high = sorted((str(doc_a), str(doc_b)))
    return hashlib.sha256(json.dumps([str(query_id), low, high]).encode()).hexdigest()[:20]


def query_rng(seed: int, query_id: str) -> np.random.Generator:
    """The random stream of one query: independent of every other query's."""
    digest = hashlib.sha256(f"{int(seed)}\0{query_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def cycle_pairs(doc_ids: Sequence[str], cycles: int, rng: np.random.Generator) -> list[tuple[str, str, int]]:
    """``(doc_a, doc_b, cycle)`` of ``cycles`` random cycles, each unordered pair once (K < 2: none).

    Each cycle is the first of up to ``CYCLE_TRIES`` random permutations that repeats no pair already
    drawn, else the one repeating fewest: documents meet ~2·cycles *distinct* opponents (plain random
    cycles over K = 25 repeat ~13 of 100 pairs, wasting their calls).
    """
    if cycles < 1:
        raise InputError(f"cycles must be >= 1, got {cycles}")
    docs = list(doc_ids)
    n = len(docs)
    if n < 2:
        return []
    used = np.zeros((n, n), dtype=bool)
    out = []
    for cycle in range(cycles):
        best: tuple[int, np.ndarray] | None = None
        for _ in range(CYCLE_TRIES):
            order = rng.permutation(n)
            repeats = int(used[order, np.roll(order, -1)].sum())
            if best is None or repeats < best[0]:
                best = (repeats, order)
            if repeats == 0:
                break
        assert best is not None
        order = best[1]
        for i, j in zip(order.tolist(), np.roll(order, -1).tolist()):
            if not used[i, j]:
                used[i, j] = used[j, i] = True
                out.append((docs[i], docs[j], cycle))
    return out


def make_pairs(candidates: pd.DataFrame, cycles: int = DEFAULT_CYCLES, seed: int = 0) -> pd.DataFrame:
    """Pairs of every query of a candidates table (query_id, doc_id, rank): columns ``PAIR_COLUMNS``."""
    rows = []
    for qid, group in candidates.sort_values(["query_id", "rank"], kind="stable").groupby("query_id", sort=True):
        for a, b, cycle in cycle_pairs(group["doc_id"].astype(str).tolist(), cycles, query_rng(seed, str(qid))):
            rows.append((pair_id(str(qid), a, b), str(qid), a, b, cycle))
    pairs = pd.DataFrame(rows, columns=list(PAIR_COLUMNS)).astype(
        {"pair_id": "str", "query_id": "str", "doc_a": "str", "doc_b": "str", "cycle": "int64"}
    )
    if pairs["pair_id"].duplicated().any():  # a 80-bit collision: never expected, never silently tolerated
        raise InputError("pair id collision; choose another seed")
    return pairs


def candidates_digest(candidates: pd.DataFrame) -> str:
    """sha256 of the (query_id, doc_id, rank) rows: what the pairs were drawn from."""
    rows = candidates.sort_values(["query_id", "rank", "doc_id"], kind="stable")
    text = "\n".join(f"{q}\t{d}\t{r}" for q, d, r in zip(rows["query_id"], rows["doc_id"], rows["rank"]))
    return hashlib.sha256(text.encode()).hexdigest()


def load_or_make_pairs(
    folder: str | Path, candidates: pd.DataFrame, cycles: int = DEFAULT_CYCLES, seed: int = 0, *, store: bool = True
) -> pd.DataFrame:
    """The pairs persisted in ``folder`` (``pairs.parquet`` + ``pairs.json``), drawn and stored on first use
    (``store=False``: drawn, not stored, for a dry run).

    A rerun with other candidates, cycles or seed would mix two designs in one vote store, so it
    is refused: use another output folder.
    """
    folder = Path(folder)
    meta: dict[str, Any] = {"cycles": int(cycles), "seed": int(seed), "candidates": candidates_digest(candidates)}
    meta_path, table_path = folder / "pairs.json", folder / "pairs.parquet"
    if meta_path.is_file() and table_path.is_file():
        stored = json.loads(meta_path.read_text(encoding="utf-8"))
        if {k: stored.get(k) for k in meta} != meta:
            raise InputError(
                f"{folder} holds pairs drawn with other settings ({ {k: stored.get(k) for k in meta} }); "
                "use another --output folder to annotate with new settings",
                path=str(meta_path),
            )
        return pd.read_parquet(table_path).astype({"pair_id": "str", "query_id": "str", "doc_a": "str", "doc_b": "str"})
    pairs = make_pairs(candidates, cycles, seed)
    if not store:
        return pairs
    with atomic_path(table_path) as tmp:
        pairs.to_parquet(tmp, index=False)
    write_json(meta_path, {**meta, "pairs": len(pairs), "queries": int(candidates["query_id"].nunique())})
    return pairs
