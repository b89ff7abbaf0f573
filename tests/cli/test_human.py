"""``--human`` takes a stored dataset or a file (a qrels file or a filled sheet) in every command that has it, and
in the library alike; ``irflow rag`` takes a file of verdicts on answers and refuses a dataset by name."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from support.judges import LABELS, techdocs_judge_and_human

import irflow
from irflow.cli.main import main
from irflow.cli.options import human_form
from irflow.tasks.ingest import read_judgements

METRICS = ["nDCG@10", "P@10"]


@pytest.mark.parametrize(
    ("value", "form"),
    [
        ("techdocs", "dataset"),
        ("beir/scifact", "dataset"),
        ("td-human", "dataset"),
        ("human.qrels", "file"),
        ("labels/human", "file"),
        ("./human", "file"),
        ("~/human", "file"),
        (str(LABELS / "human.qrels"), "file"),
    ],
)
def test_one_rule_tells_a_file_from_a_dataset(value: str, form: str) -> None:
    assert human_form(value) == form


def _sheet(tmp_path: Path) -> Path:
    """human.qrels as a filled sheet (irflow pool's columns)."""
    table = read_judgements(LABELS / "human.qrels").rename(columns={"relevance": "grade"})
    path = tmp_path / "filled.tsv"
    table.assign(query="", title="", text="").to_csv(path, sep="\t", index=False)
    return path


def test_evaluate_calibrates_alike_by_a_dataset_a_qrels_file_or_a_sheet(tmp_path: Path) -> None:
    judged, human = techdocs_judge_and_human(tmp_path)
    tables = []
    for source in (human, LABELS / "human.qrels", str(_sheet(tmp_path))):
        ev = irflow.evaluate(judged, ["bm25"], metrics=METRICS, human=source)
        assert ev.calibrated is not None
        tables.append(ev.calibrated.reset_index(drop=True))
    pd.testing.assert_frame_equal(tables[0], tables[1])
    pd.testing.assert_frame_equal(tables[0], tables[2])


def test_agreement_takes_a_dataset_or_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    judged, human = techdocs_judge_and_human(tmp_path)
    figures = []
    for source in (human, str(LABELS / "human.qrels"), str(_sheet(tmp_path))):
        assert main(["agreement", "--dataset", judged, "--human", source, "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert document.pop("human") == source
        figures.append(document)
    assert figures[0] == figures[1] == figures[2] and figures[0]["judged"] == judged


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["run", "--human", "techdoc"], "--human: unknown dataset 'techdoc' (did you mean 'techdocs'?)"),
        (["run", "--human", "labels/none.qrels"], "--human: labels/none.qrels: no such file; expected a stored"),
        (["agreement", "--dataset", "techdocs", "--human", "x.tsv"], "--human: x.tsv: no such file"),
        (
            ["rag", "--answers", str(LABELS / "human.qrels"), "--judge", "openai:m", "--human", "techdocs"],
            "--human techdocs: a stored dataset judges documents, not answers, so it cannot calibrate RAG metrics; "
            "expected a file of human verdicts on answers",
        ),
    ],
)
def test_a_form_a_command_cannot_take_is_refused_by_name(
    args: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    assert error in capsys.readouterr().err


def test_evaluate_rag_refuses_a_dataset_as_human() -> None:
    with pytest.raises(irflow.InputError, match="human techdocs: a stored dataset judges documents, not answers"):
        irflow.evaluate_rag(answers=[LABELS / "human.qrels"], judge="openai:m", human="techdocs")
