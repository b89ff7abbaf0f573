"""Options of ``http:<url>`` systems: the request a service gets, where the hits are in its answer, presets.

Pure (no network): :func:`normalize` checks a spec's options and gives their canonical form
(defaults left out, sorted), :func:`resolve` the typed settings a search uses. Default protocol::

    POST <url>   {"query": "<text>", "k": <depth>}   ->   {"hits": [{"id": "<doc id>", "score": <number>}, ...]}

``template`` is a JSON request body in which a string value ``"$query"`` becomes the query text and
``"$k"`` the depth (as a number); ``hits`` is the dotted path to the list of hits in the answer,
``id`` and ``score`` the paths inside one hit (``hits.hits``, ``_id``, ``_score`` for Elasticsearch).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from irflow.tasks.schema import InputError, UnknownNameError

PRESETS = ("default", "elasticsearch", "opensearch", "solr", "meilisearch")
_ANSWER = {  # preset -> (hits path, id path, score path)
    "default": ("hits", "id", "score"),
    "elasticsearch": ("hits.hits", "_id", "_score"),
    "opensearch": ("hits.hits", "_id", "_score"),
    "solr": ("response.docs", "id", "score"),
    "meilisearch": ("hits", "id", "_rankingScore"),
}
_FIELD_PRESETS = ("elasticsearch", "opensearch", "solr")  # take field= (the text field searched)
DEFAULTS = {
    "preset": "default",
    "timeout": "30",
    "concurrency": "4",
    "retries": "4",
    "load": "1:4:16",
    "auth_header": "Authorization",
}
OPTIONS = (
    *("preset", "template", "hits", "id", "score", "field"),
    *("auth_env", "auth_header", "auth_scheme"),
    *("timeout", "concurrency", "retries", "load"),
)
HTTP_HELP = (
    'http options: preset=default|elasticsearch|opensearch|solr|meilisearch, template (JSON body, "$query" '
    'and "$k" replaced), hits/id/score (dotted paths in the answer), field (text field of the '
    "elasticsearch/opensearch/solr presets, default text), auth_env (environment variable holding the token), "
    "auth_header (default Authorization), auth_scheme (default Bearer for Authorization, else none), "
    "timeout (s, default 30), concurrency (parallel requests of a batch, default 4), retries (on 429/5xx, "
    "default 4), load (concurrency levels of the load curve, default 1:4:16; none to skip)"
)


@dataclass(frozen=True)
class HttpOptions:
    """Typed settings of one ``http:`` system."""

    template: Any
    hits: tuple[str, ...]
    id: tuple[str, ...]
    score: tuple[str, ...]
    auth_env: str | None
    auth_header: str
    auth_scheme: str | None
    timeout: float
    concurrency: int
    retries: int
    load: tuple[int, ...]


def _fail(problem: str, cls: type[Exception] = InputError) -> Exception:
    return cls(f"{problem}\n{HTTP_HELP}")


def _path(name: str, value: str) -> tuple[str, ...]:
    parts = tuple(value.split("."))
    if not value or any(not p for p in parts):
        raise _fail(f"option {name}={value!r} must be a dotted path such as hits.hits or _source.doc_id")
    return parts


def _int(name: str, value: str, minimum: int) -> int:
    if not re.fullmatch(r"\+?\d+", value.strip()) or int(value) < minimum:
        raise _fail(f"option {name}={value!r} must be an integer >= {minimum}")
    return int(value)


def _template(value: str) -> Any:
    try:
        body = json.loads(value)
    except ValueError as exc:
        raise _fail(f"option template={value!r} is not JSON: {exc}") from None
    found = set(_placeholders(body))
    if "$query" not in found:
        raise _fail(f'option template={value!r} must contain the string "$query" (replaced by the query text)')
    return body


def _placeholders(body: Any) -> list[str]:
    if isinstance(body, dict):
        return [p for v in body.values() for p in _placeholders(v)]
    if isinstance(body, list):
        return [p for v in body for p in _placeholders(v)]
    return [body] if body in ("$query", "$k") else []


def preset_template(preset: str, field: str) -> Any:
    """The request body of a preset (placeholders ``$query``, ``$k`` not yet filled in)."""
    if preset in ("elasticsearch", "opensearch"):
        return {"query": {"match": {field: "$query"}}, "size": "$k", "_source": False}
    if preset == "solr":  # the JSON Request API (POST <core>/query); edismax tolerates free text
        return {"query": "$query", "limit": "$k", "fields": "id,score", "params": {"defType": "edismax", "qf": field}}
    if preset == "meilisearch":
        return {"q": "$query", "limit": "$k", "showRankingScore": True}
    return {"query": "$query", "k": "$k"}


def normalize(options: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """Check ``options`` of an ``http:`` spec; their canonical form: sorted, normalised, defaults left out."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise _fail(f"unknown http option {unknown[0]!r}; valid: {', '.join(OPTIONS)}", UnknownNameError)
    opts = {k: str(v).strip() for k, v in options.items()}
    preset = opts.get("preset", "default")
    if preset not in PRESETS:
        raise _fail(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}", UnknownNameError)
    if "field" in opts and preset not in _FIELD_PRESETS:
        raise _fail(f"option field applies to the presets {', '.join(_FIELD_PRESETS)} (a template names its own)")
    if "template" in opts:
        opts["template"] = json.dumps(_template(opts["template"]), separators=(",", ":"), ensure_ascii=False)
    for name in ("hits", "id", "score"):
        if name in opts:
            _path(name, opts[name])
    if "auth_env" in opts and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", opts["auth_env"]):
        raise _fail(
            f"option auth_env={opts['auth_env']!r} must name an environment variable (the token's value "
            "never goes into a spec)"
        )
    if "auth_header" in opts and not re.fullmatch(r"[A-Za-z0-9-]+", opts["auth_header"]):
        raise _fail(f"option auth_header={opts['auth_header']!r} must be an HTTP header name")
    if ("auth_header" in opts or "auth_scheme" in opts) and "auth_env" not in opts:
        raise _fail("auth_header and auth_scheme need auth_env (the environment variable holding the token)")
    if "auth_scheme" in opts and not re.fullmatch(r"[A-Za-z0-9-]+", opts["auth_scheme"]):
        raise _fail(f"option auth_scheme={opts['auth_scheme']!r} must be a word such as Bearer, ApiKey or none")
    if "timeout" in opts:
        try:
            timeout = float(opts["timeout"])
        except ValueError:
            timeout = math.nan
        if not math.isfinite(timeout) or timeout <= 0:
            raise _fail(f"option timeout={opts['timeout']!r} must be a number of seconds > 0")
        opts["timeout"] = repr(timeout).removesuffix(".0")
    for name, minimum in (("concurrency", 1), ("retries", 0)):
        if name in opts:
            opts[name] = str(_int(name, opts[name], minimum))
    if "load" in opts:
        opts["load"] = "none" if opts["load"].lower() == "none" else ":".join(map(str, _levels(opts["load"])))
    defaults = {**DEFAULTS, **_preset_defaults(preset, opts.get("auth_header", "Authorization"))}
    return tuple(sorted((k, v) for k, v in opts.items() if defaults.get(k) != v))


