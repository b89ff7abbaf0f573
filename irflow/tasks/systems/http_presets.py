"""Presets of ``http:`` systems: the request body and the answer paths of common search APIs.

Text search: Elasticsearch / OpenSearch ``_search`` (a ``match`` query), Solr's JSON Request API,
Meilisearch. Vector databases, queried with a vector that irflow embeds with ``model`` (``$vector``):

* ``qdrant``: ``POST /collections/<name>/points/query`` ``{"query": [...], "limit": k, "with_payload": ...}``
  -> ``{"result": {"points": [{"id", "score", "payload"}]}}`` (``field`` = a named vector, ``using``)
* ``pinecone``: ``POST https://<index host>/query`` ``{"vector": [...], "topK": k, ...}`` ->
  ``{"matches": [{"id", "score"}]}`` (the key goes in ``Api-Key``; ``namespace`` optional)
* ``milvus``: ``POST /v2/vectordb/entities/search`` ``{"collectionName", "data": [[...]], "annsField", "limit"}``
  -> ``{"code": 0, "data": [{"id", "distance", ...}]}`` (``field`` = the vector field, default ``vector``); the
  "distance" is a similarity for COSINE and IP collections, a distance for L2 ones (``scores=distance``)
* ``weaviate``: ``POST /v1/graphql`` ``{"query": "{ Get { <collection>(nearVector: {vector: [...]}, limit: k)
  { ... _additional { id distance } } } }"}`` -> ``{"data": {"Get": {"<collection>": [...]}}}``; a distance
  (lower is better), so ``scores=distance``

The id defaults to the database's own point id; a document id kept in the payload / metadata /
properties is named with ``id=`` (``payload.doc_id``, ``metadata.doc_id``, ``doc_id``), and the request
then asks for that field only. Pure: no network, no model.
"""

from __future__ import annotations

import re
from typing import Any

PRESETS = ("default", "elasticsearch", "opensearch", "solr", "meilisearch", "qdrant", "pinecone", "milvus", "weaviate")
VECTOR_PRESETS = ("qdrant", "pinecone", "milvus", "weaviate")
ANSWER = {  # preset -> (hits path, id path, score path)
    "default": ("hits", "id", "score"),
    "elasticsearch": ("hits.hits", "_id", "_score"),
    "opensearch": ("hits.hits", "_id", "_score"),
    "solr": ("response.docs", "id", "score"),
    "meilisearch": ("hits", "id", "_rankingScore"),
    "qdrant": ("result.points", "id", "score"),
    "pinecone": ("matches", "id", "score"),
    "milvus": ("data", "id", "distance"),
    "weaviate": ("data.Get.<collection>", "_additional.id", "_additional.distance"),
}
FIELD_DEFAULTS = {"elasticsearch": "text", "opensearch": "text", "solr": "text", "milvus": "vector", "qdrant": ""}
OPTION_PRESETS = {  # options that only some presets take
    "field": tuple(FIELD_DEFAULTS),
    "collection": ("milvus", "weaviate"),
    "namespace": ("pinecone",),
}
_GRAPHQL_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")


def preset_defaults(preset: str, options: dict[str, str]) -> dict[str, str]:
    """The option values a preset implies given the spec's ``options`` (left out of a canonical spec):
    answer paths, field, score direction, the auth header (Pinecone's ``Api-Key``) and its scheme."""
    hits, id_, score = ANSWER[preset]
    hits = hits.replace("<collection>", options.get("collection", ""))
    default_header = "Api-Key" if preset == "pinecone" else "Authorization"
    header = options.get("auth_header") or default_header  # the scheme's default follows the header sent
    out = {
        "hits": hits,
        "id": id_,
        "score": score,
        "scores": "distance" if preset == "weaviate" else "similarity",
        "auth_header": default_header,
        "auth_scheme": "Bearer" if header == "Authorization" else "none",
    }
    if preset in FIELD_DEFAULTS:
        out["field"] = FIELD_DEFAULTS[preset]
    return out


def check_preset(preset: str, options: dict[str, str]) -> str | None:
    """What is wrong with ``options`` for ``preset`` (None when nothing is)."""
    for name, presets in OPTION_PRESETS.items():
        if name in options and preset not in presets:
            return f"option {name} applies to the presets {', '.join(presets)} (a template names its own)"
    if preset in ("milvus", "weaviate") and not options.get("collection"):
        return f"preset={preset} needs collection=<the collection searched>"
    if preset == "weaviate":
        names = [options["collection"], *options.get("id", "").split("."), *options.get("score", "").split(".")]
        bad = next((n for n in names if n and not _GRAPHQL_NAME.fullmatch(n)), None)
        if bad is not None:
            return f"preset=weaviate: {bad!r} is not a GraphQL name (letters, digits, _), as collection, id and score"
    return None


def preset_template(preset: str, options: dict[str, str], id_path: tuple[str, ...], score_path: tuple[str, ...]) -> Any:
    """The request body of a preset (placeholders ``$query``, ``$k``, ``$vector`` not yet filled in), from
    the merged ``options`` and the answer paths it will read."""
    field = options.get("field", "")
    if preset in ("elasticsearch", "opensearch"):
        return {"query": {"match": {field: "$query"}}, "size": "$k", "_source": False}
    if preset == "solr":  # the JSON Request API (POST <core>/query); edismax tolerates free text
        return {"query": "$query", "limit": "$k", "fields": "id,score", "params": {"defType": "edismax", "qf": field}}
    if preset == "meilisearch":
        return {"q": "$query", "limit": "$k", "showRankingScore": True}
    if preset == "qdrant":
        payload: Any = [id_path[1]] if len(id_path) > 1 and id_path[0] == "payload" else False
        body: dict[str, Any] = {"query": "$vector", "limit": "$k", "with_payload": payload}
        return {**body, "using": field} if field else body
    if preset == "pinecone":
        metadata = len(id_path) > 1 and id_path[0] == "metadata"
        body = {"vector": "$vector", "topK": "$k", "includeMetadata": metadata, "includeValues": False}
        return {**body, "namespace": options["namespace"]} if "namespace" in options else body
    if preset == "milvus":
        body = {"collectionName": options["collection"], "data": ["$vector"], "annsField": field, "limit": "$k"}
        extra = sorted({p[0] for p in (id_path, score_path)} - {"id", "distance"})
        return {**body, "outputFields": extra} if extra else body
    if preset == "weaviate":
        selection = _graphql_selection([id_path, score_path])
        search = f"{options['collection']}(nearVector: {{vector: $vector}}, limit: $k)"
        return {"query": f"{{ Get {{ {search} {{ {selection} }} }} }}"}
    return {"query": "$query", "k": "$k"}


def _graphql_selection(paths: list[tuple[str, ...]]) -> str:
    """GraphQL fields selecting ``paths``: ``doc_id _additional { distance }``."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for part in path:
            node = node.setdefault(part, {})

    def render(node: dict[str, Any]) -> str:
        return " ".join(f"{k} {{ {render(v)} }}" if v else k for k, v in node.items())

    return render(tree)
