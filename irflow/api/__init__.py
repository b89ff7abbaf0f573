"""irflow's public API: one call from a notebook, a typed result; Prefect and MLflow only when asked."""
