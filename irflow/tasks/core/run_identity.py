"""Run identity: one readable name per evaluation, used by Prefect, MLflow and the result folder.

A name reads ``<dataset>_<UTC time>_<system labels>``, e.g.
``techdocs_20261124-070812_bm25_all-MiniLM-L6-v2_hybrid-bm25+all-MiniLM-L6-v2``: it sorts by dataset,
then time, and two runs differ within the first 25 characters, where MLflow's run list cuts names. The
labels are the systems' default labels (``irflow.tasks.systems.labels``), passed in by the caller, so
the command line and the Prefect form name the same systems alike. Every character is safe in a file
name, a Prefect flow-run name and an MLflow run name, so the three show the same string.

Result folders default to ``results/<dataset>/<run name>/``, beside a ``latest`` symlink to the
newest one; a folder is claimed (created empty) before any work, so two runs never share one. An
explicit ``--output`` that already holds another run's results is refused unless ``overwrite``.

Each kind of result has its own folder and its own ``latest`` (:data:`KINDS`), so ``latest`` always
points at a result of one kind (``irflow power results/techdocs/latest`` reads an evaluation, whatever
ran after it)::

    results/<dataset>/latest              the last evaluation (irflow run)
    results/<dataset>/rag/latest          the last RAG evaluation (irflow rag)
    results/<dataset>/interleave/latest   the last interleaving on the dataset (irflow interleave)
    results/interleave/latest             the last interleaving of a log (irflow interleave --log)
    results/abtest/latest                 the last A/B test (irflow abtest)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from collections.abc import Sequence
from pathlib import Path

from irflow.tasks.core.atomic import temp_name
from irflow.tasks.core.output_folder import check_output
from irflow.tasks.core.schema import InputError

RESULTS_ROOT = Path("results")
LATEST = "latest"
EVALUATION = "evaluation"
KINDS = (EVALUATION, "rag", "interleave", "abtest")  # each kind's results: their own folder, their own latest
MARKER = "metrics.json"
MAX_LABELS = 4
MAX_LABEL_CHARS = 40


def system_label(spec: str) -> str:
    """A short, file-name-safe label of a system spec: model paths cut to their last part, ``dense:``
    dropped (a model alias says it), other kinds kept with ``-`` for ``:`` (``hybrid-bm25+minilm``)."""
    label = re.sub(r"(?<=[:@+(])(?:[^:@+()/]*/)+", "", spec)  # dense:org/model -> dense:model
    label = re.sub(r"(?:(?<=^)|(?<=[+(]))dense:", "", label)
    label = re.sub(r"[^A-Za-z0-9.+=,-]+", "-", label).strip("-")
    return label[:MAX_LABEL_CHARS].rstrip("-") or "system"


def run_name(dataset: str, systems: Sequence[str], when: dt.datetime | None = None) -> str:
    """``<dataset>_<YYYYmmdd-HHMMSS>_<labels>`` (UTC); past :data:`MAX_LABELS` systems, ``+N`` stands for the rest."""
    when = (when or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    labels = list(dict.fromkeys(system_label(s) for s in systems))
    if len(labels) > MAX_LABELS:
        labels = [*labels[: MAX_LABELS - 1], f"+{len(labels) - MAX_LABELS + 1}"]
    return "_".join([dataset_folder(dataset), when.strftime("%Y%m%d-%H%M%S"), *labels])


def dataset_folder(dataset: str) -> str:
    """The folder of a dataset's runs under ``results/`` (``beir/scifact`` -> ``beir_scifact``)."""
    return dataset.replace("/", "_")


def default_root(dataset: str | None, kind: str = EVALUATION) -> Path:
    """Where results of ``kind`` (:data:`KINDS`) go by default: ``results/<dataset>/`` for evaluations,
    ``results/<dataset>/<kind>/`` for the others, ``results/<kind>/`` for those of no dataset (an A/B log,
    an interleaving log). The folder's ``latest`` link is the last result of that kind."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(KINDS)}")
    if dataset is None:
        if kind == EVALUATION:
            raise ValueError("an evaluation's results need a dataset")
        return RESULTS_ROOT / kind
    root = RESULTS_ROOT / dataset_folder(dataset)
    return root if kind == EVALUATION else root / kind


def claim_default_output(dataset: str | None, name: str, kind: str = EVALUATION) -> Path:
    """Create ``<default root>/<name>/`` empty (``<name>-2``, ... when taken) and return it (the default
    root of ``kind``: :func:`default_root`)."""
    root = default_root(dataset, kind)
    check_output(root, marker=None)
    root.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, 1000):
        target = root / (name if attempt == 1 else f"{name}-{attempt}")
        with contextlib.suppress(FileExistsError):
            target.mkdir()
            return target
    raise InputError(f"--output: could not claim a new result folder under {root}")


def check_explicit_output(path: str | os.PathLike[str], overwrite: bool) -> Path:
    """An explicit ``--output``: refused when it holds another run's results unless ``overwrite``
    (publishing then replaces the folder whole, so none of that run's files stay with the new ones)."""
    target = check_output(path)
    if not overwrite and (target / MARKER).is_file():
        raise InputError(
            f"--output {str(path)!r}: the folder holds another run's results ({MARKER}); pass --overwrite "
            "to replace them, or leave out --output for a new folder under results/<dataset>/"
        )
    return target


def is_default_output(dataset: str | None, output: str | os.PathLike[str], kind: str = EVALUATION) -> bool:
    """True when ``output`` is a run folder in the default root of ``kind`` (:func:`default_root`), whose
    ``latest`` link is kept."""
    return Path(output).absolute().parent == default_root(dataset, kind).absolute()


def point_latest(output: str | os.PathLike[str]) -> Path:
    """Point ``<parent>/latest`` at ``output`` (relative symlink, swapped in with one rename): a result folder
    in its kind's default root (:func:`default_root`), so the link names the last result of that kind."""
    output = Path(output)
    link = output.parent / LATEST
    tmp = output.parent / temp_name(LATEST, "link")
    os.symlink(output.name, tmp)
    try:
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return link


__all__ = [
    "EVALUATION",
    "KINDS",
    "LATEST",
    "check_explicit_output",
    "claim_default_output",
    "dataset_folder",
    "default_root",
    "is_default_output",
    "point_latest",
    "run_name",
    "system_label",
]
