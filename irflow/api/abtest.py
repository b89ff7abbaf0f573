"""``irflow.abtest``: an online A/B test's log analysed per randomisation unit, as ``irflow abtest`` does it
(delta-method intervals, sample-ratio mismatch, the sequential test), in this process.

The ``abtest`` flow calls :func:`run_abtest` with its stages wrapped as Prefect tasks; no Prefect and no
MLflow here unless ``track=True``. ``ABTest.save`` writes the command's folder, ``ABTest.load`` reads it.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.api._results import (
    FrameEquality,
    check_flag,
    check_probability,
    html_page,
    normalised,
    read_metrics_json,
)
from irflow.tasks.core.schema import InputError
from irflow.tasks.online import abtest as ab_stats
from irflow.tasks.online import abtest_sequential
from irflow.tasks.online.abtest_log import AbLog, check_ab_log, read_ab_log
from irflow.tasks.online.abtest_report import abtest_verdict

ABTEST_EXPERIMENT = "irflow-abtest"

# ---------------------------------------------------------------------------------------------------------
# A/B tests


@dataclass(frozen=True)
class AbTestConfig:
    """What ``irflow abtest`` was asked: the log, its unit column, the control arm, the planned split, the
    sequential test (with its τ) and the result folder."""

    log: str
    output: str
    unit: str = "user_id"
    control: str | None = None
    treatment_share: float = 0.5
    sequential: bool = False
    tau: float = abtest_sequential.DEFAULT_TAU


@dataclass(frozen=True)
class AbTestStages:
    """The A/B test's stages: the pure functions by default, Prefect tasks in the flow."""

    read: Callable[[str, str], AbLog] = read_ab_log
    analyse: Callable[[AbLog, str | None, float], dict[str, Any]] = ab_stats.analyse
    sequential: Callable[[AbLog, str, str, list[str], float], dict[str, Any]] = abtest_sequential.sequential


