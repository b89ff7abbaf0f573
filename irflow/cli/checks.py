"""Checks every command runs before anything starts: no Prefect, no model, no corpus read.

Each command registers a ``check`` (``set_defaults(check=...)``) that :func:`irflow.cli.main.main` calls right
after parsing: its arguments, files (existence, a regular file, the header or first line where that is
cheap), dataset names, system specs, judge, generator and embedder specs. A problem is an
:class:`~irflow.tasks.core.schema.InputError` naming the option (exit 2); an unknown name gets "did you mean
X?" and a pointer to ``irflow datasets list`` or ``irflow run --help`` (:func:`irflow.api.request.suggestion`,
:func:`irflow.api.request.check_dataset_name`), never the whole list.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from irflow.tasks.core.schema import InputError

LOG_SUFFIXES = (".csv", ".tsv", ".txt", ".jsonl", ".json", ".parquet")


def check_dataset(name: str | None, option: str = "--dataset") -> None:
    """``name`` is a dataset irflow knows (embedded, the BEIR catalog, or stored); else did-you-mean."""
    from irflow.tasks.ingest.names import check_dataset_name

    if name is not None:
        check_dataset_name(name, option)


def check_human(value: str | None, option: str = "--human", answers: bool = False) -> None:
    """``--human`` as every command takes it (:func:`irflow.cli.options.human_form`): a stored dataset (did you
    mean) or a regular file of judgements; ``answers``: verdicts on answers (``irflow rag``), a file only."""
    if value is None:
        return
    if answers:
        from irflow.tasks.rag.calibrate import check_verdicts_file

        check_verdicts_file(value)
        return
    from irflow.api.request import check_human as check

    check(value, option)


def check_file(path: str | Path, option: str, expected: str) -> Path:
    """``path`` is a regular file; else an InputError naming ``option``, the path and what it is."""
    from irflow.tasks.core.paths import describe_path

    what = describe_path(path)
    if what is not None:
        raise InputError(f"{option} {path}: {what}; expected {expected}")
    return Path(path)


def check_result(path: str | Path, needs: Sequence[str] = ("metrics.json",), option: str = "RESULT") -> Path:
    """``path`` is a result folder holding ``needs``."""
    folder = Path(path)
    if not folder.is_dir():
        what = "no such folder" if not folder.exists() else "not a folder"
        raise InputError(f"{option} {path}: {what}; expected a result folder (of irflow run, rag or interleave)")
    missing = [n for n in needs if not (folder / n).is_file()]
    if missing:
        raise InputError(f"{option} {path}: no {', '.join(missing)} here; expected a result folder of irflow run")
    return folder


def check_depth(value: int | None, option: str = "--depth", high: int = 1000, zero: bool = False) -> None:
    """A cutoff between 1 (0 with ``zero``: no limit) and ``high``."""
    low = 0 if zero else 1
    if value is not None and not low <= value <= high:
        raise InputError(f"{option}: expected an integer from {low} to {high}, got {value}")


def check_systems(
    dataset: str,
    systems: Sequence[str],
    *,
    option: str = "--system",
    split: str | None = None,
    depth: int | None = None,
    baseline: str | None = None,
) -> list[str]:
    """The dataset, its split and the specs as ``irflow run`` checks them (:func:`irflow.api.make_request`:
    did-you-mean for a misspelt kind, every model resolved, nothing loaded); canonical specs."""
    from irflow.flows.request import request_of

    if not systems:
        check_dataset(dataset)
        return []
    try:
        request = request_of(dataset, systems, ["nDCG@10"], split=split, depth=depth, baseline=baseline)
    except InputError as exc:
        text = str(exc)
        raise InputError(option + text[len("--system") :] if text.startswith("--system") else text) from None
    return request.specs


ROLES = ("judge", "llm", "generator")


def check_llm(spec: str | None, option: str, role: str = "llm") -> None:
    """An LLM spec parses (nothing is called, no key is read), as ``role`` takes it: ``llm`` (``--llm``, a
    RAG ``--judge``: :func:`irflow.tasks.llm.parse_llm`), ``generator`` (``--generator``: extractive,
    python:MODULE:CALLABLE or an LLM spec) or ``judge`` (annotate's ``--judge``: an LLM, ``model:`` or
    ``system:``). A misspelt kind gets "did you mean"; the error says which kinds ``option`` takes."""
    if spec is None:
        return
    if role not in ROLES:
        raise ValueError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    from irflow.tasks.core.names import suggestion
    from irflow.tasks.core.schema import UnknownNameError
    from irflow.tasks.core.urls import CredentialsInUrlError
    from irflow.tasks.llm import LLM_KINDS, parse_llm

    kind = str(spec).strip().partition(":")[0].partition("(")[0]
    kinds: tuple[str, ...] = tuple(LLM_KINDS)
    noun, forms = "LLM kind", f"expected an LLM spec ({_llm_forms(LLM_KINDS)})"
    parse: Callable[[str, str], object] = parse_llm
    if role == "judge":
        from irflow.tasks.annotate.judges import KINDS, parse_judge

        kinds, noun, forms, parse = tuple(KINDS), "judge kind", "`irflow annotate --help` lists the forms", parse_judge
    elif role == "generator":
        from irflow.tasks.rag.generate import parse_generator

        kinds, noun = (*LLM_KINDS, "extractive", "python"), "generator kind"
        forms = "expected extractive, python:MODULE:CALLABLE or an LLM spec (" + _llm_forms(LLM_KINDS) + ")"

        def parse(text: str, _: str) -> object:
            return parse_generator(text)

    if kind not in kinds:
        raise InputError(f"{option} {spec!r}: unknown {noun} {kind!r}{suggestion(kind, kinds)}; {forms}")
    try:
        parse(spec, option)
    except CredentialsInUrlError:
        raise  # already names the option and the variable the credentials come from, and shows none
    except (InputError, UnknownNameError) as exc:
        first = str(exc).split("\n")[0].split("; valid kinds")[0]
        first = first.removeprefix(f"{option}: ").removeprefix(f"{option} ")
        if "takes an LLM spec" in first:  # a known kind, but no model after it
            first = f"expected {kind}[(OPTIONS)]:MODEL"
        raise InputError(f"{option} {spec!r}: {first}" + ("" if "expected" in first else f"; {forms}")) from None


def _llm_forms(kinds: Sequence[str]) -> str:
    return ", ".join(f"{k}:MODEL" for k in kinds)


def check_embedder(model: str | None, option: str = "--embedder") -> None:
    """An embedding model resolves (a Hugging Face name, a local folder or an alias); nothing is loaded."""
    if model is None:
        return
    from irflow.tasks.core.schema import UnknownNameError
    from irflow.tasks.experiment import check_models

    try:
        check_models([f"dense:{model}"])
    except (InputError, UnknownNameError) as exc:
        first = str(exc).split("\n")[0]
        raise InputError(f"{option} {model!r}: {first}") from None


def log_columns(path: str | Path, option: str, what: str) -> list[str]:
    """The columns of a log file (CSV, TSV, JSONL or Parquet) from its header or first line only."""
    path = check_file(path, option, what)
    suffix = path.suffix.lower()
    if suffix not in LOG_SUFFIXES:
        raise InputError(f"{option} {path}: unknown format {suffix!r}; expected .csv, .tsv, .jsonl or .parquet")
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        with path.open(encoding="utf-8", newline="") as handle:
            if suffix in (".jsonl", ".json"):
                first = next((line for line in handle if line.strip()), "")
                record = json.loads(first) if first else {}
                return [str(k) for k in record] if isinstance(record, dict) else []
            return next(csv.reader(handle, delimiter="," if suffix == ".csv" else "\t"), [])
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{option} {path}: cannot read its first line ({exc}); expected {what}") from None


def column_values(path: str | Path, column: str) -> list[str]:
    """The distinct values of one column of a log, in order of appearance (that column alone is read)."""
    import pandas as pd

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        values: Any = pd.read_parquet(path, columns=[column])[column]
    elif suffix in (".jsonl", ".json"):
        with path.open(encoding="utf-8") as handle:
            values = pd.Series([json.loads(line).get(column) for line in handle if line.strip()])
    else:
        sep = "," if suffix == ".csv" else "\t"
        values = pd.read_csv(path, sep=sep, usecols=[column], dtype=str, keep_default_na=False)[column]
    return [str(v) for v in pd.unique(values.dropna())]


def require_columns(columns: Sequence[str], needed: Sequence[str], option: str, path: str | Path, hint: str) -> None:
    """Every ``needed`` column is in ``columns``; else which are missing, and what the file has."""
    missing = [c for c in needed if c not in columns]
    if missing:
        found = ", ".join(columns[:12]) + (", ..." if len(columns) > 12 else "") or "none"
        raise InputError(f"{option} {path}: no column {', '.join(missing)} ({hint}); columns found: {found}")


__all__ = [
    "check_dataset",
    "check_depth",
    "check_embedder",
    "check_file",
    "check_llm",
    "check_result",
    "check_systems",
    "column_values",
    "log_columns",
    "require_columns",
]
