"""report.html in a real headless Chromium: the demo dataset's report (with a hostile query and document),
its sortable tables, segment filters and drill-down, no network request; and the same file logged to a
real ``mlflow server`` on 127.0.0.1, listed and served by its artifact API and shown in its UI.

Chromium (Debian's /usr/bin/chromium) and Playwright are needed; without them the browser tests skip
with the reason, and fail instead under ``IRFLOW_REQUIRE_BROWSER=1`` (set by ``.ci/run``). Screenshots
land in the test's tmp folder (printed), or in ``IRFLOW_SCREENSHOTS_DIR`` when set (the README's tour).
"""

from __future__ import annotations

import dataclasses
import json
import os
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from _stores import mlflow_server

from irflow.tasks.metrics import evaluate, mean
from irflow.tasks.report import SystemEvaluation, write_outputs
from irflow.tasks.retrieve import retrieve
from irflow.tasks.schema import Dataset

CHROMIUM = Path(os.environ.get("IRFLOW_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MEASURES = ["nDCG@10", "R@100", "RR@10"]
SYSTEMS = ["bm25", "bm25:k1=0.5,b=0.3"]
HOSTILE_QUERY = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> & [x](javascript:alert(1))'
HOSTILE_TITLE = "<script>window.__pwned = 3</script>"


def require_browser() -> Any:
    """Playwright's sync API, or skip (fail under IRFLOW_REQUIRE_BROWSER=1) saying what is missing."""
    missing = []
    try:
        from playwright import sync_api
    except ImportError:
        missing.append("the Python package playwright (pip install -e '.[test]')")
    if not CHROMIUM.is_file():
        missing.append(f"Chromium at {CHROMIUM} (apt-get install chromium)")
    if missing:
        reason = "browser test needs " + " and ".join(missing)
        if os.environ.get("IRFLOW_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return sync_api


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Dataset, Path]]:
    """techdocs with one query and one document made hostile, BM25 vs BM25 with other parameters."""
    cache = tmp_path_factory.mktemp("html-cache")
    with mock.patch.dict(os.environ, {"IRFLOW_CACHE_DIR": str(cache)}):
        from irflow.tasks.ingest import load_dataset

        dataset = load_dataset("techdocs")
        queries = dataset.queries.copy()
        queries.loc[0, "text"] = HOSTILE_QUERY + " " + str(queries.loc[0, "text"])
        judged = set(dataset.qrels.loc[dataset.qrels["query_id"] == queries.loc[0, "query_id"], "doc_id"])
        corpus = dataset.corpus.copy()
        corpus.loc[corpus["doc_id"].isin(judged), "title"] = HOSTILE_TITLE
        dataset = dataclasses.replace(dataset, queries=queries, corpus=corpus)
        evaluations = []
        for system in SYSTEMS:
            result = retrieve(dataset, system, 100)
            per_query = evaluate(result.run, dataset.qrels, MEASURES)
            evaluations.append(SystemEvaluation(result.system, result.run, per_query, mean(per_query)))
        out = tmp_path_factory.mktemp("html-report")
        write_outputs(out, dataset, evaluations, MEASURES, 100)
        yield dataset, out


class Elements(HTMLParser):
    """Every start tag of a page with its attributes, as a browser's tokenizer reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("IRFLOW_SCREENSHOTS_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    print(f"screenshots in {folder}")
    return folder


def test_report_html_escapes_dataset_text_and_inlines_every_plot(demo: tuple[Dataset, Path]) -> None:
    _, out = demo
    page = (out / "report.html").read_text(encoding="utf-8")
    elements = Elements()
    elements.feed(page)
    # the drill-down's JSON and the page's own code are the only scripts; no element carries a handler
    assert [a.get("type") for tag, a in elements.found if tag == "script"] == ["application/json", None]
    assert not [(tag, a) for tag, a in elements.found if any(k.startswith("on") for k in a)]
    assert not [a for tag, a in elements.found if tag == "a" and "javascript" in (a.get("href") or "")]
    assert "&lt;script&gt;window.__pwned = 3&lt;/script&gt;" in page  # report.md's snippets: shown as text
    data = page.split('<script type="application/json" id="irflow-data">')[1].split("</script>")[0]
    assert "<" not in data and HOSTILE_QUERY in json.loads(data)["queries"][0]["text"]
    plots = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert len(plots) >= 4
    assert page.count('src="data:image/png;base64,') == len(plots)
    assert "plots/" not in page.split("<main>")[0] and 'src="plots/' not in page


def test_report_html_in_chromium(demo: tuple[Dataset, Path], tmp_path: Path) -> None:
    sync_api = require_browser()
    dataset, out = demo
    folder = shots(tmp_path)
    url = (out / "report.html").as_uri()
    requests: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("request", lambda r: requests.append(r.url))
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            assert errors == []
            assert page.evaluate("window.__pwned") is None  # no dataset text ran as code

            # the summary table and every plot, rendered
            summary = page.locator("#report h2:has-text('Summary') + p + table, #report h2:has-text('Summary') ~ table")
            assert summary.count() >= 1
            images = page.locator("#report img")
            assert images.count() == len(list((out / "plots").glob("*.png")))
            assert all(page.evaluate("[...document.images].map(i => i.complete && i.naturalWidth > 0)"))
            page.screenshot(path=str(folder / "report_html.png"))

            # sorting the per-query table by the baseline's column reorders its rows
            rows = page.locator("#queries tbody tr")
            assert rows.count() == len(dataset.queries)
            ids = "rs => rs.map(r => r.dataset.id)"
            first_ids = page.eval_on_selector_all("#queries tbody tr", ids)
            segments = page.locator("#filters select").count()
            header = page.locator("#queries thead th").nth(2 + segments)  # the baseline's column
            values = f"rs => rs.map(r => parseFloat(r.cells[{2 + segments}].textContent))"
            header.click()
            column = page.eval_on_selector_all("#queries tbody tr", values)
            assert page.eval_on_selector_all("#queries tbody tr", ids) != first_ids and column == sorted(column)
            header.click()
            column = page.eval_on_selector_all("#queries tbody tr", values)
            assert column == sorted(column, reverse=True)

            # a report.md table sorts too: the queries per category, by their leading numbers ("3 (few)")
            by_category = page.locator("#report h3:has-text('By category') + table")
            counts = "t => [...t.tBodies[0].rows].map(r => parseInt(r.cells[1].textContent))"
            by_category.locator("thead th").nth(1).click()
            assert by_category.evaluate(counts) == sorted(by_category.evaluate(counts))
            by_category.locator("thead th").nth(1).click()
            descending = by_category.evaluate(counts)
            assert descending == sorted(descending, reverse=True) and descending[0] > descending[-1]

            # a segment filter keeps only that segment's queries
            select = page.locator("#filters select[data-segment='difficulty']")
            value = select.locator("option").nth(1).get_attribute("value")
            select.select_option(value)
            visible = page.locator("#queries tbody tr:visible")
            expected = int((dataset.queries["difficulty"].astype(str) == value).sum())
            assert 0 < visible.count() == expected < len(dataset.queries)
            assert page.locator("#shown").inner_text().startswith(f"{expected} of {len(dataset.queries)}")

            # drill-down: the hostile query's two rankings side by side with grades, as text
            hostile = str(dataset.queries.loc[0, "query_id"])
            page.locator("#pick").select_option(hostile)
            assert HOSTILE_QUERY in page.locator("#qtext").inner_text()
            tables = page.locator("#rankings table")
            assert tables.count() == 2
            run = retrieve(dataset, SYSTEMS[0], 10).run
            top = run[run["query_id"].astype(str) == hostile].sort_values("rank")["doc_id"].astype(str).tolist()
            shown = tables.nth(0).locator("tbody tr td:nth-child(2)").all_inner_texts()
            assert shown == top[:10]
            grades = dict(
                zip(
                    dataset.qrels.loc[dataset.qrels["query_id"].astype(str) == hostile, "doc_id"].astype(str),
                    dataset.qrels.loc[dataset.qrels["query_id"].astype(str) == hostile, "relevance"],
                )
            )
            cells = tables.nth(0).locator("tbody tr td:nth-child(3)").all_inner_texts()
            assert cells == [str(grades[d]) if d in grades else "-" for d in shown]
            assert HOSTILE_TITLE in " ".join(tables.nth(0).locator("tbody tr td:nth-child(4)").all_inner_texts())
            assert page.locator("#qmetrics tr").count() == 3  # header + the two systems
            page.locator("#drill-down").scroll_into_view_if_needed()
            page.screenshot(path=str(folder / "report_html_drill_down.png"))
            assert page.evaluate("window.__pwned") is None
        finally:
            browser.close()
    assert requests == [url]  # the page itself, nothing else


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


@pytest.fixture
def mlflow_url(tmp_path: Path) -> Iterator[str]:
    with mlflow_server(tmp_path) as url:
        yield url


def test_report_html_is_an_mlflow_artifact_shown_by_the_ui(
    demo: tuple[Dataset, Path], mlflow_url: str, tmp_path: Path
) -> None:
    sync_api = require_browser()
    from irflow.tasks.tracking import Tracker, log_evaluation

    _, out = demo
    folder = shots(tmp_path)
    tracker = Tracker("irflow-html", uri=mlflow_url)
    logged = log_evaluation(tracker, out, run_name="techdocs bm25 vs bm25(k1=0.5)")
    listing = json.loads(_get(f"{mlflow_url}/ajax-api/2.0/mlflow/artifacts/list?run_id={logged.run_id}"))
    assert "report.html" in {f["path"] for f in listing["files"]}
    served = _get(f"{mlflow_url}/get-artifact?path=report.html&run_uuid={logged.run_id}")
    assert served == (out / "report.html").read_bytes()

    experiment = tracker.experiment_id
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{mlflow_url}/#/experiments/{experiment}/runs?workflowType=machine_learning")
            page.get_by_text("techdocs bm25 vs bm25(k1=0.5)").first.wait_for(timeout=60_000)
            close = page.locator("button[aria-label='Close']")  # MLflow's assistant panel, not ours to show
            if close.count():
                close.first.click()
            page.screenshot(path=str(folder / "mlflow_runs.png"))
            page.goto(f"{mlflow_url}/#/experiments/{experiment}/runs/{logged.run_id}/artifacts/report.html")
            page.get_by_text("report.html").first.wait_for(timeout=60_000)
            frame = page.frame_locator("iframe").first
            frame.locator("h1").first.wait_for(timeout=60_000)  # MLflow's viewer renders the page in a frame
            assert "Evaluation of techdocs" in frame.locator("h1").first.inner_text()
            page.screenshot(path=str(folder / "mlflow_report_html.png"))
        finally:
            browser.close()


def test_report_html_without_the_dataset_keeps_ids_and_numbers(demo: tuple[Dataset, Path], tmp_path: Path) -> None:
    """A report rebuilt without its dataset has no segments, texts or grades, but every query's values."""
    import shutil

    from irflow.tasks.report import rebuild_report

    dataset, out = demo
    folder = tmp_path / "copy"
    shutil.copytree(out, folder)
    (folder / "report.html").unlink()
    rebuild_report(folder, load=False)
    page = (folder / "report.html").read_text(encoding="utf-8")
    data = json.loads(page.split('<script type="application/json" id="irflow-data">')[1].split("</script>")[0])
    assert data["segments"] == [] and data["grades"] == {} and data["snippets"] == {}
    assert len(data["queries"]) == len(dataset.queries) and {q["text"] for q in data["queries"]} == {""}
    assert all(len(data["rankings"][q["id"]]) == len(SYSTEMS) for q in data["queries"])
