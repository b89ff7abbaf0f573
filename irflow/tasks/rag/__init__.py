"""irflow rag stage: evaluate the answer, not only the ranking.

A RAG pipeline's answers (read from a team's file or generated from irflow systems' top k) are scored
with the metrics RAGAS defines: id-based context precision and recall from the dataset's judgements
(no LLM), and LLM-judged faithfulness, answer relevancy, context precision and recall and factual
correctness. Every LLM call goes through an :data:`~irflow.tasks.rag.samples.Ask`.

Modules: ``samples`` (the shared types), ``answers`` (answers files, top-k contexts, reference answers),
``generate`` (extractive, Python and LLM generators; the versioned prompt), ``llm`` (the cached, counted
production ``Ask`` over :mod:`irflow.tasks.llm`'s clients), ``id_based`` and ``judged`` (with ``prompts``:
the metrics), ``score`` (values, failures, CIs, judge noise, paired tests), ``outputs`` (the result folder
and the report's Answers section), ``plan`` (``--dry-run``), ``calibrate`` (judges calibrated by human
verdicts).
"""

from __future__ import annotations

from irflow.tasks.rag.answers import AnswerFile, read_answers, top_contexts
from irflow.tasks.rag.generate import Generator, generate, parse_generator
from irflow.tasks.rag.id_based import ID_METRICS, id_based
from irflow.tasks.rag.judged import LLM_METRICS, Judged, judge
from irflow.tasks.rag.llm import CachedAsk, Usage
from irflow.tasks.rag.outputs import write_rag_outputs
from irflow.tasks.rag.samples import Answer, Ask, Context, Prompt, Reply
from irflow.tasks.rag.score import Configuration, Scores, paired_tests, score, summary

__all__ = [
    "ID_METRICS",
    "LLM_METRICS",
    "Answer",
    "AnswerFile",
    "Ask",
    "CachedAsk",
    "Configuration",
    "Context",
    "Generator",
    "Judged",
    "Prompt",
    "Reply",
    "Scores",
    "Usage",
    "generate",
    "id_based",
    "judge",
    "paired_tests",
    "parse_generator",
    "read_answers",
    "score",
    "summary",
    "top_contexts",
    "write_rag_outputs",
]
