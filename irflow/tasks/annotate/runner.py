"""Run an ensemble of judges over pairs: random A/B swaps, a semaphore per provider, durable votes.

Every (pair, judge) vote already in the store with a score is skipped, so a rerun after a crash
or Ctrl-C makes exactly the calls that are left; a missing vote (failed or unparseable call) is
asked again on the next run. Each remote call's vote is appended (and fsynced) the moment it
completes, so an interruption loses at most the calls in flight. Local judges cost nothing and
are run in batches of ``local_batch`` votes, one fsync per batch.

Swaps are seeded per (seed, pair, judge): the same on every rerun, independent of timing. Each remote
judge's first call is made alone before the others: a refused key (401/403) stops the run after one request.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from irflow.tasks.annotate.battle import OUTPUT_TOKENS, Battle, Judge, Verdict, render_prompt
from irflow.tasks.annotate.candidates import Texts
from irflow.tasks.annotate.store import VoteStore
from irflow.tasks.core.progress import Progress
from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError
from irflow.tasks.llm import LLMAuthError, estimate_tokens

log = logging.getLogger(__name__)


def swapped(seed: int, pair_id: str, judge: str) -> bool:
    """Whether ``judge`` sees the pair as (B, A): a fair coin seeded by (seed, pair, judge)."""
    return bool(hashlib.sha256(f"{int(seed)}\0{pair_id}\0{judge}".encode()).digest()[0] & 1)


@dataclass
class JudgeStats:
    """What one run of the judges did: calls made, missing votes and retries per judge; votes skipped."""

    calls: Counter[str] = field(default_factory=Counter)
    missing: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    skipped: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": dict(self.calls),
            "missing": dict(self.missing),
            "retries": dict(self.retries),
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
        }


def check_judges(judges: Sequence[Judge]) -> None:
    names = [j.name for j in judges]
    if not judges:
        raise InputError("no judges: give at least one (e.g. model:minilm)")
    if len(set(names)) != len(names):
        raise InputError(f"judge names must be unique, got {names}; rename one with the name= option")


def pending(pairs: pd.DataFrame, judges: Sequence[Judge], done: set[tuple[str, str, str]]) -> list[tuple[Any, Judge]]:
    """The (pair row, judge) votes still to get: not in ``done`` = {(pair_id, judge, version)} with a score."""
    return [
        (row, judge)
        for judge in judges
        for row in pairs.itertuples(index=False)
        if (row.pair_id, judge.name, judge.version) not in done
    ]


def done_keys(votes: pd.DataFrame) -> set[tuple[str, str, str]]:
    valid = votes[votes["score"].notna()]
    return set(zip(valid["pair_id"], valid["judge"], valid["version"]))


async def judge_pairs(
    pairs: pd.DataFrame,
    texts: Texts,
    judges: Sequence[Judge],
    store: VoteStore,
    *,
    seed: int = 0,
    local_batch: int = 512,
) -> JudgeStats:
    """Get every missing vote of ``judges`` on ``pairs`` into ``store``; returns what this run did."""
    check_judges(judges)
    todo = pending(pairs, judges, done_keys(store.read()))
    busy = {id(judge) for _, judge in todo}
    for judge in judges:  # before any call: a missing key or SDK fails here, not after money is spent ...
        if id(judge) in busy:  # ... and a judge with nothing left to do (a resumed run) prepares nothing
            judge.prepare()
    stats = JudgeStats(skipped=len(pairs) * len(judges) - len(todo))
    start = time.perf_counter()
    limits: dict[str, int] = {}  # judges of one provider share its smallest concurrency
    for judge in judges:
        allowed = max(1, judge.concurrency)
        limits[judge.provider] = min(limits.get(judge.provider, allowed), allowed)
    semaphores = {provider: asyncio.Semaphore(n) for provider, n in limits.items()}
    progress = Progress("annotate", len(todo), unit="votes")  # rate and ETA on a terminal only

    async def vote(row: Any, judge: Judge) -> dict[str, Any]:
        swap = swapped(seed, row.pair_id, judge.name)
        a, b = (row.doc_b, row.doc_a) if swap else (row.doc_a, row.doc_b)
        battle = Battle(row.query_id, texts.queries[row.query_id], a, texts.documents[a], b, texts.documents[b])
        began = time.perf_counter()
        try:
            verdict = await judge.judge(battle)
        except LLMAuthError:
            raise  # the key is refused: stop (see remote), not one missing vote per call
        except Exception as err:  # a judge bug must not stop the others; it shows as missing votes
            verdict = Verdict(None, error=f"{type(err).__name__}: {err}")
        if verdict.error:  # an error body may echo the request's Authorization header
            verdict = Verdict(verdict.score, verdict.reasoning, redact(verdict.error), verdict.attempts)
        score = None if verdict.score is None else (-verdict.score if swap else verdict.score) + 0.0
        stats.calls[judge.name] += 1
        progress.advance(1)
        stats.retries[judge.name] += max(0, verdict.attempts - 1)
        if score is None:
            stats.missing[judge.name] += 1
            log.warning(
                "missing vote: judge %s, pair %s (query %s): %s", judge.name, row.pair_id, row.query_id, verdict.error
            )
        return {
            "pair_id": row.pair_id,
            "query_id": row.query_id,
            "doc_a": row.doc_a,
            "doc_b": row.doc_b,
            "judge": judge.name,
            "version": judge.version,
            "swapped": swap,
            "raw_score": verdict.score,
            "score": score,
            "reasoning": verdict.reasoning,
            "error": verdict.error,
            "attempts": verdict.attempts,
            "seconds": round(time.perf_counter() - began, 4),
        }

    refused: list[LLMAuthError] = []  # the first 401/403 stops every call not yet made

    async def remote(row: Any, judge: Judge) -> None:
        async with semaphores[judge.provider]:
            if refused:
                return
            try:
                record = await vote(row, judge)
            except LLMAuthError as err:
                refused.append(err)
                return
        store.append([record])

    try:
        local = [(row, judge) for row, judge in todo if judge.local]
        for i in range(0, len(local), local_batch):
            store.append([await vote(row, judge) for row, judge in local[i : i + local_batch]])
        calls = [(row, judge) for row, judge in todo if not judge.local]
        first: dict[int, int] = {}  # each remote judge's first call goes alone, so a refused key costs
        for i, (_, judge) in enumerate(calls):  # one request, not one per call in flight
            first.setdefault(id(judge), i)
        await asyncio.gather(*(remote(*calls[i]) for i in first.values()))
        if not refused:
            probes = set(first.values())
            await asyncio.gather(*(remote(*call) for i, call in enumerate(calls) if i not in probes))
        if refused:
            raise refused[0]
    finally:
        for judge in judges:
            close = getattr(judge, "aclose", None)  # judges holding connections release them
            if close is not None:
                await close()
        stats.seconds = time.perf_counter() - start
        progress.close()
    return stats


def run_judges(
    pairs: pd.DataFrame, texts: Texts, judges: Sequence[Judge], store: VoteStore, *, seed: int = 0
) -> JudgeStats:
    """``judge_pairs`` from synchronous code (its own event loop)."""
    return asyncio.run(judge_pairs(pairs, texts, judges, store, seed=seed))


@dataclass(frozen=True)
class CostEstimate:
    """Calls still to make and their estimated cost, per judge (tokens estimated from text length)."""

    rows: list[dict[str, Any]]

    @property
    def calls(self) -> int:
        return sum(r["calls"] for r in self.rows)

    @property
    def usd(self) -> float:
        return sum(r["usd"] for r in self.rows)

    def text(self) -> str:
        width = max([len(r["judge"]) for r in self.rows] + [5])
        lines = [f"{'judge':<{width}}  {'calls':>8}  {'done':>8}  {'~tokens':>10}  {'$/1k':>7}  {'~USD':>9}"]
        for r in self.rows:
            lines.append(
                f"{r['judge']:<{width}}  {r['calls']:>8,}  {r['done']:>8,}  {r['tokens']:>10,}  "
                f"{r['price_per_1k']:>7.4f}  {r['usd']:>9.2f}"
            )
        lines.append(
            f"{'total':<{width}}  {self.calls:>8,}  {'':>8}  {sum(r['tokens'] for r in self.rows):>10,}  "
            f"{'':>7}  {self.usd:>9.2f}"
        )
        return "\n".join(lines)


def estimate_cost(pairs: pd.DataFrame, texts: Texts, judges: Sequence[Judge], votes: pd.DataFrame) -> CostEstimate:
    """The calls a run would make now (votes already stored are skipped) and their cost; calls nothing."""
    done = done_keys(votes)
    rows = []
    for judge in judges:
        todo = [row for row, _ in pending(pairs, [judge], done)]
        tokens = 0
        if not judge.local:
            for row in todo:
                battle = Battle(
                    row.query_id,
                    texts.queries[row.query_id],
                    row.doc_a,
                    texts.documents[row.doc_a],
                    row.doc_b,
                    texts.documents[row.doc_b],
                )
                system, user = render_prompt(battle, getattr(judge, "max_chars", 10**9))
                tokens += estimate_tokens(len(system) + len(user)) + OUTPUT_TOKENS
        rows.append(
            {
                "judge": judge.name,
                "calls": len(todo),
                "done": len(pairs) - len(todo),
                "tokens": tokens,
                "price_per_1k": judge.price_per_1k,
                "usd": tokens / 1000 * judge.price_per_1k,
            }
        )
    return CostEstimate(rows)
