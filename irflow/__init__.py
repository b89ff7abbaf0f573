"""irflow: a workflow-orchestrated evaluation pipeline for retrieval systems.

``irflow.flows`` holds the Prefect flows and the CLI (composition only), ``irflow.tasks`` one module
per stage (pure functions), ``irflow.datasets`` the BEIR catalog and the demo dataset (package data),
``irflow.deployments`` the Prefect deployments. See the README for the command line.
"""

from irflow.tasks.core.config import irflow_version

__version__ = irflow_version()
__all__ = ["__version__"]
