"""No silent outcomes: a command whose every LLM call failed exits non-zero and says so (rag's generator and
judge, annotate, synthesize against a chat server that answers HTTP 400 to everything); ids of a ``--human``
file that the run lacks are named (a warning, or an error when none is known); a path that is no regular file is named
for what it is (``a character device``, ``a directory``), not "no such file"."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
from support.cli import irflow

from irflow.tasks.core.paths import describe_path
from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest import load_dataset
from irflow.tasks.rag.calibrate import check_verdicts


class _BadRequest(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that refuses every request with HTTP 400 (a model it lacks)."""

    requests = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).requests += 1
        body = json.dumps({"error": {"message": "model 'nope' does not exist"}}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def refusing() -> Iterator[str]:
    """The base URL of a chat server on 127.0.0.1 that answers 400 to every request."""
    handler = type("Handler", (_BadRequest,), {"requests": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


# --------------------------------------------------------------------------------------------------
# every call failed


@pytest.mark.e2e
def test_rag_whose_every_generation_fails_exits_non_zero_and_says_so(refusing: str, tmp_path: Path) -> None:
    out = tmp_path / "rag"
    generator = f"openai(max_retries=0):nope@{refusing}"
    args = ["rag", "--system", "bm25", "--generator", generator, "--depth", "2", "--output", str(out), "--no-track"]
    done = irflow(*args, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0, done.stdout[-2000:]
    assert "every generation failed (80 of 80 questions of bm25)" in done.stderr, done.stderr[-3000:]
    assert "HTTP 400" in done.stderr and "Nothing was scored" in done.stderr and "Traceback" not in done.stderr
    assert not (out / "metrics.json").exists() and not (out / "failures.csv").exists()


@pytest.mark.e2e
def test_rag_whose_every_judge_call_fails_writes_its_results_and_exits_non_zero(refusing: str, tmp_path: Path) -> None:
    """Found by the safety battery: a judge whose every call failed (here HTTP 400; there a body that never
    ended) left a result folder of empty judged metrics and exit 0."""
    answers, out = tmp_path / "a.jsonl", tmp_path / "rag"
    answers.write_text(json.dumps({"query_id": "td-q-001", "answer": "x", "contexts": [{"doc_id": "td-doc-0001"}]}))
    judge = f"openai(max_retries=0):nope@{refusing}"
    metrics = ["--metric", "faithfulness", "--metric", "id_based_context_recall"]
    done = irflow(
        "rag",
        "--answers",
        str(answers),
        "--judge",
        judge,
        *metrics,
        "--output",
        str(out),
        "--no-track",
        env=dict(os.environ),
    )
    assert done.returncode == 2, done.stdout[-2000:]
    message = " ".join(done.stderr.split())
    assert f"--judge {judge}: every judge call failed (1 of 1); first error: judge call failed" in message, message
    assert "HTTP 400" in message and f"failures.csv are in {out}" in message and "Traceback" not in done.stderr
    document = json.loads((out / "metrics.json").read_text())
    assert document["systems"]["a"]["id_based_context_recall"] is not None  # the rest is kept
    assert (out / "failures.csv").is_file()


def test_a_judge_failure_is_only_every_call_failing() -> None:
    from irflow.tasks.rag.outputs import judge_failure

    def document(calls: int, failed: int, cached: int = 0) -> dict[str, object]:
        usage = {"calls": calls, "failed": failed, "cached": cached}
        return {"usage": {"judging": usage}, "options": {"judge": "openai:m"}, "output": "out"}

    assert judge_failure({"usage": {}}) is None  # no judge
    assert judge_failure(document(3, 2)) is None and judge_failure(document(3, 3, cached=1)) is None
    assert judge_failure(document(3, 3)) == (
        "--judge openai:m: every judge call failed (3 of 3); first error: no answer. Nothing was LLM-judged: the "
        "other metrics and failures.csv are in out"
    )


@pytest.mark.e2e
def test_annotate_whose_every_judge_call_fails_exits_non_zero_and_says_so(refusing: str, tmp_path: Path) -> None:
    out = tmp_path / "annotation"
    judge = f"openai(max_retries=0,name=nope):nope@{refusing}"
    args = ["annotate", "--dataset", "techdocs", "--system", "bm25", "--judge", judge, "--queries", "2", "--depth", "3"]
    done = irflow(*args, "--output", str(out), "--no-track", env=dict(os.environ))
    assert done.returncode != 0, done.stdout[-2000:]
    assert "judge nope has no valid vote on any of" in done.stderr, done.stderr[-3000:]
    assert not (out / "qrels.trec").exists()


def test_synthesize_whose_every_call_fails_exits_non_zero_and_says_so(refusing: str, tmp_path: Path) -> None:
    llm = f"openai(max_retries=0):nope@{refusing}"
    args = ["datasets", "synthesize", "--dataset", "techdocs", "--name", "synth", "--llm", llm, "--queries", "3"]
    done = irflow(*args, env=dict(os.environ))
    assert done.returncode == 2, done.stdout[-2000:]
    assert "no call got an answer" in done.stderr and "HTTP 400" in done.stderr, done.stderr[-3000:]
    assert not (Path(os.environ["IRFLOW_CACHE_DIR"]) / "datasets" / "synth").exists()


# --------------------------------------------------------------------------------------------------
# unknown ids in --human files


def test_rag_human_verdicts_on_unknown_queries_or_configurations_are_named(caplog: pytest.LogCaptureFixture) -> None:
    data = load_dataset("techdocs")

    def verdicts(rows: list[tuple[str | None, str]]) -> pd.DataFrame:
        return pd.DataFrame(
            [(s, q, "faithfulness", 1.0) for s, q in rows], columns=["system", "query_id", "metric", "value"]
        )

    with pytest.raises(InputError, match=r"h.jsonl: none of its 2 query ids is one of the queries of techdocs"):
        check_verdicts(verdicts([(None, "nope-1"), (None, "nope-2")]), data, ["a"], "h.jsonl")
    with pytest.raises(InputError, match=r"none of its 1 system ids is one of this run's configurations \(a, b\)"):
        check_verdicts(verdicts([("c", "td-q-001")]), data, ["a", "b"], "h.jsonl")
    with caplog.at_level("WARNING"):
        check_verdicts(verdicts([(None, "td-q-001"), (None, "td-q-002"), (None, "zz-9")]), data, ["a"], "h.jsonl")
    assert "h.jsonl: 1 of 3 query ids are not among the queries of techdocs, left out: zz-9" in caplog.text


# --------------------------------------------------------------------------------------------------
# what a path is


def test_a_path_is_named_for_what_it_is(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    assert describe_path(tmp_path / "f") is None
    assert describe_path(tmp_path / "missing") == "no such file"
    assert describe_path(tmp_path) == "a directory, not a regular file"
    assert describe_path("/dev/zero") == "a character device, not a regular file"
    assert describe_path(tmp_path / "fifo") == "a FIFO (named pipe), not a regular file"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["abtest", "/dev/zero"], "/dev/zero: a character device, not a regular file; expected an A/B test log"),
        (["abtest", "{tmp}"], "{tmp}: a directory, not a regular file; expected an A/B test log"),
        (["abtest", "{tmp}/missing.csv"], "{tmp}/missing.csv: no such file; expected an A/B test log"),
        (["rag", "--answers", "/dev/zero"], "--answers /dev/zero: a character device, not a regular file"),
        (["rag", "--answers", "{tmp}"], "--answers {tmp}: a directory, not a regular file"),
        (
            ["rag", "--answers", "{tmp}/a.jsonl", "--judge", "openai:m@http://127.0.0.1:9/v1", "--human", "/dev/zero"],
            "--human /dev/zero: a character device, not a regular file; expected a file of human verdicts",
        ),
        (["annotate", "--input", "/dev/zero", "--dry-run"], "/dev/zero: a character device, not a regular file"),
    ],
)
def test_commands_say_what_a_path_is(args: list[str], expected: str, tmp_path: Path) -> None:
    answer = {"query_id": "td-q-001", "answer": "x", "contexts": [{"doc_id": "td-doc-0001"}]}
    (tmp_path / "a.jsonl").write_text(json.dumps(answer) + "\n")
    done = irflow(*(a.format(tmp=tmp_path) for a in args), "--no-track", env=dict(os.environ))
    assert done.returncode == 2, (done.stdout + done.stderr)[-2000:]
    assert expected.format(tmp=tmp_path) in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
