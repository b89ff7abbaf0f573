"""Token and cost estimates of LLM calls, for ``--dry-run`` plans and where a provider counts no tokens."""

from __future__ import annotations

import math

DEFAULT_PRICE_PER_1K = 0.005  # USD per 1k tokens (input + output), a placeholder: set yours with price=


def estimate_tokens(chars: int) -> int:
    """Tokens of a text of ``chars`` characters: ~4 characters a token for English."""
    return math.ceil(chars / 4)
