"""irflow systems: the short strings that name a retrieval configuration, parsed into frozen specs.

Public API::

    from irflow.tasks.systems import parse_system, as_spec, walk, leaves

    spec = parse_system("hybrid:bm25+dense(index=hnsw):minilm")
    str(spec)            # the canonical spelling: run name, cache key, MLflow key
    [str(s) for s in leaves(spec)]   # ["bm25", "dense(index=hnsw):sentence-transformers/all-MiniLM-L6-v2"]

Modules: ``grammar`` (what every spec shares: the :class:`Spec` base, errors with the spec help, option
values, quoting, and :data:`KIND_PARSERS`, the table of kinds parsed outside ``specs``), ``specs``
(irflow's own kinds: bm25, dense, hybrid, rerank, and :func:`parse_system`), ``external`` (systems
built elsewhere: ``run:``, ``python:`` and entry-point kinds, ``http:``; registers their parsers in
the table on import), ``http_options`` and ``http_presets`` (how an ``http:`` system asks and reads
answers), ``plugins`` (the ``irflow.systems`` entry-point group), ``api_options`` (options of API
embedding models), ``labels`` (a readable default label of every kind: ``default_label``). Nothing
here imports a heavy library: specs are parsed before any stage runs.
"""

from __future__ import annotations

from irflow.tasks.systems.external import HttpSpec, MemorySpec, PluginSpec, RunSpec, file_sha256
from irflow.tasks.systems.grammar import KIND_PARSERS, KINDS, MODEL_ALIASES, SYSTEM_HELP, Spec
from irflow.tasks.systems.labels import default_label, labels_of
from irflow.tasks.systems.specs import (
    BM25Spec,
    DenseSpec,
    FirstStageSpec,
    HybridSpec,
    RerankSpec,
    SystemSpec,
    as_spec,
    format_system,
    leaves,
    parse_system,
    walk,
)

__all__ = [
    "KINDS",
    "KIND_PARSERS",
    "MODEL_ALIASES",
    "SYSTEM_HELP",
    "BM25Spec",
    "DenseSpec",
    "FirstStageSpec",
    "HttpSpec",
    "HybridSpec",
    "MemorySpec",
    "PluginSpec",
    "RerankSpec",
    "RunSpec",
    "Spec",
    "SystemSpec",
    "as_spec",
    "default_label",
    "labels_of",
    "file_sha256",
    "format_system",
    "leaves",
    "parse_system",
    "walk",
]
