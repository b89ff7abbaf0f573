"""Synthetic queries: an LLM writes queries about sampled documents; a retriever must find each one's
document again.

The recipe of InPars (Bonifacio et al. 2022) and Promptagator (Dai et al. 2023): documents of the base
dataset are sampled (seeded; stratified by a document metadata column when the corpus has one), an
LLM writes queries for each in one of several styles (``keyword``, natural ``question``,
``paraphrase``), answering JSON ``{"queries": [...]}``, and a query is kept only when a retriever
(BM25 by default, any irflow system) ranks its source document in the top k: the round-trip filter
drops queries the document does not answer and queries too vague to single it out. Queries are
de-duplicated on the query-log normalisation (NFKC, casefold, whitespace), the first kept. Each
kept query judges its source document relevant (grade 1; other documents are unjudged, not
irrelevant) and carries ``source=synthetic`` and ``style``; with ``with_base_queries`` the base's
judged queries are stored beside them (``source`` their own, else ``expert``), so one evaluation
reports both, segmented by ``source``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, cast

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import Dataset, InputError, Manifest
from irflow.tasks.evalsets.synthesize_llm import (
    AnswerCache,
    GenerationFailedError,
    Request,
    calls_for,
    estimate,
    make_generator,
)
from irflow.tasks.ingest.querylog import NONE_LABEL, allocate, normalise
from irflow.tasks.ingest.records import QrelRow, QueryRecord
from irflow.tasks.llm import Outcome, ask_all, request_key

PROMPT_VERSION = "synthetic-queries-v1"
STYLES = {
    "keyword": "short keyword queries (2 to 6 words, no question mark), as people type into a search box",
    "question": "natural-language questions that a person would ask and that this document answers",
    "paraphrase": "queries that ask for what this document says in other words than the document uses",
}
SYSTEM_PROMPT = """\
You write search queries for evaluating a search engine. Given one document, write queries that a \
real user could type and for which this document is a good answer. A query must make sense without \
the document in front of the reader, must not quote long passages of it, and must not mention "the \
document" or "the text".

Answer with one JSON object and nothing else: {"queries": ["<query>", ...]}"""
USER_TEMPLATE = """\
Document:
{document}

