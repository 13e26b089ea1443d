"""What a scaling study's design cannot show, stated from its own table: how many decades of
parameters its sizes span, whether a fixed token budget ties training length to size, and
whether each size's max stable LR rests on one seed's bracket.

These are limits of the design, not of the fits: a fit's interval says how well a line
describes these points, not whether the points measure what a scaling law needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

COMPUTE_OPTIMAL = 20  # tokens per parameter, Hoffmann et al. (2022)


def span_line(table: pd.DataFrame) -> str:
    """How many sizes over how many decades of parameters."""
    params = table.groupby("size", sort=False)["n_params"].first()
    decades = math.log10(params.max() / params.min())
    line = f"{len(params)} sizes over {decades:.2f} decades of parameters"
    if decades >= 1:
        return line + "."
    return f"{line}: under one decade, so an exponent here describes these sizes, not a law."


@dataclass(frozen=True)
class FixedBudget:
    """One token budget for every size: its ``tokens``, the ``smallest`` and ``largest``
    sizes' names and tokens per parameter (``small_ratio``, ``large_ratio``), and the tokens
    the largest would train at :data:`COMPUTE_OPTIMAL` tokens per parameter (``needed``)."""

    tokens: int
    smallest: str
    largest: str
    small_ratio: float
    large_ratio: float
    needed: float


def fixed_budget(table: pd.DataFrame, manifest: dict[str, Any]) -> FixedBudget | None:
    """The :class:`FixedBudget` of a study with one token budget (None when the budget is per
    parameter)."""
    if manifest.get("tokens_per_parameter"):
        return None
    sizes = table.groupby("size", sort=False)[["n_params", "tokens"]].first()
    small, large = sizes["n_params"].idxmin(), sizes["n_params"].idxmax()
    per_param = sizes["tokens"] / sizes["n_params"]
    needed = COMPUTE_OPTIMAL * float(sizes.loc[large, "n_params"])
    tokens = int(sizes["tokens"].iloc[0])
    return FixedBudget(tokens, small, large, per_param[small], per_param[large], needed)


def budget_line(table: pd.DataFrame, manifest: dict[str, Any]) -> str | None:
    """With one token budget for every size, how far tokens per parameter fall from the
    smallest size to the largest (None when the budget is per parameter)."""
    found = fixed_budget(table, manifest)
    if found is None:
        return None
    large = found.largest
    return (
        f"Every size trains on the same {found.tokens:,} tokens: {found.small_ratio:.2f} per "
        f"parameter at {found.smallest}, {found.large_ratio:.2f} at {large}. The larger models "
        "are trained less per parameter, so a trend with size here mixes size with training "
        "length. `scale.tokens_per_parameter` gives each size a budget in proportion; at "
        f"{COMPUTE_OPTIMAL} tokens per parameter (Hoffmann et al., 2022) {large} alone would "
        f"train {found.needed:,.0f} tokens, {found.needed / found.tokens:.0f}× this budget."
    )


def seeds_line(table: pd.DataFrame) -> str | None:
    """When every size's max stable LR rests on one bracketed seed, what that leaves out
    (None when some size has two or more, or none were bracketed)."""
    seeds = table["boundary_seeds"].to_numpy(dtype=float)
    seeds = seeds[np.isfinite(seeds) & (seeds > 0)]
    if len(seeds) == 0 or seeds.max() > 1:
        return None
    return (
        "Each size's max stable LR is one seed's bracket: its interval is the lattice's "
        "resolution, not the spread between seeds, so the per-size ratios, the max-stable-LR "
        "exponents and any extrapolation of them describe that seed."
    )


def limits_lines(table: pd.DataFrame, manifest: dict[str, Any]) -> list[str]:
    """The section's Markdown: a heading and one bullet per limit."""
    found = [span_line(table), budget_line(table, manifest), seeds_line(table)]
    return ["## What this design cannot show", "", *(f"- {line}" for line in found if line), ""]
