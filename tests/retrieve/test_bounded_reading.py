"""Rankings from elsewhere are read within bounds (issue 23): a gzip bomb, ``/dev/zero``, a FIFO, an endless
line, a query with too many hits, a service that sends 500,000 hits for k = 10.

The memory cases run in a child process under ``RLIMIT_AS`` = 2 GiB: reading everything, as before, dies
there (or is killed by the kernel); a bounded reader fails with its named error (exit 2, as the CLI) or,
for the service, keeps ``depth`` hits per query.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import sys
import zlib
from pathlib import Path

import pytest
from support.limited import GIB, in_child, peak_bytes
from support.toy import tiny_dataset

from irflow.tasks.core.schema import InputError
from irflow.tasks.retrieve import read_run, retrieve
from irflow.tasks.systems.specs import parse_system


def gzip_bomb(path: Path, byte: bytes, gib: int) -> Path:
    """A gzip file of ``gib`` GiB of ``byte``, a few MB on disk, written without the expanded data: one
    fully flushed deflate block of 16 MiB repeated (the CRC is left 0: a bounded reader never reaches it)."""
    chunk = byte * (16 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    count = gib * GIB // len(chunk)
    with path.open("wb") as fh:
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
        for _ in range(count):
            fh.write(block)
        fh.write(zlib.compressobj(9, zlib.DEFLATED, -15).flush())
        fh.write(struct.pack("<II", 0, (count * len(chunk)) & 0xFFFFFFFF))
    return path


@pytest.mark.parametrize(("byte", "what"), [(b"\n", "newlines"), (b"\0", "zeros")])
def test_a_gzip_bomb_fails_fast_with_a_named_error_within_2_gib(tmp_path: Path, byte: bytes, what: str) -> None:
    bomb = gzip_bomb(tmp_path / f"{what}.trec.gz", byte, 6)
    assert bomb.stat().st_size < 16 << 20  # 6 GiB of content in a few MB
    done = in_child(f"from irflow.tasks.retrieve import read_run; read_run({str(bomb)!r})")
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"irflow: error: {bomb}" in done.stderr
    expected = "IRFLOW_MAX_EXTRACT_RATIO" if what == "newlines" else "IRFLOW_MAX_RUN_LINE"
    assert expected in done.stderr, done.stderr[-2000:]
    assert peak_bytes(done) < 2 * GIB


def test_only_regular_files_are_read_as_runs(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo), str(tmp_path)):
        with pytest.raises(InputError, match="not a regular file") as info:
            read_run(path)
        assert str(info.value).startswith(path)
        with pytest.raises(InputError, match="not a regular file"):
            parse_system(f"run:{path}")  # naming the system hashes the file: that must not hang either
    done = in_child("from irflow.tasks.systems.specs import parse_system; parse_system('run:/dev/zero')", timeout=60)
    assert done.returncode == 2 and "/dev/zero: a character device, not a regular file" in done.stderr


def test_lines_bytes_and_hits_per_query_are_capped_naming_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 d1 1 2 t\n\nq1 Q0 d2 2 1 t\n" + "q1 Q0 d3 3 0.5 t" + " " * 3000 + "\n")
    monkeypatch.setenv("IRFLOW_MAX_RUN_LINE", "1K")
    with pytest.raises(InputError, match=r"run.trec:4: a line longer than 1,024 bytes \(IRFLOW_MAX_RUN_LINE\)"):
        read_run(path)
    monkeypatch.setenv("IRFLOW_MAX_RUN_LINE", "1M")
    monkeypatch.setenv("IRFLOW_MAX_RUN_HITS", "2")
    with pytest.raises(InputError, match=r"run.trec:4: query 'q1' has more than 2 hits \(IRFLOW_MAX_RUN_HITS\)"):
        read_run(path)
    json_run = tmp_path / "run.json"
    json_run.write_text('{"q1": {"d1": 3, "d2": 2, "d3": 1}}')
    with pytest.raises(InputError, match=r'field \["q1"\]: query .q1. has more than 2 hits'):
        read_run(json_run)
    monkeypatch.setenv("IRFLOW_MAX_RUN_HITS", "3")
    assert len(read_run(path).run) == 3
    monkeypatch.setenv("IRFLOW_MAX_RUN_BYTES", "100")
    with pytest.raises(InputError, match=r"has 3,0\d\d bytes: more than 100 bytes \(IRFLOW_MAX_RUN_BYTES; raise it"):
        read_run(path)
    monkeypatch.setenv("IRFLOW_MAX_RUN_BYTES", "lots")
    with pytest.raises(InputError, match="IRFLOW_MAX_RUN_BYTES='lots': expected a positive number"):
        read_run(path)


def test_a_gzip_run_of_several_members_reads_whole_and_a_cut_one_fails(tmp_path: Path) -> None:
    two = tmp_path / "two.trec.gz"
    two.write_bytes(gzip.compress(b"q1 Q0 d1 1 2 t\n") + gzip.compress(b"q1 Q0 d2 2 1 t\n"))
    loaded = read_run(two)
    assert loaded.compressed and loaded.run["doc_id"].tolist() == ["d1", "d2"]
    cut = tmp_path / "cut.trec.gz"
    cut.write_bytes(gzip.compress(b"q1 Q0 d1 1 2 t\n" * 1000)[:-12])
    with pytest.raises(InputError, match="damaged gzip data"):
        read_run(cut)


SERVICE = """
import http.server, json, threading
from support.toy import tiny_dataset
from irflow.tasks.retrieve import retrieve

