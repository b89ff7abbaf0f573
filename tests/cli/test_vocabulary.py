"""One vocabulary on the command line (issue 36): every command's help speaks the new names, every old
spelling still works with exactly one deprecation line, and bad arguments are refused (exit 2, a named
error) before Prefect is imported."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import ROOT, irflow

from irflow.cli.main import build_parser
from irflow.cli.options import deprecation_note

COMMANDS = [
    ["datasets", "list"],
    ["datasets", "download"],
    ["datasets", "info"],
    ["datasets", "import"],
    ["datasets", "synthesize"],
    ["run"],
    ["report"],
    ["compare"],
    ["suite"],
    ["nightly"],
    ["annotate"],
    ["pool"],
    ["agreement"],
    ["drift"],
    ["abtest"],
    ["interleave"],
    ["power"],
    ["rag"],
]
OLD_WORDS = ("--k", "--base", "--reference", "--judged", "--model", "RUN_DIR", "RUN", "CONFIG")
NEW_NAMES = {  # command -> names its help must show
    "datasets download": ["--dataset", "--json"],
    "datasets info": ["--dataset", "--json"],
    "datasets import": ["--dataset", "--json"],
    "datasets synthesize": ["--dataset", "--depth", "--llm", "--json"],
    "run": ["--dataset", "--depth", "--baseline", "--json", "--no-track", "--experiment"],
    "report": ["RESULT", "--json"],
    "compare": ["RESULT", "--experiment", "--json"],
    "suite": ["SUITE_FILE", "--no-track", "--json"],
    "nightly": ["SUITE_FILE", "--no-track", "--json"],
    "annotate": ["--dataset", "--depth", "--judge", "--no-track", "--experiment", "--json"],
    "pool": ["--dataset", "--depth", "--json"],
    "agreement": ["SHEET", "--dataset", "--human", "--json"],
    "drift": ["--dataset", "--embedder", "--json"],
    "abtest": ["--no-track", "--experiment", "--json"],
    "interleave": ["--dataset", "--depth", "--no-track", "--json"],
    "power": ["RESULT", "--baseline", "--json"],
    "rag": ["--dataset", "--depth", "--judge", "--generator", "--embedder", "--baseline", "--no-track", "--json"],
}


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_speaks_the_new_names(command: list[str]) -> None:
    done = irflow(*command, "--help", env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split()) + " "
    for old in OLD_WORDS:
        assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", text), f"{command} --help still shows {old}"
    for new in NEW_NAMES.get(" ".join(command), []):
        assert new in text, f"irflow {' '.join(command)} --help lacks {new}"


def test_there_is_one_agreement_and_power_has_its_own_module() -> None:
    agreement, interleave, pool, power = (
        importlib.import_module(f"irflow.cli.{name}") for name in ("agreement", "interleave", "pool", "power")
    )
    assert hasattr(power, "cmd_power") and not hasattr(interleave, "cmd_power")
    assert hasattr(agreement, "cmd_agreement") and not hasattr(pool, "cmd_agreement")
    judges = irflow(*"judges agreement --help".split(), env=dict(os.environ))
    assert "deprecated" in irflow("--help", env=dict(os.environ)).stdout and judges.returncode == 0


OLD_SPELLINGS = [  # (old command line, dest, value, old, new)
    ("annotate --dataset techdocs --k 7", "depth", 7, "--k", "--depth"),
    ("pool --dataset techdocs --system bm25 --output o --k 7", "depth", 7, "--k", "--depth"),
    ("rag --k 7", "depth", 7, "--k", "--depth"),
    ("datasets synthesize --dataset techdocs --name s --llm openai:m --k 7", "depth", 7, "--k", "--depth"),
    ("datasets synthesize --base techdocs --name s --llm openai:m", "dataset", "techdocs", "--base", "--dataset"),
    (
        "datasets import q.tsv --format trec-qrels --name n --base techdocs",
        "dataset",
        "techdocs",
        "--base",
        "--dataset",
    ),
    ("drift --reference techdocs --current q.csv", "dataset", "techdocs", "--reference", "--dataset"),
    ("drift --dataset techdocs --current q.csv --model minilm", "embedder", "minilm", "--model", "--embedder"),
    ("judges agreement --judged a --human b", "dataset", "a", "--judged", "--dataset"),
]


@pytest.mark.parametrize(("line", "dest", "value", "old", "new"), OLD_SPELLINGS, ids=[c[0] for c in OLD_SPELLINGS])
def test_an_old_spelling_still_works_with_one_note(
    line: str, dest: str, value: object, old: str, new: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(line.split())
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert err.splitlines() == [deprecation_note(old, new)]
    assert err.strip() == f"irflow: {old} is deprecated, use {new} (it will be removed in the next release)"


def test_a_script_with_the_old_flags_runs_with_its_notes(tmp_path: Path) -> None:
    """An old command line goes through main: its note once, then the command's own checks (here: a refusal)."""
    done = irflow(
        *"pool --dataset techdocs --system bm52 --k 5 --output".split(), str(tmp_path / "p"), env=dict(os.environ)
    )
    assert done.returncode == 2
    notes = [line for line in done.stderr.splitlines() if "deprecated" in line]
    assert notes == [deprecation_note("--k", "--depth")]
    assert "did you mean 'bm25'?" in done.stderr


def test_judges_agreement_is_agreement_with_one_note() -> None:
    done = irflow(*"judges agreement --dataset techdoc --human techdocs".split(), env=dict(os.environ))
    assert done.returncode == 2
    notes = [line for line in done.stderr.splitlines() if "deprecated" in line]
    assert notes == [deprecation_note("irflow judges agreement", "irflow agreement")]
    assert "--dataset: unknown dataset 'techdoc' (did you mean 'techdocs'?)" in done.stderr


