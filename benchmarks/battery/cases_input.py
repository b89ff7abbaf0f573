"""The battery's cheap cases: each fails in the argument checks or a reader, within seconds. Credentials in
URLs, unbounded and non-regular files wherever a file is taken, and bad input to rag, abtest, interleave,
power and ``--human``."""

from __future__ import annotations

import json

from battery.harness import FIFO, FOLDER, Case, Sparse

CREDS = "http://u:S3cret@127.0.0.1:9"
ANSWER = json.dumps({"query_id": "td-q-001", "answer": "x", "contexts": [{"doc_id": "td-doc-0001"}]}) + "\n"
GOOD = {"a.jsonl": ANSWER}
NO_JUDGE = "openai:m@http://127.0.0.1:9/v1"  # never called: the checks fail first
AB_HEAD = "user_id,arm,query,clicked\n"
GIB = 1 << 30


def _credentials() -> list[Case]:
    refused = "a URL must not carry credentials"
    out = ("--output", "{tmp}/out")
    rag = ("rag", "--answers", "{in}/a.jsonl", "--no-track")
    return [
        Case(
            "credentials: http: system URL",
            "credentials",
            ("run", "--system", "bm25", "--system", f"http:{CREDS}/search", *out),
            ("http: system", refused, "auth_env"),
        ),
        Case(
            "credentials: dense base_url",
            "credentials",
            ("run", "--system", f"dense(base_url={CREDS}/v1):openai:te3", *out),
            ("base_url", refused, "OPENAI_API_KEY"),
        ),
        Case(
            "credentials: OPENAI_BASE_URL of an API embedder",
            "credentials",
            ("run", "--system", "dense:openai:text-embedding-3-small", *out),
            ("OPENAI_BASE_URL", refused),
            env={"OPENAI_BASE_URL": f"{CREDS}/v1"},
        ),
        Case(
            "credentials: rag --generator",
            "credentials",
            ("rag", "--system", "bm25", "--generator", f"openai:m@{CREDS}/v1", *out),
            ("--generator", refused, "OPENAI_API_KEY"),
        ),
        Case(
            "credentials: rag --judge",
            "credentials",
            (*rag, "--judge", f"openai:m@{CREDS}/v1", *out),
            ("--judge", refused),
            files=GOOD,
        ),
        Case(
            "credentials: rag --judge anthropic base_url",
            "credentials",
            (*rag, "--judge", f"anthropic(base_url={CREDS}):claude", *out),
            ("--judge (base_url)", refused),
            files=GOOD,
        ),
        Case(
            "credentials: rag --embedder",
            "credentials",
            (*rag, "--judge", NO_JUDGE, "--embedder", "openai:text-embedding-3-small", *out),
            ("OPENAI_BASE_URL", refused),
            env={"OPENAI_BASE_URL": f"{CREDS}/v1"},
            files=GOOD,
        ),
        Case(
            "credentials: annotate --judge",
            "credentials",
            ("annotate", "--dataset", "techdocs", "--judge", f"openai:m@{CREDS}/v1", *out),
            ("--judge", refused),
        ),
        Case(
            "credentials: synthesize --llm gemini",
            "credentials",
            (
                "datasets",
                "synthesize",
                "--dataset",
                "techdocs",
                "--name",
                "synth",
                "--llm",
                f"gemini(base_url={CREDS}):g",
            ),
            ("--llm (base_url)", refused),
        ),
        Case(
            "credentials: MLFLOW_TRACKING_URI echoed as Basic",
            "credentials",
            ("run", "--system", "bm25", *out),
            ("HTTP 500",),
            expect=None,
            env={"MLFLOW_TRACKING_URI": "http://u:S3cret@{host}"},
            server="echo",
            timeout=120,
        ),
    ]


def _files() -> list[Case]:
    answers = ("rag", "--no-track", "--output", "{tmp}/out", "--answers")
    run = ("run", "--no-track", "--output", "{tmp}/out", "--system")
    human = ("rag", "--answers", "{in}/a.jsonl", "--judge", NO_JUDGE, "--no-track", "--human")
    qrels = ("datasets", "import", "--format", "trec-qrels", "--dataset", "techdocs", "--name", "battery")
    kinds = {
        "/dev/zero": ("/dev/zero", "a character device"),
        "FIFO": ("{in}/pipe", "a FIFO"),
        "folder": ("{in}/folder", "a directory|a folder"),
    }
    where = {
        "rag --answers": lambda p: answers + (p,),
        "run: spec": lambda p: run + (f"run:{p}",),
        "rag --human": lambda p: human + (p,),
        "run --human": lambda p: ("run", "--system", "bm25", "--no-track", "--human", p),
        "abtest LOG": lambda p: ("abtest", p, "--unit", "user_id", "--no-track"),
        "interleave --log": lambda p: ("interleave", "--log", p, "--no-track"),
        "datasets import": lambda p: (*qrels, p),
    }
    cases = []
    for place, args in where.items():
        for kind, (path, said) in kinds.items():
            files = {**GOOD, "pipe": FIFO, "folder": FOLDER}
            cases.append(
                Case(f"non-regular: {kind} as {place}", "non-regular file", args(path), (path, said), files=files)
            )
    huge_json = Sparse(2 * GIB, b'{"q1": {"d1": 1.0, "pad": "')  # past IRFLOW_MAX_RUN_JSON_BYTES, no disk spent
    cases += [
        Case(
            "unbounded: a 1 GiB line as --answers",
            "unbounded file",
            (*answers, "{in}/line.jsonl"),
            ("{in}/line.jsonl:1", "line too long", "IRFLOW_MAX_LINE_BYTES"),
            files={"line.jsonl": Sparse(GIB)},
            rss_cap_mb=1024,
        ),
        Case(
            "unbounded: 20 MB of blank lines as --answers",
            "unbounded file",
            (*answers, "{in}/blank.jsonl"),
            ("{in}/blank.jsonl",),
            files={"blank.jsonl": (b"\n", 20_000_000)},
            rss_cap_mb=1024,
        ),
        Case(
            "unbounded: 20 MB of blank lines as a run",
            "unbounded file",
            (*run, "run:{in}/blank.trec"),
            ("{in}/blank.trec", "holds no hits"),
            files={"blank.trec": (b"\n", 20_000_000)},
            rss_cap_mb=1024,
        ),
        Case(
            "unbounded: a 2 GiB JSON run",
            "unbounded file",
            (*run, "run:{in}/huge.json"),
            ("{in}/huge.json", "IRFLOW_MAX_RUN_JSON_BYTES"),
            files={"huge.json": huge_json},
            rss_cap_mb=1024,
        ),
        Case(
            "unbounded: a run line of 1 GiB",
            "unbounded file",
            (*run, "run:{in}/line.trec"),
            ("{in}/line.trec", "IRFLOW_MAX_RUN_LINE"),
            files={"line.trec": Sparse(GIB)},
            rss_cap_mb=1024,
        ),
    ]
    return cases


