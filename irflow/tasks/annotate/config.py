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

# The judge spec grammar for --help and parse errors: here, not in judges.py, so that `irflow --help`
# imports no pandas (judges.py imports the judges and their battles).
JUDGE_HELP = """\
judge specs (kind[(options)]:target):
  openai:MODEL[@BASE_URL]      OpenAI-compatible chat API, e.g. openai:gpt-4o-mini,
                               openai:qwen2.5@http://127.0.0.1:8000/v1 (vLLM, Ollama, ...)
                               options: name, concurrency, price, key_env (default OPENAI_API_KEY), max_retries,
                               backoff, timeout, max_tokens, max_chars, response_format=json_object|json_schema|none,
                               reasoning=auto|yes|no (o-series and gpt-5: max_completion_tokens 4000, no temperature),
                               rpm, tpm (requests and tokens per minute the key may spend: waits instead of 429s)
  anthropic:MODEL              Claude via the anthropic SDK (pip install 'irflow[anthropic]'; ANTHROPIC_API_KEY)
  gemini:MODEL                 Gemini via the google-genai SDK (pip install 'irflow[gemini]'; GEMINI_API_KEY)
                               options of both: name, concurrency, price, key_env, max_tokens, max_chars, base_url
  model:MODEL                  local: an irflow relevance model, e.g. model:minilm (options: name, scale)
  system:SPEC                  local: an irflow system's scores, e.g. system:bm25 (options: name, scale, depth)"""


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
