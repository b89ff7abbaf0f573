"""What the terminal shows: one log format, quiet third-party libraries, and the metrics table.

By default stderr carries irflow's own INFO lines (its progress: a BM25 index built, an export made)
and every other library's WARNING and up only: no Prefect run states (``Beginning flow run``,
``[retrieve bm25] Finished in state Completed()``), no ``distributed.*`` start-up chatter, no
``faiss.loader`` AVX2 lines, no MLflow table-creation lines or "View run" links, no "scheduled runs
skipped (at capacity)". Each line is one line: tracebacks, and a failed task's own report of its failure
(irflow names the failure), go to the log file (``<cache>/logs/irflow.log``) only. ``-v`` shows every
library's INFO (Prefect's run states, named after irflow's stages, among them), irflow's DEBUG and
tracebacks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from irflow.tasks.core.redact import redact

if TYPE_CHECKING:
    from irflow.tasks.core.schema import Manifest

PROGRESS_LOGGERS = ("irflow",)  # INFO shown by default
RUN_STATE_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")  # Prefect's run states: INFO with -v only
TABLE_WIDTH = 120  # the terminal table fits this many columns
QUIET_ENVIRONMENT = {  # read by the libraries at import: set before they are imported
    "MLFLOW_CONFIGURE_LOGGING": "false",  # MLflow's own handler and format: its lines go through ours
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" bar on every model load
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",  # "🏃 View run … / 🧪 View experiment …" at each run's end
}
LOG_FILE = ("logs", "irflow.log")  # under the cache directory: warnings and errors with their tracebacks


class LogFormatter(logging.Formatter):
    """``LEVEL logger: message``, naming the Prefect task or flow run a record comes from; secrets
    (keys, tokens, URL passwords) show as ``***``."""

    width: int | None = None  # a line longer than this has its run's name shortened to fit

    def format(self, record: logging.LogRecord) -> str:
        line = redact(super().format(record))
        run = getattr(record, "task_run_name", None) or getattr(record, "flow_run_name", None)
        if not run or run == "<unknown>" or run in record.getMessage():  # "Beginning flow run 'NAME'": once
            return line
        excess = len(line.partition("\n")[0]) + len(run) + 3 - (self.width or 1 << 30)
        if excess > 0:
            run = run[: max(20, len(run) - excess - 1)] + "…"
        return line.replace(": ", f": [{run}] ", 1)


class ShortFormatter(LogFormatter):
    """:class:`LogFormatter` for the terminal without ``-v``: a record's first line only, no traceback;
    the whole record goes to the log file (:func:`log_file`), which the line names once."""

    def __init__(self, fmt: str, log: os.PathLike[str] | str) -> None:
        super().__init__(fmt)
        self.log, self.named, self.width = str(log), False, TABLE_WIDTH

    def format(self, record: logging.LogRecord) -> str:
        cut = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None, "stack_info": None})
        line = super().format(cut)
        first, _, rest = line.partition("\n")
        if (rest or record.exc_info) and not self.named:
            self.named = True
            return f"{first} (traceback in {self.log})"
        if record.levelno < logging.WARNING and len(first) > TABLE_WIDTH:  # progress, never a warning, is cut
            return first[: TABLE_WIDTH - 1] + "…"
        return first


class QuietFilter(logging.Filter):
    """Passes a record at or above its logger's threshold: ``progress`` for :data:`PROGRESS_LOGGERS`
    (and their children), ``others`` for everything else, Prefect's run states (:data:`RUN_STATE_LOGGERS`)
    included. Without ``run_failures`` a Prefect run's own report of its failure is dropped too. A filter
    on the handler, because libraries set their own loggers' levels (Prefect to INFO, bm25s to DEBUG)
    after irflow configured logging."""

    def __init__(self, progress: int, others: int, run_failures: bool = True) -> None:
        super().__init__()
        self.progress, self.others, self.run_failures = progress, others, run_failures

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        ours = _under(name, PROGRESS_LOGGERS)
        if not self.run_failures and _under(name, RUN_STATE_LOGGERS) and _run_failure(record):
            return False  # irflow names the failure itself (an error line, or under the table)
        return record.levelno >= (self.progress if ours else self.others)


def _under(name: str, loggers: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in loggers)


def _run_failure(record: logging.LogRecord) -> bool:
    """A Prefect task or flow run's own report of its failure: its traceback, its Failed state (not a retry
    that will start: that line stays, cut to its first line)."""
    message = record.getMessage()
    if " will start " in message and "Retry " in message:
        return False
    return record.levelno >= logging.ERROR or message.startswith("Finished in state Failed")


class LogFileHandler(logging.FileHandler):
    """The log file's handler: a write that fails (a full disk: ENOSPC when irflow.log flushes; a file
    gone read-only) is said once, on one line, and the file is left alone from then on; never the logging
    module's ``--- Logging error ---`` traceback, once per record, before the run's own named error."""

    broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if self.broken:
            return
        self.broken = True
        error = sys.exc_info()[1]
        reason = getattr(error, "strerror", None) or (type(error).__name__ if error else "an error")
        with contextlib.suppress(Exception):
            self.close()
        with contextlib.suppress(Exception):
            print(f"irflow: warning: cannot write the log file {self.baseFilename}: {reason}", file=sys.stderr)


def configure_logging(verbose: bool) -> None:
    """One handler on stderr in one format (:class:`LogFormatter`) for every logger; quiet by default
    (see the module's docstring), everything at INFO and irflow at DEBUG with ``verbose``."""
    if not verbose:
        for key, value in QUIET_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
    else:
        os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")
    fmt, log = "%(levelname)s %(name)s: %(message)s", log_file()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogFormatter(fmt) if verbose else ShortFormatter(fmt, log))
    handler.addFilter(
        QuietFilter(logging.DEBUG if verbose else logging.INFO, logging.INFO if verbose else logging.WARNING, verbose)
    )
    handlers: list[logging.Handler] = [handler]
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        kept = LogFileHandler(log, encoding="utf-8", delay=True)  # created at the first warning
        kept.setLevel(logging.WARNING)
        kept.setFormatter(LogFormatter("%(asctime)s " + fmt))
        handlers.append(kept)
    except OSError:
        pass  # a read-only cache: the terminal still gets the first lines
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=handlers, force=True)
    logging.captureWarnings(True)  # Python warnings too, as WARNING py.warnings: ... (shown, in the one format)
    if not verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request, even at INFO


