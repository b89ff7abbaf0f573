"""Shared fixtures: isolated cache per test, the shared BEIR collections, a loopback HTTP server.

Tests that need ``../shared`` skip with the reason when it is absent; with
``IRFLOW_REQUIRE_SHARED=1`` (set by ``.ci/run``) they fail instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import atexit
import http.server
import itertools
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

# Prefect reads its settings at import: give it a temporary home before any test module imports it, so
# nothing lands in ~/.prefect, and use its ephemeral server (never a developer's PREFECT_API_URL).
PREFECT_HOME = os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="irflow-test-prefect-")
os.environ.pop("PREFECT_API_URL", None)
for _key, _value in {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "RAGAS_DO_NOT_TRACK": "true",  # the ragas parity test: no analytics thread
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
}.items():
    os.environ.setdefault(_key, _value)

# One pytest-xdist worker per core, each computing on one thread: torch, FAISS and BLAS would otherwise start a
# thread per core in every worker, and two workers on two cores would fight over four busy threads. Set before
# any of them is imported (commands in a subprocess inherit it); a single process (-n 0) keeps every core.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(_key, "1")

SHARED_DIR = Path(os.environ.get("IRFLOW_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
BEIR_DIR = SHARED_DIR / "datasets" / "beir"


def require_shared() -> Path:
    """The shared BEIR folder, or skip (fail under IRFLOW_REQUIRE_SHARED=1) with the reason."""
    if not (BEIR_DIR / "scifact.zip").is_file():
        reason = f"needs the shared BEIR collections at {BEIR_DIR} (set IRFLOW_SHARED_DIR to the shared folder)"
        if os.environ.get("IRFLOW_REQUIRE_SHARED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return BEIR_DIR


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own IRFLOW_CACHE_DIR, so nothing lands in the project's datasets/cache."""
    path = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(path))
    return path


@pytest.fixture(scope="session", autouse=True)
def _stop_ephemeral_prefect() -> Iterator[None]:
    """Stop Prefect's ephemeral server (if a test started one) while pytest's streams are still open,
    then remove the temporary PREFECT_HOME."""
    yield
    import sys

    if "prefect.server.api.server" in sys.modules:
        from prefect.logging.handlers import APILogWorker
        from prefect.server.api.server import SubprocessASGIServer

        APILogWorker.drain_all(timeout=10)  # send the last logs while the server still listens
        for server in list(SubprocessASGIServer._instances.values()):
            server.stop()
    import shutil

    shutil.rmtree(PREFECT_HOME, ignore_errors=True)


class _EncodedOnce:
    """What the real sentence-transformers models computed in this run: per (model path, precision,
    device, max_seq_length, prompt), text -> normalised vector; ``active`` while the test allows it.

    With a ``folder`` that the run's xdist workers share, every batch a worker computes is published there too
    (one ``.npz`` per batch, written whole and renamed into place), so a text one worker encoded is a file read
    for the others (techdocs' corpus is ~19 s of MiniLM on one thread)."""

    def __init__(self) -> None:
        self.vectors: dict[tuple[object, ...], dict[str, Any]] = {}
        self.active = False
        self.folder: Path | None = None
        self.read: set[Path] = set()
        self.batches = itertools.count()

    def wrap(self, model: Any, identity: tuple[object, ...]) -> None:
        """Give a loaded model an ``encode`` that computes only the texts it has not seen."""
        import numpy as np

        encode = model.encode

        def remembering(sentences: list[str], *, prompt: str | None = None, **options: Any) -> Any:
            usual = options.get("normalize_embeddings") is True and options.get("convert_to_numpy") is True
            if not (self.active and usual and sentences and isinstance(sentences, list)):
                return encode(sentences, prompt=prompt, **options)
            key = (*identity, model.max_seq_length, prompt)
            known = self.vectors.setdefault(key, {})
            todo = [text for text in dict.fromkeys(sentences) if text not in known]
            if todo:
                self._read_published(key, known)
                todo = [text for text in todo if text not in known]
            if todo:
                vectors = encode(todo, prompt=prompt, **options)
                known.update(zip(todo, vectors))
                self._publish(key, todo, vectors)
            return np.stack([known[text] for text in sentences])

        model.encode = remembering

    def _published(self, key: tuple[object, ...]) -> Path | None:
        import hashlib

        return None if self.folder is None else self.folder / hashlib.sha256(repr(key).encode()).hexdigest()[:32]

    def _read_published(self, key: tuple[object, ...], known: dict[str, Any]) -> None:
        """Add what other workers published under ``key`` (batches not read before) to ``known``."""
        import json

        import numpy as np

        folder = self._published(key)
        if folder is None or not folder.is_dir():
            return
        for batch in sorted(folder.glob("*.npz")):
            if batch in self.read:
                continue
            self.read.add(batch)
            with np.load(batch) as data:
                texts = json.loads(data["texts"].tobytes().decode("utf-8"))
                for text, vector in zip(texts, data["vectors"], strict=True):
                    known.setdefault(text, vector)

    def _publish(self, key: tuple[object, ...], texts: list[str], vectors: Any) -> None:
        import json

        import numpy as np

        from irflow.tasks.core.atomic import atomic_open

        folder = self._published(key)
        if folder is None:
            return
        batch = folder / f"{os.getpid()}-{threading.get_ident()}-{next(self.batches)}.npz"
        with atomic_open(batch, "wb") as fh:  # texts as UTF-8 JSON: numpy's str arrays drop trailing NULs
            encoded = np.frombuffer(json.dumps(texts).encode("utf-8"), dtype=np.uint8)
            np.savez(fh, texts=encoded, vectors=np.asarray(vectors))
        self.read.add(batch)


