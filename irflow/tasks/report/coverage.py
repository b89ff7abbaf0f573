"""Judgement coverage: how much of each system's top 10 the qrels judge, and when that decides a comparison.

Every measure but Bpref and the condensed lists counts an unjudged document as not relevant. When the
judgements come from what one system showed — a click log (only the logging ranker's results can be
clicked) or a pool of a few systems (``irflow pool``) — a system that finds other relevant documents is
scored down for them, and the comparison can reverse (Buckley & Voorhees, SIGIR 2004; Sakai, SIGIR 2007;
Joachims et al., WSDM 2017 for click logs). Judged@k (:mod:`irflow.tasks.metrics.judged`) measures it:

    Judged@10 = |top-10 documents with a judgement| / 10

The report shows ``Judged@10`` beside the headline when any system's coverage is below
:data:`LOW_COVERAGE` (a note names them), and warns, naming the systems, when coverage differs by more
than :data:`COVERAGE_SPREAD`: even coverage (sparse judgements, as BEIR's) scores every system down
alike, uneven coverage can reverse the comparison. For
click-derived and pooled judgements it says who contributed to them and leads with the condensed-list
measure :data:`CONDENSED_HEADLINE`, which ranks judged documents only (Sakai 2007).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from irflow.tasks.core.schema import Coverage, JudgementOrigin
from irflow.tasks.metrics import evaluate, mean

COVERAGE_MEASURE = "Judged@10"
LOW_COVERAGE = 0.90  # a system with less of its top 10 judged is warned about
COVERAGE_SPREAD = 0.10  # as are systems whose coverage differs by more than this
CONDENSED_HEADLINE = "nDCG(judged_only=True)@10"


def judgement_origin(source: Mapping[str, Any]) -> JudgementOrigin | None:
    """Click-derived or pooled judgements, from a manifest's ``source`` block; None for any other kind."""
    if "clicks" in source:
        clicks = source["clicks"]
        ranker = source.get("logged_by")
        return {
            "kind": "clicks",
            "contributors": [ranker] if ranker else [],
            "description": (
                f"derived from a click log ({_count(clicks.get('pairs_judged'))} pairs judged): only documents "
                f"the logging ranker{f' (`{ranker}`)' if ranker else ''} showed can have a judgement"
            ),
        }
    if "sheet" in source:
        sheet = source["sheet"]
        pooled = list(sheet.get("pooled_from") or [])
        depth = sheet.get("pool_depth")
        who = f"the top {depth} of " if depth else ""
        names = ", ".join(f"`{s}`" for s in pooled) if pooled else "the systems that were pooled"
        return {
            "kind": "pool",
            "contributors": pooled,
            "description": f"pooled from {who}{names} and judged by hand ({_count(sheet.get('judged'))} pairs)",
        }
    return None


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def judgement_coverage(runs: Mapping[str, pd.DataFrame], qrels: pd.DataFrame) -> dict[str, float]:
    """Mean ``Judged@10`` of each run over the judged queries (a query without a hit counts 0)."""
    return {system: mean(evaluate(run, qrels, [COVERAGE_MEASURE]))[COVERAGE_MEASURE] for system, run in runs.items()}


def _namer(labels: Mapping[str, str] | None) -> Any:
    return (lambda s: labels.get(s, s)) if labels else (lambda s: s)


def coverage_warning(coverage: Mapping[str, float], labels: Mapping[str, str] | None = None) -> str | None:
    """A warning naming the systems whose top 10 is judged more than :data:`COVERAGE_SPREAD` less than the
    best-covered system's: uneven coverage is what can reverse a comparison. None when coverage is even."""
    if len(coverage) < 2:
        return None
    name = _namer(labels)
    best = max(coverage, key=coverage.__getitem__)
    behind = [s for s in coverage if coverage[best] - coverage[s] > COVERAGE_SPREAD]
    if not behind:
        return None
    return (
        f"{name(best)} has {coverage[best]:.0%} of its top 10 judged, "
        + ", ".join(f"{name(s)} {coverage[s]:.0%}" for s in behind)
        + ": unjudged documents count as not relevant, so the less-judged systems are scored down for what the "
        f"judgements never saw; read Bpref and {CONDENSED_HEADLINE} beside the headline"
    )


def coverage_note(coverage: Mapping[str, float], labels: Mapping[str, str] | None = None) -> str | None:
    """A note naming the systems with less than :data:`LOW_COVERAGE` of their top 10 judged (None if none)."""
    name = _namer(labels)
    low = [s for s in coverage if coverage[s] < LOW_COVERAGE]
    if not low:
        return None
    return (
        f"less than {LOW_COVERAGE:.0%} of the top 10 is judged for "
        + ", ".join(f"{name(s)} ({coverage[s]:.0%})" for s in low)
        + ": unjudged documents count as not relevant (sparse judgements, as BEIR's, do this to every system; "
        "a comparison stays fair while the coverage is even)"
    )


def coverage_block(
    runs: Mapping[str, pd.DataFrame], qrels: pd.DataFrame, source: Mapping[str, Any] | None = None
) -> Coverage:
    """metrics.json's ``coverage``: Judged@10 per system, the warning if any, the judgements' origin."""
    systems = judgement_coverage(runs, qrels)
    block: Coverage = {"measure": COVERAGE_MEASURE, "systems": systems}
    warning, note = coverage_warning(systems), coverage_note(systems)
    if warning:
        block["warning"] = warning
    if note:
        block["note"] = note
    origin = judgement_origin(source or {})
    if origin:
        block["origin"] = origin
    return block


def condensed_first(source: Mapping[str, Any], measures: Sequence[str]) -> list[str]:
    """The measures to compute on a split: click-derived and pooled judgements lead with the condensed list."""
    if judgement_origin(source) is None:
        return list(measures)
    return [CONDENSED_HEADLINE, *(m for m in measures if m != CONDENSED_HEADLINE)]


def shown_coverage(document: Mapping[str, Any]) -> dict[str, float] | None:
    """Judged@10 per system when the report shows it beside the headline (a system below 90%, uneven
    coverage, or click-derived or pooled judgements); None otherwise."""
    coverage = document.get("coverage") or {}
    shown = coverage.get("warning") or coverage.get("note") or coverage.get("origin")
    return coverage.get("systems") if shown else None


def coverage_notes(document: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    """report.md's notes under the summary table: where the judgements come from, and the warning."""
    coverage = document.get("coverage") or {}
    lines = []
    origin = coverage.get("origin")
    if origin:
        others = [labels.get(s, s) for s in document.get("systems", {}) if s not in origin["contributors"]]
        lines.append(
            f"> **Judgements.** {_capital(origin['description'])}. "
            + (f"{', '.join(others)} did not contribute to them: " if origin["contributors"] and others else "")
            + f"a document no contributor returned is unjudged, so the headline is {CONDENSED_HEADLINE} "
            "(judged documents only); read nDCG@10 with care."
        )
    systems = coverage.get("systems", {})
    if coverage.get("warning"):
        lines.append(f"> **Warning: judgement coverage.** {_capital(coverage_warning(systems, labels) or '')}.")
    elif coverage.get("note"):
        lines.append(f"> **Judgement coverage.** {_capital(coverage_note(systems, labels) or '')}.")
    return [line for text in lines for line in (text, "")]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
