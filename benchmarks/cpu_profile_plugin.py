"""A pytest plugin for ``benchmarks/profile_tests.py``: the CPU seconds of every test (setup, call and teardown),
its own process's and its children's (servers, subprocesses, Chromium), written as JSON lines to the file
``IRFLOW_TEST_PROFILE`` names (one line per test; xdist workers append to the same file), with the worker that
ran it and when it ended (epoch seconds): the profile reads from them when each worker went idle."""

from __future__ import annotations

import atexit
import json
import os
import resource
import time
from collections.abc import Iterator
from typing import Any

import pytest


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    cpu, wall = _cpu(), time.perf_counter()
    yield
    path = os.environ.get("IRFLOW_TEST_PROFILE")
    if not path:
        return
    row = {
        "test": item.nodeid,
        "cpu_s": round(_cpu() - cpu, 3),
        "wall_s": round(time.perf_counter() - wall, 3),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "end": round(time.time(), 3),
    }
    with open(path, "a", encoding="utf-8") as fh:  # one short line per write: appends from workers stay whole
        fh.write(json.dumps(row) + "\n")


def _event(name: str) -> None:
    """When this worker reached ``name`` (its session's end, its interpreter's exit), for the profile's tail."""
    path = os.environ.get("IRFLOW_TEST_PROFILE")
    if path:
        row = {"event": name, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "end": round(time.time(), 3)}
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


atexit.register(_event, "exit")  # registered first, so it runs after every other exit handler


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish() -> None:
    _event("sessionfinish")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure() -> None:
    _event("unconfigure")
