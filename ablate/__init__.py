"""ablate: matched-seed normalization ablations on a small decoder-only transformer.

The command line is :mod:`ablate.cli`; for notebooks, :func:`load_results` reads an
experiment's stored runs into pandas and :func:`load_answer` its analysis plan's verdicts, the
report's Answer as typed objects (both imported on first use, so ``ablate`` stays light).
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_answer", "load_results"]


def __getattr__(name: str) -> Any:
    if name == "load_results":
        from ablate.core.store import load_results

        return load_results
    if name == "load_answer":
        from ablate.report.estimands import load_answer

        return load_answer
    raise AttributeError(f"module 'ablate' has no attribute {name!r}")
