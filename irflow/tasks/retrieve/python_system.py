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
latency stage after retrieval), so ``index`` runs once per process.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import time
from collections import OrderedDict
from typing import Any

import pandas as pd

from irflow.tasks.core.runs import order_run
from irflow.tasks.core.schema import Dataset, InputError, IrflowError
from irflow.tasks.retrieve.base import Searcher
from irflow.tasks.retrieve.ranking import add_counts, against_dataset, ranked_lists
from irflow.tasks.systems.external import PluginSpec
from irflow.tasks.systems.plugins import load_kind

PROTOCOL = "an object with search(queries, k) -> one ranked list per query, and optionally index(corpus)"
_PREPARED: OrderedDict[tuple[str, str, str, str], tuple[Any, dict[str, Any]]] = OrderedDict()
_KEEP = 2  # prepared retrievers kept per process


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


class PluginSearcher(Searcher[PluginSpec]):
    """A Python retriever (the ``python`` kind or an entry-point kind) behind irflow's searcher interface."""

    def __init__(self, dataset: Dataset, spec: PluginSpec) -> None:
        super().__init__(dataset, spec)
        key = (dataset.name, dataset.split, dataset.fingerprint, str(spec))
        if key in _PREPARED:
            self.retriever, prepared = _PREPARED[key]
            _PREPARED.move_to_end(key)
            self.info.update(prepared)
            return
        factory = load_kind(spec.plugin)
        try:
            retriever = factory(spec.target, **spec.kwargs)
        except IrflowError as exc:
            raise type(exc)(f"system {str(spec)!r}: {exc}") from None
        except (Exception, SystemExit) as exc:  # sys.exit() in a plugin fails the system, not irflow
            raise InputError(f"system {str(spec)!r}: creating the retriever failed: {_reason(exc)}") from exc
        if not callable(getattr(retriever, "search", None)):
            raise InputError(f"system {str(spec)!r}: got a {type(retriever).__name__}, expected {PROTOCOL}")
        start = time.perf_counter()
        index = getattr(retriever, "index", None)
        if callable(index):
            self._call(index, "index", dataset.corpus.copy(deep=False))
        prepared = {
            "plugin": spec.plugin,
            "plugin_target": spec.target,
            "plugin_options": dict(spec.options),
            **_identity(retriever),
            "index_build_seconds": time.perf_counter() - start if callable(index) else 0.0,
        }
        self.retriever = retriever
        self.info.update(prepared)
        _PREPARED[key] = (retriever, prepared)
        while len(_PREPARED) > _KEEP:
            _PREPARED.popitem(last=False)

    def _call(self, method: Any, name: str, *args: Any) -> Any:
        """Call the plugin behind a guard: anything it raises, ``sys.exit()`` included, becomes a named
        failure of this system (the others keep their results). Signals pass: Ctrl-C and SIGTERM (raised as
        exceptions that are no ``Exception``: ``KeyboardInterrupt``, Prefect's ``TerminationSignal``)."""
        try:
            return method(*args)
        except IrflowError:
            raise
        except (Exception, SystemExit) as exc:
            raise InputError(f"system {str(self.spec)!r}: {name}() failed: {_reason(exc)}") from exc

    def query(self, query_id: str, text: str, depth: int) -> Any:
        """The retriever's ``search`` for one query: what latency times (irflow's checks come after)."""
        return self._call(self.retriever.search, "search", [{"query_id": query_id, "text": text}], depth)

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        qids = queries["query_id"].astype(str).tolist()
        items = [{"query_id": q, "text": t} for q, t in zip(qids, queries["text"].fillna("").astype(str))]
        answers = self._call(self.retriever.search, "search", items, depth)
        run = ranked_lists(answers, qids, str(self.spec), depth)
        batch = queries is self.dataset.queries
        where = f"system {str(self.spec)!r}"
        kept, counts = against_dataset(self.dataset, run, where, all_queries=batch, overlap=batch)
        add_counts(self.info, counts)
        return order_run(kept)
