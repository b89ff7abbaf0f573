"""Where MLflow runs go: the store's URI and its credentials, and the thin client every other
tracking module uses (``tracking_check`` proves the store writable before any stage runs).

The store is ``MLFLOW_TRACKING_URI`` or ``sqlite:///<working directory>/mlruns/mlflow.db`` with
artifacts in ``mlruns/artifacts``; there is no silent fallback.

Credentials in a URI (``https://user:secret@host``; the one URL irflow takes with credentials, see
:mod:`irflow.tasks.core.urls`) are moved into ``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD`` and MLflow is given the URI without them, so no MLflow message, log
line or stored value can show them; irflow's own messages show them redacted (user:secret@host -> user:***@host, by
:func:`irflow.tasks.core.redact.redact`). mlflow is
imported inside functions (``import mlflow`` costs seconds).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from irflow.tasks.core.atomic import file_lock, process_gone, this_process
from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.core.stop import at_forced_exit, stop_requested
from irflow.tasks.core.urls import split_credentials
from irflow.tasks.tracking.params import mlflow_key

DEFAULT_EXPERIMENT = "irflow"
DEFAULT_DB = Path("mlruns") / "mlflow.db"  # in the working directory, as MLflow itself defaults
KIND = "irflow.kind"  # tag: suite | nightly | evaluation | system
PARENT = "mlflow.parentRunId"
OWNER_TAGS = {"host": "irflow.host", "pid": "irflow.pid", "started": "irflow.process_start"}
"""Tags naming the process that started a run: a run left RUNNING by a process that is gone is ended KILLED."""

log = logging.getLogger(__name__)


class TrackingError(IrflowError):
    """The tracking store cannot be reached or used; the message names its URI (credentials redacted)."""


# ---------------------------------------------------------------------------------------------
# where


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI``, else the SQLite store ``mlruns/mlflow.db`` of the working directory
    (made absolute, so the URI names the same store whichever process reads it)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_DB.resolve()}"


def client_uri(uri: str) -> str:
    """The URI MLflow is given: credentials in ``uri`` move into MLFLOW_TRACKING_USERNAME/PASSWORD
    (MLflow reads them there, and so do this process's children), so MLflow never sees them in a URL."""
    if not uri.startswith(("http://", "https://")):  # a database URI keeps its credentials: its driver reads them there
        return uri
    bare, user, password = split_credentials(uri)
    if user is not None:
        os.environ["MLFLOW_TRACKING_USERNAME"] = user
    if password is not None:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = password
    return bare


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative paths are relative to the working directory)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :].split("?", 1)[0])


def artifact_root(uri: str) -> Path | None:
    """Where a local SQLite store keeps artifacts: ``artifacts/`` beside the database (None for servers)."""
    db = sqlite_path(uri)
    return None if db is None else db.resolve().parent / "artifacts"


def error_text(err: BaseException) -> str:
    """The first line of an error's reason (SQLAlchemy and MLflow append pages of context), redacted
    (a driver's message may quote the database URI with its password)."""
    reason: Any = getattr(err, "reason", None) or err
    text = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
    return redact(text.strip().splitlines()[0]) if text.strip() else type(err).__name__


