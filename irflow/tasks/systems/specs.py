"""System specs: the short strings that name a retrieval configuration, parsed into frozen dataclasses.

A spec's canonical string (``str(spec)``) is the run name and the cache key, so it is unique:
defaults are left out, numbers are written one way, aliases are resolved, and
``parse_system(str(spec)) == spec`` for every spec. Grammar::

    system  := bm25 | dense | hybrid | rerank | run | plugin | http | "(" system ")"
    bm25    := "bm25" [":" options]                   bm25   bm25:k1=1.2,b=0.75
    dense   := "dense" ["(" options ")"] ":" model    dense:minilm   dense(index=hnsw,M=32):minilm
                                                      dense(dimensions=256):openai:text-embedding-3-small
    hybrid  := "hybrid" ["(" options ")"] ":" system "+" system ["+" system]...
                                                      hybrid:bm25+dense:minilm
                                                      hybrid(k=30,weights=2:1):bm25+dense:minilm
    rerank  := "rerank" ["(" options ")"] ":" model "@" system
                                                      rerank:cross-encoder/ms-marco-MiniLM-L-6-v2@bm25
                                                      rerank(top=50):minilm@hybrid:bm25+dense:minilm
    run     := "run" ["(" "sha256=" hex ")"] ":" path   run:runs/bm25.trec   (TREC, ranx JSON or Parquet)
    plugin  := name ["(" options ")"] [":" target]    python(k1=2):mypkg.search:BM25Plus   mykind:target
    http    := "http" ["(" options ")"] ":" url       http:http://127.0.0.1:8080/search
    options := key "=" value ["," key "=" value]...   a value with , ( ) = " or spaces is a JSON string

Options sit in parentheses between the kind and its colon, before the model, so a model name
(Hugging Face name, local directory or alias) never has to be escaped; ``bm25`` keeps the
design's ``bm25:k1=..`` spelling (``bm25(k1=..)`` is accepted too). A hybrid member that is
itself a hybrid, or a rerank over one, is written in parentheses:
``hybrid:(hybrid:bm25+dense:minilm)+dense:mpnet``. Model names may not contain ``@``, nor ``+`` followed by
a word (inside a hybrid); aliases (``minilm``, ``mpnet``) resolve to the Hugging Face name, so
write ``./minilm`` for a local directory of that name.

Systems built elsewhere (``irflow.tasks.external``): a ``run:`` spec names its file by absolute path
and content hash (``run(sha256=<16 hex>):/abs/path``, computed from the file when left out), so a
changed file is a new system; a path, target or URL with characters other than
``A-Za-z0-9._/:~%?&=,#@-`` is written as a JSON string (``run:"/data/my runs/a+b.trec"``).
``python`` and the kinds of the ``irflow.systems`` entry-point group are :class:`PluginSpec`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, ClassVar, Union

from irflow.tasks.core.schema import InputError, UnknownNameError

if TYPE_CHECKING:
    from irflow.tasks.systems.external import HttpSpec, PluginSpec, RunSpec

MODEL_ALIASES: dict[str, str] = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2",
    "bge-small": "BAAI/bge-small-en-v1.5",
    "ms-marco-minilm": "cross-encoder/ms-marco-MiniLM-L-6-v2",
}
BM25_METHODS: dict[str, tuple[str, ...]] = {  # backend -> methods, the first is the default
    "bm25s": ("lucene", "robertson", "atire", "bm25l", "bm25+"),
    "rank_bm25": ("okapi", "bm25l", "bm25+"),
}
INDEX_PARAMS: dict[str, tuple[str, ...]] = {  # FAISS index kind -> the integer parameters it takes
    "flat": (),
    "hnsw": ("M", "efConstruction", "efSearch"),
    "ivf": ("nlist", "nprobe"),
    "ivfpq": ("nlist", "nprobe", "m", "nbits"),
    "chroma": ("M", "efConstruction", "efSearch"),  # a Chroma server's HNSW collection (IRFLOW_CHROMA_URL)
    "blocks": ("block_size",),  # exact search block by block, memory bounded (tasks.block_search)
}
KINDS = ("bm25", "dense", "hybrid", "rerank", "run", "python", "http")  # python: the built-in plugin kind
_BM25_OPTIONS = ("k1", "b", "backend", "method", "stemmer", "stopwords")
_DENSE_OPTIONS = ("max_seq_length", "query_prompt", "doc_prompt", "batch_size")  # besides index and its parameters
# How a local model runs (dense and rerank): inference backend, int8 quantisation, device, GPU precision.
ENCODER_OPTIONS = ("backend", "quantize", "device", "precision")
ENCODER_BACKENDS = ("torch", "onnx", "openvino")
QUANTIZATIONS = ("int8",)
DEVICES = ("cpu", "cuda", "mps")
PRECISIONS = ("fp32", "fp16", "bf16")

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
  http(<options>):<url>             a live search service: POST {"query": text, "k": depth} ->
                                    {"hits": [{"id": ..., "score": ...}]}; options: preset=elasticsearch|opensearch|
                                    solr|meilisearch|qdrant|pinecone|milvus|weaviate, template, hits, id, score,
                                    scores=similarity|distance, model (embeds "$vector" for the vector databases),
                                    collection, namespace, field, auth_env, auth_header, auth_scheme, timeout,
                                    concurrency, retries, load=1:4:16
model aliases: """ + ", ".join(f"{k} = {v}" for k, v in MODEL_ALIASES.items())


