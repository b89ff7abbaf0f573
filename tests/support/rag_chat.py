"""A scripted OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 for ``irflow rag`` tests.

Usage: ``python -m support.rag_chat LOG TOKEN``; prints its port on the first line of stdout. Requests
need ``Authorization: Bearer TOKEN`` (401 otherwise). A generation prompt (irflow's RAG prompt) is
answered with "From [1]: " and the first eight words of its first context; a question holding "filtered"
gets HTTP 500 (a failed generation); one holding "containers" gets an answer that quotes the
Authorization header (it must be stored redacted). Each answer reports ``usage`` (prompt tokens = prompt
characters // 4, completion tokens = 10). Each request appends one JSON line to LOG.
"""

from __future__ import annotations

import sys

from support.services import ChatService, Reply, Request, completion, reply


class RagChat(ChatService):
    def refused(self, request: Request) -> None:
        self.note(status=401)

    def chat(self, request: Request) -> Reply:
        body = request.body
        user = body["messages"][-1]["content"]
        question = user.split("Question: ", 1)[1].split("\n", 1)[0] if "Question: " in user else ""
        if "filtered" in question:
            self.note(status=500, question=question)
            return reply(500, {"error": {"message": "overloaded"}})
        first = user.split("[1] ", 1)[1] if "[1] " in user else ""
        answer = "From [1]: " + " ".join(first.split()[:8])
        if "containers" in question:
            answer += f" (sent with {request.auth})"
        self.note(status=200, question=question, response_format=body.get("response_format"))
        return reply(200, completion(answer, {"prompt_tokens": len(user) // 4, "completion_tokens": 10}))


if __name__ == "__main__":
    RagChat(log=sys.argv[1], token=sys.argv[2]).main()
