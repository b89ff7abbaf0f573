"""The report a person reads: techdocs (BM25 vs dense) and SciFact (BM25 vs BM25 with other parameters),
rebuilt from stored files only, and refusing bad input."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pandas as pd
import pytest

from irflow.tasks.compare.significance import compare_systems
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.metrics import evaluate, mean
from irflow.tasks.report import plots
from irflow.tasks.report.write import (
    SystemEvaluation,
    check_same_dataset,
    combine_results,
    load_results,
    rebuild_report,
    write_outputs,
)
from irflow.tasks.retrieve.searchers import measure_latency, retrieve

MEASURES = ["nDCG@10", "nDCG@100", "R@10", "R@100", "P@10", "RR@10"]
DENSE = "dense:sentence-transformers/all-MiniLM-L6-v2"
PNG = b"\x89PNG\r\n\x1a\n"


def evaluations(dataset: Dataset, systems: list[str], latency: bool = True) -> list[SystemEvaluation]:
    out = []
    for system in systems:
        result = retrieve(dataset, system, 100)
        per_query = evaluate(result.run, dataset.qrels, MEASURES)
        cost: dict = {"retrieve_seconds": result.search_seconds}
        if latency:
            report = measure_latency(dataset, system, depth=100, warmup=2, num_runs=1, sample=20)
            cost.update({k: v for k, v in vars(report).items() if k not in ("system", "info")})
        out.append(SystemEvaluation(result.system, result.run, per_query, mean(per_query), cost))
    return out


@pytest.fixture(scope="module")
def techdocs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Dataset, list[SystemEvaluation], Path]]:
    """techdocs, BM25 vs dense MiniLM, written once to a result folder."""
    cache = tmp_path_factory.mktemp("techdocs-cache")
    with mock.patch.dict(os.environ, {"IRFLOW_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}):
        from irflow.tasks.ingest import load_dataset

        dataset = load_dataset("techdocs")
        evals = evaluations(dataset, ["bm25", "dense:minilm"])
        out = tmp_path_factory.mktemp("techdocs-report")
        write_outputs(out, dataset, evals, MEASURES, 100)
        yield dataset, evals, out


def sections(report: str) -> list[str]:
    return re.findall(r"^#+ (.+)$", report, flags=re.M)


def test_techdocs_report_compares_bm25_with_dense(techdocs: tuple[Dataset, list[SystemEvaluation], Path]) -> None:
    dataset, evals, out = techdocs
    report = (out / "report.md").read_text(encoding="utf-8")
    document = json.loads((out / "metrics.json").read_text())
    assert document["baseline"] == "bm25"
    for title in [
        "Summary",
        "Recommendations",
        "Significance",
        "Segments",
        "By category",
        "By difficulty",
        "Share of doc_type: top 10 vs relevant",
        "Length bias",
        "Disagreements",
        "Consistency",
        "Cost",
    ]:
        assert title in sections(report), title
    assert not re.search(r"\bnan\b", report, flags=re.I)

    table = pd.read_csv(out / "significance.csv")
    assert table["metric"].tolist() == MEASURES and set(table["candidate"]) == {DENSE}
    assert table[["p_ttest", "p_wilcoxon", "p_randomization", "p_adjusted"]].stack().between(0, 1).all()
    # the summary row of the dense model carries the numbers of significance.csv
    row = table.iloc[0]
    summary_section = report.split("## Summary", 1)[1].split("\n## ", 1)[0]
    summary = next(line for line in summary_section.splitlines() if line.startswith("| dense:all-MiniLM-L6-v2 |"))
    assert f"{row.delta:+.4f}" in summary and f"[{row.ci_low:+.4f}, {row.ci_high:+.4f}]" in summary
    assert f"{row.wins}/{row.ties}/{row.losses}" in summary
    p95 = document["cost"][DENSE]["p95_ms"]
    assert f"{p95:.1f}" in summary

    # disagreements name queries with their text and both top 5, with grades
    worst = (
        evals[0].per_query.set_index(["query_id", "metric"])["value"].xs("nDCG@10", level="metric")
        - evals[1].per_query.set_index(["query_id", "metric"])["value"].xs("nDCG@10", level="metric")
    ).abs()
    top_query = worst.sort_values(ascending=False, kind="mergesort").index[0]
    text = dataset.queries.set_index("query_id").loc[top_query, "text"]
    assert f"**{top_query}** — “{text}”" in report

    files = sorted(p.name for p in (out / "plots").glob("*.png"))
    for name in [
        "per_query_ndcg_at_10.png",
        "metric_at_k.png",
        "latency.png",
        "difference_ndcg_at_10.png",
        "segment_category.png",
        "documents_doc_type.png",
    ]:
        assert name in files and (out / "plots" / name).read_bytes().startswith(PNG)
        assert f"(plots/{name})" in report


def test_rebuild_from_stored_files_gives_the_same_report(
    techdocs: tuple[Dataset, list[SystemEvaluation], Path], tmp_path: Path
) -> None:
    _, _, out = techdocs
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    for derived in ("report.md", "significance.csv"):
        (copy / derived).unlink()
    shutil.rmtree(copy / "plots")
    path = rebuild_report(copy)  # re-loads techdocs by name (into this test's empty cache) and checks its fingerprint
    assert path.read_text(encoding="utf-8") == (out / "report.md").read_text(encoding="utf-8")
    assert (copy / "significance.csv").read_bytes() == (out / "significance.csv").read_bytes()
    assert sorted(p.name for p in (copy / "plots").iterdir()) == sorted(p.name for p in (out / "plots").iterdir())

    bare = rebuild_report(copy, load=False, permutations=500).read_text(encoding="utf-8")
    assert "## Significance" in bare and "## Disagreements" in bare and "No dataset loaded" in bare
    assert "500 sign flips" in bare
    assert not (copy / "plots" / "segment_category.png").exists()  # no stale plot of the earlier build survives
    assert "(plots/per_query_ndcg_at_10.png)" in bare and (copy / "plots" / "per_query_ndcg_at_10.png").is_file()


@pytest.mark.e2e
def test_report_command_rebuilds_a_result_folder(
    techdocs: tuple[Dataset, list[SystemEvaluation], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from irflow.cli.main import main

    copy = tmp_path / "run"
    shutil.copytree(techdocs[2], copy)
    (copy / "report.md").unlink()
    assert main(["report", str(copy), "--no-dataset", "--permutations", "1000", "--seed", "3"]) == 0
    assert "report.md" in capsys.readouterr().out
    assert "1,000 sign flips, seed 3" in (copy / "report.md").read_text(encoding="utf-8")
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "no such folder; expected a result folder" in capsys.readouterr().err


def test_baseline_is_stored_and_leads_the_comparison(
    techdocs: tuple[Dataset, list[SystemEvaluation], Path], tmp_path: Path
) -> None:
    dataset, evals, _ = techdocs
    document = write_outputs(
        tmp_path, dataset, evals, MEASURES, 100, baseline="dense:minilm", permutations=500, bootstrap=500, seed=7
    )
    assert document["baseline"] == DENSE
    assert document["significance"] == {
        "permutations": 500,
        "bootstrap": 500,
        "seed": 7,
        "alpha": 0.05,
        "correction": "holm",
        "ci": "bca",
    }
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "500 sign flips, seed 7" in report
    assert "500 resamples, BCa, Efron 1987, expanded for small samples" in report
    assert "Wilcoxon signed-rank (zero differences dropped" in report and "here: " in report
    assert rebuild_report(tmp_path, dataset).read_text(encoding="utf-8") == report  # the stored options are reused
    table = pd.read_csv(tmp_path / "significance.csv")
    assert set(table["baseline"]) == {DENSE} and set(table["candidate"]) == {"bm25"}
    assert "| dense:all-MiniLM-L6-v2 (baseline) |" in (tmp_path / "report.md").read_text(encoding="utf-8")
    with pytest.raises(InputError, match="not one of the evaluated systems"):
        write_outputs(tmp_path / "x", dataset, evals, MEASURES, 100, baseline="bm25:k1=2")
    with pytest.raises(InputError, match="unknown significance options"):
        write_outputs(tmp_path / "y", dataset, evals, MEASURES, 100, permutation=5)


def test_runs_over_different_datasets_are_refused(
    techdocs: tuple[Dataset, list[SystemEvaluation], Path], tmp_path: Path
) -> None:
    dataset, evals, out = techdocs
    other = Dataset(
        "techdocs",
        "test",
        dataset.corpus,
        dataset.queries.iloc[:40],
        dataset.qrels,
        {**dataset.manifest, "fingerprint": "f" * 64},
    )
    with pytest.raises(InputError, match=f"{dataset.fingerprint}.*{'f' * 64}"):
        rebuild_report(out, other)
    write_outputs(tmp_path, other, evals, MEASURES, 100, permutations=200, bootstrap=200)
    with pytest.raises(InputError, match="different datasets"):
        combine_results([load_results(out), load_results(tmp_path)])
    with pytest.raises(InputError, match="f{64}"):
        check_same_dataset(
            [json.loads((out / "metrics.json").read_text()), json.loads((tmp_path / "metrics.json").read_text())]
        )


def test_combined_result_folders_compare_last_night_with_tonight(
    techdocs: tuple[Dataset, list[SystemEvaluation], Path],
) -> None:
    out = techdocs[2]
    with pytest.raises(InputError, match="appears in two result folders"):
        combine_results([load_results(out), load_results(out)])
    both = combine_results([load_results(out), load_results(out)], labels=["last", "tonight"])
    assert both.systems == ["last/bm25", f"last/{DENSE}", "tonight/bm25", f"tonight/{DENSE}"]
    table = compare_systems(both.per_query, "nDCG@10", "last/bm25", permutations=200, bootstrap=200)
    same = table.set_index("candidate").loc["tonight/bm25"]
    assert (same.delta, same.p_randomization, same.ties) == (0.0, 1.0, len(techdocs[0].queries))


def test_fewer_than_two_shared_queries_is_an_error(
    techdocs: tuple[Dataset, list[SystemEvaluation], Path], tmp_path: Path
) -> None:
    dataset, evals, _ = techdocs
    one = [
        SystemEvaluation(e.system, e.run, e.per_query[e.per_query["query_id"] == "td-q-001"], e.means, e.cost)
        for e in evals
    ]
    with pytest.raises(InputError, match="at least 2 queries"):
        write_outputs(tmp_path, dataset, one, MEASURES, 100)
    assert not (tmp_path / "report.md").exists()


def test_latency_plot_uses_raw_samples_when_present(tmp_path: Path) -> None:
    costs = {
        "a": {"p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "mean_ms": 1.2, "samples_ms": [0.5, 1, 1, 2, 3]},
        "b": {"p50_ms": 10.0, "p95_ms": 20.0, "p99_ms": 30.0, "mean_ms": 12.0},
    }
    path = plots.latency(costs, tmp_path / "latency.png", {"a": "a", "b": "b"})
    assert path.read_bytes().startswith(PNG)


@pytest.mark.shared
def test_scifact_report_with_two_bm25_variants(beir_dataset: Callable[..., Dataset], tmp_path: Path) -> None:
    dataset = beir_dataset("scifact")
    evals = evaluations(dataset, ["bm25", "bm25:k1=1.2,b=0.75"], latency=False)
    write_outputs(tmp_path, dataset, evals, MEASURES, 100)
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    table = pd.read_csv(tmp_path / "significance.csv")
    assert (table["n"] == len(dataset.queries)).all() and len(table) == len(MEASURES)
    assert table[["delta", "ci_low", "ci_high", "effect_size", "p_randomization"]].map(math.isfinite).all().all()
    for title in [
        "Significance",
        "By query length",
        "By relevant documents",
        "Length bias",
        "Disagreements",
        "bm25:k1=1.2,b=0.75 vs bm25",
    ]:
        assert title in sections(report), title
    assert not re.search(r"\bnan\b", report, flags=re.I)
    assert "P95 latency ms" in report and (tmp_path / "plots" / "segment_query_length.png").is_file()
    assert not (tmp_path / "plots" / "latency.png").exists()  # nothing measured, nothing drawn
    with pytest.raises(InputError, match="different datasets"):
        rebuild_report(
            tmp_path, Dataset("x", "test", dataset.corpus, dataset.queries, dataset.qrels, {"fingerprint": "0" * 64})
        )
    rebuilt = rebuild_report(tmp_path, dataset).read_text(encoding="utf-8")
    assert rebuilt == report
