"""Options of embedding models behind an API (``dense(<options>):openai:<model>``): their names, types
and one canonical spelling, checked when a spec is parsed. The client that uses them is
:mod:`irflow.tasks.embed.api`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from urllib.parse import urlparse, urlunparse

from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError
from irflow.tasks.core.urls import refuse_credentials

PROVIDER = "openai"
API_OPTIONS: dict[str, type] = {  # spec option -> type; only for dense:openai:<model>
    "base_url": str,
    "dimensions": int,
    "key_env": str,
    "batch_tokens": int,
    "concurrency": int,
    "rpm": float,
    "tpm": float,
    "price": float,  # USD per 1M tokens: overrides the table (needed for other endpoints' costs)
    "timeout": float,
    "retries": int,
}
_KEY_ENV = "OPENAI_API_KEY, or the variable key_env=VARIABLE names"
IDENTITY_OPTIONS = ("base_url", "dimensions")  # the rest (limits, key, price) changes no vector


def is_api_model(model: str) -> bool:
    """Whether a dense spec's model names an API model (``openai:<model>``)."""
    return str(model).startswith(f"{PROVIDER}:")


def normalise_options(pairs: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Check API options (names, types, ranges) and write each value one way; sorted by name."""
    out = []
    for key, raw in pairs:
        kind = API_OPTIONS.get(key)
        if kind is None:
            raise InputError(f"unknown API option {key!r}; valid: {', '.join(API_OPTIONS)}")
        value = str(raw).strip()
        if kind is str:
            if key == "base_url":
                value = check_base_url(value)
            elif not value:
                raise InputError(f"option {key} must not be empty")
            out.append((key, value))
            continue
        try:
            number = kind(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < (0 if key in ("retries", "price") else 1e-9):
            what = "an integer" if kind is int else "a number"
            raise InputError(
                f"option {key}={raw!r} must be {what} > 0" + (" (or 0)" if key in ("retries", "price") else "")
            )
        text = repr(number)
        out.append((key, text[:-2] if text.endswith(".0") else text))
    if "base_url" not in dict(out) and os.environ.get("OPENAI_BASE_URL"):  # the one the model will call
        refuse_credentials(os.environ["OPENAI_BASE_URL"], "OPENAI_BASE_URL", _KEY_ENV)
    return tuple(sorted(out))


def check_base_url(value: str, argument: str = "base_url") -> str:
    parsed = urlparse(value.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InputError(
            f"base_url {redact(value)!r}: expected http(s)://host[:port]/path, e.g. http://127.0.0.1:8000/v1"
        )
    refuse_credentials(value, argument, _KEY_ENV)
    return urlunparse(parsed._replace(path=parsed.path.rstrip("/"), query="", fragment=""))
