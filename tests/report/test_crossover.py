"""The cross-over's word on a tuned Δ: the two shared settings' common verdict, and "depends on
the LR" where they disagree or do not both find a tuned *different* with its sign."""

from __future__ import annotations

import pandas as pd
import pytest

from ablate.report.crossover import DEPENDS, crossover_claim, crossover_word


def _rows(own: float, shared: list[tuple[float, str]]) -> pd.DataFrame:
    """A variant's cross-over rows: each at its own (the summary's), then both shared."""
    rows = [{"setting": "each at its own", "pairs": 7, "diff": own, "verdict": "the summary's"}]
    for k, (diff, word) in enumerate(shared):
        rows.append({"setting": f"both at {k}'s", "pairs": 7, "diff": diff, "verdict": word})
    return pd.DataFrame(rows)


def test_a_tuned_difference_both_shared_settings_find_holds() -> None:
    rows = _rows(-0.03, [(-0.025, "different"), (-0.02, "different")])
    assert crossover_claim(rows, "different", -0.03) == "different"


@pytest.mark.parametrize(
    "shared",
    [
        [(+0.0022, "equivalent"), (-0.0031, "equivalent")],  # ln_vs_rms's, regenerated
        [(-0.02, "different"), (-0.004, "inconclusive")],
        [(+0.02, "different"), (+0.025, "different")],  # found, with the other sign
    ],
)
def test_a_tuned_difference_the_shared_settings_do_not_find_depends_on_the_lr(
    shared: list[tuple[float, str]],
) -> None:
    rows = _rows(-0.0215, shared)
    assert crossover_claim(rows, "different", -0.0215) == DEPENDS


def test_without_a_tuned_difference_the_shared_settings_speak() -> None:
    rows = _rows(+0.001, [(+0.0022, "equivalent"), (-0.0031, "equivalent")])
    assert crossover_claim(rows, "equivalent", 0.001) == crossover_word(rows) == "equivalent"
    split = _rows(+0.001, [(-0.03, "different"), (+0.001, "equivalent")])
    assert crossover_claim(split, "equivalent", 0.001) == DEPENDS  # they disagree
    short = _rows(-0.03, [(-0.03, "different")])
    assert crossover_claim(short, "different", -0.03) == "no verdict"  # one shared setting
