"""``python -m irflow.cli``: the ``irflow`` command."""

from irflow.cli.main import entry_point

entry_point()
