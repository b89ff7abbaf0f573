"""PNG plots of a comparison: per-query distributions, metric@k curves, segment and document-type bars,
latency, and per-query differences against the baseline.

Each function takes plain tables (see ``tasks.compare.analysis``) and writes one PNG atomically.
matplotlib is imported lazily with the Agg backend, so importing this module costs nothing and
no display is ever needed. Systems keep one colour across all plots (their order in ``labels``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.compare.significance import format_p
from irflow.tasks.core.atomic import atomic_path
from irflow.tasks.systems.labels import labels_of

DPI = 110


def short_labels(systems: Sequence[str], given: Mapping[str, str] | None = None) -> dict[str, str]:
    """Readable names for plots and table headers: the ``given`` label of a system (``--label``, an
    experiment file), else its default label (:func:`~irflow.tasks.systems.labels.default_label`:
    ``dense:all-MiniLM-L6-v2``, ``http:127.0.0.1:8080/search``, ``run:bm25.trec``); full specs are kept
    wherever two systems would otherwise share a label."""
    return labels_of(systems, given)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _colors(labels: Mapping[str, str]) -> dict[str, str]:
    return {s: f"C{i % 10}" for i, s in enumerate(labels)}


def _figure(rows: int = 1, cols: int = 1, **kwargs: Any) -> tuple[Any, Any]:
    return _plt().subplots(rows, cols, layout="constrained", **kwargs)


def _legend(fig: Any, ax: Any, columns: int = 3) -> None:
    """One legend below the plot, outside the data, so it never hides a bar or a point."""
    handles, names = ax.get_legend_handles_labels()
    if handles:
        fig.legend(
            handles, names, loc="outside lower center", ncols=min(columns, len(handles)), fontsize=8, frameon=False
        )


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})
    _plt().close(fig)
    return path


def per_query_distribution(
    wide: pd.DataFrame, metric: str, path: str | os.PathLike[str], labels: Mapping[str, str]
) -> Path:
    """Box plot of each system's per-query values with every query as a jittered dot and the mean as a diamond."""
    systems = [s for s in labels if s in wide.columns]
    fig, ax = _figure(figsize=(8, 1.3 + 0.9 * len(systems)))
    rng = np.random.default_rng(0)
    colors = _colors(labels)
    for i, s in enumerate(systems):
        y = len(systems) - 1 - i
        values = wide[s].to_numpy()
        ax.boxplot(
            values,
            positions=[y],
            orientation="horizontal",
            widths=0.6,
            showfliers=False,
            medianprops={"color": "black"},
            boxprops={"color": colors[s]},
            whiskerprops={"color": colors[s]},
            capprops={"color": colors[s]},
        )
        ax.scatter(values, y + rng.uniform(-0.22, 0.22, values.size), s=9, alpha=0.45, color=colors[s], lw=0)
        ax.scatter([values.mean()], [y], marker="D", s=40, color="white", edgecolor="black", zorder=3)
        ax.text(
            0.0,
            y + 0.36,
            f"mean {values.mean():.3f} · median {np.median(values):.3f} · {np.mean(values == 0):.0%} of queries at 0",
            fontsize=8,
            va="bottom",
        )
    ax.set_yticks(range(len(systems)), [labels[s] for s in reversed(systems)])
    ax.set_ylim(-0.6, len(systems) - 0.25)
    ax.set_xlabel(f"per-query {metric} ({len(wide)} queries; diamond = mean, line = median)")
    ax.set_xlim(-0.03, max(1.03, float(np.nanmax(wide.to_numpy())) * 1.03) if len(wide) else 1.03)
    ax.set_title(f"Per-query {metric} by system")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def metric_curves(curves: pd.DataFrame, path: str | os.PathLike[str], labels: Mapping[str, str]) -> Path:
    """One panel per measure family: mean value at each measured cutoff k, one marker per system.

    The cutoffs are categories, evenly spaced and unconnected: a line from k=10 to k=100 would claim
    values at k=20..90 that were never measured."""
    families = list(dict.fromkeys(curves["family"]))
    fig, axes = _figure(1, len(families), figsize=(max(4.2 * len(families), 6), 4.0), squeeze=False)
    colors = _colors(labels)
    present = [s for s in labels if (curves["system"] == s).any()]
    width = 0.5 / max(len(present), 1)
    for ax, family in zip(axes[0], families):
        part = curves[curves["family"] == family]
        ks = sorted(part["k"].unique())
        slot = {k: i for i, k in enumerate(ks)}
        for j, s in enumerate(present):
            line = part[part["system"] == s]
            if len(line):
                x = [slot[k] + (j - (len(present) - 1) / 2) * width for k in line["k"]]
                ax.scatter(x, line["value"], marker="o", s=40, color=colors[s], edgecolor="black", label=labels[s])
        ax.set_xticks(range(len(ks)), [str(k) for k in ks])
        ax.set_xlim(-0.6, len(ks) - 0.4)
        ax.set_xlabel("cutoff k (measured values only)")
        ax.set_title(f"{family}@k")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("mean over queries")
    _legend(fig, axes[0][0])
    return _save(fig, path)


