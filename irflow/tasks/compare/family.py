"""The family a multiple-comparison correction runs over, as a value every output can state.

An adjusted p-value means nothing without its family: Holm over the 2 comparisons with the baseline
on nDCG@10 and Holm over 12 comparisons of every metric give different p for the same pair. The
report and ``irflow compare`` both describe their family with :meth:`ComparisonFamily.describe`,
so two outputs that disagree say why, and agree when given the same family.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

_METHODS = {"holm": "Holm (1979)", "bonferroni": "Bonferroni"}


@dataclass(frozen=True)
class ComparisonFamily:
    """The comparisons one correction adjusts together: ``pairs`` of (baseline, candidate) on ``metrics``
    (usually one metric), corrected by ``method`` (``holm`` or ``bonferroni``)."""

    method: str
    metrics: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]

    @property
    def size(self) -> int:
        """How many p-values the correction adjusts together."""
        return len(self.metrics) * len(self.pairs)

    def describe(self, labels: Mapping[str, str] | None = None, *, list_pairs: bool = True) -> str:
        """One sentence, e.g. "Holm (1979) over a family of 2 comparisons (nDCG@10: hybrid vs bm25,
        dense vs bm25)"; a family of one says no correction applies, an empty one that nothing was compared."""
        name = _METHODS.get(self.method, self.method.capitalize())
        if self.size == 0:
            return "no comparison, so no correction"
        if self.size == 1:
            return f"a single comparison, so {name} leaves its p unchanged"
        what = ", ".join(self.metrics)
        if list_pairs:
            label = labels or {}
            pairs = ", ".join(f"{label.get(c, c)} vs {label.get(b, b)}" for b, c in self.pairs)
            what = f"{what}: {pairs}"
        each = "" if len(self.metrics) == 1 else f"{len(self.pairs)} pairs × {len(self.metrics)} metrics, "
        return f"{name} over a family of {self.size} comparisons ({each}{what})"


def families(table: pd.DataFrame) -> list[ComparisonFamily]:
    """The families of a comparison table (``tasks.compare.significance.compare_systems``/``compare_all``):
    one per metric, as those functions correct, in the table's order."""
    if table.empty:
        return []
    out = []
    for metric, rows in table.groupby("metric", sort=False):
        method = str(rows["correction"].iloc[0]) if "correction" in rows else "holm"
        pairs = tuple(zip(rows["baseline"].astype(str), rows["candidate"].astype(str)))
        out.append(ComparisonFamily(method, (str(metric),), pairs))
    return out


__all__ = ["ComparisonFamily", "families"]
