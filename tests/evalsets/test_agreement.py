"""Judge against human: figures equal scikit-learn's and the krippendorff package's on the same labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from irflow.tasks.core.schema import InputError
from irflow.tasks.evalsets.agreement import agreement_text, judge_agreement, paired_grades

krippendorff = pytest.importorskip("krippendorff")
metrics = pytest.importorskip("sklearn.metrics")


def _qrels(grades: dict[tuple[str, str], int]) -> pd.DataFrame:
    rows = [(q, d, g) for (q, d), g in grades.items()]
    return pd.DataFrame(rows, columns=["query_id", "doc_id", "relevance"]).astype({"relevance": "int64"})


def _pair(seed: int, units: int = 300) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A human grading 0-2 and a lenient judge: a third of the 0s become 1, some grades move by one."""
    rng = np.random.default_rng(seed)
    human = rng.choice(3, size=units, p=[0.6, 0.25, 0.15])
    judge = human.copy()
    judge[(human == 0) & (rng.random(units) < 1 / 3)] = 1
    moved = rng.random(units) < 0.1
    judge[moved] = np.clip(judge[moved] + rng.choice([-1, 1], size=int(moved.sum())), 0, 2)
    keys = [(f"q{i // 10}", f"d{i}") for i in range(units)]
    return _qrels(dict(zip(keys, judge.tolist(), strict=True))), _qrels(dict(zip(keys, human.tolist(), strict=True)))


@pytest.mark.parametrize("seed", range(5))
def test_figures_equal_scikit_learn_and_krippendorff(seed: int) -> None:
    judge, human = _pair(seed)
    figures = judge_agreement(judge, human)
    h, j = human["relevance"].to_numpy(), judge["relevance"].to_numpy()
    assert figures["kappa"] == pytest.approx(metrics.cohen_kappa_score(h, j), abs=1e-12)
    assert figures["kappa_quadratic"] == pytest.approx(
        metrics.cohen_kappa_score(h, j, weights="quadratic", labels=[0, 1, 2]), abs=1e-12
    )
    expected_alpha = krippendorff.alpha(reliability_data=np.vstack([h, j]), level_of_measurement="ordinal")
    assert figures["alpha_ordinal"] == pytest.approx(expected_alpha, abs=1e-12)
    confusion = metrics.confusion_matrix(h, j, labels=[0, 1, 2])
    assert [[figures["confusion"][str(a)][str(b)] for b in range(3)] for a in range(3)] == confusion.tolist()
    precision, recall, _, support = metrics.precision_recall_fscore_support(h, j, labels=[0, 1, 2], zero_division=0)
    for g in range(3):
        assert figures["per_grade"][str(g)]["precision"] == pytest.approx(precision[g])
        assert figures["per_grade"][str(g)]["recall"] == pytest.approx(recall[g])
        assert figures["per_grade"][str(g)]["support"] == support[g]
    assert figures["bias"] == pytest.approx(j.mean() - h.mean())
    assert figures["bias"] > 0  # the judge is lenient
    assert figures["pairs"] == 300 and figures["queries"] == 30


def test_only_the_shared_pairs_count() -> None:
    judge = _qrels({("q1", "a"): 2, ("q1", "b"): 0, ("q2", "c"): 1})
    human = _qrels({("q1", "a"): 1, ("q1", "b"): 0, ("q3", "z"): 2})
    pairs = paired_grades(judge, human)
    assert pairs[["doc_id", "judge", "human"]].values.tolist() == [["a", 2, 1], ["b", 0, 0]]
    figures = judge_agreement(judge, human)
    assert figures["pairs"] == 2 and figures["bias"] == pytest.approx(0.5)
    assert figures["per_grade"]["2"] == {"precision": 0.0, "recall": None, "support": 0}
    text = agreement_text(figures)
    assert "2 (query, document) pairs" in text and "bias +0.500" in text


def test_one_grade_throughout_is_undefined_not_perfect() -> None:
    same = _qrels({("q1", "a"): 1, ("q1", "b"): 1})
    figures = judge_agreement(same, same)
    assert figures["kappa"] is None and figures["alpha_ordinal"] is None
    assert "undefined" in agreement_text(figures)


def test_no_shared_pair_is_named() -> None:
    with pytest.raises(InputError, match="share no .query, document. pair .1 shared queries"):
        judge_agreement(_qrels({("q1", "a"): 1}), _qrels({("q1", "b"): 1}))