def _error(problem: str, cls: type[Exception] = InputError) -> Exception:
    return cls(f"{problem}\n{SYSTEM_HELP}")


def _resolve_model(model: str) -> str:
    model = str(model).strip()
    if not model or "@" in model:
        raise _error(f"bad model name {model!r}: it must be non-empty and contain no '@'")
    if "?" in model:
        raise _error(f"bad model name {model!r}: options go in parentheses, e.g. dense(max_seq_length=128):minilm")
    return MODEL_ALIASES.get(model, model.rstrip("/") or "/")


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not re.fullmatch(r"\s*\+?\d+\s*", str(value)) or int(str(value)) < minimum:
        raise _error(f"option {name}={value!r} must be an integer >= {minimum}")
    return int(str(value))


def _finite_float(name: str, value: object, minimum: float = 0.0) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < minimum or isinstance(value, bool):
        raise _error(f"option {name}={value!r} must be a finite number >= {minimum:g}")
    return number


def _num(x: float) -> str:
    """One spelling per number: 1.0 -> '1', 0.90 -> '0.9', 1e-05 -> '1e-05'."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


class _Spec:
    """Shared behaviour: the canonical string, a filesystem-safe slug, and field normalisation."""

    kind: ClassVar[str]

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def __str__(self) -> str:
        return format_system(self)  # type: ignore[arg-type]

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


@dataclass(frozen=True)
class BM25Spec(_Spec):
    """Sparse lexical retrieval over ``title + " " + text``. ``method=None`` means the backend's default."""

    k1: float = 0.9
    b: float = 0.4
    backend: str = "bm25s"
    method: str | None = None
    stemmer: str = "snowball"
    stopwords: str = "en"
    kind: ClassVar[str] = "bm25"

    def __post_init__(self) -> None:
        self._set("k1", _finite_float("k1", self.k1))
        self._set("b", _finite_float("b", self.b))
        if self.b > 1:
            raise _error(f"option b={self.b!r} must lie in [0, 1]")
        _choice("backend", self.backend, tuple(BM25_METHODS))
        methods = BM25_METHODS[self.backend]
        self._set("method", _choice("method", self.method or methods[0], methods, f"backend={self.backend}"))
        _choice("stemmer", self.stemmer, ("snowball", "none"))
        _choice("stopwords", self.stopwords, ("en", "none"))


