"""Where irflow keeps things, read from the environment (see README, "Environment")."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATASETS_DIR = PROJECT_ROOT / "datasets"
OFFICIAL_BEIR_BASE_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"


def cache_dir() -> Path:
    """Root of datasets, downloads, embeddings and indexes: ``IRFLOW_CACHE_DIR`` or ``datasets/cache``."""
    value = os.environ.get("IRFLOW_CACHE_DIR")
    return Path(value).expanduser() if value else DATASETS_DIR / "cache"


def beir_base_url() -> str:
    """Where BEIR zips are fetched from: ``IRFLOW_BEIR_BASE_URL`` or the official location."""
    return (os.environ.get("IRFLOW_BEIR_BASE_URL") or OFFICIAL_BEIR_BASE_URL).rstrip("/")


def irflow_version() -> str:
    try:
        return metadata.version("irflow")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"
