"""Ids in a file checked against the ids they refer to: none silently ignored. A file whose ids are all
unknown is an error (it cannot be what was meant); some unknown ones are left out with a warning naming how
many and the first few (``--human`` verdicts or judgements of queries and documents a dataset lacks)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

from irflow.tasks.core.schema import InputError

log = logging.getLogger(__name__)
EXAMPLES = 5  # unknown ids named in a message


def check_known(ids: Iterable[object], known: Collection[str], what: str, among: str, where: str) -> list[str]:
    """The distinct ``ids`` (``what``: "query", "document", ...) of the file ``where`` that are not in
    ``known`` (``among``: "the queries of techdocs"). InputError when none is known; a warning when some are
    not; the unknown ones returned."""
    distinct = list(dict.fromkeys(str(i) for i in ids))
    unknown = [i for i in distinct if i not in known]
    if not unknown:
        return []
    examples = ", ".join(unknown[:EXAMPLES]) + (", ..." if len(unknown) > EXAMPLES else "")
    if len(unknown) == len(distinct):
        raise InputError(f"none of its {len(distinct)} {what} ids is one of {among} (e.g. {examples})", path=where)
    log.warning(
        "%s: %d of %d %s ids are not among %s, left out: %s", where, len(unknown), len(distinct), what, among, examples
    )
    return unknown


__all__ = ["check_known"]
