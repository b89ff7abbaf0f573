"""One story in every output: the correction's family is stated, ties are ties, cached stages carry no
timing, cost figures say what they measured, plots draw only what was measured, the terminal is quiet.

Pure functions on small synthetic results (no retrieval, no server); the real CLI's output is checked in
test_install.py (the demo as typed, support.quiet) and test_quiet_cli.py.
"""

from __future__ import annotations

import itertools
import logging
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from irflow.cli.terminal import QuietFilter, ShortFormatter, failures_text, metrics_table
from irflow.tasks.compare.family import ComparisonFamily, families
from irflow.tasks.compare.significance import compare_systems, format_p
from irflow.tasks.report import plots
from irflow.tasks.report.data import analyse
from irflow.tasks.report.markdown import markdown_report
from irflow.tasks.report.recommendations import read_verdict, recommendations, two_values
from irflow.tasks.report.results import StoredResults
from irflow.tasks.retrieve.costs import fresh_costs

FAST = {"permutations": 200, "bootstrap": 200}
DENSE = "dense:sentence-transformers/all-MiniLM-L6-v2"
HYBRID = "hybrid:bm25+dense:sentence-transformers/all-MiniLM-L6-v2"


def stored(values: dict[str, np.ndarray], cost: dict | None = None) -> StoredResults:
    """A result folder's contents with nDCG@10 and R@100 per query for each system (runs: one hit each)."""
    n = len(next(iter(values.values())))
    qids = [f"q{i:02d}" for i in range(n)]
    rows = [
        (s, q, m, float(v[i]) if m == "nDCG@10" else float(min(1.0, v[i] + 0.1)))
        for s, v in values.items()
        for m in ("nDCG@10", "R@100")
        for i, q in enumerate(qids)
    ]
    per_query = pd.DataFrame(rows, columns=["system", "query_id", "metric", "value"])
    means = per_query.groupby(["system", "metric"])["value"].mean()
    document = {
        "dataset": {"name": "toy", "split": "test", "documents": 10, "queries": n, "judgements": n, "fingerprint": "0"},
        "depth": 10,
        "measures": ["nDCG@10", "R@100"],
        "systems": {s: {m: float(means[(s, m)]) for m in ("nDCG@10", "R@100")} for s in values},
        "cost": cost or {},
        "significance": FAST,
    }
    runs = {
        s: pd.DataFrame({"query_id": qids, "doc_id": ["d0"] * n, "score": [1.0] * n, "rank": [1] * n}) for s in values
    }
    return StoredResults(document, per_query, runs)


def three_systems() -> StoredResults:
    rng = np.random.default_rng(0)
    base = rng.random(30)
    return stored({"bm25": base, DENSE: np.clip(base + 0.05, 0, 1), HYBRID: np.clip(base + 0.2, 0, 1)})


def test_family_is_a_value_that_states_method_size_and_pairs() -> None:
    table = compare_systems(three_systems().per_query, "nDCG@10", "bm25", **FAST)
    (family,) = families(table)
    assert family == ComparisonFamily("holm", ("nDCG@10",), (("bm25", DENSE), ("bm25", HYBRID)))
    text = family.describe(plots.short_labels(["bm25", DENSE, HYBRID]))
    assert text.startswith("Holm (1979) over a family of 2 comparisons (nDCG@10: ")
    assert "dense:all-MiniLM-L6-v2 vs bm25" in text and "hybrid:bm25+dense:all-MiniLM-L6-v2 vs bm25" in text
    assert "single comparison" in ComparisonFamily("bonferroni", ("P@10",), (("a", "b"),)).describe()
    assert ComparisonFamily("holm", ("P@10",), ()).describe() == "no comparison, so no correction"
    pairs = families(compare_systems(three_systems().per_query, "nDCG@10", "bm25", all_pairs=True, **FAST))
    assert pairs[0].size == 3


