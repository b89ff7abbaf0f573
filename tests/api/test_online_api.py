"""``irflow.abtest``, ``irflow.interleave`` and ``irflow.power`` in this process, their numbers equal to what
``irflow abtest``, ``irflow interleave`` and ``irflow power`` write, their results saved and loaded back
equal, bad arguments named, and neither Prefect nor MLflow imported by a default call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from support.abtest import simulate_log
from support.cli import irflow

from irflow.api import ABTest, Interleaving, abtest, interleave, power
from irflow.tasks.core.schema import InputError
from irflow.tasks.online.interleave import team_draft

ROOT = Path(__file__).resolve().parents[2]


def _interleaving_log(tmp_path: Path, impressions: int = 300, same: bool = False) -> Path:
    """A team-draft log where team "new" holds the clicked result more often than "old" (``same``: no clicks
    favour either team: each list's clicks are split evenly)."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(impressions):
        docs = [f"d{j}" for j in range(12)]
        new, old = list(rng.permutation(docs)[:6]), list(rng.permutation(docs)[:6])
        shown, teams = team_draft(new, old, 6, rng)
        for position, (doc, team) in enumerate(zip(shown, teams, strict=True), 1):
            clicked = 0 if same else int(rng.random() < (0.5 if doc == new[0] else 0.08))
            rows.append((f"i{i}", f"q{i % 37}", position, doc, "new" if team == 1 else "old", clicked))
    path = tmp_path / ("same.csv" if same else "log.csv")
    pd.DataFrame(rows, columns=["impression", "query", "position", "doc_id", "team", "clicked"]).to_csv(
        path, index=False
    )
    return path


def _per_query(systems: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.DataFrame(
        [(s, f"q{i:03d}", "nDCG@10", float(v)) for s, values in systems.items() for i, v in enumerate(values)],
        columns=["system", "query_id", "metric", "value"],
    )


def _result_folder(tmp_path: Path, per_query: pd.DataFrame, baseline: str) -> Path:
    """A minimal result folder of ``irflow run`` (metrics.json, per_query.parquet, runs/)."""
    from irflow.tasks.systems.specs import as_spec

    folder = tmp_path / "run"
    (folder / "runs").mkdir(parents=True)
    systems = list(dict.fromkeys(per_query["system"]))
    document = {"baseline": baseline, "systems": {s: {"nDCG@10": 0.5} for s in systems}}
    (folder / "metrics.json").write_text(json.dumps(document))
    per_query.to_parquet(folder / "per_query.parquet", index=False)
    for s in systems:
        (folder / "runs" / f"{as_spec(s).slug}.trec").write_text("q000 Q0 d1 1 1.0 x\n")
    return folder


# ----------------------------------------------------------------------------------------------------------
# A/B tests


def test_abtest_of_a_dataframe_equals_that_of_its_file_and_round_trips(tmp_path: Path) -> None:
    table = simulate_log(3, users=500, effect=0.05, arms=("old", "new"))
    path = tmp_path / "ab.csv"
    table.to_csv(path, index=False)
    from_file = abtest(path, control="old", sequential=True)
    from_frame = abtest(table, control="old", sequential=True)
    pd.testing.assert_frame_equal(from_file.metrics, from_frame.metrics, rtol=1e-12, atol=1e-12)
    pd.testing.assert_frame_equal(from_file.sequential, from_frame.sequential, rtol=1e-12, atol=1e-12)
    assert from_frame.srm == from_file.srm and from_frame.control == "old" and from_frame.treatment == "new"
    assert list(from_frame.metrics.columns[:7]) == [
        "control",
        "treatment",
        "difference",
        "se",
        "ci_low",
        "ci_high",
        "p_value",
    ]
    assert from_frame.verdict.startswith("new (treatment) wins on ctr") and "as planned" in from_frame.verdict
    saved = from_frame.save(tmp_path / "out")
    assert sorted(p.name for p in saved.iterdir()) == ["metrics.json", "report.html", "report.md"]
    assert (saved / "report.md").read_text().splitlines()[2] == "**Verdict.** " + from_frame.verdict
    assert ABTest.load(saved) == from_frame
    assert "<table" in from_frame._repr_html_()


def test_a_tracked_abtest_is_one_mlflow_run_in_the_experiment_asked_for() -> None:
    import mlflow

    result = abtest(simulate_log(1, users=200, effect=0.05, arms=("old", "new")), control="old", track=True,
                    experiment="ab-library")  # fmt: skip
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])  # this test's own store
    (run,) = mlflow.search_runs(experiment_names=["ab-library"], output_format="list")
    assert run.data.tags["irflow.kind"] == "abtest" and run.info.status == "FINISHED"
    assert mlflow.get_experiment_by_name("irflow-abtest") is None  # not the default experiment
    assert {"metrics.json", "report.md"} <= {f.path for f in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert result.verdict


def test_a_sample_ratio_mismatch_makes_the_verdict_untrustworthy() -> None:
    result = abtest(simulate_log(5, users=2000, treatment_share=0.35))
    assert result.srm.mismatch and not result.trustworthy and result.sequential is None
    assert "untrustworthy" in result.verdict and "sample-ratio mismatch" in result.verdict


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"log": 3}, "log"),
        ({"log": "no/such.csv"}, "log="),
        ({"treatment_share": 1.5}, "treatment_share"),
        ({"tau": 0}, "tau"),
        ({"sequential": "yes"}, "sequential"),
        ({"unit": ""}, "unit"),
        ({"control": "nobody"}, "control"),
        ({"unit": "session"}, "session"),
    ],
)
def test_abtest_bad_arguments_name_the_argument(kwargs: dict[str, object], named: str) -> None:
    arguments: dict[str, object] = {"log": simulate_log(1, users=50), **kwargs}
    with pytest.raises(InputError, match=named):
        abtest(**arguments)  # type: ignore[arg-type]