Style: {style}
Write {n} {description}. Answer with the JSON object only."""
PROMPT_SHA256 = hashlib.sha256((SYSTEM_PROMPT + "\0" + USER_TEMPLATE).encode()).hexdigest()
ID_PREFIX = "syn-"
MAX_STRATA = 30  # a metadata column with more distinct values is not a stratum
BASE_SOURCE = "expert"  # the source of a base query that has none
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


@dataclass(frozen=True)
class SynthesisConfig:
    """What ``irflow datasets synthesize`` asks for (see the module docstring)."""

    base: str
    name: str
    llm: str
    queries: int = 200
    split: str | None = None
    styles: tuple[str, ...] = tuple(STYLES)
    per_call: int = 2  # queries asked for in one call
    overgenerate: float = 2.0  # calls ask for this many times the wanted queries (the filter drops some)
    filter_system: str = "bm25"
    k: int = 10
    stratify: str = "auto"  # a corpus metadata column, "auto" (the first with 2-30 values) or "none"
    seed: int = 0
    with_base_queries: bool = False
    price_per_1k: float | None = None

    def check(self) -> None:
        """Raise :class:`InputError` naming the option that is out of range."""
        if self.queries < 1:
            raise InputError(f"--queries must be >= 1, got {self.queries}")
        unknown = [s for s in self.styles if s not in STYLES]
        if not self.styles or unknown or len(set(self.styles)) != len(self.styles):
            raise InputError(f"--styles takes distinct styles from {', '.join(STYLES)}, got {','.join(self.styles)!r}")
        if not 1 <= self.per_call <= 20:
            raise InputError(f"--per-call must be from 1 to 20, got {self.per_call}")
        if not 1.0 <= self.overgenerate <= 10.0:
            raise InputError(f"--overgenerate must be from 1 to 10, got {self.overgenerate}")
        if not 1 <= self.k <= 1000:
            raise InputError(f"--k must be from 1 to 1000, got {self.k}")
        if self.seed < 0:
            raise InputError(f"--seed must be >= 0, got {self.seed}")


def stratum_column(corpus: pd.DataFrame, stratify: str) -> str | None:
    """The document metadata column to stratify by: ``stratify`` itself, none, or (``auto``) the first
    metadata column with 2 to 30 distinct values."""
    metadata = [c for c in corpus.columns if c not in ("doc_id", "title", "text")]
    if stratify == "none":
        return None
    if stratify != "auto":
        if stratify not in metadata:
            raise InputError(
                f"--stratify {stratify!r}: the corpus has no such metadata column; "
                f"columns: {', '.join(metadata) or 'none'} (or auto, none)"
            )
        return stratify
    for column in metadata:
        if 2 <= _labels(corpus[column]).nunique() <= MAX_STRATA:
            return column
    return None


def _labels(column: pd.Series) -> pd.Series:
    return column.map(lambda v: NONE_LABEL if v is None or (np.isscalar(v) and pd.isna(v)) or v == "" else str(v))


def sample_documents(corpus: pd.DataFrame, count: int, seed: int, column: str | None) -> pd.DataFrame:
    """``count`` documents drawn without replacement (seeded, whatever the corpus order): uniformly, or per
    stratum of ``column`` in proportion to its size (largest remainder); returned in random order, with
    their ``stratum``."""
    docs = corpus.sort_values("doc_id", kind="mergesort").reset_index(drop=True)
    keys = np.random.default_rng(seed).random(len(docs))
    count = min(count, len(docs))
    if column is None:
        chosen = np.argsort(keys, kind="stable")[:count]
        strata = pd.Series(NONE_LABEL, index=docs.index)
    else:
        strata = _labels(docs[column])
        codes, _ = pd.factorize(strata, sort=True)
        sizes = np.bincount(codes)
        alloc = allocate(sizes.astype(np.float64), sizes, count)
        chosen = np.concatenate(
            [
                np.flatnonzero(codes == s)[np.argsort(keys[codes == s], kind="stable")[:take]]
                for s, take in enumerate(alloc)
            ]
        )
    chosen = chosen[np.argsort(keys[chosen], kind="stable")]
    out = docs.iloc[chosen][["doc_id", "title", "text"]].reset_index(drop=True)
    out["stratum"] = strata.iloc[chosen].to_numpy()
    return out


def render_prompt(title: str, text: str, style: str, n: int, max_chars: int) -> tuple[str, str]:
    """``(system, user)`` of the versioned prompt; the document (title and text) cut to ``max_chars``."""
    document = "\n".join(part for part in (str(title or "").strip(), str(text or "").strip()) if part)
    if len(document) > max_chars:
        document = document[:max_chars] + " [...]"
    user = USER_TEMPLATE.format(document=document, style=style, n=n, description=STYLES[style])
    return SYSTEM_PROMPT, user


def plan_requests(docs: pd.DataFrame, config: SynthesisConfig, generator: Any) -> list[Request]:
    """One request per call: call j asks document j (cycling when there are fewer documents than calls)
    for ``per_call`` queries in a style that rotates, so styles stay balanced and no document is asked
    the same style twice."""
    calls = calls_for(config.queries, config.per_call, config.overgenerate)
    rows = docs.to_dict("records")
    requests = []
    for j in range(calls):
        doc = rows[j % len(rows)]
        style = config.styles[(j + j // len(rows)) % len(config.styles)]
        system, user = render_prompt(doc["title"], doc["text"], style, config.per_call, generator.max_chars)
        key = request_key(generator, system, user)
        requests.append(Request(str(doc["doc_id"]), style, config.per_call, system, user, key))
    return requests


def parse_queries(text: str) -> list[Any]:
    """The ``queries`` list of a JSON answer (code fences and prose around the object tolerated);
    ValueError when there is none."""
    text = _FENCE.sub("", (text or "").strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError(f"no JSON object in answer {text[:80]!r}")
    try:
        answer = json.loads(text[start : end + 1])
    except json.JSONDecodeError as err:
        raise ValueError(f"malformed JSON in answer {text[:80]!r}: {err}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("queries"), list):
        raise ValueError(f'expected {{"queries": [...]}}, got {text[:80]!r}')
    return list(answer["queries"])


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def candidate_id(key: str) -> str:
    """The id of a synthetic query: ``syn-`` and a digest of its normalised text."""
    return ID_PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def collect(
    requests: list[Request], outcomes: dict[str, Outcome], taken: set[str]
) -> tuple[pd.DataFrame, dict[str, int]]:
    """Parsed queries in request order (``query_id, text, key, doc_id, style``), the first of each
    normalised text (``taken`` holds texts already used, e.g. the base queries), and what was dropped."""
    counts = {
        "failed_calls": 0,
        "unparseable_answers": 0,
        "not_text": 0,
        "not_unicode": 0,
        "duplicate": 0,
        "generated": 0,
    }
    rows = []
    seen = set(taken)
    for request in requests:
        outcome = outcomes[request.key]
        if outcome.text is None:
            counts["failed_calls"] += 1
            continue
        try:
            items = parse_queries(outcome.text)
        except ValueError:
            counts["unparseable_answers"] += 1
            continue
        for item in items:
            counts["generated"] += 1
            key = normalise(item) if isinstance(item, str) else ""
            if not key:
                counts["not_text"] += 1
            elif not _valid_unicode(key):  # a lone surrogate ("\\ud800" in the answer's JSON) cannot be stored
                counts["not_unicode"] += 1
            elif key in seen:
                counts["duplicate"] += 1
            else:
                seen.add(key)
                text = " ".join(str(item).split())
                rows.append((candidate_id(key), text, key, request.doc_id, request.style))
    table = pd.DataFrame(rows, columns=["query_id", "text", "key", "doc_id", "style"])
    return table, counts


def round_trip_ranks(base: Dataset, candidates: pd.DataFrame, system: str, k: int) -> pd.Series:
    """Rank (1-based) of each candidate's source document in ``system``'s top ``k`` over the base corpus;
    NaN where it is not there. The system runs on the base dataset's corpus (its indexes are cached
    under the base's fingerprint) with the candidates as queries."""
    from irflow.tasks.retrieve.searchers import retrieve

    if candidates.empty:
        return pd.Series(dtype=np.float64)
    probe = replace(
        base,
        queries=candidates[["query_id", "text"]].reset_index(drop=True),
        qrels=base.qrels.iloc[:0],
    )
    run = retrieve(probe, system, min(k, max(1, len(base.corpus)))).run
    ranks = run[["query_id", "doc_id", "rank"]].astype({"query_id": str, "doc_id": str})
    merged = candidates[["query_id", "doc_id"]].astype(str).merge(ranks, on=["query_id", "doc_id"], how="left")
    return pd.Series(merged["rank"].to_numpy(np.float64), index=candidates.index)


