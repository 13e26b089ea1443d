"""Benchmarks and checks: scripts that print measured figures (never timed assertions).

``speed`` (``ablate bench``: kernels, steps, memory), ``runner``, ``probes``, ``search``,
``workers``, ``grid_check`` and ``tokens``, each runnable as ``python -m ablate.bench.<name>``.
"""
