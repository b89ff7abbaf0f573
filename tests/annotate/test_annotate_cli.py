"""``irflow annotate`` as a user runs it, against a fake OpenAI-compatible judge (tests/support/fake_chat.py):
a refused key stops the command after one request with no grades and the key nowhere; a judge whose model
or endpoint changed asks again instead of reusing the stored votes; ``--input`` grades every candidate."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from support.cli import irflow
from support.fake_chat import SECRET, FakeChat, corpus, write_query_documents

pytestmark = pytest.mark.e2e


@pytest.fixture
def servers() -> Iterator[list[FakeChat]]:
    started: list[FakeChat] = []
    yield started
    for server in started:
        server.stop()


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "OPENAI_API_KEY": SECRET}


def _qrels(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "qrels.trec", sep=" ", names=["query_id", "iter", "doc_id", "relevance"])


def test_a_refused_key_exits_after_one_request_without_grades_or_the_key(
    tmp_path: Path, servers: list[FakeChat]
) -> None:
    cands, texts, strength = corpus(n_queries=3, k=5)
    servers.append(server := FakeChat(strength))
    server.refuse = True  # 401 on every call, echoing the Authorization header in its error body
    source, out = write_query_documents(tmp_path / "pool.jsonl", cands, texts), tmp_path / "annotation"
    judge = f"openai(name=sim):sim@{server.url}"
    done = irflow("annotate", "--input", str(source), "--name", "refused", "--judge", judge, "--cycles", "1",
                  "--output", str(out), env=_env(tmp_path))  # fmt: skip
    assert done.returncode == 2 and "HTTP 401" in done.stderr and "check OPENAI_API_KEY" in done.stderr
    assert server.requests == 1, "the first call goes alone: a refused key costs one request"
    assert server.auth == {f"Bearer {SECRET}"}  # the key was sent (and refused) ...
    assert SECRET not in done.stdout + done.stderr  # ... and is nowhere else
    assert not (out / "qrels.trec").exists() and not (out / "annotated.jsonl").exists()
    mlflow_store = Path(os.environ["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///")).parent
    for path in [*out.rglob("*"), *(tmp_path / "prefect").rglob("*"), *mlflow_store.rglob("*")]:  # logs, runs
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path


def test_another_model_or_endpoint_asks_again_and_input_grades_every_candidate(
    tmp_path: Path, servers: list[FakeChat]
) -> None:
    """q0 has 25 candidates, more than annotate's default k of 20: with --input every one is graded. Then
    the same output with the judge's model renamed, then with another endpoint: each run asks every battle
    again (stored votes are per judge version) and summary.json names the judge that answered."""
    cands, texts, strength = corpus(n_queries=2, k=25)
    cands = cands[(cands["query_id"] == "q0") | (cands["rank"] <= 4)]  # q0: 25 candidates, q1: 4
    servers.extend([FakeChat(strength), FakeChat(strength)])
    first, second = servers
    first.models = second.models = {"sim", "sim-2"}
    source, out, env = write_query_documents(tmp_path / "pool.jsonl", cands, texts), tmp_path / "ann", _env(tmp_path)

    def annotate(judge: str) -> dict[str, object]:
        done = irflow("annotate", "--input", str(source), "--name", "pool", "--judge", f"openai(name=sim):{judge}",
                      "--cycles", "1", "--no-track", "--output", str(out), env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert "2 queries, 29 documents" in done.stdout
        return json.loads((out / "summary.json").read_text())

    summary = annotate(f"sim@{first.url}")
    pairs = int(summary["pairs"])  # type: ignore[call-overload]
    assert first.asked == {"sim": pairs} and pairs >= 25
    qrels = _qrels(out)
    assert len(qrels) == 29 and (qrels["query_id"] == "q0").sum() == 25  # --k means all for --input

    summary = annotate(f"sim-2@{first.url}")
    assert first.asked == {"sim": pairs, "sim-2": pairs}, "another model: every battle asked again"
    assert summary["judges"]["sim"]["model"] == "sim-2"  # type: ignore[index]

    summary = annotate(f"sim-2@{second.url}")
    assert second.asked == {"sim-2": pairs} and first.asked["sim-2"] == pairs, "another endpoint: asked again"
    votes = pd.read_json(out / "votes.jsonl", lines=True)
    assert votes["version"].nunique() == 3 and len(votes) == 3 * pairs
    assert summary["votes"]["valid"] == {"sim": pairs}  # type: ignore[index]  # this version's votes only
