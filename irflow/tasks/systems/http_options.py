"""Options of ``http:<url>`` systems: the request a service gets, where the hits are in its answer, presets.

Pure (no network): :func:`normalize` checks a spec's options and gives their canonical form
(defaults left out, sorted), :func:`resolve` the typed settings a search uses. Default protocol::

    POST <url>   {"query": "<text>", "k": <depth>}   ->   {"hits": [{"id": "<doc id>", "score": <number>}, ...]}

``template`` is a JSON request body in which a string value ``"$query"`` becomes the query text, ``"$k"``
the depth (a number) and ``"$vector"`` the query's vector, embedded by irflow with ``model``; inside a
longer string (a GraphQL query) each becomes its JSON text. ``hits`` is the dotted path to the list of
hits in the answer, ``id`` and ``score`` the paths inside one hit (``hits.hits``, ``_id``, ``_score`` for
Elasticsearch); ``scores=distance`` when lower is better. Presets: :mod:`.http_presets`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.core.urls import CredentialsInUrlError, refuse_credentials
from irflow.tasks.systems.http_presets import PRESETS, VECTOR_PRESETS, check_preset, preset_defaults, preset_template

DEFAULTS = {
    "preset": "default",
    "timeout": "30",
    "concurrency": "4",
    "retries": "4",
    "load": "1:4:16",
    "auth_header": "Authorization",
}
OPTIONS = (
    *("preset", "template", "hits", "id", "score", "scores", "field", "model", "collection", "namespace"),
    *("auth_env", "auth_header", "auth_scheme"),
    *("timeout", "concurrency", "retries", "load"),
)
HTTP_HELP = (
    f'http options: preset={"|".join(PRESETS)}, template (JSON body; "$query", "$k" and "$vector" '
    "replaced), hits/id/score (dotted paths in the answer), scores (similarity, or distance: lower is better), "
    "model (embeds $vector: a model name or dense(...):<model>), collection (milvus, weaviate), namespace "
    "(pinecone), field (text field of elasticsearch/opensearch/solr, default text; vector field of milvus, "
    "default vector; named vector of qdrant), auth_env (environment variable holding the token), "
    "auth_header (default Authorization; pinecone Api-Key), auth_scheme (default Bearer for Authorization, "
    "else none), timeout (s, default 30), concurrency (parallel requests of a batch, default 4), retries (on "
    "429/5xx, default 4), load (concurrency levels of the load curve, default 1:4:16; none to skip)"
)
_TOKEN = re.compile(r"\$(query|k|vector)(?![A-Za-z0-9_])")


@dataclass(frozen=True)
class HttpOptions:
    """Typed settings of one ``http:`` system."""

    template: Any
    hits: tuple[str, ...]
    id: tuple[str, ...]
    score: tuple[str, ...]
    distance: bool  # scores=distance: lower is better (irflow ranks by the negated value)
    model: str | None  # the dense spec that embeds $vector (canonical string)
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
    found = placeholders(body)
    if not found & {"$query", "$vector"}:
        raise _fail(
            f'option template={value!r} must contain the string "$query" (replaced by the query text) or '
            '"$vector" (replaced by its vector)'
        )
    return body


def placeholders(body: Any) -> set[str]:
    """The placeholders (``$query``, ``$k``, ``$vector``) a request body uses, alone or inside a string."""
    if isinstance(body, dict):
        return {p for v in body.values() for p in placeholders(v)}
    if isinstance(body, list):
        return {p for v in body for p in placeholders(v)}
    return {f"${m}" for m in _TOKEN.findall(body)} if isinstance(body, str) else set()


def _model(value: str) -> str:
    """The canonical form of ``model=``: the resolved model name, or ``dense(<options>):<model>`` when it
    carries encoding options; the index options of a dense spec do not apply (the service searches)."""
    from irflow.tasks.systems.specs import DenseSpec, parse_system

    text = value.strip()
    try:
        spec = parse_system(text) if re.match(r"dense\s*[(:]", text) else DenseSpec(model=text)
    except (InputError, UnknownNameError) as exc:
        raise _fail(f"option model={value!r}: {str(exc).splitlines()[0]}") from None
    if not isinstance(spec, DenseSpec):
        raise _fail(f"option model={value!r} must be a model name or a dense spec such as dense:minilm")
    if spec.index != "flat" or spec.index_params:
        raise _fail(f"option model={value!r}: index options do not apply (the service does the search)")
    return spec.model if spec == DenseSpec(model=spec.model) else str(spec)


def dense_spec(model: str) -> Any:
    """The ``DenseSpec`` of a canonical ``model`` option (the model, prompts and encoding options)."""
    from irflow.tasks.systems.specs import DenseSpec, parse_system

    return parse_system(model) if re.match(r"dense\s*[(:]", model) else DenseSpec(model=model)


def normalize(options: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """Check ``options`` of an ``http:`` spec; their canonical form: sorted, normalised, defaults left out."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise _fail(f"unknown http option {unknown[0]!r}; valid: {', '.join(OPTIONS)}", UnknownNameError)
    opts = {k: str(v).strip() for k, v in options.items()}
    preset = opts.get("preset", "default")
    if preset not in PRESETS:
        raise _fail(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}", UnknownNameError)
    problem = check_preset(preset, opts)
    if problem:
        raise _fail(problem)
    if "template" in opts:
        opts["template"] = json.dumps(_template(opts["template"]), separators=(",", ":"), ensure_ascii=False)
    for name in ("hits", "id", "score"):
        if name in opts:
            _path(name, opts[name])
    if opts.get("scores", "similarity") not in ("similarity", "distance"):
        raise _fail(f"option scores={opts['scores']!r} must be similarity (higher is better) or distance")
    vector = "$vector" in placeholders(json.loads(opts["template"])) if "template" in opts else preset in VECTOR_PRESETS
    if "model" in opts:
        if not vector:
            raise _fail('option model applies when the request carries the query vector ("$vector")')
        opts["model"] = _model(opts["model"])
    elif vector:
        raise _fail(
            f"{'preset=' + preset if 'template' not in opts else 'a template with $vector'} needs model=<the "
            "model whose vectors the index holds>, e.g. model=minilm"
        )
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
    defaults = {**DEFAULTS, **preset_defaults(preset, opts)}
    return tuple(sorted((k, v) for k, v in opts.items() if defaults.get(k) != v))


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
    merged = {**DEFAULTS, **preset_defaults(preset, opts), **opts}
    id_path, score_path = _path("id", merged["id"]), _path("score", merged["score"])
    template = (
        json.loads(merged["template"]) if "template" in opts else preset_template(preset, merged, id_path, score_path)
    )
    scheme = merged["auth_scheme"]
    return HttpOptions(
        template=template,
        hits=_path("hits", merged["hits"]),
        id=id_path,
        score=score_path,
        distance=merged["scores"] == "distance",
        model=opts.get("model"),
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
        raise _fail(f"bad URL {redact(url)!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail(f"bad URL {redact(url)!r}: expected http[s]://host[:port]/path")
    try:
        return refuse_credentials(url, "http: system", "the variable auth_env=VARIABLE names")
    except CredentialsInUrlError as err:
        raise _fail(str(err), CredentialsInUrlError) from None


def fill(template: Any, query: str, k: int, vector: list[float] | None = None) -> Any:
    """The request body: ``template`` with the string values ``"$query"``, ``"$k"`` and ``"$vector"``
    replaced by the query text, the depth and the query vector; inside a longer string (a GraphQL query)
    each is replaced by its JSON text (a quoted string, a number, a list of numbers)."""
    if isinstance(template, dict):
        return {key: fill(value, query, k, vector) for key, value in template.items()}
    if isinstance(template, list):
        return [fill(value, query, k, vector) for value in template]
    if not isinstance(template, str) or "$" not in template:
        return template
    values = {"$query": query, "$k": k, "$vector": vector}
    if template in values:
        return values[template]
    return _TOKEN.sub(lambda m: json.dumps(values[m.group(0)], ensure_ascii=False), template)