def log_file() -> Path:
    """Where warnings and errors are kept whole, tracebacks included: ``<cache>/logs/irflow.log``."""
    from irflow.tasks.core.config import cache_dir

    return cache_dir().joinpath(*LOG_FILE)


def metrics_table(document: Mapping[str, Any], width: int = TABLE_WIDTH) -> str:
    """The metric means per system, rows named by the report's short labels, at most ``width`` columns:
    metrics that do not fit are left out (and named on the last line; every one is in metrics.json)."""
    from irflow.tasks.report.plots import short_labels

    systems = document["systems"]
    labels = short_labels(list(systems), document.get("labels"))
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


def failures_text(document: Mapping[str, Any], width: int = TABLE_WIDTH) -> str:
    """The systems that failed, listed under the table: ``failed: LABEL: error`` each (and ``LABEL = SPEC``
    on the next line where the label is shorter), wrapped to ``width``."""
    from irflow.tasks.report.plots import short_labels

    failed = document.get("failed") or {}
    labels = short_labels(list(failed), document.get("labels"))
    lines = []
    for system, error in failed.items():
        lines += textwrap.wrap(
            redact(f"failed: {labels[system]}: {error}"), width, subsequent_indent="  ", break_on_hyphens=False
        )
        if labels[system] != system:  # the full spec, as the table gives it for a shortened label
            lines += textwrap.wrap(
                f"{labels[system]} = {system}", width, subsequent_indent="  ", break_on_hyphens=False
            )
    return "\n".join(lines)


RESULT_FILES = "report.html, report.md, significance.csv, metrics.json, per_query.parquet, runs/, plots/"


def print_verdict(verdict: str | None) -> None:
    """The verdict, wrapped to :data:`TABLE_WIDTH`: every command's last line before its result folder."""
    if verdict:
        text = f"Verdict: {verdict}"
        print("\n" + "\n".join(textwrap.wrap(text, TABLE_WIDTH, subsequent_indent="  ", break_on_hyphens=False)))


def print_outcome(output: str | os.PathLike[str], verdict: str | None) -> None:
    """After the table: the verdict (wrapped to :data:`TABLE_WIDTH`), then the result folder and its files."""
    print_verdict(verdict)
    print(f"\nresults: {output}/\n  {RESULT_FILES}")


__all__ = [
    "LogFileHandler",
    "LogFormatter",
    "PROGRESS_LOGGERS",
    "QuietFilter",
    "RUN_STATE_LOGGERS",
    "configure_logging",
    "failures_text",
    "metrics_table",
    "print_outcome",
    "print_verdict",
]


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
    lines += import_lines(manifest.get("source") or {})
    for key, value in lines:
        print(f"{key + ':':<22}{value}")


def import_lines(source: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What an import over a base dataset did, from its manifest: the judgements a filled sheet gave (and
    how many of them replaced the base's), the click model's fitted parameters and what it judged."""
    lines = []
    if isinstance(source.get("sheet"), Mapping):
        sheet = source["sheet"]
        lines.append(
            (
                "from the sheet",
                f"{sheet.get('judged', 0):,} judgements taken, {sheet.get('overridden', 0):,} overridden",
            )
        )
    if isinstance(source.get("clicks"), Mapping):
        c = source["clicks"]
        ranks = list((c.get("examination") or {}).items())
        exam = ", ".join(f"{k}: {float(v):.3f}" for k, v in ranks[:8]) + (", …" if len(ranks) > 8 else "")
        width = c.get("median_interval_width")
        lines += [
            (
                "click model",
                f"{str(c.get('click_model', '?')).upper()}, fitted in {c.get('em_iterations', '?')} EM iterations",
            ),
            ("examination by rank", exam or "-"),
            (
                "click judgements",
                f"{c.get('pairs_judged', 0):,} of {c.get('pairs_seen', 0):,} query-document pairs "
                f"(≥ {c.get('min_impressions', '?')} impressions)"
                + (f", median interval width {width:.3f}" if isinstance(width, float) else ""),
            ),
        ]
    return lines
