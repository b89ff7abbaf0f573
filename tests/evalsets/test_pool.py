"""Pooling and human judging: ``irflow pool`` → a sheet filled in by the test → ``datasets import
--format sheet`` → evaluation with the incomplete-judgement measures, checked against pytrec_eval;
agreement statistics against published values (Krippendorff 2011) and scikit-learn."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.cli import irflow

from irflow.cli.agreement import cmd_agreement
from irflow.tasks import ingest
from irflow.tasks.core.schema import InputError
from irflow.tasks.evalsets.pool import (
    agreement_table,
    agreement_text,
    cohen_kappa,
    krippendorff_alpha,
    single_grade_reason,
)
from irflow.tasks.ingest.sheet import read_sheet
from irflow.tasks.metrics import evaluate, mean

pytrec_eval = pytest.importorskip("pytrec_eval")


def fill(sheet: Path, out: Path, truth: dict[tuple[str, str], int], every: int = 1) -> int:
    """Fill the grade column of every ``every``-th row from ``truth`` (0 where it has none); returns how many."""
    with open(sheet, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    filled = 0
    for i, row in enumerate(rows[1:]):
        if i % every == 0:
            row[2] = str(truth.get((row[0], row[1]), 0))
            filled += 1
    with open(out, "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh, delimiter="\t", lineterminator="\n").writerows(rows)
    return filled


@pytest.mark.e2e
def test_pool_fill_import_and_evaluate_like_trec_eval(tmp_path: Path) -> None:
    """techdocs with its judgements thinned to a third plays "incomplete"; the pool of bm25 and a
    tuned bm25 is judged from the full judgements; the merged dataset evaluates as pytrec_eval does."""
    full = ingest.load_dataset("techdocs")
    kept = full.qrels.iloc[::3]
    folder = tmp_path / "partial"
    (folder / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": d, "title": t, "text": x}
        for d, t, x in full.corpus[["doc_id", "title", "text"]].itertuples(index=False)
    ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    queries = [{"_id": q, "text": t} for q, t in full.queries[["query_id", "text"]].itertuples(index=False)]
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in kept.itertuples(index=False))
    )
    env = {**os.environ, "IRFLOW_CACHE_DIR": os.environ["IRFLOW_CACHE_DIR"], "HF_HUB_OFFLINE": "1"}
    assert irflow("datasets", "import", str(folder), "--format", "beir", "--name", "partial", env=env).returncode == 0
    out = tmp_path / "pool"
    done = irflow("pool", "--dataset", "partial", "--system", "bm25", "--system", "bm25:k1=1.5,b=0.9",
                  "--depth", "10", "--output", f"{out}/", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"  {out / 'sheet.tsv'} (fill in the grade column)" in done.stdout.splitlines() and "//" not in done.stdout
    summary = json.loads((out / "pool.json").read_text())
    partial = ingest.load_dataset("partial")
    sheet = pd.read_csv(out / "sheet.tsv", sep="\t", dtype=str, keep_default_na=False)
    judged = set(zip(partial.qrels["query_id"], partial.qrels["doc_id"]))
    assert len(sheet) == summary["documents"] > 0 and not judged & set(zip(sheet["query_id"], sheet["doc_id"]))
    assert (sheet["grade"] == "").all() and {"query", "title", "text"} <= set(sheet.columns)
    zbench = [json.loads(line) for line in (out / "pool.jsonl").read_text().splitlines()]
    assert sum(len(line["documents"]) for line in zbench) == len(sheet)

    truth = {(q, d): int(g) for q, d, g in full.qrels.itertuples(index=False)}
    filled = fill(out / "sheet.tsv", tmp_path / "filled.tsv", truth)
    done = irflow("datasets", "import", str(tmp_path / "filled.tsv"), "--format", "sheet", "--dataset", "partial",
                  "--name", "merged", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"from the sheet:       {filled:,} judgements taken, 0 overridden" in done.stdout.splitlines()
    merged = ingest.load_dataset("merged")
    assert len(merged.qrels) == len(partial.qrels) + filled
    assert merged.manifest["source"]["sheet"] == {"judged": filled, "overridden": 0}

    from irflow.tasks.retrieve.searchers import retrieve

    run = retrieve(merged, "bm25", depth=100).run
    measures = ["Judged@10", "Bpref", "nDCG(judged_only=True)@10"]
    before = mean(evaluate(run, partial.qrels, measures))
    after = mean(evaluate(run, merged.qrels, measures))
    hits = run.groupby("query_id").size().reindex(merged.qrels["query_id"].unique(), fill_value=0)
    every_hit_judged = float(np.mean(np.minimum(hits, 10) / 10))  # a query with fewer than 10 hits scores less
    assert after["Judged@10"] == pytest.approx(every_hit_judged, abs=1e-12) and before["Judged@10"] < every_hit_judged
    assert after["Bpref"] == pytest.approx(trec_eval(run, merged.qrels, "bpref"), abs=1e-12)
    for qrels, values in ((partial.qrels, before), (merged.qrels, after)):  # the condensed list, as Sakai 2007
        judged = set(zip(qrels["query_id"], qrels["doc_id"]))  # defines it: unjudged documents removed first
        condensed = run[[(q, d) in judged for q, d in zip(run["query_id"], run["doc_id"])]]
        assert 0 < len(condensed) < len(run)
        assert values["nDCG(judged_only=True)@10"] == pytest.approx(
            trec_eval(condensed, qrels, "ndcg_cut_10"), abs=1e-12
        )
    assert before["nDCG(judged_only=True)@10"] != pytest.approx(
        mean(evaluate(run, partial.qrels, ["nDCG@10"]))["nDCG@10"]
    )


def trec_eval(run: pd.DataFrame, qrels: pd.DataFrame, measure: str) -> float:
    """pytrec_eval's ``measure`` averaged over the judged queries (0 for a query the run does not rank)."""
    qrels_d: dict[str, dict[str, int]] = {}
    for q, d, g in qrels[["query_id", "doc_id", "relevance"]].itertuples(index=False):
        qrels_d.setdefault(q, {})[d] = int(g)
    run_d: dict[str, dict[str, float]] = {}
    for q, d, s in run[["query_id", "doc_id", "score"]].itertuples(index=False):
        run_d.setdefault(q, {})[d] = float(s)
    reference = pytrec_eval.RelevanceEvaluator(qrels_d, {measure}).evaluate(run_d)
    return float(np.mean([reference.get(q, {}).get(measure, 0.0) for q in qrels_d]))


