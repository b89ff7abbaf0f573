"""Helpers the tests of several stages share, importable as ``support.*`` (``tests/`` is on ``sys.path``:
pytest puts the folder of the root ``conftest.py`` there; child processes get it on ``PYTHONPATH``).

``services`` is the loopback fake-service base (a free port on 127.0.0.1, a request log, a bearer check, JSON
helpers, bounded start and stop, in a thread or a child process) and its chat subclass; ``fake_chat`` (the
pairwise judge, in-process), ``synth_chat``, ``rag_chat``, ``ragas_judge``, ``embeddings``, ``search`` and
``vector_db`` are the services built on it. ``cli`` runs the ``irflow`` command; ``toy``, ``scifact``,
``abtest``, ``clicks``, ``judges``, ``folders``, ``stores`` and ``chroma`` make data, folders and servers.
"""
