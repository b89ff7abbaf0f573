"""The ``interleave`` flow: two systems' rankings → team-draft interleaving with simulated users (or a real
interleaving log) → wins/ties/losses, Δ_AB, the sign test, the queries each test needs → result folder, MLflow.

Composition only: the rankings come from the evaluate flow's ingest, embed and retrieve stages (any spec
kind), the statistics from ``tasks.online``, the result folder is published whole, MLflow is
``tasks.tracking``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import flow, task
from prefect.cache_policies import NONE

from irflow.flows.evaluate import ingest_task, retrieve_task, validate
from irflow.flows.stages import embed_stage, link_to_mlflow, prefect_tags
from irflow.tasks.core import run_identity
from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.output_folder import publish
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.metrics import evaluate as evaluate_metrics
from irflow.tasks.metrics import mean
from irflow.tasks.online.clickmodels import house_grades, parse_click_model
from irflow.tasks.online.interleave import credit_table, outcome, simulate
from irflow.tasks.online.interleave_log import log_credits, read_interleaving_log
from irflow.tasks.online.interleave_power import queries_to_detect
from irflow.tasks.online.interleave_report import interleave_document, interleave_markdown, interleave_metrics
from irflow.tasks.tracking import Tracker, TrackingOptions, check_tracking
from irflow.tasks.tracking.store import ending_runs

OFFLINE_METRIC = "nDCG@10"
USERS_PER_QUERY = 20


def rankings_of(runs: Mapping[str, pd.DataFrame], systems: Sequence[str]) -> dict[str, tuple[list[str], list[str]]]:
    """query → (A's ranked doc ids, B's), for the queries either system answered."""
    tops = [
        {q: g.sort_values("rank")["doc_id"].astype(str).tolist() for q, g in runs[s].groupby("query_id")}
        for s in systems
    ]
    return {str(q): (tops[0].get(q, []), tops[1].get(q, [])) for q in sorted(set(tops[0]) | set(tops[1]))}


@task(name="simulate users", cache_policy=NONE)
def simulate_task(
    data: Dataset,
    runs: dict[str, pd.DataFrame],
    systems: list[str],
    clicks: str,
    users: int,
    depth: int,
    seed: int,
    alpha: float,
    power: float,
    replicates: int,
) -> tuple[dict[str, Any], pd.DataFrame]:
    model = parse_click_model(clicks)
    sim = simulate(rankings_of(runs, systems), house_grades(data.qrels), model, users, k=depth, seed=seed)
    offline = {s: mean(evaluate_metrics(runs[s], data.qrels, [OFFLINE_METRIC])) for s in systems}
    document = interleave_document(
        outcome(sim.credits, alpha),
        (systems[0], systems[1]),
        mode="simulation",
        dataset={"name": data.name, "split": data.split, "queries": int(len(data.queries))},
        click_model=model.describe(),
        depth=depth,
        seed=seed,
        ctr=sim.ctr(),
        offline=offline,
        queries_to_detect=queries_to_detect(sim, alpha=alpha, power=power, replicates=replicates, seed=seed),
    )
    return document, sim.per_query()


def _track(output: Path, document: dict[str, Any], options: TrackingOptions, name: str) -> dict[str, Any]:
    """One MLflow run: settings as params, the figures as metrics, the result files as artifacts."""
    tracker = Tracker(options.experiment)
    block = document["interleave"]
    with ending_runs():
        run_id = tracker.start(name, "interleave", tags=prefect_tags())
        params = {"system_a": block["systems"]["A"], "system_b": block["systems"]["B"], "mode": block["mode"]}
        params |= {k: block[k] for k in ("depth", "seed", "log") if k in block}
        if "dataset" in block:
            params |= {"dataset": block["dataset"]["name"], "split": block["dataset"]["split"]}
        if "click_model" in block:
            params |= {f"clicks.{k}": v for k, v in block["click_model"].items()}
        tracker.log(run_id, params=params, metrics=interleave_metrics(document))
        tracker.log_files(run_id, output, files=("metrics.json", "report.md", "per_query.parquet"))
        tracker.end(run_id)
    link_to_mlflow(tracker, run_id, "interleaving")
    return {"run_id": run_id, "experiment": tracker.experiment, "url": tracker.run_url(run_id)}


def interleave_flow_run_name() -> str:
    """Prefect's name for an interleave flow run: dataset (or the log), the two systems and the time."""
    from prefect.runtime import flow_run

    params = flow_run.parameters
    where = str(params.get("dataset") or "interleave-logs")
    return run_identity.run_name(where, ["interleave", *(params.get("systems") or ())])


@flow(name="interleave", flow_run_name=interleave_flow_run_name)
def interleave_flow(
    output: str,
    dataset: str | None = None,
    systems: Sequence[str] = (),
    clicks: str = "pbm",
    split: str | None = None,
    users: int | None = None,
    depth: int = 10,
    seed: int = 0,
    log: str | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    replicates: int = 500,
    tracking: TrackingOptions = TrackingOptions(),
) -> dict[str, Any]:
    """Interleave ``systems`` (two specs) on ``dataset`` with ``users`` simulated users (default 20 per
    query) clicking by ``clicks``; or, with ``log``, analyse a real interleaving log (``systems``, if
    given, name its two teams, A first). Writes ``output``/{metrics.json, report.md, per_query.parquet}."""
    if len(systems) not in ((0, 2) if log else (2,)):
        raise InputError(f"--system: give exactly two systems (A, then B), got {len(systems)}")
    if log is None:
        if dataset is None:
            raise InputError("--dataset is needed to simulate users (or give --log FILE)")
        specs, _ = validate(dataset, systems, [OFFLINE_METRIC])
        if specs[0] == specs[1]:
            raise InputError(f"--system: the two systems are the same ({specs[0]})")
        parse_click_model(clicks)  # a bad spec fails before any stage
        if not 1 <= depth <= 100:
            raise InputError(f"--depth expects the list length shown, 1 to 100, got {depth}")
    if tracking.enabled:
        check_tracking(experiment=tracking.experiment)
    if log is not None:
        read, teams = read_interleaving_log(log, tuple(systems))
        credits = log_credits(read)
        document = interleave_document(outcome(credits["credit"].to_numpy(), alpha), teams, mode="log", log=str(log))
        per_query = credit_table(credits["query"], credits["credit"])
        name = f"interleave {Path(log).name}"
    else:
        data = ingest_task(str(dataset), split)
        embed_stage(data, specs)
        results: dict[str, Any] = {s: retrieve_task(data, s, depth) for s in specs}
        runs = {s: result.run for s, result in results.items()}
        users = users or USERS_PER_QUERY * len(data.queries)
        document, per_query = simulate_task(data, runs, specs, clicks, users, depth, seed, alpha, power, replicates)
        name = f"interleave {data.name} {specs[0]} vs {specs[1]}"
    with publish(output) as build:
        write_json(build / "metrics.json", document)
        (build / "report.md").write_text(interleave_markdown(document), encoding="utf-8")
        per_query.to_parquet(build / "per_query.parquet", index=False)
    if tracking.enabled:
        document = {**document, "mlflow": _track(Path(output), document, tracking, tracking.run_name or name)}
        write_json(Path(output) / "metrics.json", document)
    return document


__all__ = ["interleave_flow", "rankings_of"]
