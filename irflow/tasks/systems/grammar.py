"""The grammar every system spec shares: errors with the spec help, option values, quoting, scanning,
the base class :class:`Spec` (canonical string, slug), and the table of the kinds parsed elsewhere.

Both :mod:`~irflow.tasks.systems.specs` (irflow's own kinds) and :mod:`~irflow.tasks.systems.external`
(run files, Python retrievers, services) build on this module; neither imports the other's internals.
External kinds register their parser in :data:`KIND_PARSERS` on import (the package's face imports both).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.systems.plugins import plugin_names

if TYPE_CHECKING:
    from irflow.tasks.systems.specs import SystemSpec

MODEL_ALIASES: dict[str, str] = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2",
    "bge-small": "BAAI/bge-small-en-v1.5",
    "ms-marco-minilm": "cross-encoder/ms-marco-MiniLM-L-6-v2",
}
KINDS = ("bm25", "dense", "hybrid", "rerank", "run", "python", "http", "memory")  # python: the built-in plugin kind

SYSTEM_HELP = """\
valid system specs:
  bm25                              BM25: bm25s, Lucene scoring, k1=0.9, b=0.4, English stopwords, Snowball stemmer
  bm25:k1=1.2,b=0.75                options: k1, b, backend=bm25s|rank_bm25,
                                    method=lucene|robertson|atire|bm25l|bm25+ (rank_bm25: okapi|bm25l|bm25+),
                                    stemmer=snowball|none, stopwords=en|none
  dense:<model>                     dense:minilm, dense:sentence-transformers/all-MiniLM-L6-v2, dense:/models/e5
  dense(<options>):<model>          dense(max_seq_length=128,index=hnsw,M=32):minilm; options: max_seq_length,
                                    query_prompt, doc_prompt, batch_size, index=flat|hnsw|ivf|ivfpq|blocks and its
                                    parameters (hnsw: M, efConstruction, efSearch; ivf: nlist, nprobe;
                                    ivfpq: nlist, nprobe, m, nbits; chroma: M, efConstruction, efSearch, a Chroma
                                    server at IRFLOW_CHROMA_URL; blocks: block_size, exact search in blocks of that
                                    many rows); quote values with spaces: query_prompt="query: "
  dense(<options>):openai:<model>   an OpenAI-compatible /embeddings API (OPENAI_BASE_URL, OPENAI_API_KEY), e.g.
                                    dense:openai:text-embedding-3-small; options: base_url, dimensions, key_env,
                                    batch_size (texts per request), batch_tokens, concurrency, rpm, tpm, price
                                    (USD per 1M tokens), timeout, retries, and the index options above
  hybrid:<system>+<system>[+...]    reciprocal-rank fusion, e.g. hybrid:bm25+dense:minilm
  hybrid(k=60,weights=2:1,depth=1000):bm25+dense:minilm
                                    options: k (RRF constant), weights (one per member), depth (first-stage depth)
  rerank:<model>@<system>           re-score the top 100 of any first stage:
                                    rerank:cross-encoder/ms-marco-MiniLM-L-6-v2@bm25
  rerank(top=50):<model>@<system>   options: top (how many first-stage hits are re-scored)
  dense(backend=onnx,quantize=int8):minilm, rerank(device=cuda,precision=fp16):<model>@bm25
                                    how a local model runs (dense and rerank): backend=torch|onnx|openvino,
                                    quantize=int8 (onnx/openvino), device=cpu|cuda|mps (default: best available),
                                    precision=fp32|fp16|bf16 (fp16/bf16: torch on cuda/mps, or openvino)
  (<system>)                        grouping: hybrid:(hybrid:bm25+dense:minilm)+dense:mpnet
  run:<path>                        a ranking made elsewhere: TREC run (6 columns), ranx/ir_measures JSON
                                    {qid: {docid: score}} or Parquet (query_id, doc_id, score); identity = content
                                    hash: run(sha256=<16 hex>):<path> (checked against the file when given)
  python(<options>):<module>:<callable>
                                    a Python retriever: callable(**options) -> object with search(queries, k)
                                    and optionally index(corpus), e.g. python(k1=2):mypkg.search:BM25Plus;
                                    other kinds from installed packages (entry points irflow.systems): <kind>:<target>
  memory:<label>                    a run or a search callable given in Python to irflow.evaluate (result folders
                                    name it so; on the command line, write the run to a file: run:<path>)
  http(<options>):<url>             a live search service: POST {"query": text, "k": depth} ->
                                    {"hits": [{"id": ..., "score": ...}]}; options: preset=elasticsearch|opensearch|
                                    solr|meilisearch|qdrant|pinecone|milvus|weaviate, template, hits, id, score,
                                    scores=similarity|distance, model (embeds "$vector" for the vector databases),
                                    collection, namespace, field, auth_env, auth_header, auth_scheme, timeout,
                                    concurrency, retries, load=1:4:16
