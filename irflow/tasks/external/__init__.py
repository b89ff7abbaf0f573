"""Systems built elsewhere, evaluated like irflow's own: run files (``run:``), Python retrievers
(``python:`` and the ``irflow.systems`` entry-point group) and live search services (``http:``).

Kept light: ``irflow.tasks.systems`` imports ``plugins`` and ``http_options`` while parsing specs;
the searchers (pandas, httpx) are imported only by ``irflow.tasks.retrieve`` when a system runs.
"""
