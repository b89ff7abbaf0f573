"""The online siblings of ``irflow.evaluate``: an A/B test's log, interleaving of two systems, the power of
an evaluation set; each one call, in this process, returning a frozen result with DataFrames.

``abtest`` is what ``irflow abtest`` computes, ``interleave`` what ``irflow interleave`` computes (simulated
users on a dataset, or a real interleaving log), ``power`` what ``irflow power`` prints. No Prefect and no
MLflow unless ``track=True``; every bad argument is an :class:`~irflow.tasks.core.schema.InputError`
naming it. ``.save(path)`` writes exactly the folder the command writes and ``.load(path)`` reads it back.
The ``abtest`` and ``interleave`` flows call the compositions here (:func:`run_abtest`,
:func:`run_interleave`) with their stages wrapped as Prefect tasks.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.api._results import FrameEquality, check_flag, check_int, check_probability, html_page
from irflow.api._stages import embed, ingest, retrieve
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.online import abtest as ab_stats
from irflow.tasks.online import abtest_sequential
from irflow.tasks.online.abtest_log import AbLog, check_ab_log, read_ab_log
from irflow.tasks.online.interleave_report import label_of, side_labels

ABTEST_EXPERIMENT = "irflow-abtest"
PRIMARY = "ctr"  # the A/B verdict's metric: clicks per query shown


def _normalised(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` as metrics.json holds it (tuples as lists): a fresh result equals its loaded copy."""
    return dict(json.loads(json.dumps(document)))


def _read_json(folder: str | Path, what: str) -> dict[str, Any]:
    path = Path(folder) / "metrics.json"
    if not path.is_file():
        raise InputError(f"path: not a result folder of {what} (metrics.json is missing)", path=str(folder))
    return dict(json.loads(path.read_text(encoding="utf-8")))


def _p(value: float) -> str:
    return f"{value:.3g}"


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