def test_sheet_errors_name_file_and_line_and_blank_grades_are_skipped(tmp_path: Path) -> None:
    sheet = tmp_path / "s.tsv"
    sheet.write_text("query_id\tdoc_id\tgrade\tquery\nq1\td1\t2\tx\nq1\td2\t\tx\n")
    assert read_sheet(sheet) == [("q1", "d1", 2, 2)]
    sheet.write_text("query_id\tdoc_id\tgrade\nq1\td1\tgood\n")
    with pytest.raises(InputError, match=r"s\.tsv:2: grade 'good' is not an integer from 0 to 1000"):
        read_sheet(sheet)
    sheet.write_text("query_id\tdoc\tgrade\n")
    with pytest.raises(InputError, match=r"lacks columns \['doc_id'\]"):
        read_sheet(sheet)


def test_a_pair_graded_twice_keeps_one_agreeing_grade_and_refuses_conflicting_ones(tmp_path: Path) -> None:
    sheet = tmp_path / "s.tsv"
    sheet.write_text("query_id\tdoc_id\tgrade\nq1\td1\t3\nq1\td2\t1\nq1\td1\t3\n")
    assert read_sheet(sheet) == [("q1", "d1", 3, 2), ("q1", "d2", 1, 3)]
    sheet.write_text("query_id\tdoc_id\tgrade\nq1\td1\t3\nq1\td2\t1\nq1\td1\t0\n")
    with pytest.raises(
        InputError, match=r"s\.tsv:4: query 'q1', document 'd1' is graded 0 here and 3 on line 2; expected one grade"
    ):
        read_sheet(sheet)


