"""A scripted OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 for ``irflow rag`` tests.

Usage: ``python _rag_chat_service.py LOG TOKEN``; prints its port on the first line of stdout. Requests
need ``Authorization: Bearer TOKEN`` (401 otherwise). A generation prompt (irflow's RAG prompt) is
answered with "From [1]: " and the first eight words of its first context; a question holding "filtered"
gets HTTP 500 (a failed generation); one holding "containers" gets an answer that quotes the
Authorization header (it must be stored redacted). Each answer reports ``usage`` (prompt tokens = prompt
characters // 4, completion tokens = 10). Each request appends one JSON line to LOG.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import ThreadingHTTPServer

from _json_handler import JsonHandler

LOG, TOKEN = sys.argv[1], sys.argv[2]
LOCK = threading.Lock()


def note(**fields: object) -> None:
    with LOCK, open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(fields) + "\n")


class Handler(JsonHandler):
    def do_POST(self) -> None:
        body = self.read_json()
        auth = self.headers.get("Authorization", "")
        if self.path != "/v1/chat/completions":
            return self.send_json(404, {"error": "not found"})
        if auth != f"Bearer {TOKEN}":
            note(status=401)
            return self.send_json(401, {"error": {"message": "Incorrect API key provided"}})
        user = body["messages"][-1]["content"]
        question = user.split("Question: ", 1)[1].split("\n", 1)[0] if "Question: " in user else ""
        if "filtered" in question:
            note(status=500, question=question)
            return self.send_json(500, {"error": {"message": "overloaded"}})
        first = user.split("[1] ", 1)[1] if "[1] " in user else ""
        answer = "From [1]: " + " ".join(first.split()[:8])
        if "containers" in question:
            answer += f" (sent with {auth})"
        note(status=200, question=question, response_format=body.get("response_format"))
        usage = {"prompt_tokens": len(user) // 4, "completion_tokens": 10}
        self.send_json(200, {"choices": [{"message": {"role": "assistant", "content": answer}}], "usage": usage})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever(poll_interval=0.1)
