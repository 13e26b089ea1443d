"""The scaling report's limits of its design: span, a budget tied to size, one-seed boundaries."""

from __future__ import annotations

import pandas as pd
import pytest

from ablate.report.scaling_limits import fixed_budget, limits_lines, seeds_line


def _table(params: list[float], tokens: list[int], seeds: int) -> pd.DataFrame:
    """Two variants at each size, each with ``seeds`` bracketed boundary seeds."""
    return pd.DataFrame(
        [
            {"size": f"s{i}", "variant": v, "n_params": n, "tokens": t, "boundary_seeds": seeds}
            for i, (n, t) in enumerate(zip(params, tokens, strict=True))
            for v in ("layernorm", "rmsnorm")
        ]
    )


def test_a_fixed_budget_under_a_decade_on_one_seed_says_all_three() -> None:
    table = _table([220_544, 478_272, 1_841_280], [262_144] * 3, seeds=1)
    heading, _, span, budget, seeds, _ = limits_lines(table, {})
    assert heading == "## What this design cannot show"
    assert span == (
        "- 3 sizes over 0.92 decades of parameters: under one decade, so an exponent here "
        "describes these sizes, not a law."
    )
    found = fixed_budget(table, {})
    assert found is not None and (found.tokens, found.smallest, found.largest) == (
        262_144,
        "s0",
        "s2",
    )
    assert (found.small_ratio, found.large_ratio) == pytest.approx(
        (262_144 / 220_544, 262_144 / 1_841_280)
    )
    assert found.needed == 20 * 1_841_280 and budget.startswith("- ")  # 20 tokens per param
    assert seeds.startswith("- Each size's max stable LR is one seed's bracket")


def test_a_budget_per_parameter_over_a_decade_on_three_seeds_states_only_the_span() -> None:
    params = [50_000, 400_000, 2_000_000]
    table = _table(params, [20 * n for n in params], seeds=3)
    lines = limits_lines(table, {"tokens_per_parameter": 20})
    assert lines == [
        "## What this design cannot show",
        "",
        "- 3 sizes over 1.60 decades of parameters.",
        "",
    ]


def test_sizes_without_a_bracketed_seed_say_nothing_of_seeds() -> None:
    table = _table([1e5, 1e6], [262_144] * 2, seeds=0)
    assert seeds_line(table) is None
    assert len(limits_lines(table, {})) == 5  # heading, span and budget: no line on seeds