def test_a_bad_log_row_is_named_in_a_dataframe() -> None:
    table = pd.DataFrame({"user_id": ["u1", "u2"], "arm": ["A", "B"], "query": ["q", "q"], "clicked": [1, "maybe"]})
    with pytest.raises(InputError, match=r"log: row 2: field 'clicked' is 'maybe'"):
        abtest(table)


# ----------------------------------------------------------------------------------------------------------
# interleaving


def test_interleaving_a_log_round_trips_and_says_no_preference_plainly(tmp_path: Path) -> None:
    result = interleave(log=_interleaving_log(tmp_path))
    assert result.mode == "log" and result.systems == ("new", "old") and result.prefers == "new"
    assert result.verdict.startswith("Users prefer new")
    assert int(result.outcome.loc["A", "wins"]) + result.ties + int(result.outcome.loc["B", "wins"]) == 300
    assert list(result.per_query.columns) == ["query_id", "impressions", "wins", "ties", "losses"]
    assert Interleaving.load(result.save(tmp_path / "out")) == result
    assert (tmp_path / "out" / "report.md").read_text().splitlines()[2] == "**Verdict.** " + result.verdict

    tied = interleave(log=_interleaving_log(tmp_path, same=True))
    assert tied.prefers is None and tied.verdict.startswith("No preference: new and old tie on every impression")
    report = (tied.save(tmp_path / "tied") / "report.md").read_text()
    assert report.splitlines()[2] == "**Verdict.** " + tied.verdict and "Users prefer" not in report


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({}, "dataset and systems"),
        ({"dataset": "techdocs", "systems": "bm25"}, "systems="),
        ({"dataset": "techdocs", "systems": ["bm25", "bm25"]}, "the two systems are the same"),
        ({"dataset": "techdocs", "systems": ["bm25", "bm25:k1=1.2"], "depth": 0}, "depth"),
        ({"dataset": "techdocs", "systems": ["bm25", "bm25:k1=1.2"], "clicks": "nonsense"}, "click"),
        ({"dataset": "techdocs", "systems": ["bm25", "bm25:k1=1.2"], "alpha": 2}, "alpha"),
        ({"log": "no/such.csv"}, "log="),
    ],
)
def test_interleave_bad_arguments_name_the_argument(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(InputError, match=named):
        interleave(**kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------
# power


def test_power_of_a_folder_equals_irflow_power_and_of_an_evaluation_too(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    base = rng.random(60)
    per_query = _per_query({"bm25": base, "bm25:k1=1.2": np.clip(base + rng.normal(0.02, 0.1, 60), 0, 1)})
    folder = _result_folder(tmp_path, per_query, "bm25")
    done = irflow("power", str(folder), "--metric", "nDCG@10", "--delta", "0.03", "--json", env={**os.environ})
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout)
    found = power(folder, metric="nDCG@10", delta=0.03)
    assert found.baseline == expected["baseline"] and list(found.table.index) == list(expected["systems"])
    for system, values in expected["systems"].items():
        row = found.table.loc[system]
        assert row["spec"] == values.pop("spec")
        for key, value in values.items():
            assert (None if pd.isna(row[key]) else row[key]) == pytest.approx(value, rel=1e-12, abs=1e-12), key
    evaluation = SimpleNamespace(per_query=per_query, baseline="bm25")
    assert power(evaluation, metric="nDCG@10", delta=0.03) == found
    assert "bm25:k1=1.2 against bm25" in found.verdict


def test_power_names_systems_by_label_with_the_spec_a_column_away(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    base = rng.random(40)
    dense = "dense:sentence-transformers/all-MiniLM-L6-v2"
    per_query = _per_query({"bm25": base, dense: np.clip(base + rng.normal(0.05, 0.1, 40), 0, 1)})
    folder = _result_folder(tmp_path, per_query, "bm25")
    found = power(folder, resamples=0)
    assert (
        list(found.table.index) == ["dense:all-MiniLM-L6-v2"]
        and found.table.loc["dense:all-MiniLM-L6-v2", "spec"] == dense
    )
    assert found.verdict.startswith("dense:all-MiniLM-L6-v2 against bm25: ")
    assert power(folder, resamples=0, baseline=dense).baseline == "dense:all-MiniLM-L6-v2"  # a spec is understood
    done = irflow("power", str(folder), "--resamples", "0", env={**os.environ})
    assert done.returncode == 0, done.stderr
    assert dense not in done.stdout and done.stdout.splitlines()[1].startswith("dense:all-MiniLM-L6-v2: 40 queries")
    done = irflow(
        "power", str(folder), "--resamples", "0", "--baseline", "dense:all-MiniLM-L6-v2", "--json", env={**os.environ}
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["baseline"] == "dense:all-MiniLM-L6-v2" and document["baseline_spec"] == dense
    assert document["systems"]["bm25"]["spec"] == "bm25"


def test_interleaving_names_systems_by_label(tmp_path: Path) -> None:
    from irflow.tasks.online.interleave import Outcome
    from irflow.tasks.online.interleave_report import interleave_document, interleave_markdown

    dense = "dense:sentence-transformers/all-MiniLM-L6-v2"
    document = interleave_document(
        Outcome(100, 60, 10, 30, 0.15, 0.001, "A", 0.05),
        (dense, "bm25"),
        mode="simulation",
        dataset={"name": "techdocs", "split": "test", "queries": 80},
        click_model={"kind": "pbm"},
        depth=10,
        seed=0,
        offline={dense: {"nDCG@10": 0.66}, "bm25": {"nDCG@10": 0.70}},
    )
    assert document["interleave"]["labels"] == {"A": "dense:all-MiniLM-L6-v2", "B": "bm25"}
    result = Interleaving.from_document(document, pd.DataFrame(columns=["query_id"]))
    assert result.systems == ("dense:all-MiniLM-L6-v2", "bm25") and result.specs == (dense, "bm25")
    assert result.prefers == "dense:all-MiniLM-L6-v2" and dense not in result.verdict
    assert result.outcome.loc["A", "spec"] == dense and result.outcome.loc["A", "nDCG@10"] == 0.66
    report = interleave_markdown(document)
    assert report.splitlines()[0] == "# Interleaving: `dense:all-MiniLM-L6-v2` (A) vs `bm25` (B)"
    assert f"- A = `dense:all-MiniLM-L6-v2` (spec `{dense}`)" in report
    assert "**Verdict.** Users prefer dense:all-MiniLM-L6-v2 (A = dense:all-MiniLM-L6-v2, B = bm25" in report


def test_power_with_nothing_to_compare_says_so() -> None:
    one = SimpleNamespace(per_query=_per_query({"a": np.linspace(0, 1, 20)}), baseline="a")
    assert power(one, resamples=0).verdict.startswith("Nothing to compare")
    flat = np.linspace(0, 1, 20)
    same = SimpleNamespace(per_query=_per_query({"a": flat, "b": flat}), baseline="a")
    assert "Nothing to compare for b" in power(same, resamples=0).verdict


@pytest.mark.parametrize(
    ("systems", "said"),
    [
        ({"bm25": np.linspace(0, 1, 20)}, "Nothing to compare: bm25 is the only system with nDCG@10 values."),
        (
            {"bm25": np.linspace(0, 1, 20), "bm25:k1=1.2": np.linspace(0, 1, 20)},
            "for bm25:k1=1.2: its nDCG@10 equals bm25's",
        ),
        (
            {"bm25": np.linspace(0, 0.5, 20), "bm25:k1=1.2": np.linspace(0.1, 0.6, 20)},
            "differs from bm25's by exactly +0.1000",
        ),
    ],
)
def test_irflow_power_says_nothing_to_compare_plainly(
    tmp_path: Path, systems: dict[str, np.ndarray], said: str
) -> None:
    """One system, or σ_Δ = 0: the command says what Power.verdict says, not "effect 0.0" beside "power 1.0"."""
    folder = _result_folder(tmp_path, _per_query(systems), "bm25")
    done = irflow("power", str(folder), "--metric", "nDCG@10", "--resamples", "0", env={**os.environ})
    assert done.returncode == 0, done.stderr
    assert said in done.stdout and said in power(folder, metric="nDCG@10", resamples=0).verdict
    assert "power now" not in done.stdout and "±0.0000" not in done.stdout


def test_identical_rankings_say_no_preference_and_size_nothing(tmp_path: Path) -> None:
    """Two systems with the same top 10 on every query: no preference, no queries sized for a winner, whatever
    the simulated users' coin flips say."""
    from irflow.tasks.core.runs import write_trec
    from irflow.tasks.ingest import load_dataset
    from irflow.tasks.retrieve.searchers import retrieve

    run = retrieve(load_dataset("techdocs"), "bm25", 10).run
    specs = [f"run:{write_trec(run, tmp_path / f'{name}.trec', name)}" for name in ("a", "b")]
    result = interleave("techdocs", specs, users=800, replicates=20)
    assert result.prefers is None and result.queries_to_detect is None
    assert result.verdict.startswith("No preference: ") and "rank every query alike (top 10)" in result.verdict
    report = (result.save(tmp_path / "out") / "report.md").read_text()
    assert report.splitlines()[2] == "**Verdict.** " + result.verdict and "queries needed" not in report


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"metric": "P@7"}, "metric="),
        ({"delta": float("nan")}, "delta"),
        ({"alpha": 0}, "alpha"),
        ({"power": 1}, "power"),
        ({"resamples": -1}, "resamples"),
        ({"baseline": "zzz"}, "baseline"),
    ],
)
def test_power_bad_arguments_name_the_argument(kwargs: dict[str, object], named: str) -> None:
    evaluation = SimpleNamespace(per_query=_per_query({"a": np.linspace(0, 1, 20), "b": np.linspace(0, 0.9, 20)}))
    with pytest.raises(InputError, match=named):
        power(evaluation, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="evaluation_or_folder"):
        power(42)