hits = [{"id": doc, "score": 1e6 - i} for i, doc in enumerate(["d1", "d3"])]
hits += [{"id": f"x{i:06d}", "score": 500000.0 - i} for i in range(500_000 - len(hits))]
BODY = json.dumps({"hits": hits}).encode()
del hits

class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}/search"
result = retrieve(tiny_dataset(), f"http(load=none,concurrency=1):{url}", depth=10)
server.shutdown()
sizes = result.run.groupby("query_id").size().to_dict()
top = result.run["doc_id"].iloc[:3].tolist()
print("RESULT", json.dumps({"sizes": sizes, "unknown": result.info["unknown_document_hits"], "top": top}))
"""


def test_a_service_answering_500_000_hits_keeps_depth_per_query_within_2_gib() -> None:
    done = in_child(SERVICE)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT", 1)[1])
    assert result["sizes"] == {"q1": 10, "q2": 10, "q3": 10}
    assert result["unknown"] == 3 * 8  # 8 of each 10 are not in the corpus: kept at their rank, counted
    assert result["top"] == ["d1", "d3", "x000000"]
    assert peak_bytes(done) < 2 * GIB


def test_a_python_retriever_returning_a_long_generator_keeps_depth(tmp_path: Path) -> None:
    module = tmp_path / "endless_retriever.py"
    module.write_text(
        "class Endless:\n"
        "    def search(self, queries, k):\n"
        "        return [((f'x{i}', -float(i)) if i else ('d1', 1.0) for i in range(200_000)) for _ in queries]\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        result = retrieve(tiny_dataset(), "python:endless_retriever:Endless", depth=5)
    finally:
        sys.path.remove(str(tmp_path))
    assert result.run.groupby("query_id").size().tolist() == [5, 5, 5]
    assert result.run[result.run["query_id"] == "q1"]["doc_id"].tolist() == ["d1", "x1", "x2", "x3", "x4"]
    assert result.info["unknown_document_hits"] == 12


def test_blank_lines_cost_nothing_whatever_their_number(tmp_path: Path) -> None:
    """20 MB of newlines (once 3.9 GB and 100 s), the same gzipped, and a run among them: memory follows the hits."""
    blank = tmp_path / "blank.trec"
    blank.write_bytes(b"\n" * 20_000_000)
    packed = tmp_path / "blank.trec.gz"
    packed.write_bytes(gzip.compress(b"\n" * 60_000_000, 1))  # under the gzip-bomb floor: read to its end
    among = tmp_path / "among.trec"
    among.write_bytes(b"\n" * 20_000_000 + b"q1 Q0 d1 1 2 t\n" + b" \t\n" * 3_000_000 + b"q1 Q0 d2 2 1 t\n")
    for path in (blank, packed):
        done = in_child(f"from irflow.tasks.retrieve import read_run; read_run({str(path)!r})", timeout=120)
        assert done.returncode == 2 and f"{path}: the run file holds no hits (trec)" in done.stderr, done.stderr
        assert peak_bytes(done) < 768 << 20  # the imports (pandas, pyarrow) and a 16 MiB segment
    code = f"from irflow.tasks.retrieve import read_run; print(read_run({str(among)!r}).run['doc_id'].tolist())"
    done = in_child(code, timeout=120)
    assert done.returncode == 0 and "['d1', 'd2']" in done.stdout, done.stderr
    assert peak_bytes(done) < 768 << 20


def test_a_run_parsed_in_segments_names_the_files_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments cut at lines' ends (here every ~64 bytes) give the rows of one read, and errors name the
    file's own line (not the segment's), for a bad field, a document twice and a query with too many hits."""
    from irflow.tasks.retrieve import runfile

    lines = [f"q{i % 3} Q0 d{i} {i} {100 - i} t" if i % 4 else "" for i in range(1, 60)]
    path = tmp_path / "run.trec"
    path.write_text("\n".join(lines) + "\n")
    whole = read_run(path).run
    monkeypatch.setattr(runfile, "_SEGMENT", 64)
    assert read_run(path).run.equals(whole)
    path.write_text("\n".join([*lines[:40], "q1 Q0 dx 1 high t", *lines[40:]]) + "\n")
    with pytest.raises(InputError, match=r"run.trec:41: score must be a finite number, got 'high'"):
        read_run(path)
    path.write_text("\n".join([*lines[:40], lines[1], *lines[40:]]) + "\n")  # lines[1]: q2 d2, again on line 41
    with pytest.raises(InputError, match=r"run.trec:41: document appears twice for its query, got 'd2'"):
        read_run(path)
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("IRFLOW_MAX_RUN_HITS", "10")
    hits = [n for n, line in enumerate(lines, 1) if line.startswith("q1 ")]
    with pytest.raises(InputError, match=rf"run.trec:{hits[10]}: query 'q1' has more than 10 hits"):
        read_run(path)