@dataclass(frozen=True)
class DenseSpec(_Spec):
    """A bi-encoder first stage: a sentence-transformers model and a FAISS index over its vectors.

    ``model`` is a Hugging Face name or a local directory (aliases in ``MODEL_ALIASES`` are
    resolved here), or ``openai:<model>`` for an API model whose options (``api_embed.API_OPTIONS``)
    are held in ``api`` as sorted ``(key, value)`` pairs. ``index_params`` holds the index's integer
    parameters (``INDEX_PARAMS``) as sorted ``(key, str(int))`` pairs.
    """

    model: str
    max_seq_length: int | None = None
    query_prompt: str | None = None
    doc_prompt: str | None = None
    index: str = "flat"  # flat | hnsw | ivf | ivfpq | chroma
    index_params: tuple[tuple[str, str], ...] = ()
    batch_size: int = 32
    api: tuple[tuple[str, str], ...] = ()
    backend: str = "torch"
    quantize: str | None = None
    device: str | None = None  # None: the best available
    precision: str = "fp32"
    kind: ClassVar[str] = "dense"

    def __post_init__(self) -> None:
        from irflow.tasks.embed import api as api_embed

        self._set("model", _resolve_model(self.model))
        if api_embed.is_api_model(self.model):
            if not self.model.removeprefix("openai:").strip():
                raise _error("dense:openai:<model> needs the provider's model name, e.g. text-embedding-3-small")
            if self.max_seq_length is not None:
                raise _error("max_seq_length applies to local models; an API model truncates on its side")
            try:
                self._set("api", api_embed.normalise_options(self.api))
            except InputError as err:
                raise _error(str(err)) from None
        elif self.api:
            raise _error(f"options {', '.join(k for k, _ in self.api)} apply to API models: dense(...):openai:<model>")
        _check_encoder(self)
        if api_embed.is_api_model(self.model) and (self.backend, self.quantize, self.device) != ("torch", None, None):
            raise _error("backend, quantize and device apply to local models, not to an API model")
        if self.max_seq_length is not None:
            self._set("max_seq_length", _positive_int("max_seq_length", self.max_seq_length))
        self._set("batch_size", _positive_int("batch_size", self.batch_size))
        _choice("index", self.index, tuple(INDEX_PARAMS))
        params = dict(self.index_params)
        if len(params) != len(self.index_params):
            raise _error(f"repeated index parameter in {self.index_params!r}")
        for key in params:
            _choice("index parameter", key, INDEX_PARAMS[self.index], f"index={self.index}")
        self._set("index_params", tuple(sorted((k, str(_positive_int(k, v))) for k, v in params.items())))


@dataclass(frozen=True)
class HybridSpec(_Spec):
    """Reciprocal-rank fusion (Cormack et al. 2009): score(d) = sum_s w_s / (k + rank_s(d)).

    ``depth`` is how deep each member is retrieved; ``None`` means max(run depth, 100). A member of
    weight 0 contributes nothing, not even its candidates; at least one weight must be positive.
    """

    systems: tuple[SystemSpec, ...]
    k: int = 60
    weights: tuple[float, ...] = ()
    depth: int | None = None
    kind: ClassVar[str] = "hybrid"

    def __post_init__(self) -> None:
        self._set("systems", tuple(self.systems))
        if len(self.systems) < 2 or not all(isinstance(s, _Spec) for s in self.systems):
            raise _error(f"a hybrid fuses two or more systems, got {len(self.systems)}")
        self._set("k", _positive_int("k", self.k, minimum=0))
        weights = tuple(_finite_float("weights", w) for w in self.weights) or (1.0,) * len(self.systems)
        if len(weights) != len(self.systems):
            raise _error(f"weights has {len(weights)} values for {len(self.systems)} systems")
        if not any(weights):
            raise _error(f"weights={':'.join(map(_num, weights))} are all zero: every document would tie")
        self._set("weights", weights)
        if self.depth is not None:
            self._set("depth", _positive_int("depth", self.depth))


@dataclass(frozen=True)
class RerankSpec(_Spec):
    """Second stage: re-score the ``top`` first-stage hits with ``model`` (cross-encoder or bi-encoder)."""

    model: str
    first_stage: SystemSpec
    top: int = 100
    backend: str = "torch"
    quantize: str | None = None
    device: str | None = None  # None: the best available
    precision: str = "fp32"
    kind: ClassVar[str] = "rerank"

    def __post_init__(self) -> None:
        from irflow.tasks.embed.api import is_api_model

        self._set("model", _resolve_model(self.model))
        if is_api_model(self.model):
            raise _error("rerank needs a local model (cross-encoder or bi-encoder), not an API embedding model")
        if not isinstance(self.first_stage, _Spec):
            raise _error(f"first stage must be a system spec, got {self.first_stage!r}")
        self._set("top", _positive_int("top", self.top))
        _check_encoder(self)