def _files(tmp: Path) -> dict[str, Path]:
    (tmp / "no_unit.csv").write_text("arm,query,clicked\ncontrol,q,1\n", encoding="utf-8")
    (tmp / "ab.jsonl").write_text(
        '{"user_id": "u1", "arm": "control", "query": "q", "clicked": 1}\n'
        '{"user_id": "u2", "arm": "treatment", "query": "q", "clicked": 0}\n',
        encoding="utf-8",
    )
    (tmp / "queries.csv").write_text("text_of_query\nhow\n", encoding="utf-8")
    return {"missing": tmp / "missing.jsonl", "no_unit": tmp / "no_unit.csv", "ab": tmp / "ab.jsonl"}


EARLY = [  # (arguments, the named error)
    ("run --system bm52", "--system: system spec 'bm52': unknown system kind 'bm52' (did you mean 'bm25'?)"),
    ("run --dataset techdoc", "--dataset: unknown dataset 'techdoc' (did you mean 'techdocs'?)"),
    ("rag --answers {missing} --no-track", "--answers {missing}: no such file"),
    ("abtest {no_unit} --no-track", "--unit 'user_id': the log {no_unit} has no such column"),
    (
        "abtest {ab} --control contrl --no-track",
        "--control 'contrl' is not an arm of the log (did you mean 'control'?)",
    ),
    ("abtest {ab} --unit user_id --sequential --no-track", "--sequential reads the log day by day"),
    ("interleave --dataset techdocs --system bm25 --system bm52", "(did you mean 'bm25'?)"),
    ("annotate --dataset techdocs --judge opena:gpt --no-track", "--judge 'opena:gpt': unknown judge kind"),
    (
        "datasets synthesize --dataset techdocs --name s --llm opena:gpt",
        "--llm 'opena:gpt': unknown LLM kind 'opena' (did you mean 'openai'?); expected an LLM spec (openai:MODEL",
    ),
    ("datasets synthesize --dataset techdocs --name s --llm model:m", "--llm 'model:m': unknown LLM kind 'model'"),
    (
        "rag --system bm25 --generator opena:gpt --no-track",
        "--generator 'opena:gpt': unknown generator kind 'opena' (did you mean 'openai'?); expected extractive",
    ),
    ("rag --answers {ab} --judge antropic:x --no-track", "--judge 'antropic:x': unknown LLM kind 'antropic'"),
    ("datasets info beir/scifakt", "NAME: unknown dataset 'beir/scifakt' (did you mean 'beir/scifact'?)"),
    ("drift --dataset techdocs --current {root}/queries.csv", "no query or text column"),
    ("power {root}/none", "RESULT {root}/none: no such folder"),
    ("agreement {missing} {missing}", "SHEET {missing}: no such file"),
]


def test_bad_arguments_are_refused_before_prefect(tmp_path: Path) -> None:
    """Every case in one fresh process: exit 2, one named error line of at most 4 lines, and Prefect was
    never imported (nor torch: no model loaded)."""
    files = _files(tmp_path)
    cases = [
        (line.format(**files, root=tmp_path).split(), error.format(**files, root=tmp_path)) for line, error in EARLY
    ]
    script = (
        "import contextlib, io, json, sys\n"
        "from irflow.cli.main import main\n"
        "out = []\n"
        "for args in json.loads(sys.argv[1]):\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
        "        code = main(args)\n"
        "    out.append([code, err.getvalue()])\n"
        "print(json.dumps({'results': out, 'prefect': 'prefect' in sys.modules, 'torch': 'torch' in sys.modules}))\n"
    )
    env = {**os.environ, "IRFLOW_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps([args for args, _ in cases])],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    for (args, error), (code, err) in zip(cases, report["results"], strict=True):
        assert code == 2, (args, err)
        assert error in err, (args, err)
        assert "Beginning flow run" not in err and len(err.strip().splitlines()) <= 4, (args, err)
    assert not report["prefect"], "a check imported Prefect"
    assert not report["torch"], "a check loaded torch"


def test_a_script_with_old_flags_runs_to_the_end_noting_each_once(tmp_path: Path) -> None:
    """A script written before the vocabulary (``--k``, ``--base``, ``irflow judges agreement --judged``) does its
    work as before: every command exits 0, and each old spelling is noted exactly once, on stderr."""
    env = {**os.environ, "IRFLOW_CACHE_DIR": str(tmp_path / "cache")}
    (tmp_path / "mine.qrels").write_text("td-q-001 0 td-doc-0027 3\ntd-q-001 0 td-doc-0028 1\n", encoding="utf-8")
    script = [
        (f"pool --dataset techdocs --system bm25 --k 2 --output {tmp_path / 'pool'}", [("--k", "--depth")]),
        (
            f"datasets import {tmp_path / 'mine.qrels'} --format trec-qrels --name old-flags --base techdocs",
            [("--base", "--dataset")],
        ),
        (
            "judges agreement --judged old-flags --human techdocs --json",
            [("irflow judges agreement", "irflow agreement"), ("--judged", "--dataset")],
        ),
    ]
    for line, notes in script:
        done = irflow(*line.split(), env=env)
        assert done.returncode == 0, (line, done.stderr[-2000:])
        noted = [text for text in done.stderr.splitlines() if "is deprecated" in text]
        assert sorted(noted) == sorted(deprecation_note(old, new) for old, new in notes), line
    assert (tmp_path / "pool" / "sheet.tsv").is_file()
    assert json.loads(done.stdout)["judged"] == "old-flags"
