"""``irflow.Evaluation``: what one evaluation computed, typed; ``save`` writes the result folder `irflow run`
writes, ``load`` reads any such folder back.

Everything a person reads is named by the system's label (``dense:all-MiniLM-L6-v2``, or the label given);
the full spec is in :attr:`Evaluation.systems`. A result folder keys its files by spec, as it always has.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.api._results import same
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.report.results import StoredResults, load_results
from irflow.tasks.report.write import SCHEMA_VERSION, save_results

COMPARISON_COLUMNS = (
    "system",
    "metric",
    "baseline",
    "delta",
    "ci_low",
    "ci_high",
    "p_value",
    "p_adjusted",
    "significant",
    "wins",
    "ties",
    "losses",
)
"""The leading columns of :attr:`Evaluation.comparisons` (the tests' other figures follow them)."""


@dataclass(frozen=True)
class Coverage:
    """How much of each system's top 10 is judged (``Judged@10``), and what the report says about it."""

    measure: str
    judged: dict[str, float]  # label -> share of the top 10 that is judged
    warning: str | None = None
    note: str | None = None
    origin: str | None = None  # where judgements of click logs or pools come from, in words


@dataclass(frozen=True)
class Tracking:
    """The MLflow run an evaluation was logged to."""

    run_id: str
    experiment_id: str | None = None
    experiment: str | None = None
    url: str | None = None


@dataclass(frozen=True)
class EvaluationParts:
    """What an :class:`Evaluation` keeps besides its tables, for its own use (saving, the report, tracking): none
    of it is compared or shown."""

    results: StoredResults | None = None  # the folder's content, keyed by spec
    dataset: Dataset | None = None  # segments, snippets in the report
    report: Any = None  # the report's analysis (tasks.report.ReportData), computed once
    retrieval_info: dict[str, Any] = field(default_factory=dict)  # spec -> how it ran (MLflow params)
    encodings: dict[str, Any] = field(default_factory=dict)  # dense spec -> what the embed stage did


@dataclass(frozen=True, eq=False)
class Evaluation:
    """One dataset × systems × metrics, computed (:func:`irflow.evaluate`) or read back (:meth:`load`).

    ``means``: label × metric. ``per_query``: ``system, query_id, metric, value`` (the unit of every test).
    ``comparisons``: every system against the baseline on every metric (paired randomization test, BCa
    bootstrap interval of the mean difference, Holm over each metric's comparisons; Smucker et al. 2007).
    ``runs``: label -> ``query_id, doc_id, score, rank``. ``failed``: label -> error. ``verdict``: the
    sentence `irflow run` prints. ``calibrated``: with human labels, the PPI++ means.
    """

    dataset: str
    split: str
    systems: dict[str, str]  # label -> spec, baseline first
    baseline: str
    metrics: list[str]
    means: pd.DataFrame
    per_query: pd.DataFrame
    comparisons: pd.DataFrame
    runs: dict[str, pd.DataFrame]
    costs: pd.DataFrame
    verdict: str
    coverage: Coverage | None = None
    calibrated: pd.DataFrame | None = None
    failed: dict[str, str] = field(default_factory=dict)
    name: str | None = field(default=None, compare=False)  # how it was run, not what it computed
    tracking: Tracking | None = field(default=None, compare=False)
    _parts: EvaluationParts = field(default_factory=EvaluationParts, repr=False, compare=False)

    # -- building --------------------------------------------------------------------------------------

    @classmethod
    def from_results(
        cls,
        results: StoredResults,
        comparisons: pd.DataFrame,
        verdict: str,
        *,
        dataset: Dataset | None = None,
        report: Any = None,
        infos: Mapping[str, Any] | None = None,
        embedded: Mapping[str, Any] | None = None,
    ) -> Evaluation:
        """The typed view of a result folder's content (``results``: metrics document, per-query table and
        runs keyed by spec) with its comparison table and verdict."""
        from irflow.tasks.report.plots import short_labels

        document = results.document
        specs = list(document["systems"])
        order = [document.get("baseline") or specs[0]] + [s for s in results.systems if s != document.get("baseline")]
        order += [s for s in specs if s not in order]
        label = short_labels(order, document.get("labels"))
        metrics = list(document["measures"])
        means = pd.DataFrame(
            [[float(document["systems"][s][m]) for m in metrics] for s in order],
            index=pd.Index([label[s] for s in order], name="system", dtype="str"),
            columns=pd.Index(metrics, name="metric", dtype="str"),
            dtype="float64",
        )
        per_query = results.per_query.assign(system=results.per_query["system"].map(label))
        costs = pd.DataFrame.from_dict(
            {label[s]: document.get("cost", {}).get(s, {}) for s in order}, orient="index"
        ).rename_axis("system")
        mlflow, run = document.get("mlflow") or {}, document.get("run") or {}
        return cls(
            dataset=document["dataset"]["name"],
            split=document["dataset"]["split"],
            systems={label[s]: s for s in order},
            baseline=label[order[0]],
            metrics=metrics,
            means=means,
            per_query=per_query.reset_index(drop=True),
            comparisons=_labelled_comparisons(comparisons, label),
            runs={label[s]: results.runs[s].reset_index(drop=True) for s in order if s in results.runs},
            costs=costs,
            verdict=verdict,
            coverage=_coverage(document.get("coverage"), label),
            calibrated=_calibrated(document.get("calibrated"), label),
            failed={
                _failed_label(s, document.get("labels")): str(e) for s, e in (document.get("failed") or {}).items()
            },
            name=run.get("name"),
            tracking=Tracking(
                mlflow["run_id"], mlflow.get("experiment_id"), mlflow.get("experiment"), mlflow.get("url")
            )
            if mlflow.get("run_id")
            else None,
            _parts=EvaluationParts(results, dataset, report, dict(infos or {}), dict(embedded or {})),
        )

    # -- the result folder -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """metrics.json's content (systems keyed by spec, as the folder keeps them)."""
        return dict(self._results().document)

    def save(self, path: str | Path) -> Path:
        """Write the result folder `irflow run` writes into ``path`` (published whole: one rename): metrics.json,
        per_query.parquet, runs/, significance.csv, report.md, report.html and plots/."""
        from irflow.tasks.core.output_folder import publish

        target = Path(path)
        with publish(target) as build:
            save_results(build, self._results(), self._parts.dataset, data=self._parts.report)
        return target

    @classmethod
    def load(cls, path: str | Path) -> Evaluation:
        """Read a result folder (written by :meth:`save`, `irflow run` or `irflow suite`) back."""
        from irflow.tasks.report.recommendations import read_verdict

        folder = Path(path)
        results = load_results(folder)
        try:
            comparisons = pd.read_csv(folder / "significance.csv", dtype={"metric": "str", "baseline": "str"})
            verdict = read_verdict((folder / "report.md").read_text(encoding="utf-8")) or ""
        except (OSError, ValueError) as exc:
            raise InputError(
                f"not a complete result folder ({exc}); rebuild its report with `irflow report {folder}`",
                path=str(folder),
            ) from None
        if "candidate" in comparisons.columns:
            comparisons = comparisons.astype({"candidate": "str"})
        return cls.from_results(results, comparisons, verdict.removeprefix("Verdict: "))

    def recorded(self, **entries: Any) -> Evaluation:
        """This evaluation with ``entries`` added to its metrics document (``run``: the run's identity,
        ``mlflow``: its MLflow run), as the flow records them after computing."""
        from dataclasses import replace

        results, parts = self._results(), self._parts
        return Evaluation.from_results(
            replace(results, document={**results.document, **entries}),
            self.comparisons_by_spec(),
            self.verdict,
            dataset=parts.dataset,
            report=parts.report,
            infos=parts.retrieval_info,
            embedded=parts.encodings,
        )

    def comparisons_by_spec(self) -> pd.DataFrame:
        """:attr:`comparisons` as significance.csv keeps it (systems by spec, ``candidate`` and
        ``p_randomization``), from the report's analysis or the stored table."""
        if self._parts.report is not None:
            return self._parts.report.comparisons
        spec = self.systems
        table = self.comparisons.assign(
            system=self.comparisons["system"].map(lambda s: spec.get(s, s)),
            baseline=self.comparisons["baseline"].map(lambda s: spec.get(s, s)),
        )
        return table.rename(columns={"system": "candidate", "p_value": "p_randomization"})

    def _results(self) -> StoredResults:
        if self._parts.results is None:
            raise InputError("this Evaluation holds no result folder content (build it with irflow.evaluate)")
        return self._parts.results

    # -- tables for people -------------------------------------------------------------------------------

    def summary(self) -> pd.DataFrame:
        """``means`` with each system's difference to the baseline marked: ``*`` where it holds after the
        correction (the report's summary table, as text)."""
        table = self.means.map(lambda v: f"{v:.4f}")
        if len(self.comparisons):
            for row in self.comparisons.itertuples():
                if row.significant and row.metric in table.columns:
                    table.loc[row.system, row.metric] += "*"
        return table

    def to_markdown(self) -> str:
        """The summary table in Markdown (``*``: significant after Holm's correction, against the baseline)."""
        table = self.summary()
        head = "| system | " + " | ".join(table.columns) + " |"
        rule = "|---|" + "---:|" * len(table.columns)
        rows = [f"| {s} | " + " | ".join(table.loc[s]) + " |" for s in table.index]
        return "\n".join([head, rule, *rows, "", self._footnote()]) + "\n"

    def to_latex(self, caption: str | None = None, label: str = "tab:results") -> str:
        """The summary table as a LaTeX ``table`` (booktabs): best value per metric in bold, :math:`^{\\dagger}`
        where a system differs significantly from the baseline after the correction (for papers)."""
        best = self.means.max(axis=0)
        significant = {
            (r.system, r.metric) for r in self.comparisons.itertuples() if r.significant and r.metric in best.index
        }

        def cell(system: str, metric: str) -> str:
            value = self.means.loc[system, metric]
            text = f"{value:.4f}"
            text = f"\\textbf{{{text}}}" if math.isclose(value, best[metric], abs_tol=1e-12) else text
            return text + ("$^{\\dagger}$" if (system, metric) in significant else "")

        columns = [_latex_escape(m) for m in self.means.columns]
        lines = [
            "\\begin{table}[t]",
            "\\centering",
            f"\\begin{{tabular}}{{l{'r' * len(columns)}}}",
            "\\toprule",
            "System & " + " & ".join(columns) + " \\\\",
            "\\midrule",
            *(
                _latex_escape(s) + " & " + " & ".join(cell(s, m) for m in self.means.columns) + " \\\\"
                for s in self.means.index
            ),
            "\\bottomrule",
            "\\end{tabular}",
            f"\\caption{{{_latex_escape(caption or self._caption())}}}",
            f"\\label{{{label}}}",
            "\\end{table}",
        ]
        return "\n".join(lines) + "\n"

    def _caption(self) -> str:
        return (
            f"{self.dataset} ({self.split}). Bold: best per metric. Dagger: significantly different from the "
            f"baseline {self.baseline} ({self._test()})."
        )

    def _test(self) -> str:
        results = self._parts.results
        options = (results.document.get("significance") if results else None) or {}
        alpha = options.get("alpha", 0.05)
        correction = str(options.get("correction", "holm")).capitalize()
        return f"paired randomization test, {correction}-corrected per metric, alpha {alpha}"

    def _footnote(self) -> str:
        return f"{self.dataset} ({self.split}); `*`: significantly different from {self.baseline} ({self._test()})."

    def _repr_html_(self) -> str:
        """Jupyter: the verdict, then the summary table."""
        verdict = f"<p><strong>{html.escape(self.verdict)}</strong></p>" if self.verdict else ""
        failed = "".join(f"<p>failed: {html.escape(s)}: {html.escape(e)}</p>" for s, e in self.failed.items())
        caption = f"<p><small>{html.escape(self._footnote())}</small></p>"
        return verdict + self.summary().to_html(escape=True) + caption + failed

    def __repr__(self) -> str:
        systems = ", ".join(self.systems)
        return f"Evaluation({self.dataset} ({self.split}): {systems}; {len(self.metrics)} metrics)"

    # -- equality: the typed content, not how it was computed ----------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Evaluation):
            return NotImplemented
        return same(self, other, exact_frames=False)  # a loaded copy's tables may differ in dtypes and order

    __hash__ = None  # type: ignore[assignment]


def _labelled_comparisons(table: pd.DataFrame, label: Mapping[str, str]) -> pd.DataFrame:
    """The significance table with labels, ``system`` (the candidate) first and ``p_value`` the randomization
    test's; the other figures (n, means, t-test, Wilcoxon, effect size) after :data:`COMPARISON_COLUMNS`."""
    if table is None or table.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COMPARISON_COLUMNS})
    out = table.rename(columns={"candidate": "system", "p_randomization": "p_value"}).copy()
    out["system"] = out["system"].astype(str).map(lambda s: label.get(s, s))
    out["baseline"] = out["baseline"].astype(str).map(lambda s: label.get(s, s))
    rest = [c for c in out.columns if c not in COMPARISON_COLUMNS]
    return out[[*COMPARISON_COLUMNS, *rest]].reset_index(drop=True)