def _check_encoder(spec: DenseSpec | RerankSpec) -> None:
    """Validate the encoder options shared by dense and rerank specs (``ENCODER_OPTIONS``)."""
    _choice("backend", spec.backend, ENCODER_BACKENDS)
    if spec.quantize is not None:
        _choice("quantize", spec.quantize, QUANTIZATIONS)
        if spec.backend == "torch":
            raise _error("quantize=int8 needs backend=onnx or backend=openvino (torch runs fp32/fp16/bf16)")
    if spec.device is not None:
        _choice("device", spec.device, DEVICES)
    _choice("precision", spec.precision, PRECISIONS)
    if spec.backend != "torch" and spec.device not in (None, "cpu"):
        raise _error(f"backend={spec.backend} runs on the CPU: give device=cpu, or backend=torch for {spec.device}")
    if spec.quantize is not None and spec.precision != "fp32":
        raise _error(f"quantize={spec.quantize} keeps its other layers in fp32: drop precision={spec.precision}")
    if spec.precision == "fp32" or spec.backend == "openvino":  # OpenVINO runs bf16/fp16 on CPUs with those units
        return
    if spec.backend != "torch" or spec.device not in ("cuda", "mps"):
        raise _error(
            f"precision={spec.precision} runs on a GPU with the torch backend (device=cuda or device=mps) or on "
            f"the CPU with backend=openvino (got backend={spec.backend}, device={spec.device or 'default'})"
        )


def _unknown_kind(kind: str) -> Exception:
    from irflow.tasks.systems.plugins import plugin_names

    plugins = ", ".join(plugin_names()) or "(none installed)"
    return _error(
        f"unknown system kind {kind!r}; valid kinds: {', '.join(KINDS)}; plugin kinds (entry points "
        f"irflow.systems): {plugins}",
        UnknownNameError,
    )


# Systems built elsewhere live in irflow.tasks.systems.external (they import this module, not the reverse).
SystemSpec = Union[BM25Spec, DenseSpec, HybridSpec, RerankSpec, "RunSpec", "PluginSpec", "HttpSpec"]
FirstStageSpec = Union[BM25Spec, DenseSpec, "RunSpec", "PluginSpec", "HttpSpec"]  # ranks documents itself


def walk(spec: SystemSpec) -> Iterator[SystemSpec]:
    """Every system inside ``spec``, itself first, then depth-first: a hybrid's members in order, a
    rerank's first stage. The one traversal of a spec: callers filter it (``isinstance``)."""
    yield spec
    members = (
        spec.systems if isinstance(spec, HybridSpec) else (spec.first_stage,) if isinstance(spec, RerankSpec) else ()
    )
    for member in members:
        yield from walk(member)


def leaves(spec: SystemSpec) -> Iterator[FirstStageSpec]:
    """The first stages inside ``spec`` (every system but hybrids and reranks), in the order :func:`walk` meets them."""
    return (node for node in walk(spec) if not isinstance(node, (HybridSpec, RerankSpec)))


def _choice(name: str, value: object, valid: tuple[str, ...], context: str = "") -> str:
    if value not in valid:
        where = f" for {context}" if context else ""
        raise _error(f"unknown {name} {value!r}{where}; valid: {', '.join(valid) or '(none)'}", UnknownNameError)
    return str(value)


# ---------------------------------------------------------------------------------------------
# formatting


def _quote(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9._/:+-]+", value) else json.dumps(value, ensure_ascii=False)


def _body(value: str) -> str:
    """A path, target or URL as written in a spec: bare when safe, else a JSON string."""
    return value if re.fullmatch(r"[A-Za-z0-9._/:~%?&=,#@-]+", value) else json.dumps(value, ensure_ascii=False)


def _options(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f"{k}={_quote(v)}" for k, v in pairs)


def _non_default(spec: _Spec, names: tuple[str, ...]) -> list[tuple[str, object]]:
    defaults = {f.name: f.default for f in fields(spec)}  # type: ignore[arg-type]
    return [(n, getattr(spec, n)) for n in names if getattr(spec, n) != defaults[n]]


