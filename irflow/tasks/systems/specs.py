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

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, ClassVar, Union

from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.systems.api_options import API_OPTIONS, is_api_model, normalise_options
from irflow.tasks.systems.encoder_options import ENCODER_OPTIONS, check_encoder
from irflow.tasks.systems.grammar import (
    KIND_PARSERS,
    KINDS,
    MODEL_ALIASES,
    Spec,
    check_choice,
    check_options,
    finite_float,
    format_number,
    format_options,
    format_paren,
    parse_body,
    parse_options,
    positive_int,
    scan,
    spec_error,
    split_members,
    unknown_kind,
)
from irflow.tasks.systems.plugins import installed_kinds

if TYPE_CHECKING:
    from irflow.tasks.systems.external import HttpSpec, MemorySpec, PluginSpec, RunSpec

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
    "blocks": ("block_size",),  # exact search block by block, memory bounded (tasks.index.blocks)
}
_BM25_OPTIONS = ("k1", "b", "backend", "method", "stemmer", "stopwords")
_DENSE_OPTIONS = ("max_seq_length", "query_prompt", "doc_prompt", "batch_size")  # besides index and its parameters


def _resolve_model(model: str) -> str:
    model = str(model).strip()
    if not model or "@" in model:
        raise spec_error(f"bad model name {model!r}: it must be non-empty and contain no '@'")
    if "?" in model:
        raise spec_error(f"bad model name {model!r}: options go in parentheses, e.g. dense(max_seq_length=128):minilm")
    return MODEL_ALIASES.get(model, model.rstrip("/") or "/")


class _Builtin(Spec):
    """irflow's own kinds (bm25, dense, hybrid, rerank): written by :func:`format_system`."""

    def canonical(self) -> str:
        return _format_builtin(self)


@dataclass(frozen=True)
class BM25Spec(_Builtin):
    """Sparse lexical retrieval over ``title + " " + text``. ``method=None`` means the backend's default."""

    k1: float = 0.9
    b: float = 0.4
    backend: str = "bm25s"
    method: str | None = None
    stemmer: str = "snowball"
    stopwords: str = "en"
    kind: ClassVar[str] = "bm25"

    def __post_init__(self) -> None:
        self._set("k1", finite_float("k1", self.k1))
        self._set("b", finite_float("b", self.b))
        if self.b > 1:
            raise spec_error(f"option b={self.b!r} must lie in [0, 1]")
        check_choice("backend", self.backend, tuple(BM25_METHODS))
        methods = BM25_METHODS[self.backend]
        self._set("method", check_choice("method", self.method or methods[0], methods, f"backend={self.backend}"))
        check_choice("stemmer", self.stemmer, ("snowball", "none"))
        check_choice("stopwords", self.stopwords, ("en", "none"))