def _coverage(block: Mapping[str, Any] | None, label: Mapping[str, str]) -> Coverage | None:
    if not block:
        return None
    origin = block.get("origin")
    return Coverage(
        measure=str(block.get("measure", "Judged@10")),
        judged={label.get(s, s): float(v) for s, v in (block.get("systems") or {}).items()},
        warning=block.get("warning"),
        note=block.get("note"),
        origin=origin.get("description") if isinstance(origin, Mapping) else None,
    )


def _calibrated(block: Mapping[str, Any] | None, label: Mapping[str, str]) -> pd.DataFrame | None:
    """``system, metric, estimate, ci_low, ci_high, judge_only, n_human, n_judge_only, lambda`` (PPI++)."""
    if not block:
        return None
    rows = []
    for spec, metrics in block.items():
        for metric, b in metrics.items():
            low, high = b.get("ci") or (math.nan, math.nan)
            rows.append(
                {
                    "system": label.get(spec, spec),
                    "metric": metric,
                    "estimate": b.get("estimate"),
                    "ci_low": low,
                    "ci_high": high,
                    "judge_only": b.get("judge_only"),
                    "n_human": b.get("n_human"),
                    "n_judge_only": b.get("n_judge_only"),
                    "lambda": b.get("lambda"),
                }
            )
    return pd.DataFrame(rows)


def _failed_label(spec: str, given: Mapping[str, str] | None) -> str:
    from irflow.tasks.systems.labels import default_label

    return (given or {}).get(spec) or default_label(spec)


_LATEX = {"\\": "\\textbackslash{}", "~": "\\textasciitilde{}", "^": "\\textasciicircum{}"}


def _latex_escape(text: str) -> str:
    """``text`` safe in LaTeX: the ten special characters escaped in one pass."""
    return re.sub(r"[\\&%$#_{}~^]", lambda m: _LATEX.get(m.group(), "\\" + m.group()), text)


__all__ = ["COMPARISON_COLUMNS", "SCHEMA_VERSION", "Coverage", "Evaluation", "EvaluationParts", "Tracking"]
