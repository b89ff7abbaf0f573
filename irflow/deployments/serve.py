"""Register irflow's Prefect deployments and execute their runs: ``python -m irflow.deployments.serve``.

* ``nightly/nightly`` — the ``nightly`` flow over ``deployments/nightly.yaml`` on a cron schedule
  (``--cron``, default 02:00; ``--timezone`` or ``IRFLOW_NIGHTLY_TIMEZONE``, default UTC);
* ``evaluate/adhoc`` — one dataset × systems from the Prefect UI form (user parameters only, described;
  the dataset a choice of the catalog's);
* ``suite/adhoc`` — an experiment (datasets × systems) from the UI form or a YAML ``config`` path.

Needs ``PREFECT_API_URL`` pointing at a Prefect server (``prefect server start``). Each run executes
in a subprocess of this one, with its environment (``MLFLOW_TRACKING_URI``, ``IRFLOW_CACHE_DIR``).
Stop it with Ctrl-C (SIGINT); the schedule stays active, so the server keeps creating nightly runs
and they execute when serve is running again.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import zoneinfo
from typing import Any

DEFAULT_CRON = "0 2 * * *"


def build_deployments(cron: str = DEFAULT_CRON, timezone: str = "UTC", config: str | None = None) -> list[Any]:
    """The three deployments (not yet registered)."""
    from prefect.schedules import Cron
    from prefect.types.entrypoint import EntrypointType

    from irflow.flows import adhoc
    from irflow.flows.suite import DEFAULT_NIGHTLY_CONFIG, nightly_flow, suite_flow

    zoneinfo.ZoneInfo(timezone)  # an unknown zone fails here, not at 2 am
    module = EntrypointType.MODULE_PATH  # runs import the installed package: any working directory works
    return [
        nightly_flow.to_deployment(
            name="nightly",
            schedules=[Cron(cron, timezone=timezone)],
            parameters={"config": config or DEFAULT_NIGHTLY_CONFIG},
            tags=["irflow", "nightly"],
            description="Nightly suite with regression alerts",
            entrypoint_type=module,
        ),
        adhoc.adhoc_evaluate.to_deployment(
            name="adhoc",
            tags=["irflow", "adhoc"],
            entrypoint_type=module,
            description="Evaluate systems on one dataset; parameters from the UI",
        ),
        suite_flow.to_deployment(
            name="adhoc",
            tags=["irflow", "adhoc"],
            entrypoint_type=module,
            description="Evaluate an experiment (datasets × systems); parameters from the UI",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m irflow.deployments.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cron",
        default=os.environ.get("IRFLOW_NIGHTLY_CRON", DEFAULT_CRON),
        help=f"nightly schedule (default {DEFAULT_CRON!r} or IRFLOW_NIGHTLY_CRON)",
    )
    parser.add_argument(
        "--timezone",
        default=os.environ.get("IRFLOW_NIGHTLY_TIMEZONE", "UTC"),
        help="IANA timezone of the schedule, e.g. Europe/Berlin (default UTC or IRFLOW_NIGHTLY_TIMEZONE)",
    )
    parser.add_argument("--config", help="experiment YAML of the nightly run (default deployments/nightly.yaml)")
    parser.add_argument("--limit", type=int, default=1, help="flow runs executed at once (default 1)")
    args = parser.parse_args(argv)
    if not os.environ.get("PREFECT_API_URL"):
        print(
            "irflow.deployments.serve: set PREFECT_API_URL to a Prefect server, e.g. http://127.0.0.1:4200/api "
            "(start one with: prefect server start --host 127.0.0.1 --port 4200)",
            file=sys.stderr,
        )
        return 2
    try:
        deployments = build_deployments(args.cron, args.timezone, args.config)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError) as err:
        print(f"irflow.deployments.serve: {err}", file=sys.stderr)
        return 2
    from prefect import serve

    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C stops it even when started in the background
    serve(*deployments, pause_on_shutdown=False, limit=args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
