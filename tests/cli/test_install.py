"""irflow as an installed tool: the wheel holds only the ``irflow`` package and its data, and the
installed copy (not this checkout) runs the demo from a folder whose ``tasks.py``, ``flows/`` and
``datasets/`` would shadow generic module names, printing what a quiet terminal prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.folders import hostile_folder
from support.quiet import assert_quiet_demo

ROOT = Path(__file__).resolve().parents[2]
DATA = {
    "irflow/datasets/beir.json",
    "irflow/datasets/techdocs/README.md",
    "irflow/datasets/techdocs/corpus.jsonl",
    "irflow/datasets/techdocs/queries.jsonl",
    "irflow/datasets/techdocs/qrels/test.tsv",
    "irflow/deployments/nightly.yaml",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (found,) = out.glob("irflow-*.whl")
    return found


@pytest.mark.e2e
def test_wheel_holds_only_the_irflow_package_and_its_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"irflow", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    assert DATA <= names, f"missing package data: {sorted(DATA - names)}"
    assert {"irflow/cli/main.py", "irflow/tasks/core/config.py", "irflow/deployments/serve.py"} <= names
    entry_points = zipfile.ZipFile(wheel).read(f"{sorted(tops - {'irflow'})[0]}/entry_points.txt").decode()
    assert "irflow = irflow.cli:entry_point" in entry_points


def test_installed_wheel_runs_the_demo_from_a_folder_that_shadows_generic_names(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    project = hostile_folder(tmp_path / "project")
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI")  # the default store: mlruns/ in the working folder

    where = subprocess.run(
        [sys.executable, "-c", "import irflow; print(irflow.__file__)"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(site), "the test must exercise the installed wheel"

    done = subprocess.run(
        [str(site / "bin" / "irflow"), "run"], cwd=project, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_quiet_demo(done)  # the suite's one demo run as typed: a fresh cache and MLflow store, a new process
    assert re.search(r"^results: (\S*/)?results/techdocs/techdocs_\S+/$", done.stdout, re.M), done.stdout[-2000:]
    metrics = json.loads((project / "results" / "techdocs" / "latest" / "metrics.json").read_text())
    assert len(metrics["systems"]) == 3 and "bm25" in metrics["systems"]  # the default systems, canonically named
    assert (project / "mlruns" / "mlflow.db").is_file()

    from irflow.tasks.ingest import dataset_info  # the checkout's copy of the demo data, for comparison

    assert metrics["dataset"]["fingerprint"] == dataset_info("techdocs")["fingerprint"]


@pytest.mark.e2e
def test_the_nightly_experiment_ships_with_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from irflow.flows.suite import DEFAULT_NIGHTLY_CONFIG, resolve_experiment
    from irflow.tasks.core.schema import InputError

    monkeypatch.chdir(hostile_folder(tmp_path))  # no deployments/nightly.yaml here: the packaged one is used
    assert resolve_experiment(None, DEFAULT_NIGHTLY_CONFIG).name == "nightly"
    (tmp_path / "deployments").mkdir()
    (tmp_path / "deployments" / "nightly.yaml").write_text("name: mine\ndatasets: [techdocs]\nsystems: [bm25]\n")
    assert resolve_experiment(None, DEFAULT_NIGHTLY_CONFIG).name == "mine"  # a file in the working folder wins
    with pytest.raises(InputError, match="other.yaml"):
        resolve_experiment(None, "other.yaml")
