"""A search service for the http: tests, run as its own process: ``python -m support.search HITS LOG [TOKEN]``.

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

import json
import sys
import time

from support.services import Reply, Request, Service, reply


class SearchService(Service):
    def __init__(self, hits: str, log: str, token: str | None) -> None:
        super().__init__(log=log, token=token)
        with open(hits, encoding="utf-8") as fh:
            self.hits: dict[str, list[list]] = json.load(fh)
        self.seen = 0
        self.own: list[float] = []

    def answer(
        self, began: float, request: Request, status: int, body: object, headers: dict[str, str] | None = None
    ) -> Reply:
        own_ms = (time.perf_counter() - began) * 1000
        self.note_line(f"{status} {request.path}")
        if status == 200:
            with self.lock:
                self.own.append(own_ms)
        return reply(status, body, {"X-Service-Ms": f"{own_ms:.4f}", **(headers or {})})

    def handle(self, request: Request) -> Reply:
        began = time.perf_counter()
        body, path = request.body, request.path
        if path == "/stats":
            with self.lock:
                stats = {"answered": len(self.own), "own_ms": list(self.own)}
                self.own.clear()
            return reply(200, stats)
        if path == "/leaky":
            return self.answer(began, request, 400, {"error": f"rejected request with credentials {request.auth!r}"})
        with self.lock:
            self.seen += 1
            n = self.seen
        if not self.authorised(request):
            return self.answer(began, request, 401, {"error": "unknown token"})
        if n == 1:
            return self.answer(began, request, 429, {"error": "slow down"}, {"Retry-After": "1"})
        if n == 2:
            return self.answer(began, request, 503, {"error": "warming up"})
        if path == "/search":
            hits = self.hits.get(body["query"], [])[: int(body["k"])]
            return self.answer(began, request, 200, {"hits": [{"id": d, "score": s} for d, s in hits]})
        if path == "/es/_search":
            (text,) = body["query"]["match"].values()
            hits = self.hits.get(text, [])[: int(body["size"])]
            found = {"total": len(hits), "hits": [{"_id": d, "_score": s} for d, s in hits]}
            return self.answer(began, request, 200, {"hits": found})
        return self.answer(began, request, 404, {"error": f"no route {path}"})


if __name__ == "__main__":
    SearchService(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None).main()