def format_system(spec: SystemSpec) -> str:
    """The canonical spec string: defaults omitted, numbers normalised, members grouped when needed."""
    if isinstance(spec, BM25Spec):
        defaults = {**{f.name: f.default for f in fields(spec)}, "method": BM25_METHODS[spec.backend][0]}
        pairs = [
            (n, _num(v) if isinstance(v, float) else str(v))
            for n in _BM25_OPTIONS
            if (v := getattr(spec, n)) != defaults[n]
        ]
        return "bm25" + (":" + _options(pairs) if pairs else "")
    if isinstance(spec, DenseSpec):
        pairs = [(k, str(v)) for k, v in _non_default(spec, (*_DENSE_OPTIONS, *ENCODER_OPTIONS, "index"))]
        pairs += list(spec.index_params) + list(spec.api)
        return f"dense{_paren(pairs)}:{spec.model}"
    if isinstance(spec, HybridSpec):
        pairs = [] if spec.k == 60 else [("k", str(spec.k))]
        if any(w != 1.0 for w in spec.weights):
            pairs.append(("weights", ":".join(_num(w) for w in spec.weights)))
        if spec.depth is not None:
            pairs.append(("depth", str(spec.depth)))
        members = [str(s) for s in spec.systems]
        members = [f"({m})" if len(_split_members(m)) > 1 else m for m in members]
        return f"hybrid{_paren(pairs)}:" + "+".join(members)
    if isinstance(spec, RerankSpec):
        pairs = [(k, str(v)) for k, v in _non_default(spec, ("top", *ENCODER_OPTIONS))]
        return f"rerank{_paren(pairs)}:{spec.model}@{spec.first_stage}"
    if isinstance(spec, _Spec) and hasattr(spec, "canonical"):  # irflow.tasks.systems.external
        return str(spec.canonical())
    raise TypeError(f"not a system spec: {spec!r}")


def _paren(pairs: list[tuple[str, str]]) -> str:
    return f"({_options(pairs)})" if pairs else ""


# ---------------------------------------------------------------------------------------------
# parsing

_HEAD = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*)")
_MEMBER_START = re.compile(r"\s*(\(|[A-Za-z][A-Za-z0-9_]*\s*(?:[(:+]|$))")  # a kind name starts a member


