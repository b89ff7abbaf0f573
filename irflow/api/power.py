"""``irflow.power``: what an evaluation set's queries can detect, and how many it would take, as
``irflow power RESULT`` prints it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.api._results import (
    FrameEquality,
    check_int,
    check_probability,
    html_page,
)
from irflow.tasks.core.schema import InputError
from irflow.tasks.report.format import num, signed

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
        from irflow.tasks.report.power import nothing_to_compare, only_system

        if self.table.empty:
            return only_system(self.baseline, self.metric)
        parts = []
        for system, row in self.table.iterrows():
            said = nothing_to_compare(
                str(system), self.baseline, self.metric, row["mean_difference"], row["sd_difference"]
            )
            if said is not None:
                parts.append(said)
                continue
            needed = row["queries_needed"]
            need = "no number of queries would (Δ = 0)" if pd.isna(needed) else f"{int(needed):,} queries needed"
            parts.append(
                f"{system} against {self.baseline}: {int(row['queries'])} queries detect ±"
                f"{num(row['minimum_detectable_difference'])} in {self.metric} with {self.power:.0%} power; to detect "
                f"{signed(row['delta'])}, {need} (power now {row['power_now']:.0%})"
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


__all__ = [
    "Power",
    "power",
]