def _preset_defaults(preset: str, header: str) -> dict[str, str]:
    hits, id_, score = _ANSWER[preset]
    out = {"hits": hits, "id": id_, "score": score, "auth_scheme": "Bearer" if header == "Authorization" else "none"}
    if preset in _FIELD_PRESETS:
        out["field"] = "text"
    return out


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(":"))
    except ValueError:
        levels = ()
    if not levels or any(level < 1 for level in levels) or list(levels) != sorted(set(levels)):
        raise _fail(f"option load={text!r} must be increasing concurrency levels such as 1:4:16 (or none)")
    return levels


def resolve(options: tuple[tuple[str, str], ...]) -> HttpOptions:
    """The typed settings of canonical ``options`` (from :func:`normalize`)."""
    opts = dict(options)
    preset = opts.get("preset", "default")
    merged = {**DEFAULTS, **_preset_defaults(preset, opts.get("auth_header", "Authorization")), **opts}
    template = (
        json.loads(merged["template"]) if "template" in opts else preset_template(preset, merged.get("field", ""))
    )
    scheme = merged["auth_scheme"]
    return HttpOptions(
        template=template,
        hits=_path("hits", merged["hits"]),
        id=_path("id", merged["id"]),
        score=_path("score", merged["score"]),
        auth_env=opts.get("auth_env"),
        auth_header=merged["auth_header"],
        auth_scheme=None if scheme.lower() == "none" else scheme,
        timeout=float(merged["timeout"]),
        concurrency=int(merged["concurrency"]),
        retries=int(merged["retries"]),
        load=() if merged["load"] == "none" else _levels(merged["load"]),
    )


def check_url(url: str) -> str:
    """An ``http(s)://host[:port]/path`` URL without credentials (those come from ``auth_env``)."""
    from urllib.parse import urlsplit

    url = url.strip()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise _fail(f"bad URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail(f"bad URL {url!r}: expected http[s]://host[:port]/path")
    if parts.username is not None or parts.password is not None:
        raise _fail(
            "a URL must not carry credentials (they would be tracked with the spec): put the token in an "
            "environment variable and name it with auth_env=VARIABLE"
        )
    return url


def fill(template: Any, query: str, k: int) -> Any:
    """The request body: ``template`` with ``"$query"`` and ``"$k"`` string values replaced."""
    if isinstance(template, dict):
        return {key: fill(value, query, k) for key, value in template.items()}
    if isinstance(template, list):
        return [fill(value, query, k) for value in template]
    if template == "$query":
        return query
    if template == "$k":
        return k
    return template
