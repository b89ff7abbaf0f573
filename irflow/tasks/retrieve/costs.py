"""What a retrieval cost: the system's cost block (index recall, API spend, dropped hits) and the costs
this run measured, and only those: a stage served from a cache says "cached" and carries no timing.

A BM25 index loaded from disk still knows how long its first build took, and an embedding cache
remembers the documents/s of the run that encoded it; reported as this run's figures they mislead
(a warm run "building" an index in 11 s that it loaded in 0.1 s). :func:`fresh_costs` rewrites a
system's cost block from what the retrieval stage says it loaded (``index_cached`` of BM25,
``index_from_cache`` of FAISS) and the embed stage's records (``cached``, ``encoded``, ``seconds``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from irflow.tasks.core.schema import RetrievalInfo, info_nodes
from irflow.tasks.retrieve.ranking import COUNTS

__all__ = ["api_costs", "fresh_costs", "index_recall", "retrieval_costs"]


def _leaves(info: RetrievalInfo) -> list[Mapping[str, Any]]:
    return [node for node in info_nodes(info) if "members" not in node and "first_stage" not in node]


def _index_cached(leaf: Mapping[str, Any]) -> bool | None:
    """True/False where the leaf says whether its index came from a cache, None where it has no such index."""
    for key in ("index_cached", "index_from_cache"):
        if key in leaf:
            return bool(leaf[key])
    return None


def fresh_costs(
    cost: Mapping[str, Any], info: RetrievalInfo, encodes: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """``cost`` with timings of cached stages removed and ``cached`` listing those stages.

    * ``index_build_seconds``: the builds of this run only; absent when every index was loaded from a cache.
    * ``documents_per_second``: of the corpus encodings this run did (embed-stage records ``encodes``),
      timed from the first encoded batch; absent when every encoding was read from the cache.
    * ``load_seconds``: what those encodings spent loading their model first (import, weights, graph);
      absent when no model was loaded (every text cached).
    * ``cached``: e.g. ``["index", "embeddings"]``, ``"index (1 of 2)"`` when only part was; absent when nothing was.
    """
    out = dict(cost)
    cached: list[str] = []
    states = [(leaf, state) for leaf in _leaves(info) if (state := _index_cached(leaf)) is not None]
    loaded = [leaf for leaf, state in states if state]
    if loaded:
        fresh = [float(leaf.get("index_build_seconds") or 0.0) for leaf, state in states if not state]
        if fresh:
            out["index_build_seconds"] = sum(fresh)
            cached.append(f"index ({len(loaded)} of {len(states)})")
        else:
            out.pop("index_build_seconds", None)
            cached.append("index")
    if encodes:
        rates = [
            float(e["encoded"]) / float(e["seconds"])
            for e in encodes
            if not e.get("cached") and e.get("encoded") and e.get("seconds")
        ]
        loads = [float(e["load_seconds"]) for e in encodes if not e.get("cached") and e.get("load_seconds")]
        if loads:
            out["load_seconds"] = sum(loads)
        else:
            out.pop("load_seconds", None)
        if rates:
            out["documents_per_second"] = min(rates)
            if len(rates) < len(encodes):
                cached.append(f"embeddings ({len(encodes) - len(rates)} of {len(encodes)})")
        else:
            out.pop("documents_per_second", None)
            cached.append("embeddings")
    if cached:
        out["cached"] = cached
    return out


def retrieval_costs(info: RetrievalInfo, encodes: Sequence[Mapping[str, Any]] = ()) -> dict[str, float]:
    """What a retrieval's info adds to its system's cost block: :func:`index_recall`, API costs (with
    those of the corpus ``encodes`` of the embed stage), and the hits of unknown queries and documents
    that external systems dropped (summed over the systems inside it)."""
    out: dict[str, float] = {**index_recall(info), **api_costs(info, encodes)}
    for key in COUNTS:
        values = [int(node[key]) for node in info_nodes(info) if node.get(key) is not None]
        if values:
            out[key] = sum(values)
    return out


def api_costs(info: RetrievalInfo, encodes: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Calls, tokens and USD spent on API embedding models (``tasks.embed.api``), summed over the
    systems inside and the ``encodes`` (records of the embed stage); ``api_cost_usd`` only when every
    model's price is known. Empty without API models."""
    nodes = [node for node in [*info_nodes(info), *encodes] if "api_calls" in node]
    if not nodes:
        return {}
    out: dict[str, Any] = {
        "api_calls": sum(int(n["api_calls"]) for n in nodes),
        "api_tokens": sum(int(n["api_tokens"]) for n in nodes),
    }
    if all(n.get("api_price_per_1m") is not None for n in nodes):
        out["api_cost_usd"] = sum(int(n["api_tokens"]) * float(n["api_price_per_1m"]) / 1e6 for n in nodes)
    return out


def index_recall(info: RetrievalInfo) -> dict[str, float]:
    """Recall@10 and @100 of the system's approximate indexes against exact search (the lowest of its
    members for a hybrid or a rerank's first stage); empty when every index is exact."""
    recall = {}
    for key in ("index_recall_at_10", "index_recall_at_100"):
        values = [float(node[key]) for node in info_nodes(info) if node.get(key) is not None]
        if values:
            recall[key] = min(values)
    return recall
