"""One case of the safety battery: ``python -m irflow.cli ARGS`` in a fresh temporary folder (its own cache,
MLflow store and Prefect home), under ``RLIMIT_AS`` and a wall-time limit, beside a hostile service when the
case asks for one (stopped by its PID), then checked:

* the exit code (``expect``: a code, or ``None`` for any non-zero one);
* no ``Traceback`` and no ``MemoryError`` in stdout or stderr, and no more than :data:`MAX_OUTPUT` printed;
* the error names what it is about (``names``: the file, field, option or limit);
* no planted credential (:data:`PLANTED`) in the output or in any file the command wrote (result folders,
  cache, MLflow's sqlite store, Prefect's database);
* no process left behind: this process is a child subreaper, so a descendant that outlives the command is
  re-parented here and seen;
* peak resident memory (the child's and its waited children's ``ru_maxrss``) under ``rss_cap_mb``;
* a healthy system's result beside a failing one is in ``metrics.json`` (``kept``).
"""

from __future__ import annotations

import base64
import ctypes
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECRET = "sk-battery-SECRET"
USER_PASSWORD = "u:S3cret"
BASIC = base64.b64encode(USER_PASSWORD.encode()).decode()
PLANTED = (SECRET, "S3cret", BASIC)
AS_LIMIT = 8 << 30  # address space: torch and friends map a lot they never touch
MAX_OUTPUT = 4 << 20  # bytes of stdout + stderr
HOSTILE = Path(__file__).with_name("hostile.py")
ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
FIFO, FOLDER = "<fifo>", "<folder>"
KINDS = {
    "traceback": "tracebacks",
    "leak": "leaks",
    "unbounded": "unbounded",
    "lost": "lost_results",
    "orphan": "orphans",
    "unnamed": "unnamed_errors",
    "exit": "wrong_exit_codes",
}


@dataclass(frozen=True)
class Sparse:
    """A file of ``size`` bytes, ``head`` then zeros, that takes no disk."""

    size: int
    head: bytes = b""


@dataclass(frozen=True)
class Case:
    """``args``, ``names`` and ``env`` may hold ``{in}`` (the inputs folder), ``{tmp}`` (the case's folder),
    ``{url}`` (the hostile service's base URL), ``{host}`` (its host:port) and ``{pythonpath}`` (the commands'
    ``PYTHONPATH``); a name in ``names`` may list alternatives, ``a|b``. ``files`` (written into the inputs
    folder): name -> text, a :class:`Sparse` file, ``(piece, times)``, :data:`FIFO` or :data:`FOLDER`."""

    name: str
    category: str
    args: tuple[str, ...]
    names: tuple[str, ...] = ()
    expect: int | None = 2
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)
    server: str | None = None
    kept: str | None = None
    terminate: bool = False  # SIGTERM once the command's Prefect server runs
    timeout: float = 60
    rss_cap_mb: int = 2048


