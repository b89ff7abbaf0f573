"""docs/cli-vocabulary.md agrees with the real parser: each listed flag is on exactly the listed commands (no
more, no fewer), each old spelling reaches the new flag on each listed command, and no old spelling is
missing from the page."""

from __future__ import annotations

import argparse
import re

import pytest
from support.cli import ROOT

from irflow.cli.main import build_parser

PAGE = ROOT / "docs" / "cli-vocabulary.md"
DEPRECATED_COMMANDS = ("judges agreement",)  # an old command name: its old spellings are listed, not its flags


def _commands() -> dict[str, argparse.ArgumentParser]:
    """``"datasets import"`` -> its parser, for every command."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*prefix, name])
                return
        found[" ".join(prefix)] = parser

    walk(build_parser(), [])
    return found


def _rows() -> list[tuple[str, list[str], list[tuple[str, list[str]]]]]:
    """(flag, commands, [(old spelling, commands)]) of each row of the page's table."""
    rows = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 4 or not cells[1].startswith("`"):
            continue
        flag = re.match(r"`([^` ]+)", cells[1])
        assert flag, line
        commands = re.findall(r"`([^`]+)`", cells[2])
        old = [
            (spelling, re.findall(r"`([^`]+)`", where))
            for spelling, where in re.findall(r"`(--[\w-]+)` \(([^)]*)\)", cells[3])
        ]
        rows.append((flag.group(1), commands, old))
    return rows


ROWS = _rows()


def test_the_page_has_every_idea_of_the_vocabulary() -> None:
    flags = {flag for flag, _, _ in ROWS}
    expected = {"--dataset", "--depth", "RESULT", "--human", "--baseline", "--judge", "--generator", "--llm"}
    assert expected | {"--embedder", "--experiment", "--no-track", "--json"} <= flags


@pytest.mark.parametrize(("flag", "listed", "old"), ROWS, ids=[row[0] for row in ROWS])
def test_each_flag_is_on_exactly_the_listed_commands(
    flag: str, listed: list[str], old: list[tuple[str, list[str]]]
) -> None:
    commands = _commands()
    assert set(listed) <= set(commands), f"{flag}: the page lists unknown commands"

    def has(parser: argparse.ArgumentParser) -> bool:
        if flag.startswith("--"):
            return flag in parser._option_string_actions
        return any(a.metavar == flag and not a.option_strings for a in parser._actions)

    real = {name for name, parser in commands.items() if has(parser) and name not in DEPRECATED_COMMANDS}
    assert real == set(listed), f"{flag}: on {sorted(real)}, the page says {sorted(listed)}"
    for spelling, where in old:
        for name in where:
            parser = commands[name]
            action = parser._option_string_actions.get(spelling)
            assert action is not None and flag in action.option_strings, f"{name}: {spelling} does not reach {flag}"
            assert getattr(action, "old_spellings", {}).get(spelling) == flag, f"{name}: {spelling} is not noted"


def test_every_old_spelling_is_on_the_page() -> None:
    listed = {(spelling, name) for _, _, old in ROWS for spelling, where in old for name in where}
    real = {
        (spelling, name)
        for name, parser in _commands().items()
        for spelling, action in parser._option_string_actions.items()
        if spelling in getattr(action, "old_spellings", {})
    }
    assert real == listed


def test_annotate_and_abtest_log_to_their_own_experiments_unless_told() -> None:
    """``--experiment`` on ``annotate`` and ``abtest`` defaults to the experiment each logged to before it."""
    from irflow.api.abtest import ABTEST_EXPERIMENT
    from irflow.tasks.annotate.config import EXPERIMENT

    commands = _commands()
    assert commands["annotate"].get_default("experiment") == EXPERIMENT == "irflow-annotate"
    assert commands["abtest"].get_default("experiment") == ABTEST_EXPERIMENT == "irflow-abtest"
    assert commands["run"].get_default("experiment") == "irflow"
