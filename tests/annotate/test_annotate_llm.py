"""The OpenAI-compatible LLM judge against a local chat server that answers from hidden truth:
parsing, swaps undone, a 429 retried, a malformed answer counted as missing; kill and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support import services
from support.fake_chat import SECRET, FakeChat, corpus, write_query_documents

from irflow.tasks.annotate.battle import parse_answer
from irflow.tasks.annotate.judges import make_judge, parse_judge
from irflow.tasks.annotate.pairs import make_pairs
from irflow.tasks.annotate.pipeline import AnnotateConfig, estimate, judge, plan
from irflow.tasks.annotate.runner import run_judges
from irflow.tasks.annotate.store import VoteStore, read_votes
from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.llm import LLMSetupError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def chat() -> Iterator[type[FakeChat]]:
    servers: list[FakeChat] = []

    def start(strength: dict[str, float]) -> FakeChat:
        servers.append(FakeChat(strength))
        return servers[-1]

    yield start  # type: ignore[misc]
    for server in servers:
        server.stop()


def test_prompt_changes_bump_its_version() -> None:
    from irflow.tasks.annotate.battle import PROMPT_SHA256, PROMPT_VERSION

    # Votes are resumed per (judge, version): edit the prompt -> bump PROMPT_VERSION, then update this pin.
    assert (PROMPT_VERSION, PROMPT_SHA256) == (
        "pairwise-v1",
        "0fda18f3e864c729a36f557783fea1f629d3409742bf4bd1ad143832a51e345f",
    )


def test_answers_parse_with_fences_and_fail_clearly() -> None:
    assert parse_answer('```json\n{"reasoning": "A answers it", "score": -0.8}\n```').score == -0.8
    assert parse_answer('Sure! {"score": 1, "reasoning": "B"} Hope that helps.').reasoning == "B"
    for bad in ["B is better", '{"score": 1.5}', '{"reasoning": "no score"}', '{"score": NaN}', ""]:
        with pytest.raises(ValueError):
            parse_answer(bad)
    with pytest.raises(InputError):
        parse_judge("openai(colour=red):gpt-4o-mini")
    with pytest.raises(KeyError):
        parse_judge("oracle:gpt")


def test_llm_judge_swaps_retries_and_counts_malformed_answers(
    chat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cands, texts, strength = corpus(n_queries=3, k=6)
    server = chat(strength)
    pairs = make_pairs(cands, cycles=2, seed=5)
    first = pairs.iloc[0]
    server.malformed.add(frozenset((first["doc_a"], first["doc_b"])))
    server.rate_limited = 1
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    llm = make_judge(f"openai(concurrency=3,backoff=0.01,name=sim):sim@{server.url}")
    with VoteStore(tmp_path / "votes.jsonl") as store, caplog.at_level("DEBUG"):
        stats = run_judges(pairs, texts, [llm], store, seed=11)

    # the 429 was retried, and the unparseable answer asked again once (with a reminder of the format)
    assert server.requests == len(pairs) + 2 and stats.retries["sim"] == 2
    assert stats.calls["sim"] == len(pairs) and stats.missing["sim"] == 1
    assert server.auth == {f"Bearer {SECRET}"}
    votes = read_votes(tmp_path / "votes.jsonl").set_index("pair_id")
    broken = votes.loc[first["pair_id"]]
    assert np.isnan(broken["score"]) and "no JSON object" in broken["error"]  # missing, not a silent 0
    assert "also when asked again" in broken["error"] and broken["attempts"] >= 2  # (+1 if it met the 429)
    valid = votes.drop(first["pair_id"])
    assert valid["score"].notna().all() and 0 < valid["swapped"].sum() < len(valid)
    truth = np.clip([strength[b] - strength[a] for a, b in zip(valid["doc_a"], valid["doc_b"])], -1, 1)
    assert np.allclose(valid["score"], truth)  # swaps undone: every score is in the pair's own order
    assert np.allclose(valid["raw_score"], np.where(valid["swapped"], -truth, truth))  # ... as the judge answered
    shown = dict(zip(map(frozenset, server.shown), server.shown))
    for _, row in valid.iterrows():
        assert shown[frozenset((row["doc_a"], row["doc_b"]))] == (
            (row["doc_b"], row["doc_a"]) if row["swapped"] else (row["doc_a"], row["doc_b"])
        )
    assert f"missing vote: judge sim, pair {first['pair_id']}" in caplog.text  # logged, with the reason
    assert SECRET not in (tmp_path / "votes.jsonl").read_text() and SECRET not in caplog.text

    # a rerun asks again only for the missing vote
    before = server.requests
    with VoteStore(tmp_path / "votes.jsonl") as store:
        again = run_judges(pairs, texts, [llm], store, seed=11)
    assert server.requests - before == 2 and again.skipped == len(pairs) - 1 and again.missing["sim"] == 1


def test_a_judge_with_other_answer_settings_asks_again(chat, tmp_path: Path) -> None:
    """Votes are stored per judge *version*, which covers the model, the endpoint and every option that
    changes answers: the same judge name with a smaller max_chars must not reuse the old votes."""
    cands, texts, strength = corpus(n_queries=2, k=4)
    server = chat(strength)
    pairs = make_pairs(cands, cycles=2, seed=1)
    wide = make_judge(f"openai(name=sim):sim@{server.url}")
    narrow = make_judge(f"openai(name=sim,max_chars=50):sim@{server.url}")
    elsewhere = make_judge(f"openai(name=sim):sim@{server.url}/")  # the same endpoint spelled with a slash
    assert wide.name == narrow.name and wide.version != narrow.version and wide.version == elsewhere.version
    with VoteStore(tmp_path / "votes.jsonl") as store:
        run_judges(pairs, texts, [wide], store)
        assert server.requests == len(pairs)
        run_judges(pairs, texts, [narrow], store)
        assert server.requests == 2 * len(pairs), "another max_chars: every battle asked again"
        run_judges(pairs, texts, [elsewhere], store)
    assert server.requests == 2 * len(pairs), "same settings: nothing asked again"


def test_a_finished_annotation_resumes_without_preparing_its_judges(chat, tmp_path: Path) -> None:
    """Nothing left to ask: no judge is prepared (a local judge would re-encode the corpus to no end)."""
    cands, texts, strength = corpus(n_queries=2, k=4)
    server = chat(strength)
    pairs = make_pairs(cands, cycles=2, seed=1)
    llm = make_judge(f"openai(name=sim):sim@{server.url}")
    with VoteStore(tmp_path / "votes.jsonl") as store:
        run_judges(pairs, texts, [llm], store)

    def refuse() -> None:
        raise AssertionError("prepared although every vote is stored")

    llm.prepare = refuse  # type: ignore[method-assign]
    with VoteStore(tmp_path / "votes.jsonl") as store:
        again = run_judges(pairs, texts, [llm], store)
    assert again.skipped == len(pairs) and server.requests == len(pairs)


def test_reasoning_models_get_a_completion_budget_and_no_temperature() -> None:
    """o-series and gpt-5 refuse max_tokens and temperature=0 and think within the completion budget."""
    plain = make_judge("openai:gpt-4o-mini@http://127.0.0.1:9/v1").client._body("s", "u")  # type: ignore[attr-defined]
    assert plain["temperature"] == 0 and plain["max_tokens"] == 400 and "max_completion_tokens" not in plain
    for spec in ("openai:o3-mini@http://127.0.0.1:9/v1", "openai(reasoning=yes):qwq@http://127.0.0.1:9/v1"):
        body = make_judge(spec).client._body("s", "u")  # type: ignore[attr-defined]
        assert "temperature" not in body and "max_tokens" not in body and body["max_completion_tokens"] == 4000
    own = make_judge("openai(max_tokens=9000):gpt-5@http://127.0.0.1:9/v1").client._body("s", "u")  # type: ignore[attr-defined]
    assert own["max_completion_tokens"] == 9000
    with pytest.raises(LLMSetupError, match="reasoning must be auto, yes or no"):
        make_judge("openai(reasoning=maybe):gpt-5")


def test_a_refused_key_stops_the_run_at_once_and_is_never_stored(
    chat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from irflow.tasks.llm import LLMAuthError

    cands, texts, strength = corpus(n_queries=4, k=6)
    server = chat(strength)
    server.refuse = True
    pairs = make_pairs(cands, cycles=2, seed=2)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    llm = make_judge(f"openai(concurrency=2,name=sim):sim@{server.url}")
    with VoteStore(tmp_path / "votes.jsonl") as store, caplog.at_level("DEBUG"):
        with pytest.raises(LLMAuthError, match=r"HTTP 401.*\*\*\*.*check OPENAI_API_KEY") as refused:
            run_judges(pairs, texts, [llm], store)
    assert server.requests == 1 < len(pairs), "the first call goes alone: one request with a refused key"
    assert SECRET not in str(refused.value) and SECRET not in caplog.text
    stored = tmp_path / "votes.jsonl"
    assert not stored.exists() or SECRET not in stored.read_text()


def test_an_answer_that_echoes_the_key_is_stored_redacted(
    chat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog
) -> None:
    cands, texts, strength = corpus(n_queries=2, k=4)
    server = chat(strength)
    server.echo_key = True  # HTTP 200: "reasoning": "... my key is Bearer sk-..."
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    llm = make_judge(f"openai(concurrency=2,name=sim):sim@{server.url}")
    with VoteStore(tmp_path / "votes.jsonl") as store, caplog.at_level("DEBUG"):
        run_judges(make_pairs(cands, cycles=1, seed=2), texts, [llm], store)
    votes = read_votes(tmp_path / "votes.jsonl")
    assert len(votes) > 0 and votes["score"].notna().all()
    assert votes["reasoning"].str.endswith("my key is Bearer ***").all()
    out, err = capfd.readouterr()
    assert SECRET not in out + err + caplog.text
    assert [p for p in tmp_path.rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")] == []


def test_a_judge_without_any_valid_vote_writes_no_grades(chat, tmp_path: Path) -> None:
    from irflow.tasks.annotate.battle import JudgesFailedError
    from irflow.tasks.annotate.pipeline import check_every_judge_voted

    cands, texts, strength = corpus(n_queries=2, k=4)
    server = chat(strength)
    pairs = make_pairs(cands, cycles=2, seed=1)
    server.malformed = {frozenset((a, b)) for a, b in zip(pairs["doc_a"], pairs["doc_b"])}  # every answer prose
    with VoteStore(tmp_path / "votes.jsonl") as store:
        run_judges(pairs, texts, [make_judge(f"openai(name=sim):sim@{server.url}")], store)
    votes = read_votes(tmp_path / "votes.jsonl")
    with pytest.raises(JudgesFailedError, match=r"judge sim has no valid vote on any of \d+ pairs.*no JSON object"):
        check_every_judge_voted(votes, ["sim"], len(pairs))
    server.malformed = set()
    check_every_judge_voted(votes.assign(score=0.5), ["sim"], len(pairs))  # one valid vote is enough


def test_judges_fail_before_any_call_without_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LLMSetupError, match="OPENAI_API_KEY"):
        make_judge("openai:gpt-4o-mini").prepare()  # the official API needs a key; a local server does not
    make_judge("openai:llama3@http://127.0.0.1:9/v1").prepare()
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(LLMSetupError, match="ANTHROPIC_API_KEY"):
        make_judge("anthropic:claude-sonnet-4").prepare()  # no SDK to import: irflow speaks the API itself


def test_killed_annotation_resumes_with_exactly_the_remaining_calls(chat, tmp_path: Path) -> None:
    from irflow.tasks.ingest import import_dataset

    cands, texts, strength = corpus(n_queries=2, k=6)
    import_dataset(write_query_documents(tmp_path / "docs.jsonl", cands, texts), "zbench", "zb-kill")
    server = chat(strength)
    done_before_kill = 7
    server.hang_after = done_before_kill
    out = tmp_path / "annotation"
    spec = f"openai(concurrency=1,max_retries=0,name=sim):sim@{server.url}"
    script = (
        "import sys\nfrom irflow.tasks.annotate.pipeline import AnnotateConfig, plan, judge\n"
        "judge(plan(AnnotateConfig(dataset='zb-kill', output=sys.argv[1], k=None, judges=(sys.argv[2],))))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(out), spec],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while server.requests <= done_before_kill and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert server.requests == done_before_kill + 1, proc.stdout.read().decode() if proc.poll() is not None else ""
        time.sleep(0.3)  # the process now waits on its one call in flight
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    server.gate.set()
    assert len(read_votes(out / "votes.jsonl")) == done_before_kill  # every answered call was stored

    p = plan(AnnotateConfig(dataset="zb-kill", output=str(out), k=None, judges=(spec,)))
    total = len(p.pairs)
    assert estimate(p).calls == total - done_before_kill  # the dry-run estimate knows what is left
    server.hang_after, before = None, server.requests
    stats = judge(p)
    assert server.requests - before == total - done_before_kill  # exactly the remaining calls
    assert stats.skipped == done_before_kill and not stats.missing
    votes = read_votes(out / "votes.jsonl")
    assert len(votes) == total and votes["score"].notna().all() and set(votes["pair_id"]) == set(p.pairs["pair_id"])
    third = judge(p)
    assert not third.calls and server.requests - before == total - done_before_kill  # a third run calls nothing


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
def test_provider_judges_against_a_local_server(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anthropic's Messages API and Gemini's generateContent as irflow speaks them: path, key header, body."""
    import asyncio

    from irflow.tasks.annotate.battle import Battle

    answer = json.dumps({"reasoning": "B answers it", "score": 0.75})
    paths: list[str] = []
    keys: list[str] = []
    bodies: list[Any] = []

    class Provider(services.Service):
        """The provider's own API (Anthropic's messages, Gemini's generateContent) answering every call."""

        def handle(self, request: services.Request) -> services.Reply:
            paths.append(request.path)
            keys.append(request.headers.get("x-api-key" if kind == "anthropic" else "x-goog-api-key", ""))
            bodies.append(request.body)
            if kind == "anthropic":
                out = {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": request.body["model"],
                    "content": [{"type": "text", "text": answer}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                }
            else:
                parts = [{"text": "thinking...", "thought": True}, {"text": answer}]  # a thought is not the answer
                out = {
                    "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
                    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5},
                }
            return services.reply(200, out)

    monkeypatch.setenv("ANTHROPIC_API_KEY" if kind == "anthropic" else "GEMINI_API_KEY", SECRET)
    with Provider() as server:
        judge = make_judge(f"{kind}(base_url={server.url}):model-x")
        judge.prepare()
        verdict = asyncio.run(judge.judge(Battle("q", "what?", "a", "doc a", "b", "doc b")))
    assert verdict.score == 0.75 and verdict.reasoning == "B answers it" and len(paths) == 1
    assert paths == ["/v1/messages" if kind == "anthropic" else "/v1beta/models/model-x:generateContent"]
    assert keys == [SECRET]
    assert judge.client.usage == {"calls": 1, "prompt_tokens": 10, "completion_tokens": 5}  # type: ignore[attr-defined]
    if kind == "gemini":
        assert bodies[0]["generationConfig"]["responseMimeType"] == "application/json"


