"""Encode each thing once: two real processes embedding the same texts on a fresh cache share one encode
(the per-key lock of ``tasks.embed.key_lock``), and the progress line of long stages (``tasks.core.progress``).

The encoder is a cheap fake (a hash of each text as its vector) in a helper script, so the test
checks the locking, not a model: it counts its calls in a file, and the first process keeps
encoding until the second has logged that it waits, so the two really overlap whatever the load.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from irflow.tasks.core import progress
from irflow.tasks.embed.key_lock import EmbeddingLockTimeout, key_lock

ROOT = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent("""
    import hashlib, json, os, sys, time
    from pathlib import Path
    import numpy as np
    from irflow.tasks.embed import cache as embed_cache

    calls, out, wait_for = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]

    class FakeEncoder:
        name = identity = "fake-encoder-v1"
        def prompt(self, role, prompt):
            return prompt or ""
        def encode(self, texts, prompt=""):
            if wait_for == "die-on-second" and calls.is_file():
                os.kill(os.getpid(), 9)  # killed while holding the lock, after its first part
            with open(calls, "a") as fh:
                fh.write(f"{os.getpid()} {len(texts)}\\n")
            deadline = time.monotonic() + 60
            # until the other process waits on us
            while wait_for not in ("-", "die-on-second") and time.monotonic() < deadline:
                if Path(wait_for).is_file() and "waiting for process" in Path(wait_for).read_text():
                    break
                time.sleep(0.05)
            rows = [np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)[:8] for t in texts]
            vectors = np.asarray(rows, dtype=np.float32) + 1
            return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    ids = [f"d{i}" for i in range(50)]
    texts = [f"document number {i} " * (1 + i % 7) for i in range(50)]
    result = embed_cache.embed_texts(ids, texts, FakeEncoder(), role="document", chunk_size=20)
    np.save(out, result.vectors)
    print(json.dumps({"encoded": result.encoded, "from_cache": result.from_cache}))