def _bad_input() -> list[Case]:
    rag = ("rag", "--no-track", "--output", "{tmp}/out", "--answers", "{in}/a.jsonl")
    abtest = ("abtest", "{in}/log.csv", "--unit", "user_id", "--no-track", "--output", "{tmp}/out")
    answer = json.loads(ANSWER)
    return [
        Case(
            "bad input: answers without an answer field",
            "bad input",
            rag,
            ("{in}/a.jsonl", "answer"),
            files={"a.jsonl": json.dumps({"query_id": "td-q-001", "contexts": []}) + "\n"},
        ),
        Case(
            "bad input: answers with contexts of the wrong type",
            "bad input",
            rag,
            ("{in}/a.jsonl", "contexts"),
            files={"a.jsonl": json.dumps({**answer, "contexts": 7}) + "\n"},
        ),
        Case(
            "bad input: answers to unknown query ids",
            "bad input",
            rag,
            ("{in}/a.jsonl", "zz-404"),
            files={"a.jsonl": json.dumps({**answer, "query_id": "zz-404"}) + "\n"},
        ),
        Case(
            "bad input: answers file not JSON",
            "bad input",
            rag,
            ("{in}/a.jsonl:1",),
            files={"a.jsonl": "query_id,answer\ntd-q-001,x\n"},
        ),
        Case(
            "bad input: A/B log without the unit column",
            "bad input",
            abtest,
            ("{in}/log.csv", "user_id"),
            files={"log.csv": "arm,query,clicked\nA,q,1\nB,q,0\n"},
        ),
        Case(
            "bad input: A/B log with a non-numeric click",
            "bad input",
            abtest,
            ("{in}/log.csv", "clicked"),
            files={"log.csv": AB_HEAD + "u1,A,q,1\nu2,B,q,maybe\n"},
        ),
        Case(
            "bad input: A/B log of three arms",
            "bad input",
            abtest,
            ("{in}/log.csv", "arm"),
            files={"log.csv": AB_HEAD + "u1,A,q,1\nu2,B,q,0\nu3,C,q,1\n"},
        ),
        Case(
            "bad input: interleaving log without team",
            "bad input",
            ("interleave", "--log", "{in}/log.csv", "--no-track"),
            ("{in}/log.csv", "team"),
            files={"log.csv": "impression,position,clicked\n1,1,0\n"},
        ),
        Case("bad input: power on a missing folder", "bad input", ("power", "{in}/nothing"), ("{in}/nothing",)),
        Case(
            "bad input: power on a damaged per_query.parquet",
            "bad input",
            ("power", "{in}/result"),
            ("per_query.parquet",),
            files={"result": FOLDER, "result/per_query.parquet": "not parquet", "result/metrics.json": "{}"},
        ),
        Case(
            "bad input: rag --human without the metric column",
            "bad input",
            (*rag, "--judge", NO_JUDGE, "--human", "{in}/h.csv"),
            ("{in}/h.csv", "metric"),
            files={**GOOD, "h.csv": "query_id,value\ntd-q-001,1\n"},
        ),
        Case(
            "bad input: rag --human of unknown queries",
            "bad input",
            (*rag, "--judge", NO_JUDGE, "--human", "{in}/h.csv"),
            ("{in}/h.csv", "query ids"),
            files={**GOOD, "h.csv": "query_id,metric,value\nzz-1,faithfulness,1\nzz-2,faithfulness,0\n"},
        ),
        Case(
            "bad input: run --human of unknown queries",
            "bad input",
            ("run", "--system", "bm25", "--no-track", "--human", "{in}/h.qrels", "--output", "{tmp}/out"),
            ("{in}/h.qrels",),
            files={"h.qrels": "zz-1 0 td-doc-0001 1\nzz-2 0 td-doc-0002 0\n"},
            timeout=120,
        ),
    ]


def cases() -> list[Case]:
    return [*_credentials(), *_files(), *_bad_input()]
