"""irflow core: what every stage shares, and nothing stage-specific.

Modules: ``schema`` (the canonical :class:`~irflow.tasks.core.schema.Dataset`, the error hierarchy,
:class:`~irflow.tasks.core.schema.MetricsDocument` and the dataset manifest's type), ``config`` (where
irflow keeps things, read from the environment), ``atomic`` (atomic writes, one-rename publishing,
file locks), ``progress`` (documents/s and ETA of long steps on a terminal), ``http_client`` (the one
HTTP client layer: retries honouring Retry-After, rate limits, cost accounting), ``redact`` (the one
redaction of secrets in everything irflow writes or prints), ``urls`` (the one rule for credentials in
URLs), ``paths`` (what a path is when it is no regular file), ``ids`` (a file's ids checked against a dataset's),
``runs`` (run tables and TREC files in trec_eval order), ``run_identity`` and ``output_folder`` (one
readable name per evaluation; result folders checked first and published whole), ``child`` (helper
servers that die with their parent), ``stop`` (SIGTERM as an exception, seen by every thread).

The face imports nothing: ``irflow --help`` and every stage import the modules they need directly.
"""

__all__ = [
    "atomic",
    "child",
    "config",
    "http_client",
    "ids",
    "output_folder",
    "paths",
    "progress",
    "redact",
    "run_identity",
    "runs",
    "schema",
    "stop",
    "urls",
]
