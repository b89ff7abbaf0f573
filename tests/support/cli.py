"""The ``irflow`` command as a user runs it, from the project folder: in this process by default (no
interpreter start and no re-import of torch, Prefect and MLflow per command), in a subprocess where the
process is the point or the environment cannot be honoured in-process."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import traceback
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]


def irflow(*args: str, env: dict[str, str], timeout: float = 600, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``irflow ARGS`` with ``env``; stdout and stderr captured as text, as from ``python -m irflow.cli ARGS``.

    Runs :func:`irflow.cli.main.main` in this process, with ``env`` as the whole environment, ``cwd`` (the
    project folder by default) as working directory, a fresh Prefect settings context read from ``env``
    (as a new process reads it) and the root logger restored afterwards. A ``PYTHONPATH`` other than this process's (a
    plugin folder) changes what can be imported, so that command runs in a subprocess
    (:func:`irflow_process`). ``timeout`` bounds only a subprocess.
    """
    if env.get("PYTHONPATH", "") != os.environ.get("PYTHONPATH", ""):
        return irflow_process(*args, env=env, timeout=timeout, cwd=cwd)
    from prefect.context import SettingsContext, get_settings_context
    from prefect.settings import Settings

    from irflow.cli.main import main

    command = [sys.executable, "-m", "irflow.cli", *args]
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger("httpx").level, logging._warnings_showwarning)  # type: ignore[attr-defined]
    here = os.getcwd()
    profile = get_settings_context().profile
    try:
        with (
            mock.patch.dict(os.environ, env, clear=True),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            os.chdir(cwd)
            try:
                with SettingsContext(profile=profile, settings=Settings()):
                    code = main(list(args))
            except SystemExit as stop:  # argparse: 2 on a usage error, 0 after --help
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
                if not isinstance(stop.code, int | None):
                    print(stop.code, file=sys.stderr)
            except Exception:  # uncaught, as the interpreter reports it
                traceback.print_exc()
                code = 1
            finally:
                drain_prefect_workers()  # what the process's exit does: its logs and events reach the API now
    finally:
        os.chdir(here)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("httpx").setLevel(saved[2])
        logging.captureWarnings(saved[3] is not None)
    return subprocess.CompletedProcess(command, code, out.getvalue(), err.getvalue())


def printed_verdict(stdout: str) -> str:
    """The verdict a command printed last before its result folder (``Verdict: ...``), unwrapped."""
    head, found, _ = stdout.rpartition("\nresults: ")
    assert found, stdout[-2000:]
    lead, found, verdict = head.rpartition("Verdict: ")
    assert found and "\n\n" not in verdict.strip(), stdout[-2000:]
    return " ".join(verdict.split())


def drain_prefect_workers() -> None:
    """Send Prefect's queued logs and events (of commands run in this process) while the server listens."""
    from irflow.flows.prefect_api import _drain_prefect_workers

    _drain_prefect_workers()


def irflow_process(
    *args: str, env: dict[str, str], timeout: float = 600, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m irflow.cli ARGS`` in a subprocess with ``env`` in ``cwd``; stdout and stderr as text."""
    return subprocess.run(
        [sys.executable, "-m", "irflow.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
