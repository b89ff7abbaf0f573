"""The settings of one annotation and their defaults, in one place (stdlib only: the CLI imports it).

``irflow annotate`` builds its argparse defaults from :class:`AnnotateConfig`, and the ``annotate``
flow takes one; the algorithm modules take their defaults from here too (``pairs``, ``bradley_terry``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_JUDGES = ("model:minilm", "system:bm25")  # an offline ensemble
DEFAULT_K = 20  # candidates per query
DEFAULT_CYCLES = 4  # random cycles per query: ~2 x cycles battles a document
DEFAULT_PRIOR = 1.0  # Bradley-Terry prior: virtual battles per document


def default_output(dataset: str) -> Path:
    """Where an annotation of ``dataset`` goes unless told otherwise."""
    return Path("results") / "annotate" / dataset.replace("/", "_")


@dataclass(frozen=True)
class AnnotateConfig:
    """Settings of one annotation: the one source of their defaults (``irflow annotate`` and the flow
    both build one). ``output`` empty = :func:`default_output`; ``system`` None = the dataset's own
    candidates table (zbench import); ``k`` None = every candidate."""

    dataset: str
    output: str = ""
    split: str | None = None
    system: str | None = None
    k: int | None = DEFAULT_K
    queries: int | None = None
    judges: tuple[str, ...] = DEFAULT_JUDGES
    cycles: int = DEFAULT_CYCLES
    seed: int = 0
    ensemble: str = "vote"
    prior: float = DEFAULT_PRIOR
    price_per_1k: float | None = None
    benchmark: tuple[str, ...] = ()
    ks: tuple[int, ...] = (5, 10)

    def __post_init__(self) -> None:
        if not self.output:
            object.__setattr__(self, "output", str(default_output(self.dataset)))
        object.__setattr__(self, "judges", tuple(self.judges))
        object.__setattr__(self, "benchmark", tuple(self.benchmark))
