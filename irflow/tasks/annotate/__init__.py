"""zELO relevance annotation: pairwise battles judged by an ensemble, Bradley–Terry scores per document.

Modules: ``candidates`` (what to annotate), ``pairs`` (seeded random cycles), ``battle`` (battle, verdict,
the Judge protocol, the versioned prompt), ``llm_judges`` (clients of :mod:`irflow.tasks.llm` asked the
prompt) and ``local_judges``, ``judges`` (judge
specs), ``runner`` (swaps, semaphores, cost estimate), ``store``
(durable votes, resume), ``ensemble`` (vote fraction or mean score; agreement), ``bradley_terry``
(MM fit), ``outputs`` (zbench JSONL, graded qrels), ``benchmark`` (nDCG, pairwise accuracy,
recall against annotations), ``plots``, and ``pipeline`` (the steps end to end). The method is
zbench's zELO; irflow runs it seeded, resumable, with missing votes counted, and fully offline
with local judges.
"""