def _scan(text: str, start: int, stop_at: str) -> int:
    """Index of the first character in ``stop_at`` at depth 0 outside JSON strings, or len(text)."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == '"':
            try:
                _, i = json.JSONDecoder().raw_decode(text, i)
            except ValueError:
                raise _error(f"unterminated quoted value at character {i + 1} of {text!r}") from None
            continue
        if depth == 0 and c in stop_at:
            return i
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            raise _error(f"unbalanced ')' at character {i + 1} of {text!r}")
        i += 1
    if depth:
        raise _error(f"unbalanced '(' in {text!r}")
    return i


def _split_members(text: str) -> list[str]:
    """Split a hybrid body at each top-level '+' followed by a kind name or '(' (so ``method=bm25+`` is safe)."""
    parts, start, i = [], 0, 0
    while (i := _scan(text, i, "+")) < len(text):
        if _MEMBER_START.match(text, i + 1):
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return [*parts, text[start:]]


def _parse_options(text: str) -> dict[str, str]:
    options: dict[str, str] = {}
    i = 0
    while i < len(text):
        end = _scan(text, i, ",")
        key, eq, value = text[i:end].partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise _error(f"option {text[i:end]!r} is not key=value")
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                raise _error(f"bad quoted value {value}: write a JSON string") from None
        if key in options:
            raise _error(f"option {key!r} given twice")
        options[key] = value
        i = end + 1
    return options


def _take(options: dict[str, str], allowed: tuple[str, ...], kind: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise _error(f"unknown {kind} option {unknown[0]!r}; valid: {', '.join(allowed)}", UnknownNameError)


def parse_system(text: str, base: str | os.PathLike[str] | None = None) -> SystemSpec:
    """Parse a system spec string (see the module docstring); raise UnknownNameError/InputError with help.

    Relative ``run:`` paths are read from ``base`` (default: the working directory), e.g. the folder of
    the experiment file that names them.
    """
    if not isinstance(text, str) or not text.strip():
        raise _error(f"empty system spec {text!r}")
    try:
        return _parse(text.strip(), base)
    except (InputError, UnknownNameError) as exc:
        raise type(exc)(f"system spec {text!r}: {exc}") from None


def as_spec(system: str | SystemSpec) -> SystemSpec:
    """Accept a spec string or an already parsed spec."""
    return parse_system(system) if isinstance(system, str) else system


def _parse_body(text: str) -> str:
    """The body after ``kind[(options)]:`` of run, plugin and http specs: bare text or one JSON string."""
    text = text.strip()
    if not text.startswith('"'):
        return text
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        raise _error(f"unterminated quoted value in {text!r}") from None
    if end != len(text) or not isinstance(value, str):
        raise _error(f"unexpected text after the quoted value in {text!r}")
    return value


def _parse(text: str, base: str | os.PathLike[str] | None = None) -> SystemSpec:
    text = text.strip()
    if text.startswith("("):
        end = _scan(text, 1, ")")
        if end == len(text):
            raise _error(f"unbalanced '(' in {text!r}")
        if end != len(text) - 1:
            raise _error(f"unexpected text after ')' in {text!r}")
        return _parse(text[1:end], base)
    head = _HEAD.match(text)
    kind = head.group(1).lower() if head else ""
    if kind not in KINDS:
        from irflow.tasks.systems.plugins import installed_kinds

        if not kind or kind not in installed_kinds():
            raise _unknown_kind(kind or text)
    i = head.end()  # type: ignore[union-attr]
    options: dict[str, str] = {}
    if text[i : i + 1] == "(":
        end = _scan(text, i + 1, ")")
        if end == len(text):
            raise _error(f"unbalanced '(' in {text!r}")
        options = _parse_options(text[i + 1 : end])
        i = end + 1
    if text[i : i + 1] == "+":
        raise _error(f"to fuse systems write hybrid:<system>+<system>, e.g. hybrid:{text}")
    if i < len(text) and text[i] != ":":
        raise _error(f"expected ':' after {text[:i]!r}")
    rest = text[i + 1 :] if i < len(text) else None

    if kind not in ("bm25", "dense", "hybrid", "rerank"):
        from irflow.tasks.systems.external import parse_external

        return parse_external(kind, options, _parse_body(rest) if rest is not None else "", base)
    if kind == "bm25":
        if rest is not None:
            if options:
                raise _error("give bm25 options either in parentheses or after ':', not both")
            options = _parse_options(rest)
        _take(options, _BM25_OPTIONS, "bm25")
        return BM25Spec(**options)  # type: ignore[arg-type]
    if not rest or not rest.strip():
        example = {"dense": "dense:minilm", "hybrid": "hybrid:bm25+dense:minilm", "rerank": "rerank:minilm@bm25"}
        raise _error(f"{kind} needs a body after ':', e.g. {example[kind]}")
    if kind == "dense":
        from irflow.tasks.embed.api import API_OPTIONS, is_api_model

        index = options.pop("index", "flat")
        _choice("index", index, tuple(INDEX_PARAMS))
        api = tuple(API_OPTIONS) if is_api_model(rest.strip()) else ()
        _take(options, _DENSE_OPTIONS + ENCODER_OPTIONS + INDEX_PARAMS[index] + api, f"dense (index={index})")
        params = tuple((k, v) for k, v in options.items() if k in INDEX_PARAMS[index])
        kwargs = {k: v for k, v in options.items() if k in _DENSE_OPTIONS + ENCODER_OPTIONS}
        api_options = tuple((k, v) for k, v in options.items() if k in api)
        return DenseSpec(model=rest, index=index, index_params=params, api=api_options, **kwargs)  # type: ignore[arg-type]
    if kind == "hybrid":
        _take(options, ("k", "weights", "depth"), "hybrid")
        members = tuple(_parse(m, base) for m in _split_members(rest))
        weights = tuple(options.pop("weights").split(":")) if "weights" in options else ()
        return HybridSpec(systems=members, weights=weights, **options)  # type: ignore[arg-type]
    _take(options, ("top", *ENCODER_OPTIONS), "rerank")
    model, at, first = rest.partition("@")
    if not at or not first.strip():
        raise _error("rerank needs <model>@<system>, e.g. rerank:minilm@bm25")
    return RerankSpec(model=model, first_stage=_parse(first, base), **options)  # type: ignore[arg-type]
