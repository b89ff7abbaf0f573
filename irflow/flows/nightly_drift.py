"""The nightly run's drift stage: each ``drift:`` check of the experiment (a query log against one of its
datasets) as a Prefect task, summed up for the nightly flow's verdict, ``nightly.md``, MLflow and alert.

Composition only: the statistics are ``tasks.evalsets.drift``; ``flows.suite.nightly_flow`` calls
:func:`drift_stage` after the suite and reports its outcome beside the regression check's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.evalsets.drift import DriftCheck, DriftReport
from irflow.tasks.experiment import Experiment
from irflow.tasks.tracking.log import mlflow_key


class DriftError(IrflowError):
    """A nightly run's query log drifted from its evaluation set (a check with ``fail: true``); the message
    is the alert: log, dataset, both p-values (meaning, unseen topics), share of unseen tokens."""


@dataclass
class NightlyDrift:
    """What the drift checks found: a report per dataset, the checks that could not run, the alerts."""

    checks: dict[str, DriftCheck] = field(default_factory=dict)
    reports: dict[str, DriftReport] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def alerts(self, failing: bool | None = None) -> list[str]:
        """Alert lines of the drifted datasets (``failing``: only those whose check fails the run, or not)."""
        return [
            report.alert(dataset, self.checks[dataset].current)
            for dataset, report in self.reports.items()
            if report.drift and (failing is None or self.checks[dataset].fail == failing)
        ]

    def verdict(self) -> str:
        """Every check's one line (drifted, reported only, or still matching), for the run's verdict."""
        lines = []
        for dataset, report in self.reports.items():
            line = report.verdict(dataset, self.checks[dataset].current)
            lines.append(
                line + (" (reported only: fail is false)" if report.drift and not self.checks[dataset].fail else "")
            )
        return "; ".join(lines)

    def markdown(self) -> str:
        """The report sections for nightly.md and the ``nightly-comparison`` artifact ('' without checks)."""
        parts = [report.markdown(d, self.checks[d].current) for d, report in self.reports.items()]
        parts += [f"## Query drift\n\nThe check of `{d}` failed: {error}\n" for d, error in self.failed.items()]
        return "\n".join(parts)

    def metrics(self) -> dict[str, float]:
        """``drift.<dataset>.p_value``, ``...detected`` etc. per check, and ``drift_alerts`` in all."""
        out = {
            mlflow_key("drift", dataset, name.removeprefix("drift.")): value
            for dataset, report in self.reports.items()
            for name, value in report.metrics().items()
        }
        return {**out, "drift_alerts": float(len(self.alerts()))} if self.checks else out

    def tags(self) -> dict[str, Any]:
        if not self.checks:
            return {}
        return {
            "irflow.drift": str(bool(self.alerts())).lower(),
            "irflow.drift_message": "; ".join(self.alerts()) or None,
        }


@task(name="drift", task_run_name="drift {dataset}", cache_policy=NONE)
def drift_task(dataset: str, check: DriftCheck, folder: Path) -> DriftReport:
    """Run one check; its plot (similarity to the nearest reference query) goes to ``folder/drift-<dataset>.png``."""
    from irflow.tasks.evalsets.drift import nearest_similarities
    from irflow.tasks.report.plots import drift_similarity

    report, ref_vectors, cur_vectors = check.run()
    plot = folder / f"drift-{mlflow_key(dataset).replace('.', '_')}.png"
    drift_similarity(*nearest_similarities(ref_vectors, cur_vectors), report.unseen_threshold, plot)
    return report


def drift_stage(experiment: Experiment, folder: Path) -> NightlyDrift:
    """Run every drift check of the experiment (the experiment's split unless a check names one) and write
    ``folder/drift.json``; a check that raises is recorded, the others go on."""
    found = NightlyDrift()
    for dataset, check in experiment.drift.items():
        check = check.model_copy(update={"split": check.split or experiment.split})
        found.checks[dataset] = check
        try:
            found.reports[dataset] = drift_task(dataset, check, folder)
        except Exception as exc:
            found.failed[dataset] = f"{type(exc).__name__}: {exc}"
    if found.checks:
        record: dict[str, dict[str, Any]] = {d: {"settings": c.model_dump()} for d, c in found.checks.items()}
        for dataset, report in found.reports.items():
            record[dataset]["report"] = report.as_dict()
        for dataset, error in found.failed.items():
            record[dataset]["error"] = error
        write_json(folder / "drift.json", record)
    return found


__all__ = ["DriftError", "NightlyDrift", "drift_stage", "drift_task"]
