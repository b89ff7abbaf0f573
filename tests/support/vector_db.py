"""Fake vector databases for the ``http:`` presets, speaking their documented REST APIs on 127.0.0.1.

Usage: ``python -m support.vector_db FIXTURE LOG TOKEN``; prints its port on the first line of stdout.
FIXTURE (JSON): ``{"vectors": {query id: [float, ...]}, "hits": {query id: [[doc id, score], ...]}}``.
A request's vector is matched to the query whose vector it is (cosine >= 0.999, else 400), and that
query's hits are answered, cut at the request's limit, in the database's answer shape:

* Qdrant   ``POST /collections/docs/points/query``  ``{"query": [...], "limit", "with_payload"[, "using"]}``
  -> ``{"result": {"points": [{"id": <int>, "version", "score", "payload"}]}, "status": "ok", "time"}``;
  point ids are integers, the document id is the payload's ``doc_id``.
* Pinecone ``POST /query`` (``Api-Key: TOKEN``)  ``{"vector", "topK", "includeMetadata", "includeValues"[,
  "namespace"]}`` -> ``{"results": [], "matches": [{"id", "score", "values"[, "metadata"]}], "namespace", "usage"}``
* Milvus   ``POST /v2/vectordb/entities/search``  ``{"collectionName": "docs", "data": [[...]], "annsField",
  "limit"[, "outputFields"]}`` -> ``{"code": 0, "cost": 0, "data": [{"distance", "id", ...}]}`` (COSINE: a similarity)
* Weaviate ``POST /v1/graphql``  ``{"query": "{ Get { Doc(nearVector: {vector: [...]}, limit: N) { ... } } }"}``
  -> ``{"data": {"Get": {"Doc": [{"doc_id", "_additional": {"id", "distance"}}]}}}``; the distance is
  ``-score`` (Weaviate's ``dot`` distance: lower is closer).

Every route but Pinecone's needs ``Authorization: Bearer TOKEN``; a request of another shape than the
API's is answered 400 naming what is wrong. Each answer appends ``status path`` to LOG.
"""

from __future__ import annotations

import json
import re
import sys
import uuid

import numpy as np

from support.services import Reply, Request, Service, reply

GRAPHQL = re.compile(
    r"\{\s*Get\s*\{\s*(?P<collection>\w+)\s*\(\s*nearVector:\s*\{\s*vector:\s*(?P<vector>\[[^\]]*\])\s*\}\s*,"
    r"\s*limit:\s*(?P<limit>\d+)\s*\)\s*\{(?P<selection>[\w\s{}]*)\}\s*\}\s*\}"
)


class BadRequest(Exception):
    pass


def need(condition: bool, problem: str) -> None:
    if not condition:
        raise BadRequest(problem)


def keys(body: dict, required: set[str], optional: set[str]) -> None:
    need(required <= set(body), f"missing {sorted(required - set(body))}")
    need(set(body) <= required | optional, f"unexpected {sorted(set(body) - required - optional)}")


