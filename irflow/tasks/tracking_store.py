"""Where MLflow runs go: the store's URI, its credentials, a fail-fast check that it can be written,
and the thin client every other tracking module uses.

The store is ``MLFLOW_TRACKING_URI`` or ``sqlite:///<working directory>/mlruns/mlflow.db`` with
artifacts in ``mlruns/artifacts``. :func:`check_tracking` proves that a *write* works (not only that
something answers) within seconds, before any stage or judge call: a store that cannot be used
fails at once naming its URI, and there is no silent fallback.

Credentials in a URI (``https://user:secret@host``) are moved into ``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD`` and MLflow is given the URI without them, so no MLflow message, log
line or stored value can show them; irflow's own messages show :func:`redact`'s form. mlflow is
imported inside functions (``import mlflow`` costs seconds).
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import sqlite3
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from irflow.tasks.schema import IrflowError
from irflow.tasks.tracking_params import mlflow_key

DEFAULT_EXPERIMENT = "irflow"
DEFAULT_DB = Path("mlruns") / "mlflow.db"  # in the working directory, as MLflow itself defaults
KIND = "irflow.kind"  # tag: suite | nightly | evaluation | system
PARENT = "mlflow.parentRunId"
CHECK_TAG = "irflow.store_checked"  # experiment tag the write check sets (the time of the last check)


class TrackingError(IrflowError):
    """The tracking store cannot be reached or used; the message names its URI (credentials redacted)."""


# ---------------------------------------------------------------------------------------------
# where


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI``, else the SQLite store ``mlruns/mlflow.db`` of the working directory
    (made absolute, so the URI names the same store whichever process reads it)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_DB.resolve()}"


def _netloc(parts: urllib.parse.SplitResult, userinfo: str = "") -> str:
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return userinfo + host + (f":{parts.port}" if parts.port else "")


def redact(uri: str) -> str:
    """The URI without a password (user:secret@host -> user:***@host): safe for logs and messages."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    return urllib.parse.urlunsplit(parts._replace(netloc=_netloc(parts, f"{parts.username}:***@")))


def split_credentials(uri: str) -> tuple[str, str | None, str | None]:
    """``(uri without user info, user, password)``; user and password are None when the URI has none."""
    parts = urllib.parse.urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri, None, None
    bare = urllib.parse.urlunsplit(parts._replace(netloc=_netloc(parts)))
    unquote = urllib.parse.unquote
    return bare, unquote(parts.username or ""), None if parts.password is None else unquote(parts.password)


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


# ---------------------------------------------------------------------------------------------
# the fail-fast check


def check_tracking(uri: str | None = None, timeout: float = 5.0, *, experiment: str = DEFAULT_EXPERIMENT) -> str:
    """Prove that the store can be written, before any stage runs; returns the URI.

    The write is idempotent: the experiment is fetched or created (as the run would) and its tag
    ``irflow.store_checked`` set to the time of the check; nothing else is left behind. A server is
    asked through MLflow's REST API with ``timeout`` per request and no retries; a SQLite file is
    first opened and written (in a transaction rolled back) without MLflow, another database
    connected to within ``timeout``; other stores get ``timeout`` for the whole check. Raises
    TrackingError naming the redacted URI otherwise.
    """
    uri = uri or tracking_uri()
    scheme = urllib.parse.urlsplit(uri).scheme
    if scheme in ("http", "https"):
        _check_server(uri, experiment, timeout)
        return uri
    db = sqlite_path(uri)
    if db is not None:
        _check_sqlite(uri, db, timeout)
    elif scheme.split("+")[0] in DATABASES:
        _bounded(lambda: _connect_database(uri), timeout, uri)
    else:  # a file store, a plugin: nothing irflow can ask without MLflow
        _bounded(lambda: _check_client(uri, experiment), timeout, uri)
        return uri
    _check_client(uri, experiment)  # not bounded: it may be creating MLflow's tables, never stop that halfway
    return uri


DATABASES = ("postgresql", "mysql", "mssql")
"""Database stores MLflow reaches through SQLAlchemy (``postgresql+psycopg2://...`` and the like)."""


