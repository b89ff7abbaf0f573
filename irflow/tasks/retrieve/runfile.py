"""``run:<path>``: a ranking produced elsewhere, read from a file and evaluated like irflow's own runs.

Formats, told apart by content (gzip-compressed or not): a TREC run (``qid Q0 docid rank score tag``),
ranx / ir_measures JSON (``{"qid": {"docid": score}}``) or a Parquet table (``query_id``, ``doc_id``,
``score``). The file's own ranks are ignored, as trec_eval ignores them: hits are ordered by
score, ties by doc id descending (``order_run``). The system's identity is the file's sha256, so
the spec names it (``run(sha256=...):/abs/path``) and a file changed since fails instead of being
evaluated under an old name.

A run is evaluated as trec_eval reads it: whole unless a depth is given (``default_depth``), documents
missing from the corpus kept at their rank (``ranking.against_dataset``). Only a regular file is read,
a MiB at a time, within ``run_limits`` (content bytes, gzip expansion, TREC line length, hits per query; a
JSON run, parsed whole, within its own smaller limit). A Parquet file is read from the file itself, its three
columns a row group at a time, after its metadata was checked against the content limit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from irflow.tasks.core.runs import CONTENT_LINE, has_duplicates, order_run, parse_trec
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.retrieve.base import Searcher
from irflow.tasks.retrieve.ranking import against_dataset
from irflow.tasks.retrieve.runfile_bytes import RunContent, RunLimits, run_limits
from irflow.tasks.retrieve.runfile_formats import parse_json_run, parse_parquet_run
from irflow.tasks.systems.external import RunSpec

_SEGMENT = 16 << 20  # a TREC run is parsed this many bytes of whole lines at a time


@dataclass(frozen=True)
class RunFile:
    """A run file's rows (``query_id``, ``doc_id``, ``score``; file order), format and content hash."""

    run: pd.DataFrame
    format: str  # trec | json | parquet
    sha256: str
    compressed: bool


def read_run(path: str | os.PathLike[str], limits: RunLimits | None = None) -> RunFile:
    """Read a run file in any supported format; bad content raises InputError naming file, line or field.

    Only a regular file is read, in bounded steps: no more than ``limits`` allow is decompressed or
    kept, so a gzip bomb, ``/dev/zero`` or a FIFO fails at once with the limit named. A TREC run is parsed
    as it is read, 16 MiB of whole lines at a time, so its memory follows its hits, not its lines.
    """
    where = os.fspath(path)
    limits = limits or run_limits()
    with RunContent(where, limits) as content:
        fmt, pieces = content.format()
        if fmt == "trec":
            run = _trec(pieces, where, content.skipped_lines + 1)
        elif fmt == "parquet" and not content.compressed:  # hashed and checked as it streams; read from the file
            for _ in pieces:
                pass
            content.fh.seek(0)
            run = parse_parquet_run(content.fh, where, limits)
        else:
            data = bytearray()
            for piece in pieces:
                data += piece
            if fmt == "parquet":
                import io

                run = parse_parquet_run(io.BytesIO(data), where, limits)
            else:
                run = parse_json_run(bytes(data), where)
            del data
        digest, compressed = content.digest.hexdigest(), content.compressed
    if run.empty:
        raise InputError(f"the run file holds no hits ({fmt})", path=where)
    if fmt == "trec" and has_duplicates(run):
        row = int(run.duplicated(["query_id", "doc_id"]).to_numpy().argmax())
        raise InputError(
            f"document appears twice for its query, got {run['doc_id'].iloc[row]!r}",
            path=where,
            line=_line_of_row(where, limits, row),
        )
    _check_hits(run, fmt, where, limits)
    return RunFile(run, fmt, digest, compressed)


