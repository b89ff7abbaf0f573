"""``irflow.interleave``: team-draft interleaving of two systems with simulated users on a dataset, or a real
interleaving log, as ``irflow interleave`` computes it, in this process.

The ``interleave`` flow calls :func:`run_interleave` with its stages wrapped as Prefect tasks.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.api._results import (
    FrameEquality,
    check_flag,
    check_int,
    check_probability,
    html_page,
    normalised,
    read_metrics_json,
)
from irflow.api._stages import embed, ingest, retrieve
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.online.interleave_report import label_of, side_labels

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
    rankings = rankings_of(runs, systems)
    # the same top `depth` for every query: any preference or size would be the coin flips' noise
    identical = all(a[: request.depth] == b[: request.depth] for a, b in rankings.values())
    sim = simulate(rankings, house_grades(data.qrels), model, users, k=request.depth, seed=request.seed)
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
        queries_to_detect=None
        if identical
        else queries_to_detect(
            sim, alpha=request.alpha, power=request.power, replicates=request.replicates, seed=request.seed
        ),
    )
    if identical:
        document["interleave"] |= {"identical_rankings": True, "prefers": None}
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
        """Which system users prefer, or "no preference" said plainly (report.md's first line)."""
        from irflow.tasks.online.interleave_report import interleave_verdict

        return interleave_verdict(self._document)

    @classmethod
    def from_document(cls, document: Mapping[str, Any], per_query: pd.DataFrame) -> Interleaving:
        """The result of ``irflow interleave``'s metrics.json and per_query table."""
        document = normalised(document)
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
        document = read_metrics_json(path, "irflow interleave")
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
    "InterleaveRequest",
    "InterleaveStages",
    "Interleaving",
    "check_interleave",
    "interleave",
    "rankings_of",
    "run_interleave",
    "simulate_users",
    "track_interleave",
    "write_interleave",
]
