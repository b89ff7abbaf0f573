"""report.html in a real headless Chromium: the demo dataset's report (with a hostile query and document),
its sortable tables, segment filters and drill-down, no network request; and an evaluation flow tracked to
a real ``mlflow server`` on 127.0.0.1: its run list shows each run's dataset and nDCG@10 (the saved view
``irflow headline``, opened by the link irflow prints), its report.html is served and shown by the UI.

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

from irflow.tasks.core.schema import Dataset
from irflow.tasks.metrics import evaluate, mean
from irflow.tasks.report.write import SystemEvaluation, write_outputs
from irflow.tasks.retrieve.searchers import retrieve

pytestmark = pytest.mark.e2e

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
    # report.md's snippets: shown as text, word by word
    hostile = '<span class="w">&lt;script&gt;window.__pwned</span> <span class="w">=</span> '
    hostile += '<span class="w">3&lt;/script&gt;'
    assert hostile in page
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
            summary = page.locator("#report h2:has-text('Summary') ~ .scroll table")
            assert summary.count() >= 1
            # the verdict is the first thing under the title; nothing is wider than the 1,280 px window
            first = page.locator("#report h1 + p")
            assert first.inner_text().startswith("Verdict. ") and " on nDCG@10" in first.inner_text()
            assert too_wide(page) == []
            # no token of any table breaks at 1,280 px: numbers, ids, metric names, labels, snippets' words
            cells = page.locator("#report td, #report th, #queries td, #queries th, #rankings td, #qmetrics td")
            assert cells.count() > 500
            assert broken_tokens(page) == []
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
            by_category = page.locator("#report h3:has-text('By category') + .scroll table")
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


# Elements that stick out of the window (the page would scroll sideways), ignoring those inside a box that
# scrolls on its own (a wide table's .scroll) and whose box itself fits.
TOO_WIDE = """() => {
  const width = document.documentElement.clientWidth, out = [];
  for (const e of document.querySelectorAll('body *')) {
    if (e.closest('.scroll') && e.closest('.scroll') !== e) continue;
    const r = e.getBoundingClientRect();
    if (r.width > 0 && (r.right > width + 1 || r.left < -1)) out.push(e.tagName + '#' + e.id + ' ' + r.right);
  }
  if (document.documentElement.scrollWidth > width + 1) out.push('page ' + document.documentElement.scrollWidth);
  return out;
}"""


def too_wide(page: Any) -> list[str]:
    return list(page.evaluate(TOO_WIDE))


# Every table cell's words, as the browser laid them out: a word (a run of non-space characters of a text
# node) whose characters sit on two lines is broken; a cell not marked as prose (class p) takes one line.
# Lines are told apart by the top of each piece's box, 8 px apart or more (code and bold on one line differ
# by a pixel or two).
BROKEN_TOKENS = """() => {
  const out = [];
  const lines = tops => {
    const sorted = [...tops].sort((a, b) => a - b);
    return sorted.filter((t, i) => i === 0 || t - sorted[i - 1] >= 8).length;
  };
  for (const c of document.querySelectorAll('td, th')) {
    const walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT), all = [];
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const re = /\\S+/g;
      let m;
      while ((m = re.exec(n.data))) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        const tops = [...r.getClientRects()].filter(x => x.width > 0).map(x => x.top);
        if (lines(tops) > 1) out.push(c.tagName + ' word ' + m[0]);
        all.push(...tops);
      }
    }
    if (!c.classList.contains('p') && lines(all) > 1) out.push(c.tagName + ' cell ' + c.textContent);
  }
  return out;
}"""


def broken_tokens(page: Any) -> list[str]:
    return list(page.evaluate(BROKEN_TOKENS))


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_the_mlflow_run_list_shows_the_headline_and_report_html(
    mlflow_server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An evaluation flow tracked to a real ``mlflow server`` (the session's; the default experiment is this
    test's alone): its run list, as the UI reads it (REST) and renders it (Chromium, opened from the link irflow
    prints), shows each run's dataset and nDCG@10 with no column configured; its report.html is an artifact the
    UI's viewer shows."""
    sync_api = require_browser()
    from irflow.flows.evaluate import evaluate_flow
    from irflow.tasks.tracking.view import VIEW_NAME, VIEW_TAG, read_view

    mlflow_url, folder, out = mlflow_server_url, shots(tmp_path), tmp_path / "out"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_url)
    document = evaluate_flow(systems=SYSTEMS, metrics=MEASURES, latency_runs=0, output=str(out)).to_dict()
    tracked, name = document["mlflow"], document["run"]["name"]
    run_id, experiment = tracked["run_id"], tracked["experiment_id"]
    assert tracked["runs_url"] == (
        f"{mlflow_url}/#/experiments/{experiment}/runs?viewStateShareKey=irflow-headline&workflowType=machine_learning"
    )

    # what the run list reads: the experiment's saved view, and the runs with their metrics and dataset
    found = _get(f"{mlflow_url}/ajax-api/2.0/mlflow/experiments/get?experiment_id={experiment}")["experiment"]
    view, _ = read_view({t["key"]: t["value"] for t in found["tags"]}[VIEW_TAG])
    assert {"metrics.`best.ndcg_at_10`", "metrics.`ndcg_at_10`", "attributes.`Dataset`"} <= set(view["selectedColumns"])
    runs = _post(f"{mlflow_url}/ajax-api/2.0/mlflow/runs/search", {"experiment_ids": [experiment]})["runs"]
    metrics = {r["info"]["run_id"]: {m["key"]: m["value"] for m in r["data"]["metrics"]} for r in runs}
    best = max(v["nDCG@10"] for v in document["systems"].values())
    assert metrics[run_id]["best.ndcg_at_10"] == pytest.approx(best) and len(runs) == 1 + len(SYSTEMS)
    children = {s: metrics[i]["ndcg_at_10"] for s, i in tracked["systems"].items()}
    assert children == pytest.approx({s: v["nDCG@10"] for s, v in document["systems"].items()})
    assert {r["inputs"]["dataset_inputs"][0]["dataset"]["name"] for r in runs} == {"techdocs (test)"}
    start, end = next((r["info"]["start_time"], r["info"]["end_time"]) for r in runs if r["info"]["run_id"] == run_id)
    assert start / 1000 <= (out / "per_query.parquet").stat().st_mtime <= end / 1000  # the run spans the flow
    listing = _get(f"{mlflow_url}/ajax-api/2.0/mlflow/artifacts/list?run_id={run_id}")
    assert "report.html" in {f["path"] for f in listing["files"]}
    with urllib.request.urlopen(f"{mlflow_url}/get-artifact?path=report.html&run_uuid={run_id}", timeout=10) as got:
        assert got.read() == (out / "report.html").read_bytes()

    def cells(page: Any, key: str) -> list[str]:
        texts = page.locator(f".ag-center-cols-container [col-id='metrics.`{key}`']").all_inner_texts()
        return [t.strip() for t in texts if t.strip() not in ("", "-")]  # "-": a run without this metric

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1536, "height": 800})
            page.goto(tracked["runs_url"])  # the link irflow prints: a fresh browser, nothing configured
            page.get_by_text(name).first.wait_for(timeout=60_000)
            close = page.locator("button[aria-label='Close']")  # MLflow's assistant panel, not ours to show
            if close.count():
                close.first.click()
            headers = page.locator(".ag-header-cell-text, .ag-header-cell").all_inner_texts()
            assert any("best.ndcg_at_10" in h for h in headers) and any("Dataset" in h for h in headers), headers
            assert [float(v) for v in cells(page, "best.ndcg_at_10")] == [pytest.approx(best, abs=1e-3)]
            assert page.get_by_text("techdocs (test)").count() >= 1
            page.locator(".ag-pinned-left-cols-container button").first.click()  # expand the evaluation run
            page.get_by_text(SYSTEMS[1]).first.wait_for(timeout=30_000)
            shown = sorted(float(v) for v in cells(page, "ndcg_at_10"))
            assert shown == pytest.approx(sorted(children.values()), abs=1e-3)
            page.screenshot(path=str(folder / "mlflow_runs.png"))

            # the run list opened without the link, in a fresh browser: the view is one pick in the Views menu
            page.close()
            page = browser.new_context().new_page()
            page.goto(f"{mlflow_url}/#/experiments/{experiment}/runs?workflowType=machine_learning")
            page.get_by_text(name).first.wait_for(timeout=60_000)
            page.get_by_role("button", name="Views").first.click()
            page.get_by_text(VIEW_NAME).first.click()
            page.locator(".ag-header-cell[col-id='metrics.`best.ndcg_at_10`']").first.wait_for(timeout=30_000)

            # the run's link irflow prints opens the model-training pages in a fresh browser (a bare
            # experiment link would open the GenAI overview: MLflow 3.17 picks by the link or the browser)
            fresh = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
            fresh.goto(tracked["url"])
            fresh.get_by_text(name).first.wait_for(timeout=60_000)
            assert "workflowType=machine_learning" in fresh.url and fresh.get_by_text("Evaluation runs").count() == 0
            page.set_viewport_size({"width": 1280, "height": 800})
            page.goto(f"{mlflow_url}/#/experiments/{experiment}/runs/{run_id}/artifacts/report.html")
            page.get_by_text("report.html").first.wait_for(timeout=60_000)
            frame = page.frame_locator("iframe").first
            frame.locator("h1").first.wait_for(timeout=60_000)  # MLflow's viewer renders the page in a frame
            assert "Evaluation of techdocs" in frame.locator("h1").first.inner_text()
            assert frame.locator("#report h1 + p").inner_text().startswith("Verdict. ")
            inner = next(f for f in page.frames if f != page.main_frame and f.query_selector("#report"))
            assert too_wide(inner) == []  # nothing clipped by the viewer's frame: wide tables scroll in their box
            assert broken_tokens(inner) == []  # and no table breaks a token there either
            page.screenshot(path=str(folder / "mlflow_report_html.png"))
        finally:
            browser.close()


