"""The battery's cases with a hostile service or a process to stop: an ``http:`` system beside bm25 and the
OpenAI-compatible LLM paths (``rag --generator``, ``rag --judge``) against a service that echoes the key
(``Bearer`` and ``Basic``), never ends its body, trickles it, or sends 200 MB; ``irflow run`` stopped with
SIGTERM mid-run; a ``python:`` plugin that crashes beside bm25."""

from __future__ import annotations

import json

from battery.cases_input import ANSWER
from battery.harness import SECRET, Case

FAST = {"IRFLOW_MAX_RESPONSE_BYTES": "8M"}
SLOW = {"IRFLOW_RESPONSE_SECONDS": "2"}
HUGE = {"IRFLOW_MAX_RESPONSE_BYTES": "64M"}
BYTES, SECONDS = "IRFLOW_MAX_RESPONSE_BYTES", "IRFLOW_RESPONSE_SECONDS"
PLUGIN = "import os\n\n\nclass Crashes:\n    def search(self, queries, k):\n        os._exit(3)\n"
QUICK = ("--metric", "nDCG@10", "--latency-runs", "0", "--no-track", "--output", "{tmp}/out")
HOSTILE = {
    "echoing the Bearer key": ("echo", {}, ("401",)),
    "never-ending body": ("endless", FAST, (BYTES, "/search")),
    "trickling body": ("trickle", SLOW, (SECONDS, "/search")),
    "200 MB reply": ("huge", HUGE, (BYTES,)),
}


def _http_systems() -> list[Case]:
    cases = []
    for what, (mode, env, names) in HOSTILE.items():
        system = "http(load=none,retries=0,auth_env=BATTERY_KEY):{url}/search"
        cases.append(
            Case(
                f"hostile http: system, {what}",
                "hostile service",
                ("run", "--system", "bm25", "--system", system, *QUICK),
                names,
                env=env,
                server=mode,
                kept="bm25",
                timeout=180,
            )
        )
    basic = "http(load=none,retries=0,auth_env=BATTERY_BASIC,auth_scheme=Basic):{url}/search"
    cases.append(
        Case(
            "hostile http: system, echoing the Basic credential",
            "hostile service",
            ("run", "--system", "bm25", "--system", basic, *QUICK),
            ("401",),
            server="echo",
            kept="bm25",
            timeout=180,
        )
    )
    return cases


def _llm_paths() -> list[Case]:
    generator = ("rag", "--system", "bm25", "--depth", "2", "--no-track", "--output", "{tmp}/out", "--generator")
    judge = (
        "rag",
        "--answers",
        "{in}/a.jsonl",
        "--metric",
        "faithfulness",
        "--no-track",
        "--output",
        "{tmp}/out",
        "--judge",
    )
    llm = "openai(max_retries=0):m@{url}/v1"
    cases = []
    for what, (mode, env, names) in HOSTILE.items():
        named = tuple(n for n in names if n != "/search")
        cases.append(
            Case(
                f"hostile rag --generator, {what}",
                "hostile service",
                (*generator, llm),
                named,
                expect=None,
                env=env,
                server=mode,
                timeout=240,
            )
        )
        cases.append(
            Case(
                f"hostile rag --judge, {what}",
                "hostile service",
                (*judge, llm),
                named,
                expect=None,
                env=env,
                server=mode,
                files={"a.jsonl": ANSWER},
                timeout=180,
            )
        )
    cases.append(
        Case(
            "hostile rag --generator, an answer quoting the key",
            "hostile service",
            (*generator, llm),
            (),
            expect=0,
            server="echo200",
            timeout=240,
        )
    )
    return cases


def _processes() -> list[Case]:
    plugin = "python:crashing_plugin:Crashes"
    return [
        Case(
            "process: SIGTERM mid-run",
            "process",
            ("run", "--system", "bm25", "--latency-runs", "0", "--output", "{tmp}/out"),
            ("irflow: terminated",),
            expect=143,
            terminate=True,
            timeout=180,
        ),
        Case(
            "process: a crashing python: plugin beside bm25",
            "process",
            ("run", "--system", "bm25", "--system", plugin, *QUICK),
            (plugin, "exit code 3"),
            env={"PYTHONPATH": "{in}:{pythonpath}"},
            files={"crashing_plugin.py": PLUGIN},
            kept="bm25",
            timeout=180,
        ),
    ]


def cases() -> list[Case]:
    assert SECRET not in json.dumps([PLUGIN, ANSWER])  # the inputs plant no secret themselves
    return [*_http_systems(), *_llm_paths(), *_processes()]