def _connect_database(uri: str) -> None:
    """Connect once (MLflow itself retries connecting for ~2 minutes before it gives up)."""
    try:
        import sqlalchemy

        engine = sqlalchemy.create_engine(uri)
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()
    except Exception as err:
        raise TrackingError(f"MLflow tracking store {redact(uri)} cannot be reached: {error_text(err)}") from None


def _check_sqlite(uri: str, db: Path, timeout: float) -> None:
    """Open the database file with the standard library and write to it (rolled back): a folder, a
    read-only file or folder, or a file that is no database fails here in milliseconds, not after
    MLflow's ~150 s of connection retries."""
    where = f"MLflow tracking store {redact(uri)}"
    if db.is_dir():
        raise TrackingError(f"{where}: {db} is a folder, not a database file; point MLFLOW_TRACKING_URI at a file")
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TrackingError(f"{where}: cannot create the folder {db.parent} ({error_text(err)})") from None
    try:
        connection = sqlite3.connect(db, timeout=timeout, isolation_level=None)
    except sqlite3.Error as err:
        raise TrackingError(f"{where} cannot be opened: {error_text(err)}") from None
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("CREATE TABLE irflow_write_check (x)")  # journal written: a read-only folder fails too
        connection.execute("ROLLBACK")
    except sqlite3.Error as err:
        raise TrackingError(f"{where} cannot be written: {error_text(err)}") from None
    finally:
        connection.close()


def _check_client(uri: str, experiment: str) -> None:
    """Get or create the experiment through MLflow, set its check tag, and try its local artifact folder."""
    try:
        tracker = Tracker(experiment, uri)
        found = tracker.client.get_experiment(tracker.experiment_id)
        if found.lifecycle_stage == "deleted":
            raise TrackingError(
                f"MLflow experiment {experiment!r} in {redact(uri)} is deleted: restore it "
                f"(mlflow experiments restore --experiment-id {found.experiment_id}) or choose another experiment"
            )
        tracker.client.set_experiment_tag(tracker.experiment_id, CHECK_TAG, _now())
    except TrackingError:
        raise
    except Exception as err:
        raise TrackingError(f"MLflow tracking store {redact(uri)} cannot be written: {error_text(err)}") from None
    location = urllib.parse.urlsplit(found.artifact_location or "")
    if location.scheme in ("", "file"):
        folder = Path(urllib.request.url2pathname(location.path))
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".irflow-write-check-"):
                pass
        except OSError as err:
            raise TrackingError(
                f"MLflow tracking store {redact(uri)}: its artifact folder {folder} cannot be written "
                f"({error_text(err)})"
            ) from None


def _bounded(check: Callable[[], None], timeout: float, uri: str) -> None:
    """Run ``check`` for at most ``timeout`` seconds (database stores retry connecting for minutes)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            check()
        except BaseException as err:  # handed to the caller's thread
            failure.append(err)

    thread = threading.Thread(target=run, name="tracking-check", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TrackingError(f"MLflow tracking store {redact(uri)} did not answer within {timeout:g} s")
    if failure:
        raise failure[0]


def _check_server(uri: str, experiment: str, timeout: float) -> None:
    """The REST calls a run makes first (get-by-name, then create or set-experiment-tag), each once,
    with ``timeout``: MLflow's own client retries for minutes against a server that is not MLflow."""
    base, user, password = split_credentials(uri)
    shown = redact(uri)
    headers = {"Content-Type": "application/json", "Accept": "application/json", **_auth_headers(user, password)}
    context = _tls_context() if uri.startswith("https:") else None

    def call(endpoint: str, body: Mapping[str, Any] | None = None) -> tuple[int, Any]:
        url = f"{base.rstrip('/')}/api/2.0/mlflow/{endpoint}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                status, raw = response.status, response.read(1 << 16)
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read(1 << 16)
        except (OSError, http.client.HTTPException) as err:
            raise TrackingError(
                f"MLflow tracking server {shown} is unreachable ({error_text(err)}); start it "
                "(mlflow server --host 127.0.0.1 --port 5000 ...) or set MLFLOW_TRACKING_URI"
            ) from None
        if status in (401, 403):
            raise TrackingError(
                f"MLflow tracking server {shown} refused the request (HTTP {status}): give credentials in the URI "
                "or MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) with write access"
            )
        try:
            document = json.loads(raw)
        except ValueError:
            document = None
        if not isinstance(document, dict):
            text = raw[:80].decode("utf-8", "replace").strip()
            raise TrackingError(
                f"{shown} does not answer like an MLflow tracking server "
                f"(HTTP {status} to {endpoint.split('?')[0]}: {text!r}); check MLFLOW_TRACKING_URI"
            )
        return status, document

    name = urllib.parse.quote(experiment)
    status, found = call(f"experiments/get-by-name?experiment_name={name}")
    if status == 200 and isinstance(found.get("experiment"), dict):
        exp = found["experiment"]
        if exp.get("lifecycle_stage") == "deleted":
            raise TrackingError(
                f"MLflow experiment {experiment!r} in {shown} is deleted: restore it or choose another experiment"
            )
        status, answer = call(
            "experiments/set-experiment-tag",
            {"experiment_id": exp.get("experiment_id"), "key": CHECK_TAG, "value": _now()},
        )
    elif found.get("error_code") == "RESOURCE_DOES_NOT_EXIST":
        status, answer = call("experiments/create", {"name": experiment})
    else:
        raise TrackingError(f"{shown} does not answer like an MLflow tracking server (HTTP {status}: {found})")
    if status != 200:
        raise TrackingError(
            f"MLflow tracking server {shown} cannot be written (HTTP {status}: "
            f"{answer.get('message') or answer.get('error_code') or answer})"
        )


