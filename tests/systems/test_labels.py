"""Readable default labels for every kind of system, and the report's labels built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from irflow.tasks.report.plots import short_labels
from irflow.tasks.systems.labels import default_label
from irflow.tasks.systems.specs import as_spec


@pytest.mark.parametrize(
    ("spec", "label"),
    [
        ("bm25", "bm25"),
        ("bm25:k1=1.2,b=0.75", "bm25:k1=1.2,b=0.75"),
        ("dense:minilm", "dense:all-MiniLM-L6-v2"),
        ("dense(index=chroma):minilm", "dense(index=chroma):all-MiniLM-L6-v2"),
        ("hybrid:bm25+dense:minilm", "hybrid:bm25+dense:all-MiniLM-L6-v2"),
        ("rerank:minilm@bm25", "rerank:all-MiniLM-L6-v2@bm25"),
        ("http:http://127.0.0.1:8080/search", "http:127.0.0.1:8080/search"),  # no doubled scheme, the port kept
        (
            "http(preset=elasticsearch):http://127.0.0.1:9200/docs/_search",
            "http(preset=elasticsearch):127.0.0.1:9200/docs/_search",
        ),
        ("dense(base_url=http://127.0.0.1:8000/v1):openai:text-embedding-3-small", "dense:text-embedding-3-small"),
        ("python:mypkg.search:BM25Plus", "python:mypkg.search:BM25Plus"),
    ],
)
def test_every_kind_has_a_readable_label(spec: str, label: str) -> None:
    assert default_label(spec) == label
    assert default_label(as_spec(spec)) == label  # a parsed spec and its canonical string alike
    assert default_label(str(as_spec(spec))) == label


def test_a_run_file_is_named_by_its_file_and_long_options_are_cut(tmp_path: Path) -> None:
    run = tmp_path / "bm25s_plain.trec"
    run.write_text("q1 Q0 d1 1 1.0 tag\n")
    assert str(as_spec(f"run:{run}")).startswith("run(sha256=")
    assert default_label(f"run:{run}") == "run:bm25s_plain.trec"
    label = default_label('dense(query_prompt="query: a prompt much longer than a label should be"):minilm')
    assert label == 'dense(query_prompt="query: a prompt much lo…"):all-MiniLM-L6-v2'


def test_report_labels_prefer_given_ones_and_never_share_a_label(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "run.trec").write_text("q1 Q0 d1 1 1.0 tag\n")
    specs = [str(as_spec(f"run:{a / 'run.trec'}")), str(as_spec(f"run:{b / 'run.trec'}")), "bm25"]
    labels = short_labels(specs, {"bm25": "tuned bm25"})
    assert labels[specs[0]] == specs[0] and labels[specs[1]] == specs[1]  # the same file name twice: full specs
    assert labels["bm25"] == "tuned bm25"
