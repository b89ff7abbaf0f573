"""Measure specifications: the family registry, names, parameters, parsing and MLflow keys.

Each family module (``ndcg``, ``precision``, ...) makes one declaration, a :class:`Family`
(name, cutoff rule, parameters, vectorised ``compute``), and hands it to :func:`register`, as
ir_measures registers its measures. A :class:`Measure` is the immutable spec of one measure of
a registered family. Its canonical string (:attr:`Measure.name`) follows ir_measures' spelling,
``FAMILY(param=value,...)@cutoff``, where parameters at their default are left out and the rest
are listed alphabetically, e.g. ``nDCG@10``, ``nDCG(dcg='exp-log2')@10``, ``P(rel=2)@10``,
``RR``, ``Rprec``; it doubles as the cache key, and :attr:`Measure.key` is the MLflow key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from irflow.tasks.core.schema import UnknownNameError

from ._core import Ranking

__all__ = ["FAMILIES", "Family", "Measure", "expand", "parse_measure", "parse_measures", "register"]

# compute(ranking, measures of the family, relevance level) -> one per-query array per measure
Compute = Callable[[Ranking, Sequence["Measure"], int], list[np.ndarray]]


@dataclass(frozen=True)
class Family:
    """The one declaration of a measure family.

    * ``cutoff`` — whether a measure of the family needs, accepts or refuses ``@k``;
    * ``params`` — the parameters it accepts besides the cutoff (``rel``, ``dcg``);
    * ``depth`` — how deep it reads the ranking: to its cutoff, or to rank R = #relevant (Rprec);
    * ``ideal`` — whether it needs the ideal ranking (nDCG's normaliser) to its cutoff;
    * ``aliases`` — other case-insensitive spellings :func:`parse_measure` accepts;
    * ``condensed`` — whether ``judged_only=True`` (the condensed list) means something for it.
    """

    name: str
    summary: str
    cutoff: Literal["required", "optional", "forbidden"]
    params: tuple[str, ...]
    compute: Compute
    depth: Literal["cutoff", "relevant"] = "cutoff"
    ideal: bool = False
    aliases: tuple[str, ...] = ()
    condensed: bool = True


FAMILIES: dict[str, Family] = {}
_ALIASES: dict[str, str] = {}  # lowercase spelling -> family name


def register(family: Family) -> Family:
    """Add a family to the registry (each family module registers its declaration on import)."""
    FAMILIES[family.name] = family
    for spelling in (family.name, *family.aliases):
        _ALIASES[spelling.lower()] = family.name
    return family


_DCG_VALUES = ("log2", "exp-log2")
MAX_CUTOFF = 2**31 - 1  # beyond any run (irflow's depth is at most 1,000); keeps numpy's int64 arithmetic exact
_DEFAULTS: dict[str, Any] = {"dcg": "log2", "rel": None, "judged_only": False}
_EXAMPLES = "e.g. 'nDCG@10', \"nDCG(dcg='exp-log2')@10\", 'P(rel=2)@10', 'RR', 'Rprec'"


def _valid_families() -> str:
    return ", ".join(FAMILIES)


@dataclass(frozen=True)
class Measure:
    """Immutable spec of one measure.

    * ``family`` — one of :data:`FAMILIES` (``nDCG``, ``P``, ``R``, ``R_cap``, ``RR``, ``AP``,
      ``Success``, ``Rprec``).
    * ``cutoff`` — rank cutoff k (a positive int) or ``None`` for the whole ranking.
    * ``rel`` — minimum grade counted as relevant; ``None`` takes ``evaluate(relevance_level=)``.
      nDCG has no ``rel``: like trec_eval it uses every positive grade as gain.
    * ``dcg`` — nDCG only: ``'log2'`` (gain = grade, trec_eval) or ``'exp-log2'`` (gain = 2^grade − 1).
    * ``judged_only`` — evaluate the condensed list: unjudged documents removed from the run before
      ranking (Sakai 2007, "Alternatives to Bpref"; ir_measures' ``judged_only``), e.g.
      ``nDCG(judged_only=True)@10``. For incomplete judgements; not for Judged or Bpref.
    """

    family: str
    cutoff: int | None = None
    rel: int | None = None
    dcg: str = "log2"
    judged_only: bool = False

    def __post_init__(self) -> None:
        for name in ("cutoff", "rel"):  # accept numpy integers, store plain ints
            v = getattr(self, name)
            if isinstance(v, np.integer):
                object.__setattr__(self, name, int(v))
        fam = FAMILIES.get(self.family)
        if fam is None:
            raise UnknownNameError(
                f"unknown measure family {self.family!r}; valid families: {_valid_families()} ({_EXAMPLES})"
            )
        if self.cutoff is not None:
            if isinstance(self.cutoff, bool) or not isinstance(self.cutoff, int) or self.cutoff < 1:
                raise ValueError(f"{self.family}: cutoff must be a positive int, got {self.cutoff!r}")
            if self.cutoff > MAX_CUTOFF:
                raise ValueError(f"{self.family}: cutoff {self.cutoff} is too large; expected at most {MAX_CUTOFF:,}")
        if fam.cutoff == "required" and self.cutoff is None:
            raise ValueError(f"{self.family} needs a cutoff, e.g. {self.family}@10")
        if fam.cutoff == "forbidden" and self.cutoff is not None:
            raise ValueError(f"{self.family} takes no cutoff (write {self.family!r})")
        if self.rel is not None:
            if "rel" not in fam.params:
                raise ValueError(
                    f"{self.family} takes no 'rel' parameter (trec_eval's nDCG uses every positive grade as gain)"
                )
            if isinstance(self.rel, bool) or not isinstance(self.rel, int) or self.rel < 1:
                raise ValueError(f"{self.family}: rel must be an int >= 1, got {self.rel!r}")
        if not isinstance(self.judged_only, bool):
            raise ValueError(f"{self.family}: judged_only must be True or False, got {self.judged_only!r}")
        if self.judged_only and not fam.condensed:
            raise ValueError(f"{self.family} takes no 'judged_only' parameter (it reads judged documents only already)")
        if self.dcg != "log2":
            if "dcg" not in fam.params:
                raise ValueError(f"{self.family} takes no 'dcg' parameter")
            if self.dcg not in _DCG_VALUES:
                raise ValueError(f"nDCG: dcg must be one of {_DCG_VALUES}, got {self.dcg!r}")

    def relevance(self, level: int) -> int:
        """The minimum grade counted as relevant: the measure's own ``rel``, else evaluate()'s level."""
        return level if self.rel is None else self.rel

    def params(self) -> dict[str, Any]:
        """Parameters that differ from their default, sorted by name."""
        out = {}
        family = FAMILIES[self.family]
        for p in sorted((*family.params, "judged_only") if family.condensed else family.params):
            v = getattr(self, p)
            if v != _DEFAULTS[p]:
                out[p] = v
        return out

    @property
    def name(self) -> str:
        """Canonical name in ir_measures spelling, e.g. ``nDCG(dcg='exp-log2')@10``."""
        s = self.family
        ps = self.params()
        if ps:
            s += "(" + ",".join(f"{k}={v!r}" for k, v in ps.items()) + ")"
        if self.cutoff is not None:
            s += f"@{self.cutoff}"
        return s

    @property
    def key(self) -> str:
        """MLflow-safe key (lowercase, only ``[a-z0-9_]``), e.g. ``ndcg_dcg_exp_log2_at_10``."""
        return re.sub(r"[^a-z0-9]+", "_", self.name.lower().replace("@", "_at_")).strip("_")

    def at(self, cutoff: int | None) -> Measure:
        """The same measure with another cutoff."""
        return replace(self, cutoff=cutoff)

    def __str__(self) -> str:
        return self.name


_NAME_RE = re.compile(r"^\s*(?P<fam>[A-Za-z_]+)\s*(?:\((?P<params>[^()]*)\))?\s*(?:@\s*(?P<k>\d+))?\s*$")
_PARAM_RE = re.compile(r"^\s*(?P<k>[A-Za-z_]+)\s*=\s*(?P<v>'[^']*'|\"[^\"]*\"|[+-]?\d+|True|False)\s*$")


def _bad(name: str, why: str) -> UnknownNameError:
    return UnknownNameError(f"unknown measure {name!r}: {why}; valid families: {_valid_families()} ({_EXAMPLES})")


def parse_measure(name: str | Measure) -> Measure:
    """Parse a canonical measure name (``parse_measure(m.name) == m``).

    Raises :class:`tasks.core.schema.UnknownNameError` listing the valid families for anything that
    is not a measure.
    """
    if isinstance(name, Measure):
        return name
    if not isinstance(name, str):
        raise _bad(repr(name), "not a string")
    m = _NAME_RE.match(name)
    if m is None:
        raise _bad(name, "expected FAMILY[(param=value,...)][@k]")
    fam = _ALIASES.get(m.group("fam").lower())
    if fam is None:
        raise _bad(name, f"no family {m.group('fam')!r}")
    kwargs: dict[str, Any] = {}
    if m.group("params") is not None and m.group("params").strip():
        for part in m.group("params").split(","):
            pm = _PARAM_RE.match(part)
            if pm is None:
                raise _bad(name, f"cannot read parameter {part.strip()!r}")
            key, raw = pm.group("k"), pm.group("v")
            known = (*FAMILIES[fam].params, "judged_only") if FAMILIES[fam].condensed else FAMILIES[fam].params
            if key not in known:
                allowed = ", ".join(known) or "none"
                raise _bad(name, f"{fam} has no parameter {key!r} (allowed: {allowed})")
            if key in kwargs:
                raise _bad(name, f"parameter {key!r} given twice")
            kwargs[key] = raw[1:-1] if raw[0] in "'\"" else raw == "True" if raw in ("True", "False") else int(raw)
    if m.group("k") is not None:
        kwargs["cutoff"] = int(m.group("k"))
    try:
        return Measure(fam, **kwargs)
    except (ValueError, TypeError) as exc:
        raise _bad(name, str(exc)) from None


def parse_measures(names: Iterable[str | Measure]) -> list[Measure]:
    """Parse several names, dropping repeats but keeping the order."""
    if isinstance(names, (str, Measure)):
        names = [names]
    out: dict[Measure, None] = {}
    for n in names:
        out.setdefault(parse_measure(n), None)
    return list(out)


def expand(families: Iterable[str | Measure], cutoffs: Sequence[int]) -> list[Measure]:
    """Families × cutoffs, e.g. ``expand(["nDCG", "R"], [1, 5, 10, 100])``.

    A family may carry parameters (``"P(rel=2)"``); a family that takes no cutoff (``Rprec``)
    appears once; a name that already has a cutoff is kept as it is.
    """
    if isinstance(families, (str, Measure)):
        families = [families]
    out: dict[Measure, None] = {}
    for fam in families:
        if isinstance(fam, Measure):
            base = fam
        else:
            m = _NAME_RE.match(fam) if isinstance(fam, str) else None
            famname = _ALIASES.get(m.group("fam").lower()) if m else None
            if famname is None or m is None:
                raise _bad(str(fam), "not a measure family")
            if m.group("k") is not None:
                out.setdefault(parse_measure(fam), None)
                continue
            spec = FAMILIES[famname]
            probe = f"{fam}@1" if spec.cutoff != "forbidden" else fam
            base = parse_measure(probe)
        if FAMILIES[base.family].cutoff == "forbidden":
            out.setdefault(base, None)
            continue
        if base.cutoff is not None and not isinstance(fam, str):
            out.setdefault(base, None)
            continue
        for k in cutoffs:
            out.setdefault(base.at(int(k)), None)
    return list(out)
