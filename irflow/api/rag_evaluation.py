"""The result of a RAG evaluation (:class:`RagEvaluation`): its tables named by configuration labels, its
verdict, and the result folder ``irflow rag`` writes (:meth:`RagEvaluation.save`, :meth:`RagEvaluation.load`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.api._results import FrameEquality, flatten, html_page
from irflow.api.rag_pipeline import RagParts, write_rag
from irflow.tasks.core.schema import InputError
from irflow.tasks.rag.outputs import config_labels

FILES = ("metrics.json", "per_query.parquet", "failures.csv", "answers.jsonl", "significance.csv", "report.md")


def _tidy(table: pd.DataFrame) -> pd.DataFrame:
    """A table as read back from its file: a fresh result and its loaded copy compare equal."""
    table = table.reset_index(drop=True)
    for column in table.columns:
        values = table[column]
        if values.dtype == object and len(values) and values.isna().all():
            table[column] = values.astype("float64")
        elif values.dtype != object and not pd.api.types.is_numeric_dtype(values):
            table[column] = values.astype(object)
    return table


def _labelled(table: pd.DataFrame, label: Mapping[str, str], *columns: str) -> pd.DataFrame:
    """``table`` with the configurations in ``columns`` named by their labels."""
    named = {c: table[c].map(lambda v: label[v] if isinstance(v, str) else v) for c in columns if c in table}
    return table.assign(**named) if named else table


@dataclass(frozen=True, eq=False)
class RagEvaluation(FrameEquality):
    """A RAG evaluation (``irflow rag``). Configurations are named by their labels (``dense:all-MiniLM-L6-v2``; an
    answers file's name as it is) in every table and the verdict; ``summary``'s ``spec`` column names the spec.

    ``means``: configuration × metric (the mean over the samples with a value); ``summary``: one row per
    configuration and metric with ``mean, ci_low, ci_high, n, failed`` (and ``repeat_sd`` with judge
    repeats); ``per_sample``: ``system, query_id, metric, value``; ``comparisons``: every configuration
    against the baseline (significance.csv); ``failures``: ``system, query_id, metric, error``;
    ``calibrated`` (with human verdicts): one row per configuration and metric, the PPI++ estimates.
    """

    dataset: str
    split: str
    configurations: tuple[str, ...]
    metrics: tuple[str, ...]
    baseline: str
    means: pd.DataFrame
    summary: pd.DataFrame
    per_sample: pd.DataFrame
    comparisons: pd.DataFrame
    failures: pd.DataFrame
    calibrated: pd.DataFrame | None
    _document: dict[str, Any] = field(repr=False)
    _parts: RagParts | None = field(default=None, repr=False, compare=False)
    _folder: Path | None = field(default=None, repr=False, compare=False)

    @property
    def verdict(self) -> str:
        """One sentence: the best configuration on the first metric, its difference to the baseline with the
        interval and the Holm-adjusted p (and the calibrated figures with human verdicts): report.md's first
        paragraph, the last line ``irflow rag`` prints."""
        from irflow.tasks.rag.outputs import rag_verdict

        return rag_verdict(self._document, self.comparisons)

    @classmethod
    def _build(
        cls,
        document: Mapping[str, Any],
        per_sample: pd.DataFrame,
        comparisons: pd.DataFrame,
        failures: pd.DataFrame,
        **private: Any,
    ) -> RagEvaluation:
        document = dict(json.loads(json.dumps(document, sort_keys=True, default=str)))
        metrics = tuple(document["measures"])
        label = config_labels(document)  # tables name configurations by label, the spec a column away
        configurations = tuple(label[c] for c in document["configurations"])
        rows = [
            {"configuration": label[c], "spec": c, "metric": m, **document["summary"][c][m]}
            for c in document["summary"]
            for m in metrics
        ]
        summary_table = pd.DataFrame(rows)
        for column in ("mean", "ci_low", "ci_high", "repeat_sd"):
            if column in summary_table:
                summary_table[column] = summary_table[column].astype("float64")
        means = (
            summary_table.pivot(index="configuration", columns="metric", values="mean")
            .reindex(index=[label[c] for c in document["summary"]], columns=list(metrics))
            .rename_axis(index="configuration", columns="metric")
        )
        calibrated = None
        if document.get("calibrated"):
            calibrated = pd.DataFrame(
                [
                    {"configuration": label[c], "metric": m, **flatten(block)}
                    for c, blocks in document["calibrated"].items()
                    for m, block in blocks.items()
                ]
            )
        return cls(
            dataset=document["dataset"]["name"],
            split=document["dataset"]["split"],
            configurations=configurations,
            metrics=metrics,
            baseline=label[document["baseline"]],
            means=means,
            summary=summary_table,
            per_sample=_tidy(_labelled(per_sample, label, "system")),
            comparisons=_tidy(_labelled(comparisons, label, "candidate", "baseline")),
            failures=_tidy(_labelled(failures, label, "system")),
            calibrated=calibrated,
            _document=document,
            **private,
        )

    @classmethod
    def from_parts(cls, document: Mapping[str, Any], parts: RagParts) -> RagEvaluation:
        """The result of a computed evaluation (``document``: its metrics.json content)."""
        return cls._build(document, parts.scores.per_query, parts.comparisons, parts.scores.failures, _parts=parts)

    def save(self, path: str | Path) -> Path:
        """Write exactly the folder ``irflow rag --output PATH`` writes."""
        if self._parts is not None:
            write_rag(path, self._parts, self.metrics, self._document["baseline"])  # the baseline's spec
        elif self._folder is not None:  # a loaded result: its files as they were
            from irflow.tasks.core.output_folder import publish

            with publish(path) as build:
                for name in (*FILES, "report.html"):
                    if (self._folder / name).is_file():
                        shutil.copyfile(self._folder / name, build / name)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> RagEvaluation:
        """Read a folder written by :meth:`save` or ``irflow rag`` back."""
        folder = Path(path)
        missing = [f for f in FILES if not (folder / f).is_file()]
        if missing:
            raise InputError(f"path: not a result folder of irflow rag ({', '.join(missing)} missing)", path=str(path))
        document = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        if document.get("kind") != "rag":
            raise InputError("path: metrics.json is not a RAG evaluation (write one with irflow rag)", path=str(path))
        ids = {"system": str, "query_id": str, "metric": str}
        return cls._build(
            document,
            pd.read_parquet(folder / "per_query.parquet"),
            pd.read_csv(folder / "significance.csv", float_precision="round_trip", dtype={"metric": str}),
            pd.read_csv(folder / "failures.csv", dtype={**ids, "error": str}, keep_default_na=False),
            _folder=folder,
        )

    def _repr_html_(self) -> str:
        return html_page(f"RAG evaluation: {self.dataset} ({self.split})", self.verdict, self.means)


__all__ = ["FILES", "RagEvaluation"]
