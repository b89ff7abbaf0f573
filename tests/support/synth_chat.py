"""A fake OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 that writes queries from the
document in the prompt, for tests of ``irflow datasets synthesize``.

Usage: ``python -m support.synth_chat LOG TOKEN``; prints its port on the first line of stdout. Requests
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

from support.services import ChatService, Reply, Request, completion, reply

GENERIC = "how do I get started"


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


class SynthChat(ChatService):
    answered = 0

    def refusal(self, request: Request) -> str:
        return f"Incorrect API key provided: {request.auth}"

    def refused(self, request: Request) -> None:
        self.note(status=401)

    def chat(self, request: Request) -> Reply:
        style, queries = queries_for(request.body["messages"][-1]["content"])
        with self.lock:
            self.answered += 1
            number = self.answered
        content = "Sure! Here are some queries you could use." if number == 3 else json.dumps({"queries": queries})
        self.note(status=200, style=style, response_format=request.body.get("response_format"), unparseable=number == 3)
        return reply(200, completion(content, {}))


if __name__ == "__main__":
    SynthChat(log=sys.argv[1], token=sys.argv[2]).main()
