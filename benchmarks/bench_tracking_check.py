"""How fast a tracking store that cannot be written fails: ``check_tracking`` alone, and ``irflow run``.

Before the fail-fast check (issue 10): a read-only SQLite file passed the start check and the run
died at the end with a SQLAlchemy traceback after writing its outputs; a SQLite path that is a folder
took ~150 s to fail (MLflow's connection retries), a web server that is not MLflow ~270 s. Goal: each
fails within a few seconds, exit code 2, before anything is written.

    python benchmarks/bench_tracking_check.py

Stores and servers live in a temporary folder and on 127.0.0.1 (stopped at the end); the command
runs with ``--system bm25`` on the demo dataset. Writes ``benchmarks/results/tracking_check.json``.
"""

from __future__ import annotations

import http.server
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


class _Page(http.server.BaseHTTPRequestHandler):
    hang = False

    def do_GET(self) -> None:
        if self.hang:
            time.sleep(8)  # longer than the check's timeout
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<html>a web page for every path</html>")

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _server(hang: bool) -> Iterator[str]:
    handler = type("Handler", (_Page,), {"hang": hang})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://user:secret@127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    from _stores import read_only_database

    from irflow.tasks.tracking.log import TrackingError, check_tracking

    rows = []
    temporary = tempfile.TemporaryDirectory(prefix="irflow-bench-track-")
    with temporary as tmp, _server(hang=False) as page, _server(hang=True) as hang:
        folder = Path(tmp)
        read_only_database(folder / "ro.db")
        (folder / "dir.db").mkdir()
        (folder / "junk.db").write_bytes(b"not a database\n" * 100)
        cases = {
            "read-only SQLite file": f"sqlite:///{folder / 'ro.db'}",
            "SQLite path is a folder": f"sqlite:///{folder / 'dir.db'}",
            "file that is no database": f"sqlite:///{folder / 'junk.db'}",
            "web server, not MLflow": page,
            "server that never answers": hang,
            "closed port": f"http://127.0.0.1:{_closed_port()}",
            "database server without a driver": f"postgresql://user:secret@127.0.0.1:{_closed_port()}/mlflow",
        }
        env = {**os.environ, "PREFECT_HOME": str(folder / "prefect"), "IRFLOW_CACHE_DIR": str(folder / "cache")}
        for name, uri in cases.items():
            started = time.perf_counter()
            try:
                check_tracking(uri)
                outcome = "passed"
            except TrackingError:
                outcome = "TrackingError"
            check_s = time.perf_counter() - started
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "irflow.cli", "run", "--system", "bm25", "--output", str(folder / "out")],
                env={**env, "MLFLOW_TRACKING_URI": uri},
                capture_output=True,
                text=True,
                timeout=600,
                cwd=ROOT,
            )
            command_s = time.perf_counter() - started
            rows.append(
                {
                    "store": name,
                    "check": outcome,
                    "check_s": round(check_s, 3),
                    "command_s": round(command_s, 1),
                    "exit": done.returncode,
                    "outputs_written": (folder / "out").exists(),
                    "message": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "",
                }
            )
            print(f"{name:<34} check {check_s * 1000:7.0f} ms   irflow run {command_s:5.1f} s   exit {done.returncode}")
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "note": "command_s includes interpreter start, imports and the temporary Prefect server's start and stop",
        "cases": rows,
    }
    from irflow.tasks.core.atomic import write_json

    write_json(ROOT / "benchmarks" / "results" / "tracking_check.json", result)


if __name__ == "__main__":
    main()