""")


def test_two_processes_encode_the_same_key_once(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "IRFLOW_CACHE_DIR": str(tmp_path / "cache"), "IRFLOW_PROGRESS": "0"}
    second_log = tmp_path / "second.err"
    first = subprocess.Popen(
        [sys.executable, str(script), str(calls), str(tmp_path / "a.npy"), str(second_log)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not calls.is_file() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the first process is inside the lock, encoding its first chunk
        assert calls.is_file(), first.communicate()[1][-2000:]
        with open(second_log, "w") as err:
            second = subprocess.run(
                [sys.executable, str(script), str(calls), str(tmp_path / "b.npy"), "-"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                timeout=180,
            )
        out, err_text = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0 and second.returncode == 0, err_text[-2000:] + second_log.read_text()[-2000:]
    assert json.loads(out) == {"encoded": 50, "from_cache": 0}
    assert json.loads(second.stdout) == {"encoded": 0, "from_cache": 50}
    assert f"waiting for process {first.pid} on " in second_log.read_text()
    lines = calls.read_text().split()
    pids, sizes = set(lines[0::2]), [int(n) for n in lines[1::2]]
    assert pids == {str(first.pid)} and sum(sizes) == 50  # every text encoded once, by the first process only
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))


def test_a_killed_holder_frees_the_key_and_its_parts_are_kept(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "IRFLOW_CACHE_DIR": str(tmp_path / "cache"), "IRFLOW_PROGRESS": "0"}
    run = [sys.executable, str(script), str(calls)]
    killed = subprocess.run([*run, str(tmp_path / "a.npy"), "die-on-second"], cwd=ROOT, env=env, capture_output=True)
    assert killed.returncode == -9
    resumed = subprocess.run([*run, str(tmp_path / "b.npy"), "-"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout) == {"encoded": 30, "from_cache": 20}  # the killed run's first part kept
    assert "waiting for" not in resumed.stderr


def test_lock_wait_times_out_with_the_holder_named(tmp_path: Path) -> None:
    key_dir = tmp_path / "key"
    with key_lock(key_dir):
        with pytest.raises(EmbeddingLockTimeout, match=rf"process {os.getpid()} on .*lock {key_dir}"):
            with key_lock(key_dir, timeout=0.3, poll=0.05):
                pass
    with key_lock(key_dir, timeout=0.3):  # released: free again
        pass


# --- progress ----------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_draws_rate_and_eta_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IRFLOW_PROGRESS", raising=False)
    screen, clock = Terminal(), Clock()
    with progress.Progress("encode documents", 1000, unit="texts", stream=screen, clock=clock) as bar:
        bar.advance(200, worked=False)  # read from the cache: done, but not part of the rate
        clock.now += 4.0
        bar.advance(100)
        assert bar.line() == "encode documents  300/1,000 texts (30%)  25.0 texts/s  ETA 0:00:28"
        clock.now += 0.1
        bar.advance(10)  # within the redraw interval: not drawn
    drawn = screen.getvalue()
    assert drawn.count("\r") == 2 and drawn.endswith("\n")  # the first worked update (4 s), the final line
    assert "300/1,000 texts (30%)  25.0 texts/s  ETA 0:00:28" in drawn
    assert "310/1,000 texts (31%)" in drawn.rsplit("\r", 1)[1]


def test_progress_of_work_served_from_the_cache_draws_no_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IRFLOW_PROGRESS", raising=False)
    screen = Terminal()
    with progress.Progress("encode queries", 80, unit="texts", stream=screen) as bar:
        bar.advance(50, worked=False)
        bar.advance(30, worked=False)
    assert screen.getvalue() == "" and bar.done == 80
    assert [progress.plural(w) for w in ("query", "document", "day")] == ["queries", "documents", "days"]


def test_progress_is_quiet_off_a_terminal_unless_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IRFLOW_PROGRESS", raising=False)
    piped = io.StringIO()
    with progress.Progress("download", 10, stream=piped) as bar:
        bar.advance(10)
    assert piped.getvalue() == ""
    monkeypatch.setenv("IRFLOW_PROGRESS", "1")
    assert progress.enabled(io.StringIO())
    monkeypatch.setenv("IRFLOW_PROGRESS", "0")
    assert not progress.enabled(Terminal())


def test_progress_is_quiet_inside_dask_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from distributed import Client, LocalCluster

    monkeypatch.delenv("IRFLOW_PROGRESS", raising=False)
    assert progress.enabled(Terminal())
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):
        assert client.submit(progress.enabled, Terminal()).result() is False


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("download", 12_500_000, 50_000_000, 2_500_000.0, "MB", 1e6),
            "download  12.5/50.0 MB (25%)  2.5 MB/s  ETA 0:00:15",
        ),
        (("ingest", 5000, None, 1234.5, "docs"), "ingest  5,000 docs  1,234.5 docs/s"),
        (("index", 0, 10, None, "docs"), "index  0/10 docs (0%)  ? docs/s  ETA ?"),
        (("annotate", 10, 7210, 0.5, "battles"), "annotate  10/7,210 battles (0%)  0.5 battles/s  ETA 4:00:00"),
    ],
)
def test_progress_line_format(args: tuple, expected: str) -> None:
    assert progress.format_line(*args) == expected


def test_format_duration() -> None:
    assert [progress.format_duration(s) for s in (0, 59.6, 3599, 3600 * 30 + 61, None, float("inf"))] == [
        "0:00:00",
        "0:01:00",
        "0:59:59",
        "30:01:01",
        "?",
        "?",
    ]


def test_progress_rate_leaves_out_what_came_before_the_first_update() -> None:
    clock = Clock()
    bar = progress.Progress("encode queries", 1000, unit="texts", stream=io.StringIO(), clock=clock)
    clock.now += 50.0  # loading the model
    bar.advance(100)
    assert bar.rate is None and bar.line().endswith("? texts/s  ETA ?")
    clock.now += 2.0
    bar.advance(100)
    assert bar.rate == 50.0 and bar.line().endswith("50.0 texts/s  ETA 0:00:16")
