"""``irflow rag --dry-run``: what generation and judging would cost, with nothing sent.

Generation is priced exactly as it would be asked (the rendered prompts, the cache consulted: a cached
answer is free). Judging is a floor: one call per sample, metric and repeat, each about the size of the
question, contexts and answer (a metric's own prompts add to it: faithfulness asks twice per sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from irflow.tasks.ingest import load_dataset
from irflow.tasks.llm import make_llm
from irflow.tasks.rag import answers as answer_files
from irflow.tasks.rag.generate import parse_generator, render_prompt
from irflow.tasks.rag.id_based import ID_METRICS
from irflow.tasks.rag.llm import CachedAsk, answer_cache
from irflow.tasks.rag.samples import Context, Prompt
from irflow.tasks.retrieve.searchers import retrieve


def rag_plan(
    dataset: str,
    split: str | None,
    specs: Sequence[str],
    answers: Sequence[str],
    generator: str | None,
    k: int,
    metrics: Sequence[str],
    judge: str | None,
    repeats: int,
) -> list[dict[str, Any]]:
    """One row per stage that calls an LLM: ``stage``, ``model``, ``calls``, ``cached_calls``, ``tokens``, ``usd``."""
    data = load_dataset(dataset, split)
    asked = answer_files.questions(data)
    items: list[tuple[str, tuple[Context, ...]]] = []
    if specs:
        for spec in specs:
            contexts = answer_files.top_contexts(retrieve(data, spec, max(k, 10)).run, data, k)
            items += [(asked[q], contexts.get(q, ())) for q in asked]
    else:
        for path in answers:
            items += [(a.question, a.contexts) for a in answer_files.read_answers(path, data).answers]
    prompts = [render_prompt(q, c) for q, c in items]
    rows = []
    cache = answer_cache()
    parsed = parse_generator(generator) if generator else None
    if parsed is not None and parsed.kind == "llm":
        client = make_llm(parsed.target, "--generator", "generator", free_text=True)
        rows.append({"stage": "generation", **CachedAsk(client, cache).estimate(prompts)})
    judged = [m for m in metrics if m not in ID_METRICS]
    if judge and judged:
        ask = CachedAsk(make_llm(judge, "--judge", "judge"), cache)
        floor = [Prompt(p.system, p.user + " " * 600) for p in prompts]  # + an answer of ~150 tokens
        row = ask.estimate(floor)
        times = len(judged) * repeats
        rows.append(
            {
                "stage": "judging (at least)",
                **row,
                "calls": row["calls"] * times,
                "cached_calls": 0,
                "tokens": row["tokens"] * times,
                "usd": round(row["usd"] * times, 6),
            }
        )
    if not rows:
        rows.append(
            {
                "stage": "no LLM",
                "model": "-",
                "calls": 0,
                "cached_calls": 0,
                "tokens": 0,
                "usd": 0.0,
                "price_per_1k": 0.0,
            }
        )
    return rows