def _client(uri: str) -> Any:
    """An MlflowClient on ``uri``. Opening a new sqlite store creates MLflow's tables, which two processes
    doing at once collide on ("table ... already exists"): for sqlite that happens under a file lock
    beside the database, so the second process waits and then finds the tables made."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    db = sqlite_path(uri)
    with contextlib.ExitStack() as stack:
        if db is not None:
            try:
                stack.enter_context(file_lock(db.with_name(f".{db.name}.lock")))
            except OSError:  # a read-only folder: its store can be read, not created, so there is nothing to serialise
                pass
        return MlflowClient(tracking_uri=client_uri(uri))


# ---------------------------------------------------------------------------------------------
# how: a thin client


# Which pages MLflow 3.17's UI opens for an experiment (read in mlflow/server/js, and measured in Chromium):
# the link's ``workflowType`` parameter, else the browser's last choice (localStorage ``mlflow.workflowType``),
# else ``genai`` -- a bare experiment link lands on the GenAI overview, whatever the server says. So every
# link irflow prints carries WORKFLOW. The experiment tag EXPERIMENT_KIND_TAG is what the UI reads instead
# when its workflow switch is off (``useExperimentKind``); irflow sets it too, so both modes agree.
WORKFLOW = "workflowType=machine_learning"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


class Tracker:
    """An MLflow client bound to one store and experiment (created on first use)."""

    def __init__(self, experiment: str = DEFAULT_EXPERIMENT, uri: str | None = None) -> None:
        self.uri = uri or tracking_uri()
        self.experiment = experiment
        self.client = _client(self.uri)  # makes no request: a tracker of a server not yet reached costs nothing
        self._experiment_id: str | None = None

    @property
    def experiment_id(self) -> str:
        """The experiment's id; created on first use, and marked as a model-development experiment
        (:data:`EXPERIMENT_KIND`) unless it already says what it is. The first use in this process also ends
        the runs a dead process left RUNNING in the store (:func:`end_orphaned_runs`)."""
        if self._experiment_id is None:
            if self.uri not in _SETTLED:
                _SETTLED.add(self.uri)
                end_orphaned_runs(self)
            found = self.client.get_experiment_by_name(self.experiment)
            if found is not None:
                self._experiment_id = str(found.experiment_id)
                # a deleted experiment cannot be tagged: the tracking check names it and the way out
                if EXPERIMENT_KIND_TAG not in found.tags and found.lifecycle_stage == "active":
                    self.client.set_experiment_tag(self._experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            else:
                root = artifact_root(self.uri)
                location = (root / mlflow_key(self.experiment)).as_uri() if root else None
                try:
                    self._experiment_id = str(
                        self.client.create_experiment(
                            self.experiment, artifact_location=location, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
                        )
                    )
                except Exception:  # created concurrently by another process
                    again = self.client.get_experiment_by_name(self.experiment)
                    if again is None:
                        raise
                    self._experiment_id = str(again.experiment_id)
        return self._experiment_id

    def start(
        self,
        name: str,
        kind: str,
        *,
        parent: str | None = None,
        tags: Mapping[str, Any] | None = None,
        start_time: int | None = None,
    ) -> str:
        """Create a run (status RUNNING, begun at ``start_time`` ms since the epoch, default now); return its id."""
        owner = {OWNER_TAGS[k]: v for k, v in this_process().items()}
        all_tags = {KIND: kind, **owner, **{k: str(v) for k, v in (tags or {}).items() if v is not None}}
        if parent:
            all_tags[PARENT] = parent
        run = self.client.create_run(self.experiment_id, start_time=start_time, tags=all_tags, run_name=name)
        _OPEN[str(run.info.run_id)] = self
        return str(run.info.run_id)

    def log(
        self,
        run_id: str,
        *,
        params: Mapping[str, Any] | None = None,
        metrics: Mapping[str, float] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> None:
        """Log params (values as text, at most 6000 characters), finite metrics and tags in batches."""
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if math.isfinite(float(v))],
            params=[Param(k, _text(v)[:6000]) for k, v in (params or {}).items()],
            tags=[RunTag(k, _text(v)) for k, v in (tags or {}).items() if v is not None],
        )

    def log_files(
        self,
        run_id: str,
        folder: str | Path,
        files: Iterable[str] = (),
        dirs: Iterable[str] = (),
        artifact_path: str | None = None,
    ) -> None:
        """Upload the named files and folders of ``folder`` (those that exist)."""
        folder = Path(folder)
        for name in files:
            if (folder / name).is_file():
                self.client.log_artifact(run_id, str(folder / name), artifact_path)
        for name in dirs:
            if (folder / name).is_dir():
                self.client.log_artifacts(
                    run_id, str(folder / name), f"{artifact_path}/{name}" if artifact_path else name
                )

    def end(self, run_id: str, failed: bool = False, status: str | None = None) -> None:
        """End a run: FINISHED, FAILED (``failed``) or ``status`` (KILLED)."""
        self.client.set_terminated(run_id, status or ("FAILED" if failed else "FINISHED"))
        _OPEN.pop(run_id, None)

    def search(
        self, filter_string: str, max_results: int = 100, finished: bool = False, experiment_id: str | None = None
    ) -> list[Any]:
        """Runs of this experiment (or ``experiment_id``) matching ``filter_string``, newest first."""
        if finished:
            filter_string = " and ".join(f for f in (filter_string, "attributes.status = 'FINISHED'") if f)
        return list(
            self.client.search_runs(
                [experiment_id or self.experiment_id],
                filter_string,
                max_results=max_results,
                order_by=["attributes.start_time DESC"],
            )
        )

    def children(self, run: Any, kind: str | None = None) -> list[Any]:
        """Runs nested directly under ``run`` (an MLflow Run), oldest first."""
        filters = [f"tags.`{PARENT}` = '{run.info.run_id}'"] + ([f"tags.`{KIND}` = '{kind}'"] if kind else [])
        found = self.search(" and ".join(filters), max_results=1000, experiment_id=run.info.experiment_id)
        return sorted(found, key=lambda r: r.info.start_time)

    def download(self, run_id: str, path: str, dst: str | Path) -> Path:
        from mlflow.artifacts import download_artifacts

        return Path(
            download_artifacts(run_id=run_id, artifact_path=path, dst_path=str(dst), tracking_uri=client_uri(self.uri))
        )

    def run_url(self, run_id: str) -> str | None:
        """The MLflow UI page of a run when the store is a server (credentials never in it), in the UI's
        model-training pages (:data:`WORKFLOW`), not the GenAI ones a bare link opens."""
        if not self.uri.startswith(("http://", "https://")):
            return None
        bare = split_credentials(self.uri)[0]
        return f"{bare.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{run_id}?{WORKFLOW}"


_SETTLED: set[str] = set()
"""Stores this process has already cleared of runs left RUNNING by processes that are gone."""


def end_orphaned_runs(tracker: Tracker) -> list[str]:
    """End KILLED the runs of the store left RUNNING by an irflow process of this host that no longer
    exists (killed with SIGKILL, out of memory, a power cut: nothing ended them); returns their ids.
    Runs of other hosts, of living processes and without irflow's owner tags are left alone. Never
    fails the caller: a store that cannot be searched is logged and left as it is."""
    from mlflow.entities import ViewType

    ended: list[str] = []
    try:
        host = this_process()["host"]
        experiments = [e.experiment_id for e in tracker.client.search_experiments(view_type=ViewType.ALL)]
        found = (
            tracker.client.search_runs(
                experiments,
                f"attributes.status = 'RUNNING' and tags.`{OWNER_TAGS['host']}` = '{host}'",
                run_view_type=ViewType.ALL,
                max_results=1000,
            )
            if experiments
            else []
        )
        for run in found:
            owner = {k: run.data.tags.get(tag) for k, tag in OWNER_TAGS.items()}
            if process_gone(owner["host"], owner["pid"], owner["started"]):
                tracker.client.set_tag(run.info.run_id, "irflow.ended_by", f"irflow: process {owner['pid']} was gone")
                tracker.client.set_terminated(run.info.run_id, "KILLED")
                ended.append(str(run.info.run_id))
    except Exception as err:
        log.warning("could not end MLflow runs left RUNNING in %s: %s", redact(tracker.uri), error_text(err))
    if ended:
        log.info("ended KILLED %d MLflow run(s) left RUNNING by a process that is gone", len(ended))
    return ended


_OPEN: dict[str, Tracker] = {}
"""Runs this process started and has not ended (run id -> its tracker), oldest first."""


@contextlib.contextmanager
def ending_runs() -> Iterator[None]:
    """No run stays RUNNING: the runs started in the block and still open when an exception leaves it
    are ended (newest first, children before parents) as KILLED for Ctrl-C and SIGTERM (an exception that
    is no ``Exception``: ``KeyboardInterrupt``, Prefect's ``TerminationSignal``), FAILED for any other error
    (a full disk included); the exception goes on. An end that fails too (the store is
    gone) is logged, not raised over the first error."""
    before = set(_OPEN)
    try:
        yield
    except BaseException as exc:
        status = "FAILED" if isinstance(exc, Exception) and not stop_requested() else "KILLED"  # else a signal
        for run_id in reversed([r for r in _OPEN if r not in before]):
            try:
                _OPEN[run_id].end(run_id, status=status)
            except Exception as err:
                _OPEN.pop(run_id, None)
                log.warning("could not mark MLflow run %s %s: %s", run_id, status, error_text(err))
        raise


def _kill_open_runs() -> None:
    """Before a stopped command exits without waiting for its threads: its open runs end KILLED."""
    for run_id, tracker in reversed(list(_OPEN.items())):
        with contextlib.suppress(Exception):
            tracker.end(run_id, status="KILLED")


at_forced_exit(_kill_open_runs)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)


__all__ = [
    "DEFAULT_EXPERIMENT",
    "EXPERIMENT_KIND",
    "EXPERIMENT_KIND_TAG",
    "KIND",
    "PARENT",
    "OWNER_TAGS",
    "Tracker",
    "TrackingError",
    "artifact_root",
    "client_uri",
    "end_orphaned_runs",
    "ending_runs",
    "error_text",
    "redact",
    "split_credentials",
    "sqlite_path",
    "tracking_uri",
]