def test_report_states_the_family_of_each_correction() -> None:
    results = three_systems()
    report = markdown_report(results.document, analyse(results))
    assert "Adjusted p: Holm (1979) over a family of 2 comparisons (nDCG@10: dense:all-MiniLM-L6-v2 vs bm25" in report
    assert "each of the other 1 metrics is a family of its own" in report
    assert "All pairs on nDCG@10; adjusted p: Holm (1979) over a family of 3 comparisons" in report


def test_one_system_report_says_nothing_is_compared() -> None:
    results = stored({"bm25": np.linspace(0, 1, 12)})
    report = markdown_report(results.document, analyse(results))
    assert "0 comparison" not in report and "corrected over" not in report
    assert "Only one system: nothing is compared, so nothing is corrected." in report


def test_recommendations_count_exact_ties_as_ties() -> None:
    values = np.linspace(0.1, 0.9, 20)
    results = stored({"bm25": values, "bm25:k1=0.9,b=0.4": values.copy(), HYBRID: values * 0.5})
    data = analyse(results)
    segment = pd.DataFrame(
        {
            "topic": ["a", "b"],
            "queries": [10, 10],
            "bm25": [0.221, 0.5],
            "bm25:k1=0.9,b=0.4": [0.221, 0.5],
            HYBRID: [0.1, 0.2],
        }
    )
    data.segments["topic"] = segment
    lines = recommendations(results.document, data)
    text = " ".join(lines)
    assert "0.221 vs 0.221" not in text and "is not the best" not in text
    assert any(line.startswith("Tied: bm25:k1=0.9,b=0.4 has the same mean nDCG@10 as bm25") for line in lines)
    assert "topic = a (10 queries: bm25:k1=0.9,b=0.4 tied at 0.221)" in text
    assert two_values(0.2214, 0.2206) == "0.2214 vs 0.2206"  # close values are told apart, never printed alike


def test_cached_stages_carry_no_timing() -> None:
    cost = {"index_build_seconds": 11.1, "documents_per_second": 900.0, "p50_ms": 1.0}
    bm25 = {"index_cached": True, "index_build_seconds": 11.1}
    dense = {"index_from_cache": False, "index_build_seconds": 0.2}
    warm = fresh_costs(cost, bm25, [{"cached": True, "encoded": 385, "seconds": 4.0}])
    assert "index_build_seconds" not in warm and "documents_per_second" not in warm
    assert warm["cached"] == ["index", "embeddings"] and warm["p50_ms"] == 1.0
    hybrid = {"members": {"bm25": bm25, DENSE: dense}}
    part = fresh_costs(cost, hybrid, [{"cached": False, "encoded": 400, "seconds": 2.0}])
    assert part["index_build_seconds"] == pytest.approx(0.2) and part["documents_per_second"] == 200.0
    assert part["cached"] == ["index (1 of 2)"]
    assert fresh_costs(cost, dense) == cost  # nothing loaded from a cache: unchanged


def test_cost_section_says_cached_and_what_was_timed() -> None:
    timed = {"queries": 100, "queries_total": 300, "num_runs": 3, "warmup": 10, "threads": 1}
    spread = {"p50_ms_min": 1.1, "p50_ms_max": 1.4, "p50_ms_ci_low": 1.0, "p50_ms_ci_high": 1.5, "load_before": 2.5}
    cost = {
        "bm25": {"p50_ms": 1.2, "p95_ms": 2.0, "p99_ms": 3.0, "cached": ["index"], **timed, **spread},
        HYBRID: {"p50_ms": 9.0, "p95_ms": 12.0, "p99_ms": 15.0, "index_build_seconds": 0.4, **timed},
    }
    rng = np.random.default_rng(1)
    results = stored({"bm25": rng.random(20), HYBRID: rng.random(20)}, cost)
    report = markdown_report(results.document, analyse(results))
    cost_part = report[report.index("## Cost") :]
    assert "| bm25 | 1.2 | 2.0 | 3.0 | - | cached | - | - |" in cost_part
    assert "index build s 11" not in cost_part
    assert (
        "Each system timed on 100 of 300 queries (seeded sample), each query searched on its own 3 time(s)" in cost_part
    )
    assert "| bm25 | 100 of 300 queries (seeded sample) | 3 | 1.10–1.40 | [1.00, 1.50] | - | 2.50 |" in cost_part


