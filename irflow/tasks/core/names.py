"""The nearest known name for a typo, said in one parenthesis: every "unknown name" error uses it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def suggestion(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'bm25'?)`` when a known name is close to ``name``, else nothing."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


__all__ = ["suggestion"]
