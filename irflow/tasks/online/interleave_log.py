"""A real interleaving log → per-impression credit and the same test as the simulation.

One row per result shown (CSV, TSV, JSONL or Parquet): ``impression`` (the id of one interleaved list
shown to one user), ``query`` or ``query_id``, ``position`` (1, 2, …), ``team`` (the system whose pick
the result was: two names in the whole log), ``clicked`` (0/1), and optionally ``doc_id``. A list must
be a team-draft list: within an impression positions are distinct, and at every prefix neither team is
more than one pick ahead (a log of another interleaving method is refused, since its credit differs).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest.readers import fail_at_row, integer_column, read_log_table
from irflow.tasks.online.interleave import A, B, credit

NEEDED = ("impression", "position", "team", "clicked")


def read_interleaving_log(path: str | Path, teams: Sequence[str] = ()) -> tuple[pd.DataFrame, tuple[str, str]]:
    """The log as ``impression, query, position, team (+1 A / −1 B), clicked`` sorted by impression and
    position, and the two team names (A first: ``teams`` when given, else in order of appearance)."""
    path = Path(path)
    log = read_log_table(path, "interleaving log").reset_index(drop=True)
    query = "query_id" if "query_id" in log.columns else "query" if "query" in log.columns else None
    missing = [c for c in NEEDED if c not in log.columns] + ([] if query else ["query (or query_id)"])
    if missing:
        raise InputError(
            f"interleaving log lacks columns {missing}; expected one row per result shown with impression, "
            "query (or query_id), position, team and clicked (doc_id optional)",
            path=str(path),
        )
    query = str(query)
    if log.empty:
        raise InputError("interleaving log is empty; expected at least one impression", path=str(path))
    out = pd.DataFrame({"impression": log["impression"].astype(str), "query": log[query].astype(str).str.strip()})
    out["position"] = integer_column(log["position"], "position", path, minimum=1)
    out["clicked"] = integer_column(log["clicked"], "clicked", path, minimum=0)
    if (out["clicked"] > 1).any():
        fail_at_row(out["clicked"] > 1, "clicked", "0 or 1", log, path)
    names = log["team"].astype(str).str.strip()
    for column, values in ((query, out["query"]), ("team", names)):
        bad = (values == "") | log[column].isna()
        if bad.any():
            fail_at_row(bad, column, "a non-empty name", log, path)
    found = list(dict.fromkeys(names))
    order = tuple(teams) if teams else tuple(found)
    if len(found) != 2 or (teams and set(found) != set(teams)):
        expected = f"the teams {list(teams)}" if teams else "exactly two team names"
        raise InputError(f"interleaving log has teams {found[:10]}; expected {expected}", path=str(path))
    out["team"] = np.where(names == order[0], A, B)
    duplicate = out.duplicated(["impression", "position"], keep="first")
    if duplicate.any():
        fail_at_row(duplicate, "position", "a position not already used in its impression", log, path)
    queries = out.groupby("impression")["query"].transform("nunique")
    if (queries > 1).any():
        fail_at_row(queries > 1, query, "the same query on every row of an impression", log, path)
    out = out.sort_values(["impression", "position"], kind="stable")
    lead = out.groupby("impression")["team"].cumsum()
    if (lead.abs() > 1).any():
        bad = (lead.abs() > 1).reindex(log.index, fill_value=False)
        fail_at_row(
            bad, "team", "a team-draft list (at every position neither team more than one pick ahead)", log, path
        )
    return out.reset_index(drop=True), (str(order[0]), str(order[1]))


def log_credits(log: pd.DataFrame) -> pd.DataFrame:
    """Per impression: its query and credit (+1 A won, 0 tie, −1 B won)."""
    width = int(log.groupby("impression").size().max())
    codes, impressions = pd.factorize(log["impression"], sort=True)
    slot = log.groupby("impression").cumcount().to_numpy()
    teams = np.zeros((len(impressions), width), dtype=np.int64)
    clicks = np.zeros((len(impressions), width), dtype=bool)
    teams[codes, slot] = log["team"].to_numpy()
    clicks[codes, slot] = log["clicked"].to_numpy() > 0
    first = log.drop_duplicates("impression").set_index("impression")["query"]
    return pd.DataFrame(
        {"impression": impressions, "query": first.loc[impressions].to_numpy(), "credit": credit(teams, clicks)}
    )


__all__ = ["log_credits", "read_interleaving_log"]
