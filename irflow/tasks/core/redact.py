"""The one redaction for everything irflow writes or prints: messages, logs, caches, votes and answers.

A secret is replaced by ``***`` wherever it appears: the password of a URL (``scheme://user:secret@host``
becomes ``scheme://user:***@host``), a ``Bearer`` token, a ``Basic`` credential (the base64 of
``user:password``, wherever it is echoed) or an echoed ``Authorization`` header, the value of every
environment variable whose name says it holds a secret (``*_API_KEY``, ``*_TOKEN``, ``*_PASSWORD``,
``*_SECRET``, ...; read at each call, so ``MLFLOW_TRACKING_PASSWORD`` set late counts too) and the ``Basic``
form of each ``*_USERNAME``/``*_PASSWORD`` pair, every secret :func:`remember`-ed by the code that read it
(an API key named by ``key_env``, a token named by ``auth_env``, a URL's ``user:password`` by
:func:`remember_basic`), and the secrets a caller passes. Values shorter than 4 characters, digits only or
flag words (``true``, ``no``, ...) are not treated as secrets: replacing them would garble text.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import threading
from collections.abc import Iterable
from typing import Any

MASK = "***"
MIN_LENGTH = 4  # shorter values are not treated as secrets (replacing "1" or "pw" everywhere garbles text)

_SECRET_NAME = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|SECRET_KEY|PASSWORD|PASSWD|CREDENTIALS?|PAT)(?:$|_)")
_FLAG_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "none", "null"})
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:'\"<>]*):([^\s/?#'\"<>]+)@")  # last @ ends it
_HEADER = re.compile(
    r"((?:Authorization|Proxy-Authorization|X-Api-Key|Api-Key)[\"']?\s*[:=]\s*[\"']?)([^\"'\r\n,}]+)", re.I
)
_BEARER = re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]{8,}")
_BASIC = re.compile(r"\b(Basic\s+)([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])")
_remembered: set[str] = set()
_lock = threading.Lock()


def remember(*secrets: str | None) -> None:
    """Note secrets read at run time (a key from the variable ``key_env`` names): every later
    :func:`redact` in this process replaces them."""
    with _lock:
        _remembered.update(s for s in secrets if s is not None and _is_secret(s))


def remember_basic(user: str | None, password: str | None) -> None:
    """Note a ``user:password`` pair (a URL's user info): the password and the pair's ``Basic`` form (its
    base64, as an ``Authorization`` header carries it) are replaced by every later :func:`redact`."""
    if password is None or not _is_secret(password):
        return
    remember(password, basic_credential(user, password))


def basic_credential(user: str | None, password: str | None) -> str:
    """The base64 of ``user:password``: what ``Authorization: Basic`` sends."""
    return base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode()


def _is_secret(value: str | None) -> bool:
    if not value or len(value) < MIN_LENGTH:
        return False
    return not value.isdigit() and value.lower() not in _FLAG_WORDS


def known_secrets(extra: Iterable[str | None] = ()) -> list[str]:
    """Every secret irflow knows now (see the module's docstring), longest first."""
    with _lock:
        found = set(_remembered)
    found.update(value for name, value in os.environ.items() if _SECRET_NAME.search(name.upper()) and _is_secret(value))
    for name, password in os.environ.items():  # MLFLOW_TRACKING_USERNAME + MLFLOW_TRACKING_PASSWORD -> their Basic form
        if name.upper().endswith("_PASSWORD") and _is_secret(password):
            user = os.environ.get(name[: -len("PASSWORD")] + "USERNAME")
            if user is not None:
                found.add(basic_credential(user, password))
    found.update(s for s in extra if s is not None and _is_secret(s))
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every known secret, and each of ``secrets``, replaced by ``***``."""
    if not text:
        return text
    text = _URL_PASSWORD.sub(rf"\1:{MASK}@", text)
    text = _HEADER.sub(lambda m: m.group(1) + _auth_mask(m.group(2)), text)
    text = _BEARER.sub(f"Bearer {MASK}", text)
    text = _BASIC.sub(lambda m: m.group(1) + MASK if _is_basic(m.group(2)) else m.group(0), text)
    for secret in known_secrets(secrets):
        text = text.replace(secret, MASK)
    return text


def _is_basic(token: str) -> bool:
    """Whether ``token`` is a ``Basic`` credential: base64 of ``user:password`` (so ``Basic understanding``,
    which is no base64 of such a pair, stays as it is)."""
    try:
        return b":" in base64.b64decode(token, validate=True)
    except (binascii.Error, ValueError):
        return False


def _auth_mask(value: str) -> str:
    """An echoed header value: its scheme (``Bearer``, ``Basic``) stays, the credential goes."""
    scheme, _, credential = value.strip().partition(" ")
    return f"{scheme} {MASK}" if credential and scheme.isalpha() else MASK


def redact_data(value: Any, secrets: Iterable[str | None] = ()) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every string redacted, for records
    about to be stored."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {key: redact_data(item, secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_data(item, secrets) for item in value)
    return value


__all__ = ["MASK", "basic_credential", "known_secrets", "redact", "redact_data", "remember", "remember_basic"]
