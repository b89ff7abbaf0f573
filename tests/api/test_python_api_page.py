"""docs/python-api.md runs as written: every ``python`` block is executed in order, in one namespace, in a fresh
folder, and what it prints must be the ``text`` block that follows it, character for character.

``IRFLOW_REGENERATE_DOCS=1 pytest tests/api/test_python_api_page.py`` rewrites those outputs (then read the diff).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```\n(?:\n```text\n(?P<out>.*?)```\n)?", re.S)


def run_page(text: str) -> tuple[list[tuple[str, str | None, str]], str]:
    """Each python block with its written output and what it printed; and the page with the printed outputs."""
    namespace: dict[str, object] = {"__name__": "__docs__"}
    found, pieces, end = [], [], 0
    for match in BLOCK.finditer(text):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(match["code"], f"{PAGE.name} block {len(found) + 1}", "exec"), namespace)
        got = printed.getvalue()
        found.append((match["code"], match["out"], got))
        block = f"```python\n{match['code']}```\n" + (f"\n```text\n{got}```\n" if got else "")
        pieces += [text[end : match.start()], block]
        end = match.end()
    return found, "".join(pieces) + text[end:]


def test_the_python_api_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = PAGE.read_text(encoding="utf-8")
    blocks, regenerated = run_page(text)
    assert len(blocks) >= 8
    if os.environ.get("IRFLOW_REGENERATE_DOCS") == "1":
        PAGE.write_text(regenerated, encoding="utf-8")
        return
    for number, (code, written, printed) in enumerate(blocks, 1):
        assert (written or "") == printed, f"block {number} prints something else than the page says:\n{code}"
