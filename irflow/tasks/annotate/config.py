"""The settings of one annotation and their defaults, in one place (stdlib only: the CLI imports it).

``irflow annotate`` builds its argparse defaults from :class:`AnnotateConfig`, and the ``annotate``
flow takes one; the algorithm modules take their defaults from here too (``pairs``, ``bradley_terry``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXPERIMENT = "irflow-annotate"  # the MLflow experiment of annotations

DEFAULT_JUDGES = ("model:minilm", "system:bm25")  # an offline ensemble
# Named ensembles a --judge preset:NAME expands to. zbench: one model of each of zbench's three providers,
# each with the parameters its kind needs (gpt-5-mini: max_completion_tokens and no temperature; Claude: a
# thinking budget inside max_tokens; Gemini 2.5: a thinking budget on top of the answer's tokens).
PRESETS = {
    "zbench": (
        "openai:gpt-5-mini",
        "anthropic(thinking=1024):claude-sonnet-4-5",
        "gemini(thinking=1024):gemini-2.5-flash",
    ),
}
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
  anthropic:MODEL              Claude via Anthropic's Messages API (ANTHROPIC_API_KEY)
  gemini:MODEL                 Gemini via the Gemini API's generateContent (GEMINI_API_KEY)
                               options of both: name, concurrency, price, key_env, max_retries, backoff, timeout,
                               max_tokens, max_chars, rpm, tpm, base_url
                               thinking=TOKENS|auto|0: a thinking budget (Claude: >= 1024, off unless set;
                               Gemini 2.5+: 1024 by default, on top of max_tokens' answer budget)
  preset:zbench                zbench's ensemble: openai:gpt-5-mini, anthropic(thinking=1024):claude-sonnet-4-5,
                               gemini(thinking=1024):gemini-2.5-flash (keys in OPENAI_/ANTHROPIC_/GEMINI_API_KEY)
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
    anchors: int = 0  # cross-query anchors per query (0: grades stay relative to each query's best)
    anchor_threshold: float = 0.75  # P(beats the anchors) a document needs to keep a grade above 0

    def __post_init__(self) -> None:
        if not self.output:
            object.__setattr__(self, "output", str(default_output(self.dataset)))
        object.__setattr__(self, "judges", expand_presets(self.judges))
        object.__setattr__(self, "benchmark", tuple(self.benchmark))


def expand_presets(judges: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The judge specs with every ``preset:NAME`` replaced by the ensemble it names (see :data:`PRESETS`)."""
    expanded: list[str] = []
    for spec in judges:
        kind, _, name = str(spec).strip().partition(":")
        if kind != "preset":
            expanded.append(spec)
        elif name in PRESETS:
            expanded.extend(PRESETS[name])
        else:
            from irflow.tasks.core.schema import UnknownNameError

            raise UnknownNameError(f"unknown judge preset {name!r}; presets: {', '.join(PRESETS)}")
    return tuple(expanded)
