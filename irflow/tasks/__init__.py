"""irflow's stages as pure functions: no Prefect, no MLflow outside ``tracking``; plain data in and out.

One package per stage, read bottom-up like the pipeline (each may import only those below it; the
import-linter contract in ``pyproject.toml`` keeps it so):

``core`` → ``ingest`` → ``systems`` → ``metrics`` → ``embed`` → ``index`` → ``retrieve`` → ``compare`` →
``report`` | ``tracking`` → ``annotate`` → ``evalsets`` → ``rag`` | ``online`` → ``experiment`` (an
experiment file: datasets × systems × metrics, validated before anything runs). Each package's
``__init__`` is its face: what the stage does and its public names (``__all__``).
"""

__all__ = [
    "annotate",
    "compare",
    "core",
    "embed",
    "evalsets",
    "experiment",
    "index",
    "ingest",
    "metrics",
    "online",
    "rag",
    "report",
    "retrieve",
    "systems",
    "tracking",
]
