"""Package data: the BEIR catalog (``beir.json``) and the embedded demo dataset ``techdocs/``.

Read through :func:`irflow.tasks.core.config.package_data`, never through ``__file__`` arithmetic. (This
is ``irflow.datasets``; it cannot shadow Hugging Face's top-level ``datasets`` package.)
"""
