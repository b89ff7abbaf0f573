"""One vocabulary on the command line: the option groups every ``irflow`` command shares, and old spellings.

One name per idea, in every command:

==================  ==========================================================================================
``--dataset``       every stored dataset a command reads (drift's evaluation set, the base of an import or
                    a synthesis, the judge's dataset of ``agreement``)
``--depth``         the cutoff: hits per query, documents per query, contexts per question
``RESULT``          a result folder (of ``irflow run``, ``rag``, ``interleave``)
``--system``        a system spec; ``--baseline`` the system (or configuration) the others are compared with
``--judge``         the LLM (or local model) that judges; ``--generator`` the one that writes answers; ``--llm``
                    the one that writes queries (``datasets synthesize``)
``--embedder``      an embedding model (a Hugging Face name, a local folder or an alias such as ``minilm``)
``--experiment``    the MLflow experiment, nothing else (a suite YAML is a ``SUITE_FILE``)
``--human``         human judgements: a stored dataset or a file (:func:`human_form` tells which; ``rag``
                    takes a file of verdicts on answers and refuses a dataset by name)
``--no-track``      do not log to MLflow; ``--json`` one JSON object on stdout instead of the text
==================  ==========================================================================================

Old spellings keep working for one release: :func:`deprecated` registers them on the new option, hidden from
``--help``; using one prints exactly one line on stderr (:func:`deprecation_note`) and does what the new one
does. Imports stay light: nothing here loads pandas, Prefect or a model.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from irflow.tasks.core.paths import file_or_dataset

REMOVAL = "it will be removed in the next release"


def deprecation_note(old: str, new: str) -> str:
    """``irflow: --k is deprecated, use --depth (it will be removed in the next release)``."""
    return f"irflow: {old} is deprecated, use {new} ({REMOVAL})"


def warn_deprecated(old: str, new: str) -> None:
    print(deprecation_note(old, new), file=sys.stderr, flush=True)


_DEPRECATING: dict[type[argparse.Action], type[argparse.Action]] = {}


def _deprecating(cls: type[argparse.Action]) -> type[argparse.Action]:
    """``cls`` that prints the deprecation note when it was reached by an old spelling."""
    if cls not in _DEPRECATING:

        def __call__(
            self: Any,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            old = getattr(self, "old_spellings", {})
            if option_string is not None and option_string in old:
                warn_deprecated(option_string, old[option_string])
            cls.__call__(self, parser, namespace, values, option_string)

        _DEPRECATING[cls] = type(f"Deprecating{cls.__name__}", (cls,), {"__call__": __call__})
    return _DEPRECATING[cls]


def deprecated(parser: Any, action: argparse.Action, *old: str) -> argparse.Action:
    """Let ``old`` option strings reach ``action`` (an option of ``parser``) for one more release: hidden from
    ``--help`` and the usage line, each use noted once on stderr. Returns ``action``."""
    new = action.option_strings[0]
    for spelling in old:  # an argument group shares its parser's table of option strings
        if spelling in parser._option_string_actions:
            raise ValueError(f"{spelling} is already an option beside {new}")
        parser._option_string_actions[spelling] = action
    action.__class__ = _deprecating(type(action))
    action.old_spellings = {**getattr(action, "old_spellings", {}), **dict.fromkeys(old, new)}  # type: ignore[attr-defined]
    return action


def option(parser: Any, new: str, *args: Any, old: Sequence[str] = (), **kwargs: Any) -> argparse.Action:
    """``parser.add_argument(new, *args, **kwargs)``, with ``old`` spellings still accepted (:func:`deprecated`).
    ``parser`` may be an argument group (the old spellings go to the group's parser)."""
    action: argparse.Action = parser.add_argument(new, *args, **kwargs)
    return deprecated(parser, action, *old) if old else action


# ---------------------------------------------------------------------------------------------------------
# the shared options


def dataset_option(
    parser: Any,
    help: str = "dataset name (techdocs, beir/<name>, or an imported one)",
    *,
    old: Sequence[str] = (),
    **kwargs: Any,
) -> argparse.Action:
    """``--dataset NAME``: a stored dataset the command reads."""
    return option(parser, "--dataset", metavar="NAME", help=help, old=old, **kwargs)


def depth_option(parser: Any, help: str, *, old: Sequence[str] = ("--k",), **kwargs: Any) -> argparse.Action:
    """``--depth N``: the cutoff (hits, documents or contexts per query); ``--k`` is its old spelling."""
    return option(parser, "--depth", type=int, metavar="N", help=help, old=old, **kwargs)


def result_argument(parser: Any, help: str, *, nargs: Any = None, dest: str = "result") -> argparse.Action:
    """``RESULT``: a result folder, positional."""
    if nargs is None:
        return parser.add_argument(dest, metavar="RESULT", help=help)
    return parser.add_argument(dest, nargs=nargs, metavar="RESULT", help=help)


def baseline_option(parser: Any, help: str | None = None, **kwargs: Any) -> argparse.Action:
    """``--baseline SPEC``: the system (or configuration) the others are compared with."""
    return option(
        parser,
        "--baseline",
        metavar="SPEC",
        help=help or "the system the others are compared with (a spec or a label; default: the first)",
        **kwargs,
    )


def judge_option(
    parser: Any, help: str = "the judge, e.g. openai(rpm=60):gpt-4o-mini", **kwargs: Any
) -> argparse.Action:
    """``--judge SPEC``: the model that judges (``irflow annotate --help`` lists the forms)."""
    return option(parser, "--judge", metavar="SPEC", help=help, **kwargs)


def embedder_option(
    parser: Any, help: str = "embedding model (default minilm)", *, old: Sequence[str] = (), **kwargs: Any
) -> argparse.Action:
    """``--embedder MODEL``: an embedding model (Hugging Face name, local folder or alias)."""
    return option(parser, "--embedder", metavar="MODEL", help=help, old=old, **kwargs)


HUMAN_METAVAR = "DATASET|FILE"


def human_option(parser: Any, help: str, **kwargs: Any) -> argparse.Action:
    """``--human DATASET|FILE``: human judgements, a stored dataset or a file, told apart by
    :func:`human_form` (a command where one form has no meaning refuses it by name, in its check)."""
    return option(parser, "--human", metavar=HUMAN_METAVAR, help=help, **kwargs)


def human_form(value: str) -> str:
    """``"file"`` or ``"dataset"``: what a ``--human`` value names (an existing path, a value written as a path
    or ending like a file: a file; else a stored dataset's name), for every command and the library alike
    (:func:`irflow.tasks.core.paths.file_or_dataset`)."""
    return file_or_dataset(value)


def no_track_option(parser: Any, help: str = "do not log to MLflow") -> argparse.Action:
    """``--no-track``: nothing is logged to MLflow (every command that tracks has it)."""
    return parser.add_argument("--no-track", action="store_true", help=help)


def json_option(parser: Any, help: str = "print one JSON object instead of the text") -> argparse.Action:
    return parser.add_argument("--json", action="store_true", help=help)


def experiment_option(parser: Any, default: str = "irflow") -> argparse.Action:
    """``--experiment NAME``: the MLflow experiment, nothing else (``annotate`` and ``abtest`` default to their
    own: ``irflow-annotate``, ``irflow-abtest``)."""
    return parser.add_argument("--experiment", default=default, help=f"MLflow experiment (default: {default})")


def deprecated_command(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    """``parser`` is a command's old name (``irflow judges agreement``): :func:`irflow.cli.main.main` notes it
    once, right after parsing, then runs the command as the new one would."""
    parser.set_defaults(deprecated_command=(old, new))


__all__ = [
    "REMOVAL",
    "baseline_option",
    "dataset_option",
    "deprecated",
    "deprecated_command",
    "deprecation_note",
    "depth_option",
    "embedder_option",
    "experiment_option",
    "human_form",
    "human_option",
    "json_option",
    "judge_option",
    "no_track_option",
    "option",
    "result_argument",
    "warn_deprecated",
]
