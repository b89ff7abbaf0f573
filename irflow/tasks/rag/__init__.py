"""irflow rag stage: evaluate the answer, not only the ranking.

A RAG pipeline's answers (read from a team's file or generated from irflow systems' top k) are scored
with the metrics RAGAS defines: id-based context precision and recall from the dataset's judgements
(no LLM), and LLM-judged faithfulness, answer relevancy, context precision and recall and factual
correctness. Every LLM call goes through an :data:`~irflow.tasks.rag.samples.Ask`.
"""

from __future__ import annotations

from irflow.tasks.rag.samples import Answer, Ask, Context, Prompt, Reply

__all__ = ["Answer", "Ask", "Context", "Prompt", "Reply"]