@dataclass(frozen=True)
class DenseSpec(_Builtin):
    """A bi-encoder first stage: a sentence-transformers model and a FAISS index over its vectors.

    ``model`` is a Hugging Face name or a local directory (aliases in ``MODEL_ALIASES`` are
    resolved here), or ``openai:<model>`` for an API model whose options (``api_options.API_OPTIONS``)
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
        self._set("model", _resolve_model(self.model))
        if is_api_model(self.model):
            if not self.model.removeprefix("openai:").strip():
                raise spec_error("dense:openai:<model> needs the provider's model name, e.g. text-embedding-3-small")
            if self.max_seq_length is not None:
                raise spec_error("max_seq_length applies to local models; an API model truncates on its side")
            try:
                self._set("api", normalise_options(self.api))
            except InputError as err:
                raise spec_error(str(err)) from None
        elif self.api:
            raise spec_error(
                f"options {', '.join(k for k, _ in self.api)} apply to API models: dense(...):openai:<model>"
            )
        check_encoder(self)
        if is_api_model(self.model) and (self.backend, self.quantize, self.device) != ("torch", None, None):
            raise spec_error("backend, quantize and device apply to local models, not to an API model")
        if self.max_seq_length is not None:
            self._set("max_seq_length", positive_int("max_seq_length", self.max_seq_length))
        self._set("batch_size", positive_int("batch_size", self.batch_size))
        check_choice("index", self.index, tuple(INDEX_PARAMS))
        params = dict(self.index_params)
        if len(params) != len(self.index_params):
            raise spec_error(f"repeated index parameter in {self.index_params!r}")
        for key in params:
            check_choice("index parameter", key, INDEX_PARAMS[self.index], f"index={self.index}")
        self._set("index_params", tuple(sorted((k, str(positive_int(k, v))) for k, v in params.items())))


@dataclass(frozen=True)
class HybridSpec(_Builtin):
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
        if len(self.systems) < 2 or not all(isinstance(s, Spec) for s in self.systems):
            raise spec_error(f"a hybrid fuses two or more systems, got {len(self.systems)}")
        self._set("k", positive_int("k", self.k, minimum=0))
        weights = tuple(finite_float("weights", w) for w in self.weights) or (1.0,) * len(self.systems)
        if len(weights) != len(self.systems):
            raise spec_error(f"weights has {len(weights)} values for {len(self.systems)} systems")
        if not any(weights):
            raise spec_error(f"weights={':'.join(map(format_number, weights))} are all zero: every document would tie")
        self._set("weights", weights)
        if self.depth is not None:
            self._set("depth", positive_int("depth", self.depth))


@dataclass(frozen=True)
class RerankSpec(_Builtin):
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
        self._set("model", _resolve_model(self.model))
        if is_api_model(self.model):
            raise spec_error("rerank needs a local model (cross-encoder or bi-encoder), not an API embedding model")
        if not isinstance(self.first_stage, Spec):
            raise spec_error(f"first stage must be a system spec, got {self.first_stage!r}")
        self._set("top", positive_int("top", self.top))
        check_encoder(self)


# Systems built elsewhere live in irflow.tasks.systems.external (they import this module, not the reverse).
SystemSpec = Union[BM25Spec, DenseSpec, HybridSpec, RerankSpec, "RunSpec", "PluginSpec", "HttpSpec", "MemorySpec"]
FirstStageSpec = Union[BM25Spec, DenseSpec, "RunSpec", "PluginSpec", "HttpSpec", "MemorySpec"]  # ranks documents itself


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


# ---------------------------------------------------------------------------------------------
# formatting


def _non_default(spec: Spec, names: tuple[str, ...]) -> list[tuple[str, object]]:
    defaults = {f.name: f.default for f in fields(spec)}  # type: ignore[arg-type]
    return [(n, getattr(spec, n)) for n in names if getattr(spec, n) != defaults[n]]


def format_system(spec: SystemSpec) -> str:
    """The canonical spec string: defaults omitted, numbers normalised, members grouped when needed."""
    if not isinstance(spec, Spec):
        raise TypeError(f"not a system spec: {spec!r}")
    return spec.canonical()


def _format_builtin(spec: _Builtin) -> str:
    if isinstance(spec, BM25Spec):
        defaults = {**{f.name: f.default for f in fields(spec)}, "method": BM25_METHODS[spec.backend][0]}
        pairs = [
            (n, format_number(v) if isinstance(v, float) else str(v))
            for n in _BM25_OPTIONS
            if (v := getattr(spec, n)) != defaults[n]
        ]
        return "bm25" + (":" + format_options(pairs) if pairs else "")
    if isinstance(spec, DenseSpec):
        pairs = [(k, str(v)) for k, v in _non_default(spec, (*_DENSE_OPTIONS, *ENCODER_OPTIONS, "index"))]
        pairs += list(spec.index_params) + list(spec.api)
        return f"dense{format_paren(pairs)}:{spec.model}"
    if isinstance(spec, HybridSpec):
        pairs = [] if spec.k == 60 else [("k", str(spec.k))]
        if any(w != 1.0 for w in spec.weights):
            pairs.append(("weights", ":".join(format_number(w) for w in spec.weights)))
        if spec.depth is not None:
            pairs.append(("depth", str(spec.depth)))
        members = [str(s) for s in spec.systems]
        members = [f"({m})" if len(split_members(m)) > 1 else m for m in members]
        return f"hybrid{format_paren(pairs)}:" + "+".join(members)
    if isinstance(spec, RerankSpec):
        pairs = [(k, str(v)) for k, v in _non_default(spec, ("top", *ENCODER_OPTIONS))]
        return f"rerank{format_paren(pairs)}:{spec.model}@{spec.first_stage}"
    raise TypeError(f"not a system spec: {spec!r}")


# ---------------------------------------------------------------------------------------------
# parsing

_HEAD = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*)")


def parse_system(text: str, base: str | os.PathLike[str] | None = None) -> SystemSpec:
    """Parse a system spec string (see the module docstring); raise UnknownNameError/InputError with help.

    Relative ``run:`` paths are read from ``base`` (default: the working directory), e.g. the folder of
    the experiment file that names them.
    """
    if not isinstance(text, str) or not text.strip():
        raise spec_error(f"empty system spec {text!r}")
    try:
        return _parse(text.strip(), base)
    except (InputError, UnknownNameError) as exc:
        raise type(exc)(redact(f"system spec {text!r}: {exc}")) from None  # a URL's password shows as ***


def as_spec(system: str | SystemSpec) -> SystemSpec:
    """Accept a spec string or an already parsed spec."""
    return parse_system(system) if isinstance(system, str) else system


def _parse(text: str, base: str | os.PathLike[str] | None = None) -> SystemSpec:
    text = text.strip()
    if text.startswith("("):
        end = scan(text, 1, ")")
        if end == len(text):
            raise spec_error(f"unbalanced '(' in {text!r}")
        if end != len(text) - 1:
            raise spec_error(f"unexpected text after ')' in {text!r}")
        return _parse(text[1:end], base)
    head = _HEAD.match(text)
    kind = head.group(1).lower() if head else ""
    if kind not in KINDS:
        if not kind or kind not in installed_kinds():
            raise unknown_kind(kind or text)
    i = head.end()  # type: ignore[union-attr]
    options: dict[str, str] = {}
    if text[i : i + 1] == "(":
        end = scan(text, i + 1, ")")
        if end == len(text):
            raise spec_error(f"unbalanced '(' in {text!r}")
        options = parse_options(text[i + 1 : end])
        i = end + 1
    if text[i : i + 1] == "+":
        raise spec_error(f"to fuse systems write hybrid:<system>+<system>, e.g. hybrid:{text}")
    if i < len(text) and text[i] != ":":
        raise spec_error(f"expected ':' after {text[:i]!r}")
    rest = text[i + 1 :] if i < len(text) else None

    if kind not in ("bm25", "dense", "hybrid", "rerank"):
        parser = KIND_PARSERS.get(kind) or KIND_PARSERS["plugin"]
        return parser(kind, options, parse_body(rest) if rest is not None else "", base)
    if kind == "bm25":
        if rest is not None:
            if options:
                raise spec_error("give bm25 options either in parentheses or after ':', not both")
            options = parse_options(rest)
        check_options(options, _BM25_OPTIONS, "bm25")
        return BM25Spec(**options)  # type: ignore[arg-type]
    if not rest or not rest.strip():
        example = {"dense": "dense:minilm", "hybrid": "hybrid:bm25+dense:minilm", "rerank": "rerank:minilm@bm25"}
        raise spec_error(f"{kind} needs a body after ':', e.g. {example[kind]}")
    if kind == "dense":
        index = options.pop("index", "flat")
        check_choice("index", index, tuple(INDEX_PARAMS))
        api = tuple(API_OPTIONS) if is_api_model(rest.strip()) else ()
        check_options(options, _DENSE_OPTIONS + ENCODER_OPTIONS + INDEX_PARAMS[index] + api, f"dense (index={index})")
        params = tuple((k, v) for k, v in options.items() if k in INDEX_PARAMS[index])
        kwargs = {k: v for k, v in options.items() if k in _DENSE_OPTIONS + ENCODER_OPTIONS}
        api_options = tuple((k, v) for k, v in options.items() if k in api)
        return DenseSpec(model=rest, index=index, index_params=params, api=api_options, **kwargs)  # type: ignore[arg-type]
    if kind == "hybrid":
        check_options(options, ("k", "weights", "depth"), "hybrid")
        members = tuple(_parse(m, base) for m in split_members(rest))
        weights = tuple(options.pop("weights").split(":")) if "weights" in options else ()
        return HybridSpec(systems=members, weights=weights, **options)  # type: ignore[arg-type]
    check_options(options, ("top", *ENCODER_OPTIONS), "rerank")
    model, at, first = rest.partition("@")
    if not at or not first.strip():
        raise spec_error("rerank needs <model>@<system>, e.g. rerank:minilm@bm25")
    return RerankSpec(model=model, first_stage=_parse(first, base), **options)  # type: ignore[arg-type]
