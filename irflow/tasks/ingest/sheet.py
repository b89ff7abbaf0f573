"""Judging sheets filled in by people (written by ``irflow pool``): read back as judgements, and merged
with the judgements of a base dataset (``irflow datasets import SHEET --format sheet --base D``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.ingest.canonical import SplitSource
from irflow.tasks.ingest.custom import base_corpus, base_provenance, base_queries
from irflow.tasks.ingest.records import MAX_GRADE, MIN_GRADE

SHEET_COLUMNS = ("query_id", "doc_id", "grade", "query", "title", "text")


def read_sheet(path: str | Path) -> list[tuple[str, str, int, int]]:
    """Judgements of a filled sheet, ``(query_id, doc_id, grade, line)``; blank grades are skipped.
    A grade that is not an integer from 0 to 1000 names the file and the line; a pair graded twice keeps
    its first row when the grades agree and is an error naming both lines when they differ."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh, delimiter="\t" if path.suffix.lower() != ".csv" else ","))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the sheet: {exc}", path=str(path)) from None
    if not rows:
        raise InputError("the sheet is empty; expected a header with query_id, doc_id and grade", path=str(path))
    header = [c.strip() for c in rows[0]]
    missing = [c for c in ("query_id", "doc_id", "grade") if c not in header]
    if missing:
        raise InputError(f"the sheet lacks columns {missing}; expected query_id, doc_id and grade", path=str(path))
    at = {c: header.index(c) for c in ("query_id", "doc_id", "grade")}
    judged = []
    seen: dict[tuple[str, str], tuple[int, int]] = {}
    for line, row in enumerate(rows[1:], 2):
        if len(row) <= max(at.values()):
            raise InputError(
                f"expected at least {max(at.values()) + 1} fields, got {len(row)}", path=str(path), line=line
            )
        grade = row[at["grade"]].strip()
        if not grade:
            continue
        if not grade.lstrip("+").isdigit() or not MIN_GRADE <= int(grade) <= MAX_GRADE:
            raise InputError(
                f"grade {grade!r} is not an integer from {MIN_GRADE} to {MAX_GRADE}", path=str(path), line=line
            )
        pair = (row[at["query_id"]].strip(), row[at["doc_id"]].strip())
        if pair in seen:
            first_grade, first_line = seen[pair]
            if first_grade != int(grade):
                raise InputError(
                    f"query {pair[0]!r}, document {pair[1]!r} is graded {int(grade)} here and {first_grade} on line "
                    f"{first_line}; expected one grade per pair (delete one row)",
                    path=str(path),
                    line=line,
                )
            continue
        seen[pair] = (int(grade), line)
        judged.append((*pair, int(grade), line))
    return judged


def sheet_over_base(path: str | Path, base: Dataset, split: str) -> tuple[Any, Any, dict[str, Any]]:
    """A filled sheet merged with the judgements of dataset ``base`` (its corpus and queries): the
    sheet's grade wins where both judge a pair, and how many did is reported."""
    sheet = read_sheet(path)
    if not sheet:
        raise InputError("no grade filled in: every row of the sheet is blank", path=str(path))
    new = {(q, d): (g, line) for q, d, g, line in sheet}
    existing = base.qrels[["query_id", "doc_id", "relevance"]].astype({"query_id": str, "doc_id": str})
    overridden = sum(1 for q, d, g in existing.itertuples(index=False) if (q, d) in new and new[(q, d)][0] != g)
    rows = [(q, d, int(g), 0) for q, d, g in existing.itertuples(index=False) if (q, d) not in new]
    rows += [(q, d, g, line) for (q, d), (g, line) in new.items()]
    judged = {"judged": len(new), "overridden": overridden, **pool_beside(Path(path), base)}
    provenance = {**base_provenance(base), "sheet": judged}
    return (
        base_corpus(base),
        SplitSource(split, base_queries(base), rows, f"{base.name} queries", str(path)),
        provenance,
    )


def pool_beside(sheet: Path, base: Dataset) -> dict[str, Any]:
    """What ``irflow pool`` recorded beside the sheet (``pool.json``): the pooled systems and depth, when
    it pooled ``base``'s data (same fingerprint); nothing when there is no such file."""
    path = sheet.parent / "pool.json"
    if not path.is_file():
        return {}
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the pool beside the sheet: {exc}", path=str(path)) from None
    if not isinstance(info, dict) or info.get("fingerprint") != base.fingerprint:
        return {}  # a pool of other data: it says nothing about these judgements
    systems = info.get("systems")
    if not isinstance(systems, list) or not all(isinstance(s, str) for s in systems):
        raise InputError("expected 'systems' as a list of system specs", path=str(path))
    depth = info.get("k")
    return {"pooled_from": systems, **({"pool_depth": depth} if isinstance(depth, int) else {})}
