"""Drift of production queries away from the evaluation set: is the set still the traffic it stands for?

Four views of a current query sample against the reference queries (an evaluation dataset):

* **meaning** — the maximum mean discrepancy between the two samples' embeddings (Gretton et al.,
  JMLR 2012), MMD² with a Gaussian kernel at the median pairwise distance, and its permutation
  p-value (the samples' labels shuffled ``permutations`` times, seeded; p = (count + 1)/(n + 1));
  at most :data:`MAX_MMD_QUERIES` per side (a seeded sample beyond). Current queries identical to a
  reference query (spaces and case aside) are left out of this sample: a repeated query is the same
  point on both sides and only pulls the two samples together, so 30 repeated techdocs queries hid 10
  cooking questions (p 0.98 with them, 0.001 without);
* **length** — tokens per query, two-sample Kolmogorov–Smirnov test;
* **vocabulary** — the share of current tokens never seen in the reference queries, and the
  Jensen–Shannon divergence (base 2, in [0, 1]) of the two unigram distributions;
* **unseen topics** — each current query's cosine similarity to its nearest reference query;
  those below the ``unseen_quantile`` (5 %) quantile of the reference queries' own leave-one-out
  similarities are listed as topics the evaluation set does not cover (a threshold calibrated on
  the set itself: a fixed cosine would mean different things for different models and domains).
  Without drift about 5 % of current queries fall below it; :func:`unseen_topic_test` gives the
  one-sided p-value of the observed count (a binomial test whose rate carries the threshold's own
  uncertainty: beta-binomial, see there).

The verdict is drift when either test rejects, Bonferroni-corrected: the meaning p-value or the
unseen-topic p-value below ``alpha / 2`` (``combined_p_value`` = min(1, 2 · min of the two) < ``alpha``).
``alpha`` is 0.01 by default: a nightly check runs every day, so a false alarm should be rare.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from irflow.tasks.core.schema import InputError

_TOKEN = re.compile(r"\w+", re.UNICODE)
MAX_MMD_QUERIES = 2000  # per side: the kernel matrix grows with the square (a seeded sample beyond)


@dataclass(frozen=True)
class DriftReport:
    """The drift verdict and the figures behind it (``as_dict`` for JSON)."""

    reference_queries: int
    current_queries: int
    mmd2: float
    p_value: float
    permutations: int
    length_ks: float
    length_p_value: float
    reference_mean_tokens: float
    current_mean_tokens: float
    unseen_token_share: float
    vocabulary_js: float
    unseen_topic_share: float
    unseen_threshold: float
    alpha: float
    drift: bool
    unseen_topic_p_value: float
    combined_p_value: float
    repeated_queries: int
    unseen_examples: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _tests(self) -> str:
        return (
            f"MMD² {self.mmd2:.4f}, permutation p {self.p_value:.4f}; {self.unseen_topic_share:.0%} on topics "
            f"the set does not cover, p {self.unseen_topic_p_value:.4f}"
        )

    def _correction(self) -> str:
        return f"Bonferroni: drift when either p < alpha/2 = {self.alpha / 2:g}; combined p {self.combined_p_value:.4f}"

    def _repeats(self) -> str:
        if not self.repeated_queries:
            return ""
        kept = self.current_queries - self.repeated_queries
        if kept < 2:
            which = "every current query repeats a reference one" if not kept else "all current queries but one repeat"
            return f"; {which}: no meaning test (MMD² 0, p 1)"
        return f"; {self.repeated_queries} current queries repeat reference ones, left out of the meaning test"

    def text(self) -> str:
        verdict = "DRIFT" if self.drift else "no drift"
        return "\n".join(
            [
                f"{verdict}: meaning MMD² {self.mmd2:.4f}, permutation p {self.p_value:.4f}; unseen topics p "
                f"{self.unseen_topic_p_value:.4f} (alpha {self.alpha}, {self._correction()}); "
                f"{self.current_queries} current vs {self.reference_queries} reference queries{self._repeats()}",
                f"length: {self.current_mean_tokens:.1f} vs {self.reference_mean_tokens:.1f} tokens per query "
                f"(KS {self.length_ks:.3f}, p {self.length_p_value:.4f})",
                f"vocabulary: {self.unseen_token_share:.1%} of current tokens unseen in the reference, "
                f"Jensen-Shannon {self.vocabulary_js:.3f}",
                f"unseen topics: {self.unseen_topic_share:.1%} of current queries are farther from the set than "
                f"its own queries are from each other (nearest similarity < {self.unseen_threshold:.2f})",
                *(f"  {e['similarity']:.2f}  {e['query']}" for e in self.unseen_examples),
            ]
        )

    def alert(self, reference: str, current: str) -> str:
        """One line for an alert: what drifted from what, with the evidence."""
        return (
            f"queries of {current} drifted from evaluation set {reference}: {self._tests()} "
            f"(either < {self.alpha / 2:g}, Bonferroni at alpha {self.alpha}); {self.unseen_token_share:.0%} of "
            f"their tokens unseen"
        )

    def verdict(self, reference: str, current: str) -> str:
        """One line either way: the alert when the queries drifted, else that they still match."""
        if self.drift:
            return self.alert(reference, current)
        return (
            f"no query drift: {current} still matches evaluation set {reference} ({self._tests()}; both >= "
            f"{self.alpha / 2:g}, Bonferroni at alpha {self.alpha})"
        )

    def markdown(self, reference: str, current: str) -> str:
        """A report section (nightly.md, a Prefect artifact): the verdict and the four views."""
        verdict = "**drift**" if self.drift else "no drift"
        rows = [
            ("meaning (MMD², permutation p)", f"{self.mmd2:.4f}", f"{self.p_value:.4f}"),
            ("length (KS)", f"{self.length_ks:.3f}", f"{self.length_p_value:.4f}"),
            ("unseen tokens / vocabulary JS", f"{self.unseen_token_share:.1%}", f"{self.vocabulary_js:.3f}"),
            (
                f"queries on uncovered topics (nearest < {self.unseen_threshold:.2f}; binomial p)",
                f"{self.unseen_topic_share:.1%}",
                f"{self.unseen_topic_p_value:.4f}",
            ),
        ]
        lines = [
            "## Query drift",
            "",
            f"{verdict} (alpha {self.alpha}): {self.current_queries} queries of `{current}` against "
            f"{self.reference_queries} of `{reference}`{self._repeats()}. Two tests, {self._correction()}.",
            "",
            "| view | value | p / threshold |",
            "|---|---:|---:|",
            *(f"| {a} | {b} | {c} |" for a, b, c in rows),
        ]
        if self.unseen_examples:
            lines += ["", "Farthest current queries:", ""]
            lines += [f"- {e['similarity']:.2f} {e['query']}" for e in self.unseen_examples]
        return "\n".join(lines) + "\n"

    def metrics(self) -> dict[str, float]:
        """Numbers to track (MLflow keys)."""
        return {
            "drift.mmd2": self.mmd2,
            "drift.p_value": self.p_value,
            "drift.length_ks": self.length_ks,
            "drift.unseen_token_share": self.unseen_token_share,
            "drift.vocabulary_js": self.vocabulary_js,
            "drift.unseen_topic_share": self.unseen_topic_share,
            "drift.unseen_topic_p_value": self.unseen_topic_p_value,
            "drift.combined_p_value": self.combined_p_value,
            "drift.repeated_queries": float(self.repeated_queries),
            "drift.detected": float(self.drift),
        }


class DriftCheck(BaseModel):
    """A scheduled drift check (e.g. an experiment's ``drift:`` section for ``irflow nightly``): the
    queries of log ``current`` against those of dataset ``reference``."""

    model_config = ConfigDict(extra="forbid")

    reference: str = Field(description="evaluation dataset whose queries are the reference")
    current: str = Field(description="current query log: CSV/TSV/JSONL/Parquet with a query or text column")
    split: str | None = None
    model: str = Field("minilm", description="embedding model of the meaning test")
    alpha: float = Field(0.01, gt=0, lt=1, description="drift when either test's p-value is below alpha/2")
    permutations: int = Field(1000, ge=1)
    seed: int = 0
    fail: bool = Field(True, description="drift fails the scheduled run (else it is reported only)")

    @classmethod
    def of(cls, **settings: Any) -> DriftCheck:
        """A check from settings; a bad one is an :class:`InputError` naming the setting and what it expects."""
        try:
            return cls(**settings)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
            raise InputError(f"drift check: {problems}") from None

    def run(self) -> tuple[DriftReport, np.ndarray, np.ndarray]:
        """The report and both sides' embeddings (reference, current)."""
        from irflow.tasks.embed.inference import encode
        from irflow.tasks.embed.models import resolve_model
        from irflow.tasks.ingest import load_dataset

        reference = load_dataset(self.reference, self.split).queries["text"].astype(str).tolist()
        current = read_queries(self.current)
        model = resolve_model(self.model)
        prompt = model.prompt("query")
        ref_vectors, cur_vectors = (encode(model, t, prompt=prompt, max_seq_length=None) for t in (reference, current))
        report = drift(
            reference,
            current,
            ref_vectors,
            cur_vectors,
            alpha=self.alpha,
            permutations=self.permutations,
            seed=self.seed,
        )
        return report, ref_vectors, cur_vectors


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(str(text).lower())


def mmd_permutation_test(
    x: np.ndarray, y: np.ndarray, *, permutations: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """MMD² (biased estimator, Gaussian kernel, median-distance bandwidth) and its permutation p-value."""
    if permutations < 1:
        raise InputError(f"permutations must be >= 1, got {permutations}")
    z = np.vstack([x, y]).astype(np.float64)
    squared = np.maximum(((z[:, None, :] - z[None, :, :]) ** 2).sum(axis=-1), 0.0)
    off_diagonal = squared[np.triu_indices(len(z), k=1)]
    bandwidth = float(np.median(off_diagonal)) or 1.0
    kernel = np.exp(-squared / bandwidth)
    n = len(x)

    def mmd2(labels: np.ndarray) -> float:
        a, b = labels, ~labels
        return float(kernel[np.ix_(a, a)].mean() + kernel[np.ix_(b, b)].mean() - 2 * kernel[np.ix_(a, b)].mean())

    first = np.zeros(len(z), dtype=bool)
    first[:n] = True
    observed = mmd2(first)
    rng = np.random.default_rng(seed)
    count = sum(mmd2(first[rng.permutation(len(z))]) >= observed - 1e-12 for _ in range(permutations))
    return observed, (count + 1) / (permutations + 1)


def _js(p: Counter[str], q: Counter[str]) -> float:
    vocabulary = sorted(set(p) | set(q))
    a = np.array([p[t] for t in vocabulary], dtype=np.float64)
    b = np.array([q[t] for t in vocabulary], dtype=np.float64)
    a, b = a / a.sum(), b / b.sum()
    m = (a + b) / 2

    def kl(u: np.ndarray) -> float:
        mask = u > 0
        return float((u[mask] * np.log2(u[mask] / m[mask])).sum())

    return (kl(a) + kl(b)) / 2


def query_key(text: str) -> str:
    """A query's identity for repeats: spaces collapsed, case folded (MiniLM's vocabulary is uncased)."""
    return " ".join(str(text).split()).casefold()


def unseen_topic_test(within: np.ndarray, nearest: np.ndarray, quantile: float = 0.05) -> tuple[float, float, float]:
    """Threshold, share of ``nearest`` below it, and the one-sided p-value of that share.

    The threshold is the ``quantile`` of the reference queries' own leave-one-out similarities ``within``.
    Were it the true quantile, the count below it would be Binomial(n, quantile); but it is estimated from
    m reference values, and its true level varies from split to split (at m = 40, 5 % ± 3.4 %), which made
    a plain binomial test reject 17 % of same-distribution splits at 0.05. Under exchangeability the
    threshold lies below r of the reference values and the count of n current values below the r-th smallest
    of m is BetaBinomial(n, r, m − r + 1) (Wilks 1962): the binomial with its rate drawn from the order
    statistic's Beta distribution. r counts the reference values strictly below the threshold, plus one,
    so the p-value is conservative when the interpolated threshold falls between two values."""
    from scipy import stats  # lazily, as in drift()

    threshold = float(np.quantile(within, quantile))
    below = int(np.count_nonzero(nearest < threshold))
    r = int(np.count_nonzero(within < threshold)) + 1
    p = float(stats.betabinom(len(nearest), r, len(within) - r + 1).sf(below - 1)) if below else 1.0
    return threshold, below / len(nearest), min(1.0, p)


def nearest_similarities(reference: np.ndarray, current: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cosine similarity of each query to its nearest reference query: for the reference queries
    themselves leave-one-out (the baseline an in-distribution query reaches), then for the current ones."""
    within = reference @ reference.T
    np.fill_diagonal(within, -np.inf)
    return within.max(axis=1), (current @ reference.T).max(axis=1)


def drift(
    reference: Sequence[str],
    current: Sequence[str],
    reference_vectors: np.ndarray,
    current_vectors: np.ndarray,
    *,
    alpha: float = 0.01,
    permutations: int = 1000,
    seed: int = 0,
    unseen_quantile: float = 0.05,
    examples: int = 10,
) -> DriftReport:
    """Compare ``current`` queries with ``reference`` ones (texts and their normalised embeddings)."""
    if len(reference) < 2 or len(current) < 2:
        raise InputError(f"drift needs at least 2 queries on each side, got {len(reference)} and {len(current)}")
    if not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1), got {alpha}")
    from scipy import stats  # lazily: an experiment file imports DriftCheck, and scipy.stats takes ~0.8 s

    known = {query_key(t) for t in reference}
    new = np.array([query_key(t) not in known for t in current], dtype=bool)
    rng = np.random.default_rng(seed)
    x, y = (v[rng.choice(len(v), MAX_MMD_QUERIES, replace=False)] if len(v) > MAX_MMD_QUERIES else v
            for v in (reference_vectors, current_vectors[new]))  # fmt: skip
    mmd2, p = mmd_permutation_test(x, y, permutations=permutations, seed=seed) if len(y) >= 2 else (0.0, 1.0)
    ref_tokens, cur_tokens = [tokens(t) for t in reference], [tokens(t) for t in current]
    ref_lengths, cur_lengths = [len(t) for t in ref_tokens], [len(t) for t in cur_tokens]
    ks = stats.ks_2samp(ref_lengths, cur_lengths)
    ref_counts, cur_counts = Counter(t for q in ref_tokens for t in q), Counter(t for q in cur_tokens for t in q)
    total = sum(cur_counts.values()) or 1
    unseen_tokens = sum(n for t, n in cur_counts.items() if t not in ref_counts) / total
    within, nearest = nearest_similarities(reference_vectors, current_vectors)
    unseen_below, unseen_share, unseen_p = unseen_topic_test(within, nearest, unseen_quantile)
    combined = min(1.0, 2 * min(p, unseen_p))
    order = np.argsort(nearest)
    far = [i for i in order if nearest[i] < unseen_below][:examples]
    return DriftReport(
        reference_queries=len(reference),
        current_queries=len(current),
        mmd2=mmd2,
        p_value=p,
        permutations=permutations,
        length_ks=float(ks.statistic),
        length_p_value=float(ks.pvalue),
        reference_mean_tokens=float(np.mean(ref_lengths)),
        current_mean_tokens=float(np.mean(cur_lengths)),
        unseen_token_share=float(unseen_tokens),
        vocabulary_js=_js(ref_counts, cur_counts) if ref_counts and cur_counts else 1.0,
        unseen_topic_share=unseen_share,
        unseen_threshold=unseen_below,
        alpha=alpha,
        drift=combined < alpha,
        unseen_topic_p_value=unseen_p,
        combined_p_value=combined,
        repeated_queries=int(np.count_nonzero(~new)),
        unseen_examples=[{"query": str(current[i]), "similarity": float(nearest[i])} for i in far],
    )


def read_queries(path: str | Path) -> list[str]:
    """Distinct query texts of a log (CSV, TSV, JSONL or Parquet with a ``query`` or ``text`` column),
    normalised for spaces, in first-seen order."""
    from irflow.tasks.ingest.readers import read_log_table

    path = Path(path)
    log = read_log_table(path, "query log")
    column = "query" if "query" in log.columns else "text" if "text" in log.columns else None
    if column is None:
        raise InputError(f"the query log has no query or text column (columns: {list(log.columns)})", path=str(path))
    texts = [" ".join(str(t).split()) for t in log[column]]
    return list(dict.fromkeys(t for t in texts if t))