_ENCODED_ONCE = _EncodedOnce()


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test run's temporary folder, shared by its xdist workers (a worker's own is ``<run's>/popen-gwN``)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def _prefect_template(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where the run's migrated Prefect database goes (``support.prefect_home``)."""
    from support.prefect_home import TEMPLATE

    os.environ[TEMPLATE] = str(_run_folder(tmp_path_factory) / "prefect-template.db")


@pytest.fixture(scope="session", autouse=True)
def _encode_each_text_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The real sentence-transformers model encodes each text once per test run, not once per test or worker.

    Dozens of tests embed the same techdocs, SciFact and NFCorpus texts with MiniLM in a fresh cache (that
    encode and the latency stage's query encodes were about a third of a demo run's CPU). A model loaded
    through :mod:`irflow.tasks.embed.inference` keeps what it computed, so a text it has seen is a lookup;
    everything above the model (the Parquet cache and its counts, progress, latency timing) runs as it
    would. Session-scoped, so that module- and session-scoped fixtures (a finished techdocs run) share it
    too, and the workers of one run share what each computed; a test of the encode itself is marked
    ``fresh_encode``. Commands run in a subprocess, and exported (ONNX, OpenVINO) or API models, encode as
    they always do.
    """
    from irflow.tasks.embed import inference

    load = inference.load_sentence_transformer

    def load_remembering(path: str, precision: str = "fp32", device: str | None = None) -> Any:
        model = load(path, precision, device)  # lru-cached: one model object per (path, precision, device)
        if "encode" not in vars(model):
            _ENCODED_ONCE.wrap(model, (path, precision, device))
        return model

    _ENCODED_ONCE.folder = _run_folder(tmp_path_factory) / "encoded-once"
    _ENCODED_ONCE.active = True
    with mock.patch.object(inference, "load_sentence_transformer", load_remembering):
        yield