def base_records(base: Dataset) -> tuple[list[QueryRecord], list[QrelRow]]:
    """The base dataset's judged queries (``source`` their own, else ``expert``) and judgements, as records."""
    from irflow.tasks.ingest.custom import base_queries

    judged = set(base.qrels["query_id"].astype(str))
    records: list[QueryRecord] = [
        (qid, text, {**(meta or {}), "source": (meta or {}).get("source") or BASE_SOURCE}, line)
        for qid, text, meta, line in base_queries(base)
        if str(qid) in judged
    ]
    qrels = [
        (str(q), str(d), int(g), i)
        for i, (q, d, g) in enumerate(base.qrels[["query_id", "doc_id", "relevance"]].itertuples(index=False), 1)
    ]
    return records, qrels


def synthesize(config: SynthesisConfig, *, dry_run: bool = False, cache: AnswerCache | None = None) -> dict[str, Any]:
    """Sample, ask, filter, de-duplicate and store dataset ``config.name``; returns its manifest (the
    synthesis summary is ``manifest["source"]["synthesis"]``). ``dry_run``: returns the plan (calls,
    tokens, USD of the answers not cached) and sends and writes nothing."""
    from irflow.tasks.ingest import load_dataset
    from irflow.tasks.systems.specs import as_spec

    config.check()
    _check_name(config.name)
    generator = make_generator(config.llm, config.price_per_1k)
    system = str(as_spec(config.filter_system))
    base = load_dataset(config.base, config.split)
    column = stratum_column(base.corpus, config.stratify)
    calls = calls_for(config.queries, config.per_call, config.overgenerate)
    docs = sample_documents(base.corpus, calls, config.seed, column)
    requests = plan_requests(docs, config, generator)
    cache = cache or AnswerCache()
    if dry_run:
        plan = estimate(requests, generator, set(cache.load()))
        return {"dry_run": True, "base": base.name, "documents": len(docs), "stratify": column, **plan}
    outcomes = ask_all(requests, generator, cache, what="synthesize")
    if all(o.text is None for o in outcomes.values()):
        first = next(o.error for o in outcomes.values() if o.error)
        raise GenerationFailedError(f"no call got an answer ({len(outcomes)} failed); first error: {first}")
    records: list[QueryRecord] = []
    qrels: list[QrelRow] = []
    taken: set[str] = set()
    if config.with_base_queries:
        records, qrels = base_records(base)
        taken = {normalise(text) for _, text, _, _ in records}
    candidates, counts = collect(requests, outcomes, taken)
    ranks = round_trip_ranks(base, candidates, system, config.k)
    passed = candidates[ranks.notna()]
    kept = passed.iloc[: config.queries]
    if kept.empty:
        raise InputError(
            f"no synthetic query survived the round trip ({len(candidates)} candidates, none found its document "
            f"in the top {config.k} of {system}); nothing was stored"
        )
    for line, row in enumerate(kept.to_dict("records"), len(records) + 1):
        records.append((row["query_id"], row["text"], {"source": "synthetic", "style": row["style"]}, line))
        qrels.append((row["query_id"], row["doc_id"], 1, line))
    summary = {
        "prompt_version": PROMPT_VERSION,
        "prompt_sha256": PROMPT_SHA256,
        "llm": generator.describe(),
        "config": {k: v for k, v in asdict(config).items() if k not in ("base", "name", "llm")},
        "stratify": column,
        "strata": {str(s): int(n) for s, n in docs["stratum"].value_counts().sort_index().items()},
        "documents": len(docs),
        "calls": len(requests),
        "cached_calls": sum(1 for r in requests if outcomes[r.key].cached),
        **counts,
        "failed_round_trip": int(len(candidates) - len(passed)),
        "surplus": int(len(passed) - len(kept)),
        "kept": int(len(kept)),
        "by_style": {s: int(n) for s, n in kept["style"].value_counts().sort_index().items()},
        "filter": {"system": system, "k": config.k},
        "base_queries": len(records) - len(kept),
    }
    source = {"kind": "synthetic", "location": generator.name, **_provenance(base), "synthesis": summary}
    return cast(dict[str, Any], _store(base, config.name, config.split or base.split, records, qrels, source))


