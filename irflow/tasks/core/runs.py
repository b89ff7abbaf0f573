"""Run tables ``(query_id, doc_id, score, rank)``: trec_eval ordering, cut-offs, TREC files.

Every run irflow stores or scores goes through ``order_run``, so the rank column always agrees
with the order trec_eval itself would use (score descending, ties by doc id descending), and the
same inputs give the same files byte for byte.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from irflow.tasks.core.atomic import atomic_open
from irflow.tasks.core.schema import RUN_COLUMNS, InputError

DEFAULT_DEPTH = 100
MAX_DEPTH = 1000
TREC_FIELDS = "query_id Q0 doc_id rank score tag"


def validate_depth(depth: int) -> int:
    """A run depth is an integer in [1, MAX_DEPTH]; anything else is an InputError."""
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or not 1 <= depth <= MAX_DEPTH:
        raise InputError(f"depth must be an integer between 1 and {MAX_DEPTH}, got {depth!r}")
    return int(depth)


def empty_run() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "query_id": pd.Series(dtype="str"),
            "doc_id": pd.Series(dtype="str"),
            "score": pd.Series(dtype="float64"),
            "rank": pd.Series(dtype="int64"),
        }
    )


def order_run(run: pd.DataFrame) -> pd.DataFrame:
    """Sort per query (query ids ascending) by score descending, ties by doc id descending; set 1-based rank.

    This is trec_eval's own order, so metrics computed on the table equal trec_eval's on the file.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    df = run.loc[:, ["query_id", "doc_id", "score"]].astype({"query_id": "str", "doc_id": "str", "score": "float64"})
    # Arrow's stable multi-key sort: the order of pandas' stable sort_values (strings by code point,
    # NaN scores and missing ids last), ~3x faster on a million rows.
    keys = pa.table(
        {"q": pa.array(df["query_id"].array), "s": df["score"].to_numpy(), "d": pa.array(df["doc_id"].array)}
    )
    order = pc.sort_indices(keys, sort_keys=[("q", "ascending"), ("s", "descending"), ("d", "descending")])
    df = df.take(order.to_numpy()).reset_index(drop=True)
    qids = keys["q"].take(order)
    first = np.ones(len(df), dtype=bool)  # where a query's hits start
    if len(df) > 1:
        first[1:] = pc.fill_null(pc.not_equal(qids[1:], qids[:-1]), True).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(first)
    position = np.arange(len(df), dtype=np.int64)
    df["rank"] = position - np.repeat(starts, np.diff(np.append(starts, len(df)))) + 1
    return df


def drop_identical_ids(run: pd.DataFrame) -> pd.DataFrame:
    """Drop hits whose doc id equals the query id (ArguAna, Quora: the query is itself a corpus document)."""
    return order_run(run[run["query_id"].astype("str") != run["doc_id"].astype("str")])


def _check(run: pd.DataFrame, what: str) -> None:
    missing = [c for c in RUN_COLUMNS if c not in run.columns]
    if missing:
        raise InputError(f"{what}: run table lacks columns {missing}; expected {list(RUN_COLUMNS)}")
    if run["score"].isna().any():
        raise InputError(f"{what}: run has NaN scores (query {run.loc[run['score'].isna(), 'query_id'].iloc[0]!r})")
    dup = run.duplicated(["query_id", "doc_id"])
    if dup.any():
        row = run[dup].iloc[0]
        raise InputError(f"{what}: document {row['doc_id']!r} appears twice for query {row['query_id']!r}")


def write_trec(run: pd.DataFrame, path: str | os.PathLike[str], tag: str) -> Path:
    """Write ``run`` in TREC format (``qid Q0 docid rank score tag``), in trec_eval order, atomically.

    Scores are written in Python's shortest round-trip form, so ``read_trec`` gives them back exactly.
    """
    path = Path(path)
    if not tag or any(c.isspace() for c in tag):
        raise InputError(f"{path}: run tag {tag!r} must be non-empty and contain no whitespace")
    _check(run, str(path))
    df = order_run(run)
    for column in ("query_id", "doc_id"):
        bad = (df[column] == "") | df[column].str.contains(r"\s", regex=True)
        if bad.any():
            raise InputError(f"{path}: {column} {df.loc[bad, column].iloc[0]!r} is empty or contains whitespace")
    lines = (
        df["query_id"]
        + " Q0 "
        + df["doc_id"]
        + " "
        + df["rank"].astype("str")
        + " "
        + df["score"].astype("str")
        + f" {tag}\n"
    )
    with atomic_open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write("".join(lines.tolist()))
    return path


