"""Did a system get worse? Paired comparisons of two runs of the same systems on the same queries.

Inputs are long per-query tables ``dataset, system, query_id, metric, value`` (``system`` is the
label that identifies a system across runs). Each (dataset, system, metric) present in both runs is
one paired comparison (``tasks.compare.significance.compare``, candidate = after, baseline = before); the
randomization test's p-values are corrected over the whole family. A regression is a drop larger
than ``threshold`` whose corrected p-value is below ``alpha``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from irflow.tasks.compare.significance import Correction, compare, correct
from irflow.tasks.core.schema import InputError

KEYS = ["dataset", "system", "metric"]
CHANGE_COLUMNS = [
    *KEYS,
    "n",
    "before",
    "after",
    "delta",
    "ci_low",
    "ci_high",
    "p_ttest",
    "p_wilcoxon",
    "p_randomization",
    "p_adjusted",
    "wins",
    "ties",
    "losses",
]
CAUSES = {  # param -> how a change of it reads as a cause
    "dataset.fingerprint": "dataset {dataset} changed (fingerprint {old:.12} -> {new:.12})",
    "system.spec": "system {system} changed ({old} -> {new})",
    "model.identity": "model of {system} changed ({old} -> {new})",
    "model.identity.2": "second model of {system} changed ({old} -> {new})",
    "rerank.model_identity": "reranker of {system} changed ({old} -> {new})",
    "irflow.version": "irflow changed ({old} -> {new})",
    "git.commit": "code changed (commit {old:.12} -> {new:.12})",
}


def paired_changes(
    before: pd.DataFrame,
    after: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    *,
    correction: Correction = "holm",
    permutations: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (dataset, system, metric) in both tables: means, delta (after − before), tests, CI."""
    rows: list[dict[str, Any]] = []
    groups = {k: g for k, g in after.groupby(KEYS, sort=False)}
    for key, old in before.groupby(KEYS, sort=False):
        if (metrics and key[2] not in metrics) or key not in groups:
            continue
        new = groups[key]
        try:
            c = compare(
                pd.Series(old["value"].to_numpy(), index=old["query_id"].astype(str)),
                pd.Series(new["value"].to_numpy(), index=new["query_id"].astype(str)),
                permutations=permutations,
                bootstrap=1000,
                seed=seed,
            )
        except InputError:  # not the same queries (a changed dataset): nothing to pair
            continue
        rows.append(
            {
                **dict(zip(KEYS, key)),
                "n": c.n,
                "before": c.baseline_mean,
                "after": c.candidate_mean,
                "delta": c.delta,
                "ci_low": c.ci_low,
                "ci_high": c.ci_high,
                "p_ttest": c.p_ttest,
                "p_wilcoxon": c.p_wilcoxon,
                "p_randomization": c.p_randomization,
                "wins": c.wins,
                "ties": c.ties,
                "losses": c.losses,
            }
        )
    table = pd.DataFrame(rows, columns=[c for c in CHANGE_COLUMNS if c != "p_adjusted"])
    table.insert(
        len(table.columns) - 3,
        "p_adjusted",
        correct(table["p_randomization"].tolist(), correction) if len(table) else [],
    )
    return table


def regressions(changes: pd.DataFrame, threshold: float, alpha: float) -> pd.DataFrame:
    """The rows that dropped by more than ``threshold`` with a corrected p-value below ``alpha``."""
    return changes[(changes["delta"] < -threshold) & (changes["p_adjusted"] < alpha)].reset_index(drop=True)


def likely_causes(before: Mapping[str, Any], after: Mapping[str, Any], **names: str) -> list[str]:
    """What changed between two runs' params that could explain a difference (see ``CAUSES``)."""
    out = []
    for key, text in CAUSES.items():
        old, new = before.get(key), after.get(key)
        if old is not None and new is not None and str(old) != str(new):
            out.append(text.format(old=str(old), new=str(new), **names))
    return out


def describe(row: Mapping[str, Any], causes: Sequence[str] = ()) -> str:
    """``techdocs / dense nDCG@10 dropped 0.6623 -> 0.3120 (delta -0.3503, p=0.0001 corrected)``, with causes."""
    text = (
        f"{row['dataset']} / {row['system']}: {row['metric']} dropped {row['before']:.4f} -> {row['after']:.4f} "
        f"(delta {row['delta']:+.4f}, p={row['p_adjusted']:.4g} corrected, n={row['n']})"
    )
    return text + (f"; likely cause: {'; '.join(causes)}" if causes else "")


def markdown(
    changes: pd.DataFrame,
    flagged: pd.DataFrame,
    causes: Mapping[tuple[str, str], Sequence[str]],
    *,
    previous: str | None,
    threshold: float,
    alpha: float,
) -> str:
    """The nightly comparison as Markdown: verdict, regressions with causes, and every comparison."""
    lines = ["# Nightly comparison", ""]
    if previous is None:
        lines += ["No earlier successful nightly run of this configuration: this run is the first baseline.", ""]
        return "\n".join(lines)
    lines += [
        f"Compared with MLflow run `{previous}`; a regression is a drop of more than {threshold:g} with a "
        f"corrected p-value below {alpha:g}.",
        "",
    ]
    if len(flagged):
        lines += [f"**{len(flagged)} regression(s)**", ""]
        lines += [
            f"- {describe(row, causes.get((row['dataset'], row['system']), ()))}" for row in flagged.to_dict("records")
        ]
    else:
        lines.append("**No regression.**")
    lines += [
        "",
        "| dataset | system | metric | before | after | delta | p (corrected) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in changes.to_dict("records"):
        lines.append(
            f"| {r['dataset']} | `{r['system']}` | {r['metric']} | {r['before']:.4f} | {r['after']:.4f} | "
            f"{r['delta']:+.4f} | {r['p_adjusted']:.4g} |"
        )
    return "\n".join(lines) + "\n"


__all__ = ["CAUSES", "CHANGE_COLUMNS", "describe", "likely_causes", "markdown", "paired_changes", "regressions"]
