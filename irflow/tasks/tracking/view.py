"""The MLflow run list with irflow's headline columns shown, without anyone configuring columns.

MLflow 3.17's run list starts every metric, parameter and tag column hidden: its default columns are
Run Name, Created, Dataset, Duration, Source and Models (``getDefaultSelectedColumns`` and the
columns' ``initialHide`` in ``mlflow/server/js``), a user's own choice is kept in that browser's
localStorage, and no experiment or run tag changes the default. What the UI offers instead is the
*saved view* (the run list's **Views** menu, "Save view"): an experiment tag
``mlflow.sharedViewState.<id>`` holding ``{"name", "createdAt", "updatedAt", "state"}``, ``state``
being the run list's settings as JSON (plain, or ``deflate;`` + base64 of zlib data as the UI writes
it), opened from the Views menu or by the link ``#/experiments/<eid>/runs?viewStateShareKey=<id>``.

Every tracked evaluation saves (or extends) one such view, ``irflow headline``: the Dataset column,
the evaluation run's ``best.<metric>`` and ``irflow.best_system``, and the system runs' ``<metric>``,
in that order and wide enough to read (``columnOrder``, ``columnWidths``: the UI applies widths only
with an order).
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from typing import Any

from irflow.tasks.tracking.store import WORKFLOW, Tracker, split_credentials

VIEW_ID = "irflow-headline"
VIEW_NAME = "irflow headline"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
SHARE_PARAM = "viewStateShareKey"  # the run list's URL parameter naming a saved view
DEFLATE = "deflate;"
LEADING = ["attributes.`Run Name`", "runDateAndNestInfo", "attributes.`Dataset`", "duration"]  # the first columns
GROUPS = ("metrics.", "params.", "tags.")  # the list's column groups, after the attributes, in this order


def column(kind: str, key: str) -> str:
    """The run list's id of a column (``metrics.`ndcg_at_10```, ``attributes.`Dataset```, ...)."""
    return f"{kind}.`{key}`"


def headline_columns(metric: str) -> dict[str, int]:
    """The columns that show one headline metric (its MLflow key, e.g. ``ndcg_at_10``) for every run,
    with their widths in pixels (the run name's too, which is always shown)."""

    def width(key: str) -> int:  # the header's text, or a value's 16 digits
        return max(160, 60 + 7 * len(key))

    return {
        column("attributes", "Dataset"): 210,
        column("metrics", f"best.{metric}"): width(f"best.{metric}"),
        column("metrics", metric): width(metric),
        column("tags", "irflow.best_system"): 150,
    }


def column_order(columns: list[str]) -> list[str]:
    """The run list's display order: its leading attribute columns, then metrics, params and tags
    (the groups the list draws), each in the given order."""
    ids = list(dict.fromkeys([*LEADING, *columns]))
    return sorted(ids, key=lambda c: next((i + 1 for i, g in enumerate(GROUPS) if c.startswith(g)), 0))


def read_view(value: str | None) -> tuple[dict[str, Any], int | None]:
    """A stored view's settings and creation time (ms); ``({}, None)`` when absent or unreadable
    (a view that cannot be read is replaced rather than failing the evaluation's tracking)."""
    try:
        envelope = json.loads(value or "")
        state = str(envelope["state"])
        if state.startswith(DEFLATE):
            state = zlib.decompress(base64.b64decode(state[len(DEFLATE) :])).decode("utf-8")
        settings = json.loads(state)
        created = envelope.get("createdAt")
        if not isinstance(settings, dict):
            return {}, None
        return settings, created if isinstance(created, int) else None
    except (ValueError, KeyError, TypeError, AttributeError, zlib.error):
        return {}, None


def view_value(settings: dict[str, Any], created_ms: int, updated_ms: int) -> str:
    """The experiment tag's value for a view with these settings (state stored as plain JSON)."""
    envelope = {"name": VIEW_NAME, "createdAt": created_ms, "updatedAt": updated_ms, "state": json.dumps(settings)}
    return json.dumps(envelope)


def save_headline_view(tracker: Tracker, metric: str) -> dict[str, Any]:
    """Save the ``irflow headline`` view in the tracker's experiment with ``metric``'s columns added to
    those it already shows (a user's other settings kept); returns the view's settings. An unchanged
    view is not rewritten. Two evaluations with different headline metrics saving at the same moment
    may leave one metric's columns out until the next evaluation saves it again."""
    experiment = tracker.client.get_experiment(tracker.experiment_id)
    settings, created = read_view(experiment.tags.get(VIEW_TAG))
    shown = [str(c) for c in settings.get("selectedColumns") or []]
    wanted = headline_columns(metric)
    columns = list(dict.fromkeys([*shown, *wanted]))
    if columns == shown:
        return settings
    widths = {LEADING[0]: 250, **wanted, **dict(settings.get("columnWidths") or {})}
    order = column_order([*[str(c) for c in settings.get("columnOrder") or []], *columns])
    settings = {**settings, "selectedColumns": columns, "columnOrder": order, "columnWidths": widths}
    now = int(time.time() * 1000)
    tracker.client.set_experiment_tag(tracker.experiment_id, VIEW_TAG, view_value(settings, created or now, now))
    return settings


def view_url(tracker: Tracker) -> str | None:
    """The run list with the ``irflow headline`` view open, when the store is a server (no credentials)."""
    if not tracker.uri.startswith(("http://", "https://")):
        return None
    bare = split_credentials(tracker.uri)[0]
    runs = f"{bare.rstrip('/')}/#/experiments/{tracker.experiment_id}/runs"
    return f"{runs}?{SHARE_PARAM}={VIEW_ID}&{WORKFLOW}"  # the run list, not the GenAI pages


__all__ = [
    "VIEW_ID",
    "VIEW_NAME",
    "VIEW_TAG",
    "column",
    "column_order",
    "headline_columns",
    "read_view",
    "save_headline_view",
    "view_url",
    "view_value",
]
