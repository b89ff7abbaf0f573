"""report.html: report.md's content as one self-contained page, plus what a browser does better.

The page holds report.md rendered (every table sortable by a click on its header, every plot inline
as a base64 PNG), a per-query table filtered by the report's query segments, and a drill-down that
shows a query's rankings of two systems side by side with each document's grade and the query's
metric values. It makes no network request: no external script, style, font or image.

Dataset text (queries, documents, ids) is never trusted: Markdown is rendered with raw HTML off
(it is escaped), link targets are checked by markdown-it, the drill-down data is JSON in a
``<script type="application/json">`` with ``<``, ``>`` and ``&`` escaped, and the page's script
writes it with ``textContent`` only. Pure: data in, HTML string out.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from markdown_it.token import Token

from irflow.tasks.compare import analysis
from irflow.tasks.report.data import ReportData

DRILL_DEPTH = 10  # ranks shown per system in the drill-down
MAX_DRILL_QUERIES = 2000  # queries with rankings embedded (most different first); keeps the page small
SNIPPET_WIDTH = 120


@dataclass(frozen=True)
class QueryView:
    """What the per-query table and the drill-down show, built by :func:`query_view`."""

    queries: pd.DataFrame  # query_id, text, one column per segment
    rankings: dict[str, dict[str, list[str]]]  # query -> system -> doc ids, best first
    grades: dict[str, dict[str, int]]  # query -> doc -> judged grade
    snippets: dict[str, str]  # doc -> title and text, shortened
    note: str = ""


def query_view(
    data: ReportData,
    runs: Mapping[str, pd.DataFrame],
    queries: pd.DataFrame | None = None,
    qrels: pd.DataFrame | None = None,
    corpus: pd.DataFrame | None = None,
) -> QueryView:
    """The drill-down's data from stored results and the dataset (None: ids without text, segments, grades).

    Segment values per query come from the same columns the report segments by (``data.segments``):
    the dataset's query metadata and :func:`analysis.query_features`.
    """
    ids = [str(q) for q in data.wide.index]
    table = pd.DataFrame({"query_id": ids})
    if queries is not None and qrels is not None:
        q = queries.assign(query_id=queries["query_id"].astype(str))
        q = q.merge(analysis.query_features(queries, qrels), on="query_id", how="left")
        wanted = [c for c in data.segments if c in q.columns]
        table = table.merge(q[["query_id", "text", *wanted]], on="query_id", how="left")
        for c in wanted:
            table[c] = table[c].astype("string").fillna("(none)")
    table["text"] = table["text"].astype("string").fillna("") if "text" in table else ""
    delta = data.wide.iloc[:, -1] - data.wide.iloc[:, 0] if len(data.systems) > 1 else data.wide.iloc[:, 0]
    order = delta.abs().sort_values(ascending=False, kind="mergesort").index.astype(str)
    drilled = list(order[:MAX_DRILL_QUERIES])
    keep = set(drilled)
    rankings: dict[str, dict[str, list[str]]] = {q: {} for q in drilled}
    for system in data.systems:
        run = runs[system]
        top = run[(run["rank"] <= DRILL_DEPTH) & run["query_id"].astype(str).isin(keep)].sort_values(
            ["query_id", "rank"]
        )
        for qid, docs in top.groupby(top["query_id"].astype(str))["doc_id"]:
            rankings[str(qid)][system] = docs.astype(str).tolist()
    shown = {d for r in rankings.values() for docs in r.values() for d in docs}
    grades: dict[str, dict[str, int]] = {}
    if qrels is not None:
        judged = qrels[qrels["query_id"].astype(str).isin(keep) & qrels["doc_id"].astype(str).isin(shown)]
        for qid, doc, grade in zip(judged["query_id"].astype(str), judged["doc_id"].astype(str), judged["relevance"]):
            grades.setdefault(qid, {})[doc] = int(grade)
    snippets: dict[str, str] = {}
    if corpus is not None:
        docs = corpus[corpus["doc_id"].astype(str).isin(shown)]
        titles = docs["title"].astype("string").fillna("") if "title" in docs else [""] * len(docs)
        for doc, title, text in zip(docs["doc_id"].astype(str), titles, docs["text"].astype("string").fillna("")):
            snippets[doc] = analysis.snippet(title, text, SNIPPET_WIDTH)
    note = (
        f"Rankings are embedded for the {MAX_DRILL_QUERIES:,} queries where the systems differ most (of {len(ids):,})."
        if len(ids) > MAX_DRILL_QUERIES
        else ""
    )
    return QueryView(table, rankings, grades, snippets, note)


def _markdown_html(markdown: str, plots: Mapping[str, bytes]) -> str:
    """report.md as HTML: raw HTML escaped, images (``plots/<file>``) inlined as data URIs."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(markdown)
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type in ("th_open", "td_open") and inline.type == "inline":
            _keep_words(opening, inline)
    for token in tokens:
        for child in token.children or []:
            if child.type == "image":
                src = str(child.attrGet("src") or "")
                if src in plots:
                    child.attrSet("src", "data:image/png;base64," + base64.b64encode(plots[src]).decode("ascii"))
                else:
                    child.attrSet("src", "")  # a missing plot: no request for it
    rendered = str(md.renderer.render(tokens, md.options, {}))
    return rendered.replace("<table>", '<div class="scroll"><table>').replace("</table>", "</table></div>")


