"""The fail-fast check of the tracking store: one idempotent write, within seconds, before any stage
or judge call, so a store that cannot be used fails at once naming its (redacted) URI instead of
after the results were written or after minutes of MLflow's retries."""

from __future__ import annotations

import base64
import http.client
import json
import os
import sqlite3
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from irflow.tasks.tracking.store import (
    DEFAULT_EXPERIMENT,
    Tracker,
    TrackingError,
    error_text,
    redact,
    split_credentials,
    sqlite_path,
    tracking_uri,
)

CHECK_TAG = "irflow.store_checked"  # experiment tag the write check sets (the time of the last check)


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
    opener = _opener(_tls_context() if uri.startswith("https:") else None)

    def call(endpoint: str, body: Mapping[str, Any] | None = None) -> tuple[int, Any]:
        url = f"{base.rstrip('/')}/api/2.0/mlflow/{endpoint}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
        try:
            with opener.open(request, timeout=timeout) as response:
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
            text = redact(raw[:80].decode("utf-8", "replace").strip())  # a body may echo the request's headers
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
        raise TrackingError(redact(f"{shown} does not answer like an MLflow tracking server (HTTP {status}: {found})"))
    if status != 200:
        problem = redact(str(answer.get("message") or answer.get("error_code") or answer))
        raise TrackingError(f"MLflow tracking server {shown} cannot be written (HTTP {status}: {problem})")


class _KeepCredentialsHome(urllib.request.HTTPRedirectHandler):
    """Follows a redirect as urllib does, but sends the ``Authorization`` header on only to the same
    host and port (or from http to https on the same host), as MLflow's own client (requests) does:
    no credential crosses a redirect to another host."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and not _same_origin(req.full_url, new.full_url):
            for name in [n for n in new.headers if n.lower() in ("authorization", "proxy-authorization")]:
                new.remove_header(name)
        return new


def _same_origin(old: str, new: str) -> bool:
    before, after = urllib.parse.urlsplit(old), urllib.parse.urlsplit(new)
    if before.hostname != after.hostname:
        return False
    if (before.scheme, before.port) == (after.scheme, after.port):
        return True
    return (
        before.scheme == "http" and after.scheme == "https" and before.port in (None, 80) and after.port in (None, 443)
    )


def _opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    handlers: list[urllib.request.BaseHandler] = [_KeepCredentialsHome()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


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


__all__ = ["CHECK_TAG", "DATABASES", "check_tracking"]