def test_a_json_run_past_its_own_limit_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JSON run is parsed whole (~12 times its size in memory): a plain file past IRFLOW_MAX_RUN_JSON_BYTES
    is refused by its size, unread; a gzip one as its content streams past it."""
    run = {f"q{q}": {f"d{d}": float(d) for d in range(100)} for q in range(20)}
    text = json.dumps(run).encode()
    plain, packed = tmp_path / "run.json", tmp_path / "run.json.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    assert len(read_run(plain).run) == len(read_run(packed).run) == 2000
    monkeypatch.setenv("IRFLOW_MAX_RUN_JSON_BYTES", "16K")
    with pytest.raises(
        InputError, match=r"the JSON run has [\d,]+ bytes: more than 16,384 bytes \(IRFLOW_MAX_RUN_JSON"
    ):
        read_run(plain)
    with pytest.raises(InputError, match=r"a JSON run's content: more than 16,384 bytes \(IRFLOW_MAX_RUN_JSON_BYTES"):
        read_run(packed)


def test_a_parquet_run_is_read_by_row_group_and_a_dictionary_bomb_is_refused_from_its_metadata(
    tmp_path: Path,
) -> None:
    """A Parquet run is read from the file, its three columns only, a row group at a time. A file of a few hundred
    KB holding 20 million dictionary-encoded rows (320 MB or more decoded) is refused from its metadata under
    ``IRFLOW_MAX_RUN_BYTES=256M``, in a child limited to 2 GiB of address space, before a row is decoded."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = tmp_path / "run.parquet"
    table = pa.table(
        {
            "query_id": [f"q{i // 10}" for i in range(100)],
            "doc_id": [f"d{i}" for i in range(100)],
            "score": [float(100 - i) for i in range(100)],
            "rank": list(range(100)),
        }
    )
    pq.write_table(table, good, row_group_size=7)
    assert pq.ParquetFile(good).metadata.num_row_groups > 10
    loaded = read_run(good)
    assert (
        loaded.format == "parquet"
        and len(loaded.run) == 100
        and list(loaded.run.columns)
        == [
            "query_id",
            "doc_id",
            "score",
        ]
    )

    rows = 20_000_000
    zeros = pa.array(np.zeros(rows, dtype=np.int32))
    bomb = tmp_path / "bomb.parquet"
    pq.write_table(
        pa.table(
            {
                "query_id": pa.DictionaryArray.from_arrays(zeros, pa.array(["q" * 1000])),
                "doc_id": pa.DictionaryArray.from_arrays(zeros, pa.array(["d" * 1000])),
                "score": pa.DictionaryArray.from_arrays(zeros, pa.array([1.0])),
            }
        ),
        bomb,
        row_group_size=rows,
    )
    del zeros
    assert bomb.stat().st_size < 4 << 20
    done = in_child(
        f"from irflow.tasks.retrieve import read_run; read_run({str(bomb)!r})",
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "IRFLOW_MAX_RUN_BYTES": "256M"},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"irflow: error: {bomb}: the Parquet run holds 20,000,000 rows" in done.stderr
    assert "more than 268,435,456 bytes (IRFLOW_MAX_RUN_BYTES; raise it to allow more)" in done.stderr
    assert peak_bytes(done) < GIB


def test_a_parquet_run_whose_few_rows_decode_to_gigabytes_is_refused_before_they_are_decoded(tmp_path: Path) -> None:
    """2 million rows (32 MB by the row count) whose ids all point at one 100 KB dictionary value: 400 GB once
    decoded. The ids are counted dictionary-encoded, so the read fails within 2 GiB of address space."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 2_000_000
    zeros = pa.array(np.zeros(rows, dtype=np.int32))
    bomb = tmp_path / "bomb.parquet"
    pq.write_table(
        pa.table(
            {
                "query_id": pa.DictionaryArray.from_arrays(zeros, pa.array(["q" * 100_000])),
                "doc_id": pa.DictionaryArray.from_arrays(zeros, pa.array(["d" * 100_000])),
                "score": pa.array(np.ones(rows)),
            }
        ),
        bomb,
    )
    done = in_child(f"from irflow.tasks.retrieve import read_run; read_run({str(bomb)!r})")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "the Parquet run's decoded columns (row group 1 of" in done.stderr
    assert "(IRFLOW_MAX_RUN_BYTES; raise it to allow more)" in done.stderr
    assert peak_bytes(done) < GIB
