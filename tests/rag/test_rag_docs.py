"""docs/rag.md's and docs/calibration.md's walkthroughs run as written on a fresh install: the answers files
and the label files they use ship with the package (``irflow/datasets/techdocs/examples/``), the commands
print what the pages show; and the pages' statements that were wrong are corrected."""

from __future__ import annotations

import importlib.resources
import os
import re
from pathlib import Path

import pytest
from support.cli import irflow, printed_verdict
from support.judges import pipeline_answers

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = Path(str(importlib.resources.files("irflow.datasets"))) / "techdocs" / "examples"  # as the pages find it
DOCS = ROOT / "docs"


def _console(page: str, command: str) -> str:
    """The console block of ``page`` whose command line starts with ``command``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return next(b for b in re.findall(r"```console\n(.*?)```", text, re.S) if f"$ {command}" in b)


@pytest.mark.parametrize("name", ["pipeline-a", "pipeline-b"])
def test_the_answers_files_of_the_rag_page_ship_with_the_package(name: str) -> None:
    assert (EXAMPLES / f"{name}.jsonl").read_text(encoding="utf-8") == pipeline_answers()[name]
    setup = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"techdocs/examples/*.jsonl"' in setup and '"techdocs/examples/*.qrels"' in setup


@pytest.mark.e2e
def test_the_rag_page_walkthrough_prints_what_the_page_shows(tmp_path: Path) -> None:
    block = _console("rag.md", "irflow rag --answers $EXAMPLES/pipeline-a.jsonl")
    setup = next(line for line in block.splitlines() if line.startswith("$ EXAMPLES="))
    assert "irflow.datasets" in setup and "'techdocs' / 'examples'" in setup
    args = ["rag", "--answers", str(EXAMPLES / "pipeline-a.jsonl"), "--answers", str(EXAMPLES / "pipeline-b.jsonl")]
    done = irflow(*args, "--no-track", "--output", str(tmp_path / "out"), env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    shown = [line for line in block.splitlines() if line.startswith(("pipeline-", "  "))]
    table = [line for line in shown if line.startswith("pipeline-")]
    assert all(line in done.stdout for line in table), (table, done.stdout)
    page_verdict = " ".join(block.split("Verdict: ", 1)[1].split("\n\nresults:", 1)[0].split())
    assert printed_verdict(done.stdout) == page_verdict
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| id_based_context_\w+ \| `pipeline-b` .*$", (DOCS / "rag.md").read_text(), re.M)
    assert len(rows) == 2 and all(row in report for row in rows)


def test_the_pages_say_what_irflow_does() -> None:
    rag = (DOCS / "rag.md").read_text(encoding="utf-8")
    assert "takes its text from the corpus" not in rag and "document's title and\ntext as the judge is sent it" in rag
    calibration = (DOCS / "calibration.md").read_text(encoding="utf-8")
    assert "$EXAMPLES/judge.qrels" in calibration and "$EXAMPLES/human.qrels" in calibration
    assert "gets λ near 1" not in calibration and "N / (N + n)" in calibration
    online = (DOCS / "online.md").read_text(encoding="utf-8")
    assert "equal statsmodels' cluster-robust" not in online and "0.04–0.6 % wider" in online
    assert "until either ranking has no result left" in online and "Nothing to compare" in online
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    diagram = index.split("## The pipeline", 1)[1].split("```")[1]
    assert "significance" in diagram and max(len(line) for line in diagram.splitlines()) <= 64  # fits the page
    online_entry = next(line for line in index.splitlines() if line.startswith("* [Online experiments]"))
    entry = online_entry + index.split(online_entry, 1)[1].split("\n* ", 1)[0]
    assert all(c in entry for c in ("irflow abtest", "irflow interleave", "irflow power"))
    assert "2.0 GB" not in (ROOT / "README.md").read_text(encoding="utf-8")


def test_a_perfect_judge_gets_lambda_about_n_over_n_plus_n() -> None:
    """docs/calibration.md: a perfect judge gets λ = N / (N + n), not 1."""
    import numpy as np

    from irflow.tasks.compare.calibration import calibrated_mean

    rng = np.random.default_rng(0)
    labelled, unlabelled = rng.random(3000), rng.random(5000)
    found = calibrated_mean(labelled, labelled, unlabelled)
    assert found.lam == pytest.approx(5000 / 8000, abs=0.02)
