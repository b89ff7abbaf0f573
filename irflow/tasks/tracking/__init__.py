"""irflow tracking: every evaluation in MLflow, and nothing else imports MLflow.

Public API::

    from irflow.tasks.tracking import Tracker, check_tracking, log_evaluation, tracking_uri

Modules: ``log`` (one evaluation logged as a parent run with a child per system: params, metrics,
per-query tables, the report and plots), ``params`` (what a run records, from plain data), ``store``
(the store's URI, its credentials kept out of every message, the thin client), ``check`` (the
fail-fast check of the store before any stage runs), ``read`` (tracked evaluations read back),
``view`` (the run list's saved view with irflow's headline columns).
"""

from __future__ import annotations

from irflow.tasks.tracking.log import (
    KIND,
    TrackingError,
    TrackingOptions,
    check_tracking,
    log_evaluation,
    metric_key,
    mlflow_key,
    snapshot,
    tracking_uri,
)
from irflow.tasks.tracking.store import Tracker

__all__ = [
    "KIND",
    "Tracker",
    "TrackingError",
    "TrackingOptions",
    "check_tracking",
    "log_evaluation",
    "metric_key",
    "mlflow_key",
    "snapshot",
    "tracking_uri",
]
