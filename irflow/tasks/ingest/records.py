"""The vocabulary of ingestion: the records readers yield, the grade range, and the checks every
record goes through (missing values, text that cannot be stored as UTF-8)."""

from __future__ import annotations

import json
from typing import Any

from irflow.tasks.core.schema import InputError

MIN_GRADE = 0
MAX_GRADE = 1000
"""Grades are integers from 0 (judged not relevant) to 1000. BEIR, MS MARCO and zELO grades are 0–3;
trec_eval reads negative grades (TREC's -1, -2) as not relevant, so map those to 0 before import."""

DocRecord = tuple[str, str, str, dict[str, Any] | None, int]
"""``(doc_id, title, text, metadata, line)`` as a reader yields it."""
QueryRecord = tuple[str, str, dict[str, Any] | None, int]
"""``(query_id, text, metadata, line)``."""
QrelRow = tuple[str, str, int, int]
"""``(query_id, doc_id, grade, line)``."""


def metadata_json(meta: dict[str, Any] | None) -> str:
    """Metadata as canonical JSON (sorted keys, no spaces): what fingerprints and metadata columns hold."""
    return json.dumps(meta or {}, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def unicode_error(fields: dict[str, Any], path: str, line: int | None) -> InputError:
    """The error for a record whose text cannot be stored as UTF-8: names the field and the character."""
    for name, value in fields.items():
        text = value if isinstance(value, str) else metadata_json(value)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            return InputError(
                f"field {name!r} holds a lone surrogate U+{ord(text[err.start]):04X} at character {err.start}; "
                "expected valid Unicode text (a JSON \\ud800-\\udfff escape must be half of a pair)",
                path=path,
                line=line,
            )
    return InputError("text is not valid Unicode", path=path, line=line)