model aliases: """ + ", ".join(f"{k} = {v}" for k, v in MODEL_ALIASES.items())


def spec_error(problem: str, cls: type[Exception] = InputError) -> Exception:
    return cls(f"{problem}\n{SYSTEM_HELP}")


def positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not re.fullmatch(r"\s*\+?\d+\s*", str(value)) or int(str(value)) < minimum:
        raise spec_error(f"option {name}={value!r} must be an integer >= {minimum}")
    return int(str(value))


def finite_float(name: str, value: object, minimum: float = 0.0) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < minimum or isinstance(value, bool):
        raise spec_error(f"option {name}={value!r} must be a finite number >= {minimum:g}")
    return number


def format_number(x: float) -> str:
    """One spelling per number: 1.0 -> '1', 0.90 -> '0.9', 1e-05 -> '1e-05'."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


class Spec:
    """Shared behaviour: the canonical string, a filesystem-safe slug, and field normalisation."""

    kind: ClassVar[str]

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def canonical(self) -> str:
        """The canonical spec string; every kind writes its own."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.canonical()

    @property
    def name(self) -> str:
        """The canonical spec string (run name, cache key)."""
        return str(self)

    @property
    def slug(self) -> str:
        """Filesystem-safe, unique: unsafe characters become ``_`` and, if any did, a digest is appended."""
        canonical = str(self)
        readable = re.sub(r"[^A-Za-z0-9.,=+@-]+", "_", canonical).strip("_")[:96]
        if readable == canonical:
            return readable
        return f"{readable}-{hashlib.sha256(canonical.encode()).hexdigest()[:8]}"


def unknown_kind(kind: str) -> Exception:
    plugins = ", ".join(plugin_names()) or "(none installed)"
    return spec_error(
        f"unknown system kind {kind!r}; valid kinds: {', '.join(KINDS)}; plugin kinds (entry points "
        f"irflow.systems): {plugins}",
        UnknownNameError,
    )


def check_choice(name: str, value: object, valid: tuple[str, ...], context: str = "") -> str:
    if value not in valid:
        where = f" for {context}" if context else ""
        raise spec_error(f"unknown {name} {value!r}{where}; valid: {', '.join(valid) or '(none)'}", UnknownNameError)
    return str(value)


def quote_value(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9._/:+-]+", value) else json.dumps(value, ensure_ascii=False)


def format_body(value: str) -> str:
    """A path, target or URL as written in a spec: bare when safe, else a JSON string."""
    return value if re.fullmatch(r"[A-Za-z0-9._/:~%?&=,#@-]+", value) else json.dumps(value, ensure_ascii=False)


def format_options(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f"{k}={quote_value(v)}" for k, v in pairs)


def format_paren(pairs: list[tuple[str, str]]) -> str:
    return f"({format_options(pairs)})" if pairs else ""


_MEMBER_START = re.compile(r"\s*(\(|[A-Za-z][A-Za-z0-9_]*\s*(?:[(:+]|$))")  # a kind name starts a member


def scan(text: str, start: int, stop_at: str) -> int:
    """Index of the first character in ``stop_at`` at depth 0 outside JSON strings, or len(text)."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == '"':
            try:
                _, i = json.JSONDecoder().raw_decode(text, i)
            except ValueError:
                raise spec_error(f"unterminated quoted value at character {i + 1} of {text!r}") from None
            continue
        if depth == 0 and c in stop_at:
            return i
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            raise spec_error(f"unbalanced ')' at character {i + 1} of {text!r}")
        i += 1
    if depth:
        raise spec_error(f"unbalanced '(' in {text!r}")
    return i


def split_members(text: str) -> list[str]:
    """Split a hybrid body at each top-level '+' followed by a kind name or '(' (so ``method=bm25+`` is safe)."""
    parts, start, i = [], 0, 0
    while (i := scan(text, i, "+")) < len(text):
        if _MEMBER_START.match(text, i + 1):
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return [*parts, text[start:]]


def parse_options(text: str) -> dict[str, str]:
    options: dict[str, str] = {}
    i = 0
    while i < len(text):
        end = scan(text, i, ",")
        key, eq, value = text[i:end].partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise spec_error(f"option {text[i:end]!r} is not key=value")
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                raise spec_error(f"bad quoted value {value}: write a JSON string") from None
        if key in options:
            raise spec_error(f"option {key!r} given twice")
        options[key] = value
        i = end + 1
    return options


def check_options(options: dict[str, str], allowed: tuple[str, ...], kind: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise spec_error(f"unknown {kind} option {unknown[0]!r}; valid: {', '.join(allowed)}", UnknownNameError)


def parse_body(text: str) -> str:
    """The body after ``kind[(options)]:`` of run, plugin and http specs: bare text or one JSON string."""
    text = text.strip()
    if not text.startswith('"'):
        return text
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        raise spec_error(f"unterminated quoted value in {text!r}") from None
    if end != len(text) or not isinstance(value, str):
        raise spec_error(f"unexpected text after the quoted value in {text!r}")
    return value


# kind -> parser(kind, options, body, base) of the kinds defined outside ``specs`` (``run``, ``http``, and
# ``plugin`` for every entry-point kind); filled by irflow.tasks.systems.external when it is imported.
KindParser = Callable[[str, dict[str, str], str, "str | os.PathLike[str] | None"], "SystemSpec"]
KIND_PARSERS: dict[str, KindParser] = {}