def _provenance(base: Dataset) -> dict[str, Any]:
    from irflow.tasks.ingest.custom import base_provenance

    return base_provenance(base)


def _check_name(name: str) -> None:
    from irflow.tasks.ingest import EMBEDDED, store

    if name in EMBEDDED or (isinstance(name, str) and name.startswith("beir/")):
        raise InputError(f"dataset name {name!r} is reserved; choose another name")
    store.check_import_name(name)


def _store(
    base: Dataset, name: str, split: str, records: list[QueryRecord], qrels: list[QrelRow], source: dict[str, Any]
) -> Manifest:
    """Build the dataset over the base corpus with the canonical builder and publish it whole."""
    from irflow.tasks.ingest import canonical, store
    from irflow.tasks.ingest.custom import base_corpus

    split_source = canonical.SplitSource(split, records, qrels, "synthetic queries", "synthetic judgements")

    def build(folder: Any) -> dict[str, Manifest]:
        return canonical.build_dataset(folder, name, base_corpus(base), [split_source], source)

    with store.building(name):
        return store.publish(name, build)[split]


def describe(summary: dict[str, Any]) -> str:
    """What the synthesis asked, dropped and kept, in a few lines (for the command's output)."""
    lines = [
        f"asked {summary['calls']:,} calls over {summary['documents']:,} documents"
        + (f" stratified by {summary['stratify']}" if summary["stratify"] else "")
        + f" ({summary['cached_calls']:,} answers cached, {summary['failed_calls']:,} calls failed)",
        f"generated {summary['generated']:,} queries; dropped: {summary['unparseable_answers']:,} unparseable answers, "
        f"{summary['not_text']:,} items that are not text, {summary['not_unicode']:,} not valid Unicode "
        f"(a lone surrogate), {summary['duplicate']:,} duplicates, "
        f"{summary['failed_round_trip']:,} failed the round trip (source document not in the top "
        f"{summary['filter']['k']} of {summary['filter']['system']}), {summary['surplus']:,} beyond --queries",
        f"kept {summary['kept']:,} synthetic queries ("
        + ", ".join(f"{s}: {n}" for s, n in summary["by_style"].items())
        + ")"
        + (f" beside {summary['base_queries']:,} base queries" if summary["base_queries"] else ""),
    ]
    return "\n".join(lines)


def dry_run_text(plan: dict[str, Any]) -> str:
    """The dry run's answer: calls, tokens and USD, and that nothing was sent."""
    return (
        f"{plan['model']}: {plan['calls']:,} calls ({plan['cached_calls']:,} answers cached) over "
        f"{plan['documents']:,} documents of {plan['base']}"
        + (f" stratified by {plan['stratify']}" if plan["stratify"] else "")
        + f", ~{plan['tokens']:,} tokens (about 4 characters a token), ~${plan['usd']:,.4f} at "
        f"${plan['price_per_1k']:g} per 1k tokens (set price= in the spec)\ndry run: nothing was sent or written"
    )


__all__ = ["PROMPT_VERSION", "STYLES", "SynthesisConfig", "describe", "dry_run_text", "synthesize"]
