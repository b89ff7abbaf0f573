"""The ``irflow`` command line: one module per command group, assembled by :mod:`irflow.cli.main`.

``datasets`` (list, download, info, import; ``synthesize`` and the ``querylog`` options beside it),
``run``, ``report``, ``orchestration`` (compare, suite, nightly), ``annotate``, ``pool`` (pool,
agreement), ``drift``; ``terminal`` is what every command prints. Commands parse and print, and call
the flows (``irflow.flows``) or the stage functions (``irflow.tasks``), imported when they run.
"""

from __future__ import annotations

from irflow.cli.main import build_parser, entry_point, main

__all__ = ["build_parser", "entry_point", "main"]