def test_metric_at_k_draws_markers_only(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    curves = pd.DataFrame(
        {"family": ["R"] * 4, "k": [10, 100] * 2, "system": ["a", "a", "b", "b"], "value": [0.5, 0.8, 0.6, 0.9]}
    )
    with pytest.MonkeyPatch.context() as mp:
        figures = []
        mp.setattr(plt, "close", lambda fig=None: figures.append(fig))
        plots.metric_curves(curves, tmp_path / "curves.png", {"a": "a", "b": "b"})
    ax = figures[-1].axes[0]
    assert all(len(line.get_xdata()) < 2 for line in ax.get_lines())  # no line between k=10 and k=100
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "100"]


def test_latency_median_is_neutral_and_log_labels_are_few(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    cost = {
        "p50_ms": 1.0,
        "p95_ms": 2.0,
        "p99_ms": 3.0,
        "mean_ms": 1.2,
        "queries": 5,
        "queries_total": 9,
        "num_runs": 1,
    }
    costs = {
        "a": {**cost, "samples_ms": [0.8, 1.0, 1.1, 2.0, 3.0]},
        "b": {**cost, "samples_ms": [5.0, 6.0, 7.0, 8.0, 9.0]},
    }
    with pytest.MonkeyPatch.context() as mp:
        figures = []
        mp.setattr(plt, "close", lambda fig=None: figures.append(fig))
        plots.latency(costs, tmp_path / "latency.png", {"a": "a", "b": "b"})
    ax = figures[-1].axes[0]
    ax.figure.canvas.draw()
    medians = [line for line in ax.get_lines() if line.get_linewidth() == 1.5]  # matplotlib's default is 'C1'
    assert len(medians) == 2 and {line.get_color() for line in medians} == {"black"}
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
    assert len(labels) <= 8 and "5 of 9 queries × 1 repeat" in ax.get_xlabel()


def test_terminal_table_uses_short_labels_and_fits_120_columns() -> None:
    measures = ["nDCG@10", "nDCG@100", "R@10", "R@100", "P@10", "RR@10", "AP@100", "Success@10", "Rprec", "P@100"]
    systems = {s: {m: 0.5 for m in measures} for s in ["bm25", DENSE, HYBRID]}
    document = {
        "dataset": {"name": "techdocs", "split": "test", "queries": 80},
        "measures": measures,
        "systems": systems,
    }
    lines = metrics_table(document).splitlines()
    assert max(map(len, lines)) <= 120
    assert lines[4].startswith("hybrid:bm25+dense:all-MiniLM-L6-v2 ")
    assert any(line.startswith("(not shown, in metrics.json and report.md: ") for line in lines)
    assert f"hybrid:bm25+dense:all-MiniLM-L6-v2 = {HYBRID}" in lines


@pytest.mark.parametrize(
    ("name", "level", "verbose", "shown"),
    [
        ("distributed.scheduler", logging.INFO, False, False),
        ("faiss.loader", logging.INFO, False, False),
        ("mlflow.store.db.utils", logging.INFO, False, False),
        ("prefect.runner", logging.INFO, False, False),
        ("distributed.scheduler", logging.WARNING, False, True),
        ("irflow.tasks.embed.vectors", logging.INFO, False, True),
        ("prefect.task_runs", logging.INFO, False, False),  # Prefect's run states: with -v only
        ("prefect.flow_runs", logging.INFO, False, False),
        ("prefect.task_runs", logging.INFO, True, True),
        ("irflow.tasks.embed.vectors", logging.DEBUG, False, False),
        ("faiss.loader", logging.INFO, True, True),
        ("irflow.tasks.embed.vectors", logging.DEBUG, True, True),
    ],
)
def test_third_party_info_is_quiet_unless_verbose(name: str, level: int, verbose: bool, shown: bool) -> None:
    quiet = QuietFilter(logging.DEBUG, logging.INFO) if verbose else QuietFilter(logging.INFO, logging.WARNING)
    assert quiet.filter(logging.LogRecord(name, level, __file__, 1, "message", None, None)) is shown


def test_recommendation_names_the_family_of_its_adjusted_p() -> None:
    rng = np.random.default_rng(3)
    base = rng.random(20)
    results = stored({"bm25": base, DENSE: np.clip(base + rng.normal(0.02, 0.2, 20), 0, 1)})
    data = analyse(results)
    assert data.comparisons.loc[0, "p_adjusted"] > 0.05 and data.comparisons.loc[0, "delta"] > 0
    (first, *_) = recommendations(results.document, data)
    assert "not significant after correction (a single comparison, so Holm (1979) leaves its p unchanged;" in first


def _summary_rows(report: str) -> list[list[str]]:
    summary = report.split("## Summary", 1)[1].split("\n## ", 1)[0].splitlines()
    start = next(i for i, line in enumerate(summary) if line.startswith("| "))
    table = [line for line in itertools.takewhile(lambda line: line.startswith("|"), summary[start:])]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table]


