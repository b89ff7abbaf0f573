"""``python -m irflow``: the ``irflow`` command, for environments whose scripts folder is not on PATH."""

from irflow.cli.main import entry_point

entry_point()
