"""``irflow compare RESULT RESULT`` names systems by their labels, as every other command does; ``--json`` keeps each
row's spec beside its label (and the spec before, where a label's definition changed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import irflow
from irflow.cli.main import main


@pytest.fixture(scope="module")
def two_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two untracked result folders of techdocs: ``plain`` (bm25) and ``tuned`` (k1 0.9, then 0.5)."""
    root = tmp_path_factory.mktemp("compare")
    folders = []
    for name, k1 in (("before", 0.9), ("after", 0.5)):
        ev = irflow.evaluate("techdocs", {"plain": "bm25", "tuned": f"bm25:k1={k1},b=0.3"}, metrics=["nDCG@10"])
        ev.save(root / name)
        folders.append(root / name)
    return folders[0], folders[1]


def test_compare_prints_labels_not_specs(two_results: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before, after = two_results
    assert main(["compare", str(before), str(after), "--permutations", "200"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("techdocs ")]
    assert sorted(row[1] for row in rows) == ["plain", "tuned"]  # the two systems matched by label
    assert "bm25:" not in out


def test_compare_json_has_the_spec_beside_the_label(
    two_results: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = two_results
    assert main(["compare", str(before), str(after), "--permutations", "200", "--json"]) == 0
    (comparison,) = json.loads(capsys.readouterr().out)["comparisons"]
    rows = {row["system"]: row for row in comparison["changes"]}
    assert rows["plain"]["spec"] == "bm25" and rows["plain"]["spec_before"] == "bm25"
    assert rows["tuned"]["spec"] == "bm25:k1=0.5,b=0.3" and rows["tuned"]["spec_before"] == "bm25:b=0.3"
