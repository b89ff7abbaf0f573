"""irflow online stage: what users' behaviour says about two systems, and what an offline set can detect.

Analysis of an online A/B test at its randomisation unit (delta-method intervals, sample-ratio
mismatch, always-valid sequential p-values), team-draft interleaving of two systems' rankings with
simulated or logged clicks, and the statistical power of an offline evaluation set.

A/B tests: ``abtest_log`` (the log read and checked, summed per unit), ``abtest`` (the metrics, the
delta method, the sample-ratio test), ``abtest_days`` (the log day by day, spilled to a temporary
folder), ``abtest_sequential`` (mSPRT), ``abtest_report`` (the result folder;
not imported here: it loads the report package).
"""

from __future__ import annotations

from irflow.tasks.online.abtest import METRICS, analyse, compare, ratio_delta, srm_test
from irflow.tasks.online.abtest_log import AbLog, read_ab_log
from irflow.tasks.online.abtest_sequential import msprt_p_values, sequential
from irflow.tasks.online.clickmodels import ClickModel, house_grades, parse_click_model
from irflow.tasks.online.interleave import Outcome, Simulation, outcome, simulate, team_draft
from irflow.tasks.online.interleave_log import log_credits, read_interleaving_log
from irflow.tasks.online.interleave_power import queries_to_detect

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
    # interleaving
    "ClickModel",
    "Outcome",
    "Simulation",
    "house_grades",
    "log_credits",
    "outcome",
    "parse_click_model",
    "queries_to_detect",
    "read_interleaving_log",
    "simulate",
    "team_draft",
]
