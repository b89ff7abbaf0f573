"""irflow compare stage: is a difference between systems real, how large, and where does it come from?

Public API::

    from irflow.tasks.compare import compare_all, correct

    table = compare_all(per_query, baseline="bm25", metrics=["nDCG@10"])   # one row per (system, metric)

Modules: ``significance`` (paired tests on per-query values: Fisher randomization, t, Wilcoxon, BCa
bootstrap intervals, effect sizes, Holm/Bonferroni/BH corrections; the statistics of one pair in
``paired_statistics``), ``family`` (the family a
correction runs over), ``regression`` (did a system get worse between two runs?), ``analysis``
(segments, document-type shares, length bias, disagreements, consistency), ``calibration`` (PPI++:
judge-labelled means corrected by a few human labels, and how many labels a target interval needs),
``power`` (the queries a paired comparison needs for 80 % power, and the smallest difference a set detects).
"""

from __future__ import annotations

from irflow.tasks.compare.calibration import Calibrated, calibrate_systems, calibrated_mean, labels_needed
from irflow.tasks.compare.family import ComparisonFamily, families
from irflow.tasks.compare.power import SetPower, power_table, queries_needed, set_power
from irflow.tasks.compare.regression import paired_changes, regressions
from irflow.tasks.compare.significance import (
    COMPARISON_COLUMNS,
    Comparison,
    bootstrap_ci,
    compare,
    compare_all,
    compare_systems,
    correct,
    effect_size,
    randomization_test,
)

__all__ = [
    "Calibrated",
    "COMPARISON_COLUMNS",
    "Comparison",
    "ComparisonFamily",
    "SetPower",
    "bootstrap_ci",
    "calibrate_systems",
    "calibrated_mean",
    "compare",
    "compare_all",
    "compare_systems",
    "correct",
    "effect_size",
    "families",
    "labels_needed",
    "paired_changes",
    "power_table",
    "queries_needed",
    "randomization_test",
    "regressions",
    "set_power",
]
