"""The ``irflow`` command: the parser assembled from one module per command group, and the exit codes.

Imports stay lazy (each command imports its stage when it runs) so ``irflow --help`` answers at once."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from typing import Any

from irflow.cli.abtest import add_abtest_parser
from irflow.cli.agreement import add_agreement_parser
from irflow.cli.annotate import add_annotate_parser
from irflow.cli.datasets import add_datasets_parser
from irflow.cli.drift import add_drift_parser
from irflow.cli.interleave import add_interleave_parser
from irflow.cli.options import warn_deprecated
from irflow.cli.orchestration import add_orchestration_parsers
from irflow.cli.pool import add_pool_parser
from irflow.cli.power import add_power_parser
from irflow.cli.rag import add_rag_parser
from irflow.cli.report import add_report_parser
from irflow.cli.run import add_run_parser
from irflow.cli.terminal import configure_logging
from irflow.tasks.core.stop import Terminated, exit_on_stop, stop_requested, terminate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="irflow",
        description="Evaluate retrieval systems: ingest, embed, index, retrieve, measure, compare, report.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    add_datasets_parser(sub)
    add_run_parser(sub)
    add_report_parser(sub)
    add_orchestration_parsers(sub)
    add_annotate_parser(sub)
    add_pool_parser(sub)
    add_agreement_parser(sub)
    add_drift_parser(sub)
    add_abtest_parser(sub)
    add_interleave_parser(sub)
    add_power_parser(sub)
    add_rag_parser(sub)
    return parser


QUIET_SERVICES = {  # no network here and no telemetry anywhere; a loaded machine needs a longer start-up
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
}


def _prefect_api() -> Any:
    """Start a temporary Prefect server now, so it is up by the time the flow starts (see flows.prefect_api)."""
    from irflow.flows.prefect_api import prefect_api

    return prefect_api()


def _owned_flow_runs() -> Any:
    """Flow runs left RUNNING by a killed irflow marked CRASHED, and this command's tagged with its process."""
    from irflow.flows.stages import owned_flow_runs

    return owned_flow_runs()


def main(argv: list[str] | None = None) -> int:
    import contextlib

    for key, value in QUIET_SERVICES.items():
        os.environ.setdefault(key, value)
    args = build_parser().parse_args(argv)
    if getattr(args, "deprecated_command", None):
        warn_deprecated(*args.deprecated_command)
    configure_logging(args.verbose)
    from irflow.tasks.core.redact import redact
    from irflow.tasks.core.schema import IrflowError

    flows = getattr(args, "runs_flow", False) and not getattr(args, "dry_run", False)
    try:
        if getattr(args, "check", None) is not None:
            args.check(args)  # every argument, file, name and spec: before Prefect, a model or a corpus
        with (
            _prefect_api() if flows else contextlib.nullcontext(),
            _owned_flow_runs() if flows else contextlib.nullcontext(),
        ):
            return int(args.func(args) or 0)
    except IrflowError as err:
        print(f"irflow: error: {redact(str(err))}", file=sys.stderr)  # the last line of defence for secrets
        return 2
    except Terminated:
        print("irflow: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("irflow: interrupted", file=sys.stderr)
        return 130
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        print(redact(f"irflow: error: could not write {err.filename or 'a file'}: {err.strerror}"), file=sys.stderr)
        return 2
    except Exception:
        if stop_requested():  # a library wrapped the signal's exception (pydantic-core does): still SIGTERM
            print("irflow: terminated", file=sys.stderr)
            return 128 + signal.SIGTERM
        raise


def entry_point() -> None:
    """The ``irflow`` console command: :func:`main`, then a quick exit.

    ``gc.freeze()`` moves every object alive at the end into the permanent generation, so the
    interpreter's final garbage collections skip them: with torch, pandas, MLflow and Prefect loaded,
    that cuts ~1.5 s of tear-down to ~0.2 s. atexit handlers (Prefect's log and event workers,
    MLflow, logging) still run, and results are already written and closed by then.
    """
    import gc

    # SIGTERM (a scheduler stopping the job, `kill PID`) unwinds like Ctrl-C, so the temporary Prefect
    # server and the Dask cluster are stopped and no half-written result is left behind.
    signal.signal(signal.SIGTERM, terminate)
    exit_on_stop()  # a thread that cannot stop (a model still loading) does not keep a stopped command alive
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry_point()
