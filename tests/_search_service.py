"""A search service for the http: tests, run as its own process: ``python _search_service.py HITS LOG [TOKEN]``.

Serves a precomputed ranking (HITS: JSON ``{query text: [[doc id, score], ...]}``) on 127.0.0.1 (a free
port, printed on the first line of stdout) in two shapes: irflow's default protocol on ``/search`` and
Elasticsearch's ``_search`` on ``/es/_search``. The first request it gets is answered 429 with
``Retry-After: 1``, the second 503; with TOKEN every request must carry ``Authorization: Bearer TOKEN``
(401 otherwise). ``/leaky`` always answers 400 with a body that echoes the Authorization header. Each
request is logged to LOG (``status path``); ``X-Service-Ms`` says how long the service itself took, and
``/stats`` answers ``{"answered": N, "own_ms": [...]}``, the own times of the searches answered 200
since the previous ``/stats`` (for benchmarks: the service's time in a whole batch; not logged, not
counted as a request).
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time

from _json_handler import JsonHandler

HITS: dict[str, list[list]] = json.load(open(sys.argv[1], encoding="utf-8"))
LOG = open(sys.argv[2], "a", encoding="utf-8", buffering=1)
TOKEN = sys.argv[3] if len(sys.argv) > 3 else None
LOCK = threading.Lock()
SEEN = [0]
OWN: list[float] = []


class Handler(JsonHandler):
    def answer(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        own_ms = (time.perf_counter() - self.start) * 1000
        self.send_json(status, body, {"X-Service-Ms": f"{own_ms:.4f}", **(headers or {})})
        with LOCK:
            LOG.write(f"{status} {self.path}\n")
            if status == 200:
                OWN.append(own_ms)

    def do_POST(self) -> None:
        self.start = time.perf_counter()
        body = self.read_json()
        auth = self.headers.get("Authorization", "")
        if self.path == "/stats":
            with LOCK:
                stats = {"answered": len(OWN), "own_ms": list(OWN)}
                OWN.clear()
            return self.send_json(200, stats)
        if self.path == "/leaky":
            return self.answer(400, {"error": f"rejected request with credentials {auth!r}"})
        with LOCK:
            SEEN[0] += 1
            n = SEEN[0]
        if TOKEN is not None and auth != f"Bearer {TOKEN}":
            return self.answer(401, {"error": "unknown token"})
        if n == 1:
            return self.answer(429, {"error": "slow down"}, {"Retry-After": "1"})
        if n == 2:
            return self.answer(503, {"error": "warming up"})
        if self.path == "/search":
            hits = HITS.get(body["query"], [])[: int(body["k"])]
            return self.answer(200, {"hits": [{"id": d, "score": s} for d, s in hits]})
        if self.path == "/es/_search":
            (text,) = body["query"]["match"].values()
            hits = HITS.get(text, [])[: int(body["size"])]
            return self.answer(200, {"hits": {"total": len(hits), "hits": [{"_id": d, "_score": s} for d, s in hits]}})
        return self.answer(404, {"error": f"no route {self.path}"})


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
