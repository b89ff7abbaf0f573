"""A crashing plugin loses nothing: a ``python:`` retriever that calls ``os._exit``, segfaults or raises
``KeyboardInterrupt`` runs in a child process (``tasks.retrieve.plugin_process``), so its crash is its
system's named failure while bm25's finished result is written, tracked and the flow run ends. The command
runs in the test's process, as the others do: were a plugin run in it, its crash would end the test worker."""

from __future__ import annotations

import json
import os
import sqlite3
import textwrap
from pathlib import Path

import pytest
from support.cli import irflow

pytestmark = pytest.mark.e2e

PLUGIN = """
    import ctypes
    import os


    class Crashes:
        def __init__(self, how):
            self.how = how

        def search(self, queries, k):
            if self.how == "exit":
                os._exit(3)
            if self.how == "segfault":
                ctypes.string_at(0)
            raise KeyboardInterrupt
"""


CRASHES = {
    "exit": "crashed in search(): exit code 3",
    "segfault": "crashed in search(): killed by SIGSEGV",
    "interrupt": "search() raised KeyboardInterrupt",
}


def test_a_crashing_plugin_is_its_systems_named_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One run, bm25 beside three plugins that crash three ways: each crash is named, nothing else is lost."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "crashing_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))  # the plugin's child process is spawned with it
    db, out = tmp_path / "mlflow.db", tmp_path / "out"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "MLFLOW_TRACKING_URI": f"sqlite:///{db}"}
    plugins = {f"python(how={how}):crashing_plugin:Crashes": named for how, named in CRASHES.items()}
    done = irflow(
        *("run", "--system", "bm25", *(x for plugin in plugins for x in ("--system", plugin))),
        *("--metric", "nDCG@10", "--latency-runs", "1", "--output", str(out)),
        env=env,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    listed = " ".join(done.stdout.split())  # a long failure is wrapped
    document = json.loads((out / "metrics.json").read_text())
    assert list(document["systems"]) == ["bm25"] and document["systems"]["bm25"]["nDCG@10"] > 0.3
    for plugin, named in plugins.items():
        assert f"failed: {plugin}: PluginCrashed: system {plugin!r} {named}" in listed or (
            f"failed: {plugin}: PluginCrashed: system {plugin!r}: {named}" in listed
        ), (plugin, done.stdout)
        assert named in document["failed"][plugin]
    assert document["mlflow"]["run_id"] and (out / "report.md").is_file() and (out / "runs" / "bm25.trec").is_file()

    with sqlite3.connect(db) as con:
        statuses = dict(con.execute("select name, status from runs").fetchall())
    assert statuses.get("bm25") == "FINISHED" and all(statuses.get(p) == "FAILED" for p in plugins), statuses
    assert "RUNNING" not in statuses.values(), statuses

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(document["run"]["prefect_flow_run_id"]).state
    assert state is not None and state.is_final() and state.is_failed(), state
