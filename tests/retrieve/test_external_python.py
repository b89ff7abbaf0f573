"""``python:<module>:<callable>`` and entry-point kinds: retrievers written in Python, evaluated by irflow.

The retrievers are defined here (this module is importable as ``test_external_python``); the
entry-point kind is registered for real: a ``.dist-info`` folder with an ``entry_points.txt`` on
``sys.path``, which ``importlib.metadata`` reads as it reads an installed package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.cli import ROOT
from support.toy import tiny_dataset
from test_external_runs import MEASURES, pytrec_per_query

from irflow.tasks.core.schema import Dataset, InputError, UnknownNameError
from irflow.tasks.metrics import evaluate
from irflow.tasks.retrieve.plugin_process import PluginProcess
from irflow.tasks.retrieve.python_system import ISOLATION
from irflow.tasks.retrieve.searchers import measure_latency, retrieve
from irflow.tasks.systems.external import PluginSpec
from irflow.tasks.systems.specs import parse_system

HERE = "test_external_python"


class Bm25s:
    """A retriever as a user writes one: bm25s with its own tokenizer; options k1, b."""

    calls: list[int] = []

    def __init__(self, k1: float = 1.2, b: float = 0.75, label: str = "", lowercase: bool = True) -> None:
        self.k1, self.b, self.label, self.lowercase = k1, b, label, lowercase

    def index(self, corpus: pd.DataFrame) -> None:
        import bm25s

        self.ids = corpus["doc_id"].tolist()
        texts = (corpus["title"].fillna("") + " " + corpus["text"].fillna("")).tolist()
        self.engine = bm25s.BM25(k1=self.k1, b=self.b)
        self.engine.index(bm25s.tokenize(texts, lower=self.lowercase, show_progress=False), show_progress=False)

    def search(self, queries: list[dict[str, str]], k: int) -> list[list[tuple[str, float]]]:
        import bm25s

        Bm25s.calls.append(len(queries))
        tokens = bm25s.tokenize([q["text"] for q in queries], lower=self.lowercase, show_progress=False)
        docs, scores = self.engine.retrieve(tokens, k=min(k, len(self.ids)), show_progress=False)
        return [[(self.ids[d], float(s)) for d, s in zip(row, row_scores)] for row, row_scores in zip(docs, scores)]


class Fixed:
    """Answers from a table given as JSON (``answers``), in the form a test asks for."""

    def __init__(self, answers: str) -> None:
        self.answers = json.loads(answers)

    def search(self, queries: list[dict[str, str]], k: int) -> Any:
        return self.answers


def make_fixed(target: str, **options: Any) -> Fixed:
    """A plugin factory (entry point): the target is ignored, ``answers`` passed on."""
    return Fixed(**options)


@pytest.fixture(scope="module")
def techdocs(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IRFLOW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        from irflow.tasks.ingest import load_dataset

        return load_dataset("techdocs")


@pytest.fixture
def inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plugins in this process (``IRFLOW_PLUGIN_ISOLATION=inline``): their calls are seen here."""
    monkeypatch.setenv(ISOLATION, "inline")


def test_a_python_retriever_gives_the_metrics_of_its_run(techdocs: Dataset, inline: None) -> None:
    direct = Bm25s(k1=0.8, b=0.3)
    direct.index(techdocs.corpus)
    queries = [{"query_id": q, "text": t} for q, t in zip(techdocs.queries["query_id"], techdocs.queries["text"])]
    ranked = direct.search(queries, 100)
    expected = pytrec_per_query(techdocs, {q["query_id"]: dict(hits) for q, hits in zip(queries, ranked)})

    Bm25s.calls.clear()
    result = retrieve(techdocs, f"python(k1=0.8,b=0.3):{HERE}:Bm25s", depth=100)
    assert Bm25s.calls == [len(queries)]  # one batch, every query
    table = evaluate(result.run, techdocs.qrels, list(MEASURES))
    for metric in MEASURES:
        got = dict(zip(*table[table["metric"] == metric][["query_id", "value"]].to_numpy().T))
        assert max(abs(got[q] - expected[metric][q]) for q in expected[metric]) < 1e-9, metric
    assert result.info["plugin_class"] == f"{HERE}.Bm25s" and len(result.info["plugin_source_sha256"]) == 64
    assert result.info["index_build_seconds"] > 0 and result.info["dropped_hits"] == 0

    default = retrieve(techdocs, f"python:{HERE}:Bm25s", depth=100)  # other options, another system
    assert not default.run.equals(result.run)

    Bm25s.calls.clear()
    latency = measure_latency(techdocs, f"python(k1=0.8,b=0.3):{HERE}:Bm25s", warmup=1, num_runs=1, sample=5)
    assert Bm25s.calls == [1] * 6 and 0 < latency.p50_ms <= latency.p99_ms  # timed around single-query calls
    assert latency.index_build_seconds == result.info["index_build_seconds"]  # prepared once per process


