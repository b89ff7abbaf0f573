"""Dataset names and splits a person types, checked without ingesting or loading anything: the command line's
checks and :func:`irflow.evaluate` call these before any work."""

from __future__ import annotations

from irflow.tasks.core.names import suggestion
from irflow.tasks.core.schema import InputError, UnknownNameError


def check_dataset_name(name: str, argument: str) -> None:
    """InputError naming ``argument`` unless ``name`` is a known dataset (embedded, in the catalog, or stored)."""
    from irflow.tasks.ingest import check_name, list_datasets  # the package's face: imported on use

    try:
        check_name(name)
    except UnknownNameError:
        known = [row["name"] for row in list_datasets()]
        raise InputError(
            f"{argument}: unknown dataset {name!r}{suggestion(name, known)}; `irflow datasets list` shows the "
            "names (or import one: irflow datasets import PATH --format F --name NAME)"
        ) from None
    except InputError as exc:
        raise InputError(f"{argument}: {exc}") from None


def check_split(dataset: str, split: str | None) -> None:
    """InputError naming ``split`` when the dataset is known to lack it (a dataset not downloaded yet: unknown)."""
    from irflow.tasks.ingest import EMBEDDED, list_datasets

    if split is None:
        return
    if dataset in EMBEDDED:
        splits: list[str] | None = sorted(p.stem for p in (EMBEDDED[dataset] / "qrels").glob("*.tsv"))
    else:
        row = next((r for r in list_datasets() if r["name"] == dataset), None)
        splits = (list(row.get("splits") or row["stored"]) or None) if row else None
    if splits is not None and split not in splits:
        raise InputError(
            f"split: {dataset} has no split {split!r}{suggestion(split, splits)}; available: {', '.join(splits)}"
        )


__all__ = ["check_dataset_name", "check_split"]
