"""Simulated users: clicks on a shown list from the true grades of its documents, by a click model.

Two models (Chuklin, Markov & de Rijke 2015, "Click Models for Web Search", ch. 3):

* ``pbm`` — position-based: a result at position k is clicked with probability θ_k · γ(grade), each
  position independently; θ_k = (1/k)^η (Joachims, Swaminathan & Schnabel, WSDM 2017) or the
  examination fitted on a real click log (``pbm:log=FILE``, the EM of :mod:`irflow.tasks.ingest.clicks`).
* ``cascade`` — the user reads top-down, clicks a result with probability γ(grade) and then stops with
  probability stop(grade) (Craswell et al., WSDM 2008: stop = 1, the default; stop < 1 is the dependent
  click model of Guo et al., WSDM 2009).

γ by grade comes from the click-log module: a result of house grade g (0–3) is clicked when examined at the
middle of the attractiveness band that module maps back to g (its ``THRESHOLDS`` 0.5/0.25/0.1), so a log
simulated here and imported with ``--format clicks`` is graded back as the dataset was. A dataset's grades
are scaled to the house scale first (grade · 3 / its highest grade, rounded): SciFact's 1 is a 3.

Spec strings: ``pbm``, ``pbm:eta=0.8``, ``pbm:gamma=0.05/0.2/0.4/0.8``, ``pbm:log=clicks.csv``,
``cascade``, ``cascade:stop=0.6``, ``cascade:gamma=…,stop=0.2/0.4/0.6/0.8`` (one value per grade 0–3,
or one for all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest.clicks import THRESHOLDS, fit_pbm, read_click_log

KINDS = ("pbm", "cascade")
MAX_GRADE = 3


def default_attractiveness() -> tuple[float, ...]:
    """γ for house grades 0–3: the middle of each band of the click-log module's grade thresholds."""
    bands = (0.0, *sorted(THRESHOLDS), 1.0)
    return tuple(round((bands[g] + bands[g + 1]) / 2, 6) for g in range(MAX_GRADE + 1))


@dataclass(frozen=True)
class ClickModel:
    """A click model with its parameters (γ and stop per house grade 0–3, θ per position)."""

    kind: str
    attractiveness: tuple[float, ...] = field(default_factory=default_attractiveness)
    eta: float = 1.0
    examination: tuple[float, ...] | None = None  # θ_1.. fitted on a log (beyond it: its last value)
    stop: tuple[float, ...] = (1.0,) * (MAX_GRADE + 1)
    source: str | None = None  # the click log θ was fitted on

    def theta(self, k: int) -> np.ndarray:
        """θ_1 … θ_k (PBM examination; a cascade examines by reading, θ = 1)."""
        if self.kind == "cascade":
            return np.ones(k)
        if self.examination is not None:
            fitted = np.asarray(self.examination)
            return np.concatenate([fitted, np.full(max(0, k - len(fitted)), fitted[-1])])[:k]
        return 1.0 / np.arange(1, k + 1) ** self.eta

    def describe(self) -> dict[str, Any]:
        """The parameters as recorded in metrics.json and MLflow."""
        out: dict[str, Any] = {"kind": self.kind, "attractiveness": list(self.attractiveness)}
        if self.kind == "pbm":
            out["examination"] = [round(float(t), 6) for t in self.theta(10)]
            out["eta" if self.examination is None else "log"] = self.eta if self.examination is None else self.source
        else:
            out["stop"] = list(self.stop)
        return out

    def clicks(self, grades: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clicks (bool, impressions × positions) on lists whose documents have house ``grades``
        (−1: no document at that position)."""
        grades = np.asarray(grades)
        shown = grades >= 0
        gamma = np.asarray(self.attractiveness)[np.clip(grades, 0, MAX_GRADE)]
        if self.kind == "pbm":
            return shown & (rng.random(grades.shape) < self.theta(grades.shape[1]) * gamma)
        stop = np.asarray(self.stop)[np.clip(grades, 0, MAX_GRADE)]
        clicked = np.zeros(grades.shape, dtype=bool)
        reading = np.ones(grades.shape[0], dtype=bool)
        for k in range(grades.shape[1]):
            clicked[:, k] = reading & shown[:, k] & (rng.random(grades.shape[0]) < gamma[:, k])
            reading &= ~(clicked[:, k] & (rng.random(grades.shape[0]) < stop[:, k]))
        return clicked


def parse_click_model(spec: str) -> ClickModel:
    """A :class:`ClickModel` from its spec string (see the module); bad specs name what was expected."""
    kind, _, rest = str(spec).strip().partition(":")
    if kind not in KINDS:
        raise InputError(f"--clicks: unknown click model {kind!r}; expected one of {', '.join(KINDS)} (e.g. pbm)")
    allowed = {"pbm": ("gamma", "eta", "log"), "cascade": ("gamma", "stop")}[kind]
    options: dict[str, str] = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in allowed:
            raise InputError(f"--clicks {spec!r}: expected {kind}:NAME=VALUE with NAME one of {', '.join(allowed)}")
        options[key.strip()] = value.strip()
    model = ClickModel(kind)
    if "gamma" in options:
        model = ClickModel(kind, attractiveness=_per_grade(options["gamma"], "gamma", spec))
    if "stop" in options:
        model = ClickModel(kind, model.attractiveness, stop=_per_grade(options["stop"], "stop", spec))
    if "eta" in options:
        try:
            eta = float(options["eta"])
        except ValueError:
            eta = -1.0
        if not 0 <= eta <= 10:
            raise InputError(f"--clicks {spec!r}: eta expects a number in [0, 10], got {options['eta']!r}")
        model = ClickModel(kind, model.attractiveness, eta=eta)
    if "log" in options:
        if "eta" in options:
            raise InputError(f"--clicks {spec!r}: give eta or log (θ fitted on a click log), not both")
        theta = fit_pbm(read_click_log(options["log"])).examination
        model = ClickModel(kind, model.attractiveness, examination=tuple(theta.to_numpy()), source=options["log"])
    return model


def _per_grade(text: str, name: str, spec: str) -> tuple[float, ...]:
    try:
        values = [float(v) for v in text.split("/")]
    except ValueError:
        values = []
    if len(values) == 1:
        values *= MAX_GRADE + 1
    if len(values) != MAX_GRADE + 1 or not all(0 <= v <= 1 for v in values):
        raise InputError(
            f"--clicks {spec!r}: {name} expects one probability or four (grades 0/1/2/3, e.g. 0.05/0.2/0.4/0.8), "
            f"got {text!r}"
        )
    return tuple(values)


def house_grades(qrels: pd.DataFrame) -> dict[tuple[str, str], int]:
    """(query_id, doc_id) → the grade on the house scale 0–3 (grade · 3 / the dataset's highest grade)."""
    top = max(1, int(qrels["relevance"].max())) if len(qrels) else 1
    scaled = np.rint(np.clip(qrels["relevance"].to_numpy(), 0, None) * MAX_GRADE / top).astype(int)
    return dict(zip(zip(qrels["query_id"].astype(str), qrels["doc_id"].astype(str), strict=True), scaled, strict=True))


__all__ = ["KINDS", "ClickModel", "default_attractiveness", "house_grades", "parse_click_model"]