def _grouped_bars(
    ax: Any, table: pd.DataFrame, groups: list[str], columns: list[str], colors: list[str], names: list[str]
) -> None:
    height = 0.8 / len(columns)
    y = np.arange(len(groups))[::-1]
    for j, (column, color, name) in enumerate(zip(columns, colors, names)):
        ax.barh(y + 0.4 - height * (j + 0.5), table[column].to_numpy(), height=height, color=color, label=name)
    ax.set_yticks(y, groups)
    ax.grid(axis="x", alpha=0.3)


def segment_bars(
    table: pd.DataFrame, column: str, metric: str, path: str | os.PathLike[str], labels: Mapping[str, str]
) -> Path:
    """Mean ``metric`` per segment (``tasks.compare.analysis.segments`` output), one bar per system."""
    systems = [s for s in labels if s in table.columns]
    groups = [f"{v} (n={n})" for v, n in zip(table[column], table["queries"])]
    fig, ax = _figure(figsize=(8, 1.6 + 0.22 * len(groups) * max(len(systems), 2)))
    colors = _colors(labels)
    _grouped_bars(ax, table, groups, systems, [colors[s] for s in systems], [labels[s] for s in systems])
    ax.set_xlabel(f"mean {metric}")
    ax.set_title(f"{metric} by {column}")
    _legend(fig, ax)
    return _save(fig, path)


def document_share_bars(
    table: pd.DataFrame, column: str, k: int, path: str | os.PathLike[str], labels: Mapping[str, str]
) -> Path:
    """Share of each document type among relevant judgements (grey) and each system's top ``k``."""
    systems = [s for s in labels if s in table.columns]
    groups = [str(v) for v in table[column]]
    fig, ax = _figure(figsize=(8, 1.6 + 0.22 * len(groups) * (len(systems) + 1)))
    colors = _colors(labels)
    _grouped_bars(
        ax,
        table,
        groups,
        ["relevant", *systems],
        ["0.55", *(colors[s] for s in systems)],
        ["relevant documents", *(f"{labels[s]} top {k}" for s in systems)],
    )
    ax.xaxis.set_major_formatter(_plt().FuncFormatter(lambda x, _: f"{x:.0%}"))
    ax.set_xlabel("share of documents")
    ax.set_title(f"{column}: retrieved top {k} vs relevant")
    _legend(fig, ax, columns=2)
    return _save(fig, path)


