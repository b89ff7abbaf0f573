"""irflow online stage: what users' behaviour says about two systems, and what an offline set can detect.

Analysis of an online A/B test at its randomisation unit (delta-method intervals, sample-ratio
mismatch, always-valid sequential p-values), team-draft interleaving of two systems' rankings with
simulated or logged clicks, and the statistical power of an offline evaluation set.

A/B tests: ``abtest_log`` (the log read and checked, summed per unit), ``abtest`` (the metrics, the
delta method, the sample-ratio test), ``abtest_sequential`` (mSPRT), ``abtest_report`` (the result folder;
not imported here: it loads the report package).
"""

from __future__ import annotations

from irflow.tasks.online.abtest import METRICS, analyse, compare, ratio_delta, srm_test
from irflow.tasks.online.abtest_log import AbLog, read_ab_log
from irflow.tasks.online.abtest_sequential import msprt_p_values, sequential

__all__: list[str] = [
    # A/B tests
    "METRICS",
    "AbLog",
    "analyse",
    "compare",
    "msprt_p_values",
    "ratio_delta",
    "read_ab_log",
    "sequential",
    "srm_test",
]