def test_in_a_child_process_the_run_and_latency_are_the_same(techdocs: Dataset) -> None:
    """The default: the retriever runs in a child process (one for retrieval and latency), with the same run."""
    from irflow.tasks.retrieve import python_system

    spec = f"python(k1=0.9,b=0.4):{HERE}:Bm25s"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ISOLATION, "inline")
        here = retrieve(techdocs, spec, depth=100)
    Bm25s.calls.clear()
    there = retrieve(techdocs, spec, depth=100)
    assert Bm25s.calls == []  # not called in this process
    pd.testing.assert_frame_equal(here.run, there.run)
    assert there.info["plugin_class"] == f"{HERE}.Bm25s" and there.info["index_build_seconds"] > 0
    latency = measure_latency(techdocs, spec, warmup=1, num_runs=2, sample=5)
    assert 0 < latency.p50_ms <= latency.p99_ms < 1000
    assert latency.index_build_seconds == there.info["index_build_seconds"]  # indexed once, in the child
    children = {id(p) for p, _ in python_system._PREPARED.values() if isinstance(p, PluginProcess)}
    assert len(children) == 1  # one child served retrieval and latency


def test_options_reach_the_callable_typed(techdocs: Dataset, inline: None) -> None:
    spec = parse_system(f'python(label="two words",lowercase=false,k1=2,b=0.50):{HERE}:Bm25s')
    assert isinstance(spec, PluginSpec) and spec.kwargs == {"b": 0.5, "k1": 2, "label": "two words", "lowercase": False}
    assert str(spec) == f'python(b=0.5,k1=2,label="two words",lowercase=false):{HERE}:Bm25s'
    assert parse_system(str(spec)) == spec
    from irflow.tasks.retrieve.python_system import PluginSearcher

    searcher = PluginSearcher(techdocs, spec)
    assert (searcher.retriever.k1, searcher.retriever.b, searcher.retriever.label) == (2, 0.5, "two words")
    assert searcher.retriever.lowercase is False


def answers(value: Any) -> str:
    return f"python(answers={json.dumps(json.dumps(value))}):{HERE}:Fixed"


def test_answers_in_every_documented_shape_rank_alike() -> None:
    shapes = [
        [[["d1", 2.0], ["d3", 2.0], ["zz", 9.0]], [], []],
        {"q1": [{"doc_id": "d1", "score": 2}, {"id": "d3", "score": 2}, {"id": "zz", "score": 9}]},
        {"q1": ["zz", "d3", "d1"]},  # bare ids: their order is their ranking
    ]
    for value in shapes:
        result = retrieve(tiny_dataset(), answers(value), depth=10)
        assert result.run["doc_id"].tolist() == ["zz", "d3", "d1"], value  # zz, not in the corpus, keeps its rank
        assert result.info["unknown_documents"] == result.info["unknown_document_hits"] == 1
        assert result.info["dropped_hits"] == 0


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([[]], "expected one ranked list per query (3), got 1"),
        ({"q9": []}, "answered query 'q9', which it was not asked"),
        ([[["d1"]], [], []], "hit 1 of query 'q1': expected (doc_id, score)"),
        ([[["d1", "high"]], [], []], "hit 1 of query 'q1': score must be a finite number, got 'high'"),
        ([[["d1", None]], [], []], "score must be a finite number"),
        ([[["d1", 1], ["d1", 2]], [], []], "document 'd1' appears twice for query 'q1'"),
        ("nope", "must return a list of ranked lists"),
        ([{"d1": 1}, [], []], "the ranked list of query 'q1' must be a list"),
        ([[["x", 1]], [], []], "none of the document ids of this ranking is in the corpus of tiny"),
    ],
)
def test_bad_answers_name_the_system(value: Any, fragment: str) -> None:
    spec = answers(value)
    with pytest.raises(InputError) as info:
        retrieve(tiny_dataset(), spec)
    assert fragment in str(info.value) and f"system {str(parse_system(spec))!r}" in str(info.value)


class Broken:
    def __init__(self, **options: Any) -> None:
        if options.get("fail") == "init":
            raise RuntimeError("no index files")

    def index(self, corpus: pd.DataFrame) -> None:
        raise ValueError("corpus too large")

    def search(self, queries: list[dict[str, str]], k: int) -> list[Any]:
        return []


