"""``irflow interleave`` and ``irflow power`` as a user runs them: result folder, MLflow, bad input."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.power import TTestPower
from support.cli import irflow, printed_verdict

from irflow.tasks.online.interleave import team_draft
from irflow.tasks.online.interleave_report import interleave_verdict
from irflow.tasks.tracking import Tracker

SYSTEMS = ("bm25", "bm25:k1=0.1,b=0.1")


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}


@pytest.mark.e2e
def test_simulated_interleaving_writes_results_and_mlflow(tmp_path):
    out = tmp_path / "out"
    args = ["interleave", "--dataset", "techdocs", *(a for s in SYSTEMS for a in ("--system", s))]
    done = irflow(
        *args, "--clicks", "cascade", "--users", "2000", "--replicates", "200", "--output", str(out), env=_env(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    document = json.loads((out / "metrics.json").read_text())["interleave"]
    o = document["outcome"]
    assert document["systems"] == {"A": SYSTEMS[0], "B": SYSTEMS[1]} and o["impressions"] == 2000
    per_query = pd.read_parquet(out / "per_query.parquet")
    assert (per_query[["wins", "ties", "losses"]].sum().tolist()) == [o["wins"], o["ties"], o["losses"]]
    assert o["p_value"] == pytest.approx(stats.binomtest(o["wins"], o["wins"] + o["losses"]).pvalue)
    assert set(document["offline"]) == set(SYSTEMS) and document["click_model"]["kind"] == "cascade"
    sizes = document["queries_to_detect"]
    assert set(sizes) >= {"interleaving", "ab_ctr", "ratio"} and sizes["replicates"] == 200
    assert "Team-draft interleaving" in (out / "report.md").read_text()
    verdict = interleave_verdict(json.loads((out / "metrics.json").read_text()))  # Interleaving.verdict's
    assert printed_verdict(done.stdout) == verdict and verdict in (out / "report.md").read_text().splitlines()[2]
    top = json.loads((out / "metrics.json").read_text())["mlflow"]
    metrics = Tracker().client.get_run(top["run_id"]).data.metrics
    assert metrics["wins"] == o["wins"] and metrics["delta_ab"] == pytest.approx(o["delta_ab"])


def _log(tmp_path: Path, impressions: int = 400) -> tuple[Path, pd.DataFrame]:
    """A team-draft log where team "new" holds the relevant result more often than "old"."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(impressions):
        docs = [f"d{j}" for j in range(12)]
        new, old = list(rng.permutation(docs)[:6]), list(rng.permutation(docs)[:6])
        shown, teams = team_draft(new, old, 6, rng)
        for position, (doc, team) in enumerate(zip(shown, teams, strict=True), 1):
            p = 0.5 if doc == new[0] else 0.08
            rows.append((f"i{i}", f"q{i % 37}", position, doc, "new" if team == 1 else "old", int(rng.random() < p)))
    table = pd.DataFrame(rows, columns=["impression", "query", "position", "doc_id", "team", "clicked"])
    path = tmp_path / "log.csv"
    table.sample(frac=1.0, random_state=1).to_csv(path, index=False)  # rows in any order
    return path, table


@pytest.mark.e2e
def test_a_real_log_is_analysed_and_a_bad_one_named(tmp_path):
    path, table = _log(tmp_path)
    out = tmp_path / "out"
    done = irflow(
        "interleave",
        "--log",
        str(path),
        "--system",
        "new",
        "--system",
        "old",
        "--output",
        str(out),
        env=_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    document = json.loads((out / "metrics.json").read_text())
    o = document["interleave"]["outcome"]
    run = Tracker().client.get_run(document["mlflow"]["run_id"]).data
    assert run.params["mode"] == "log" and run.params["system_a"] == "new" and run.metrics["wins"] == o["wins"]
    per_query = pd.read_parquet(out / "per_query.parquet")
    assert per_query["impressions"].sum() == o["impressions"] and per_query["query_id"].nunique() == 37
    clicks = table.assign(new=table.clicked * (table.team == "new"), old=table.clicked * (table.team == "old"))
    per = clicks.groupby("impression")[["new", "old"]].sum()
    wins, losses = int((per.new > per.old).sum()), int((per.new < per.old).sum())
    assert (o["wins"], o["losses"], o["ties"]) == (wins, losses, len(per) - wins - losses)
    assert o["delta_ab"] == pytest.approx((wins + 0.5 * (len(per) - wins - losses)) / len(per) - 0.5)
    assert o["prefers"] == "A"

    default = irflow(
        *("interleave", "--log", str(path), "--system", "new", "--system", "old", "--no-track"),
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    assert default.returncode == 0, default.stderr
    latest = tmp_path / "results" / "interleave" / "latest"  # an interleaving's own latest, not an evaluation's
    assert json.loads((latest / "metrics.json").read_text())["interleave"]["outcome"] == o

    bad = table.copy()
    bad.loc[bad.index[3], "clicked"] = 2
    bad.to_csv(tmp_path / "bad.csv", index=False)
    unbalanced = table[~((table.impression == "i0") & (table.position == 2))]  # a pick lost: not a team draft
    unbalanced.to_csv(tmp_path / "unbalanced.csv", index=False)
    for name, expected in (
        ("bad.csv", "row 4: field 'clicked' is '2'; expected 0 or 1"),
        ("unbalanced.csv", "team-draft"),
    ):
        done = irflow(
            "interleave",
            "--log",
            str(tmp_path / name),
            "--no-track",
            "--output",
            str(tmp_path / name[:-4]),
            env=_env(tmp_path),
        )
        assert done.returncode == 2 and name in done.stderr and expected in done.stderr, done.stderr


@pytest.mark.e2e
def test_power_of_a_run_agrees_with_statsmodels_and_the_report_states_it(tmp_path):
    out = tmp_path / "run"
    done = irflow(
        "run",
        *(a for s in SYSTEMS for a in ("--system", s)),
        "--metric",
        "nDCG@10",
        "--latency-runs",
        "0",
        "--no-track",
        "--output",
        str(out),
        env=_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert "Minimum detectable difference: with these 80 queries" in (out / "report.md").read_text()
    done = irflow("power", str(out), "--metric", "nDCG@10", "--delta", "0.03", "--json", env=_env(tmp_path))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["systems"][SYSTEMS[1]]
    pq = pd.read_parquet(out / "per_query.parquet").pivot_table(index="query_id", columns="system", values="value")
    d = (pq[SYSTEMS[1]] - pq[SYSTEMS[0]]).to_numpy()
    effect = 0.03 / d.std(ddof=1)
    assert found["queries_needed"] == math.ceil(TTestPower().solve_power(effect_size=effect, alpha=0.05, power=0.8))
    assert found["queries_needed_resampled"] == pytest.approx(found["queries_needed"], rel=0.10)
    mdd = TTestPower().solve_power(nobs=len(d), alpha=0.05, power=0.8) * d.std(ddof=1)
    assert found["minimum_detectable_difference"] == pytest.approx(mdd, rel=1e-4)
    assert f"±{mdd:.4f}" in (out / "report.md").read_text()
    missing = irflow("power", str(out), "--metric", "P@7", env=_env(tmp_path))
    assert missing.returncode == 2 and "P@7" in missing.stderr
