"""Finished work is kept: a plugin that calls ``sys.exit`` fails its own system, and a latency
measurement that fails (a service gone after retrieval) fails that system's latency only; the
healthy systems' results are written either way."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import irflow

HERE = "test_failures_kept"


class ExitsInSearch:
    """A plugin that ends the interpreter the way a careless script does."""

    def search(self, queries: list[dict[str, str]], k: int) -> Any:
        sys.exit(3)


class ExitsOnCreation:
    def __init__(self) -> None:
        raise SystemExit("bye")


class LatencyFails:
    """Answers the batch of every query, then fails each single-query call, as a service that is stopped
    after retrieval does in the latency stage."""

    def index(self, corpus: Any) -> None:
        self.first = str(corpus["doc_id"].iloc[0])

    def search(self, queries: list[dict[str, str]], k: int) -> Any:
        if len(queries) == 1:
            raise ConnectionError("[Errno 111] Connection refused")
        return {q["query_id"]: [[self.first, 1.0]] for q in queries}


def test_sys_exit_in_a_plugin_is_a_named_failure_of_its_system() -> None:
    from support.toy import tiny_dataset

    from irflow.tasks.core.schema import InputError
    from irflow.tasks.retrieve.searchers import retrieve

    with pytest.raises(InputError, match=r"python:test_failures_kept:ExitsInSearch.*search\(\) failed: SystemExit: 3"):
        retrieve(tiny_dataset(), f"python:{HERE}:ExitsInSearch")
    with pytest.raises(InputError, match="creating the retriever failed: SystemExit: bye"):
        retrieve(tiny_dataset(), f"python:{HERE}:ExitsOnCreation")


@pytest.mark.e2e
def test_a_plugin_exit_and_a_failed_latency_keep_the_other_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}  # this module is importable here
    exits, slow = f"python:{HERE}:ExitsInSearch", f"python:{HERE}:LatencyFails"
    done = irflow(
        *("run", "--system", "bm25", "--system", exits, "--system", slow),
        *("--metric", "nDCG@10", "--latency-runs", "1", "--output", str(out)),
        env=env,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    # the table of the systems that succeeded, the failure listed under it, then one error line, no traceback
    listed = " ".join(done.stdout.split())  # a long failure is wrapped
    assert f"failed: {exits}: " in listed and "search() failed: SystemExit: 3" in listed
    assert done.stdout.index("nDCG@10") < done.stdout.index(f"failed: {exits}")
    assert "Crash detected" not in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"irflow: error: 1 of 3 systems failed (listed under the table); the others' results are in {out}"
    )
    document = json.loads((out / "metrics.json").read_text())
    assert list(document["systems"]) == ["bm25", slow] and list(document["failed"]) == [exits]
    cost = document["cost"]
    assert cost["bm25"]["p95_ms"] > 0 and "latency_error" not in cost["bm25"]
    assert "ConnectionError: [Errno 111] Connection refused" in cost[slow]["latency_error"]
    assert cost[slow].get("p95_ms") is None and document["systems"][slow]["nDCG@10"] >= 0
    report = (out / "report.md").read_text()
    assert f"{slow}: latency failed (" in report and "Connection refused" in report

    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    runs = {
        r.data.tags.get("irflow.system"): r
        for r in mlflow.search_runs(search_all_experiments=True, output_format="list")
    }
    assert runs[exits].info.status == "FAILED" and runs["bm25"].info.status == "FINISHED"
    assert "Connection refused" in runs[slow].data.tags["irflow.latency_error"] and runs[slow].info.status == "FINISHED"
    assert "p95_ms" in runs["bm25"].data.metrics and "p95_ms" not in runs[slow].data.metrics


@pytest.mark.e2e
def test_a_chroma_server_that_is_down_fails_its_system_alone_in_one_line(tmp_path: Path) -> None:
    """The Chroma-down case of issue 28: the good system's table, one error line for the other (the named
    ChromaError, listed under the table), no traceback on the terminal (it is in the log file), exit 2."""
    pytest.importorskip("chromadb", reason="needs the chroma extra: pip install -e '.[chroma]'")
    from support.services import free_port

    out, port = tmp_path / "out", free_port()  # nothing listens there: the server is down
    env = {
        **os.environ,
        "IRFLOW_CHROMA_URL": f"http://127.0.0.1:{port}",
        "IRFLOW_CACHE_DIR": os.environ.get("IRFLOW_CACHE_DIR", str(tmp_path / "cache")),
        "PREFECT_HOME": str(tmp_path / "prefect"),
    }
    chroma = "dense(index=chroma):minilm"
    log = Path(env["IRFLOW_CACHE_DIR"]) / "logs" / "irflow.log"
    before = log.stat().st_size if log.is_file() else 0
    done = irflow(
        *("run", "--system", "bm25", "--system", chroma, "--metric", "nDCG@10", "--latency-runs", "0"),
        *("--no-track", "--output", str(out)),
        env=env,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    header = lines.index("system  nDCG@10")
    assert lines[header + 1].split()[0] == "bm25" and lines[header + 2].startswith("failed: dense(index=chroma):")
    listed = " ".join(done.stdout.split())
    assert f"ChromaError: no Chroma server answers at http://127.0.0.1:{port} (IRFLOW_CHROMA_URL)" in listed
    assert sum(line.startswith("failed: ") for line in lines) == 1
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        f"irflow: error: 1 of 2 systems failed (listed under the table); the others' results are in {out}"
    ]
    shown = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if str(out) not in line]
    assert max(map(len, shown)) <= 120  # but the lines naming the (test's long) result folder
    with open(log, encoding="utf-8") as fh:
        fh.seek(before)
        written = fh.read()
    assert "Traceback" in written and "ChromaError" in written  # kept whole in the log file
