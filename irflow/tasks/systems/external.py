"""System specs of systems built elsewhere: ``run:<path>``, ``python:<module>:<callable>`` (and the
kinds of the ``irflow.systems`` entry-point group), ``http:<url>``.

They share the grammar, canonical strings and slugs of :mod:`irflow.tasks.systems.specs` (whose parser
builds them through :func:`parse_external`); they live here because that module must not import them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from irflow.tasks.core.limits import kind_of
from irflow.tasks.core.schema import InputError
from irflow.tasks.systems.grammar import (
    KIND_PARSERS,
    Spec,
    check_options,
    format_body,
    format_paren,
    spec_error,
    unknown_kind,
)

RUN_HASH_LENGTH = 16  # hex digits of the file's sha256 in a run: spec
_DIGESTS: dict[tuple[str, int, int, int], str] = {}  # (path, size, mtime_ns, inode) -> sha256


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes (remembered per path, size, mtime and inode within a process); only a
    regular file is read (``/dev/zero`` would never end, a FIFO would block)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"not a regular file ({kind_of(st.st_mode)}): expected a run file", path=os.fspath(path))
        key = (os.fspath(path), st.st_size, st.st_mtime_ns, st.st_ino)
        if key not in _DIGESTS:
            with open(path, "rb") as fh:
                _DIGESTS[key] = hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError as exc:
        raise InputError(f"cannot read run file: {exc.strerror}", path=os.fspath(path)) from None
    return _DIGESTS[key]


@dataclass(frozen=True)
class RunSpec(Spec):
    """A ranking produced elsewhere, read from a file: its absolute ``path`` and the first
    ``RUN_HASH_LENGTH`` hex digits of the file's sha256 (computed from the file when left empty)."""

    path: str
    sha256: str = ""
    kind: ClassVar[str] = "run"

    def __post_init__(self) -> None:
        path = str(self.path).strip()
        if not path:
            raise spec_error("run needs a file, e.g. run:runs/bm25.trec")
        self._set("path", os.path.abspath(os.path.expanduser(path)))
        if not self.sha256:
            self._set("sha256", file_sha256(self.path))
        digest = str(self.sha256).strip().lower()
        if not re.fullmatch(rf"[0-9a-f]{{{RUN_HASH_LENGTH},64}}", digest):
            raise spec_error(f"option sha256={self.sha256!r} must be {RUN_HASH_LENGTH} to 64 hex digits")
        self._set("sha256", digest[:RUN_HASH_LENGTH])

    def canonical(self) -> str:
        return f"run(sha256={self.sha256}):{format_body(self.path)}"


@dataclass(frozen=True)
class PluginSpec(Spec):
    """A retriever from Python code: ``plugin`` is ``python`` (``target`` = ``module:callable``) or a kind
    registered by a package in the ``irflow.systems`` entry-point group. ``options`` are the keyword
    arguments of its factory as sorted ``(key, canonical value)`` pairs (see :func:`option_value`)."""

    plugin: str
    target: str = ""
    options: tuple[tuple[str, str], ...] = ()
    kind: ClassVar[str] = "plugin"

    def __post_init__(self) -> None:
        from irflow.tasks.systems.plugins import installed_kinds

        self._set("plugin", str(self.plugin).strip().lower())
        if self.plugin not in installed_kinds():
            raise unknown_kind(self.plugin)
        target = str(self.target).strip()
        self._set("target", target)
        if self.plugin == "python" and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", target):
            raise spec_error(f"python needs <module>:<callable>, e.g. python:mypkg.search:BM25Plus, got {target!r}")
        options = dict(self.options)
        if len(options) != len(self.options):
            raise spec_error(f"repeated option in {self.options!r}")
        for key in options:
            if not key.isidentifier():
                raise spec_error(f"option {key!r} of {self.plugin} must be a Python identifier (a keyword argument)")
        self._set("options", tuple(sorted((k, _canonical_value(v)) for k, v in options.items())))

    @property
    def kwargs(self) -> dict[str, object]:
        """The factory's keyword arguments, typed (see :func:`option_value`)."""
        return {k: option_value(v) for k, v in self.options}

    def canonical(self) -> str:
        return self.plugin + format_paren(list(self.options)) + (f":{format_body(self.target)}" if self.target else "")


@dataclass(frozen=True)
class HttpSpec(Spec):
    """A live search service: each query is sent to ``url``; ``options`` (sorted ``(key, value)``
    pairs, defaults left out) say how (``irflow.tasks.systems.http_options``)."""

    url: str
    options: tuple[tuple[str, str], ...] = ()
    kind: ClassVar[str] = "http"

    def __post_init__(self) -> None:
        from irflow.tasks.systems import http_options

        self._set("url", http_options.check_url(str(self.url)))
        options = dict(self.options)
        if len(options) != len(self.options):
            raise spec_error(f"repeated option in {self.options!r}")
        self._set("options", http_options.normalize(options))

    def canonical(self) -> str:
        return f"http{format_paren(list(self.options))}:{format_body(self.url)}"


def option_value(text: str) -> object:
    """A plugin option's value: ``true``/``false``/``null``, an integer, a float, else the string itself."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none"):
        return None
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", lowered):
        return float(text)
    return text


def _canonical_value(text: object) -> str:
    value = option_value(str(text).strip())
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def parse_run(kind: str, options: dict[str, str], body: str, base: str | os.PathLike[str] | None) -> RunSpec:
    """``run[(sha256=...)]:<path>``; a relative path is read from ``base`` (default: the working directory)."""
    check_options(options, ("sha256",), "run")
    if not body:
        raise spec_error("run needs a file after ':', e.g. run:runs/bm25.trec")
    path = Path(body).expanduser()
    return RunSpec(path=str(path if path.is_absolute() else Path(base or ".").expanduser() / path), **options)


def parse_http(kind: str, options: dict[str, str], body: str, base: str | os.PathLike[str] | None) -> HttpSpec:
    """``http[(options)]:<url>``."""
    if not body:
        raise spec_error("http needs a URL after ':', e.g. http:http://127.0.0.1:8080/search")
    return HttpSpec(url=body, options=tuple(options.items()))


def parse_plugin(kind: str, options: dict[str, str], body: str, base: str | os.PathLike[str] | None) -> PluginSpec:
    """``python[(options)]:<module>:<callable>`` and every kind of the ``irflow.systems`` entry-point group."""
    return PluginSpec(plugin=kind, target=body, options=tuple(options.items()))


KIND_PARSERS.update(run=parse_run, http=parse_http, plugin=parse_plugin)
