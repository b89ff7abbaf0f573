"""``irflow --help`` answers at once: building the parser and printing any sub-command's help loads
no heavy library (each costs a noticeable part of a second before the user sees anything)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "numpy", "torch", "sentence_transformers", "mlflow", "prefect")

# In a fresh interpreter: print the help of the top level and of every sub-command (nested ones
# included, found by walking the parser), as `irflow ... --help` does, then report what got imported.
_SCRIPT = """
import argparse, contextlib, io, json, sys
from irflow.cli.main import build_parser, main

def commands(parser, prefix=()):
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, prefix + (name,))

helps = {}
for command in commands(build_parser()):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main([*command, "--help"])
        except SystemExit as exit:
            assert exit.code == 0, (command, exit.code)
    helps[" ".join(command)] = out.getvalue()
print(json.dumps({"helps": helps, "heavy": sorted(set(HEAVY) & set(sys.modules))}))
"""


def test_help_of_every_command_imports_no_heavy_library() -> None:
    code = f"HEAVY = {HEAVY!r}\n{_SCRIPT}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    helps = result["helps"]
    # every command printed its own usage (the walk found them all, nested `datasets` ones included)
    assert {"", "datasets", "datasets import", "run", "report", "annotate"} <= set(helps)
    for command, text in helps.items():
        assert text.startswith(f"usage: irflow {command}".rstrip()), command
    assert "judge specs (kind[(options)]:target)" in helps["annotate"]
    assert result["heavy"] == []
