"""``irflow judges agreement``: a lenient judge against human labels of techdocs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.judges import techdocs_judge_and_human

from irflow.cli.main import main
from irflow.tasks.evalsets.agreement import judge_agreement
from irflow.tasks.ingest import load_dataset


def test_agreement_prints_and_writes_the_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    judged, human = techdocs_judge_and_human(tmp_path)
    assert main(["judges", "agreement", "--judged", judged, "--human", human, "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    written = json.loads((tmp_path / "out" / "agreement.json").read_text())
    expected = judge_agreement(load_dataset(judged).qrels, load_dataset(human).qrels)
    assert written["judged"] == "td-judge" and written["human"] == "td-human"
    assert written["kappa"] == pytest.approx(expected["kappa"]) and written["queries"] == 30
    assert written["bias"] > 0  # the judge raises grades
    assert f"judge's mean bias {expected['bias']:+.3f}" in out and "confusion (rows: human grade" in out


def test_agreement_with_an_unknown_dataset_fails_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["judges", "agreement", "--judged", "techdocs", "--human", "no-such-set"]) == 2
    assert "no-such-set" in capsys.readouterr().err