def _segments(pieces: Iterator[bytes], first_line: int) -> Iterator[tuple[int, int, bytes]]:
    """``(first line, first byte, text)``: the content in runs of whole lines of about 16 MiB (the last may
    lack its newline)."""
    buffer = bytearray()
    line, byte = first_line, 0
    for piece in pieces:
        buffer += piece
        if len(buffer) < _SEGMENT:
            continue
        cut = buffer.rfind(b"\n") + 1
        if cut:
            segment = bytes(buffer[:cut])
            del buffer[:cut]
            yield line, byte, segment
            line, byte = line + segment.count(b"\n"), byte + cut
    if buffer:
        yield line, byte, bytes(buffer)


def _trec(pieces: Iterator[bytes], where: str, first_line: int) -> pd.DataFrame:
    """A TREC run parsed segment by segment (a segment of blank lines costs its bytes and nothing else)."""
    parts = [
        parse_trec(segment, where, line, byte).drop(columns="rank")
        for line, byte, segment in _segments(pieces, first_line)
    ]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({"query_id": [], "doc_id": [], "score": []})
    return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def _line_of_row(where: str, limits: RunLimits, row: int) -> int:
    """The 1-based line of hit ``row`` (0-based) of a TREC run, whose blank lines hold no hit: the file is
    read again (only an error needs it), a segment at a time."""
    seen = -1
    with RunContent(where, limits) as content:
        _, pieces = content.format()
        for line, _, segment in _segments(pieces, content.skipped_lines + 1):
            text = segment.decode("utf-8", errors="replace")
            for match in CONTENT_LINE.finditer(text):
                seen += 1
                if seen == row:
                    return line + text.count("\n", 0, match.start())
    raise AssertionError(f"{where}: hit {row} not found again")


def _check_hits(run: pd.DataFrame, fmt: str, where: str, limits: RunLimits) -> None:
    """A query with more than ``limits.hits`` hits fails, naming it and where its hit ``limit + 1`` is."""
    limit = limits.hits
    counts = run["query_id"].value_counts(sort=False)
    if counts.empty or int(counts.max()) <= limit:
        return
    qid = next(str(q) for q, n in counts.items() if n > limit)
    row = int(np.flatnonzero(run["query_id"].to_numpy() == qid)[limit])
    problem = f"query {qid!r} has more than {limit:,} hits (IRFLOW_MAX_RUN_HITS)"
    if fmt == "trec":
        raise InputError(problem, path=where, line=_line_of_row(where, limits, row))
    if fmt == "json":
        raise InputError(f'field ["{qid}"]: {problem}', path=where)
    raise InputError(f"row {row + 1}: {problem}", path=where)


class RunFileSearcher(Searcher[RunSpec]):
    """The file's hits for the queries asked, cut to the depth (by default none: trec_eval reads every line);
    read and checked once."""

    def __init__(self, dataset: Dataset, spec: RunSpec) -> None:
        super().__init__(dataset, spec)
        start = time.perf_counter()
        loaded = read_run(spec.path)
        if not loaded.sha256.startswith(spec.sha256):
            raise InputError(
                f"the file changed since this system was named (sha256 {loaded.sha256[: len(spec.sha256)]}, the "
                f"spec says {spec.sha256}): evaluate it as a new system, run:{spec.path}",
                path=spec.path,
            )
        kept, counts = against_dataset(dataset, loaded.run, spec.path)
        self.run = order_run(kept)
        self.info.update(
            run_path=spec.path,
            run_sha256=loaded.sha256,
            run_format=loaded.format + (".gz" if loaded.compressed else ""),
            run_hits=len(loaded.run),
            run_depth=int(self.run["rank"].max()),
            run_load_seconds=time.perf_counter() - start,
            **counts,
        )

    def default_depth(self) -> int:
        return int(self.info["run_depth"])

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        run = self.run[self.run["rank"] <= depth]
        if queries is not self.dataset.queries:
            run = run[run["query_id"].isin(queries["query_id"].astype(str))]
        return run.reset_index(drop=True)


__all__ = ["RunFile", "RunFileSearcher", "RunLimits", "read_run", "run_limits"]