def test_verdict_comes_first_and_says_the_gain_holds() -> None:
    results = three_systems()
    data = analyse(results)
    report = markdown_report(results.document, data)
    lines = report.splitlines()
    assert lines[0].startswith("# Evaluation of toy") and lines[2].startswith("**Verdict.** ")
    row = data.comparisons.set_index(["metric", "candidate"]).loc[("nDCG@10", HYBRID)]
    assert row.significant
    label = data.labels[HYBRID]
    assert lines[2].startswith(f"**Verdict.** {label} is best on nDCG@10: ")
    assert f"{row.delta:+.4f} (unadjusted 95% CI {row.ci_low:+.4f} to {row.ci_high:+.4f})" in lines[2]
    assert "the gain holds after Holm correction over 2 comparisons" in lines[2]
    header, _, *rows = _summary_rows(report)
    assert "95% CI of Δ (unadjusted)" in header
    sig = header.index("sig")
    dense = data.comparisons.set_index(["metric", "candidate"]).loc[("nDCG@10", DENSE)]
    assert [r[sig] for r in rows] == ["-", "▲" if dense.significant else "-", "▲"]
    assert read_verdict(report) == "Verdict: " + lines[2].removeprefix("**Verdict.** ")


def test_an_interval_that_disagrees_with_its_adjusted_p_is_marked_and_explained() -> None:
    results = three_systems()
    data = analyse(results)
    table = data.comparisons.copy()
    first = table.index[(table["metric"] == "nDCG@10") & (table["candidate"] == HYBRID)][0]
    table.loc[first, ["ci_low", "ci_high", "p_adjusted", "significant"]] = [0.004, 0.096, 0.051, False]
    report = markdown_report(results.document, replace(data, comparisons=table))
    verdict = read_verdict(report) or ""
    assert "the gain does not hold after Holm correction over 2 comparisons (adjusted p 0.051 ≥ 0.05)" in verdict
    header, _, *rows = _summary_rows(report)
    hybrid = next(r for r in rows if r[0] == data.labels[HYBRID])
    assert hybrid[header.index("95% CI of Δ (unadjusted)")] == "[+0.0040, +0.0960] †"
    assert hybrid[header.index("sig")] == "-"
    assert "† The interval and the adjusted p disagree: the 95% CI is unadjusted" in report
    assert "randomization test differ at the edge" not in report  # only the case that occurs is explained


def test_verdict_keeps_the_baseline_when_nothing_beats_it() -> None:
    rng = np.random.default_rng(1)
    base = rng.random(30)
    results = stored({"bm25": base, DENSE: np.clip(base - 0.3, 0, 1)})
    data = analyse(results)
    verdict = read_verdict(markdown_report(results.document, data)) or ""
    row = data.comparisons.iloc[0]
    assert verdict.startswith(f"Verdict: No system beats the baseline bm25 on nDCG@10 ({base.mean():.4f}); ")
    assert f"the closest, {data.labels[DENSE]}, is {row.delta:+.4f}" in verdict
    assert (
        "and significantly worse (adjusted p " in verdict and ", a single comparison (nothing to correct))." in verdict
    )