def test_thinking_budgets_per_provider() -> None:
    """Claude thinks only when given a budget (>= 1024, inside max_tokens, no temperature); Gemini 2.5+
    think by default, so they get a budget on top of the answer's tokens; the budget is part of the version."""
    claude = make_judge("anthropic(thinking=2048):claude-sonnet-4-5")
    request = claude.client.request("s", "u")  # type: ignore[attr-defined]
    assert request["thinking"] == {"type": "enabled", "budget_tokens": 2048} and request["max_tokens"] == 2448
    assert "temperature" not in request
    assert "thinking" not in make_judge("anthropic:claude-sonnet-4-5").client.request("s", "u")  # type: ignore[attr-defined]
    for spec, match in (
        ("anthropic(thinking=500):claude-sonnet-4-5", "at least 1024"),
        ("anthropic(thinking=2048,max_tokens=2000):claude-sonnet-4-5", "must exceed the thinking budget"),
        ("gemini(thinking=lots):gemini-2.5-pro", "thinking must be auto or a number"),
    ):
        with pytest.raises(LLMSetupError, match=match):
            make_judge(spec)

    flash = make_judge("gemini:gemini-2.5-flash").client.config_options("s")  # type: ignore[attr-defined]
    assert flash["thinking_config"] == {"thinking_budget": 1024} and flash["max_output_tokens"] == 1424
    off = make_judge("gemini(thinking=0):gemini-2.5-flash").client.config_options("s")  # type: ignore[attr-defined]
    assert off["thinking_config"] == {"thinking_budget": 0} and off["max_output_tokens"] == 400
    old = make_judge("gemini:gemini-2.0-flash").client.config_options("s")  # type: ignore[attr-defined]
    assert "thinking_config" not in old and old["max_output_tokens"] == 400 and old["temperature"] == 0
    versions = {make_judge(s).version for s in ("gemini:gemini-2.5-flash", "gemini(thinking=0):gemini-2.5-flash")}
    assert len(versions) == 2


