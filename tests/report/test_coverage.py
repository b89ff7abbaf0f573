"""Judgement coverage: click-derived judgements can reverse the order of systems (only what the logging
ranker showed is judged), and the report says so — Judged@10 beside the headline, a warning naming the
systems, who contributed to the judgements, and the condensed-list measure as the headline."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from support.clicks import simulate

from irflow.tasks import ingest
from irflow.tasks.core.runs import read_trec
from irflow.tasks.core.schema import InputError
from irflow.tasks.metrics import evaluate, mean
from irflow.tasks.report.coverage import (
    CONDENSED_HEADLINE,
    condensed_first,
    coverage_note,
    coverage_warning,
    judgement_origin,
)
from irflow.tasks.report.data import headline_of
from irflow.tasks.retrieve.searchers import retrieve
from irflow.tasks.systems.specs import as_spec

SYSTEMS = [str(as_spec(s)) for s in ("bm25", "dense:minilm", "hybrid:bm25+dense:minilm")]  # as metrics.json names them


def test_uneven_coverage_warns_naming_the_systems_and_low_coverage_is_noted() -> None:
    assert coverage_warning({"a": 0.95, "b": 0.91}) is None and coverage_note({"a": 0.95, "b": 0.91}) is None
    assert coverage_warning({"a": 0.45, "b": 0.40}) is None  # even, if low: every system scored down alike
    note = coverage_note({"a": 0.95, "b": 0.89})
    assert note is not None and "b (89%)" in note and "a (" not in note
    uneven = coverage_warning({"a": 1.0, "b": 0.92, "c": 0.89}, labels={"c": "dense"})
    assert uneven is not None and uneven.startswith("a has 100% of its top 10 judged, dense 89%:")
    assert "b 92%" not in uneven and CONDENSED_HEADLINE in uneven


def test_click_and_pooled_judgements_lead_with_the_condensed_list() -> None:
    clicks = {"kind": "clicks", "clicks": {"pairs_judged": 1200}, "logged_by": "bm25"}
    pooled = {"kind": "sheet", "sheet": {"judged": 40, "pooled_from": ["bm25", "dense:minilm"], "pool_depth": 10}}
    assert judgement_origin({"kind": "beir"}) is None
    assert judgement_origin(clicks) == {
        "kind": "clicks",
        "contributors": ["bm25"],
        "description": "derived from a click log (1,200 pairs judged): only documents the logging ranker "
        "(`bm25`) showed can have a judgement",
    }
    origin = judgement_origin(pooled)
    assert origin is not None and origin["contributors"] == ["bm25", "dense:minilm"]
    assert "top 10 of `bm25`, `dense:minilm`" in origin["description"]
    assert condensed_first({"kind": "beir"}, ["nDCG@10", "R@100"]) == ["nDCG@10", "R@100"]
    assert condensed_first(clicks, ["nDCG@10", "R@100"]) == [CONDENSED_HEADLINE, "nDCG@10", "R@100"]
    document = {"coverage": {"origin": origin}}
    assert headline_of(document, ["R@100", "nDCG@10", CONDENSED_HEADLINE]) == CONDENSED_HEADLINE
    assert headline_of({}, ["R@100", "nDCG@10", CONDENSED_HEADLINE]) == "nDCG@10"


def test_a_pooled_sheet_records_the_systems_it_was_pooled_from(tmp_path: Path) -> None:
    from irflow.tasks.evalsets.pool import pool, write_pool

    dataset = ingest.load_dataset("techdocs")
    runs = {"bm25": retrieve(dataset, "bm25", depth=10).run}
    pooled = pool(dataset, runs, 10)
    write_pool(dataset, pooled, tmp_path, {"systems": list(runs), "k": 10, "include_judged": False})
    sheet = pd.read_csv(tmp_path / "sheet.tsv", sep="\t", dtype=str, keep_default_na=False)
    sheet.loc[:4, "grade"] = "2"
    sheet.to_csv(tmp_path / "sheet.tsv", sep="\t", index=False)
    manifest = ingest.import_dataset(tmp_path / "sheet.tsv", "sheet", "techdocs-pooled", base="techdocs")
    assert manifest["source"]["sheet"] == {"judged": 5, "overridden": 0, "pooled_from": ["bm25"], "pool_depth": 10}
    (tmp_path / "pool.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match=r"pool\.json.*cannot read the pool"):
        ingest.import_dataset(tmp_path / "sheet.tsv", "sheet", "techdocs-pooled", base="techdocs")


def test_click_judgements_reverse_the_systems_and_the_report_warns(tmp_path: Path) -> None:
    """BM25's top 10 is what users saw: with its clicks as judgements BM25 beats hybrid, which the true
    judgements rank first (hybrid 0.752 > bm25 0.699 > dense 0.662). The evaluation says why."""
    import irflow

    truth = ingest.load_dataset("techdocs")
    log = simulate(truth.qrels, retrieve(truth, "bm25", depth=100).run, sessions=50, seed=1)
    log.to_csv(tmp_path / "clicks.tsv", sep="\t", index=False)
    ingest.import_dataset(tmp_path / "clicks.tsv", "clicks", "techdocs-clicks", base="techdocs", logged_by="bm25")

    out = tmp_path / "out"
    document = irflow.evaluate("techdocs-clicks", SYSTEMS, metrics=["nDCG@10", "R@100"], output=out).to_dict()
    clicks = {s: document["systems"][s]["nDCG@10"] for s in SYSTEMS}
    runs = {s: _stored_run(out, s) for s in SYSTEMS}
    true = {s: mean(evaluate(runs[s], truth.qrels, ["nDCG@10"]))["nDCG@10"] for s in SYSTEMS}
    hybrid, bm25, dense = SYSTEMS[2], SYSTEMS[0], SYSTEMS[1]
    assert true[hybrid] > true[bm25] > true[dense]
    assert clicks[bm25] > clicks[hybrid] > clicks[dense]  # the flip

    assert document["measures"][0] == CONDENSED_HEADLINE
    coverage = document["coverage"]
    assert coverage["origin"]["contributors"] == ["bm25"]
    assert coverage["systems"][bm25] > 0.95 > 0.9 > coverage["systems"][hybrid] > coverage["systems"][dense]
    assert coverage["warning"].startswith(f"{bm25} has {coverage['systems'][bm25]:.0%} of its top 10 judged, {dense} ")
    assert f", {hybrid} " in coverage["warning"]
    assert json.loads((out / "metrics.json").read_text())["coverage"] == coverage

    report = (out / "report.md").read_text(encoding="utf-8")
    summary = report.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert f"| system | {CONDENSED_HEADLINE} | Judged@10 |" in summary
    assert "**Warning: judgement coverage.**" in summary and "logging ranker (`bm25`)" in summary


def _stored_run(out: Path, system: str) -> pd.DataFrame:
    """A system's run as the result folder stores it (runs/<slug>.trec)."""
    return read_trec(out / "runs" / f"{as_spec(system).slug}.trec")