PROSE = 24  # a cell with more characters than this and a space wraps between its words; others keep one line
_SPACES = re.compile(r"(\s+)")


def _is_prose(text: str) -> bool:
    return len(text) > PROSE and bool(re.search(r"\s", text.strip()))


def _keep_words(opening: Token, inline: Token) -> None:
    """A table cell whose tokens never break: a short cell stays on one line (the CSS), a long one wraps
    between words only (class ``p``, each word in a ``<span class="w">`` that never breaks)."""
    children = inline.children or []
    if not _is_prose("".join(c.content for c in children)):
        return
    opening.attrSet("class", "p")
    for i, child in enumerate(children):
        if child.type == "text":
            words = (
                part if part.isspace() or not part else f'<span class="w">{html.escape(part, quote=False)}</span>'
                for part in _SPACES.split(child.content)
            )
            children[i] = Token("html_inline", "", 0, content="".join(words))


def _json_script(element_id: str, value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_default)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def _json_default(value: Any) -> Any:
    if pd.isna(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _finite(x: Any) -> float | None:
    return None if x is None or pd.isna(x) else round(float(x), 6)


def _page_data(data: ReportData, view: QueryView, per_query: pd.DataFrame) -> dict[str, Any]:
    values = per_query[per_query["system"].isin(data.systems)].assign(query_id=per_query["query_id"].astype(str))
    metrics: dict[str, dict[str, dict[str, float | None]]] = {}
    for qid, system, metric, value in zip(values["query_id"], values["system"], values["metric"], values["value"]):
        metrics.setdefault(qid, {}).setdefault(system, {})[metric] = _finite(value)
    segments = [c for c in view.queries.columns if c not in ("query_id", "text")]
    return {
        "systems": data.systems,
        "labels": data.labels,
        "baseline": data.baseline,
        "headline": data.headline,
        "measures": data.measures,
        "segments": segments,
        "queries": [
            {"id": r["query_id"], "text": str(r["text"]), "seg": [str(r[c]) for c in segments]}
            for r in view.queries.to_dict("records")
        ],
        "metrics": metrics,
        "rankings": view.rankings,
        "grades": view.grades,
        "snippets": view.snippets,
    }


def html_report(
    document: Mapping[str, Any],
    markdown: str,
    plots: Mapping[str, bytes],
    data: ReportData | None = None,
    view: QueryView | None = None,
    per_query: pd.DataFrame | None = None,
) -> str:
    """The whole page. ``markdown`` is report.md, ``plots`` its image paths -> PNG bytes; with ``data``,
    ``view`` and ``per_query`` the page adds the segment-filtered per-query table and the drill-down."""
    ds = document.get("dataset", {})
    title = f"irflow: {ds.get('name', '?')} ({ds.get('split', '?')})"
    interactive = ""
    if data is not None and view is not None and per_query is not None:
        interactive = (
            '<h2 id="per-query">Per query</h2>'
            f"<p>{html.escape(data.headline)} of every judged query; choose segment values to filter, "
            "click a header to sort, click a row to drill down. "
            '<span id="shown"></span></p>'
            f"<p>{html.escape(view.note)}</p>"
            '<div id="filters"></div><div class="scroll tall"><table id="queries" class="sortable"><thead></thead>'
            "<tbody></tbody></table></div>"
            '<h2 id="drill-down">Drill-down</h2><p><label>query <select id="pick"></select></label> '
            '<label>left <select id="left"></select></label> <label>right <select id="right"></select></label></p>'
            '<p id="qtext"></p><div class="scroll"><table id="qmetrics"></table></div><div id="rankings"></div>'
            + _json_script("irflow-data", _page_data(data, view, per_query))
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        # no request may leave the page: the policy forbids any origin, inline code is the page's own
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f'<main><div id="report">{_markdown_html(markdown, plots)}</div>{interactive}</main>'
        f"<script>{_JS.replace('@PROSE@', str(PROSE))}</script></body></html>"
    )


# Fits 1,280 px and MLflow's artifact frame: the page never scrolls sideways; a table wider than the page
# scrolls inside its own box (.scroll). No token in a table ever breaks: a cell keeps one line (numbers, ids,
# metric names, labels), a long one of several words (.p: snippets, query texts, long headers) wraps between
# its words only, each word kept whole (.w).
_CSS = """
*,*::before,*::after{box-sizing:border-box}
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#222;background:#fafafa;overflow-wrap:anywhere}
main{max-width:1200px;margin:0 auto;padding:1em 1.5em}
#report>p:first-of-type{font-size:1.1em;background:#eef6ff;border-left:4px solid #3b82f6;padding:.5em 1em}
.scroll{max-width:100%;overflow-x:auto;margin:.5em 0 1em}.scroll>table{margin:0}
.tall{max-height:70vh;overflow-y:auto}
table{border-collapse:collapse;margin:.5em 0 1em;background:#fff}
th,td{border:1px solid #ddd;padding:3px 8px;vertical-align:top;white-space:nowrap;overflow-wrap:normal;
word-break:keep-all}
td{min-width:4.5em}th.p,td.p{white-space:normal;min-width:14em;max-width:36em}.w,.p code{white-space:nowrap}
th{background:#f0f0f0;cursor:pointer;user-select:none}
th[data-dir=asc]::after{content:" \\25B2"}th[data-dir=desc]::after{content:" \\25BC"}
img{max-width:100%}code{background:#f0f0f0;padding:0 3px}
blockquote{border-left:4px solid #e0b000;margin:0;padding:0 1em;background:#fffbe6}
#queries tbody tr{cursor:pointer}#queries tbody tr:hover{background:#eef}
#rankings{display:flex;gap:1em;flex-wrap:wrap}#rankings>div{flex:1;min-width:min(420px,100%);overflow-x:auto}
.g0{color:#999}.g1{background:#e8f5e9}.g2{background:#c8e6c9}.g3{background:#a5d6a7}
#filters label{margin-right:1em}
label{display:inline-block;max-width:100%}select{max-width:100%}
"""

# The page's only code: sorting, filtering and the drill-down. Dataset text goes through textContent.
_JS = r"""
(function () {
  var PROSE = @PROSE@;
  function num(t) {  // a cell's leading number ('0.6715 (-0.0281) ▼', '12.5%', '1,024'), else null
    var m = t.replace(/[*,\s]/g, '').match(/^[-+\u2212]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?/i);
    return m ? parseFloat(m[0].replace('\u2212', '-')) : null;
  }
  function cells(row) { return Array.prototype.slice.call(row.cells); }
  function sortable(table) {
    if (!table.tHead) return;
    cells(table.tHead.rows[0]).forEach(function (th, i) {
      th.addEventListener('click', function () {
        var dir = th.dataset.dir === 'asc' ? 'desc' : 'asc';
        cells(table.tHead.rows[0]).forEach(function (c) { delete c.dataset.dir; });
        th.dataset.dir = dir;
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[i].textContent.trim(), y = b.cells[i].textContent.trim();
          var nx = num(x), ny = num(y);
          var c = nx !== null && ny !== null ? nx - ny : nx !== null ? -1 : ny !== null ? 1 : x.localeCompare(y);
          return dir === 'asc' ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function cell(tag, v) {  // as the page's Python does: a long cell of words wraps between them only
    var text = v === undefined || v === null ? '' : String(v);
    if (text.length <= PROSE || !/\S\s+\S/.test(text)) return el(tag, text);
    var c = el(tag, null, 'p');
    text.split(/(\s+)/).forEach(function (part) {
      c.appendChild(!part || /^\s+$/.test(part) ? document.createTextNode(part) : el('span', part, 'w'));
    });
    return c;
  }
  function row(tag, values, cls) {
    var tr = el('tr', null, cls);
    values.forEach(function (v) { tr.appendChild(cell(tag, v)); });
    return tr;
  }
  function f4(v) { return v === null || v === undefined ? '-' : v.toFixed(4); }
  function byId(id) { return document.getElementById(id); }
  document.querySelectorAll('#report table').forEach(sortable);
  var node = byId('irflow-data');
  if (!node) return;
  var D = JSON.parse(node.textContent), H = D.headline, S = D.systems, Q = {}, filters = {};
  var label = function (s) { return D.labels[s]; };
  D.queries.forEach(function (q) { Q[q.id] = q; });
  function val(q, s) { var m = D.metrics[q.id]; return m && m[s] ? m[s][H] : null; }

  // the per-query table, filtered by segment values
  var table = byId('queries'), last = S[S.length - 1];
  var delta = S.length > 1 ? ['\u0394 ' + label(last) + ' - ' + label(S[0])] : [];
  table.tHead.appendChild(row('th', ['query', 'text'].concat(D.segments, S.map(label), delta)));
  D.queries.forEach(function (q) {
    var values = [q.id, q.text].concat(q.seg, S.map(function (s) { return f4(val(q, s)); }));
    if (S.length > 1) {
      var a = val(q, S[0]), b = val(q, last);
      values.push(a === null || b === null ? '-' : (b - a >= 0 ? '+' : '') + (b - a).toFixed(4));
    }
    var tr = row('td', values);
    tr.dataset.id = q.id;
    tr.addEventListener('click', function () { pick.value = q.id; drill(); byId('drill-down').scrollIntoView(); });
    table.tBodies[0].appendChild(tr);
  });
  sortable(table);
  function apply() {
    var n = 0, sums = S.map(function () { return 0; });
    Array.prototype.forEach.call(table.tBodies[0].rows, function (tr) {
      var q = Q[tr.dataset.id];
      var ok = D.segments.every(function (c, j) { return !filters[c] || q.seg[j] === filters[c]; });
      tr.style.display = ok ? '' : 'none';
      if (ok) { n++; S.forEach(function (s, j) { sums[j] += val(q, s) || 0; }); }
    });
    var means = S.map(function (s, j) { return label(s) + ' ' + (n ? (sums[j] / n).toFixed(4) : '-'); });
    byId('shown').textContent = n + ' of ' + D.queries.length + ' queries shown; mean ' + H + ': ' + means.join(', ');
  }
  D.segments.forEach(function (c, j) {
    var lab = el('label', c + ' '), sel = el('select');
    sel.dataset.segment = c;
    var values = Array.from(new Set(D.queries.map(function (q) { return q.seg[j]; }))).sort();
    [''].concat(values).forEach(function (v) { var o = el('option', v || 'all'); o.value = v; sel.appendChild(o); });
    sel.addEventListener('change', function () { filters[c] = sel.value; apply(); });
    lab.appendChild(sel);
    byId('filters').appendChild(lab);
  });
  apply();

  // the drill-down: one query, two systems' rankings side by side with grades
  var pick = byId('pick'), left = byId('left'), right = byId('right');
  D.queries.forEach(function (q) {
    if (!D.rankings[q.id]) return;
    var o = el('option', q.id + (q.text ? ' \u2014 ' + q.text.slice(0, 80) : ''));
    o.value = q.id;
    pick.appendChild(o);
  });
  [left, right].forEach(function (sel) {
    S.forEach(function (s) { var o = el('option', label(s)); o.value = s; sel.appendChild(o); });
  });
  left.value = S[0];
  right.value = last;
  function ranking(q, s) {
    var box = el('div'), t = el('table'), head = el('thead'), body = el('tbody'), g = D.grades[q] || {};
    box.appendChild(el('h3', label(s)));
    head.appendChild(row('th', ['rank', 'document', 'grade', 'snippet']));
    ((D.rankings[q] || {})[s] || []).forEach(function (d, i) {
      var grade = Object.prototype.hasOwnProperty.call(g, d) ? g[d] : null;
      var cls = grade === null ? '' : 'g' + Math.min(grade, 3);
      body.appendChild(row('td', [i + 1, d, grade === null ? '-' : grade, D.snippets[d] || ''], cls));
    });
    t.appendChild(head);
    t.appendChild(body);
    box.appendChild(t);
    return box;
  }
  function drill() {
    var q = pick.value, text = (Q[q] || {}).text;
    byId('qtext').textContent = q + (text ? ' \u2014 \u201c' + text + '\u201d' : '');
    var mt = byId('qmetrics'), r = byId('rankings');
    mt.textContent = '';
    mt.appendChild(row('th', ['system'].concat(D.measures)));
    [left.value, right.value].forEach(function (s) {
      var v = (D.metrics[q] || {})[s] || {};
      mt.appendChild(row('td', [label(s)].concat(D.measures.map(function (m) { return f4(v[m]); }))));
    });
    r.textContent = '';
    r.appendChild(ranking(q, left.value));
    r.appendChild(ranking(q, right.value));
  }
  [pick, left, right].forEach(function (s) { s.addEventListener('change', drill); });
  if (pick.options.length) drill();
})();
"""


__all__ = ["QueryView", "html_report", "query_view"]
