"""What the terminal shows: one log format, quiet third-party libraries, and the metrics table.

By default stderr carries irflow's own INFO lines and the Prefect flow/task-run state lines (the
run's progress, named after irflow's stages), and every other library's WARNING and up only: no
``distributed.*`` start-up chatter, no ``faiss.loader`` AVX2 lines, no MLflow table-creation lines,
no "scheduled runs skipped (at capacity)". ``-v`` shows every library's INFO and irflow's DEBUG.
"""

from __future__ import annotations

import logging
import os
import sys
import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from irflow.tasks.core.redact import redact

if TYPE_CHECKING:
    from irflow.tasks.core.schema import Manifest

PROGRESS_LOGGERS = ("irflow", "prefect.flow_runs", "prefect.task_runs")  # INFO shown by default
TABLE_WIDTH = 120  # the terminal table fits this many columns
QUIET_ENVIRONMENT = {  # read by the libraries at import: set before they are imported
    "MLFLOW_CONFIGURE_LOGGING": "false",  # MLflow's own handler and format: its lines go through ours
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" bar on every model load
}


class LogFormatter(logging.Formatter):
    """``LEVEL logger: message``, naming the Prefect task or flow run a record comes from; secrets
    (keys, tokens, URL passwords) show as ``***``."""

    def format(self, record: logging.LogRecord) -> str:
        line = redact(super().format(record))
        run = getattr(record, "task_run_name", None) or getattr(record, "flow_run_name", None)
        return line.replace(": ", f": [{run}] ", 1) if run and run != "<unknown>" else line


class QuietFilter(logging.Filter):
    """Passes a record at or above its logger's threshold: ``progress`` for :data:`PROGRESS_LOGGERS`
    (and their children), ``others`` for everything else. A filter on the handler, because libraries
    set their own loggers' levels (Prefect to INFO, bm25s to DEBUG) after irflow configured logging."""

    def __init__(self, progress: int, others: int) -> None:
        super().__init__()
        self.progress, self.others = progress, others

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        ours = any(name == p or name.startswith(p + ".") for p in PROGRESS_LOGGERS)
        return record.levelno >= (self.progress if ours else self.others)


def configure_logging(verbose: bool) -> None:
    """One handler on stderr in one format (:class:`LogFormatter`) for every logger; quiet by default
    (see the module's docstring), everything at INFO and irflow at DEBUG with ``verbose``."""
    if not verbose:
        for key, value in QUIET_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
    else:
        os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogFormatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(
        QuietFilter(logging.DEBUG if verbose else logging.INFO, logging.INFO if verbose else logging.WARNING)
    )
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True)
    logging.captureWarnings(True)  # Python warnings too, as WARNING py.warnings: ... (shown, in the one format)
    if not verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request, even at INFO


def metrics_table(document: Mapping[str, Any], width: int = TABLE_WIDTH) -> str:
    """The metric means per system, rows named by the report's short labels, at most ``width`` columns:
    metrics that do not fit are left out (and named on the last line; every one is in metrics.json)."""
    from irflow.tasks.report.plots import short_labels

    systems = document["systems"]
    labels = short_labels(list(systems))
    ds = document["dataset"]
    name_width = max([len("system"), *(len(labels[s]) for s in systems)])
    shown: list[str] = []
    used = name_width
    for m in document["measures"]:
        cell = max(len(m), 7) + 2
        if used + cell > width:
            break
        shown.append(m)
        used += cell
    cells = {m: max(len(m), 7) for m in shown}
    head = f"{'system':<{name_width}}" + "".join(f"  {m:>{cells[m]}}" for m in shown)
    rows = [
        f"{labels[s]:<{name_width}}" + "".join(f"  {v[m]:>{cells[m]}.4f}" for m in shown) for s, v in systems.items()
    ]
    lines = [f"{ds['name']} ({ds['split']}): {ds['queries']} judged queries", head, *rows]
    hidden = [m for m in document["measures"] if m not in shown]
    if hidden:
        lines.append(f"(not shown, in metrics.json and report.md: {', '.join(hidden)})"[:width])
    for s in systems:  # the full spec of each shortened label, wrapped, never cut
        if labels[s] != s:
            lines += textwrap.wrap(f"{labels[s]} = {s}", width, subsequent_indent="  ", break_on_hyphens=False)
    warning = (document.get("coverage") or {}).get("warning")
    if warning:  # the systems are named by spec there: the report names them by label
        lines += textwrap.wrap(f"warning: judgement coverage: {warning}", width, subsequent_indent="  ")
    return "\n".join(lines)


__all__ = ["LogFormatter", "QuietFilter", "configure_logging", "metrics_table"]


def print_dataset_info(manifest: Manifest) -> None:
    """``irflow datasets info`` (and every command that makes a dataset): one line per fact of the manifest."""
    from irflow.tasks.ingest.qrels import describe_missing_documents

    grades = ", ".join(f"{g}: {n:,}" for g, n in manifest["grades"].items())
    dropped = manifest.get("dropped_qrels", {})
    lines = [
        ("dataset", f"{manifest['name']} (split {manifest['split']})"),
        ("documents", f"{manifest['documents']:,}"),
        ("queries", f"{manifest['queries']:,} judged"),
        ("judgements", f"{manifest['judgements']:,}"),
        ("grades", grades or "-"),
        ("fingerprint", manifest["fingerprint"]),
        ("source", f"{manifest['source'].get('kind')}: {manifest['source'].get('location')}"),
        ("document metadata", ", ".join(manifest.get("document_metadata", [])) or "-"),
        ("query metadata", ", ".join(manifest.get("query_metadata", [])) or "-"),
        ("ignore identical ids", str(manifest.get("ignore_identical_ids", False)).lower()),
    ]
    if dropped and any(dropped.get(k) for k in ("unknown_query", "unknown_doc", "duplicate")):
        lines.append(
            (
                "dropped judgements",
                f"{dropped['unknown_query']} unknown queries, {dropped['unknown_doc']} "
                f"unknown documents, {dropped['duplicate']} duplicates",
            )
        )
    missing = manifest.get("missing_documents") or {}
    if missing.get("judgements"):
        lines.append(("not in the corpus", describe_missing_documents(missing)))
    for key, value in lines:
        print(f"{key + ':':<22}{value}")
