"""The one rule for credentials in the URLs irflow takes.

A URL a user gives irflow (an ``http:`` system, a judge's, generator's or LLM's ``@BASE_URL``, an API
embedder's ``base_url`` or ``OPENAI_BASE_URL``) becomes part of a spec, and a spec is written everywhere: the
report, ``metrics.json``, answers, Prefect's flow parameters, MLflow's params. So a URL carrying user info
(``http://user:secret@host/...``) is refused by :func:`refuse_credentials` with a
:class:`CredentialsInUrlError` that names the argument and the environment variable the credential comes
from instead, and never shows the credential; the check runs when the spec is parsed, before anything is
written. The one exception is the MLflow tracking URI, whose credentials the server needs and which is
never stored: :func:`split_credentials` takes them out (``tracking.store`` moves them into
``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``), and :func:`~irflow.tasks.core.redact.remember`
keeps them (and their ``Basic`` form) out of every message.
"""

from __future__ import annotations

import urllib.parse

from irflow.tasks.core.redact import remember_basic
from irflow.tasks.core.schema import InputError


class CredentialsInUrlError(InputError):
    """A URL carries user info (``user:password@``); credentials come from the environment instead."""


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries user info (``scheme://user[:password]@host``); False for what is no URL."""
    try:
        parts = urllib.parse.urlsplit(str(url).strip())
    except ValueError:
        return False
    return bool(parts.scheme) and "@" in parts.netloc


def without_credentials(url: str) -> str:
    """``url`` with its user info shown as ``***@`` (for a message: neither the user nor the password)."""
    parts = urllib.parse.urlsplit(str(url).strip())
    if "@" not in parts.netloc:
        return str(url).strip()
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def refuse_credentials(url: str, argument: str, env: str = "OPENAI_API_KEY") -> str:
    """``url`` unchanged when it carries no user info; else :class:`CredentialsInUrlError` naming
    ``argument`` (``--judge``, ``--generator``, ``http: system``...) and ``env``, the variable the
    credential is read from instead. The message never shows the user info."""
    if not has_credentials(url):
        return url
    raise CredentialsInUrlError(
        f"{argument}: a URL must not carry credentials ({without_credentials(url)}: user:password@ would be "
        f"stored with the run in reports, metrics.json, MLflow and Prefect); credentials come from the "
        f"environment: {env}"
    )


def split_credentials(uri: str) -> tuple[str, str | None, str | None]:
    """``(uri without user info, user, password)``; user and password are None when the URI has none.
    Both are remembered for redaction (with their ``Basic`` form), so no later message shows them."""
    parts = urllib.parse.urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri, None, None
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    bare = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    unquote = urllib.parse.unquote
    user, password = unquote(parts.username or ""), None if parts.password is None else unquote(parts.password)
    remember_basic(user, password)
    return bare, user, password


__all__ = ["CredentialsInUrlError", "has_credentials", "refuse_credentials", "split_credentials", "without_credentials"]
