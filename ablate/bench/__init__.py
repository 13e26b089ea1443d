"""Benchmarks and checks: scripts that print measured figures (never timed assertions).

``speed`` (``ablate bench``: kernels, steps, memory), ``runner``, ``probes``, ``search``,
``workers`` and ``grid_check``, each runnable as ``python -m ablate.bench.<name>``.
"""
