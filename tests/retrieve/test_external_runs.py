"""``run:<path>``: run files written by other tools, evaluated like irflow's own systems.

The SciFact tests call bm25s directly (its own tokenizer, k1=1.2, b=0.75: a different ranking from
irflow's ``bm25``), write the run as TREC, ranx JSON and Parquet, and check the numbers against
pytrec_eval on the file; the end-to-end test runs ``irflow run`` with the file beside irflow's bm25.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.cli import irflow
from support.toy import tiny_dataset

from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.metrics import evaluate
from irflow.tasks.retrieve.costs import retrieval_costs
from irflow.tasks.retrieve.searchers import measure_latency, retrieve
from irflow.tasks.systems.external import RunSpec
from irflow.tasks.systems.specs import parse_system

pytrec_eval = pytest.importorskip("pytrec_eval")
MEASURES = {"nDCG@10": "ndcg_cut_10", "R@100": "recall_100", "P@10": "P_10", "AP@100": "map_cut_100", "Bpref": "bpref"}


def bm25s_run(dataset: Dataset, k: int = 100) -> dict[str, dict[str, float]]:
    """SciFact ranked by bm25s called directly, scores rounded to 4 decimals (ties that float32 keeps)."""
    import bm25s

    corpus = dataset.corpus
    texts = (corpus["title"].fillna("") + " " + corpus["text"].fillna("")).tolist()
    engine = bm25s.BM25(k1=1.2, b=0.75)
    engine.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    queries = bm25s.tokenize(dataset.queries["text"].tolist(), stopwords="en", show_progress=False)
    docs, scores = engine.retrieve(queries, k=k, show_progress=False)
    ids = corpus["doc_id"].astype(str).to_numpy()
    return {
        str(q): {str(ids[d]): round(float(s), 4) for d, s in zip(row_docs, row_scores)}
        for q, row_docs, row_scores in zip(dataset.queries["query_id"], docs, scores)
    }


def write_trec(run: dict[str, dict[str, float]], path: Path, sep: str = " ") -> Path:
    lines = [
        sep.join([q, "Q0", d, str(rank), f"{s:.4f}", "bm25s"])
        for q, hits in run.items()
        for rank, (d, s) in enumerate(sorted(hits.items(), key=lambda x: -x[1]), 1)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def pytrec_per_query(dataset: Dataset, run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    qrels: dict[str, dict[str, int]] = {}
    for q, d, r in dataset.qrels[["query_id", "doc_id", "relevance"]].itertuples(index=False):
        qrels.setdefault(str(q), {})[str(d)] = int(r)
    measures = {"ndcg_cut.10", "recall.100", "P.10", "map_cut.100", "bpref"}
    found = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    return {m: {q: found.get(q, {}).get(key, 0.0) for q in qrels} for m, key in MEASURES.items()}


def irflow_per_query(dataset: Dataset, system: str) -> dict[str, dict[str, float]]:
    table = evaluate(retrieve(dataset, system, depth=100).run, dataset.qrels, list(MEASURES))
    return {m: dict(zip(g["query_id"], g["value"])) for m, g in table.groupby("metric")}


@pytest.fixture(scope="module")
def scifact(beir_dataset: Callable[..., Any]) -> Dataset:
    return beir_dataset("scifact")


@pytest.fixture(scope="module")
def scifact_run(scifact: Dataset) -> dict[str, dict[str, float]]:
    return bm25s_run(scifact)


@pytest.mark.shared
def test_trec_json_and_parquet_runs_equal_pytrec_eval_on_the_file(
    scifact: Dataset, scifact_run: dict[str, dict[str, float]], tmp_path: Path
) -> None:
    expected = pytrec_per_query(scifact, scifact_run)
    trec = write_trec(scifact_run, tmp_path / "bm25s.trec", sep="\t")
    (tmp_path / "bm25s.json").write_text(json.dumps(scifact_run), encoding="utf-8")
    rows = [(q, d, s) for q, hits in scifact_run.items() for d, s in hits.items()]
    pd.DataFrame(rows, columns=["query_id", "doc_id", "score"]).to_parquet(tmp_path / "bm25s.parquet")
    (tmp_path / "bm25s.trec.gz").write_bytes(gzip.compress(trec.read_bytes()))
    for name in ("bm25s.trec", "bm25s.json", "bm25s.parquet", "bm25s.trec.gz"):
        got = irflow_per_query(scifact, f"run:{tmp_path / name}")
        for metric in MEASURES:
            assert got[metric].keys() == expected[metric].keys()
            worst = max(abs(got[metric][q] - expected[metric][q]) for q in expected[metric])
            assert worst < 1e-9, (name, metric, worst)
    assert irflow_per_query(scifact, "bm25")["nDCG@10"] != expected["nDCG@10"]  # another ranking than irflow's


@pytest.mark.e2e
@pytest.mark.shared
def test_irflow_run_evaluates_a_run_file_beside_its_own_bm25(scifact_run: dict[str, dict[str, float]], tmp_path: Path):
    """End to end: the file's per-query values equal pytrec_eval's on the whole file (a document missing from
    the corpus at rank 1 of every fourth query, so those are 101 deep), it is tested against irflow's bm25 in
    the same report, its content hash is tracked, and a changed file is a new system."""
    from conftest import BEIR_DIR

    env = {
        **os.environ,
        "IRFLOW_CACHE_DIR": str(tmp_path / "cache"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "HF_HUB_OFFLINE": "1",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }
    done = irflow("datasets", "import", str(BEIR_DIR / "scifact.zip"), "--format", "beir", "--name", "sf", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    run = {q: {"not-in-corpus": 1e3, **hits} if i % 4 == 3 else hits for i, (q, hits) in enumerate(scifact_run.items())}
    path = write_trec(run, tmp_path / "bm25s.trec")
    out = tmp_path / "out"
    metrics = [x for m in MEASURES for x in ("--metric", m)]
    args = ["run", "--dataset", "sf", "--system", "bm25", "--system", f"run:{path}", *metrics, "--output", str(out)]
    done = irflow(*args, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((out / "metrics.json").read_text())
    system = str(RunSpec(str(path)))
    assert list(document["systems"]) == ["bm25", system]
    assert system.startswith("run(sha256=") and system.endswith(f"):{path}")
    cost = document["cost"][system]
    assert cost["p95_ms"] is None and "not measured" in cost["note"] and cost["dropped_hits"] == 0
    assert cost["queries_without_hits"] == 0 and document["cost"]["bm25"]["p95_ms"] > 0
    assert cost["unknown_documents"] == 1 and cost["unknown_document_hits"] == len(scifact_run) // 4
    assert document["depth"] == 100 and document["depth_given"] is False

    per_query = pd.read_parquet(out / "per_query.parquet")
    qrels = pd.read_parquet(tmp_path / "cache" / "datasets" / "sf" / "test" / "qrels.parquet")
    expected = pytrec_per_query(Dataset("sf", "test", pd.DataFrame(), pd.DataFrame(), qrels), run)
    mine = per_query[per_query["system"] == system]
    for metric in MEASURES:
        values = dict(zip(*mine[mine["metric"] == metric][["query_id", "value"]].to_numpy().T))
        assert values.keys() == expected[metric].keys()
        assert max(abs(values[q] - expected[metric][q]) for q in values) < 1e-9, metric

    significance = pd.read_csv(out / "significance.csv")
    row = significance[(significance["candidate"] == system) & (significance["metric"] == "nDCG@10")].iloc[0]
    assert row["baseline"] == "bm25" and row["n"] == 300 and 0 <= row["p_adjusted"] <= 1
    report = (out / "report.md").read_text()
    assert system in report and "latency not measured: a run file" in report and "p (adj.)" in report
    assert "depth 100 (run files: every hit, as trec_eval reads them)" in report
    assert f"{len(scifact_run) // 4:,} hits of 1 document not in the corpus, kept at their rank" in report

    db = sqlite3.connect(tmp_path / "mlflow.db")
    params = dict(db.execute("select key, value from params where key like 'run.%'").fetchall())
    db.close()
    import hashlib

    assert params["run.sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and params["run.format"] == "trec"

    # the same path with other content is another system; the old name no longer evaluates
    path.write_text(path.read_text().replace("bm25s", "changed"), encoding="utf-8")
    assert str(parse_system(f"run:{path}")) != system
    with pytest.raises(InputError, match="the file changed since this system was named"):
        retrieve(tiny_dataset(), system)


# ---------------------------------------------------------------------------------------------
# validation on a tiny dataset (queries q1-q3, documents d1 d2 d3 q1 d5)


def run_file(tmp_path: Path, text: str | bytes, name: str = "run.trec") -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return f"run:{path}"


def test_unknown_queries_are_dropped_unknown_documents_kept_at_their_rank_and_ties_follow_trec_eval(
    tmp_path: Path,
) -> None:
    text = "q1 Q0 d1 1 2 t\nq1 Q0 d3 2 2 t\nq1 Q0 gone 3 9 t\nq2 Q0 d2 1 1 t\nqX Q0 d1 1 5 t\nqY Q0 d2 1 5 t\n"
    result = retrieve(tiny_dataset(), run_file(tmp_path, text), depth=10)
    assert list(zip(result.run["query_id"], result.run["doc_id"], result.run["rank"])) == [
        ("q1", "gone", 1),  # not in the corpus: kept at its rank, as trec_eval keeps it
        ("q1", "d3", 2),  # tie at 2: doc id descending, whatever the file's ranks say
        ("q1", "d1", 3),
        ("q2", "d2", 1),
    ]
    counts = {
        "unknown_queries": 2,
        "unknown_documents": 1,
        "unknown_document_hits": 1,
        "dropped_hits": 2,
        "queries_without_hits": 1,
    }
    assert {k: result.info[k] for k in counts} == counts
    assert retrieval_costs(result.info) == counts
    assert retrieve(tiny_dataset(), run_file(tmp_path, text), depth=1).run["doc_id"].tolist() == ["gone", "d2"]
    hybrid = retrieve(tiny_dataset(), f"hybrid:bm25+{run_file(tmp_path, text)}", depth=10)
    assert retrieval_costs(hybrid.info)["dropped_hits"] == 2  # counted inside a hybrid too
    latency = measure_latency(tiny_dataset(), run_file(tmp_path, text))
    assert latency.p95_ms is None and latency.note and "run file" in latency.note


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("a.trec", "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 t\n", "run.trec:2: expected 6 fields 'query_id Q0 doc_id rank"),
        ("a.trec", "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 high t\n", ":2: score must be a finite number, got 'high'"),
        ("a.trec", "q1 Q0 d1 1 nan t\n", ":1: score must be a finite number, got 'nan'"),
        ("a.trec", "q1 Q0 d1 1 2 t\n\nq1 Q0 d1 2 1 t\n", ":3: document appears twice for its query, got 'd1'"),
        ("a.trec", "q1 Q0 d1 one 2 t\n", ":1: rank must be an integer, got 'one'"),
        ("a.json", '{"q1": {"d1": 1, "d2": "x"}}', 'field ["q1"]["d2"]: score must be a finite number, got \'x\''),
        ("a.json", '{"q1": {"d1": 1, "d1": 2}}', 'key "d1" appears twice in one object'),
        ("a.json", '{"q1": {"d1": 1}, "q1": {"d2": 2}}', 'key "q1" appears twice in one object'),
        ("a.json", '{"q1": {"d:1": 1, "d:1": 2}}', 'key "d:1" appears twice in one object'),
        ("a.json", '{"q1": {"d1": 1' + "0" * 400 + "}}", 'field ["q1"]["d1"]: score must be a finite number'),
        ("a.json", '{"q1": {"d1": true}}', 'field ["q1"]["d1"]: score must be a finite number, got True'),
        ("a.json", '{"q1": {"d1": NaN}}', 'field ["q1"]["d1"]: score must be a finite number'),
        ("a.json", '{"q1": [1, 2]}', 'field ["q1"]: expected {"query id": {"doc id": score'),
        ("a.json", '{"q1": {"d1": 1}', "not valid JSON"),
        ("a.trec", "", "the run file holds no hits"),
        ("a.trec", "x1 Q0 d1 1 2 t\nx2 Q0 d2 1 1 t\n", "none of the 2 query ids of this ranking is a query of tiny"),
        ("a.trec", "q1 Q0 z1 1 2 t\n", "none of the document ids of this ranking is in the corpus of tiny"),
        ("a.trec", b"q1 Q0 d\xff 1 2 t\n", "not UTF-8 text at byte"),
    ],
)
def test_bad_run_files_fail_naming_file_line_or_field(tmp_path: Path, name: str, content: str, fragment: str) -> None:
    spec = run_file(tmp_path, content, "run.trec" if name.endswith("trec") else "run.json")
    with pytest.raises(InputError) as info:
        retrieve(tiny_dataset(), spec)
    assert fragment in str(info.value) and str(tmp_path) in str(info.value)


def test_json_runs_with_colons_in_ids_read_like_any_other(tmp_path: Path) -> None:
    """Ids containing ':' make the quick repeated-key check inconclusive: the file is read key by key, same table."""
    from irflow.tasks.retrieve.runfile import read_run

    path = tmp_path / "run.json"
    path.write_text('{"q:1": {"d:1": 2, "d2": 1.5}, "q2": {"d:1": 3, "d3": 1e-3}}')
    run = read_run(path).run
    assert run.to_dict("list") == {
        "query_id": ["q:1", "q:1", "q2", "q2"],
        "doc_id": ["d:1", "d2", "d:1", "d3"],
        "score": [2.0, 1.5, 3.0, 0.001],
    }
    assert list(run.dtypes) == [pd.StringDtype(na_value=float("nan"))] * 2 + [float]


def test_bad_parquet_runs_name_the_field_and_row(tmp_path: Path) -> None:
    cases = [
        (pd.DataFrame({"query_id": ["q1"], "doc": ["d1"], "score": [1.0]}), "lacks column(s) doc_id"),
        (pd.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["d1", "d2"], "score": [1.0, float("nan")]}), "row 2"),
        (pd.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "score": ["high"]}), "field score: expected numbers"),
        (pd.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["d1", "d1"], "score": [1.0, 2.0]}), "row 2: document"),
        (pd.DataFrame({"query_id": ["q1", None], "doc_id": ["d1", "d2"], "score": [1.0, 2.0]}), "query_id of row 2"),
    ]
    for frame, fragment in cases:
        frame.to_parquet(tmp_path / "run.parquet")
        with pytest.raises(InputError, match="run.parquet") as info:
            retrieve(tiny_dataset(), f"run:{tmp_path / 'run.parquet'}")
        assert fragment in str(info.value)
    pd.DataFrame({"query_id": [1], "doc_id": ["d9"], "score": [3], "rank": [1]}).to_parquet(tmp_path / "ok.parquet")
    small = Dataset("t", "test", *_frames(), {"fingerprint": "x"})
    run = retrieve(small, f"run:{tmp_path / 'ok.parquet'}").run  # integer ids are ids, integer scores numbers
    assert run[["query_id", "doc_id", "score"]].to_numpy().tolist() == [["1", "d9", 3.0]]
    with pytest.raises(InputError, match="a run for another dataset"):  # query id 1 is no query of tiny
        retrieve(tiny_dataset(), f"run:{tmp_path / 'ok.parquet'}")


def _frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    corpus = pd.DataFrame({"doc_id": ["d9"], "title": [""], "text": ["x"]})
    queries = pd.DataFrame({"query_id": ["1"], "text": ["x"]})
    return corpus, queries, pd.DataFrame({"query_id": ["1"], "doc_id": ["d9"], "relevance": [1]})


def test_run_spec_identity_is_the_content_hash_and_paths_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a b+c.trec").write_text("q1 Q0 d1 1 2 t\n")
    spec = parse_system("run:a b+c.trec")
    assert isinstance(spec, RunSpec) and spec.path == str(tmp_path / "a b+c.trec") and len(spec.sha256) == 16
    text = str(spec)
    assert text == f'run(sha256={spec.sha256}):"{tmp_path}/a b+c.trec"' and parse_system(text) == spec
    member = parse_system(f"hybrid:{text}+bm25")  # quoted, so the + inside the path does not split
    assert str(member) == f"hybrid:{text}+bm25" and parse_system(str(member)) == member
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.trec").write_text("q1 Q0 d1 1 2 t\n")
    assert parse_system("run:x.trec", base=tmp_path / "sub").path == str(tmp_path / "sub" / "x.trec")
    with pytest.raises(InputError, match="cannot read run file"):
        parse_system("run:missing.trec")
    with pytest.raises(InputError, match="sha256='xyz' must be 16 to 64 hex digits"):
        parse_system("run(sha256=xyz):a.trec")
    # a stored spec parses without its file (a report rebuilt elsewhere), and the file is checked when it runs
    assert parse_system(f"run(sha256={'0' * 16}):/nowhere/run.trec").path == "/nowhere/run.trec"


def test_an_experiment_reads_run_files_from_its_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from irflow.tasks.experiment import load_experiment

    (tmp_path / "exp" / "runs").mkdir(parents=True)
    (tmp_path / "exp" / "runs" / "a.trec").write_text("q1 Q0 d1 1 2 t\n")
    yaml = "systems:\n  mine: run:runs/a.trec\n  bm: bm25\nbaseline: run:runs/a.trec\n"
    (tmp_path / "exp" / "e.yaml").write_text(yaml)
    monkeypatch.chdir(tmp_path)
    experiment = load_experiment("exp/e.yaml")
    spec = parse_system(experiment.labelled()["mine"])
    assert isinstance(spec, RunSpec) and spec.path == str(tmp_path / "exp" / "runs" / "a.trec")
    assert experiment.baseline_spec() == str(spec)
    (tmp_path / "exp" / "bad.yaml").write_text("systems: [run:nope.trec]\n")
    with pytest.raises(InputError, match=r"bad.yaml: systems\[0\]: .*cannot read run file"):
        load_experiment(tmp_path / "exp" / "bad.yaml")