def read_trec(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a TREC run file; a malformed line raises InputError naming the file and the 1-based line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read run file: {exc.strerror}", path=str(path)) from None
    return parse_trec(data, str(path))


CONTENT_LINE = re.compile(r"(?m)^.*\S.*$")
"""A line holding something but whitespace (blank lines hold no hit and are skipped without a cost)."""


def parse_trec(data: bytes, where: str, first_line: int = 1, first_byte: int = 0) -> pd.DataFrame:
    """The run table of TREC run text (``qid Q0 docid rank score tag``); ``where`` names it in errors.

    Well-formed files with single-space or tab separators take a fast path (pyarrow's CSV reader,
    about 0.2 s per million lines); anything else is read line by line, which also finds the first
    bad line: fields other than 6, a rank that is not an integer, a score that is not a finite
    number, a document listed twice for a query. Blank lines cost only their bytes. ``data`` may be a
    piece of a file cut at a line's end: ``first_line`` and ``first_byte`` are where it starts (errors
    name the file's line and byte).
    """
    if re.search(rb"\S", data) is None:
        return empty_run()
    fast = _parse_trec_fast(data)
    if fast is not None:
        return fast
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text at byte {first_byte + exc.start}", path=where) from None
    rows: list[list[str]] = []
    numbers: list[int] = []
    line, seen = first_line, 0
    for match in CONTENT_LINE.finditer(text):
        line += text.count("\n", seen, match.start())
        seen = match.start()
        fields = match.group().split()
        if len(fields) != 6:
            raise InputError(f"expected 6 fields '{TREC_FIELDS}', found {len(fields)}", path=where, line=line)
        rows.append(fields)
        numbers.append(line)
    if not rows:
        return empty_run()
    lineno = np.array(numbers, dtype=np.int64)
    frame = pd.DataFrame(rows, columns=["query_id", "q0", "doc_id", "rank", "score", "tag"], dtype="str")
    score = pd.to_numeric(frame["score"], errors="coerce")
    _fail_at(~frame["rank"].str.fullmatch(r"[+-]?\d+"), lineno, frame["rank"], "rank must be an integer", where)
    _fail_at(
        ~np.isfinite(score.to_numpy(dtype="float64", na_value=np.nan)),
        lineno,
        frame["score"],
        "score must be a finite number",
        where,
    )
    _fail_at(
        frame.duplicated(["query_id", "doc_id"]).to_numpy(),
        lineno,
        frame["doc_id"],
        "document appears twice for its query",
        where,
    )
    return pd.DataFrame(
        {
            "query_id": frame["query_id"],
            "doc_id": frame["doc_id"],
            "score": score.astype("float64"),
            "rank": frame["rank"].astype("int64"),
        }
    )


def _parse_trec_fast(data: bytes) -> pd.DataFrame | None:
    """The run of a well-formed file with one separator (space or tab), or None (read it line by line)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as csv

    found = re.search(rb"\S", data)
    start = found.start() if found else 0
    end = data.find(b"\n", start)
    first = data[start : end if end >= 0 else len(data)]
    delimiter = "\t" if b"\t" in first else " "
    names = ["query_id", "q0", "doc_id", "rank", "score", "tag"]
    types = {**{n: pa.string() for n in names}, "rank": pa.int64(), "score": pa.float64()}
    try:
        table = csv.read_csv(
            pa.py_buffer(data),
            read_options=csv.ReadOptions(column_names=names),
            parse_options=csv.ParseOptions(delimiter=delimiter, quote_char=False, double_quote=False),
            convert_options=csv.ConvertOptions(column_types=types, strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError):
        return None
    if table.num_rows == 0 or table.column("score").null_count or table.column("rank").null_count:
        return None
    empty = pc.equal(pc.utf8_length(table.column("doc_id")), 0)
    if not pc.all(pc.is_finite(table.column("score"))).as_py() or pc.any(empty).as_py():
        return None
    run = pd.DataFrame(
        {
            "query_id": table.column("query_id").to_pandas(),
            "doc_id": table.column("doc_id").to_pandas(),
            "score": table.column("score").to_numpy(),
            "rank": table.column("rank").to_numpy(),
        }
    )
    if has_duplicates(run):
        return None
    return run


def has_duplicates(run: pd.DataFrame) -> bool:
    """True when a (query_id, doc_id) pair appears twice (integer codes sorted, no string sort; numpy 2.4's
    hash-based ``np.unique`` took ~20x longer on a million rows)."""
    if len(run) < 2:
        return False
    q, _ = pd.factorize(run["query_id"])
    d, docs = pd.factorize(run["doc_id"])
    keys = np.sort(q.astype(np.int64) * max(len(docs), 1) + d)
    return bool((keys[1:] == keys[:-1]).any())


def _fail_at(mask: pd.Series | np.ndarray, lineno: np.ndarray, values: pd.Series, problem: str, where: str) -> None:
    hits = np.flatnonzero(np.asarray(mask, dtype=bool))
    if hits.size:
        i = int(hits[0])
        raise InputError(f"{problem}, got {values.iloc[i]!r}", path=where, line=int(lineno[i]))