def test_agreement_matches_published_values_and_scikit_learn() -> None:
    """Krippendorff (2011)'s reliability data: alpha 0.743 nominal, 0.815 ordinal, 0.849 interval."""
    n = np.nan
    coders = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    units = np.array(coders).T
    got = {level: round(krippendorff_alpha(units, level), 3) for level in ("nominal", "ordinal", "interval")}
    assert got == {"nominal": 0.743, "ordinal": 0.815, "interval": 0.849}
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(4)
    a = rng.integers(0, 4, 200)
    b = np.clip(a + rng.choice([-1, 0, 0, 0, 1], 200), 0, 3)
    assert cohen_kappa(a, b) == pytest.approx(sklearn.cohen_kappa_score(a, b), abs=1e-12)
    assert cohen_kappa(a, b, weights="quadratic") == pytest.approx(
        sklearn.cohen_kappa_score(a, b, weights="quadratic"), abs=1e-12
    )


@pytest.mark.e2e
def test_agreement_command_on_two_filled_sheets_matches_a_hand_computation(tmp_path: Path) -> None:
    """Two judges grade 10 shared (query, document) units 0-3 and disagree on 3, by one grade each; judge 1
    also grades an 11th that judge 2 left blank. By hand: p_o = 7/10, p_e = (3·3 + 3·3 + 2·3 + 2·1)/100 =
    0.26, kappa = 0.44/0.74; quadratic kappa = 1 − 3/21.8 (Σ a_i b_j (i−j)² = 218 over 10 units);
    Krippendorff over the 20 paired values (n_c = 6, 6, 5, 3): nominal 1 − 0.3/(294/380), interval
    1 − 0.3/(870/380), ordinal 1 − 8.8/(24720/380)."""
    first, second = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 3, 1, 1, 2, 2, 0, 0, None]
    for name, grades in (("a.tsv", first), ("b.tsv", second)):
        rows = "".join(f"q{i % 3}\td{i}\t{'' if g is None else g}\tquery {i % 3}\n" for i, g in enumerate(grades))
        (tmp_path / name).write_text("query_id\tdoc_id\tgrade\tquery\n" + rows, encoding="utf-8")
    expected = {
        "Cohen's kappa:": 0.44 / 0.74,
        "Cohen's kappa, quadratic:": 1 - 3 / 21.8,
        "Krippendorff's alpha, nominal:": 1 - 0.3 / (294 / 380),
        "Krippendorff's alpha, ordinal:": 1 - 8.8 / (24720 / 380),
        "Krippendorff's alpha, interval:": 1 - 0.3 / (870 / 380),
    }
    done = irflow("agreement", str(tmp_path / "a.tsv"), str(tmp_path / "b.tsv"), env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "11 units judged, 10 by every judge"
    printed = {line.rsplit(" ", 1)[0].strip(): float(line.rsplit(" ", 1)[1]) for line in lines[1:]}
    assert printed == {label: round(value, 3) for label, value in expected.items()}  # 0.595 0.862 0.612 0.865 0.869
    from irflow.tasks.evalsets.pool import agreement_table

    table = agreement_table([tmp_path / "a.tsv", tmp_path / "b.tsv"])
    a, b = table["judge1"], table["judge2"]
    exact = [cohen_kappa(a, b), cohen_kappa(a, b, weights="quadratic")]
    exact += [krippendorff_alpha(table, level) for level in ("nominal", "ordinal", "interval")]
    assert exact == pytest.approx(list(expected.values()), abs=1e-12)


def test_quadratic_kappa_weighs_grade_values_not_their_positions() -> None:
    """Grades 0, 1 and 3 in use (2 never given): a 0-vs-3 disagreement weighs (3 − 0)² = 9, as scikit-learn
    with the whole scale as labels, not 4 as scikit-learn's positions among the grades seen."""
    sklearn = pytest.importorskip("sklearn.metrics")
    a, b = [0, 1, 3, 3, 0, 1, 3, 0], [0, 3, 3, 1, 0, 1, 0, 1]
    ours = cohen_kappa(a, b, weights="quadratic")
    assert ours == pytest.approx(sklearn.cohen_kappa_score(a, b, weights="quadratic", labels=[0, 1, 2, 3]), abs=1e-12)
    assert ours != pytest.approx(sklearn.cohen_kappa_score(a, b, weights="quadratic"), abs=1e-3)


def test_one_grade_only_is_undefined_not_perfect_agreement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two judges give every unit grade 2: kappa is 0/0 (scikit-learn: NaN) and so is Krippendorff's alpha;
    the command says "undefined (one grade only)" and why, instead of 1.000."""
    sklearn = pytest.importorskip("sklearn.metrics")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert math.isnan(sklearn.cohen_kappa_score([2] * 6, [2] * 6))
    for weights in (None, "quadratic"):
        assert math.isnan(cohen_kappa([2] * 6, [2] * 6, weights=weights))
    units = np.array([[2, 2]] * 6 + [[0, np.nan]], dtype=float)  # a unit judged once does not count
    assert all(math.isnan(krippendorff_alpha(units, level)) for level in ("nominal", "ordinal", "interval"))
    assert cohen_kappa([2, 2, 1], [2, 2, 1]) == 1.0  # two grades: defined

    for name, grades in (("a.tsv", [2, 2, 2, 0]), ("b.tsv", [2, 2, 2, None])):
        rows = "".join(f"q1\td{i}\t{'' if g is None else g}\n" for i, g in enumerate(grades))
        (tmp_path / name).write_text("query_id\tdoc_id\tgrade\n" + rows, encoding="utf-8")
    assert cmd_agreement(argparse.Namespace(sheets=[tmp_path / "a.tsv", tmp_path / "b.tsv"], json=False)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "Cohen's kappa:            undefined (one grade only)"
    assert out[4] == "Krippendorff's alpha, ordinal:  undefined (one grade only)"
    assert out[-1].startswith("undefined: every unit judged twice or more got grade 2 from every judge")
    assert single_grade_reason(agreement_table([tmp_path / "a.tsv", tmp_path / "a.tsv"])) is None
    assert agreement_text(0.5) == "0.500"


def test_a_run_files_document_missing_from_the_corpus_is_left_out_of_the_pool(tmp_path: Path) -> None:
    from support.toy import tiny_dataset

    from irflow.tasks.evalsets.pool import pool, write_pool
    from irflow.tasks.retrieve import retrieve

    dataset = tiny_dataset()
    path = tmp_path / "run.trec"
    path.write_text("q2 Q0 gone 1 9 t\nq2 Q0 d2 2 1 t\n")
    run = retrieve(dataset, f"run:{path}").run
    assert run["doc_id"].tolist() == ["gone", "d2"]  # evaluated at its rank, as trec_eval reads it
    pooled = pool(dataset, {"file": run}, k=10)
    assert pooled["doc_id"].tolist() == ["d2"]  # no text to judge
    assert write_pool(dataset, pooled, tmp_path / "pool", {})["documents"] == 1


def test_pool_json_prints_the_summary_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "pool"
    done = irflow(
        *"pool --dataset techdocs --system bm25 --depth 3 --json --output".split(), str(out), env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout)
    assert printed.pop("files") == {
        "sheet": str(out / "sheet.tsv"),
        "pool": str(out / "pool.jsonl"),
        "summary": str(out / "pool.json"),
    }
    assert printed == json.loads((out / "pool.json").read_text()) and printed["k"] == 3