# ----------------------------------------------------------------------------------------------------------
# neither Prefect nor MLflow


def test_default_calls_import_neither_prefect_nor_mlflow(tmp_path: Path) -> None:
    simulate_log(2, users=100).to_csv(tmp_path / "ab.csv", index=False)
    log = _interleaving_log(tmp_path, impressions=40)
    code = f"""
import sys
import numpy as np, pandas as pd
from types import SimpleNamespace
from irflow.api import abtest, interleave, power
abtest({str(tmp_path / "ab.csv")!r}, sequential=True).save({str(tmp_path / "ab")!r})
interleave(log={str(log)!r}).save({str(tmp_path / "il")!r})
pq = pd.DataFrame({{"system": ["a"] * 5 + ["b"] * 5, "query_id": [f"q{{i}}" for i in range(5)] * 2,
                    "metric": "m", "value": np.arange(10.0) ** 1.5}})
power(SimpleNamespace(per_query=pq, baseline="a"), metric="m", resamples=10)
print(sorted(m for m in ("prefect", "mlflow") if m in sys.modules))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


# ----------------------------------------------------------------------------------------------------------
# the commands' numbers


def _close(actual: object, expected: object) -> None:
    """Two metrics.json blocks equal, numbers to 1e-12."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected)
        for key in expected:
            _close(actual[key], expected[key])
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            _close(a, e)
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-12, abs=1e-12, nan_ok=True)
    else:
        assert actual == expected


