"""Logging that cannot write degrades quietly: irflow.log on a full disk (``/dev/full``: every write fails
with ENOSPC) gives one warning line, never the logging module's ``--- Logging error ---`` traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from irflow.cli import terminal


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_log_file_on_a_full_disk_is_one_warning_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(terminal, "log_file", lambda: Path("/dev/full"))
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        terminal.configure_logging(False)
        for n in range(3):
            logging.getLogger("irflow.test").warning("warning %d", n)
        logging.getLogger("irflow.test").error("an error", exc_info=ValueError("x"))
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    err = capsys.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err, err
    assert err.count("irflow: warning: cannot write the log file /dev/full: No space left on device") == 1, err
    assert all(f"warning {n}" in err for n in range(3)) and "an error" in err  # the terminal still gets every line
