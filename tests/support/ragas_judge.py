"""A scripted OpenAI-compatible judge on 127.0.0.1 that answers ragas 0.4's prompts and irflow's alike, for
the parity test (tests/rag/test_ragas_parity.py) and the judged ``irflow rag`` test.

Usage: ``python -m support.ragas_judge LOG``; prints its port on the first line of stdout. Each request appends
one JSON line to LOG: which side asked (``ragas`` or ``irflow``) and the step.

It answers from one deterministic oracle, whoever asks:

* statements of a text = its sentences; its claims = its sentences with a content word (so "Yes." has none);
* a statement is supported by (inferable from, attributable to) a text iff every content word of the
  statement (4+ letters, lower-cased) occurs in the text;
* a context is useful for a reference iff they share at least 2 content words;
* the questions for an answer: "what is W?" for its k-th content word W, the k-th time that answer is asked
  about (ragas asks 3 times, irflow once for 3): the same three questions either way, whatever the order;
  noncommittal iff the answer says "not sure", and for the second question also iff it says "perhaps";
  the question is empty for an answer without content words, and the first one for an answer saying "blank".
"""

from __future__ import annotations

import json
import re
import sys
import threading
from typing import Any

from irflow.tasks.rag.prompts import STEPS
from support import services
from support.services import ChatService, Reply, Request

LOCK = threading.Lock()
ASKED: dict[str, int] = {}  # how often ragas asked for questions about each answer
RAGAS_STEPS = {
    "StatementGeneratorOutput": "statements",
    "NLIStatementOutput": "nli",
    "AnswerRelevanceOutput": "question",
    "ContextPrecisionOutput": "useful",
    "ContextRecallOutput": "attributed",
    "ClaimDecompositionOutput": "claims",
}
IRFLOW_STEPS = {step.system: name for name, step in STEPS.items()}


def words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z][A-Za-z']{3,}", text)}


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def supported(statement: str, premise: str) -> int:
    return int(words(statement) <= words(premise))


def question(answer: str, k: int) -> dict[str, Any]:
    content = sorted(words(answer))
    noncommittal = "not sure" in answer or (k == 1 and "perhaps" in answer)
    empty = not content or (k == 0 and "blank" in answer.lower())
    return {"question": "" if empty else f"what is {content[k % len(content)]}?", "noncommittal": int(noncommittal)}


def verdicts(statements: list[str], premise: str, key: str = "verdict") -> list[dict[str, Any]]:
    return [{"statement": s, "reason": "content words", key: supported(s, premise)} for s in statements]


def reply(side: str, step: str, data: dict[str, Any]) -> dict[str, Any]:
    """The oracle's answer to one step, in the shape the side's prompt asks for."""
    if step == "statements":
        return {"statements": sentences(data["answer"])}
    if step == "claims":
        return {"claims": [c for c in sentences(data["response" if side == "ragas" else "text"]) if words(c)]}
    if step == "nli":
        return {"statements" if side == "ragas" else "verdicts": verdicts(data["statements"], data["context"])}
    if step == "question":  # ragas: one question a call
        with LOCK:
            k = ASKED.get(data["response"], 0)
            ASKED[data["response"]] = k + 1
        return question(data["response"], k % 3)
    if step == "questions":  # irflow: all in one call
        return {"questions": [question(data["answer"], k) for k in range(data["questions"])]}
    if step == "useful":
        return {"reason": "overlap", "verdict": int(len(words(data["context"]) & words(data["answer"])) >= 2)}
    return {"classifications": verdicts(sentences(data["answer"]), data["context"], "attributed")}


def answer(messages: list[dict[str, Any]]) -> tuple[str, str, dict[str, Any]]:
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = [m["content"] for m in messages if m["role"] == "user"][-1]
    if system in IRFLOW_STEPS:
        step = IRFLOW_STEPS[system]
        data = json.loads(user.split("Input:\n", 1)[1].split("\n\nAnswer with the JSON object only.", 1)[0])
        return "irflow", step, reply("irflow", step, data)
    prompt = "\n".join(str(m["content"]) for m in messages)
    step = next(name for title, name in RAGAS_STEPS.items() if f'"title": "{title}"' in prompt)
    body = user.rsplit("Now perform the same with the following input\ninput: ", 1)[1].rsplit("\nOutput: ", 1)[0]
    return "ragas", step, reply("ragas", step, json.loads(body))


class RagasJudge(ChatService):
    def chat(self, request: Request) -> Reply:
        body = request.body
        side, step, content = answer(body["messages"])
        self.note(side=side, step=step)
        message = {"role": "assistant", "content": json.dumps(content)}
        usage = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
        payload = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "judge"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage,
        }
        return services.reply(200, payload)


if __name__ == "__main__":
    RagasJudge(log=sys.argv[1]).main()
