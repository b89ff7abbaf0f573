"""``python -m irflow``: the ``irflow`` command, for environments whose scripts folder is not on PATH."""

from irflow.flows.cli import entry_point

entry_point()
