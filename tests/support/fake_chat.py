"""A fake OpenAI-compatible judge: a ``/v1/chat/completions`` :class:`~support.services.ChatService` on
127.0.0.1 (a thread of the test process, stopped by ``stop``) that answers pairwise battles from hidden
document strengths, and the toy candidates it judges. Used by the judge tests in-process and by the
``irflow annotate`` command tests.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import numpy as np
import pandas as pd

from irflow.tasks.annotate.candidates import Texts
from support.services import ChatService, Reply, Request, completion, reply

SECRET = "sk-test-DO-NOT-LEAK-1234"
BATTLE = re.compile(r"Document A:\n(?P<a>.*?)\n\nDocument B:\n(?P<b>.*?)\n\nWhich document", re.S)


class FakeChat(ChatService):
    """A /v1/chat/completions server on 127.0.0.1, started at once. Each document's text starts with its id;
    the answer is ``clip(strength(B) - strength(A))`` of the documents in the order shown, fenced as models
    often do."""

    def __init__(self, strength: dict[str, float]) -> None:
        super().__init__()
        self.strength = strength
        self.rate_limited = 0  # answer the next N requests with 429
        self.malformed: set[frozenset[str]] = set()  # battles answered with prose, not JSON
        self.hang_after: int | None = None  # answers beyond this many block until ``gate`` opens
        self.gate = threading.Event()
        self.answered = 0
        self.shown: list[tuple[str, str]] = []
        self.auth: set[str] = set()
        self.refuse = False  # answer 401, echoing the Authorization header (as some gateways do)
        self.echo_key = False  # answer 200 with a reasoning that quotes the Authorization header
        self.models = {"sim"}  # model names it answers for
        self.asked: dict[str, int] = {}  # answered calls per model
        self.start()

    @property
    def url(self) -> str:
        """The API's base URL (``…/v1``), as a client is given it."""
        return f"http://127.0.0.1:{self.port}/v1"

    def authorised(self, request: Request) -> bool:
        return not self.refuse

    def refusal(self, request: Request) -> str:
        return f"invalid key in header Authorization: {request.auth or None}"

    def chat(self, request: Request) -> Reply:
        auth, body = request.auth, request.body
        with self.lock:
            if self.rate_limited:
                self.rate_limited -= 1
                return reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
            self.answered += 1
            hang = self.hang_after is not None and self.answered > self.hang_after
        if hang:
            self.gate.wait(timeout=120)
        assert body["model"] in self.models and body["temperature"] == 0
        with self.lock:
            self.asked[body["model"]] = self.asked.get(body["model"], 0) + 1
        match = BATTLE.search(body["messages"][1]["content"])
        assert match is not None, "not a battle prompt"
        a, b = match["a"].split(":")[0], match["b"].split(":")[0]
        with self.lock:
            self.shown.append((a, b))
        if frozenset((a, b)) in self.malformed:
            content = "Document B, clearly."
        else:
            score = float(np.clip(self.strength[b] - self.strength[a], -1, 1))
            reasoning = f"{b} vs {a}" + (f"; my key is {auth}" if self.echo_key else "")
            content = "```json\n" + json.dumps({"reasoning": reasoning, "score": score}) + "\n```"
        return reply(200, completion(content))

    def handle(self, request: Request) -> Reply:
        if request.auth:
            with self.lock:
                self.auth.add(request.auth)
        return super().handle(request)

    def stop(self) -> None:
        self.gate.set()
        super().stop()


def corpus(n_queries: int, k: int, seed: int = 3) -> tuple[pd.DataFrame, Texts, dict[str, float]]:
    rng = np.random.default_rng(seed)
    cands = pd.DataFrame(
        [(f"q{q}", f"q{q}d{i}", i + 1) for q in range(n_queries) for i in range(k)],
        columns=["query_id", "doc_id", "rank"],
    )
    strength = {d: float(s) for d, s in zip(cands["doc_id"], rng.uniform(-2, 2, len(cands)))}
    texts = Texts({q: f"what is {q}?" for q in cands["query_id"]}, {d: f"{d}: text of {d}" for d in cands["doc_id"]})
    return cands, texts, strength


def write_query_documents(path: Path, cands: pd.DataFrame, texts: Texts) -> Path:
    with open(path, "w") as fh:
        for qid, group in cands.groupby("query_id"):
            documents = [{"id": d, "content": texts.documents[d]} for d in group["doc_id"]]
            fh.write(json.dumps({"query": {"id": qid, "query": texts.queries[qid]}, "documents": documents}) + "\n")
    return path
