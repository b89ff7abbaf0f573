"""irflow evaluation sets: build and keep an evaluation set that stands for a team's traffic.

Public API::

    from irflow.tasks.evalsets import pool, write_pool, synthesize, drift

Modules: ``pool`` (TREC pooling of several systems' top k into a judging sheet and a zbench file;
agreement of judges: Cohen's kappa, Krippendorff's alpha), ``agreement`` (a judge's grades against
human grades: confusion, kappa, alpha, per-grade precision and recall, bias), ``synthesize`` and ``synthesize_llm``
(synthetic queries written by an LLM about sampled documents, kept when a retriever finds their
source), ``drift`` (has the query traffic moved away from the evaluation set?). Query logs and click
logs become datasets through ``irflow.tasks.ingest`` (formats ``querylog`` and ``clicks``), filled
sheets through its ``sheet`` format.
"""

from __future__ import annotations

from irflow.tasks.evalsets.agreement import judge_agreement
from irflow.tasks.evalsets.drift import DriftCheck, DriftReport, drift
from irflow.tasks.evalsets.pool import agreement_table, cohen_kappa, krippendorff_alpha, pool, write_pool
from irflow.tasks.evalsets.synthesize import SynthesisConfig, synthesize

__all__ = [
    "DriftCheck",
    "DriftReport",
    "SynthesisConfig",
    "agreement_table",
    "cohen_kappa",
    "drift",
    "judge_agreement",
    "krippendorff_alpha",
    "pool",
    "synthesize",
    "write_pool",
]
