"""irflow online stage: what users' behaviour says about two systems, and what an offline set can detect.

Analysis of an online A/B test at its randomisation unit (delta-method intervals, sample-ratio
mismatch, always-valid sequential p-values), team-draft interleaving of two systems' rankings with
simulated or logged clicks, and the statistical power of an offline evaluation set.
"""

from __future__ import annotations

# interleaving (helper "interleave"): keep these lines together
from irflow.tasks.online.clickmodels import ClickModel, house_grades, parse_click_model
from irflow.tasks.online.interleave import Outcome, Simulation, outcome, simulate, team_draft
from irflow.tasks.online.interleave_log import log_credits, read_interleaving_log
from irflow.tasks.online.interleave_power import queries_to_detect

__all__: list[str] = [
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