def test_long_cells_wrap_between_words_only() -> None:
    """report.md's tables in HTML: a short cell stays whole (the CSS keeps it on one line); a long cell of
    words is prose (class p) with each word in a span that never breaks, its text escaped."""
    from irflow.tasks.report.html import html_report

    markdown = (
        "| label | snippet |\n|---|---|\n"
        "| hybrid:bm25+dense:all-MiniLM-L6-v2 | Paging through <results>: offset-versus-scroll `td-doc-1` |\n"
    )
    page = html_report({"dataset": {"name": "x", "split": "test"}}, markdown, {})
    assert "<td>hybrid:bm25+dense:all-MiniLM-L6-v2</td>" in page
    assert '<td class="p"><span class="w">Paging</span> <span class="w">through</span> ' in page
    words = '<span class="w">&lt;results&gt;:</span> <span class="w">offset-versus-scroll</span> <code>td-doc-1</code>'
    assert words in page


def test_report_html_without_the_dataset_keeps_ids_and_numbers(demo: tuple[Dataset, Path], tmp_path: Path) -> None:
    """A report rebuilt without its dataset has no segments, texts or grades, but every query's values."""
    import shutil

    from irflow.tasks.report.write import rebuild_report

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


def test_rag_and_ab_reports_lead_with_the_verdict_in_the_blue_box(tmp_path: Path) -> None:
    """report.html of a RAG evaluation (docs/rag.md's shipped answers files) and of an A/B test: the blue box
    under the title holds the verdict the API and the terminal say; no table breaks a token, nothing is too
    wide, no negative zero, readable configuration keys."""
    import importlib.resources

    from support.abtest import simulate_log

    from irflow.api.abtest import abtest
    from irflow.api.rag import evaluate_rag

    sync_api = require_browser()
    examples = Path(str(importlib.resources.files("irflow.datasets"))) / "techdocs" / "examples"
    rag = evaluate_rag("techdocs", answers=[examples / "pipeline-a.jsonl", examples / "pipeline-b.jsonl"])
    ab = abtest(simulate_log(7, users=800, effect=0.05, arms=("old", "new")), control="old")
    pages = {"rag": (rag.save(tmp_path / "rag"), rag.verdict), "ab": (ab.save(tmp_path / "ab"), ab.verdict)}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            for name, (folder, verdict) in pages.items():
                page.goto((folder / "report.html").as_uri())
                box = page.locator("#report > p").first
                assert box.inner_text() == "Verdict. " + verdict.replace("`", ""), name
                assert box.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(238, 246, 255)", name
                assert broken_tokens(page) == [] and too_wide(page) == [], name
                text = page.locator("#report").inner_text()
                assert "-0.0000" not in text and "generator_" not in text and "answers_file" not in text, name
        finally:
            browser.close()
