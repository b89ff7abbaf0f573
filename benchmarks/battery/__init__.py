"""The safety battery's parts (``benchmarks/safety_battery.py`` runs them): the harness that runs one case of
the real ``irflow`` command in a memory-limited child and checks what it left (:mod:`battery.harness`), a
hostile HTTP service (:mod:`battery.hostile`) and the cases (:mod:`battery.cases_input`,
:mod:`battery.cases_services`). Only the standard library: the battery's own memory stays small, so a child's
peak is its own."""
