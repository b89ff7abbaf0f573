"""The ``annotate`` flow: zELO annotation with a judge ensemble (the command: ``irflow.cli.annotate``).

Composition only: each step is a thin Prefect task over ``tasks.annotate.pipeline``; MLflow gets
the judges, prompt version, call and failure counts, inter-judge agreement, benchmark figures and
the plots. Prefect and MLflow are imported only when the flow runs, so registering the command
keeps ``irflow --help`` fast: ``annotate_flow`` is built on first access.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from irflow.tasks.annotate.config import EXPERIMENT, AnnotateConfig


def __getattr__(name: str) -> Any:
    if name == "annotate_flow":
        return _annotate_flow()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _annotate_flow() -> Any:
    """Define the Prefect tasks and flow (imports Prefect)."""
    from prefect import flow, task
    from prefect.cache_policies import NONE

    from irflow.tasks.annotate import pipeline
    from irflow.tasks.tracking.log import check_tracking

    plan_task = task(name="plan annotation", cache_policy=NONE)(pipeline.plan)
    judge_task = task(name="judge pairs", cache_policy=NONE)(pipeline.judge)
    fit_task = task(name="ensemble + Bradley-Terry", cache_policy=NONE)(pipeline.fit)
    outputs_task = task(name="write annotation", cache_policy=NONE)(pipeline.write_outputs)
    track_task = task(name="track annotation", cache_policy=NONE)(log_annotation)

    @flow(name="annotate", flow_run_name=_flow_run_name)
    def annotate_flow(config: AnnotateConfig, track: bool = True, experiment: str = EXPERIMENT) -> dict[str, Any]:
        """Annotate ``config.dataset`` (candidates → pairs → judges → ensemble → Bradley–Terry → outputs); tracked:
        one run in the MLflow experiment ``experiment``."""
        if track:
            check_tracking(experiment=experiment)  # a store that cannot be written fails now, before any judge is paid
        p = plan_task(config)
        stats = judge_task(p)
        annotation = fit_task(p)
        summary = outputs_task(p, annotation, stats)
        if track:
            summary["mlflow_run_id"] = track_task(p, summary, experiment)
        return summary

    return annotate_flow


def annotation_name(config: Any, when: Any = None) -> str:
    """An annotate flow run's name: ``annotate_<dataset>_<UTC time>_<judges>`` (not Prefect's random
    ``foamy-rattlesnake``); ``config`` is an :class:`AnnotateConfig` or its fields (a deployment's form)."""
    from irflow.tasks.core.run_identity import run_name

    fields = config if isinstance(config, dict) else vars(config) if config is not None else {}
    judges = [str(j) for j in fields.get("judges") or ()]
    return "annotate_" + run_name(str(fields.get("dataset") or "annotation"), judges, when)


def _flow_run_name() -> str:
    from prefect.runtime import flow_run

    return annotation_name(flow_run.parameters.get("config"))


# ---------------------------------------------------------------------------------------------
# MLflow


def _metric(name: str) -> str:
    """``nDCG@10`` -> ``ndcg_at_10`` (the house spelling of a measure), anything else via ``mlflow_key``."""
    from irflow.tasks.core.schema import IrflowError
    from irflow.tasks.tracking.log import metric_key, mlflow_key

    try:
        return metric_key(name)
    except IrflowError:  # not an ir_measures name (accuracy, R@5(gt=10))
        return mlflow_key(name)


def metrics_of(summary: dict[str, Any]) -> dict[str, float]:
    """The flat MLflow metrics of an annotation summary."""
    from irflow.tasks.tracking.log import mlflow_key

    votes = summary["votes"]
    run = summary.get("this_run") or {}
    out: dict[str, float] = {
        "pairs": summary["pairs"],
        "queries": summary["candidates"]["queries"],
        "documents": summary["candidates"]["documents"],
        "calls": sum(run.get("calls", {}).values()),
        "retries": sum(run.get("retries", {}).values()),
        "missing_this_run": sum(run.get("missing", {}).values()),
        "votes_valid": sum(votes["valid"].values()),
        "votes_missing": sum(votes["missing"].values()),
        "pairs_without_outcome": votes["pairs_without_outcome"],
        "bt_max_iterations": summary["bradley_terry"]["max_iterations"],
        "bt_converged": float(summary["bradley_terry"]["converged"]),
    }
    calibration = summary.get("calibration") or {}
    for key in ("demoted", "queries_without_relevant"):
        if key in calibration:
            out[f"calibration_{key}"] = calibration[key]
    for judge in summary["judges"]:
        out[mlflow_key("calls", judge)] = run.get("calls", {}).get(judge, 0)
        out[mlflow_key("missing", judge)] = votes["missing"][judge]
    for pair, value in summary["inter_judge_agreement"].items():
        out[mlflow_key("agreement", pair)] = value["agreement"]
    human = summary.get("human_grades") or {}
    for judge, value in human.get("battles", {}).items():
        out[mlflow_key("human_agreement", judge)] = value["agreement"]
    for metric, value in human.get("zelo_vs_grades", {}).items():
        out[mlflow_key("zelo_vs_grades", _metric(metric))] = value
    for system, entry in (summary.get("benchmarks") or {}).items():
        for truth, values in entry.items():
            for metric, value in values.items():
                out[mlflow_key(system, truth, _metric(metric))] = value
    return {k: float(v) for k, v in out.items() if v is not None}


def log_annotation(p: Any, summary: dict[str, Any], experiment: str = EXPERIMENT) -> str:
    """One MLflow run (tasks.tracking): params, metrics, judges, outputs, plots; returns its id.
    Judges are described by name, model and key variable, never by key."""
    from irflow.tasks.tracking.log import Tracker, ending_runs, tracking_uri

    tracker = Tracker(experiment, tracking_uri())  # checked when the flow started
    config = p.config
    folder = Path(config.output)
    with ending_runs():  # FAILED on an error, KILLED on Ctrl-C or SIGTERM
        run_id = tracker.start(f"annotate {p.dataset.name}", "annotation")
        tracker.log(
            run_id,
            params={
                "dataset": p.dataset.name,
                "split": p.dataset.split,
                "fingerprint": p.dataset.fingerprint,
                "system": config.system or "candidates table",
                "k": config.k,
                "queries": config.queries,
                "cycles": config.cycles,
                "seed": config.seed,
                "ensemble": config.ensemble,
                "prior": config.prior,
                "anchors": config.anchors,
                "anchor_threshold": config.anchor_threshold if config.anchors else None,
                "prompt_version": summary["prompt_version"],
                "prompt_sha256": summary["prompt_sha256"],
                "judges": ", ".join(summary["judges"]),
                "judge_versions": ", ".join(j.version for j in p.judges),
                "output": str(folder.resolve()),
            },
            metrics=metrics_of(summary),
        )
        tracker.client.log_dict(run_id, summary["judges"], "judges.json")
        tracker.log_files(
            run_id, folder, files=("summary.json", "annotated.jsonl", "qrels.trec", "config.json"), dirs=("plots",)
        )
        tracker.end(run_id)
    return run_id
