"""``python:<module>:<callable>`` and the plugin kinds: retrievers written in Python, evaluated by irflow.

The protocol (duck-typed; nothing to inherit)::

    class BM25Plus:                                   # the callable: a class or a factory function
        def __init__(self, k1=1.2, b=0.75): ...       # spec options as keyword arguments: python(k1=2):...
        def index(self, corpus):                      # optional: called once before the first search
            ...                                       #   corpus: pandas DataFrame doc_id, title, text (+ metadata)
        def search(self, queries, k):                 # queries: [{"query_id": "q1", "text": "..."}, ...]
            return [[("d3", 12.1), ("d7", 9.5)], ...] # per query, in order: up to k hits

A hit is ``(doc_id, score)``, ``{"doc_id" (or "id"): ..., "score": ...}`` or a bare doc id (its
position is its score). ``search`` may also return a mapping ``query_id -> hits``. Higher scores
rank first; ties are broken as everywhere in irflow (doc id descending), and only the ``k`` best hits of
a list are kept (it is read one hit at a time, so a long list or a generator costs memory for ``k``). A
document not in the corpus keeps its rank (not relevant unless the qrels judge it), as in trec_eval.
Option values that read as numbers or ``true``/``false``/``null`` are passed as such.

Latency is measured around ``search`` called with one query at a time; ``index`` is timed as the
system's index build. A prepared retriever is kept for the next stage of the same evaluation (the
latency stage after retrieval), so ``index`` runs once per evaluation.

The retriever runs in a child process of its own by default (:mod:`~irflow.tasks.retrieve.plugin_process`):
one per system and evaluation, which creates it, indexes once, searches and times the single-query
calls, so an ``os._exit``, a segfault or a ``KeyboardInterrupt`` in the plugin fails that system, named,
and loses nothing else. ``IRFLOW_PLUGIN_ISOLATION=inline`` runs it in irflow's process instead (a
debugger, a retriever that shares state with its caller); both paths name the plugin's errors alike.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import time
from collections import OrderedDict
from typing import Any

import pandas as pd

from irflow.tasks.core.runs import order_run
from irflow.tasks.core.schema import Dataset, InputError, IrflowError
from irflow.tasks.retrieve.base import Searcher
from irflow.tasks.retrieve.latency import Timed
from irflow.tasks.retrieve.plugin_process import PluginProcess
from irflow.tasks.retrieve.ranking import add_counts, against_dataset, ranked_lists
from irflow.tasks.systems.external import PluginSpec
from irflow.tasks.systems.plugins import load_kind
from irflow.tasks.systems.specs import parse_system

PROTOCOL = "an object with search(queries, k) -> one ranked list per query, and optionally index(corpus)"
ISOLATION = "IRFLOW_PLUGIN_ISOLATION"
"""``process`` (the default: a child process per system) or ``inline`` (irflow's own process)."""
_PREPARED: OrderedDict[tuple[str, str, str, str], tuple[Any, dict[str, Any]]] = OrderedDict()
_KEEP = 2  # prepared retrievers (or their processes) kept per process


def import_callable(target: str, expected: str, where: str = "") -> Any:
    """``MODULE:CALLABLE`` (dotted attributes allowed) imported; an InputError, prefixed by ``where``, names
    what is missing or that the object is not ``expected``."""
    module_name, _, attribute = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"{where}cannot import module {module_name!r}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise InputError(f"{where}module {module_name!r} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise InputError(f"{where}{target} is a {type(obj).__name__}, not {expected}")
    return obj


def python_kind(target: str, **options: Any) -> Any:
    """The built-in ``python`` kind: import ``module``, look up ``callable`` and call it with the options."""
    return import_callable(target, "a class or factory to call")(**options)


def _reason(exc: BaseException) -> str:
    """What a plugin raised, for the message (``SystemExit: 3`` for ``sys.exit(3)``)."""
    return f"{type(exc).__name__}: {exc}"


def _identity(retriever: Any) -> dict[str, Any]:
    """Where the retriever's code comes from: class, source file hash, distribution version."""
    cls = type(retriever)
    out: dict[str, Any] = {"plugin_class": f"{cls.__module__}.{cls.__qualname__}"}
    try:
        source = inspect.getsourcefile(cls)
        if source:
            with open(source, "rb") as fh:
                out["plugin_source_sha256"] = hashlib.file_digest(fh, "sha256").hexdigest()
    except (OSError, TypeError):
        pass
    from importlib.metadata import packages_distributions, version

    for dist in packages_distributions().get(cls.__module__.partition(".")[0], [])[:1]:
        out["plugin_version"] = f"{dist}=={version(dist)}"
    return out


def isolated() -> bool:
    """Whether plugins run in a child process (:data:`ISOLATION`; anything but ``inline`` means yes)."""
    return os.environ.get(ISOLATION, "process").strip().lower() != "inline"


def call(spec: PluginSpec, method: Any, name: str, *args: Any) -> Any:
    """Call the plugin behind a guard: anything it raises, ``sys.exit()`` included, becomes a named
    failure of this system (the others keep their results). Signals pass: Ctrl-C and SIGTERM (raised as
    exceptions that are no ``Exception``: ``KeyboardInterrupt``, Prefect's ``TerminationSignal``)."""
    try:
        return method(*args)
    except IrflowError:
        raise
    except (Exception, SystemExit) as exc:
        raise InputError(f"system {str(spec)!r}: {name}() failed: {_reason(exc)}") from exc


def create(spec: PluginSpec) -> Any:
    """The plugin's retriever, made by its kind's factory with the spec's options and checked for ``search``."""
    factory = load_kind(spec.plugin)
    try:
        retriever = factory(spec.target, **spec.kwargs)
    except IrflowError as exc:
        raise type(exc)(f"system {str(spec)!r}: {exc}") from None
    except (Exception, SystemExit) as exc:  # sys.exit() in a plugin fails the system, not irflow
        raise InputError(f"system {str(spec)!r}: creating the retriever failed: {_reason(exc)}") from exc
    if not callable(getattr(retriever, "search", None)):
        raise InputError(f"system {str(spec)!r}: got a {type(retriever).__name__}, expected {PROTOCOL}")
    return retriever


def has_index(retriever: Any) -> bool:
    return callable(getattr(retriever, "index", None))


def prepare(spec: PluginSpec, retriever: Any, corpus: pd.DataFrame | None) -> dict[str, Any]:
    """Index ``corpus`` (when the retriever has ``index``); the system's info: plugin, identity, build time."""
    start = time.perf_counter()
    if corpus is not None and has_index(retriever):
        call(spec, retriever.index, "index", corpus)
    return {
        "plugin": spec.plugin,
        "plugin_target": spec.target,
        "plugin_options": dict(spec.options),
        **_identity(retriever),
        "index_build_seconds": time.perf_counter() - start if has_index(retriever) else 0.0,
    }


def search_lists(
    spec: PluginSpec, retriever: Any, items: list[dict[str, str]], qids: list[str], depth: int
) -> pd.DataFrame:
    """The retriever's answer to ``items`` as a run table (checked and cut to ``depth`` per query)."""
    answers = call(spec, retriever.search, "search", items, depth)
    return ranked_lists(answers, qids, str(spec), depth)


def handle(state: dict[str, Any], op: str, *args: Any) -> Any:
    """A request in the plugin's child process (:class:`~irflow.tasks.retrieve.plugin_process.PluginProcess`):
    ``create`` (spec) -> whether it has ``index``; ``prepare`` (corpus or None) -> info; ``search`` (items,
    query ids, depth) -> run table; ``query`` (items, depth) -> seconds the single-query search took."""
    if op == "create":
        spec = parse_system(args[0])
        assert isinstance(spec, PluginSpec)
        state["spec"], state["retriever"] = spec, create(spec)
        return has_index(state["retriever"])
    spec, retriever = state["spec"], state["retriever"]
    if op == "prepare":
        return prepare(spec, retriever, args[0])
    if op == "search":
        return search_lists(spec, retriever, *args)
    if op == "query":
        start = time.perf_counter()
        call(spec, retriever.search, "search", *args)
        return time.perf_counter() - start
    raise ValueError(f"unknown request {op!r}")


class PluginSearcher(Searcher[PluginSpec]):
    """A Python retriever (the ``python`` kind or an entry-point kind) behind irflow's searcher interface:
    in a child process (``self.process``) or, with ``IRFLOW_PLUGIN_ISOLATION=inline``, in this one
    (``self.retriever``)."""

    retriever: Any = None
    process: PluginProcess | None = None

    def __init__(self, dataset: Dataset, spec: PluginSpec) -> None:
        super().__init__(dataset, spec)
        child = isolated()
        key = (dataset.name, dataset.split, dataset.fingerprint, str(spec) + " [process]" * child)
        if key in _PREPARED and not (child and _PREPARED[key][0].dead):
            self._keep(*_PREPARED[key])
            _PREPARED.move_to_end(key)
            return
        if child:
            process = PluginProcess(str(spec), handle)
            try:
                indexed = process.ask("create", str(spec), what="creating the retriever")
                corpus = dataset.corpus.copy(deep=False) if indexed else None
                prepared = process.ask("prepare", corpus, what="index()")
            except BaseException:
                process.close()
                raise
            self._keep(process, prepared)
        else:
            retriever = create(spec)
            corpus = dataset.corpus.copy(deep=False) if has_index(retriever) else None
            self._keep(retriever, prepare(spec, retriever, corpus))
        _PREPARED.pop(key, None)
        _PREPARED[key] = (self.process or self.retriever, dict(self.info))
        while len(_PREPARED) > _KEEP:
            evicted, _ = _PREPARED.popitem(last=False)[1]
            if isinstance(evicted, PluginProcess):
                evicted.close()

    def _keep(self, prepared: Any, info: dict[str, Any]) -> None:
        if isinstance(prepared, PluginProcess):
            self.process = prepared
        else:
            self.retriever = prepared
        self.info.update({k: v for k, v in info.items() if k != "system"})

    def _call(self, method: Any, name: str, *args: Any) -> Any:
        """The plugin's ``method`` called behind :func:`call`'s guard (in this process)."""
        return call(self.spec, method, name, *args)

    def query(self, query_id: str, text: str, depth: int) -> Any:
        """The retriever's ``search`` for one query: what latency times (irflow's checks come after). In a
        child process the child times the call itself: the seconds come back as :class:`Timed`."""
        items = [{"query_id": query_id, "text": text}]
        if self.process is not None:
            return Timed(self.process.ask("query", items, depth, what="search()"))
        return self._call(self.retriever.search, "search", items, depth)

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        qids = queries["query_id"].astype(str).tolist()
        items = [{"query_id": q, "text": t} for q, t in zip(qids, queries["text"].fillna("").astype(str))]
        if self.process is not None:
            run = self.process.ask("search", items, qids, depth, what="search()")
        else:
            run = search_lists(self.spec, self.retriever, items, qids, depth)
        batch = queries is self.dataset.queries
        where = f"system {str(self.spec)!r}"
        kept, counts = against_dataset(self.dataset, run, where, all_queries=batch, overlap=batch)
        add_counts(self.info, counts)
        return order_run(kept)