def test_the_zbench_preset_expands_to_three_providers_with_their_parameters() -> None:
    config = AnnotateConfig(dataset="techdocs", judges=("preset:zbench", "model:minilm"))
    assert [parse_judge(s).kind for s in config.judges] == ["openai", "anthropic", "gemini", "model"]
    gpt, claude, gemini = (make_judge(s) for s in config.judges[:3])
    body = gpt.client._body("s", "u")  # type: ignore[attr-defined]
    assert "temperature" not in body and body["max_completion_tokens"] == 4000  # a reasoning model
    assert claude.client.request("s", "u")["thinking"]["budget_tokens"] == 1024  # type: ignore[attr-defined]
    assert gemini.client.config_options("s")["thinking_config"] == {"thinking_budget": 1024}  # type: ignore[attr-defined]
    with pytest.raises(UnknownNameError, match="unknown judge preset 'zbnech'; presets: zbench"):
        AnnotateConfig(dataset="techdocs", judges=("preset:zbnech",))


def test_anchors_calibrate_grades_across_queries(chat, tmp_path: Path) -> None:
    """q1's candidates are all as irrelevant as random documents: per-query grades still give its best
    candidate 3; with anchors (other queries' documents battled as fixed points) q1 gets no relevant
    document, while q0's strong candidates keep their grades and no anchor is exported."""
    from irflow.tasks.annotate.pipeline import annotate
    from irflow.tasks.core.schema import Dataset

    strength = {f"q0d{i}": 1.5 - 0.5 * i for i in range(5)} | {f"q1d{i}": -1.0 for i in range(5)}
    strength |= {f"x{i}": -1.0 for i in range(10)}
    cands = pd.DataFrame(
        [(f"q{q}", f"q{q}d{i}", i + 1) for q in range(2) for i in range(5)], columns=["query_id", "doc_id", "rank"]
    )
    cands.to_parquet(tmp_path / "candidates.parquet", index=False)
    corpus = pd.DataFrame({"doc_id": list(strength), "title": "", "text": [f"{d}: text of {d}" for d in strength]})
    dataset = Dataset(
        "toy",
        "test",
        corpus,
        pd.DataFrame({"query_id": ["q0", "q1"], "text": ["what is q0?", "what is q1?"]}),
        pd.DataFrame(columns=["query_id", "doc_id", "relevance"]).astype({"relevance": "int64"}),
        {"fingerprint": "toy", "candidates": str(tmp_path / "candidates.parquet")},
    )
    server = chat(strength)
    grades = {}
    for anchors in (0, 3):
        out = tmp_path / f"anchors{anchors}"
        config = AnnotateConfig(
            dataset="toy", output=str(out), system=None, k=None, cycles=3, anchors=anchors,
            judges=(f"openai(name=sim):sim@{server.url}",),
        )  # fmt: skip
        summary = annotate(config, dataset)
        qrels = pd.read_csv(out / "qrels.trec", sep=" ", names=["query_id", "iter", "doc_id", "relevance"])
        assert set(qrels["doc_id"]) == set(cands["doc_id"])  # anchors battle, but are never exported
        grades[anchors] = qrels.set_index("doc_id")["relevance"]
        if anchors:
            calibration = summary["calibration"]
            assert calibration["anchors_per_query"] == 3 and calibration["queries_without_relevant"] == 1
            assert calibration["demoted"] == int((grades[0][[f"q1d{i}" for i in range(5)]] > 0).sum())
        else:
            assert summary["calibration"] is None
    q1 = [f"q1d{i}" for i in range(5)]
    assert grades[0][q1].max() == 3 and (grades[3][q1] == 0).all()  # relative: "best of nothing" was 3
    assert grades[3]["q0d0"] == 3 and grades[3]["q0d0"] == grades[0]["q0d0"]
    assert server.requests > 0 and all(d in strength for pair in server.shown for d in pair)
