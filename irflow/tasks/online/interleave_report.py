"""The interleaving experiment's result: the metrics document, its report.md and its MLflow figures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from irflow.tasks.online.interleave import Outcome
from irflow.tasks.report.format import num, signed
from irflow.tasks.report.recommendations import VERDICT_LEAD
from irflow.tasks.systems.labels import labels_of


def interleave_document(outcome: Outcome, systems: tuple[str, str], **parts: Any) -> dict[str, Any]:
    """``{"interleave": {...}}``: the two systems (``systems``: A's and B's spec; ``labels``: what people read),
    the outcome, the preferred system (its spec or None) and ``parts`` (dataset, click model, CTRs, offline
    metrics, queries to detect, log, settings)."""
    side = {"A": systems[0], "B": systems[1]}
    return {
        "interleave": {
            "systems": side,
            "labels": side_labels({"systems": side}),
            "outcome": outcome.as_dict(),
            "prefers": side.get(outcome.prefers or ""),
            **{k: v for k, v in parts.items() if v is not None},
        }
    }


def side_labels(block: Mapping[str, Any]) -> dict[str, str]:
    """``{"A": label, "B": label}`` of an interleave block: its ``labels``, else (a folder written before
    labels) the systems' default labels (``dense:all-MiniLM-L6-v2``; a log's team names as they are)."""
    if block.get("labels"):
        return dict(block["labels"])
    found = labels_of([block["systems"]["A"], block["systems"]["B"]])
    return {side: found[spec] for side, spec in block["systems"].items()}


def label_of(block: Mapping[str, Any], spec: str | None) -> str | None:
    """The label of ``spec``, one of the block's two systems (None stays None)."""
    named = {block["systems"][side]: label for side, label in side_labels(block).items()}
    return None if spec is None else named.get(spec, spec)


def interleave_metrics(document: Mapping[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics: wins, ties, losses, delta_ab, p_value, ctr_a/b, queries needed by each test."""
    block = document["interleave"]
    out = {k: float(v) for k, v in block["outcome"].items() if k in ("impressions", "wins", "ties", "losses")}
    out |= {"delta_ab": block["outcome"]["delta_ab"], "p_value": block["outcome"]["p_value"]}
    for side, value in (block.get("ctr") or {}).items():
        out[f"ctr_{side.lower()}"] = value
    sizes = block.get("queries_to_detect") or {}
    for test in ("interleaving", "ab_ctr"):
        if (sizes.get(test) or {}).get("queries") is not None:
            out[f"queries_needed_{test}"] = float(sizes[test]["queries"])
    if sizes.get("ratio") is not None:
        out["queries_needed_ratio"] = float(sizes["ratio"])
    return out


def interleave_verdict(document: Mapping[str, Any]) -> str:
    """Which system users prefer, or "no preference" said plainly: the first line of report.md, the last
    of the terminal (``Interleaving.verdict`` says this sentence)."""
    block = document["interleave"]
    labels = side_labels(block)
    a, b = labels["A"], labels["B"]
    o = block["outcome"]
    counts = f"{int(o['wins']):,} A wins, {int(o['ties']):,} ties, {int(o['losses']):,} B wins"
    counts += f" over {int(o['impressions']):,}"
    if block.get("identical_rankings"):
        return (
            f"No preference: {a} and {b} rank every query alike (top {block.get('depth')}), so no number of "
            "queries could tell them apart."
        )
    if block.get("prefers"):
        return (
            f"Users prefer {label_of(block, block['prefers'])} (A = {a}, B = {b}: {counts}; "
            f"p = {o['p_value']:.3g} < α = {o['alpha']})."
        )
    if o["impressions"] and o["ties"] == o["impressions"]:
        return f"No preference: {a} and {b} tie on every impression (identical clicks for both teams)."
    return f"No preference at α = {o['alpha']} between {a} and {b} ({counts}; p = {o['p_value']:.3g})."


def interleave_markdown(document: Mapping[str, Any]) -> str:
    """report.md of an interleaving experiment."""
    block = document["interleave"]
    labels = side_labels(block)
    a, b = labels["A"], labels["B"]
    o = block["outcome"]
    where = (
        f"the log `{block['log']}`"
        if block.get("log")
        else f"{block['dataset']['name']} ({block['dataset']['split']}), {o['impressions']:,} simulated users, "
        f"click model `{block['click_model']['kind']}`, top {block['depth']}, seed {block['seed']}"
    )
    lines = [
        f"# Interleaving: `{a}` (A) vs `{b}` (B)",
        "",
        VERDICT_LEAD + interleave_verdict(document),
        "",
        *[
            f"- {side} = `{labels[side]}`" + ("" if labels[side] == spec else f" (spec `{spec}`)")
            for side, spec in block["systems"].items()
        ],
        "",
        f"Team-draft interleaving (Radlinski, Kurup & Joachims 2008) on {where}.",
        "",
        "| impressions | A wins | ties | B wins | Δ_AB | p (sign test) |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {o['impressions']:,} | {o['wins']:,} | {o['ties']:,} | {o['losses']:,} | {signed(o['delta_ab'])} "
        f"| {o['p_value']:.3g} |",
        "",
        "Δ_AB = (A wins + ½ ties) / impressions − ½ (Chapelle et al. 2012); the two-sided exact sign test "
        "compares A's wins with B's, ties dropped.",
        "",
    ]
    if block.get("offline"):
        lines += ["Offline, on the dataset's judgements:", ""]
        lines += [
            f"- `{label_of(block, s)}`: " + ", ".join(f"{m} {num(v)}" for m, v in ms.items())
            for s, ms in block["offline"].items()
        ]
        lines += [""]
    if block.get("ctr"):
        lines += [
            f"Click-through rate of each system's own list on the same users: A {num(block['ctr']['A'])}, "
            f"B {num(block['ctr']['B'])}.",
            "",
        ]
    sizes = block.get("queries_to_detect")
    if sizes:
        lines += [
            "## Queries needed to detect the preference",
            "",
            f"Smallest number of queries with power ≥ {sizes['power']:.0%} at α = {sizes['alpha']} in the "
            f"population's direction ({sizes['replicates']} seeded experiments per size, drawn from the "
            f"simulated users; sizes grow by {num(sizes['grid_step'], 3)}×):",
            "",
            "| test | prefers | queries needed |",
            "|---|---|---:|",
        ]
        for test, label in (("interleaving", "interleaving (sign test)"), ("ab_ctr", "A/B test of CTR (Welch t)")):
            found = sizes[test]
            n = f"{found['queries']:,}" if found["queries"] is not None else "more than searched"
            lines.append(f"| {label} | {labels.get(found['prefers'] or '', '-')} | {n} |")
        if sizes.get("ratio"):
            lines += ["", f"The A/B test needs {num(sizes['ratio'], 1)}× the queries interleaving needs."]
        lines.append("")
    return "\n".join(lines)


__all__ = [
    "interleave_document",
    "interleave_markdown",
    "interleave_metrics",
    "interleave_verdict",
    "label_of",
    "side_labels",
]