def _plain_log_ticks(axis: Any, decades: float) -> None:
    """Label a log axis at 1-2-5 steps in plain numbers, minor ticks unlabelled: matplotlib's default
    labels every minor tick of a short range, and they overlap."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    axis.set_minor_formatter(NullFormatter())


def latency(costs: Mapping[str, Mapping[str, Any]], path: str | os.PathLike[str], labels: Mapping[str, str]) -> Path:
    """Per-query search latency per system (log scale): a box plot of the raw samples when the cost
    holds ``samples_ms``, else the recorded p50, p95 and p99 and the mean."""
    systems = [s for s in labels if costs.get(s, {}).get("p95_ms") is not None]
    fig, ax = _figure(figsize=(8, 1.6 + 0.8 * len(systems)))
    colors = _colors(labels)
    marks = (("p50_ms", "o", "p50"), ("p95_ms", "s", "p95"), ("p99_ms", "^", "p99"), ("mean_ms", "D", "mean"))
    for i, s in enumerate(systems):
        y, cost = len(systems) - 1 - i, costs[s]
        samples = cost.get("samples_ms")
        if samples:
            ax.boxplot(
                samples,
                positions=[y],
                orientation="horizontal",
                widths=0.5,
                whis=(1, 99),
                showfliers=True,
                flierprops={"markersize": 3, "markeredgecolor": colors[s]},
                boxprops={"color": colors[s]},
                whiskerprops={"color": colors[s]},
                capprops={"color": colors[s]},
                medianprops={"color": "black", "linewidth": 1.5},  # the median, not another system
            )
        else:
            values = [cost[k] for k, _, _ in marks[:3]]
            ax.plot(values, [y] * 3, color=colors[s], lw=2, alpha=0.5)
        for key, marker, name in marks:
            if cost.get(key) is not None:
                ax.scatter([cost[key]], [y], marker=marker, s=45, color=colors[s], edgecolor="black", zorder=3)
                if i == 0:  # legend entries in neutral colours: the marker, not the colour, is the statistic
                    ax.scatter([], [], marker=marker, s=45, color="white", edgecolor="black", label=name)
                if key == "p95_ms":
                    ax.annotate(
                        f"{cost[key]:.1f} ms",
                        (cost[key], y),
                        xytext=(0, 9),
                        textcoords="offset points",
                        ha="center",
                        fontsize=8,
                    )
    ax.set_xscale("log")
    ax.set_yticks(range(len(systems)), [labels[s] for s in reversed(systems)])
    ax.set_ylim(-0.6, len(systems) - 0.3)
    low = min(min(costs[s].get(k) or np.inf for k, _, _ in marks) for s in systems)
    high = max(max(costs[s].get(k) or 0 for k, _, _ in marks) for s in systems)
    ax.set_xlim(low / 1.6, high * 1.6)
    _plain_log_ticks(ax.xaxis, float(np.log10(high * 1.6) - np.log10(low / 1.6)))
    runs = {(costs[s].get("queries"), costs[s].get("queries_total"), costs[s].get("num_runs")) for s in systems}
    detail = ", ".join(
        f"{q}{f' of {t}' if t and t != q else ''} queries × {r} repeat{'s' if r != 1 else ''}"
        for q, t, r in sorted(runs, key=str)
    )
    ax.set_xlabel(f"search latency per query, ms (log scale; {detail})")
    ax.set_title("Latency per query")
    ax.grid(axis="x", which="both", alpha=0.3)
    _legend(fig, ax, columns=4)
    return _save(fig, path)


def differences(
    wide: pd.DataFrame,
    baseline: str,
    candidates: Sequence[str],
    metric: str,
    path: str | os.PathLike[str],
    labels: Mapping[str, str],
    tests: Mapping[str, Mapping[str, float]] | None = None,
    ci_label: str = "95% CI",
) -> Path:
    """Per-query ``candidate − baseline`` on ``metric``, sorted, one panel per candidate: green bars are
    queries the candidate wins, red ones it loses; the dashed line is the mean difference. ``tests``
    (candidate → ``ci_low``, ``ci_high``, ``p_adjusted``) adds the CI as a band and p to the title."""
    fig, axes = _figure(len(candidates), 1, figsize=(9, 0.4 + 2.8 * len(candidates)), squeeze=False, sharey=True)
    for ax, cand in zip(axes[:, 0], candidates):
        d = np.sort(wide[cand].to_numpy() - wide[baseline].to_numpy())[::-1]
        x = np.arange(d.size)
        ax.bar(x, d, width=1.0, color=np.where(d > 0, "#2e7d32", np.where(d < 0, "#c62828", "0.6")), lw=0)
        ax.axhline(0, color="black", lw=0.8)
        ax.axhline(d.mean(), color="black", lw=1.2, ls="--", zorder=4, label=f"mean Δ = {d.mean():+.4f}")
        test = (tests or {}).get(cand)
        if test:
            ax.axhspan(
                test["ci_low"],
                test["ci_high"],
                color="C0",
                alpha=0.35,
                lw=0,
                zorder=3,
                label=f"{ci_label} [{test['ci_low']:+.4f}, {test['ci_high']:+.4f}]",
            )
        wins, ties, losses = int((d > 0).sum()), int((d == 0).sum()), int((d < 0).sum())
        p = f", adjusted p {format_p(test['p_adjusted'])}" if test else ""
        ax.set_title(
            f"{labels[cand]} − {labels[baseline]}: {metric} per query (wins {wins} / ties {ties} / losses {losses}{p})",
            fontsize=10,
        )
        ax.set_xlim(-0.5, d.size - 0.5)
        ax.set_ylabel(f"Δ {metric}")
        ax.legend(fontsize=8, loc="upper right")
        ax.grid(axis="y", alpha=0.3)
    axes[-1, 0].set_xlabel("queries, sorted by difference")
    return _save(fig, path)


__all__ = [
    "differences",
    "document_share_bars",
    "latency",
    "metric_curves",
    "per_query_distribution",
    "segment_bars",
    "short_labels",
]


def drift_similarity(
    reference: np.ndarray, current: np.ndarray, threshold: float, path: str | os.PathLike[str]
) -> Path:
    """Histograms of the similarity to the nearest reference query: reference queries (leave-one-out)
    against current ones, with the "unseen topic" threshold; drift shows as current mass on the left."""
    fig, ax = _figure(figsize=(7, 3.2))
    bins = np.linspace(min(float(np.min(reference)), float(np.min(current)), threshold) - 0.02, 1.0, 30)
    ax.hist(reference, bins=bins, alpha=0.55, density=True, label=f"reference (leave-one-out, n={len(reference)})")
    ax.hist(current, bins=bins, alpha=0.55, density=True, label=f"current (n={len(current)})")
    ax.axvline(threshold, color="0.3", linestyle="--", linewidth=1, label=f"unseen topic below {threshold:.2f}")
    ax.set_xlabel("cosine similarity to the nearest reference query")
    ax.set_ylabel("density")
    _legend(fig, ax)
    return _save(fig, path)
