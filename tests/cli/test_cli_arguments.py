"""Options checked when the command line is parsed: exit code 2 with the option named, before any work."""

from __future__ import annotations

import pytest

from irflow.cli.main import build_parser


@pytest.mark.parametrize("value", ["0", "1", "-3", "99999999999999999999", "many"])
def test_compare_last_out_of_range_fails_at_parsing(capsys, value):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["compare", "--experiment", "irflow", "--last", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --last: expected an integer from 2 to 1000 (runs to compare), got '{value}'" in err


def test_compare_last_in_range_is_taken():
    assert build_parser().parse_args(["compare", "--last", "5"]).last == 5