@pytest.mark.e2e
def test_abtest_and_interleave_equal_what_the_commands_write(tmp_path: Path) -> None:
    path = tmp_path / "ab.csv"
    simulate_log(9, users=400, effect=0.04).to_csv(path, index=False)
    out = tmp_path / "cli-ab"
    done = irflow("abtest", str(path), "--sequential", "--no-track", "--output", str(out), env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    mine = abtest(path, sequential=True)
    written = json.loads((out / "metrics.json").read_text())
    saved = json.loads((mine.save(tmp_path / "api-ab") / "metrics.json").read_text())
    _close(saved["abtest"], written["abtest"])
    _close(saved["sequential"], written["sequential"])
    assert ABTest.load(out) == mine
    assert (tmp_path / "api-ab" / "report.md").read_text() == (out / "report.md").read_text()
    loaded = ABTest.load(out).save(tmp_path / "again")
    assert (loaded / "report.md").read_text() == (out / "report.md").read_text()

    log = _interleaving_log(tmp_path)
    out = tmp_path / "cli-il"
    done = irflow("interleave", "--log", str(log), "--no-track", "--output", str(out), env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    mine_il = interleave(log=log)
    _close(
        json.loads((mine_il.save(tmp_path / "api-il") / "metrics.json").read_text()),
        json.loads((out / "metrics.json").read_text()),
    )
    assert Interleaving.load(out) == mine_il
    assert (tmp_path / "api-il" / "report.md").read_text() == (out / "report.md").read_text()
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "api-il" / "per_query.parquet"), mine_il.per_query)