def track_abtest(config: AbTestConfig, document: Mapping[str, Any], tags: Mapping[str, str]) -> tuple[Any, str]:
    """One MLflow run in ``irflow-abtest``: settings as params, the figures as metrics, the folder's files
    (``config.output``) as artifacts; returns the tracker and the run id."""
    from irflow.tasks.tracking.log import Tracker, ending_runs, tracking_uri

    ab = document["abtest"]
    tracker = Tracker(ABTEST_EXPERIMENT, tracking_uri())
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
        m = self.metrics.loc[PRIMARY]
        figures = (
            f"{PRIMARY} {m['control']:.4f} -> {m['treatment']:.4f}, difference {m['difference']:+.4f} "
            f"[{m['ci_low']:+.4f}, {m['ci_high']:+.4f}], p = {_p(m['p_value'])}"
        )
        if m["p_value"] < 0.05 and m["difference"] != 0:
            winner = f"{self.treatment} (treatment)" if m["difference"] > 0 else f"{self.control} (control)"
            said = f"{winner} wins on {PRIMARY} ({figures})"
        else:
            said = f"Neither arm ({self.control}, {self.treatment}) wins on {PRIMARY} at α = 0.05 ({figures})"
        if self.srm.mismatch:
            return (
                f"{said}, but a sample-ratio mismatch (p = {_p(self.srm.p_value)}, {self.srm.counts[0]:,} vs "
                f"{self.srm.counts[1]:,} units) makes the comparison untrustworthy."
            )
        return f"{said}; the sample ratio is as planned (p = {_p(self.srm.p_value)})."

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> ABTest:
        """The result of a metrics.json document of ``irflow abtest``."""
        document = _normalised(document)
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
        document = _read_json(path, "irflow abtest")
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
) -> ABTest:
    """Analyse an A/B test's log at its randomisation unit ``unit`` (``irflow abtest LOG``).

    ``log``: a CSV, TSV, JSONL or Parquet file, or a DataFrame with the file's columns (``unit``, ``arm``,
    ``query``, ``clicked``; optional ``position``, ``dwell``, ``converted``, ``day`` or ``timestamp``).
    ``control``: the control arm (default: an arm named control, else the log's first). ``sequential``:
    also always-valid p-values (mSPRT, spread ``tau``) over the log read day by day. ``track``: log the
    result to MLflow (experiment ``irflow-abtest``) as ``irflow abtest`` does.
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

        check_tracking(experiment=ABTEST_EXPERIMENT)
    analysis, seq = run_abtest(read, config)
    result = ABTest.from_document({"abtest": analysis, **({"sequential": seq} if seq else {})})
    if track:
        with tempfile.TemporaryDirectory(prefix="irflow-abtest-") as folder:
            result.save(Path(folder) / "result")
            document = _read_json(Path(folder) / "result", "irflow abtest")
            track_abtest(AbTestConfig(**{**vars(config), "output": str(Path(folder) / "result")}), document, tags={})
    return result


# ---------------------------------------------------------------------------------------------------------
# power


@dataclass(frozen=True, eq=False)
class Power(FrameEquality):
    """What ``irflow power RESULT --metric M`` computes: per candidate against the baseline (index
    ``system``, the label; ``baseline`` is a label too): ``spec``, ``queries``, ``mean_difference``,
    ``sd_difference``, ``effect``, ``minimum_detectable_difference``, ``delta``, ``queries_needed``,
    ``queries_needed_resampled``, ``power_now``, ``alpha``, ``power``."""

    metric: str
    baseline: str
    table: pd.DataFrame
    alpha: float
    power: float

    @property
    def verdict(self) -> str:
        """One sentence per candidate, or "nothing to compare" said plainly."""
        if self.table.empty:
            return f"Nothing to compare: {self.baseline} is the only system with {self.metric} values."
        parts = []
        for system, row in self.table.iterrows():
            if row["sd_difference"] == 0:
                parts.append(
                    f"Nothing to compare for {system}: its {self.metric} equals {self.baseline}'s on every query"
                )
                continue
            needed = row["queries_needed"]
            need = "no number of queries would (Δ = 0)" if pd.isna(needed) else f"{int(needed):,} queries needed"
            parts.append(
                f"{system} against {self.baseline}: {int(row['queries'])} queries detect ±"
                f"{row['minimum_detectable_difference']:.4f} in {self.metric} with {self.power:.0%} power; to detect "
                f"{row['delta']:+.4f}, {need} (power now {row['power_now']:.0%})"
            )
        return "; ".join(parts) + "."

    def _repr_html_(self) -> str:
        return html_page(f"Power: {self.metric} against {self.baseline}", self.verdict, self.table)


def power(
    evaluation_or_folder: Any,
    *,
    metric: str = "nDCG@10",
    delta: float | None = None,
    baseline: str | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    resamples: int = 2000,
    seed: int = 0,
) -> Power:
    """How many queries each paired comparison needs, and the smallest difference it detects (``irflow power``).

    ``evaluation_or_folder``: a result folder of ``irflow run``, or any object with a ``per_query``
    DataFrame (``system, query_id, metric, value``) and a ``baseline`` attribute (an ``irflow.Evaluation``).
    ``delta``: the difference to detect (default: the observed one); ``baseline``: the system compared
    with (default: the evaluation's); ``resamples``: the check of the t approximation by resampling (0: skip).
    """
    from irflow.tasks.compare.power import power_table
    from irflow.tasks.report.plots import short_labels

    if not isinstance(metric, str) or not metric:
        raise InputError(f"metric={metric!r}: expected a metric name of the evaluation, e.g. 'nDCG@10'")
    if delta is not None and (
        isinstance(delta, bool) or not isinstance(delta, int | float) or not math.isfinite(delta)
    ):
        raise InputError(f"delta={delta!r}: expected a finite number (the difference to detect) or None (observed)")
    alpha = check_probability("alpha", alpha, "the significance level; 0.05")
    power = check_probability("power", power, "the power wanted; 0.8")
    resamples = check_int("resamples", resamples, 0, "resampled experiments; 0 skips the check")
    seed = check_int("seed", seed, 0, "the seed of the resampling")
    if isinstance(evaluation_or_folder, str | Path):
        from irflow.tasks.report.results import load_results

        folder = Path(evaluation_or_folder)
        if not folder.is_dir():
            raise InputError(
                f"evaluation_or_folder={str(folder)!r}: no such folder; expected a result folder of irflow run "
                "or an irflow.Evaluation"
            )
        stored = load_results(folder)
        labels = short_labels(list(dict.fromkeys(stored.per_query["system"])), stored.document.get("labels"))
        per_query = stored.per_query.assign(system=stored.per_query["system"].map(labels))  # by label
        spec_of = {label: spec for spec, label in labels.items()}
        default = stored.document.get("baseline") or next(iter(stored.document["systems"]))
        default = labels.get(default, default)
    elif isinstance(getattr(evaluation_or_folder, "per_query", None), pd.DataFrame):
        per_query = evaluation_or_folder.per_query
        missing = {"system", "query_id", "metric", "value"} - set(per_query.columns)
        if missing:
            raise InputError(
                f"evaluation_or_folder.per_query lacks column(s) {', '.join(sorted(missing))}; expected "
                "system, query_id, metric, value"
            )
        default = getattr(evaluation_or_folder, "baseline", None) or next(iter(dict.fromkeys(per_query["system"])))
        given = getattr(evaluation_or_folder, "systems", None)  # an Evaluation's: label -> spec
        if isinstance(given, Mapping):
            spec_of = {str(s): str(given.get(s, s)) for s in dict.fromkeys(per_query["system"])}
        else:  # a table by spec: by label from here on
            labels = short_labels(list(dict.fromkeys(per_query["system"])))
            per_query = per_query.assign(system=per_query["system"].map(labels))
            spec_of = {label: spec for spec, label in labels.items()}
            default = labels.get(default, default)
    else:
        raise InputError(
            "evaluation_or_folder: expected a result folder of irflow run or an object with a per_query DataFrame "
            f"(an irflow.Evaluation), got {type(evaluation_or_folder).__name__}"
        )
    label_of_spec = {spec: label for label, spec in spec_of.items()}
    base = baseline or default
    base = label_of_spec.get(base, base)  # a baseline named by its spec or its label
    metrics = sorted(per_query["metric"].unique())
    if metric not in metrics:
        raise InputError(f"metric={metric!r}: the evaluation has no per-query values of it; it has {metrics}")
    systems = list(dict.fromkeys(per_query["system"]))
    if base not in systems:
        raise InputError(f"baseline={base!r} is not one of the evaluation's systems: {', '.join(systems)}")
    found = (
        power_table(per_query, metric, base, delta, alpha=alpha, power=power, resamples=resamples, seed=seed)
        if len(systems) > 1
        else {}
    )
    columns = list(
        ("queries mean_difference sd_difference effect minimum_detectable_difference delta queries_needed "
         "queries_needed_resampled power_now alpha power").split()
    )  # fmt: skip
    table = pd.DataFrame([p.as_dict() for p in found.values()], index=list(found), columns=columns)
    for column in ("queries_needed", "queries_needed_resampled"):
        table[column] = table[column].astype("Int64")
    table.insert(0, "spec", [spec_of.get(str(s), str(s)) for s in table.index])
    return Power(metric, str(base), table.rename_axis("system"), alpha, power)


# ---------------------------------------------------------------------------------------------------------
# interleaving

OFFLINE_METRIC = "nDCG@10"
USERS_PER_QUERY = 20


def rankings_of(runs: Mapping[str, pd.DataFrame], systems: Sequence[str]) -> dict[str, tuple[list[str], list[str]]]:
    """query → (A's ranked doc ids, B's), for the queries either system answered."""
    tops = [
        {q: g.sort_values("rank")["doc_id"].astype(str).tolist() for q, g in runs[s].groupby("query_id")}
        for s in systems
    ]
    return {str(q): (tops[0].get(q, []), tops[1].get(q, [])) for q in sorted(set(tops[0]) | set(tops[1]))}


@dataclass(frozen=True)
class InterleaveRequest:
    """What ``irflow interleave`` was asked (checked by :func:`check_interleave`)."""

    dataset: str | None = None
    systems: tuple[str, ...] = ()
    clicks: str = "pbm"
    split: str | None = None
    users: int | None = None
    depth: int = 10
    seed: int = 0
    log: str | None = None
    alpha: float = 0.05
    power: float = 0.8
    replicates: int = 500


def check_interleave(request: InterleaveRequest) -> InterleaveRequest:
    """The request with canonical system specs; every error names the option, before any work."""
    from irflow.tasks.online.clickmodels import parse_click_model

    systems = request.systems
    if len(systems) not in ((0, 2) if request.log else (2,)):
        raise InputError(f"--system: give exactly two systems (A, then B), got {len(systems)}")
    if request.log is None:
        from irflow.tasks.experiment import check_models
        from irflow.tasks.ingest import check_name
        from irflow.tasks.systems.specs import as_spec

        if request.dataset is None:
            raise InputError("--dataset is needed to simulate users (or give --log FILE)")
        check_name(request.dataset)
        specs = tuple(str(as_spec(s)) for s in systems)
        check_models(list(specs))
        if specs[0] == specs[1]:
            raise InputError(f"--system: the two systems are the same ({specs[0]})")
        parse_click_model(request.clicks)  # a bad spec fails before any stage
        if not 1 <= request.depth <= 100:
            raise InputError(f"--depth expects the list length shown, 1 to 100, got {request.depth}")
        return InterleaveRequest(**{**vars(request), "systems": specs})
    return request


def simulate_users(
    data: Dataset, runs: dict[str, pd.DataFrame], request: InterleaveRequest, users: int
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Simulated users on two systems' rankings: the metrics document and the per-query table."""
    from irflow.tasks.metrics import evaluate as evaluate_metrics
    from irflow.tasks.metrics import mean
    from irflow.tasks.online.clickmodels import house_grades, parse_click_model
    from irflow.tasks.online.interleave import outcome, simulate
    from irflow.tasks.online.interleave_power import queries_to_detect
    from irflow.tasks.online.interleave_report import interleave_document

    systems = list(request.systems)
    model = parse_click_model(request.clicks)
    sim = simulate(
        rankings_of(runs, systems), house_grades(data.qrels), model, users, k=request.depth, seed=request.seed
    )
    offline = {s: mean(evaluate_metrics(runs[s], data.qrels, [OFFLINE_METRIC])) for s in systems}
    document = interleave_document(
        outcome(sim.credits, request.alpha),
        (systems[0], systems[1]),
        mode="simulation",
        dataset={"name": data.name, "split": data.split, "queries": int(len(data.queries))},
        click_model=model.describe(),
        depth=request.depth,
        seed=request.seed,
        ctr=sim.ctr(),
        offline=offline,
        queries_to_detect=queries_to_detect(
            sim, alpha=request.alpha, power=request.power, replicates=request.replicates, seed=request.seed
        ),
    )
    return document, sim.per_query()


@dataclass(frozen=True)
class InterleaveStages:
    """The interleaving's stages: the pure functions by default, Prefect tasks in the flow."""

    ingest: Callable[[str, str | None], Dataset] = ingest
    embed: Callable[[Dataset, Sequence[str]], Any] = embed
    retrieve: Callable[[Dataset, str, int | None], Any] = retrieve
    simulate: Callable[
        [Dataset, dict[str, pd.DataFrame], InterleaveRequest, int], tuple[dict[str, Any], pd.DataFrame]
    ] = simulate_users


def run_interleave(
    request: InterleaveRequest, stages: InterleaveStages = InterleaveStages()
) -> tuple[dict[str, Any], pd.DataFrame, str]:
    """metrics.json's content, the per-query table and a run name, for a checked request."""
    from irflow.tasks.online.interleave import credit_table, outcome
    from irflow.tasks.online.interleave_log import log_credits, read_interleaving_log
    from irflow.tasks.online.interleave_report import interleave_document

    if request.log is not None:
        read, teams = read_interleaving_log(request.log, request.systems)
        credits = log_credits(read)
        document = interleave_document(
            outcome(credits["credit"].to_numpy(), request.alpha), teams, mode="log", log=str(request.log)
        )
        return document, credit_table(credits["query"], credits["credit"]), f"interleave {Path(request.log).name}"
    data = stages.ingest(str(request.dataset), request.split)
    specs = list(request.systems)
    stages.embed(data, specs)
    runs = {s: stages.retrieve(data, s, request.depth).run for s in specs}
    users = request.users or USERS_PER_QUERY * len(data.queries)
    document, per_query = stages.simulate(data, runs, request, users)
    labels = side_labels(document["interleave"])
    return document, per_query, f"interleave {data.name} {labels['A']} vs {labels['B']}"


def write_interleave(folder: str | Path, document: Mapping[str, Any], per_query: pd.DataFrame) -> None:
    """Publish the result folder whole: metrics.json, report.md, per_query.parquet."""
    from irflow.tasks.core.atomic import write_json
    from irflow.tasks.core.output_folder import publish
    from irflow.tasks.online.interleave_report import interleave_markdown

    with publish(folder) as build:
        write_json(build / "metrics.json", document)
        (build / "report.md").write_text(interleave_markdown(document), encoding="utf-8")
        per_query.to_parquet(build / "per_query.parquet", index=False)


@dataclass(frozen=True, eq=False)
class Interleaving(FrameEquality):
    """Team-draft interleaving of system A against system B (``irflow interleave``).

    Systems are named by their labels (``dense:all-MiniLM-L6-v2``; a log's team names as they are), their
    specs one field away (``specs``, the outcome's ``spec`` column).
    ``outcome``: one row per system (index ``A``, ``B``: ``system`` (the label), ``spec``, ``wins``, ``ctr``,
    ``offline`` nDCG@10 where simulated); ``impressions``, ``ties``, ``delta_ab`` and the sign test's
    ``p_value`` beside it;
    ``per_query``: ``query_id, impressions, wins, ties, losses`` (A against B); ``queries_to_detect``: the
    queries each test needs (simulation only; ``None`` where more than searched).
    """

    mode: str  # "simulation" or "log"
    systems: tuple[str, str]  # A, B: their labels
    specs: tuple[str, str]  # A, B: their specs
    outcome: pd.DataFrame
    impressions: int
    ties: int
    delta_ab: float
    p_value: float
    alpha: float
    prefers: str | None  # the preferred system's label, None without a significant preference
    per_query: pd.DataFrame
    queries_to_detect: pd.DataFrame | None
    _document: dict[str, Any] = field(repr=False)

    @property
    def verdict(self) -> str:
        """Which system users prefer, or "no preference" said plainly."""
        a, b = self.systems
        wins = self.outcome["wins"]
        counts = f"{int(wins['A']):,} A wins, {self.ties:,} ties, {int(wins['B']):,} B wins over {self.impressions:,}"
        if self.prefers:
            test = f"p = {_p(self.p_value)} < α = {self.alpha}"
            return f"Users prefer {self.prefers} (A = {a}, B = {b}: {counts}; {test})."
        if self.impressions and self.ties == self.impressions:
            return f"No preference: {a} and {b} tie on every impression (identical clicks for both teams)."
        return f"No preference at α = {self.alpha} between {a} and {b} ({counts}; p = {_p(self.p_value)})."

    @classmethod
    def from_document(cls, document: Mapping[str, Any], per_query: pd.DataFrame) -> Interleaving:
        """The result of ``irflow interleave``'s metrics.json and per_query table."""
        document = _normalised(document)
        block = document["interleave"]
        if block.get("offline"):  # metrics.json holds its keys sorted: A, then B, as the command wrote them
            block["offline"] = {s: block["offline"][s] for s in block["systems"].values() if s in block["offline"]}
        o = block["outcome"]
        labels, specs = side_labels(block), block["systems"]
        table = pd.DataFrame(
            {
                "system": [labels["A"], labels["B"]],
                "spec": [specs["A"], specs["B"]],
                "wins": [o["wins"], o["losses"]],
            },
            index=pd.Index(["A", "B"], name="team"),
        )
        if block.get("ctr"):
            table["ctr"] = [float(block["ctr"]["A"]), float(block["ctr"]["B"])]
        for name, values in (block.get("offline") or {}).items():
            for m, v in values.items():
                table.loc[table["spec"] == name, m] = float(v)
        sizes = block.get("queries_to_detect")
        detect = None
        if sizes:
            detect = pd.DataFrame(
                [
                    {
                        "test": test,
                        "prefers": labels.get(sizes[test].get("prefers") or ""),
                        "queries": sizes[test]["queries"],
                    }
                    for test in ("interleaving", "ab_ctr")
                ]
            ).astype({"queries": "Int64"})
        return cls(
            mode=block["mode"],
            systems=(labels["A"], labels["B"]),
            specs=(specs["A"], specs["B"]),
            outcome=table,
            impressions=int(o["impressions"]),
            ties=int(o["ties"]),
            delta_ab=float(o["delta_ab"]),
            p_value=float(o["p_value"]),
            alpha=float(o["alpha"]),
            prefers=label_of(block, block["prefers"]),
            per_query=per_query.reset_index(drop=True),
            queries_to_detect=detect,
            _document={"interleave": block},
        )

    def save(self, path: str | Path) -> Path:
        """Write exactly the folder ``irflow interleave --output PATH`` writes."""
        write_interleave(path, self._document, self.per_query)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> Interleaving:
        """Read a folder written by :meth:`save` or ``irflow interleave`` back."""
        document = _read_json(path, "irflow interleave")
        if "interleave" not in document or not (Path(path) / "per_query.parquet").is_file():
            raise InputError("path: not a result folder of irflow interleave", path=str(path))
        return cls.from_document(document, pd.read_parquet(Path(path) / "per_query.parquet"))

    def _repr_html_(self) -> str:
        return html_page(f"Interleaving: {self.systems[0]} (A) vs {self.systems[1]} (B)", self.verdict, self.outcome)


def interleave(
    dataset: str | None = None,
    systems: Sequence[str] = (),
    *,
    log: str | Path | None = None,
    clicks: str = "pbm",
    split: str | None = None,
    users: int | None = None,
    depth: int = 10,
    seed: int = 0,
    alpha: float = 0.05,
    power: float = 0.8,
    replicates: int = 500,
    track: bool = False,
    experiment: str = "irflow",
) -> Interleaving:
    """Team-draft interleaving of two systems (``irflow interleave``).

    Simulated users: ``dataset`` and two ``systems`` (A, then B; spec strings), ``users`` simulated users
    (default 20 per query) clicking by the click model ``clicks`` on the top ``depth``. A real log:
    ``log`` (one row per result shown: impression, query, position, team, clicked; ``systems``, if given,
    name its two teams, A first). ``track``: log to MLflow (experiment ``experiment``).
    """
    if isinstance(systems, str):
        raise InputError(f"systems={systems!r}: expected a list of two system specs, e.g. ['bm25', 'dense:minilm']")
    if dataset is not None and not isinstance(dataset, str):
        raise InputError(f"dataset={dataset!r}: expected a dataset name such as 'techdocs'")
    if log is None and (dataset is None or len(systems) != 2):
        raise InputError("dataset and systems: give a dataset and two systems (A, then B), or log=FILE")
    if log is not None and not Path(log).is_file():
        raise InputError(f"log={str(log)!r}: no such file; expected an interleaving log (CSV, TSV, JSONL, Parquet)")
    if users is not None:
        check_int("users", users, 1, "simulated users, one query each; default 20 per query")
    check_int("replicates", replicates, 10, "simulated experiments per sample size; 500")
    check_int("seed", seed, 0, "the seed of the users, coin flips and clicks")
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 100:
        raise InputError(f"depth={depth!r}: expected the list length shown, 1 to 100 (10)")
    check_probability("alpha", alpha, "the significance level; 0.05")
    check_probability("power", power, "the power for the queries needed; 0.8")
    track = check_flag("track", track)
    request = InterleaveRequest(
        dataset, tuple(systems), clicks, split, users, depth, seed, str(log) if log else None, alpha, power, replicates
    )
    try:
        request = check_interleave(request)
    except InputError as exc:
        raise InputError(str(exc).replace("--", "")) from None
    if track:
        from irflow.tasks.tracking import check_tracking

        check_tracking(experiment=experiment)
    document, per_query, name = run_interleave(request)
    result = Interleaving.from_document(document, per_query)
    if track:
        with tempfile.TemporaryDirectory(prefix="irflow-interleave-") as folder:
            result.save(Path(folder) / "result")
            track_interleave(Path(folder) / "result", result._document, experiment, name, tags={})
    return result


def track_interleave(
    output: Path, document: Mapping[str, Any], experiment: str, name: str, tags: Mapping[str, str]
) -> tuple[Any, str]:
    """One MLflow run: settings as params, the figures as metrics, the result files as artifacts."""
    from irflow.tasks.online.interleave_report import interleave_metrics
    from irflow.tasks.tracking import Tracker
    from irflow.tasks.tracking.store import ending_runs

    tracker = Tracker(experiment)
    block = document["interleave"]
    with ending_runs():
        run_id = tracker.start(name, "interleave", tags=dict(tags))
        labels = side_labels(block)
        params = {"system_a": block["systems"]["A"], "system_b": block["systems"]["B"], "mode": block["mode"]}
        params |= {"label_a": labels["A"], "label_b": labels["B"]}
        params |= {k: block[k] for k in ("depth", "seed", "log") if k in block}
        if "dataset" in block:
            params |= {"dataset": block["dataset"]["name"], "split": block["dataset"]["split"]}
        if "click_model" in block:
            params |= {f"clicks.{k}": v for k, v in block["click_model"].items()}
        tracker.log(run_id, params=params, metrics=interleave_metrics(document))
        tracker.log_files(run_id, output, files=("metrics.json", "report.md", "per_query.parquet"))
        tracker.end(run_id)
    return tracker, run_id


__all__ = [
    "ABTest",
    "AbTestConfig",
    "AbTestStages",
    "InterleaveRequest",
    "InterleaveStages",
    "Interleaving",
    "Power",
    "SampleRatio",
    "abtest",
    "abtest_mlflow_metrics",
    "check_interleave",
    "interleave",
    "power",
    "rankings_of",
    "run_abtest",
    "run_interleave",
    "simulate_users",
    "track_abtest",
    "track_interleave",
    "write_interleave",
]
