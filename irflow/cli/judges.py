"""``irflow judges agreement --judged D --human H``: how far a judge's grades are from human grades.

D holds the judge's qrels, H human qrels of some of D's queries (over the same corpus); the figures are
in ``tasks.evalsets.agreement``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_agreement(args: argparse.Namespace) -> int:
    from irflow.tasks.core.atomic import write_json
    from irflow.tasks.evalsets.agreement import agreement_text, judge_agreement
    from irflow.tasks.ingest import load_dataset

    judged, human = load_dataset(args.judged, args.split), load_dataset(args.human, args.split)
    figures = judge_agreement(judged.qrels, human.qrels)
    print(f"judge: {judged.name} ({judged.split}), human: {human.name} ({human.split})")
    print(agreement_text(figures))
    if args.output:
        path = Path(args.output) / "agreement.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"judged": judged.name, "human": human.name, "split": judged.split, **figures})
        print(f"\nfigures: {path}")
    return 0


def add_judges_parser(subparsers: Any) -> None:
    """Register ``judges agreement`` on the ``irflow`` sub-command parsers."""
    judges = subparsers.add_parser("judges", help="compare a judge's relevance grades with human grades")
    sub = judges.add_subparsers(dest="judges_command", required=True)
    p = sub.add_parser("agreement", help="confusion, kappa, alpha, per-grade precision/recall and bias")
    p.add_argument("--judged", required=True, metavar="DATASET", help="dataset whose qrels are the judge's")
    p.add_argument("--human", required=True, metavar="DATASET", help="dataset whose qrels are human judgements")
    p.add_argument("--split", help="split of both datasets (default: test)")
    p.add_argument("--output", metavar="DIR", help="also write the figures to DIR/agreement.json")
    p.set_defaults(func=cmd_agreement)


__all__ = ["add_judges_parser", "cmd_agreement"]