def become_subreaper() -> None:
    """Orphaned descendants of the commands are re-parented to this process (PR_SET_CHILD_SUBREAPER)."""
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found |= {int(c) for c in task.read_text().split()}
        except OSError:
            continue
    return found


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for child in _children(todo.pop()) - found:
            found.add(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


@contextmanager
def hostile(mode: str | None) -> Iterator[tuple[str, set[int]]]:
    """The hostile service's base URL and PID (``("", set())`` without one); stopped by its PID."""
    if mode is None:
        yield "", set()
        return
    proc = subprocess.Popen([sys.executable, str(HOSTILE), mode], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}", {proc.pid}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def _environment(tmp: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "OPENAI_BASE", "MLFLOW_TRACKING"))}
    env["PYTHONPATH"] = PYTHONPATH
    env.update(
        IRFLOW_CACHE_DIR=str(tmp / "cache"),
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp / 'mlflow.db'}",
        PREFECT_HOME=str(tmp / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        MLFLOW_DISABLE_TELEMETRY="true",
        OPENAI_API_KEY=SECRET,
        ANTHROPIC_API_KEY=SECRET,
        GEMINI_API_KEY=SECRET,
        BATTERY_KEY=SECRET,
        BATTERY_BASIC=BASIC,
    )
    env.update(extra)
    return env


def _write_files(folder: Path, files: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = folder / name
        if content == FIFO:
            os.mkfifo(path)
        elif content == FOLDER:
            path.mkdir()
        elif isinstance(content, Sparse):
            with path.open("wb") as fh:
                fh.write(content.head)
                fh.truncate(content.size)
        elif isinstance(content, tuple):
            piece, times = content
            with path.open("wb") as fh:
                for _ in range(times // 100_000):
                    fh.write(piece * 100_000)
                fh.write(piece * (times % 100_000))
        else:
            path.write_text(content, encoding="utf-8")


def _wait(proc: subprocess.Popen[bytes], case: Case) -> tuple[int, float, list[str]]:
    """Exit code, peak RSS in MB and findings; the command killed (its process group) past its time limit."""
    findings, deadline, sent = [], time.monotonic() + case.timeout, 0.0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        now = time.monotonic()
        if case.terminate and not sent and any("uvicorn" in _cmdline(p) for p in _descendants(proc.pid)):
            time.sleep(3)  # the run is under way
            proc.send_signal(signal.SIGTERM)
            sent = now + 3
        if sent and now - sent > 10:
            findings.append("unbounded: still running 10 s after SIGTERM")
            sent, deadline = float("inf"), now
        if now > deadline:
            findings.append(f"unbounded: still running after {case.timeout:.0f} s; killed")
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        time.sleep(0.05)
    if case.terminate and not sent:
        findings.append("exit: ended before it could be stopped mid-run")
    return proc.returncode, usage.ru_maxrss / 1024, findings


def _orphans(spared: set[int]) -> list[str]:
    """Descendants left behind (re-parented here), given 5 s to end; killed by PID if still there."""
    deadline = time.monotonic() + 5
    while True:
        left = {p for p in _children(os.getpid()) - spared if _alive(p)}
        for pid in _children(os.getpid()) - spared - left:
            _reap(pid)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    found = []
    for pid in sorted(left):
        found.append(f"orphan: pid {pid} outlived the command: {_cmdline(pid)[:200]}")
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    return found


def _read_output(path: Path) -> tuple[str, int]:
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size <= MAX_OUTPUT:
            return fh.read().decode(errors="replace"), size
        head = fh.read(MAX_OUTPUT // 2)
        fh.seek(size - MAX_OUTPUT // 2)
        return (head + b"\n...\n" + fh.read()).decode(errors="replace"), size


def files_holding(folder: Path, inputs: Path) -> list[str]:
    """``leak:`` findings: files the command wrote under ``folder`` (not the case's ``inputs`` or the captured
    output) holding a planted credential."""
    found, keys = [], [s.encode() for s in PLANTED]
    captured = {folder / "stdout.txt", folder / "stderr.txt"}
    for path in folder.rglob("*"):
        if inputs in path.parents or path in captured or path.is_symlink() or not path.is_file():
            continue
        tail = b""
        with path.open("rb") as fh:
            while chunk := fh.read(8 << 20):
                hits = [k.decode() for k in keys if k in tail + chunk]
                if hits:
                    found.append(f"leak: {path.relative_to(folder)} holds {', '.join(hits)}")
                    break
                tail = chunk[-64:]
    return found


def _kept(out: Path, system: str) -> list[str]:
    metrics = out / "metrics.json"
    if not metrics.is_file():
        return [f"lost: no {metrics.name} in {out.name}/: {system}'s finished result is lost"]
    text = metrics.read_text(encoding="utf-8", errors="replace")
    if not re.search(r'"systems":\s*\{[^}]*' + re.escape(f'"{system}"'), text):
        return [f"lost: {system} is not among metrics.json's systems"]
    return []


def run_case(case: Case, root: Path) -> dict[str, Any]:
    """Run ``case`` in a new folder under ``root``; its record: name, category, exit code, seconds, peak MB,
    findings (each ``{"kind", "detail"}``)."""
    tmp = root / re.sub(r"[^a-z0-9]+", "-", case.name.lower()).strip("-")
    tmp.mkdir(parents=True)
    with hostile(case.server) as (url, spared):
        fill = {"in": str(tmp / "in"), "tmp": str(tmp), "url": url, "host": url.removeprefix("http://")}
        fill["pythonpath"] = PYTHONPATH
        _write_files(tmp / "in", case.files)
        command = [sys.executable, "-m", "irflow.cli", *(a.format(**fill) for a in case.args)]
        env = _environment(tmp, {k: v.format(**fill) for k, v in case.env.items()})
        began = time.monotonic()
        with open(tmp / "stdout.txt", "wb") as out, open(tmp / "stderr.txt", "wb") as err:
            proc = subprocess.Popen(
                command, cwd=tmp, env=env, stdout=out, stderr=err, preexec_fn=_limit_memory, start_new_session=True
            )
            code, peak_mb, found = _wait(proc, case)
        seconds = time.monotonic() - began
        found += _orphans(spared)
    stdout, out_size = _read_output(tmp / "stdout.txt")
    stderr, err_size = _read_output(tmp / "stderr.txt")
    printed = stdout + stderr
    unwrapped = " ".join(printed.split())  # a long message is wrapped at the terminal's width
    if case.expect is None and code == 0:
        found.append("exit: exited 0; expected a failure")
    elif case.expect is not None and code != case.expect:
        found.append(f"exit: exited {code}; expected {case.expect}: {stderr.strip()[-300:]!r}")
    if "Traceback" in printed:
        found.append("traceback: " + printed[printed.index("Traceback") :][:300])
    if "MemoryError" in printed or peak_mb > case.rss_cap_mb:
        found.append(f"unbounded: peak {peak_mb:.0f} MB (cap {case.rss_cap_mb} MB)")
    if out_size + err_size > MAX_OUTPUT:
        found.append(f"unbounded: printed {out_size + err_size:,} bytes")
    for name in (n.format(**fill) for n in case.names):
        if not any(alternative in unwrapped for alternative in name.split("|")):
            found.append(f"unnamed: the output does not name {name!r}: {stderr.strip()[-300:]!r}")
    found += [f"leak: the output shows {s}" for s in PLANTED if s in printed]
    found += files_holding(tmp, tmp / "in")
    if case.kept:
        found += _kept(tmp / "out", case.kept)
    return {
        "name": case.name,
        "category": case.category,
        "exit_code": code,
        "seconds": round(seconds, 2),
        "peak_mb": round(peak_mb, 1),
        "findings": [{"kind": f.split(":", 1)[0], "detail": f.split(":", 1)[1].strip()} for f in found],
    }


def totals(records: list[dict[str, Any]]) -> dict[str, int]:
    """The findings counted per kind, every kind named (0 when none)."""
    counts = {"cases": len(records), **dict.fromkeys(KINDS.values(), 0)}
    for record in records:
        for finding in record["findings"]:
            counts[KINDS[finding["kind"]]] += 1
    return counts
