"""System kinds from packages: the ``irflow.systems`` entry-point group, and the built-in ``python`` kind.

A package registers a kind in its metadata::

    [project.entry-points."irflow.systems"]
    mykind = "mypkg.irflow_plugin:make_retriever"

and ``mykind(opt=1):target`` then works wherever a system spec does. The entry point is a factory
``make_retriever(target: str, **options) -> retriever``; the retriever follows the protocol of
:mod:`irflow.tasks.retrieve.python_system` (``search(queries, k)``, optionally ``index(corpus)``).
The built-in ``python`` kind is such a factory too and is resolved through the same table; a
package cannot shadow a built-in kind.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from collections.abc import Callable
from typing import Any

GROUP = "irflow.systems"
BUILTIN_KINDS = (
    "bm25",
    "dense",
    "hybrid",
    "rerank",
    "run",
    "http",
    "memory",
)  # parsed by irflow.tasks.systems.specs itself
BUILTIN_PLUGINS = {"python": "irflow.tasks.retrieve.python_system:python_kind"}

log = logging.getLogger(__name__)


def installed_kinds() -> dict[str, str]:
    """Plugin kind -> ``module:attribute`` of its factory: the built-in ``python`` kind and every
    entry point of the ``irflow.systems`` group on the current ``sys.path`` (names lower-cased)."""
    return dict(_entry_points(tuple(sys.path)))


@functools.lru_cache(maxsize=8)
def _entry_points(path: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    from importlib.metadata import entry_points

    found = dict(BUILTIN_PLUGINS)
    for ep in entry_points(group=GROUP):
        name = ep.name.strip().lower()
        if name in BUILTIN_KINDS or name in BUILTIN_PLUGINS:
            log.warning("ignoring the %s entry point %r (%s): it would shadow a built-in kind", GROUP, name, ep.value)
            continue
        if not name.isidentifier():
            log.warning("ignoring the %s entry point %r: a kind is a name like mykind", GROUP, name)
            continue
        found.setdefault(name, ep.value)
    return tuple(found.items())


def plugin_names() -> list[str]:
    """Installed plugin kinds besides ``python`` (for error messages)."""
    return sorted(k for k in installed_kinds() if k not in BUILTIN_PLUGINS)


def load_kind(name: str) -> Callable[..., Any]:
    """The factory of a plugin kind; a broken entry point fails naming it."""
    from irflow.tasks.core.schema import InputError, UnknownNameError

    value = installed_kinds().get(name)
    if value is None:
        raise UnknownNameError(f"unknown system kind {name!r}; installed plugin kinds: {', '.join(plugin_names())}")
    module, _, attribute = value.partition(":")
    try:
        target: Any = importlib.import_module(module.strip())
        for part in filter(None, attribute.strip().split(".")):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"system kind {name!r}: cannot load its entry point {value!r}: {exc}") from None
    if not callable(target):
        raise InputError(f"system kind {name!r}: entry point {value!r} is not callable")
    return target
