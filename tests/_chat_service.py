"""A fake OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 that writes queries from the
document in the prompt, for tests of ``irflow datasets synthesize``.

Usage: ``python _chat_service.py LOG TOKEN``; prints its port on the first line of stdout. Requests
need ``Authorization: Bearer TOKEN`` (401 otherwise, echoing the header as some gateways do). The
answer to the 3rd request is prose, not JSON (unparseable). Every other answer holds two queries:

* ``keyword``: the document's three longest words (found again by BM25);
* ``question``: "what is" and its two longest words (found again);
* ``paraphrase``: its three longest words reversed (no document has them: fails the round trip);
* and always "how do I get started" (a duplicate from the second answer on).

Each request appends one JSON line to LOG: status, style, the response_format asked for.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from http.server import ThreadingHTTPServer

from _json_handler import JsonHandler

LOG, TOKEN = sys.argv[1], sys.argv[2]
LOCK = threading.Lock()
SEEN = {"requests": 0}
GENERIC = "how do I get started"


def note(**fields: object) -> None:
    with LOCK, open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(fields) + "\n")


def queries_for(prompt: str) -> tuple[str, list[str]]:
    document = prompt.split("Document:\n", 1)[1].split("\n\nStyle: ", 1)[0]
    style = prompt.split("\n\nStyle: ", 1)[1].split("\n", 1)[0].strip()
    words = list(dict.fromkeys(w.lower() for w in re.findall(r"[A-Za-z][A-Za-z]{3,}", document)))
    longest = sorted(words, key=lambda w: (-len(w), words.index(w)))[:3]
    if style == "keyword":
        first = " ".join(longest)
    elif style == "question":
        first = "what is " + " ".join(longest[:2])
    else:
        first = " ".join(w[::-1] for w in longest)
    return style, [first, GENERIC]


class Handler(JsonHandler):
    def do_POST(self) -> None:
        body = self.read_json()
        auth = self.headers.get("Authorization", "")
        if self.path != "/v1/chat/completions":
            return self.send_json(404, {"error": "not found"})
        if auth != f"Bearer {TOKEN}":
            note(status=401)
            return self.send_json(401, {"error": {"message": f"Incorrect API key provided: {auth}"}})
        style, queries = queries_for(body["messages"][-1]["content"])
        with LOCK:
            SEEN["requests"] += 1
            number = SEEN["requests"]
        content = "Sure! Here are some queries you could use." if number == 3 else json.dumps({"queries": queries})
        note(status=200, style=style, response_format=body.get("response_format"), unparseable=number == 3)
        self.send_json(200, {"choices": [{"message": {"role": "assistant", "content": content}}], "usage": {}})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever(poll_interval=0.1)
