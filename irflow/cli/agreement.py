"""``irflow agreement``: how far relevance grades agree, in one command with two forms.

* ``irflow agreement SHEET SHEET...``: two or more judges' filled sheets (``irflow pool``): Cohen's kappa and
  Krippendorff's alpha (``tasks.evalsets.pool``);
* ``irflow agreement --dataset D --human H``: a judge's qrels (dataset D) against human qrels of some of its
  queries (H: a dataset, or a qrels file or a filled sheet): confusion, kappa, alpha, per-grade
  precision/recall and bias (``tasks.evalsets.agreement``).

``irflow judges agreement --judged D --human H`` is the second form's old spelling (one more release).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from irflow.cli.options import dataset_option, deprecated_command, human_form, human_option, json_option


def check_agreement(args: argparse.Namespace) -> None:
    """One form or the other; every sheet a regular file; both datasets known."""
    from irflow.cli.checks import check_dataset, check_file, check_human
    from irflow.tasks.core.schema import InputError

    sheets = list(getattr(args, "sheets", None) or [])
    if sheets and (args.dataset or args.human):
        raise InputError("irflow agreement takes filled sheets (SHEET SHEET...) or --dataset D --human H, not both")
    if not sheets and not (args.dataset and args.human):
        raise InputError("irflow agreement needs two or more filled sheets, or --dataset D (the judge's) --human H")
    if sheets and len(sheets) < 2:
        raise InputError("irflow agreement needs two or more filled sheets (one per judge)")
    for sheet in sheets:
        check_file(sheet, "SHEET", "a filled sheet (TSV or CSV: query_id, doc_id, grade)")
    if not sheets:
        check_dataset(args.dataset, "--dataset")
        check_human(args.human)


def cmd_agreement(args: argparse.Namespace) -> int:
    if getattr(args, "sheets", None):
        return _sheets(args)
    return _judge_and_human(args)


def _sheets(args: argparse.Namespace) -> int:
    from irflow.tasks.evalsets.pool import (
        agreement_table,
        agreement_text,
        cohen_kappa,
        krippendorff_alpha,
        single_grade_reason,
    )

    table = agreement_table(args.sheets)
    both = table.dropna()
    figures: dict[str, Any] = {"units": len(table), "units_judged_by_all": len(both)}
    if table.shape[1] == 2:
        a, b = table.iloc[:, 0], table.iloc[:, 1]
        figures["cohen_kappa"] = cohen_kappa(a, b)
        figures["cohen_kappa_quadratic"] = cohen_kappa(a, b, weights="quadratic")
    for level in ("nominal", "ordinal", "interval"):
        figures[f"krippendorff_alpha_{level}"] = krippendorff_alpha(table, level)
    reason = single_grade_reason(table)
    if args.json:
        clean = {k: (None if isinstance(v, float) and v != v else v) for k, v in figures.items()}
        print(json.dumps({"sheets": list(args.sheets), **clean, "undefined": reason}, indent=2))
        return 0
    print(f"{len(table):,} units judged, {len(both):,} by every judge")
    if "cohen_kappa" in figures:
        print(f"Cohen's kappa:            {agreement_text(figures['cohen_kappa'])}")
        print(f"Cohen's kappa, quadratic: {agreement_text(figures['cohen_kappa_quadratic'])}")
    for level in ("nominal", "ordinal", "interval"):
        print(f"Krippendorff's alpha, {level + ':':<9} {agreement_text(figures[f'krippendorff_alpha_{level}'])}")
    if reason:
        print(reason)
    return 0


def _judge_and_human(args: argparse.Namespace) -> int:
    from irflow.tasks.core.atomic import write_json
    from irflow.tasks.evalsets.agreement import agreement_text, judge_agreement
    from irflow.tasks.ingest import judgements_dataset, load_dataset

    judged = load_dataset(args.dataset, args.split)
    if human_form(args.human) == "file":
        human = judgements_dataset(args.human, judged.split)
    else:
        human = load_dataset(args.human, args.split)
    figures = judge_agreement(judged.qrels, human.qrels)
    document = {"judged": judged.name, "human": human.name, "split": judged.split, **figures}
    path = Path(args.output) / "agreement.json" if args.output else None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, document)
    if args.json:
        print(json.dumps(document, indent=2, default=str))
        return 0
    print(f"judge: {judged.name} ({judged.split}), human: {human.name} ({human.split})")
    print(agreement_text(figures))
    if path is not None:
        print(f"\nfigures: {path}")
    return 0


def _judge_options(p: argparse.ArgumentParser, required: bool, old: tuple[str, ...] = ()) -> None:
    dataset_option(p, "dataset whose qrels are the judge's (with --human)", old=old, required=required)
    human_option(
        p,
        "human judgements of some of its queries (with --dataset): a stored dataset, or a file (a qrels file or a "
        "filled sheet)",
        required=required,
    )
    p.add_argument("--split", help="split of both datasets (default: test)")
    p.add_argument("--output", metavar="DIR", help="also write the figures to DIR/agreement.json (with --dataset)")
    json_option(p)


def add_agreement_parser(subparsers: Any) -> None:
    """Register ``irflow agreement`` and its old spelling ``irflow judges agreement``."""
    p = subparsers.add_parser(
        "agreement",
        help="agreement of judges: filled sheets (kappa, alpha), or a judge's dataset against human grades",
        description="Two forms: `irflow agreement SHEET SHEET...` (two or more judges' filled sheets: Cohen's "
        "kappa, Krippendorff's alpha) or `irflow agreement --dataset D --human H` (a judge's qrels against human "
        "qrels: confusion, kappa, alpha, per-grade precision/recall and bias).",
    )
    p.add_argument("sheets", nargs="*", metavar="SHEET", help="filled sheets (TSV or CSV: query_id, doc_id, grade)")
    _judge_options(p, required=False)
    p.set_defaults(func=cmd_agreement, check=check_agreement)

    judges = subparsers.add_parser("judges", help="deprecated: use irflow agreement --dataset D --human H")
    sub = judges.add_subparsers(dest="judges_command", required=True)
    q = sub.add_parser("agreement", help="deprecated: irflow agreement --dataset D --human H")
    _judge_options(q, required=True, old=("--judged",))
    q.set_defaults(func=cmd_agreement, check=check_agreement)
    deprecated_command(q, "irflow judges agreement", "irflow agreement")


__all__ = ["add_agreement_parser", "check_agreement", "cmd_agreement"]