class VectorDB(Service):
    def __init__(self, fixture: str, log: str, token: str) -> None:
        super().__init__(log=log, token=token)
        with open(fixture, encoding="utf-8") as fh:
            self.fixture = json.load(fh)
        self.qids = list(self.fixture["vectors"])
        matrix = np.asarray([self.fixture["vectors"][q] for q in self.qids], dtype=np.float64)
        self.matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        docs = sorted({d for hits in self.fixture["hits"].values() for d, _ in hits})
        self.point_id = {d: i for i, d in enumerate(docs)}  # Qdrant: unsigned integer point ids
        self.routes = {
            "/collections/docs/points/query": self.qdrant,
            "/query": self.pinecone,
            "/v2/vectordb/entities/search": self.milvus,
            "/v1/graphql": self.weaviate,
        }

    def answer(self, request: Request, status: int, body: object) -> Reply:
        self.note_line(f"{status} {request.path}")
        return reply(status, body)

    def handle(self, request: Request) -> Reply:
        route = self.routes.get(request.path)
        if route is None:
            return self.answer(request, 404, {"error": f"no route {request.path}"})
        if request.path == "/query":
            authorised = request.headers.get("Api-Key") == self.token and "Authorization" not in request.headers
        else:
            authorised = self.authorised(request)
        if not authorised:
            return self.answer(request, 401, {"error": "unauthorised"})
        try:
            need(isinstance(request.body, dict), "the body must be a JSON object")
            return self.answer(request, 200, route(request.body))
        except BadRequest as exc:
            return self.answer(request, 400, {"error": str(exc)})

    def ranking(self, vector: object, limit: object) -> list[list]:
        """The hits of the query whose vector this is, cut at ``limit``."""
        dim = self.matrix.shape[1]
        need(isinstance(vector, list) and len(vector) == dim, f"the vector must be a list of {dim} numbers")
        assert isinstance(vector, list)
        need(all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector), "the vector must be numbers")
        need(
            isinstance(limit, int) and not isinstance(limit, bool) and limit > 0,
            f"limit must be a positive int: {limit!r}",
        )
        assert isinstance(limit, int)
        v = np.asarray(vector, dtype=np.float64)
        cosine = self.matrix @ (v / np.linalg.norm(v))
        best = int(cosine.argmax())
        need(cosine[best] >= 0.999, f"no query has this vector (best cosine {cosine[best]:.4f})")
        return self.fixture["hits"][self.qids[best]][:limit]

    def qdrant(self, body: dict) -> dict:
        keys(body, {"query", "limit"}, {"with_payload", "using", "with_vector"})
        payload = body.get("with_payload", False)
        need(isinstance(payload, bool) or (isinstance(payload, list) and all(isinstance(p, str) for p in payload)),
             "with_payload must be a bool or a list of keys")  # fmt: skip
        points = []
        for doc, score in self.ranking(body["query"], body["limit"]):
            full = {"doc_id": doc, "title": f"title of {doc}"}
            shown = full if payload is True else {k: full[k] for k in payload} if payload else None
            points.append({"id": self.point_id[doc], "version": 3, "score": score, "payload": shown})
        return {"result": {"points": points}, "status": "ok", "time": 0.0012, "usage": None}

    def pinecone(self, body: dict) -> dict:
        keys(body, {"vector", "topK"}, {"includeMetadata", "includeValues", "namespace", "filter"})
        need(body.get("includeValues") is False, "includeValues should be false (the values are not needed)")
        meta = body.get("includeMetadata") is True
        matches = [
            {"id": doc, "score": score, "values": [], **({"metadata": {"doc_id": doc}} if meta else {})}
            for doc, score in self.ranking(body["vector"], body["topK"])
        ]
        return {"results": [], "matches": matches, "namespace": body.get("namespace", ""), "usage": {"readUnits": 5}}

    def milvus(self, body: dict) -> dict:
        keys(
            body, {"collectionName", "data", "annsField", "limit"}, {"outputFields", "dbName", "filter", "searchParams"}
        )
        need(body["collectionName"] == "docs", f"collection {body['collectionName']!r} does not exist")
        need(body["annsField"] == "vector", f"no vector field {body['annsField']!r}")
        need(isinstance(body["data"], list) and len(body["data"]) == 1, "data must hold one vector")
        fields = body.get("outputFields", [])
        need(all(f in ("doc_id", "title") for f in fields), f"unknown output fields {fields}")
        data = [
            {"distance": score, "id": doc, **{f: doc if f == "doc_id" else f"title of {doc}" for f in fields}}
            for doc, score in self.ranking(body["data"][0], body["limit"])
        ]
        return {"code": 0, "cost": 0, "data": data}

    def weaviate(self, body: dict) -> dict:
        keys(body, {"query"}, {"variables", "operationName"})
        match = GRAPHQL.fullmatch(body["query"].strip())
        need(match is not None, f"not a Get query with nearVector and limit: {body['query'][:120]!r}")
        assert match is not None
        need(match["collection"] == "Doc", f"no collection {match['collection']!r}")
        selection = match["selection"].split()
        need(all(w in ("doc_id", "title", "_additional", "{", "}", "id", "distance") for w in selection),
             f"unknown fields in {selection}")  # fmt: skip
        objects = []
        for doc, score in self.ranking(json.loads(match["vector"]), int(match["limit"])):
            full = {"doc_id": doc, "title": f"title of {doc}"}
            extra = {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, doc)), "distance": -score}
            obj = {k: v for k, v in full.items() if k in selection}
            if "_additional" in selection:
                obj["_additional"] = {k: v for k, v in extra.items() if k in selection}
            objects.append(obj)
        return {"data": {"Get": {"Doc": objects}}}


if __name__ == "__main__":
    VectorDB(sys.argv[1], sys.argv[2], sys.argv[3]).main()