def _auth_headers(user: str | None, password: str | None) -> dict[str, str]:
    user = user if user is not None else os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = password if password is not None else os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user is not None or password is not None:
        token = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode()
        return {"Authorization": f"Basic {token}"}
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    return {}


def _tls_context() -> ssl.SSLContext:
    """TLS as MLflow's client does it: MLFLOW_TRACKING_INSECURE_TLS, MLFLOW_TRACKING_SERVER_CERT_PATH."""
    if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def error_text(err: BaseException) -> str:
    """The first line of an error's reason (SQLAlchemy and MLflow append pages of context)."""
    reason: Any = getattr(err, "reason", None) or err
    text = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__


def _client(uri: str) -> Any:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=client_uri(uri))


# ---------------------------------------------------------------------------------------------
# how: a thin client


class Tracker:
    """An MLflow client bound to one store and experiment (created on first use)."""

    def __init__(self, experiment: str = DEFAULT_EXPERIMENT, uri: str | None = None) -> None:
        self.uri = uri or tracking_uri()
        self.experiment = experiment
        self.client = _client(self.uri)
        self._experiment_id: str | None = None

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment)
            if found is not None:
                self._experiment_id = str(found.experiment_id)
            else:
                root = artifact_root(self.uri)
                location = (root / mlflow_key(self.experiment)).as_uri() if root else None
                try:
                    self._experiment_id = str(
                        self.client.create_experiment(self.experiment, artifact_location=location)
                    )
                except Exception:  # created concurrently by another process
                    again = self.client.get_experiment_by_name(self.experiment)
                    if again is None:
                        raise
                    self._experiment_id = str(again.experiment_id)
        return self._experiment_id

    def start(self, name: str, kind: str, *, parent: str | None = None, tags: Mapping[str, Any] | None = None) -> str:
        """Create a run (status RUNNING) and return its id."""
        all_tags = {KIND: kind, **{k: str(v) for k, v in (tags or {}).items() if v is not None}}
        if parent:
            all_tags[PARENT] = parent
        return str(self.client.create_run(self.experiment_id, tags=all_tags, run_name=name).info.run_id)

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

    def end(self, run_id: str, failed: bool = False) -> None:
        self.client.set_terminated(run_id, "FAILED" if failed else "FINISHED")

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
        """The MLflow UI page of a run when the store is a server (credentials never in it)."""
        if not self.uri.startswith(("http://", "https://")):
            return None
        bare = split_credentials(self.uri)[0]
        return f"{bare.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{run_id}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)


__all__ = [
    "DEFAULT_EXPERIMENT",
    "KIND",
    "PARENT",
    "Tracker",
    "TrackingError",
    "artifact_root",
    "check_tracking",
    "client_uri",
    "error_text",
    "redact",
    "split_credentials",
    "sqlite_path",
    "tracking_uri",
]