class NoSearch:
    pass


@pytest.mark.parametrize(
    ("spec", "error", "fragment"),
    [
        (f"python(fail=init):{HERE}:Broken", InputError, "creating the retriever failed: RuntimeError: no index files"),
        (f"python:{HERE}:Broken", InputError, "index() failed: ValueError: corpus too large"),
        (f"python:{HERE}:NoSearch", InputError, "got a NoSearch, expected an object with search(queries, k)"),
        (f"python(k9=1):{HERE}:Bm25s", InputError, "unexpected keyword argument 'k9'"),
        (f"python:{HERE}:Missing", InputError, "module 'test_external_python' has no attribute 'Missing'"),
        ("python:no_such_module_x:Thing", InputError, "cannot import module 'no_such_module_x'"),
        (f"python:{HERE}:HERE", InputError, "is a str, not a class or factory to call"),
    ],
)
def test_bad_retrievers_fail_naming_the_system(spec: str, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        retrieve(tiny_dataset(), spec)
    assert fragment in str(info.value) and str(parse_system(spec)) in str(info.value)


def test_bad_python_specs() -> None:
    with pytest.raises(InputError, match="python needs <module>:<callable>"):
        parse_system("python:mypkg")
    with pytest.raises(InputError, match="must be a Python identifier"):
        parse_system('python("a-b"=1):m:C')
    from irflow.tasks.experiment import check_models

    with pytest.raises(UnknownNameError, match="no module named 'no_such_module_x'"):
        check_models(["hybrid:bm25+python:no_such_module_x:Thing"])
    check_models([f"python:{HERE}:Bm25s"])


def register_plugin(folder: Path, kinds: dict[str, str]) -> Path:
    """An installed distribution as importlib.metadata sees one: ``<name>.dist-info`` with metadata and
    entry points (the layout pip writes), in ``folder``."""
    info = folder / "irflow_test_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: irflow-test-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[irflow.systems]\n" + "".join(f"{name} = {value}\n" for name, value in kinds.items())
    )
    return folder


def test_an_entry_point_kind_works_like_a_built_in_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnknownNameError, match=r"plugin kinds \(entry points irflow.systems\): \(none installed\)"):
        parse_system("fixed:x")
    kinds = {"fixed": f"{HERE}:make_fixed", "bm25": f"{HERE}:make_fixed", "broken": "no_such_module_y:f"}
    monkeypatch.syspath_prepend(str(register_plugin(tmp_path, kinds)))
    value = json.dumps(json.dumps({"q1": [["d1", 1.0], ["d3", 0.5]]}))
    spec = parse_system(f"fixed(answers={value}):anything")
    assert isinstance(spec, PluginSpec) and spec.plugin == "fixed" and parse_system(str(spec)) == spec
    result = retrieve(tiny_dataset(), spec, depth=10)
    assert result.run["doc_id"].tolist() == ["d1", "d3"] and result.info["plugin"] == "fixed"
    assert retrieve(tiny_dataset(), f"hybrid:bm25+{spec}", depth=10).run["query_id"].nunique() >= 1
    assert str(parse_system("bm25")) == "bm25"  # a plugin cannot shadow a built-in kind
    with pytest.raises(UnknownNameError, match="plugin kinds .*: broken, fixed"):
        parse_system("sparse:x")
    with pytest.raises(InputError, match="system kind 'broken': cannot load its entry point 'no_such_module_y:f'"):
        retrieve(tiny_dataset(), "broken:x")

    from irflow.tasks.tracking.params import system_params

    params = system_params(str(spec), result.info)
    assert params["system.kind"] == "fixed" and params["plugin.target"] == "anything"
    assert params["plugin.class"] == f"{HERE}.Fixed" and "answers" in json.loads(params["plugin.options"])


def test_an_entry_point_kind_in_a_fresh_process(tmp_path: Path) -> None:
    """A fresh process finds the kind through PYTHONPATH, as it finds an installed package."""
    register_plugin(tmp_path / "site", {"fixed": f"{HERE}:make_fixed"})
    value = json.dumps(json.dumps({"q1": [["d1", 1.0]]}))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT / "tests"), str(Path(__file__).parent)]),
        "IRFLOW_CACHE_DIR": str(tmp_path / "cache"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
    }
    code = (
        "from irflow.tasks.retrieve.searchers import retrieve; from support.toy import tiny_dataset; "
        f"print(retrieve(tiny_dataset(), {f'fixed(answers={value}):x'!r}).run['doc_id'].tolist())"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "['d1']", done.stderr[-2000:]
