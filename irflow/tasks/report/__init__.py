"""irflow report stage: an evaluation's result folder and the report a person reads.

Public API::

    from irflow.tasks.report import write_outputs, rebuild_report, load_results

    rebuild_report("results/techdocs/latest")   # report.md, report.html, significance.csv, plots/ again

Modules: ``write`` (metrics.json, per_query.parquet, runs/, and the reports, published whole),
``results`` (a stored result folder read back; several combined), ``data`` (everything the report
shows, computed once), ``markdown`` (report.md section by section, with ``significance``, ``cost`` and
``format``), ``html`` (report.html: one self-contained page), ``recommendations``, ``plots`` (PNG).
"""

from __future__ import annotations

from irflow.tasks.report.data import ReportData, analyse
from irflow.tasks.report.results import StoredResults, load_results
from irflow.tasks.report.write import SystemEvaluation, metrics_document, rebuild_report, write_outputs

__all__ = [
    "ReportData",
    "StoredResults",
    "SystemEvaluation",
    "analyse",
    "load_results",
    "metrics_document",
    "rebuild_report",
    "write_outputs",
]
