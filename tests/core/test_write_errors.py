"""Writes that fail (disk full, read-only, no permission) and output folders that cannot be written:
named errors with the path, before the work where it can be checked, and nothing half-written."""

from __future__ import annotations

import builtins
import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from irflow.cli.main import main
from irflow.tasks.core.atomic import atomic_open, publish_dir, temp_dir, write_json
from irflow.tasks.core.output_folder import check_output, publish
from irflow.tasks.core.schema import InputError, WriteError


def _full_disk(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Every file opened for writing under ``folder`` raises ENOSPC on its first write."""
    real_open = builtins.open

    class Full:
        def __init__(self, fh):  # type: ignore[no-untyped-def]
            self._fh = fh

        def write(self, data):  # type: ignore[no-untyped-def]
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self._fh, name)

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc):  # type: ignore[no-untyped-def]
            self._fh.close()

    def fake_open(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        fh = real_open(file, mode, *args, **kwargs)
        if any(c in mode for c in "wax") and str(Path(file).absolute()).startswith(str(folder)):
            return Full(fh)
        return fh

    monkeypatch.setattr(builtins, "open", fake_open)


def test_disk_full_in_an_atomic_write_is_named_and_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    write_json(target, {"old": 1})
    _full_disk(monkeypatch, tmp_path)
    with pytest.raises(WriteError, match=r"metrics\.json: No space left on device"):
        write_json(target, {"new": 2})
    monkeypatch.undo()
    assert target.read_text(encoding="utf-8").strip().startswith("{")
    assert '"old"' in target.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]  # no temporary left


def test_disk_full_while_publishing_a_folder_is_named_and_keeps_the_old_one(tmp_path, monkeypatch):
    target = tmp_path / "results"
    with publish(target) as build:
        (build / "metrics.json").write_text("{}", encoding="utf-8")
    _full_disk(monkeypatch, tmp_path)
    with (
        pytest.raises(WriteError, match=r"could not write .*results: No space left on device"),
        publish(target) as build,
    ):
        with open(build / "metrics.json", "w", encoding="utf-8") as fh:
            fh.write("{ half")
    monkeypatch.undo()
    assert (target / "metrics.json").read_text(encoding="utf-8") == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_disk_full_while_extracting_into_a_work_folder_is_named(tmp_path, monkeypatch):
    _full_disk(monkeypatch, tmp_path)
    with pytest.raises(WriteError, match=r"work.scifact: No space left"), temp_dir(tmp_path / "work", "scifact") as tmp:
        with open(tmp / "corpus.jsonl", "wb") as fh:
            fh.write(b"x")
    monkeypatch.undo()
    assert list((tmp_path / "work").iterdir()) == []


def test_a_read_error_inside_a_write_is_not_called_a_write_error(tmp_path):
    with pytest.raises(PermissionError), atomic_open(tmp_path / "out.txt") as fh:
        fh.write("x")
        raise PermissionError(errno.EACCES, "Permission denied", "/elsewhere/input.tsv")
    assert list(tmp_path.iterdir()) == []


def test_publish_dir_reraises_other_errors_unchanged(tmp_path):
    with pytest.raises(FileNotFoundError), publish_dir(tmp_path / "x"):
        raise FileNotFoundError(errno.ENOENT, "gone", "/nowhere")


@pytest.mark.parametrize("marker", ["metrics.json", None])
def test_check_output_refuses_an_existing_file(tmp_path, marker):
    (tmp_path / "hostname").write_text("x", encoding="utf-8")
    with pytest.raises(InputError, match="found a file"):
        check_output(tmp_path / "hostname", marker=marker)


@pytest.mark.parametrize("marker", ["metrics.json", None])
def test_check_output_refuses_a_read_only_folder_whose_parent_is_writable(marker):
    """The publish swaps the target folder out (rewriting its ``..``), and drift/pool/annotate write into
    it: both need the folder itself writable, not only its parent. Root ignores permission bits, so the
    check runs as ``nobody`` there."""
    top = Path(tempfile.mkdtemp(prefix="irflow-ro-", dir="/tmp"))
    try:
        os.chmod(top, 0o777)
        target = top / "results"
        target.mkdir()
        (target / "metrics.json").write_text("{}", encoding="utf-8")
        os.chmod(target, 0o555)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 3
            try:
                if os.geteuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                check_output(target, marker=marker)
                code = 1
            except InputError as err:
                code = 0 if "cannot be written" in str(err) and str(target) in str(err) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert sorted(p.name for p in target.iterdir()) == ["metrics.json"]  # the probe left nothing
    finally:
        os.chmod(top / "results", 0o755)
        shutil.rmtree(top)


@pytest.mark.parametrize(
    "args",
    [
        ["pool", "--dataset", "techdocs", "--system", "bm25", "--output", "{file}"],
        ["drift", "--dataset", "techdocs", "--current", "{file}", "--output", "{file}"],
        ["annotate", "--dataset", "techdocs", "--no-track", "--output", "{file}"],
    ],
    ids=["pool", "drift", "annotate"],
)
def test_output_options_that_name_a_file_fail_before_the_work(tmp_path, capsys, args):
    existing = tmp_path / "hostname"
    existing.write_text("x\n", encoding="utf-8")
    assert main([a.replace("{file}", str(existing)) for a in args]) == 2
    err = capsys.readouterr().err
    assert "irflow: error: --output" in err and "found a file" in err
    assert existing.read_text(encoding="utf-8") == "x\n"


def test_the_cli_names_a_full_disk_anywhere(monkeypatch, capsys):
    """A write outside the atomic helpers (a library's own file) that hits a full disk: named, exit 2."""

    def full(args):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/store/mlflow.db")

    monkeypatch.setattr("irflow.cli.datasets.cmd_datasets_list", full)  # bound when the parser is built
    assert main(["datasets", "list"]) == 2
    assert "could not write /store/mlflow.db: No space left on device" in capsys.readouterr().err


def test_a_full_disk_elsewhere_inside_a_write_names_that_path_too(tmp_path):
    with pytest.raises(WriteError, match=r"out\.txt: No space left on device \(/elsewhere/cache\.bin\)"):
        with atomic_open(tmp_path / "out.txt") as fh:
            fh.write("x")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/elsewhere/cache.bin")
    assert list(tmp_path.iterdir()) == []
