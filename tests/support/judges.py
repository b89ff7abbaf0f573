"""A lenient judge and a few human labels over the demo dataset techdocs, as stored datasets."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from irflow.tasks import ingest


def techdocs_judge_and_human(folder: Path, *, human_queries: int = 30, seed: int = 26) -> tuple[str, str]:
    """Store ``td-judge`` (techdocs' qrels with a third of the grade-0 judgements raised to 1 and a third of
    the others raised by one) and ``td-human`` (techdocs' own qrels of its first ``human_queries`` queries);
    returns their names."""
    qrels = ingest.load_dataset("techdocs").qrels.sort_values(["query_id", "doc_id"], ignore_index=True)
    rng = np.random.default_rng(seed)
    raised = rng.random(len(qrels)) < 1 / 3
    judge = qrels.assign(relevance=np.where(raised, np.minimum(qrels["relevance"] + 1, 3), qrels["relevance"]))
    first = sorted(qrels["query_id"].unique())[:human_queries]
    human = qrels[qrels["query_id"].isin(first)]
    names = []
    for name, table in (("td-judge", judge), ("td-human", human)):
        path = folder / f"{name}.qrels"
        lines = [f"{q} 0 {d} {g}" for q, d, g in table[["query_id", "doc_id", "relevance"]].itertuples(index=False)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        ingest.import_dataset(path, "trec-qrels", name, base="techdocs")
        names.append(name)
    return names[0], names[1]
