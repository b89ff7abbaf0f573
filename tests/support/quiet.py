"""What a quiet terminal looks like: the lines ``irflow run`` may print by default."""

from __future__ import annotations

import re
import subprocess

LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) ([\w.]+): ")
PROGRESS = re.compile(r"^irflow(\.|$)")


def assert_quiet_demo(done: subprocess.CompletedProcess[str]) -> None:
    """What the demo ``irflow run`` (its defaults, a fresh cache and MLflow store) prints: irflow's lines in one
    format, no Prefect run state and no other library's INFO, a table within 120 columns, the verdict, then the
    result folder and one link a line.
    Checked on the suite's one demo run as typed, the installed wheel's (tests/cli/test_install.py)."""
    assert "Finished in state" not in done.stderr and "Beginning flow run" not in done.stderr  # -v only
    loud = []
    for line in done.stderr.splitlines():
        record = LINE.match(line)
        if record is None:
            loud.append(line)  # another format (MLflow's own handler), a progress bar, a stray print
        elif record.group(1) in ("DEBUG", "INFO") and not PROGRESS.match(record.group(2)):
            loud.append(line)
    assert not loud, "\n".join(loud)
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("system "))
    table = lines[header : header + 4]  # the header and the three systems' rows, with short labels
    assert [r.split()[0] for r in table[1:]] == ["bm25", "dense:all-MiniLM-L6-v2", "hybrid:bm25+dense:all-MiniLM-L6-v2"]
    assert max(len(r) for r in table) <= 120, table
    # no line over 120 characters, no MLflow "View run" line; the verdict, then the folder and one link a line
    long = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if len(line) > 120]
    assert not long, long
    assert "View run" not in done.stdout + done.stderr and "View experiment" not in done.stdout
    verdict = next(i for i, line in enumerate(lines) if line.startswith("Verdict: "))
    assert verdict > header + 3 and "is best on nDCG@10" in " ".join(lines[verdict : verdict + 4])
    assert any(line.startswith("results: ") for line in lines[verdict:])
    assert lines[-3].startswith("run:     techdocs_") and lines[-2].startswith("MLflow:  run ")
    assert lines[-1].startswith("Prefect: ")
