"""Judge specs: parse ``kind[(options)]:target`` and make the judge it names.

What a judge sees and says (``Battle``, ``Verdict``, the ``Judge`` protocol, the versioned
prompt) lives in :mod:`~irflow.tasks.annotate.battle`; the judges themselves in
:mod:`~irflow.tasks.annotate.llm_judges` (over the clients and the spec grammar of :mod:`irflow.tasks.llm`)
and :mod:`~irflow.tasks.annotate.local_judges`.

Kinds (spec strings for :func:`parse_judge`, ``kind[(options)]:target``):

* ``openai:MODEL[@BASE_URL]`` — any OpenAI-compatible chat API (OpenAI, vLLM, Ollama, LM Studio...)
  over irflow's HTTP client layer: retries on 429, 5xx and transport errors (``Retry-After``
  honoured), a refused key stops the run, ``rpm``/``tpm`` limits (requests and tokens per minute);
  key from ``$OPENAI_API_KEY`` (option ``key_env``), optional for local servers.
* ``anthropic:MODEL`` and ``gemini:MODEL`` — Anthropic's Messages API and Gemini's generateContent over
  the same layer (no SDK); keys from ``$ANTHROPIC_API_KEY`` and ``$GEMINI_API_KEY``.
* ``model:MODEL`` — a local judge from any irflow relevance model (``embed.inference.score_pairs``:
  cross-encoder score or bi-encoder cosine); ``system:SPEC`` — from the scores of any irflow
  system's run (``tasks.retrieve``). Scores are standardised per query (z-scores over the
  query's candidates, so judges on different scales are comparable) and the preference is
  ``tanh(scale · (z_B − z_A))``: negative when A scores higher.

Options: ``name``, ``concurrency`` (calls in flight per provider), ``price`` (USD per 1k tokens,
for ``--dry-run``), ``key_env``, ``max_retries``, ``timeout``, ``max_tokens``, ``max_chars``,
``rpm``/``tpm``, ``response_format`` (json_object | json_schema | none; openai), ``base_url`` and
``thinking`` (anthropic, gemini: a thinking budget in tokens, ``auto`` or 0 = off), ``scale``, ``depth``.
API keys are read from the environment at call time and never logged, stored or shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from irflow.tasks.annotate.battle import Judge
from irflow.tasks.annotate.config import JUDGE_HELP
from irflow.tasks.annotate.llm_judges import LLMJudge
from irflow.tasks.annotate.local_judges import ScoreJudge, model_scores, system_scores
from irflow.tasks.core.schema import Dataset, InputError, UnknownNameError
from irflow.tasks.llm import LLM_KINDS, LLMSpec, make_client, parse_llm

KINDS = (*LLM_KINDS, "model", "system")


class JudgeSpec(LLMSpec):
    """A parsed judge spec: ``kind`` (an LLM kind, ``model`` or ``system``), ``target`` and options."""


_SPEC = re.compile(r"^(?P<kind>[a-z]+)(?:\((?P<options>[^()]*)\))?:(?P<target>.+)$")
_LOCAL_OPTIONS = {"model": {"name", "scale"}, "system": {"name", "scale", "depth"}}


def parse_judge(text: str, argument: str = "--judge") -> JudgeSpec:
    """Parse a judge spec string (see ``JUDGE_HELP``); InputError / UnknownNameError on a bad one, and
    :class:`~irflow.tasks.core.urls.CredentialsInUrlError` naming ``argument`` when an LLM judge's base URL
    (or ``OPENAI_BASE_URL``) carries credentials (the LLM kinds are :func:`irflow.tasks.llm.parse_llm`'s)."""
    match = _SPEC.match(str(text).strip())
    if not match:
        raise InputError(f"bad judge spec {text!r}\n{JUDGE_HELP}")
    kind, target = match["kind"], match["target"].strip()
    if kind not in KINDS:
        raise UnknownNameError(
            f"unknown judge kind {kind!r} in {text!r}; valid kinds: {', '.join(KINDS)}\n{JUDGE_HELP}"
        )
    if kind in LLM_KINDS:
        llm = parse_llm(text, argument)
        return JudgeSpec(llm.kind, llm.target, llm.options)
    options = []
    for item in filter(None, (s.strip() for s in (match["options"] or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in _LOCAL_OPTIONS[kind]:
            raise InputError(
                f"bad option {item!r} in judge spec {text!r}; {kind} options: {', '.join(sorted(_LOCAL_OPTIONS[kind]))}"
            )
        options.append((key.strip(), value.strip()))
    return JudgeSpec(kind, target, tuple(options))


def make_judge(
    spec: JudgeSpec | str,
    *,
    dataset: Dataset | None = None,
    candidates: pd.DataFrame | None = None,
    price_per_1k: float | None = None,
) -> Judge:
    """A judge from its spec. Nothing is called or loaded yet (``prepare`` does that), so a dry run is
    free; local kinds need ``dataset`` and ``candidates`` to score later."""
    spec = parse_judge(spec) if isinstance(spec, str) else spec
    opt = dict(spec.options)
    if spec.kind in LLM_KINDS:
        return LLMJudge(
            make_client(LLMSpec(spec.kind, spec.target, spec.options), role="judge", price_per_1k=price_per_1k)
        )
    numbers: dict[str, Callable[[str], int | float]] = {"depth": int, "scale": float}
    try:
        kw: dict[str, Any] = {k: numbers[k](v) if k in numbers else v for k, v in opt.items()}
    except ValueError as err:
        raise InputError(f"bad option value in judge spec {spec}: {err}") from None
    if dataset is None or candidates is None:
        raise InputError(f"the local judge {spec} needs the dataset and its candidates")
    scale = kw.get("scale", 1.0)
    if spec.kind == "model":
        model = spec.target
        return ScoreJudge(
            kw.get("name", f"model:{model}"), lambda: model_scores(dataset, candidates, model), scale, {"model": model}
        )
    from irflow.tasks.systems.specs import as_spec

    system, depth = str(as_spec(spec.target)), kw.get("depth", 1000)
    return ScoreJudge(
        kw.get("name", f"system:{system}"),
        lambda: system_scores(dataset, candidates, system, depth),
        scale,
        {"system": system, "depth": depth},
    )