def test_terminal_lines_are_single_and_failed_runs_are_left_to_irflow(tmp_path: Path) -> None:
    log = tmp_path / "irflow.log"
    short = ShortFormatter("%(levelname)s %(name)s: %(message)s", log)
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("irflow.x", logging.ERROR, __file__, 1, "failed\nsecond line", None, sys.exc_info())
    assert short.format(record) == f"ERROR irflow.x: failed (traceback in {log})"
    assert short.format(record) == "ERROR irflow.x: failed"  # the log file is named once
    progress = logging.LogRecord("prefect.flow_runs", logging.INFO, __file__, 1, "x" * 200, None, None)
    assert len(short.format(progress)) == 120 and short.format(progress).endswith("x…")
    warning = logging.LogRecord("irflow.x", logging.WARNING, __file__, 1, "y" * 200, None, None)
    assert short.format(warning).endswith("y" * 200)  # a warning is never cut
    quiet = QuietFilter(logging.INFO, logging.WARNING, run_failures=False)

    def shown(name: str, level: int, message: str) -> bool:
        return quiet.filter(logging.LogRecord(name, level, __file__, 1, message, None, None))

    assert not shown("prefect.task_runs", logging.ERROR, "Task run failed with exception: ChromaError(...)")
    assert not shown("prefect.flow_runs", logging.INFO, "Finished in state Failed('1 of 2 systems failed')")
    assert not shown("prefect.task_runs", logging.INFO, "Finished in state Completed()")  # with -v only
    assert shown("prefect.task_runs", logging.WARNING, "Task run 'x' is still running")
    retry = "Task run failed with exception: OSError('reset') - Retry 1/2 will start 10 second(s) from now"
    assert shown("prefect.task_runs", logging.ERROR, retry)  # what happens next, said in its one line
    assert shown("irflow.flows", logging.ERROR, "something irflow says itself")


def test_quiet_logging_stops_mlflows_view_run_lines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mlflow.environment_variables import MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT

    from irflow.cli.terminal import configure_logging

    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(tmp_path))
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        assert not MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.get()
        configure_logging(verbose=False)
        assert MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.get()  # what MLflow's end_run reads before printing them
        logging.getLogger("irflow.test").warning("kept whole")
        assert "kept whole" in (tmp_path / "logs" / "irflow.log").read_text()
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])


def test_given_labels_name_systems_in_the_report_and_the_terminal() -> None:
    results = three_systems()
    results.document["labels"] = {HYBRID: "fused"}
    data = analyse(results)
    report = markdown_report(results.document, data)
    assert data.labels == {"bm25": "bm25", DENSE: "dense:all-MiniLM-L6-v2", HYBRID: "fused"}
    assert (read_verdict(report) or "").startswith("Verdict: fused is best on nDCG@10")
    assert "| fused | `hybrid:bm25+dense:sentence-transformers/all-MiniLM-L6-v2` |" in report
    table = metrics_table({**results.document, "dataset": {"name": "toy", "split": "test", "queries": 30}})
    assert "\nfused " in table and f"fused = {HYBRID}" in table


def test_verdict_of_a_single_comparison_says_nothing_was_corrected() -> None:
    rng = np.random.default_rng(2)
    base = rng.random(30)
    results = stored({"bm25": base, DENSE: np.clip(base + 0.25, 0, 1)})
    data = analyse(results)
    verdict = read_verdict(markdown_report(results.document, data)) or ""
    assert data.comparisons.iloc[0]["significant"]
    assert verdict.endswith(
        f"the gain is significant (p {format_p(data.comparisons.iloc[0]['p_adjusted'])}, "
        "a single comparison (nothing to correct))."
    )


def test_a_failed_system_is_named_by_its_label_with_its_spec() -> None:
    spec = "dense:sentence-transformers/all-MiniLM-L6-v2"
    assert failures_text({"failed": {spec: "OSError: boom", "bm25": "x"}}).splitlines() == [
        "failed: dense:all-MiniLM-L6-v2: OSError: boom",
        f"dense:all-MiniLM-L6-v2 = {spec}",
        "failed: bm25: x",
    ]
