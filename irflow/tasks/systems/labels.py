"""A readable default label for every kind of system spec (the report, the terminal, run names).

The canonical spec string is exact but long: ``http:http://127.0.0.1:8080/search``,
``run(sha256=beefa97ce3527e82):/home/me/runs/bm25s_plain.trec``,
``dense(base_url=http://127.0.0.1:8000/v1):openai:text-embedding-3-small``. A label keeps what tells
systems apart and drops the rest::

    bm25:k1=1.2,b=0.75                      bm25 with its non-default options
    dense:all-MiniLM-L6-v2                  the model's last path component (options kept, long ones cut)
    dense:text-embedding-3-small            an API model: the model, not the provider's endpoint or key
    hybrid:bm25+dense:all-MiniLM-L6-v2      members by their labels
    rerank:ms-marco-MiniLM-L-6-v2@bm25
    http:127.0.0.1:8080/search              host:port/path (no scheme, no user or password, no query)
    run:bm25s_plain.trec                    the file name
    python:mypkg.search:BM25Plus            the target

Two systems with the same label are told apart by their specs (:func:`labels_of`, which
``report.plots.short_labels`` names a result folder's systems with).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields
from pathlib import PurePath
from urllib.parse import urlsplit

from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.systems.api_options import PROVIDER, is_api_model
from irflow.tasks.systems.external import HttpSpec, MemorySpec, PluginSpec, RunSpec
from irflow.tasks.systems.grammar import Spec, format_number, format_paren, split_members
from irflow.tasks.systems.specs import BM25Spec, DenseSpec, HybridSpec, RerankSpec, as_spec

MAX_OPTION_CHARS = 24  # a longer option value (a prompt, a JSON path) is cut with "…"


def default_label(system: str | Spec) -> str:
    """The readable label of ``system`` (a spec or its string; ``<folder label>/<spec>`` as combined result
    folders name systems); a string that no longer parses (a plugin gone since the run) keeps its text."""
    try:
        spec = as_spec(system)  # type: ignore[arg-type]
    except (IrflowError, TypeError):
        head, _, rest = str(system).partition("/")  # "<folder label>/<spec>" of combined result folders
        return f"{head}/{default_label(rest)}" if rest else redact(str(system))
    return _label(spec)


def labels_of(systems: Sequence[str], given: Mapping[str, str] | None = None) -> dict[str, str]:
    """spec -> label for ``systems``: the ``given`` label of a system (``--label``, an experiment file), else
    its :func:`default_label`; the full spec wherever two systems would otherwise share a label."""
    given = given or {}
    short = {s: given.get(s) or default_label(s) for s in systems}
    counts = Counter(short.values())
    return {s: (label if counts[label] == 1 else s) for s, label in short.items()}


def model_label(model: str) -> str:
    """``sentence-transformers/all-MiniLM-L6-v2`` -> ``all-MiniLM-L6-v2``; ``openai:text-embedding-3-small``
    -> ``text-embedding-3-small``; a local folder -> its name."""
    if is_api_model(model):
        return model.removeprefix(f"{PROVIDER}:")
    return PurePath(model.rstrip("/")).name or model


def _label(spec: Spec) -> str:
    if isinstance(spec, BM25Spec):
        return str(spec)
    if isinstance(spec, DenseSpec):
        return f"dense{format_paren(_options(spec, ('model', 'api')))}:{model_label(spec.model)}"
    if isinstance(spec, HybridSpec):
        pairs = [] if spec.k == 60 else [("k", str(spec.k))]
        if any(w != 1.0 for w in spec.weights):
            pairs.append(("weights", ":".join(format_number(w) for w in spec.weights)))
        members = [_label(s) for s in spec.systems]
        members = [f"({m})" if len(split_members(m)) > 1 else m for m in members]
        return f"hybrid{format_paren(pairs)}:" + "+".join(members)
    if isinstance(spec, RerankSpec):
        pairs = _options(spec, ("model", "first_stage"))
        return f"rerank{format_paren(pairs)}:{model_label(spec.model)}@{_label(spec.first_stage)}"
    if isinstance(spec, HttpSpec):
        url = urlsplit(spec.url)
        host = url.hostname or ""
        where = f"[{host}]" if ":" in host else host
        where += f":{url.port}" if url.port else ""
        return f"http{format_paren(_cut(list(spec.options)))}:{where}{url.path.rstrip('/')}"
    if isinstance(spec, RunSpec):
        return f"run:{PurePath(spec.path).name}"
    if isinstance(spec, MemorySpec):
        return spec.label
    if isinstance(spec, PluginSpec):
        return spec.plugin + format_paren(_cut(list(spec.options))) + (f":{spec.target}" if spec.target else "")
    return str(spec)


def _options(spec: Spec, skip: tuple[str, ...]) -> list[tuple[str, str]]:
    """The spec's options that differ from their defaults, as ``(name, text)`` (index parameters spread)."""
    pairs: list[tuple[str, str]] = []
    for f in fields(spec):  # type: ignore[arg-type]
        value = getattr(spec, f.name)
        if f.name in skip or (f.default is not MISSING and value == f.default):
            continue
        if isinstance(value, tuple):
            pairs += [(str(k), str(v)) for k, v in value]
        else:
            pairs.append((f.name, format_number(value) if isinstance(value, float) else str(value)))
    return _cut(pairs)


def _cut(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v if len(v) <= MAX_OPTION_CHARS else v[: MAX_OPTION_CHARS - 1] + "…") for k, v in pairs]


__all__ = ["default_label", "labels_of", "model_label"]
