"""Where irflow keeps things, read from the environment (see README, "Environment").

An installed irflow runs from any folder, so nothing here depends on where the package lives:
caches go to the user's cache folder, results and the MLflow store to the working directory,
and the data irflow ships (the BEIR catalog, the demo dataset, the nightly experiment) is read as
package data.
"""

from __future__ import annotations

import os
from importlib import metadata, resources
from pathlib import Path

OFFICIAL_BEIR_BASE_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"


def package_data(package: str, *parts: str) -> Path:
    """A file or folder shipped inside ``irflow.<package>`` (e.g. ``package_data("datasets", "beir.json")``).

    Wheels install unzipped, so the resource is a real path on disk.
    """
    root = resources.files(f"irflow.{package}")
    if not isinstance(root, Path):  # a zipped install: irflow needs its data as files
        raise RuntimeError(
            f"irflow.{package} is not installed as files on disk ({root!r}); reinstall irflow from a wheel"
        )
    return root.joinpath(*parts)


def source_root() -> Path | None:
    """The source checkout irflow runs from (an editable install), or None for an installed package."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / ".git").exists() and (root / "pyproject.toml").is_file() else None


def cache_dir() -> Path:
    """Root of datasets, downloads, embeddings and indexes: ``IRFLOW_CACHE_DIR``, else the user cache
    folder (``$XDG_CACHE_HOME/irflow``, by default ``~/.cache/irflow``), shared by every project."""
    value = os.environ.get("IRFLOW_CACHE_DIR")
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "irflow"


def beir_base_url() -> str:
    """Where BEIR zips are fetched from: ``IRFLOW_BEIR_BASE_URL`` or the official location."""
    return (os.environ.get("IRFLOW_BEIR_BASE_URL") or OFFICIAL_BEIR_BASE_URL).rstrip("/")


def irflow_version() -> str:
    try:
        return metadata.version("irflow")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"
