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


def test_a_label_names_the_system_before_it_even_one_with_equals_signs():
    from irflow.cli.run import labels_of

    args = build_parser().parse_args(
        ["run", "--system", "bm25:k1=0.9,b=0.4", "--label", "tuned  BM25", "--system", "dense:minilm"]
    )
    assert args.label == {0: "tuned BM25"}
    assert labels_of(args, args.system) == {"bm25": "tuned BM25"}  # the canonical spec (b=0.4 is the default)
    args = build_parser().parse_args(["run", "--system", "bm25", "--system", "dense:minilm", "--label", "MiniLM"])
    assert labels_of(args, args.system) == {"dense:sentence-transformers/all-MiniLM-L6-v2": "MiniLM"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--label", "x"], "a label names the --system given just before it; none was given yet"),
        (["--system", "bm25", "--label", "a", "--label", "b"], "already has the label 'a'"),
        (["--system", "bm25", "--label", "a", "--system", "bm25:k1=2", "--label", "a"], "has this label already"),
        (["--system", "bm25", "--label", " "], "expected 1 to 60 characters"),
    ],
)
def test_a_label_without_its_system_or_twice_fails_at_parsing(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