@pytest.fixture(autouse=True)
def _fresh_encode(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``fresh_encode`` has the model encode every text it is given."""
    if not request.node.get_closest_marker("fresh_encode"):
        yield
        return
    _ENCODED_ONCE.active = False
    try:
        yield
    finally:
        _ENCODED_ONCE.active = True


@pytest.fixture(autouse=True)
def _e2e_services(request: pytest.FixtureRequest) -> None:
    """An ``e2e`` test gets the session's Prefect API (started on the first one): unit tests start nothing."""
    if request.node.get_closest_marker("e2e"):
        request.getfixturevalue("prefect_server")


@pytest.fixture(scope="session")
def prefect_server(_prefect_template: None) -> Iterator[str]:
    """One Prefect API per test session (per xdist worker): the ``irflow`` commands the tests start report
    their flows to it instead of each starting a temporary server of its own (~10 s of CPU each).

    It is irflow's own temporary server (:class:`~irflow.flows.prefect_api.TemporaryServer`: 127.0.0.1, a
    free port, dying with this process) and goes by ``PREFECT_API_URL``, as a configured server would.
    Tests of the temporary server itself use :func:`temporary_prefect_server`.
    """
    from support.prefect_home import publish_template, seeded_home

    from irflow.flows.prefect_api import TemporaryServer

    seeded_home(Path(PREFECT_HOME))  # another worker's migrated database, when one is published
    server = TemporaryServer()
    try:
        server.wait(float(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
        publish_template(Path(PREFECT_HOME))  # before any flow runs on it
        # It serves no UI, as a command's temporary server serves none: no "View at" links, no flow-run URLs.
        os.environ.update(PREFECT_API_URL=server.api_url, PREFECT_UI_URL="")
        yield server.api_url
    finally:
        from support.cli import drain_prefect_workers

        drain_prefect_workers()  # the logs of commands run in this process, while the server still listens
        for key in ("PREFECT_API_URL", "PREFECT_UI_URL"):
            os.environ.pop(key, None)
        server.stop()


@pytest.fixture(scope="session")
def mlflow_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real ``mlflow server`` per test session (per xdist worker), started by the first test that asks (~8 s
    of CPU each): the tests that use it each log to an experiment of their own name."""
    from support.stores import mlflow_server

    with mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as url:
        yield url


@pytest.fixture
def temporary_prefect_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """No configured Prefect API: every ``irflow`` the test starts starts (and stops) its own temporary server."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_UI_URL", raising=False)


@pytest.fixture(autouse=True)
def _isolated_tracking(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test logs to its own MLflow store (SQLite, artifacts beside it), never the project's mlruns/."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlruns') / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture(scope="session")
def beir_dir() -> Path:
    return require_shared()


@pytest.fixture(scope="session")
def beir_dataset(beir_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., object]:
    """``beir_dataset("scifact", split="test")``: the canonical dataset, ingested once per session."""
    cache = tmp_path_factory.mktemp("shared-cache")
    loaded: dict[tuple[str, str], object] = {}

    def load(name: str, split: str = "test") -> object:
        if (name, split) not in loaded:
            from irflow.tasks.ingest import import_dataset, load_dataset

            with mock.patch.dict(os.environ, {"IRFLOW_CACHE_DIR": str(cache)}):
                try:
                    loaded[(name, split)] = load_dataset(f"shared-{name}", split)
                except KeyError:
                    import_dataset(beir_dir / f"{name}.zip", "beir", f"shared-{name}")
                    loaded[(name, split)] = load_dataset(f"shared-{name}", split)
        return loaded[(name, split)]

    return load


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]


@pytest.fixture
def serve_dir() -> Iterator[Callable[[Path], tuple[str, list[str]]]]:
    """Serve a folder over HTTP on 127.0.0.1 (a free port); returns ``(base_url, request_log)``."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(folder: Path) -> tuple[str, list[str]]:
        handler = lambda *a, **kw: _QuietHandler(*a, directory=str(folder), **kw)  # noqa: E731
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.requests = []  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", server.requests  # type: ignore[attr-defined]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


PROFILE = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "test_profile.json"


def _file_costs() -> dict[str, float]:
    """A worker's seconds per test file in the last test profile (``benchmarks/profile_tests.py``), or nothing."""
    import json

    try:
        profile = json.loads(PROFILE.read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in profile.get("by_file_wall", profile["by_file"]).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the longest modules first (their seconds in the last test profile; a module the profile
    does not know counts as expensive when it has end-to-end tests or needs the BEIR collections), the quick
    unit modules last: with ``-n`` and ``--dist loadfile`` the workers then finish together instead of one of
    them running a long module alone at the end (longest-first scheduling)."""
    costs = _file_costs()
    heavy = {item.module for item in items if item.get_closest_marker("e2e") or item.get_closest_marker("shared")}  # type: ignore[attr-defined]

    def cost(item: pytest.Item) -> float:
        known = costs.get(item.nodeid.split("::", 1)[0])
        if known is not None:
            return known
        return 30.0 if item.module in heavy else 0.0  # type: ignore[attr-defined]

    items.sort(key=lambda item: -cost(item))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """An xdist worker ends as soon as its exit handlers have run: freeing its heap object by object (GBs of
    torch, pandas and cached vectors) took the workers 6-8 s after the last test, while the run waited."""
    if os.environ.get("PYTEST_XDIST_WORKER") and hasattr(atexit, "_run_exitfuncs"):
        atexit.register(_exit_after_exit_handlers)  # registered last, so it runs first


def _exit_after_exit_handlers() -> None:
    import sys

    atexit.unregister(_exit_after_exit_handlers)
    atexit._run_exitfuncs()  # every other handler, in the order an ordinary exit runs them
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)
