"""Every read bounded (issue 35): one table of limits, each with its default and environment variable; answers
files read a line at a time within a line and a file limit; only regular files read, everywhere a file is read,
with a message saying what the path is.

The bombs (a 1 GiB line, a file past the limit) run in a child under ``RLIMIT_AS`` = 2 GiB (``support.limited``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.limited import GIB, child_env, in_child, peak_bytes

from irflow.tasks.core.limits import LIMITS, MAX_LINE_BYTES, LimitError, bounded_lines, open_regular
from irflow.tasks.core.paths import regular_file
from irflow.tasks.core.schema import InputError

ROOT = Path(__file__).resolve().parents[2]


def test_every_limit_has_a_default_an_environment_variable_and_a_row_in_the_docs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for limit in LIMITS:
        monkeypatch.delenv(limit.env, raising=False)
        assert limit.value() == limit.default > 0
        assert re.search(rf"^\| `{limit.env}` \|", docs, re.M), f"{limit.env} is not in docs/configuration.md"
        monkeypatch.setenv(limit.env, "3K")
        assert limit.value() == 3072
        monkeypatch.setenv(limit.env, "-1")
        with pytest.raises(InputError, match=rf"{limit.env}='-1': expected a positive number"):
            limit.value()


def test_lines_and_files_past_their_limits_fail_naming_file_line_limit_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"{}\n\n" + b"x" * 100 + b"\n" + b"y" * 64 + b"\n")
    monkeypatch.setenv("IRFLOW_MAX_LINE_BYTES", "64")
    with pytest.raises(LimitError) as info:
        list(bounded_lines(path, "a test file"))
    assert (
        str(info.value)
        == f"{path}:3: line too long: more than 64 bytes (IRFLOW_MAX_LINE_BYTES; raise it to allow more)"
    )
    monkeypatch.setenv("IRFLOW_MAX_LINE_BYTES", "100")
    assert [n for n, _ in bounded_lines(path, "a test file")] == [1, 2, 3, 4]  # 64 and 100 bytes: at the limit
    monkeypatch.setenv("IRFLOW_MAX_FILE_BYTES", "100")
    with pytest.raises(
        LimitError, match=r"a.jsonl: the file has 170 bytes: more than 100 bytes \(IRFLOW_MAX_FILE_BYTES"
    ):
        list(bounded_lines(path, "a test file"))


ANSWERS = """
from support.toy import tiny_dataset
from irflow.tasks.rag.answers import read_answers
read_answers({path!r}, tiny_dataset())
"""


@pytest.mark.parametrize(
    ("size", "env", "expected"),
    [
        (GIB, {}, ":1: line too long: more than 67,108,864 bytes (IRFLOW_MAX_LINE_BYTES; raise it to allow more)"),
        (8 << 20, {"IRFLOW_MAX_FILE_BYTES": "4M"}, ": the file has 8,388,608 bytes: more than 4,194,304 bytes"),
    ],
    ids=["a 1 GiB line", "a file past the limit"],
)
def test_an_answers_bomb_fails_fast_within_2_gib(tmp_path: Path, size: int, env: dict[str, str], expected: str) -> None:
    """A 1 GiB file of one line (sparse: no disk spent) once took 1.3-1.9 GB before a MemoryError traceback."""
    path = tmp_path / "answers.jsonl"
    with path.open("wb") as fh:
        fh.truncate(size)
    done = in_child(ANSWERS.format(path=str(path)), timeout=120, env=child_env(**env))
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"irflow: error: {path}{expected}" in done.stderr
    assert peak_bytes(done) < 1 * GIB


def _answers(path: Path) -> Any:
    from support.toy import tiny_dataset

    from irflow.tasks.rag.answers import read_answers

    return read_answers(path, tiny_dataset())


def _abtest_log(path: Path) -> Any:
    from irflow.tasks.online.abtest_log import read_ab_log

    return read_ab_log(path)


def _interleaving_log(path: Path) -> Any:
    from irflow.tasks.online.interleave_log import read_interleaving_log

    return read_interleaving_log(path)


def _human(path: Path) -> Any:
    from irflow.tasks.rag.calibrate import read_human_verdicts

    return read_human_verdicts(path)


def _experiment(path: Path) -> Any:
    from irflow.tasks.experiment import load_experiment

    return load_experiment(path)


def _qrels(path: Path) -> Any:
    from irflow.tasks.ingest import import_dataset

    return import_dataset(path, "trec-qrels", "qrels-test", base="techdocs")


def _run(path: Path) -> Any:
    from irflow.tasks.retrieve import read_run

    return read_run(path)


def _source(path: Path) -> Any:
    from irflow.tasks.ingest.readers import read_qrels

    return read_qrels(path)


READERS: dict[str, Callable[[Path], Any]] = {
    "answers": _answers,
    "A/B log": _abtest_log,
    "interleaving log": _interleaving_log,
    "human verdicts": _human,
    "experiment": _experiment,
    "qrels import": _qrels,
    "qrels source": _source,
    "run file": _run,
}


@pytest.mark.parametrize("reader", list(READERS))
def test_only_regular_files_are_read_and_the_message_says_what_the_path_is(tmp_path: Path, reader: str) -> None:
    """``/dev/zero`` never ends and a FIFO blocks a reader for ever: both are refused before a byte is read."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    kinds = ((Path("/dev/zero"), ("a character device",)), (fifo, ("a FIFO",)), (folder, ("a directory", "a folder")))
    for path, kind in kinds:
        with pytest.raises(InputError) as info:
            READERS[reader](path)
        message = str(info.value)
        assert message.startswith(f"{path}: ") and any(k in message for k in kind), message
        assert "no such file" not in message


def test_the_shared_checks_name_the_kind_and_open_nothing_else(tmp_path: Path) -> None:
    regular = tmp_path / "f.txt"
    regular.write_text("x\n")
    assert regular_file(regular, "a file").stat().st_size == 2
    with open_regular(regular, "a file") as fh:
        assert fh.read() == b"x\n"
    with pytest.raises(InputError, match=r"missing.txt: no such file; expected a file"):
        regular_file(tmp_path / "missing.txt", "a file")
    with pytest.raises(InputError, match=r"/dev/null: a character device, not a regular file; expected a file"):
        open_regular("/dev/null", "a file")
    assert MAX_LINE_BYTES.env == "IRFLOW_MAX_LINE_BYTES"