def run_abtest(
    log: AbLog, config: AbTestConfig, stages: AbTestStages = AbTestStages()
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The analysis of a read log (metrics.json's ``abtest`` block) and, when asked, the sequential test."""
    analysis = stages.analyse(log, config.control, config.treatment_share)
    sequential = (
        stages.sequential(log, analysis["control"], analysis["treatment"], list(analysis["metrics"]), config.tau)
        if config.sequential
        else None
    )
    return analysis, sequential


def abtest_mlflow_metrics(document: Mapping[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics: ``<metric>.control|treatment|difference|ci_low|ci_high|p_value``, ``srm.*``."""
    from irflow.tasks.tracking.log import mlflow_key

    ab = document["abtest"]
    out: dict[str, float] = {
        "srm.p_value": ab["srm"]["p_value"],
        "srm.mismatch": float(ab["srm"]["mismatch"]),
        "srm.observed_share": ab["srm"]["observed_share"],
        "trustworthy": float(ab["trustworthy"]),
    }
    for arm, n in ab["units"].items():
        out[mlflow_key("units", arm)] = n
    for name, m in ab["metrics"].items():
        for key in ("control", "treatment", "difference", "p_value", "relative", "design_effect"):
            out[f"{name}.{key}"] = m[key]
        out[f"{name}.ci_low"], out[f"{name}.ci_high"] = m["ci"]
    for name, values in (document.get("sequential") or {}).get("metrics", {}).items():
        out[f"{name}.always_valid_p_value"] = values["final_always_valid_p_value"]
    return {k: float(v) for k, v in out.items()}


def track_abtest(
    config: AbTestConfig, document: Mapping[str, Any], tags: Mapping[str, str], experiment: str = ABTEST_EXPERIMENT
) -> tuple[Any, str]:
    """One MLflow run in ``experiment`` (default ``irflow-abtest``): settings as params, the figures as metrics,
    the folder's files (``config.output``) as artifacts; returns the tracker and the run id."""
    from irflow.tasks.tracking.log import Tracker, ending_runs, tracking_uri

    ab = document["abtest"]
    tracker = Tracker(experiment, tracking_uri())
    with ending_runs():
        run_id = tracker.start(f"abtest {Path(config.log).name}", "abtest")
        tracker.log(
            run_id,
            params={
                "log": str(Path(config.log).resolve()),
                "unit": config.unit,
                "control": ab["control"],
                "treatment": ab["treatment"],
                "treatment_share": config.treatment_share,
                "metrics": ", ".join(ab["metrics"]),
                "sequential": config.sequential,
                "tau": config.tau if config.sequential else None,
                "output": str(Path(config.output).resolve()),
                "irflow.version": document["irflow_version"],
            },
            metrics=abtest_mlflow_metrics(document),
            tags={**tags, "irflow.abtest_trustworthy": str(ab["trustworthy"]).lower()},
        )
        tracker.log_files(run_id, config.output, files=("metrics.json", "report.md", "report.html"))
        tracker.end(run_id)
    return tracker, run_id


def _in_order(metrics: Mapping[str, Any]) -> list[str]:
    """The metrics in the order ``irflow abtest`` computes them (metrics.json holds them sorted)."""
    return [m for m in ab_stats.METRICS if m in metrics]


@dataclass(frozen=True, eq=False)
class SampleRatio(FrameEquality):
    """The sample-ratio-mismatch test: units per arm against the planned share of the treatment."""

    p_value: float
    mismatch: bool  # p < 0.001: the split is broken, no comparison of the arms can be trusted
    counts: tuple[int, int]  # units in (control, treatment)
    expected_share: float  # of the treatment
    observed_share: float
    chi2: float


@dataclass(frozen=True, eq=False)
class ABTest(FrameEquality):
    """An A/B test analysed at its randomisation unit (``irflow abtest``).

    ``metrics``: one row per metric (index ``metric``): ``control``, ``treatment``, ``difference``, ``se``,
    ``ci_low``, ``ci_high``, ``p_value``, ``relative`` (with its interval), the per-query interval that
    ignores the unit (``per_impression_ci_*``) and ``design_effect``. ``sequential``: with the sequential
    test, one row per day and metric: ``day, metric, difference, p_value, always_valid_p_value``.
    """

    log: str
    unit: str
    control: str
    treatment: str
    metrics: pd.DataFrame
    srm: SampleRatio
    queries: tuple[int, int]  # queries shown in (control, treatment)
    unavailable: tuple[str, ...]  # metrics the log's columns do not allow
    sequential: pd.DataFrame | None
    tau: float | None
    _document: dict[str, Any] = field(repr=False)

    @property
    def trustworthy(self) -> bool:
        """False on a sample-ratio mismatch."""
        return not self.srm.mismatch

    @property
    def verdict(self) -> str:
        """One sentence: which arm wins on the primary metric (ctr) and whether SRM makes it untrustworthy."""
        return abtest_verdict(self._document)

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> ABTest:
        """The result of a metrics.json document of ``irflow abtest``."""
        document = normalised(document)
        ab, seq = document["abtest"], document.get("sequential")
        # metrics.json holds its keys sorted: the command's order back, so that save() writes the same report
        arms = (ab["control"], ab["treatment"])
        ab["metrics"] = {m: ab["metrics"][m] for m in _in_order(ab["metrics"])}
        ab["unavailable"] = {m: ab["unavailable"][m] for m in _in_order(ab["unavailable"])}
        ab["units"], ab["queries"] = ({a: ab[key][a] for a in arms} for key in ("units", "queries"))
        if seq:
            seq["metrics"] = {m: seq["metrics"][m] for m in _in_order(seq["metrics"])}
        rows = {}
        for name in _in_order(ab["metrics"]):
            m = ab["metrics"][name]
            row = {k: v for k, v in m.items() if k not in ("ci", "relative_ci", "per_impression_ci")}
            for key in ("ci", "relative_ci", "per_impression_ci"):
                row[f"{key}_low"], row[f"{key}_high"] = m[key]
            order = ["control", "treatment", "difference", "se", "ci_low", "ci_high", "p_value", "relative"]
            rows[name] = {k: float(row[k]) for k in order} | {
                k: float(row[k])
                for k in (
                    "relative_ci_low",
                    "relative_ci_high",
                    "per_impression_ci_low",
                    "per_impression_ci_high",
                    "design_effect",
                )
            }
        metrics = pd.DataFrame.from_dict(rows, orient="index").rename_axis("metric")
        srm = ab["srm"]
        sequential = None
        if seq:
            sequential = pd.DataFrame(
                [
                    (day, name, d, p, a)
                    for name in _in_order(seq["metrics"])
                    for v in [seq["metrics"][name]]
                    for day, d, p, a in zip(
                        seq["days"], v["difference"], v["p_value"], v["always_valid_p_value"], strict=True
                    )
                ],
                columns=["day", "metric", "difference", "p_value", "always_valid_p_value"],
            )
        return cls(
            log=ab["log"],
            unit=ab["unit"],
            control=ab["control"],
            treatment=ab["treatment"],
            metrics=metrics,
            srm=SampleRatio(
                p_value=float(srm["p_value"]),
                mismatch=bool(srm["mismatch"]),
                counts=(int(srm["control_units"]), int(srm["treatment_units"])),
                expected_share=float(srm["expected_share"]),
                observed_share=float(srm["observed_share"]),
                chi2=float(srm["chi2"]),
            ),
            queries=(int(ab["queries"][ab["control"]]), int(ab["queries"][ab["treatment"]])),
            unavailable=tuple(ab["unavailable"]),
            sequential=sequential,
            tau=float(seq["tau"]) if seq else None,
            _document={k: v for k, v in document.items() if k in ("abtest", "sequential")},
        )

    def save(self, path: str | Path) -> Path:
        """Write exactly the folder ``irflow abtest --output PATH`` writes (metrics.json, report.md, report.html)."""
        from irflow.tasks.core.output_folder import publish
        from irflow.tasks.online.abtest_report import write_abtest

        with publish(path) as build:
            write_abtest(build, self._document["abtest"], self._document.get("sequential"))
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> ABTest:
        """Read a folder written by :meth:`save` or ``irflow abtest`` back."""
        document = read_metrics_json(path, "irflow abtest")
        if "abtest" not in document:
            raise InputError("path: metrics.json holds no A/B test (write one with irflow abtest)", path=str(path))
        return cls.from_document(document)

    def _repr_html_(self) -> str:
        return html_page(f"A/B test: {self.treatment} vs {self.control} by {self.unit}", self.verdict, self.metrics)


def abtest(
    log: str | Path | pd.DataFrame,
    *,
    unit: str = "user_id",
    control: str | None = None,
    treatment_share: float = 0.5,
    sequential: bool = False,
    tau: float = abtest_sequential.DEFAULT_TAU,
    track: bool = False,
    experiment: str = ABTEST_EXPERIMENT,
) -> ABTest:
    """Analyse an A/B test's log at its randomisation unit ``unit`` (``irflow abtest LOG``).

    ``log``: a CSV, TSV, JSONL or Parquet file, or a DataFrame with the file's columns (``unit``, ``arm``,
    ``query``, ``clicked``; optional ``position``, ``dwell``, ``converted``, ``day`` or ``timestamp``).
    ``control``: the control arm (default: an arm named control, else the log's first). ``sequential``:
    also always-valid p-values (mSPRT, spread ``tau``) over the log read day by day. ``track``: log the
    result to MLflow (experiment ``experiment``, default ``irflow-abtest``) as ``irflow abtest`` does.
    """
    if not isinstance(unit, str) or not unit.strip():
        raise InputError(f"unit={unit!r}: expected the name of the log's randomisation column, e.g. 'user_id'")
    if control is not None and (not isinstance(control, str) or not control):
        raise InputError(f"control={control!r}: expected the name of an arm in the log's 'arm' column, or None")
    share = check_probability("treatment_share", treatment_share, "the planned share of units in the treatment; 0.5")
    sequential = check_flag("sequential", sequential)
    track = check_flag("track", track)
    if isinstance(tau, bool) or not isinstance(tau, int | float) or not tau > 0 or not math.isfinite(tau):
        raise InputError(f"tau={tau!r}: expected a positive number, the spread of the effects expected (0.01)")
    if isinstance(log, pd.DataFrame):
        read = check_ab_log(log, unit, "log")
        source = "log"
    elif isinstance(log, str | Path):
        if not Path(log).is_file():
            raise InputError(
                f"log={str(log)!r}: no such file; expected an A/B test log (CSV, TSV, JSONL or Parquet) "
                "or a DataFrame with its columns"
            )
        read, source = read_ab_log(log, unit), str(log)
    else:
        raise InputError(f"log: expected a file path or a pandas DataFrame, got {type(log).__name__}")
    config = AbTestConfig(source, "", unit, control, share, sequential, float(tau))
    if track:
        from irflow.tasks.tracking.log import check_tracking

        check_tracking(experiment=experiment)
    analysis, seq = run_abtest(read, config)
    result = ABTest.from_document({"abtest": analysis, **({"sequential": seq} if seq else {})})
    if track:
        with tempfile.TemporaryDirectory(prefix="irflow-abtest-") as folder:
            result.save(Path(folder) / "result")
            document = read_metrics_json(Path(folder) / "result", "irflow abtest")
            config = AbTestConfig(**{**vars(config), "output": str(Path(folder) / "result")})
            track_abtest(config, document, tags={}, experiment=experiment)
    return result


__all__ = [
    "ABTest",
    "AbTestConfig",
    "AbTestStages",
    "SampleRatio",
    "abtest",
    "abtest_mlflow_metrics",
    "run_abtest",
    "track_abtest",
]
